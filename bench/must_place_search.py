"""The best must-place runs we can find, knowing the future: the upper side of issue 30's bracket.

    nice -n 5 .venv/bin/python bench/must_place_search.py [--workloads default,cpu200,gpushare40,gpuspec25,multigpu20] \
        [--seeds 42] [--variants V;V;...] [--jobs 1] [--all] [--json] [--traces DIR]

Per workload and seed: the FGD experiment's arrival order (1.3x, the seed's shuffle), FGD and ours
(stranding-fgd; speed-fgd places these pods identically) through the fast path (``fgd_engine.run``), then every
variant below. Each run is replayed by the independent checker (``simulator.experiments.mustplace``): a run that
placed a pod where it does not fit, or failed a pod that fitted, is reported as such and never counted. The
table gives idle GPUs at the end (capacity - allocated milli, / 1000), the best run found and which variant
made it, and the proven must-place bound of ``docs/placement-policy.md`` where it was measured; the optimum of
every must-place run lies between the bound and the best found. A found run is not a proof of anything but its
own existence.

A variant is ``key=value`` pairs joined by ``,`` (variants joined by ``;``):

* ``policy``: ``fgd``, ``stranding-fgd`` (default) or ``new`` (the research options below);
* ``oracle=K``: the policy's target workload is the exact multiset of the pods still to arrive (FGD's 95 %
  coverage of the most common shapes, ``cov`` to change it), recomputed every K pods: an offline look-ahead in
  place of the learned target; ``window=W``: only the next W pods;
* ``rank=S``: break ties by the node order of seed S (``node_rank``) instead of the run's own seed;
  ``random=S``: break ties uniformly at random from stream S;
* ``cpu``, ``scar``, ``pack``, ``q``, ``cont``, ``mem`` (``policy=new``): ``NewOptions``' CPU-stranding and
  model-scarcity weights, best-fit weight, score quantum, continuous score and memory-aware target (0/1);
* ``pair=M``: a sharing pod of at most 190 milli goes, when it can, to the fullest GPU with at least ``M`` milli
  used that holds it (the remainder of an 810-milli pod rather than a fresh GPU); otherwise the policy decides;
* ``tight=I``: from pod I of the order on, every one-GPU sharing pod goes to the fullest GPU that holds it
  (best fit per GPU, across nodes; ties and whole-GPU pods: the policy);
* ``open=I/M``: from pod I on, a sharing pod of 191..M milli opens a fresh GPU when one fits (the node the
  policy prefers among those with one): fresh GPUs run out sooner, so fewer 810-milli pods arrive while one
  is left;
* ``plan=I``: an offline packing plan: the one-GPU sharing pods of 191..999 milli other than 810 among the
  first I pods are packed best-fit decreasing into GPU-sized bins (knowing every size to come); a pod whose bin
  has a GPU goes there when it fits, a pod that opens its bin takes a fresh GPU on the node the policy prefers;
  the rest, and every pod whose plan does not fit, is the policy's;
* ``rollout=STEP:V1|V2|...`` (alone): greedy search over the future: at pods 0, STEP, 2 STEP ... each listed
  variant runs from the current state to the end, and the best of these runs' next STEP decisions are kept
  (``rollout_search``); the best complete run seen is reported, never worse than the best listed variant.
  ``rollout=STEP:best=K``: the K single variants of this invocation with the fewest idle GPUs on the same
  workload and seed (run after them).

Nothing here is a shipped policy; the default placement is unchanged.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.scheduler.plugins.fragmentation.measure import (
    ShapeCache,
    Stranding,
    TargetWorkload,
    cpu_per_gpu_milli,
    model_capacity,
    model_scarcity,
)
from gpucluster.simulator.experiments.fgd import arrival_order, target_workload
from gpucluster.simulator.experiments.fgd_engine import Chooser, FastCluster, NewOptions, PolicyName, RunLog, run
from gpucluster.simulator.experiments.mustplace import MILLI, allocated_milli, check_must_place, check_run_log
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
WORKLOADS = "default,cpu200,gpushare40,gpuspec25,multigpu20"
BOUNDS = {("default", 42): 198.6, ("default", 43): 197.3, ("default", 44): 197.3, ("cpu200", 42): 200.2,
          ("gpushare40", 42): 278.4, ("gpuspec25", 42): 152.8, ("multigpu20", 42): 169.1}
"""The proven must-place bound, idle GPUs (``docs/placement-policy.md``, with the GPU-packing rows; one class)."""

ROLLOUT = "|".join(["policy=stranding-fgd", "policy=new,cpu=1,scar=1,cont=1,mem=0", "rank=100", "rank=101",
                     "rank=103", "rank=107", "policy=new,cpu=3,scar=1,cont=0,mem=0"])
DEFAULT_VARIANTS = ";".join([
    "oracle=250", "oracle=1000", "oracle=1000,cov=1", "oracle=100,window=300", "policy=fgd,oracle=1000",
    *[f"rank={s}" for s in range(100, 108)], "random=0",
    "policy=new,cpu=3,scar=1,cont=0,mem=0", "policy=new,cpu=1,scar=1,cont=1,mem=0",
    "policy=new,cpu=1,scar=1,cont=0,mem=1", "policy=new,cpu=1,scar=1,cont=0,mem=0,q=2",
    "pair=810", "tight=0", "tight=7000", "open=7800/650",
    f"rollout=1000:{ROLLOUT}", "rollout=1000:best=6",
])


Decision = tuple[int, tuple[int, ...]]
"""A chooser's answer: node (-1: none) and the GPU indices there."""

