"""Ablation of the default placement policy (stranding-fgd) on the openb trace: which term does what.

    .venv/bin/python bench/placement_ablation.py [--workloads default,cpu200,...] [--seeds 42-45] [--jobs 2]

Runs each variant (FGD, the research knobs of ``fgd_engine.NewOptions``, stranding-fgd) on every workload and
seed through the experiment's fast path and prints a markdown table of mean allocation % at 100 % / 130 %
arrived. The table in ``docs/placement-policy.md`` comes from this script.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from gpucluster.simulator.experiments.fgd import parse_seeds, run_seed
from gpucluster.simulator.experiments.fgd_engine import NewOptions, PolicyName
from gpucluster.simulator.traces.openb import load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"

_PLAIN = {"continuous": False, "memory": False}
VARIANTS: dict[str, tuple[PolicyName, NewOptions | None]] = {
    "FGD": (PolicyName.FGD, None),
    "memory-aware target shapes": (PolicyName.NEW, NewOptions(continuous=False, memory=True)),
    "FGD score in steps of 2": (PolicyName.NEW, NewOptions(**_PLAIN, quantum=2.0)),
    "CPU stranding 1": (PolicyName.NEW, NewOptions(**_PLAIN, cpu_weight=1.0)),
    "CPU stranding 0.3": (PolicyName.NEW, NewOptions(**_PLAIN, cpu_weight=0.3)),
    "model scarcity 1": (PolicyName.NEW, NewOptions(**_PLAIN, scarcity_weight=1.0)),
    "stranding-fgd (CPU 1 + scarcity 1)": (PolicyName.STRANDING_FGD, None),
    "CPU 3 + scarcity 1": (PolicyName.NEW, NewOptions(**_PLAIN, cpu_weight=3.0, scarcity_weight=1.0)),
    "CPU 1 + scarcity 1, memory-aware target": (PolicyName.NEW, NewOptions(continuous=False, memory=True,
                                                                           cpu_weight=1.0, scarcity_weight=1.0)),
    "CPU 1 + scarcity 1, continuous score": (PolicyName.NEW, NewOptions(continuous=True, memory=False,
                                                                        cpu_weight=1.0, scarcity_weight=1.0)),
}


def _one(task: tuple[str, str, int]) -> tuple[str, str, float, float]:
    variant, workload, seed = task
    policy, options = VARIANTS[variant]
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / f"openb_pod_list_{workload}.csv")
    res = run_seed(nodes, pods, policy, seed, options=options)
    return variant, workload, res.curves["allocation"][100], res.curves["allocation"][130]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="default,cpu200,gpushare100,gpuspec25,multigpu40")
    ap.add_argument("--seeds", default="42-45")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    if not (TRACES / "openb_node_list_gpu_node.csv").is_file():
        print(f"trace not found: {TRACES}")
        return 0
    workloads = [w.strip() for w in args.workloads.split(",") if w.strip()]
    seeds = parse_seeds(args.seeds)
    tasks = [(v, w, s) for v in VARIANTS for w in workloads for s in seeds]
    t0 = time.perf_counter()
    got: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for v, w, a100, a130 in pool.map(_one, tasks):
            got.setdefault((v, w), []).append((a100, a130))
    print(f"{len(tasks)} runs in {time.perf_counter() - t0:.0f} s; seeds {seeds[0]}..{seeds[-1]}; "
          "mean allocation % @100 / @130")
    print("| variant | " + " | ".join(workloads) + " |")
    print("|---|" + "---|" * len(workloads))
    for v in VARIANTS:
        cells = []
        for w in workloads:
            vals = np.array(got[(v, w)])
            cells.append(f"{vals[:, 0].mean():.2f} / {vals[:, 1].mean():.2f}")
        print(f"| {v} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
