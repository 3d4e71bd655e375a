"""How far can placement go on the openb ``default`` workload? The evidence behind "not 215" in
``docs/placement-policy.md``.

    .venv/bin/python bench/placement_limits.py [--workload default] [--seeds 42-51] [--jobs 2]

Prints four tables:

1. *Where the idle GPUs are*: the final state of FGD and stranding-fgd on the first seed, each GPU's idle milli
   classified (a lone 810-milli pod, a hole no common shape fits, a hole whose node lacks CPU or memory, the
   rest), and an offline first-fit-decreasing packing of the same non-810 sharing pods for comparison.
2. *A counting bound* on the allocation of any policy that places every pod that fits. It is loose (it
   ignores every hole except the 810-milli remainders), so it cannot prove that 96.54 % is out of reach; it is
   printed so that nobody mistakes the floor analysis for a proof.
3. *Must-place levers*: stranding-fgd, and a variant that, once fresh GPUs run short, makes small sharing pods
   open fresh GPUs, so that fresh GPUs run out sooner and fewer 810-milli pods arrive while one is left.
4. *Refusing pods*: a variant that declines an 810-milli-style pod (it would open a fresh GPU and leave under
   200 milli) once fewer than a given share of GPUs are fresh. Every placement policy of the FGD paper fails a
   pod only when nothing fits; this one does not, and the table shows what the target would cost.
5. *Gated reserve* on all 13 workloads: the same refusal, with the fresh-GPU threshold set by one constant
   times the target workload's share of GPU milli asked by whole one-GPU shapes; against the published FGD.

Variants 3 to 5 are ``fgd_engine.Chooser`` subclasses around stranding-fgd's own scores; nothing here is a
shipped policy.
"""

from __future__ import annotations

import argparse
import collections
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.scheduler.plugins.fragmentation.measure import MILLI, fragmentation, sigmoid_score
from gpucluster.simulator.experiments import fgd
from gpucluster.simulator.experiments.fgd_engine import Chooser, PolicyName, run
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
WORKLOADS = ("cpu050", "cpu100", "cpu200", "default", "gpushare100", "gpushare40", "gpushare80", "gpuspec10",
             "gpuspec20", "gpuspec25", "multigpu20", "multigpu30", "multigpu40")


def _fresh_share(c: Any) -> float:
    return float((c.gpu_left == MILLI).sum() / c.gpu_count.sum())


