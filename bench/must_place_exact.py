"""The exact must-place optimum on small samples of the Alibaba openb cluster, against FGD, ours and the LP bounds.

    nice -n 5 .venv/bin/python bench/must_place_exact.py --traces DIR [--workloads default,...] [--nodes 6] \
        [--instances 10] [--seeds 1000] [--time-limit 300] [--segments 40] [--no-two-class] [--json]

Per workload and instance (instance ``k`` uses seed ``S + k`` for every ``S`` of ``--seeds``):

* **nodes**: ``--nodes`` nodes drawn uniformly without replacement from the trace's GPU node list (so the model
  mix is the trace's in expectation; each instance reports its GPU count);
* **pods**: the FGD experiment's arrival order for that sample (``fgd.arrival_order``: the workload's pod list
  shuffled by the seed, then random pods dropped until the GPU milli asked is at most 130 % of the *sample's*
  capacity);
* **FGD** and **ours** (``stranding-fgd``, the default): the experiment's fast path (``fgd_engine.run``, as
  ``bench/placement_bound.py`` calls it, target workload = the whole workload's pod list), each run replayed by
  the independent checker (``mustplace.check_run_log``);
* **exact**: ``simulator.experiments.exact.must_place_optimum`` (a MILP solved by HiGHS; the module docstring
  gives every row and why it is exact), with ``--time-limit`` seconds; its run is replayed by the checker too.
  When the limit stops it, both its best run (incumbent) and its proven bound (dual bound) are reported, and
  the instance is left out of the means over solved instances;
* **bound**: the one-class must-place LP bound (``bound.must_place_bound``, key = the sample's most common
  one-GPU sharing shape of 500 milli or more, ``bench/placement_bound.py``'s ``key_shape``) and, unless
  ``--no-two-class``, the two-class bound (``bound.class_bound``, class B = ``class_b_shapes`` auto).

Idle GPUs = (sample capacity - allocation) / 1000. The summary gives, over the instances solved to optimality,
the mean of ours - exact, FGD - exact, exact - bound (both bounds), and on how many ours is optimal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.bound import MILLI, class_bound, must_place_bound
from gpucluster.simulator.experiments.exact import must_place_optimum
from gpucluster.simulator.experiments.fgd import arrival_order, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.experiments.mustplace import check_must_place, check_run_log
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

sys.path.insert(0, str(Path(__file__).resolve().parent))
from placement_bound import class_b_shapes, key_shape

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
WORKLOADS = "default,cpu200,gpushare40,gpuspec25,multigpu20"


def sample(all_nodes: list[OpenbNode], pods: list[OpenbPod], n: int, seed: int) -> tuple[list[OpenbNode],
                                                                                          list[OpenbPod]]:
    """``n`` nodes drawn without replacement (kept in trace order) and the experiment's arrival order for them."""
    rng = np.random.default_rng([seed, n])
    pick = sorted(int(k) for k in rng.choice(len(all_nodes), size=n, replace=False))
    nodes = [all_nodes[k] for k in pick]
    capacity = sum(x.gpus for x in nodes) * MILLI
    return nodes, arrival_order(pods, capacity, seed, 1.3)