class LookAheadChooser(Chooser):
    """A policy of ``fgd_engine`` with offline knowledge of the arrival order (``pods``; each pod object once).

    ``oracle`` > 0: every ``oracle`` pods the target workload becomes the multiset of the pods still to arrive
    (FGD's ``coverage``), and the stranding terms and score cache follow it. ``pair`` > 0: a sharing pod of at
    most 190 milli goes to the fullest GPU with at least ``pair`` milli used that holds it, when there is one.
    """

    pods: Sequence[OpenbPod] = ()
    oracle = 0
    window = 0
    coverage = 0.95
    pair = 0
    open_from = -1
    open_milli = 0
    tight_from = -1

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.index = {id(p): i for i, p in enumerate(self.pods)}
        self.block = -1

    def _retarget(self, i: int) -> None:
        memory = self.policy is PolicyName.NEW and self.options.memory
        rest = self.pods[i:i + self.window] if self.window else self.pods[i:]
        t = target_workload(rest, self.coverage, memory=memory)
        names = self.c.model_names
        self.target = t
        self.access = t.access(names)
        self.stranding = Stranding(cpu_per_gpu_milli(t), model_scarcity(t, names, model_capacity(self.c.view)))
        self.cache = ShapeCache(self.c.n_nodes)

    def choose(self, cands: Any, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
        if self.oracle:
            block = self.index[id(pod)] // self.oracle
            if block != self.block:
                self._retarget(block * self.oracle)
                self.block = block
        tight = self.tight_from >= 0 and self.index[id(pod)] >= self.tight_from
        if (self.pair and pod.num_gpu == 1 and 0 < pod.gpu_milli <= MILLI - 810) or (
                tight and pod.num_gpu == 1 and 0 < pod.gpu_milli < MILLI):
            gl = self.c.gpu_left[cands]
            ok = (gl >= pod.gpu_milli) & (gl <= MILLI - (self.pair if not tight else 1))
            if ok.any():
                masked = np.where(ok, gl, MILLI + 1)
                flat = int(np.argmin(masked))
                k, g = divmod(flat, gl.shape[1])
                return int(cands[k]), (int(g),)
        if (self.open_from >= 0 and pod.num_gpu == 1 and MILLI - 810 < pod.gpu_milli <= self.open_milli
                and self.index[id(pod)] >= self.open_from):
            got = self.on_fresh_gpu(cands, pod, super().choose)
            if got is not None:
                return got
        return super().choose(cands, pod)

    def on_fresh_gpu(self, cands: Any, pod: OpenbPod, choose: Callable[[Any, OpenbPod], Decision]) -> Decision | None:
        """``choose`` among the candidates with a fresh GPU, the one-GPU pod then on a fresh GPU of the node chosen
        (None when no candidate has one)."""
        fresh = self.c.gpu_left[cands] == MILLI
        rows = cands[fresh.any(axis=1)]
        if not rows.size:
            return None
        node, gpus = choose(rows, pod)
        if self.c.gpu_left[node, gpus[0]] != MILLI:
            gpus = (int(np.argmax(self.c.gpu_left[node] == MILLI)),)
        return node, gpus


def best_fit_decreasing(sizes: dict[int, int]) -> dict[int, int]:
    """Pack items (id -> milli) into GPUs of 1000 milli, largest first, each into the fullest GPU that holds it
    (ties: the earlier GPU); returns id -> GPU number."""
    rooms: list[int] = []
    out: dict[int, int] = {}
    for i, m in sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0])):
        best = -1
        for b, room in enumerate(rooms):
            if m <= room and (best < 0 or room < rooms[best]):
                best = b
                if room == m:
                    break
        if best < 0:
            rooms.append(MILLI)
            best = len(rooms) - 1
        rooms[best] -= m
        out[i] = best
    return out


