"""Placement online: the Alibaba openb pod list replayed with its creation and deletion times on the 1,213-node
openb cluster, through the job engine (``simulate --placement-policy``), under several placement policies.

    .venv/bin/python bench/placement_online.py [--placements binpack,fgd,default] [--speedups 1,2000]
        [--queue-policy default] [--pods default] [--json OUT]

Per run: GPU allocation (time-averaged share of the cluster's GPUs held, over the window in which pods arrive,
and its peak), queueing delay (mean, p99, over all pods), pods never placed (refused: they could never fit) and
pods placed only after their recorded lifetime had passed (in the trace they would have been gone by then).
``--arrival-speedup`` K divides every creation time by K (the same pods, a load K times higher); K = 1 is the
trace as recorded, in which the cluster is almost idle (at most ~53 GPUs of 6,212 asked at once).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.alibaba_online import load_openb_jobs
from gpucluster.simulator.traces.openb import openb_cluster

REPO = Path(__file__).resolve().parents[1]
TRACES = REPO.parent / "shared" / "traces" / "alibaba-gpu-v2023"


def measure(sim: Simulation, first: float, last: float) -> dict[str, Any]:
    """Allocation over ``[first, last]`` (the arrival window) from the run's series, and the per-pod figures."""
    pts = sim.series
    t = np.asarray([p.time for p in pts] + [last], np.float64)
    busy = np.asarray([p.busy_gpus for p in pts], np.float64)
    lo, hi = np.clip(t[:-1], first, last), np.clip(t[1:], first, last)
    held = float((busy * np.maximum(hi - lo, 0.0)).sum())
    gpus = max(sim.usable_gpus, 1)
    jobs = list(sim.jobs.values())
    queue = np.asarray([j.queue_s for j in jobs if j.first_start_s >= 0], np.float64)
    late = sum(1 for j in jobs if j.first_start_s >= 0 and j.first_start_s - j.spec.submit_s >= j.spec.duration_s)
    return {
        "pods": len(jobs),
        "allocation_pct": round(100 * held / (gpus * max(last - first, 1e-9)), 2),
        "peak_allocation_pct": round(100 * float(busy.max(initial=0.0)) / gpus, 2),
        "avg_queue_s": round(float(queue.mean()) if queue.size else 0.0, 1),
        "p99_queue_s": round(float(np.percentile(queue, 99)) if queue.size else 0.0, 1),
        "never_placed": sum(1 for j in jobs if j.first_start_s < 0),
        "placed_after_their_lifetime": late,
        "preemptions": sim.totals.preemptions,
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--placements", default="binpack,fgd,default")
    ap.add_argument("--speedups", default="1,2000")
    ap.add_argument("--queue-policy", default="default")
    ap.add_argument("--pods", default="default", help="pod list: openb_pod_list_<NAME>.csv")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    nodes = TRACES / "openb_node_list_gpu_node.csv"
    pods = TRACES / f"openb_pod_list_{args.pods}.csv"
    if not nodes.is_file() or not pods.is_file():
        print(f"trace not found: {pods}")
        return 0
    cluster = openb_cluster(nodes)
    jobs = load_openb_jobs(pods)
    print(f"{len(jobs)} GPU pods, {len(cluster.nodes)} nodes, {sum(len(n.devices) for n in cluster.nodes)} GPUs; "
          f"queue policy {args.queue_policy}", flush=True)
    out: list[dict[str, Any]] = []
    for k in (float(x) for x in args.speedups.split(",")):
        specs = [replace(j, submit_s=j.submit_s / k) for j in jobs]
        first, last = min(s.submit_s for s in specs), max(s.submit_s for s in specs)
        for placement in args.placements.split(","):
            started = time.perf_counter()
            sim = Simulation(cluster, args.queue_policy, placement_policy=placement)
            sim.submit_many(specs)
            sim.run()
            row = {"placement": placement, "speedup": k, **measure(sim, first, last),
                   "wall_s": round(time.perf_counter() - started, 1)}
            out.append(row)
            print("  ".join(f"{key}={val}" for key, val in row.items()), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
