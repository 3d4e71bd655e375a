"""Does a synthetic trace reach its offered load? Offered load, utilisation and queueing over the arrival window.

Generates ``synthetic:N:PROFILE:LOAD`` for the cluster (the bundled reference cluster by default, 1,920 GPUs),
replays it under one policy and prints the figures over the arrival window (``simulator/load.py``) next to the
run's usual summary (utilisation over the makespan, mean queue time).

    .venv/bin/python bench/synthetic_load.py [--trace synthetic:2000:philly:1.5] [--cluster FILE]
                                             [--policy default] [--seed 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from gpucluster.simulator import load_trace
from gpucluster.simulator.load import window_figures
from gpucluster.simulator.runner import Simulation
from gpucluster.spec import load_cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default="synthetic:2000:philly:1.5")
    ap.add_argument("--cluster", type=Path, default=None)
    ap.add_argument("--policy", default="default")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cluster = load_cluster(args.cluster)
    jobs = load_trace(args.trace, cluster, args.seed)
    started = time.perf_counter()
    sim = Simulation(cluster, args.policy, seed=args.seed)
    sim.submit_many(jobs)
    sim.run()
    summary = sim.summary()
    gpus = sum(len(n.devices) for n in cluster.nodes)
    window = window_figures(jobs, gpus, [p.time for p in sim.series], [p.busy_gpus for p in sim.series],
                            [p.queued_jobs for p in sim.series])
    out = {"trace": args.trace, "cluster": cluster.name, "gpus": gpus, "policy": args.policy, **window,
           **{k: summary[k] for k in ("jobs_completed", "avg_queue_s", "avg_jct_s", "makespan_s", "gpu_utilization")},
           "wall_s": round(time.perf_counter() - started, 2)}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for k, v in out.items():
        print(f"{k:24s} {v:,.3f}" if isinstance(v, float) else f"{k:24s} {v}")


if __name__ == "__main__":
    main()