class PlanChooser(LookAheadChooser):
    """Offline packing plan, then follow it: the one-GPU sharing pods of more than 190 milli other than 810
    among the first ``plan_until`` pods are packed best-fit decreasing into GPU-sized bins; a pod whose bin has
    a GPU goes there when it fits, a pod that opens its bin takes a fresh GPU on the node the policy prefers
    among those with one; everything else (and every pod whose plan does not fit) is the policy's."""

    plan_until = 0

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        sizes = {i: p.gpu_milli for i, p in enumerate(self.pods[: self.plan_until])
                 if p.num_gpu == 1 and MILLI - 810 < p.gpu_milli < MILLI and p.gpu_milli != 810}
        self.bin_of = best_fit_decreasing(sizes)
        self.where: dict[int, tuple[int, int]] = {}

    def choose(self, cands: Any, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
        b = self.bin_of.get(self.index[id(pod)])
        if b is None:
            return super().choose(cands, pod)
        at = self.where.get(b)
        if at is not None:
            node, g = at
            if self.c.gpu_left[node, g] >= pod.gpu_milli and node in set(cands.tolist()):
                return node, (g,)
            return super().choose(cands, pod)
        got = self.on_fresh_gpu(cands, pod, super().choose)
        node, gpus = got if got is not None else super().choose(cands, pod)
        self.where[b] = (node, gpus[0])
        return node, gpus


def parse_variant(text: str) -> dict[str, str]:
    out = {"policy": "stranding-fgd"}
    for part in text.split(","):
        key, _, value = part.strip().partition("=")
        if key:
            out[key] = value
    return out


def _setup(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], order: Sequence[OpenbPod], seed: int,
           variant: str) -> tuple[PolicyName, TargetWorkload, np.random.Generator, Any, NewOptions | None,
                                  TargetWorkload | None, type[Chooser]]:
    """``fgd_engine.run``'s arguments for one variant (module docstring)."""
    v = parse_variant(variant)
    policy = PolicyName(v["policy"])
    options = None
    if policy is PolicyName.NEW:
        options = NewOptions(continuous=v.get("cont", "1") == "1", memory=v.get("mem", "1") == "1",
                             pack_weight=float(v.get("pack", 0)), quantum=float(v.get("q", 1)),
                             cpu_weight=float(v.get("cpu", 0)), scarcity_weight=float(v.get("scar", 0)))
    tgt = target_workload(pods)
    policy_target = target_workload(pods, memory=True) if options is not None and options.memory else None
    rank: Any = node_rank(seed, len(nodes))
    rng = np.random.default_rng([seed, 1])
    if "rank" in v:
        rank = node_rank(int(v["rank"]), len(nodes))
    if "random" in v:
        rank, rng = None, np.random.default_rng([int(v["random"]), 3])
    chooser: type[Chooser] = Chooser
    if {"oracle", "pair", "open", "tight", "plan"} & set(v):
        opened = v.get("open", "-1/0").split("/")
        chooser = type("LookAhead", (PlanChooser if "plan" in v else LookAheadChooser,), {
            "pods": order, "oracle": int(v.get("oracle", 0)), "window": int(v.get("window", 0)),
            "coverage": float(v.get("cov", 0.95)), "pair": int(v.get("pair", 0)), "plan_until": int(v.get("plan", 0)),
            "tight_from": int(v.get("tight", -1)), "open_from": int(opened[0]), "open_milli": int(opened[1])})
    return policy, tgt, rng, rank, options, policy_target, chooser


