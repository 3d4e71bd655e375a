"""What no online must-place policy can guarantee, on orders of the workload's own shapes (issue 30).

    nice -n 5 .venv/bin/python bench/online_adversary.py [--workload default] [--traces DIR] [--json]

``online.ADVERSARY_DOC`` proves it: on ``M`` roomy GPUs, after ``n <= M`` 320-milli pods, either ``M - ceil(n/3)``
whole-GPU pods or ``M`` 650-milli pods follow; a policy that has not seen which cannot be near the best run of
both. This bench prints, exactly over the integer states (``online.online_regret``):

* the smallest cluster on which the figure passes 10 GPUs (issue 30's aim), and ``n`` = the workload's own count
  of the 320-milli shape (78 on ``default``) on as many GPUs;
* with ``online.COMMON``'s shapes, the Alibaba cluster's roomy nodes for them (``online.roomy``: T4, G3, the
  64-core P100 and the A10 nodes) as the cluster, ``n = M``, and what the shipped policies lose there on both
  orders, each with the target workload it learns from the trace (the experiment's: the same for both orders,
  so each sees one prefix and ends it in one state), every run replayed by ``mustplace.check_run_log``;
* the same with ``online.LIGHT``'s 1-core shapes on the whole 1,213-node cluster (every node roomy for them).

A construction and its proof, not a policy and not a statement about the experiment's random orders.
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
from gpucluster.simulator.experiments.fgd import target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.experiments.mustplace import check_run_log
from gpucluster.simulator.experiments.online import COMMON, LIGHT, Shapes, adversary_orders, online_regret, roomy
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def _figures(gpus: int, small: int) -> dict[str, Any]:
    got = online_regret(gpus, small)
    return {"gpus": gpus, "small_pods": small, "best_a_idle_gpus": round(gpus - got.best_a_milli / 1000, 3),
            "best_b_idle_gpus": round(gpus - got.best_b_milli / 1000, 3), "deterministic_gpus": got.deterministic_gpus,
            "state_a0_a3": list(got.state), "p_a": round(got.p_a, 4), "randomized_gpus": round(got.randomized_gpus, 3)}


def _on(nodes: list[OpenbNode], pods: list[OpenbPod], shapes: Shapes, seed: int) -> dict[str, Any]:
    """The figures on ``nodes``' roomy nodes for ``shapes`` (``n = M``) and FGD's and ours' losses on both orders."""
    room = [n for n in nodes if roomy(n, shapes)]
    m = sum(n.gpus for n in room)
    out = _figures(m, m)
    out["roomy_nodes"] = len(room)
    tgt = target_workload(pods)
    got = online_regret(m, m)
    for policy in (PolicyName.FGD, PolicyName.STRANDING_FGD):
        losses = []
        for order, best in zip(adversary_orders(m, m, shapes), (got.best_a_milli, got.best_b_milli), strict=True):
            log = run(room, order, policy, tgt, np.random.default_rng(seed), node_rank(seed, len(room)))
            bad = check_run_log(room, order, log)
            if bad is not None:
                sys.exit(f"{policy}: not a must-place run: {bad}")
            losses.append((best - int(log.used_milli[-1])) / 1000)
        out[f"{policy}_loss_a_b_gpus"] = losses
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workload", default="default")
    ap.add_argument("--seed", type=int, default=42, help="the node order that breaks the policies' ties")
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    nodes = load_nodes(a.traces / "openb_node_list_gpu_node.csv")
    pods = load_pods(a.traces / f"openb_pod_list_{a.workload}.csv")
    threshold = next(m for m in range(1, 1000) if online_regret(m, m).deterministic_gpus > 10)
    small = COMMON.small
    own = sum(1 for p in pods if (p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, p.gpu_spec)
              == (small.cpu_milli, small.memory_mib, 1, small.gpu_milli, ()))
    out: dict[str, Any] = {"workload": a.workload, "first_above_10_gpus": _figures(threshold, threshold),
                           "trace_small_pods": _figures(own, own) if own else None,
                           "common_shapes_roomy_nodes": _on(nodes, pods, COMMON, a.seed),
                           "light_shapes_whole_cluster": _on(nodes, pods, LIGHT, a.seed)}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    if a.json:
        print(json.dumps(out, indent=1))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")


if __name__ == "__main__":
    main()
