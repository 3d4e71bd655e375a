"""Simulate the whole shared Philly-derived trace (Gavel's 13 VC files, 11,264 jobs) on the 500-GPU cluster
under each queue policy; print wall time and the headline metrics per policy.

    .venv/bin/python bench/simulate_philly.py [--policies fifo,sjf,tiresias,drf,offers,default] [--json OUT]
        [--placement NAME] [--jobs-out DIR]

``--jobs-out DIR`` writes ``DIR/<policy>.json`` with every job's first start, finish, preemptions and queue time,
so two versions of the code can be compared job by job (the refactor into ``gpucluster.jobs`` was checked so:
identical for all six policies).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.philly import load_philly
from gpucluster.spec import load_cluster

REPO = Path(__file__).resolve().parents[1]
TRACE = REPO.parent / "shared" / "traces" / "gavel-philly-derived" / "seed=0"
CLUSTER = REPO / "src" / "gpucluster" / "data" / "philly-500.yaml"
KEYS = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_utilization", "jain_fairness",
        "preemptions", "jobs_completed", "jobs_lost", "avg_placement_slowdown", "schedule_calls")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--policies", default="fifo,sjf,tiresias,drf,offers,default")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--placement", default=None, help="placement policy (default: the queue policy's own)")
    ap.add_argument("--jobs-out", type=Path, default=None, help="folder for per-job results")
    args = ap.parse_args()
    if not TRACE.is_dir():
        print(f"trace not found: {TRACE}")
        return 0
    t0 = time.perf_counter()
    jobs = load_philly(TRACE, limit=args.limit)
    cluster = load_cluster(CLUSTER)
    print(f"loaded {len(jobs)} jobs in {time.perf_counter() - t0:.2f} s; cluster {cluster.name} "
          f"({sum(len(n.devices) for n in cluster.nodes)} GPUs)")
    results = {}
    for name in args.policies.split(","):
        t = time.perf_counter()
        cpu = time.process_time()
        sim = Simulation(cluster, name, placement_policy=args.placement)
        sim.submit_many(jobs)
        sim.run()
        s = sim.summary()
        s["wall_s"] = round(time.perf_counter() - t, 2)
        s["cpu_s"] = round(time.process_time() - cpu, 2)
        results[name] = s
        if args.jobs_out is not None:
            args.jobs_out.mkdir(parents=True, exist_ok=True)
            per_job = {j.job_id: [j.first_start_s, j.finish_s, j.preemptions, j.queue_s] for j in sim.jobs.values()}
            (args.jobs_out / f"{name}.json").write_text(json.dumps(per_job))
        print(f"{name:9s} wall {s['wall_s']:7.1f} s  cpu {s['cpu_s']:7.1f} s  " + "  ".join(
            f"{k}={s[k]:.3f}" if isinstance(s[k], float) else f"{k}={s[k]}" for k in KEYS), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