def run_variant(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], order: Sequence[OpenbPod], seed: int,
                variant: str) -> RunLog:
    policy, tgt, rng, rank, options, policy_target, chooser = _setup(nodes, pods, order, seed, variant)
    return run(nodes, order, policy, tgt, rng, rank, options, policy_target, chooser)


def _drive(c: FastCluster, chooser: Chooser, order: Sequence[OpenbPod], start: int, stop: int,
           node: list[int], gpus: list[tuple[int, ...]]) -> None:
    """``fgd_engine.run``'s loop (the same fit test, ``FastCluster.candidates``) from pod ``start`` to ``stop``,
    writing the decisions."""
    for i in range(start, stop):
        pod = order[i]
        cands = c.candidates(pod)
        k, chosen = (chooser.choose(cands, pod) if cands.size else (-1, ()))
        node[i], gpus[i] = k, chosen
        if k >= 0:
            c.place_pod(k, pod, chosen)


def rollout_search(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], order: Sequence[OpenbPod], seed: int,
                   variants: Sequence[str], step: int) -> tuple[list[int], list[tuple[int, ...]], list[str]]:
    """Greedy segment-wise choice of variants, judged by the future: at pods 0, ``step``, 2 ``step`` ... every
    variant runs from the current state to the end (a rollout); the best rollout's decisions for the next
    ``step`` pods are kept. Returns the best complete run seen (a prefix of kept segments and its rollout)
    and the variant kept per segment. Never worse than the best single variant (the first rollouts are the
    variants themselves)."""
    n = len(order)
    c = FastCluster(nodes)
    node, gpus = [-1] * n, [()] * n
    best: tuple[int, list[int], list[tuple[int, ...]]] = (-1, [], [])
    trail: list[str] = []
    for start in range(0, n, step):
        pick: tuple[int, str, list[int], list[tuple[int, ...]]] | None = None
        for v in variants:
            cc = copy.deepcopy(c)
            policy, _, rng, rank, options, policy_target, cls = _setup(nodes, pods, order, seed, v)
            chooser = cls(policy, cc, policy_target or target_workload(pods), rng, rank, options)
            nv, gv = list(node), list(gpus)
            _drive(cc, chooser, order, start, n, nv, gv)
            got = allocated_milli(order, nv)
            if pick is None or got > pick[0]:
                pick = (got, v, nv, gv)
        assert pick is not None
        if pick[0] > best[0]:
            best = (pick[0], pick[2], pick[3])
        trail.append(pick[1])
        stop = min(start + step, n)
        for i in range(start, stop):
            node[i], gpus[i] = pick[2][i], pick[3][i]
            if node[i] >= 0:
                c.place_pod(node[i], order[i], gpus[i])
    return best[1], best[2], trail


@functools.cache
def _trace(traces: str, workload: str) -> tuple[tuple[OpenbNode, ...], tuple[OpenbPod, ...]]:
    return (tuple(load_nodes(Path(traces) / "openb_node_list_gpu_node.csv")),
            tuple(load_pods(Path(traces) / f"openb_pod_list_{workload}.csv")))


def one(task: tuple[str, str, int, str]) -> dict[str, Any]:
    """One checked run: idle GPUs, or the checker's violation."""
    traces, workload, seed, variant = task
    nodes, pods = _trace(traces, workload)
    capacity = sum(n.gpus for n in nodes) * MILLI
    order = arrival_order(pods, capacity, seed, 1.3)
    t = time.perf_counter()
    extra: dict[str, Any] = {}
    if variant.startswith("rollout="):
        step, _, subs = variant.removeprefix("rollout=").partition(":")
        node, gpus, trail = rollout_search(nodes, pods, order, seed, subs.split("|"), int(step))
        bad = check_must_place(nodes, order, node, gpus)
        used = allocated_milli(order, node)
        placed = sum(1 for k in node if k >= 0)
        extra["segments"] = trail
    else:
        log = run_variant(nodes, pods, order, seed, variant)
        bad = check_run_log(nodes, order, log)
        used, placed = int(log.used_milli[-1]), int(log.placed.sum())
    return {"workload": workload, "seed": seed, "variant": variant, "s": round(time.perf_counter() - t, 2),
            "idle_gpus": (capacity - used) / MILLI, "placed": placed,
            "violation": None if bad is None else str(bad), **extra}


