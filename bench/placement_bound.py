"""Upper bounds on GPU allocation at 130 % arrived on the Alibaba openb workloads, against FGD and ours.

    .venv/bin/python bench/placement_bound.py [--workloads default,cpu200,gpushare40,gpuspec25,multigpu20] \
        [--seeds 42] [--segments 40] [--no-two-class | --class-b CPU:MEM:MILLI,...] [--lp-time-limit S] [--json]

Per workload and seed: the FGD experiment's arrival order (1.3x inflation), FGD and stranding-fgd (= the
default, speed-fgd, on these pods) through the experiment's fast path, and two bounds solved with HiGHS
(``gpucluster.simulator.experiments.bound``; the module docstrings give the formulations and why each is valid):

* ``any placement``: the largest allocation of *any* subset of the arrived pods packed on the nodes (aggregated
  LP with dual-feasible-function cuts). It ignores the order and the experiment's rule that a pod that fits is
  placed, so it says what offline packing could do.
* ``must-place``: the largest allocation of a run that places every pod that fits when it arrives (the rule
  every policy of the FGD paper, and ours, follows), bounded through the first failure of the workload's key
  pods (its most common sharing shape of 500 milli or more: 810 milli on ``default``) and an LP per segment of
  the arrival order. Its rows use the order three ways: the pods the key shape covers are placed before the
  last key pod ahead of the failure, the pods that cover the key shape (nearly every whole-GPU pod) fail after
  it, and the failed key pod is never placed.

* ``two classes`` (default; ``--no-two-class`` skips it): the must-place bound over the first failures of two key
  classes at once (``class_bound``): A = the key shape above, B = ``--class-b`` (default: the three most common
  other one-GPU sharing shapes of 300 milli or more: the 11.9-core 470, the 8-core 470 and the 11.9-core 650 on
  ``default``), each forced before its own first failure, with its own blocking, covering and failed-pod rows;
  the LPs of A alone (their largest is ``must-place``) and B alone, then the pairs of segments in decreasing
  order of those optima until they fall below the best pair. Never looser than ``must-place``. One line per LP
  on stderr; ``--lp-time-limit`` gives an LP that runs longer a valid looser value.

Both must-place bounds add GPU-packing rows found from the binding LP's optimum (``bound.CONFIG_CUTS_DOC``: every
dual-feasible function on the workload's sharing sizes, not only the fixed family) and scan again, up to three
times; ``--config-cuts 0`` gives the bounds without them. ``--node-cuts`` adds node-packing rows in the same
refinement (``bound.NODE_CUTS_DOC``: one node's CPU, memory and GPUs together; off by default). ``--earliest N``
first proves, for the N shapes with the most GPU milli, the longest prefix of the shape's pods of which none can
fail in any must-place run, and forces those pods in every LP with the earlier pods of the shapes each proved pod
covers (``bound.EARLIEST_DOC``; off by default).

Each bound is the tightest of its scans (``bound.SCANS_DOC``: every scan's figure is a bound; a later scan whose
LP hit ``--lp-time-limit`` may fall back to a looser one): the JSON gives the scan (``bound_scan``, 0 the first)
and every scan's idle GPUs (``scan_idle_gpus``), the table the scan after the figure.

``gap closed`` = (ours - FGD) / (bound - FGD), on the two-class bound (the one-class one with ``--no-two-class``).
Idle GPUs = (capacity - allocation) / 1000. The traces are read from ``--traces`` (never copied).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.bound import MILLI, PodShape, allocation_bound, class_bound, must_place_bound
from gpucluster.simulator.experiments.fgd import arrival_order, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.traces.openb import load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
WORKLOADS = "default,cpu200,gpushare40,gpuspec25,multigpu20"


def key_shape(order: list[Any]) -> PodShape | None:
    """The most common one-GPU sharing shape of 500 milli or more (no model constraint)."""
    shapes = Counter((p.cpu_milli, p.memory_mib, 1, p.gpu_milli, ()) for p in order
                     if p.num_gpu == 1 and 500 <= p.gpu_milli < MILLI and not p.gpu_spec)
    return shapes.most_common(1)[0][0] if shapes else None


def class_b_shapes(order: list[Any], key: PodShape | None, spec: str) -> list[PodShape]:
    """``auto``: the three most common one-GPU sharing shapes of 300 milli or more other than ``key`` (on
    ``default``: the 11.9-core 470, the 8-core 470 and the 11.9-core 650); else the listed ``CPU:MEM:MILLI``
    one-GPU shapes (no model constraint)."""
    shapes = Counter((p.cpu_milli, p.memory_mib, 1, p.gpu_milli, ()) for p in order
                     if p.num_gpu == 1 and 300 <= p.gpu_milli < MILLI and not p.gpu_spec)
    if spec == "auto":
        return [s for s, _ in shapes.most_common() if s != key][:3]
    got: list[PodShape] = []
    for part in spec.split(","):
        cpu, mem, milli = (int(x) for x in part.split(":"))
        got.append((cpu, mem, 1, milli, ()))
    return got


def measure(traces: Path, workload: str, seed: int, segments: int, two_class: bool = False,
            class_b: str = "auto", lp_time_limit: float | None = None, config_cuts: int = 30,
            node_cuts: bool = False, earliest: int = 0) -> dict[str, Any]:
    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = load_pods(traces / f"openb_pod_list_{workload}.csv")
    tgt = target_workload(pods)
    capacity = sum(n.gpus for n in nodes) * MILLI
    order = arrival_order(pods, capacity, seed, 1.3)
    got: dict[str, Any] = {"workload": workload, "seed": seed, "pods": len(order)}
    for name, policy in (("fgd", PolicyName.FGD), ("ours", PolicyName.STRANDING_FGD)):
        log = run(nodes, order, policy, tgt, np.random.default_rng([seed, 1]), node_rank(seed, len(nodes)))
        got[f"{name}_idle_gpus"] = (capacity - int(log.used_milli[-1])) / MILLI
    t = time.perf_counter()
    anyp = allocation_bound(nodes, order)
    got["any_placement_idle_gpus"] = anyp.idle_gpus
    key = key_shape(order)
    got["key_shape"] = list(key) if key is not None else None
    bshapes = class_b_shapes(order, key, class_b) if two_class and key is not None else []
    t0 = time.perf_counter()

    def say(line: str) -> None:
        print(f"[{workload} {seed} {time.perf_counter() - t0:7.1f} s] {line}", file=sys.stderr, flush=True)

    if bshapes:
        got["class_b"] = [list(b) for b in bshapes]

        cb = class_bound(nodes, order, lambda s: s == key, lambda s: s in bshapes, segments, progress=say,
                         time_limit=lp_time_limit, config_cuts=config_cuts, node_cuts=node_cuts,
                         earliest=earliest)
        got["must_place_idle_gpus"] = (cb.capacity_milli - cb.one_class_a_milli) / MILLI
        got["class_b_alone_idle_gpus"] = (cb.capacity_milli - cb.one_class_b_milli) / MILLI
        got["two_class_idle_gpus"] = cb.idle_gpus
        got["bound_segments"] = [cb.segment_a, cb.segment_b]
        got["bound_scan"] = cb.scan
        got["scan_idle_gpus"] = [round((cb.capacity_milli - m) / MILLI, 2) for m in cb.scan_milli]
        got["pairs"] = cb.pairs_solved
        got["lps"] = cb.lps_solved + 1
    else:
        mp = must_place_bound(nodes, order, segments, (lambda s: s == key) if key is not None else None, say,
                              config_cuts=config_cuts, time_limit=lp_time_limit, node_cuts=node_cuts,
                              earliest=earliest)
        got["must_place_idle_gpus"] = mp.idle_gpus
        got["bound_segment"] = mp.segment
        got["bound_scan"] = mp.scan
        got["scan_idle_gpus"] = [round((mp.capacity_milli - m) / MILLI, 2) for m in mp.scan_milli]
        got["lps"] = mp.lps_solved + 1
    got["bound_s"] = round(time.perf_counter() - t, 1)
    got["node_cuts"] = node_cuts
    got["earliest"] = earliest
    fgd, ours = got["fgd_idle_gpus"], got["ours_idle_gpus"]
    bound = got.get("two_class_idle_gpus", got["must_place_idle_gpus"])
    got["gap_closed"] = (fgd - ours) / (fgd - bound) if fgd > bound else None
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workloads", default=WORKLOADS)
    ap.add_argument("--seeds", default="42", help="comma-separated seeds")
    ap.add_argument("--segments", type=int, default=40, help="segments of the arrival order (more: tighter)")
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--two-class", action=argparse.BooleanOptionalAction, default=True,
                    help="bound over a second key class's first failure too (default; never looser, and it gives the "
                    "one-class figure as well); --no-two-class: the one-class scan alone")
    ap.add_argument("--class-b", default="auto", help="class B shapes, CPU:MEM:MILLI[,...] (default: auto)")
    ap.add_argument("--lp-time-limit", type=float, default=None,
                    help="seconds per HiGHS try; an LP that runs longer gets a valid looser value")
    ap.add_argument("--config-cuts", type=int, default=30,
                    help="rounds of GPU-packing rows (bound.CONFIG_CUTS_DOC) per pass; 0: the DFF family's rows alone")
    ap.add_argument("--node-cuts", action=argparse.BooleanOptionalAction, default=False,
                    help="node-packing rows too (bound.NODE_CUTS_DOC; slower, no gain on default seed 42)")
    ap.add_argument("--earliest", type=int, default=0,
                    help="prove for that many shapes (most GPU milli first) a prefix of pods that no run can fail, "
                    "and force it in every LP (bound.EARLIEST_DOC; 0: off)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not (a.traces / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {a.traces} (--traces)")
    rows = []
    for w in a.workloads.split(","):
        for seed in (int(s) for s in a.seeds.split(",")):
            r = measure(a.traces, w, seed, a.segments, a.two_class, a.class_b, a.lp_time_limit, a.config_cuts,
                        a.node_cuts, a.earliest)
            rows.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| workload | seed | FGD idle GPUs | ours idle GPUs | bound, must-place | bound, two classes | "
          "bound, any placement | gap closed | LPs | bound s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        gap = f"{100 * r['gap_closed']:.0f} %" if r["gap_closed"] is not None else "-"
        scan = f" (scan {r['bound_scan']})"
        two = f"{r['two_class_idle_gpus']:.1f}{scan}" if "two_class_idle_gpus" in r else "-"
        one = f"{r['must_place_idle_gpus']:.1f}" + ("" if "two_class_idle_gpus" in r else scan)
        print(f"| {r['workload']} | {r['seed']} | {r['fgd_idle_gpus']:.1f} | {r['ours_idle_gpus']:.1f} | "
              f"{one} | {two} | {r['any_placement_idle_gpus']:.1f} | {gap} | {r['lps']} | "
              f"{r['bound_s']} |")


if __name__ == "__main__":
    main()
