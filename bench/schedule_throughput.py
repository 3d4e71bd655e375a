"""Scheduling decisions per second on the 1,213-node Alibaba GPU cluster with its default pod mix.

    .venv/bin/python bench/schedule_throughput.py [--policy binpack --policy spread ...] [--pods 10000]

Nodes: ``openb_node_list_gpu_node.csv``; pods: ``openb_pod_list_default.csv`` sampled with replacement (seed 42)
until ``--pods`` decisions are made. Each decision is one full cycle through the framework (PreFilter, Filter
over all nodes, Score, Reserve with device choice, assume and bind). Failed placements count as decisions.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from gpucluster.model import ClusterState
from gpucluster.scheduler import Scheduler, profile_for
from gpucluster.simulator.traces import openb

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def run(policy: str, n_pods: int) -> dict[str, float]:
    nodes = openb.to_node_specs(openb.load_nodes(TRACES / "openb_node_list_gpu_node.csv"))
    pods = openb.load_pods(TRACES / "openb_pod_list_default.csv")
    rng = np.random.default_rng(42)
    picks = rng.integers(0, len(pods), size=n_pods)
    workload = [openb.to_pod(pods[k], name=f"p{i:06d}") for i, k in enumerate(picks)]
    state = ClusterState(nodes)
    sched = Scheduler(state, profile_for(policy, 42))
    placed = 0
    t0 = time.perf_counter()
    for pod in workload:
        placed += sched.schedule_and_bind(pod).ok
    elapsed = time.perf_counter() - t0
    tot = state.totals()
    return {
        "decisions": n_pods,
        "placed": placed,
        "seconds": elapsed,
        "decisions_per_s": n_pods / elapsed,
        "gpu_allocated_pct": 100 * tot["core_used_milli"] / tot["core_milli"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", action="append", help="policy name (repeatable); default: binpack and spread")
    ap.add_argument("--pods", type=int, default=10000)
    args = ap.parse_args()
    if not TRACES.is_dir():
        raise SystemExit(f"traces not found at {TRACES}")
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    print(f"{'policy':<12} {'decisions':>9} {'placed':>7} {'seconds':>8} {'decisions/s':>12} {'GPU alloc %':>11}")
    for policy in args.policy or ["binpack", "spread"]:
        r = run(policy, args.pods)
        print(f"{policy:<12} {r['decisions']:>9} {r['placed']:>7} {r['seconds']:>8.2f} "
              f"{r['decisions_per_s']:>12.0f} {r['gpu_allocated_pct']:>11.2f}")


if __name__ == "__main__":
    main()