class DecliningChooser(Chooser):
    """stranding-fgd, but declines a sharing pod that would leave < 200 milli on a fresh GPU once fresh GPUs
    are fewer than ``fresh_below`` of all (no policy of the FGD paper declines a pod that fits)."""

    fresh_below = 0.0

    def choose(self, cands: Any, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
        node, gpus = super().choose(cands, pod)
        if (pod.num_gpu == 1 and pod.gpu_milli < MILLI and MILLI - pod.gpu_milli < 200
                and self.c.gpu_left[node, gpus[0]] == MILLI and _fresh_share(self.c) < self.fresh_below):
            return -1, ()
        return node, gpus


class ReserveChooser(DecliningChooser):
    """The same decline, gated by the target workload: declines once fresh GPUs are fewer than ``per_share``
    times the share of the target's GPU milli asked by whole one-GPU shapes (0 on ``gpushare100``: nothing to
    keep fresh GPUs for). One constant for every workload."""

    per_share = 0.0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        t = self.target
        asked = t.weight * t.milli * t.num
        whole = asked[(t.num == 1) & (t.milli == MILLI)].sum()
        self.fresh_below = self.per_share * float(whole / asked.sum()) if asked.sum() else 0.0


class OpeningChooser(Chooser):
    """stranding-fgd, but once fresh GPUs are fewer than ``fresh_below`` of all, a sharing pod of at most
    ``max_milli`` goes to a fresh GPU whenever one fits (the best such node by stranding-fgd's score)."""

    fresh_below = 0.0
    max_milli = 0

    def choose(self, cands: Any, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
        c = self.c
        if not (pod.num_gpu == 1 and pod.gpu_milli <= self.max_milli and _fresh_share(c) < self.fresh_below):
            return super().choose(cands, pod)
        fresh = c.gpu_left[cands] == MILLI
        rows = cands[fresh.any(axis=1)]
        if rows.size == 0:
            return super().choose(cands, pod)
        gpu = np.argmax(c.gpu_left[rows] == MILLI, axis=1)
        cl, gl, md = c.cpu_left[rows], c.gpu_left[rows], c.model[rows]
        after_gl = gl.copy()
        after_gl[np.arange(rows.size), gpu] -= pod.gpu_milli
        cpu = pod.score_cpu_milli
        before = fragmentation(cl, gl, md, self.target, self.access)
        after = fragmentation(cl - cpu, after_gl, md, self.target, self.access)
        gain = self.stranding.gain(cl, gl.sum(axis=1), md, cpu, pod.gpu_milli, not pod.gpu_spec)
        scores = sigmoid_score(before - after + gain, np.zeros(rows.size)).astype(np.float64)
        k = self._pick(scores, rows)
        return int(rows[k]), (int(gpu[k]),)


def _chooser(variant: str) -> type[Chooser]:
    kind, _, params = variant.partition(":")
    if kind == "decline":
        return type("Declining", (DecliningChooser,), {"fresh_below": float(params)})
    if kind == "reserve":
        return type("Reserve", (ReserveChooser,), {"per_share": float(params)})
    if kind == "open":
        share, milli = params.split("/")
        return type("Opening", (OpeningChooser,), {"fresh_below": float(share), "max_milli": int(milli)})
    return Chooser


def _one(task: tuple[str, str, int]) -> tuple[str, str, float, float]:
    variant, workload, seed = task
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / f"openb_pod_list_{workload}.csv")
    res = fgd.run_seed(nodes, pods, PolicyName.STRANDING_FGD, seed, chooser_cls=_chooser(variant))
    return variant, workload, res.curves["allocation"][100], res.curves["allocation"][130]


def idle_breakdown(nodes: list[OpenbNode], pods: list[OpenbPod], seed: int, policy: PolicyName) -> dict[str, float]:
    """Idle GPUs (in GPUs) of the final state at 130 % by cause, plus the offline packing comparison."""
    order = fgd.arrival_order(pods, sum(n.gpus for n in nodes) * MILLI, seed, 1.3)
    log = run(nodes, order, policy, fgd.target_workload(pods), np.random.default_rng([seed, 1]),
              fgd.node_rank(seed, len(nodes)))
    held: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
    cpu_left = np.array([n.cpu_milli for n in nodes])
    mem_left = np.array([n.memory_mib for n in nodes])
    for i, p in enumerate(order):
        if log.placed[i]:
            cpu_left[log.node[i]] -= p.cpu_milli
            mem_left[log.node[i]] -= p.memory_mib
            for g in log.gpus[i]:
                held[(int(log.node[i]), g)].append(p.gpu_milli)
    shapes = collections.Counter((p.cpu_milli, p.memory_mib, p.gpu_milli) for p in pods
                                 if p.num_gpu == 1 and p.gpu_milli < MILLI)
    n_sharing = sum(shapes.values())
    out = collections.Counter({"lone 810": 0.0, "no shape fits": 0.0, "starved": 0.0, "fillable": 0.0})
    for ni, n in enumerate(nodes):
        for g in range(n.gpus):
            on = held.get((ni, g), [])
            left = MILLI - sum(on)
            if left <= 0:
                continue
            if on == [810]:
                out["lone 810"] += left / MILLI
                continue
            fits = [s for s in shapes if s[2] <= left]
            feeds = [s for s in fits if s[0] <= cpu_left[ni] and s[1] <= mem_left[ni]]
            if sum(shapes[s] for s in fits) < 0.02 * n_sharing:
                out["no shape fits"] += left / MILLI
            elif sum(shapes[s] for s in feeds) < 0.02 * n_sharing:
                out["starved"] += left / MILLI
            else:
                out["fillable"] += left / MILLI
    out["total"] = sum(out.values())
    # offline first-fit decreasing of the same non-810 sharing pods, GPU milli only
    sizes = sorted((p.gpu_milli for i, p in enumerate(order)
                    if log.placed[i] and p.num_gpu == 1 and p.gpu_milli < MILLI and p.gpu_milli != 810), reverse=True)
    bins: list[int] = []
    for s in sizes:
        for k, room in enumerate(bins):
            if room >= s:
                bins[k] -= s
                break
        else:
            bins.append(MILLI - s)
    out["non-810 sharing GPUs: policy"] = float(sum(1 for on in held.values()
                                                    if on and 810 not in on and max(on) < MILLI))
    out["non-810 sharing GPUs: offline FFD"] = float(len(bins))
    out["offline FFD holes"] = sum(bins) / MILLI
    return dict(out)


def must_place_bound(nodes: list[OpenbNode], pods: list[OpenbPod], seed: int) -> tuple[float, float]:
    """Upper bound on allocation % at 130 % for a policy that places every pod that fits; and the share
    arrived at the first failed 810-milli pod of the best case.

    Let T be the first 810-milli pod (3,152 CPU milli, 5,600 MiB, any model) that fails. Every such pod before
    T was placed, each leaving 190 milli that only pods of <= 190 milli can use. From T on no GPU with 810 free
    sits on a node with that CPU and memory, so no pod needing as much can be placed. Hence
    allocated <= min(arrived before T + smaller pods after T, capacity - 190 x placed 810s + small pods' milli),
    maximised over T (or no failure at all)."""
    cap = sum(n.gpus for n in nodes) * MILLI
    order = fgd.arrival_order(pods, cap, seed, 1.3)
    g = np.array([p.total_gpu_milli for p in order])
    blocker = np.array([p.num_gpu == 1 and p.gpu_milli == 810 and p.cpu_milli == 3152 and p.memory_mib == 5600
                        and not p.gpu_spec for p in order])
    blocked = np.array([p.num_gpu > 0 and p.gpu_milli >= 810 and p.cpu_milli >= 3152 and p.memory_mib >= 5600
                        and not p.gpu_spec for p in order])
    small = int(g[np.array([p.num_gpu == 1 and 0 < p.gpu_milli <= 190 for p in order])].sum())
    before = np.concatenate([[0], np.cumsum(g)])
    after = np.concatenate([np.cumsum(np.where(blocked, 0, g)[::-1])[::-1][1:], [0]])
    n810 = np.concatenate([[0], np.cumsum(blocker)])
    best, at = -1.0, len(order)
    for t in [*np.flatnonzero(blocker).tolist(), len(order)]:
        rest = after[t] if t < len(order) else 0
        b = min(before[t] + rest, cap - max(0, 190 * n810[t] - small))
        if b > best:
            best, at = b, t
    return 100.0 * best / cap, 100.0 * before[at] / cap


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workload", default="default")
    ap.add_argument("--seeds", default="42-51")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--reserve", default="0.3,0.36",
                    help="per-share constants of the gated reserve to run on all 13 workloads ('' to skip)")
    args = ap.parse_args()
    if not (TRACES / "openb_node_list_gpu_node.csv").is_file():
        print(f"trace not found: {TRACES}")
        return 0
    seeds = fgd.parse_seeds(args.seeds)
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / f"openb_pod_list_{args.workload}.csv")
    t0 = time.perf_counter()

    print(f"## 1. Idle GPUs at 130 % by cause ({args.workload}, seed {seeds[0]})\n")
    rows = {p.value: idle_breakdown(nodes, pods, seeds[0], p) for p in (PolicyName.FGD, PolicyName.STRANDING_FGD)}
    print("| idle capacity, GPUs | " + " | ".join(rows) + " |\n|---|---|---|")
    for key in rows["fgd"]:
        print(f"| {key} | " + " | ".join(f"{r[key]:.1f}" for r in rows.values()) + " |")

    print(f"\n## 2. Counting bound for must-place policies ({args.workload}, allocation % at 130 %)\n")
    bounds = [must_place_bound(nodes, pods, s) for s in seeds]
    print("| seed | bound | arrived at the first failed 810 |\n|---|---|---|")
    for s, (b, at) in zip(seeds, bounds, strict=True):
        print(f"| {s} | {b:.2f} | {at:.1f} % |")
    print(f"| mean | {np.mean([b for b, _ in bounds]):.2f} | |")

    variants = ["stranding-fgd", "open:0.1/470", "open:0.2/470", "open:0.1/650", "open:0.2/650",
                "decline:0.05", "decline:0.1", "decline:0.2", "decline:0.35"]
    tasks = [(v, args.workload, s) for v in variants for s in seeds]
    got: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    with ProcessPoolExecutor(max_workers=max(args.jobs, 1)) as pool:
        for v, _, a100, a130 in pool.map(_one, tasks):
            got[v].append((a100, a130))
        reserve = [f"reserve:{x}" for x in args.reserve.split(",") if x.strip()]
        rtasks = [(v, w, s) for v in reserve for w in WORKLOADS for s in seeds]
        rgot: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
        for v, w, a100, a130 in pool.map(_one, rtasks):
            rgot[(v, w)].append((a100, a130))
    labels = {"stranding-fgd": "stranding-fgd (places every pod that fits)"}
    for v in variants:
        kind, _, params = v.partition(":")
        if kind == "open":
            share, milli = params.split("/")
            labels[v] = f"pods <= {milli} milli open fresh GPUs once fresh < {float(share):.0%}"
        elif kind == "decline":
            labels[v] = f"declines 810-style pods once fresh < {float(params):.0%}"
    for title, keep in (("3. Must-place levers", ("stranding-fgd", "open")),
                        ("4. Refusing pods that fit (no policy of the FGD paper does)", ("stranding-fgd", "decline"))):
        print(f"\n## {title} ({args.workload}, seeds {seeds[0]}..{seeds[-1]}, mean allocation %)\n")
        print("| variant | @100 | @130 | idle GPUs @130 |\n|---|---|---|---|")
        for v in variants:
            if v.startswith(keep):
                vals = np.array(got[v])
                a130 = vals[:, 1].mean()
                idle = (100 - a130) * sum(n.gpus for n in nodes) / 100
                print(f"| {labels[v]} | {vals[:, 0].mean():.2f} | {a130:.2f} | {idle:.0f} |")
    published = fgd.load_published(TRACES / "fgd-expected-results" / "analysis_allo_discrete.csv")
    gpus = sum(n.gpus for n in nodes)
    for v in reserve:
        print(f"\n## 5. Gated reserve, {v.partition(':')[2]} x whole-GPU share "
              f"(refuses pods; seeds {seeds[0]}..{seeds[-1]})\n")
        print("| workload | @100 | vs FGD | @130 | vs FGD | idle GPUs @130 |\n|---|---|---|---|---|---|")
        for w in WORKLOADS:
            vals = np.array(rgot[(v, w)])
            pub = published[(w, "06-FGD")]
            ref = [float(np.mean([pub[s][k] for s in seeds])) for k in (100, 130)]
            a100, a130 = vals[:, 0].mean(), vals[:, 1].mean()
            print(f"| {w} | {a100:.2f} | {a100 - ref[0]:+.2f} | {a130:.2f} | {a130 - ref[1]:+.2f} | "
                  f"{(100 - a130) * gpus / 100:.0f} |")
    print(f"\n{len(tasks) + len(rtasks) + 2} runs in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
