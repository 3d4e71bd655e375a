"""A must-place run built to make a pod of one shape fail early: the other side of the earliest-failure prefixes.

    nice -n 5 .venv/bin/python bench/earliest_failure_run.py [--workload default] [--seed 42] \
        [--shapes 11908:47104:470,...] [--traces DIR] [--json]

``bound.EARLIEST_DOC`` proves, per shape Q, a prefix of the arrival order in which no pod of Q fails in any
must-place run (on ``default``, seed 42: no 11.9-core 470-milli pod before pod 4,805). A row that forced Q's
pods further is valid only if no must-place run has a Q pod fail there. This bench builds such runs: for each
shape (``CPU milli:MiB:GPU milli``, one GPU of any model), the FGD experiment's arrival order (1.3x, the seed's
shuffle) is placed by a greedy *blocker* that obeys the must-place rule (every pod that fits somewhere is placed,
through the fast path's fit test, ``FastCluster.candidates``) and otherwise tries to leave no node that can
hold a Q pod:

* among the nodes the pod fits, those that can still hold a Q pod come first, and among them the one left
  closest to holding none after the pod (the smallest of: its CPU above Q's, its memory above Q's, each as a
  share of the node's, and the share of its GPUs with Q's milli free); ties by node index;
* its GPUs: among those with the pod's milli free, the ones that still have Q's milli free first, the fullest
  first.

It stops at the first Q pod that fits nowhere and replays the run up to it with the independent checker
(``mustplace.check_must_place``), so the figure printed is a checked must-place run's: pods of Q from that index
on cannot be forced by any valid row. Between the proved prefix and this index the question stays open (a
better blocker may fail Q earlier). Nothing here is a policy or a bound.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.simulator.experiments.fgd import arrival_order
from gpucluster.simulator.experiments.fgd_engine import FastCluster
from gpucluster.simulator.experiments.mustplace import MILLI, check_must_place
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
SHAPES = "11908:47104:470,8000:30517:470,11908:47104:650"


def _slack(cpu: np.ndarray, mem: np.ndarray, free: np.ndarray, real: np.ndarray, cpu_cap: np.ndarray,
           mem_cap: np.ndarray, q: tuple[int, int, int]) -> np.ndarray:
    """Per node, how far it is from holding no Q pod (0: it holds none): the smallest of its CPU and memory above
    Q's (shares of the node's) and the share of its GPUs with Q's milli free."""
    qc, qm, qg = q
    gpus = real.sum(axis=1)
    s_gpu = ((free >= qg) & real).sum(axis=1) / np.maximum(gpus, 1)
    s = np.minimum(np.maximum(0, cpu - qc + 1) / cpu_cap, np.maximum(0, mem - qm + 1) / mem_cap)
    return np.where(gpus > 0, np.minimum(s, s_gpu), 0.0)


def block_run(nodes: list[OpenbNode], order: list[OpenbPod], q: tuple[int, int, int]) -> dict[str, Any]:
    """The blocker's run up to the first failed Q pod (module docstring), checked."""
    c = FastCluster(nodes)
    width = c.gpu_left.shape[1]
    real = np.arange(width)[None, :] < c.gpu_count[:, None]
    mem_cap = np.array([x.memory_mib for x in nodes], np.int64)
    node, gpus = [-1] * len(order), [()] * len(order)
    is_q = [p.num_gpu == 1 and not p.gpu_spec and (p.cpu_milli, p.memory_mib, p.gpu_milli) == q for p in order]
    fail = -1
    for i, p in enumerate(order):
        cands = c.candidates(p)
        if cands.size == 0:
            if is_q[i]:
                fail = i
                break
            continue
        free = c.gpu_left[cands]
        ok = real[cands]
        before = _slack(c.cpu_left[cands], c.mem_left[cands], free, ok, c.cpu_cap[cands], mem_cap[cands], q)
        chosen = np.zeros((cands.size, p.num_gpu), np.int64)
        after_free = free.copy()
        if p.num_gpu:
            key = np.where(ok & (free >= p.gpu_milli), (free < q[2]) * (2 * MILLI) + free, 10 * MILLI)
            chosen = np.argsort(key, axis=1, kind="stable")[:, :p.num_gpu]
            np.put_along_axis(after_free, chosen, np.take_along_axis(free, chosen, axis=1) - p.gpu_milli, axis=1)
        after = _slack(c.cpu_left[cands] - p.cpu_milli, c.mem_left[cands] - p.memory_mib, after_free, ok,
                       c.cpu_cap[cands], mem_cap[cands], q)
        best = int(np.lexsort((cands, after, before <= 0))[0])
        k, picked = int(cands[best]), tuple(int(g) for g in chosen[best])
        node[i], gpus[i] = k, picked
        c.place_pod(k, p, picked)
    end = fail + 1 if fail >= 0 else len(order)
    violation = check_must_place(nodes, order[:end], node[:end], gpus[:end])
    return {"shape": list(q), "first_failure": fail if fail >= 0 else None, "pods": len(order),
            "shape_pods_before": sum(is_q[:fail]) if fail >= 0 else sum(is_q), "shape_pods": sum(is_q),
            "checker": "ok" if violation is None else str(violation)}


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workload", default="default")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--shapes", default=SHAPES, help="CPU milli:MiB:GPU milli[,...] (one GPU, any model)")
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not (a.traces / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {a.traces} (--traces)")
    nodes = load_nodes(a.traces / "openb_node_list_gpu_node.csv")
    pods = load_pods(a.traces / f"openb_pod_list_{a.workload}.csv")
    order = arrival_order(pods, sum(n.gpus for n in nodes) * MILLI, a.seed, 1.3)
    rows = []
    for part in a.shapes.split(","):
        cpu, mem, milli = (int(x) for x in part.split(":"))
        t = time.perf_counter()
        r = block_run(nodes, order, (cpu, mem, milli))
        r["seconds"] = round(time.perf_counter() - t, 1)
        rows.append(r)
        print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    print("| shape (CPU milli, MiB, GPU milli) | first failure (pod of the order) | its pods before it | checker | s |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {tuple(r['shape'])} | {r['first_failure']} of {r['pods']} | {r['shape_pods_before']} of "
              f"{r['shape_pods']} | {r['checker']} | {r['seconds']} |")


if __name__ == "__main__":
    main()