def measure(nodes: list[OpenbNode], order: list[OpenbPod], pods: list[OpenbPod], seed: int, time_limit: float,
            segments: int, two_class: bool) -> dict[str, Any]:
    capacity = sum(x.gpus for x in nodes) * MILLI
    got: dict[str, Any] = {"seed": seed, "nodes": len(nodes), "gpus": capacity // MILLI, "pods": len(order),
                           "gpu_pods": sum(1 for p in order if p.num_gpu)}
    tgt = target_workload(pods)
    best_policy = 0
    for name, policy in (("fgd", PolicyName.FGD), ("ours", PolicyName.STRANDING_FGD)):
        log = run(nodes, order, policy, tgt, np.random.default_rng([seed, 1]), node_rank(seed, len(nodes)))
        bad = check_run_log(nodes, order, log)
        if bad is not None:
            raise SystemExit(f"{name} run violates must-place: {bad}")
        used = int(log.used_milli[-1]) if len(order) else 0
        best_policy = max(best_policy, used)
        got[f"{name}_idle_gpus"] = (capacity - used) / MILLI
    ex = must_place_optimum(nodes, order, time_limit=time_limit)
    if ex.allocated_milli is not None:
        bad = check_must_place(nodes, order, ex.node, ex.gpus)
        if bad is not None:
            raise SystemExit(f"the MILP's run violates must-place: {bad}")
    got["exact_optimal"] = ex.optimal
    got["exact_idle_gpus"] = ex.idle_gpus
    got["exact_idle_lower_gpus"] = ex.idle_lower_gpus
    got["milp_variables"] = ex.variables
    got["milp_rows"] = ex.constraints
    got["milp_s"] = round(ex.seconds, 1)
    if ex.allocated_milli is not None and ex.allocated_milli < best_policy and ex.optimal:
        raise SystemExit("the exact optimum is below a policy's run: solver bug")
    segs = max(1, min(segments, len(order)))
    key = key_shape(order)
    t = time.perf_counter()
    mp = must_place_bound(nodes, order, segs, (lambda s: s == key) if key is not None else None)
    got["bound_idle_gpus"] = mp.idle_gpus
    if two_class and key is not None:
        bshapes = class_b_shapes(order, key, "auto")
        if bshapes:
            cb = class_bound(nodes, order, lambda s: s == key, lambda s: s in bshapes, segs)
            got["two_class_idle_gpus"] = cb.idle_gpus
    got["bound_s"] = round(time.perf_counter() - t, 1)
    if ex.optimal:
        for b in ("bound_idle_gpus", "two_class_idle_gpus"):
            if b in got and got[b] > ex.idle_lower_gpus + 1e-6:
                raise SystemExit(f"{b} {got[b]} is above the exact optimum {ex.idle_gpus}: a bound is invalid")
    return got


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    solved = [r for r in rows if r["exact_optimal"]]
    out: dict[str, Any] = {"instances": len(rows), "solved": len(solved)}
    if not solved:
        return out

    def mean(f: str) -> float:
        return float(np.mean([r[f] - r["exact_idle_gpus"] for r in solved]))

    out["mean_gpus"] = float(np.mean([r["gpus"] for r in solved]))
    out["mean_ours_minus_exact"] = mean("ours_idle_gpus")
    out["mean_fgd_minus_exact"] = mean("fgd_idle_gpus")
    out["mean_exact_minus_bound"] = -mean("bound_idle_gpus")
    two = [r for r in solved if "two_class_idle_gpus" in r]
    if two:
        out["mean_exact_minus_two_class"] = float(np.mean([r["exact_idle_gpus"] - r["two_class_idle_gpus"]
                                                           for r in two]))
    out["ours_optimal"] = sum(1 for r in solved if r["ours_idle_gpus"] <= r["exact_idle_gpus"] + 1e-9)
    out["fgd_optimal"] = sum(1 for r in solved if r["fgd_idle_gpus"] <= r["exact_idle_gpus"] + 1e-9)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--workloads", default="default")
    ap.add_argument("--nodes", type=int, default=6, help="nodes per sample")
    ap.add_argument("--instances", type=int, default=10, help="samples per workload and base seed")
    ap.add_argument("--seeds", default="1000", help="comma-separated base seeds")
    ap.add_argument("--time-limit", type=float, default=300.0, help="seconds per MILP")
    ap.add_argument("--segments", type=int, default=40, help="segments of the must-place bounds")
    ap.add_argument("--two-class", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not (a.traces / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {a.traces} (--traces)")
    all_nodes = load_nodes(a.traces / "openb_node_list_gpu_node.csv")
    rows: list[dict[str, Any]] = []
    sums: dict[str, dict[str, Any]] = {}
    for w in a.workloads.split(","):
        pods = load_pods(a.traces / f"openb_pod_list_{w}.csv")
        mine = []
        for base in (int(s) for s in a.seeds.split(",")):
            for k in range(a.instances):
                nodes, order = sample(all_nodes, pods, a.nodes, base + k)
                r = {"workload": w, **measure(nodes, order, pods, base + k, a.time_limit, a.segments, a.two_class)}
                print(json.dumps(r), file=sys.stderr, flush=True)
                mine.append(r)
        rows += mine
        sums[w] = summary(mine)
        print(json.dumps({"workload": w, **sums[w]}), file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps({"rows": rows, "summary": sums}, indent=1))
        return

    def f(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}"

    print("| workload | seed | GPUs | pods | FGD | ours | exact (or [lower, best run]) | bound | two-class bound | "
          "MILP s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ex = f(r["exact_idle_gpus"]) if r["exact_optimal"] else (f"[{r['exact_idle_lower_gpus']:.2f}, "
                                                                 f"{f(r['exact_idle_gpus'])}]")
        print(f"| {r['workload']} | {r['seed']} | {r['gpus']} | {r['pods']} | {f(r['fgd_idle_gpus'])} | "
              f"{f(r['ours_idle_gpus'])} | {ex} | {f(r['bound_idle_gpus'])} | {f(r.get('two_class_idle_gpus'))} | "
              f"{r['milp_s']} |")
    for w, s in sums.items():
        print(f"{w}: {json.dumps(s)}")


if __name__ == "__main__":
    main()