def resolve_rollout(variant: str, runs: Sequence[dict[str, Any]]) -> str:
    """``rollout=STEP:best=K`` -> ``rollout=STEP:V1|...|VK``, the K single variants with the fewest idle GPUs in
    ``runs`` (checked runs of the same workload and seed; FGD left out); other variants unchanged."""
    step, _, subs = variant.removeprefix("rollout=").partition(":")
    if not subs.startswith("best="):
        return variant
    ok = sorted((r for r in runs if r["violation"] is None and r["variant"] != "policy=fgd"
                 and not r["variant"].startswith("rollout=")), key=lambda r: (r["idle_gpus"], r["variant"]))
    return f"rollout={step}:" + "|".join(r["variant"] for r in ok[: int(subs.removeprefix("best="))])


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--workloads", default=WORKLOADS)
    ap.add_argument("--seeds", default="42", help="comma-separated seeds")
    ap.add_argument("--variants", default=DEFAULT_VARIANTS, help="';'-separated variants (module docstring)")
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--all", action="store_true", help="also print every run")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    if not (a.traces / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {a.traces} (--traces)")
    variants = ["policy=fgd", "policy=stranding-fgd"] + [v for v in a.variants.split(";") if v.strip()]
    seeds = [int(s) for s in a.seeds.split(",")]
    single = [v for v in variants if not v.startswith("rollout=")]
    tasks = [(str(a.traces), w, s, v) for w in a.workloads.split(",") for s in seeds for v in single]
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    with ProcessPoolExecutor(max_workers=max(a.jobs, 1)) as pool:
        for r in pool.map(one, tasks):
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
        later = [(str(a.traces), w, s, resolve_rollout(v, [r for r in runs if r["workload"] == w and r["seed"] == s]))
                 for w in a.workloads.split(",") for s in seeds for v in variants if v.startswith("rollout=")]
        for r in pool.map(one, later):
            runs.append(r)
            print(json.dumps(r), file=sys.stderr, flush=True)
    rows = []
    for w in a.workloads.split(","):
        for s in seeds:
            mine = [r for r in runs if r["workload"] == w and r["seed"] == s]
            ok = [r for r in mine if r["violation"] is None]
            best = min(ok, key=lambda r: r["idle_gpus"]) if ok else None
            by = {r["variant"]: r for r in mine}
            rows.append({"workload": w, "seed": s, "fgd_idle_gpus": by["policy=fgd"]["idle_gpus"],
                         "ours_idle_gpus": by["policy=stranding-fgd"]["idle_gpus"],
                         "best_idle_gpus": best["idle_gpus"] if best else None,
                         "best_variant": best["variant"] if best else None,
                         "bound_idle_gpus": BOUNDS.get((w, s)), "runs": len(mine),
                         "violations": len(mine) - len(ok)})
    if a.json:
        print(json.dumps({"rows": rows, "runs": runs}, indent=1))
        return
    print("| workload | seed | FGD | ours | best must-place run found | variant | proven bound | runs (failed check) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = f"{r['bound_idle_gpus']:.1f}" if r["bound_idle_gpus"] is not None else "-"
        best = f"{r['best_idle_gpus']:.1f}" if r["best_idle_gpus"] is not None else "-"
        which = str(r["best_variant"]).replace("|", "\\|")
        print(f"| {r['workload']} | {r['seed']} | {r['fgd_idle_gpus']:.1f} | {r['ours_idle_gpus']:.1f} | {best} | "
              f"`{which}` | {b} | {r['runs']} ({r['violations']}) |")
    if a.all:
        print("\n| workload | seed | variant | idle GPUs | placed | s | check |\n|---|---|---|---|---|---|---|")
        for r in runs:
            name = r["variant"].replace("|", "\\|")
            print(f"| {r['workload']} | {r['seed']} | `{name}` | {r['idle_gpus']:.1f} | {r['placed']} | "
                  f"{r['s']} | {r['violation'] or 'ok'} |")
    print(f"\n{len(runs)} runs in {time.perf_counter() - t0:.0f} s (idle GPUs at 130 % arrived)")


if __name__ == "__main__":
    main()
