"""Fast path of the FGD experiment: the cluster as a few numpy arrays and one loop over pods.

It calls the very score and GPU-choice functions the scheduler plugins call (``scheduler.plugins.baselines
.scores`` and ``scheduler.plugins.fragmentation.measure``) and breaks ties with the same random generator
calls as ``scheduler.core`` (``rng.integers(len(tied))`` over the tied candidates in index order), so it makes
the same decisions as the plugins running in the generic framework; ``tests/simulator/test_fgd_equivalence.py``
checks that. What it saves is the framework's per-pod overhead (snapshots, cycle state, allocation records).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.scheduler.plugins.baselines import scores as bs
from gpucluster.scheduler.plugins.fragmentation.measure import (
    NodeArrays,
    ShapeCache,
    Stranding,
    TargetWorkload,
    cpu_per_gpu_milli,
    fgd_scores,
    fragmentation,
    model_capacity,
    model_scarcity,
)
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class PolicyName(enum.StrEnum):
    RANDOM = "random"
    DOTPROD = "dotprod"
    CLUSTERING = "clustering"
    PACKING = "packing"
    BESTFIT = "bestfit"
    FGD = "fgd"
    STRANDING_FGD = "stranding-fgd"
    """FGD plus CPU stranding and model scarcity (``measure.Stranding``): the scheduler's default policy."""
    NEW = "new"
    """Research variants of FGD for ablations (``NewOptions``); not a user-facing policy (no plugin yet)."""


@dataclass(frozen=True, slots=True)
class NewOptions:
    """Knobs of the FGD research variants measured in ``docs/placement-policy.md``."""

    continuous: bool = True
    """Score the fragmentation drop itself, not FGD's truncated sigmoid of it."""
    memory: bool = True
    """Shapes of the target need host memory too (their median), and pods' memory counts."""
    pack_weight: float = 0.0
    """Weight of a best-fit term (less CPU and GPU left after placement is better), in milli per unit."""
    quantum: float = 1.0
    """Coarsen the integer FGD score to multiples of this (more ties, more weight to the node order)."""
    cpu_weight: float = 0.0
    """Weight of the CPU-stranding term (``measure.Stranding``; stranding-fgd uses 1)."""
    scarcity_weight: float = 0.0
    """Weight of the model-scarcity term (stranding-fgd uses 1)."""


@dataclass(slots=True)
class RunLog:
    """One row per pod, after it was tried."""

    arrived_milli: IntArray
    used_milli: IntArray
    frag_milli: FloatArray
    idle_milli: IntArray
    placed: npt.NDArray[np.bool_]
    node: IntArray
    """Chosen node per pod (-1 when it failed)."""
    gpus: list[tuple[int, ...]]


class FastCluster:
    """The openb cluster as struct-of-arrays, mutated in place as pods are placed."""

    def __init__(self, nodes: Sequence[OpenbNode]) -> None:
        n = len(nodes)
        d = max((x.gpus for x in nodes), default=0)
        self.model_names = sorted({x.model for x in nodes if x.model})
        mid = {m: i for i, m in enumerate(self.model_names)}
        self.cpu_cap = np.array([x.cpu_milli for x in nodes], np.int64)
        self.cpu_left = self.cpu_cap.copy()
        self.mem_left = np.array([x.memory_mib for x in nodes], np.int64)
        self.gpu_count = np.array([x.gpus for x in nodes], np.int64)
        self.gpu_left = np.zeros((n, d), np.int64)
        for i, x in enumerate(nodes):
            self.gpu_left[i, : x.gpus] = bs.MILLI
        self.model = np.array([mid[x.model] if x.model else -1 for x in nodes], np.int64)
        self.kinds = np.zeros((n, bs.N_KINDS), np.int64)
        self.generation = np.zeros(n, np.int64)
        self._clock = 0
        self.view = NodeArrays(self.cpu_left, self.cpu_cap, self.mem_left, self.gpu_left, self.gpu_count,
                               self.model, self.model_names)
        self._access: dict[tuple[str, ...], npt.NDArray[np.bool_]] = {}

    @property
    def n_nodes(self) -> int:
        return int(self.cpu_cap.size)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * bs.MILLI

    def access_mask(self, spec: tuple[str, ...]) -> npt.NDArray[np.bool_]:
        """[M + 1] models a pod with ``spec`` may use (last entry: node without GPUs)."""
        if not spec:
            return np.ones(len(self.model_names) + 1, np.bool_)
        return np.array([m in spec for m in self.model_names] + [False], np.bool_)

    def candidates(self, pod: OpenbPod) -> npt.NDArray[np.intp]:
        """The nodes ``pod`` fits now (the experiment's test): free CPU and memory cover it, and for a GPU pod the
        node's model is allowed and at least ``num_gpu`` of its GPUs have ``gpu_milli`` free."""
        ok = (self.cpu_left >= pod.cpu_milli) & (self.mem_left >= pod.memory_mib)
        if pod.num_gpu:
            acc = self._access.get(pod.gpu_spec)
            if acc is None:
                acc = self._access[pod.gpu_spec] = self.access_mask(pod.gpu_spec)
            ok &= acc[self.model] & ((self.gpu_left >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu)
        return np.flatnonzero(ok)

    def place_pod(self, node: int, pod: OpenbPod, gpus: Sequence[int]) -> None:
        """:meth:`place` for one trace pod on ``node``'s GPUs ``gpus``."""
        self.place(node, pod.cpu_milli, pod.memory_mib, pod.gpu_milli, gpus, bs.gpu_kind(pod.num_gpu, pod.gpu_milli))

    def place(self, node: int, cpu: int, mem: int, milli: int, gpus: Sequence[int], kind: bs.GpuKind | None) -> None:
        self.cpu_left[node] -= cpu
        self.mem_left[node] -= mem
        for j in gpus:
            self.gpu_left[node, j] -= milli
        if kind is not None:
            self.kinds[node, int(kind)] += 1
        self._clock += 1
        self.generation[node] = self._clock


class Chooser:
    """Scores the feasible nodes for one policy and picks node and GPUs (ties at random)."""

    def __init__(self, policy: PolicyName, cluster: FastCluster, target: TargetWorkload,
                 rng: np.random.Generator, rank: IntArray | None = None,
                 options: NewOptions | None = None) -> None:
        self.policy = policy
        self.options = options or NewOptions()
        self.rank = rank
        self.c = cluster
        self.target = target
        self.access = target.access(cluster.model_names)
        self.rng = rng
        self.cache = ShapeCache(cluster.n_nodes)
        self.stranding = Stranding(cpu_per_gpu_milli(target),
                                   model_scarcity(target, cluster.model_names, model_capacity(cluster.view)))

    def _pick(self, scores: npt.NDArray[Any], cands: IntArray) -> int:
        best = scores.max()
        tied = np.flatnonzero(scores == best)
        if tied.size == 1:
            return int(tied[0])
        if self.rank is not None:
            return int(tied[np.argmin(self.rank[cands[tied]])])
        return int(tied[self.rng.integers(tied.size)])

    def _fgd_family(self, cands: IntArray, pod: OpenbPod) -> tuple[FloatArray, IntArray]:
        """Scores and chosen GPU per candidate for FGD, stranding-fgd and the research variants (cached)."""
        c, p = self.c, self.policy
        cpu, milli, num = pod.score_cpu_milli, pod.gpu_milli, pod.num_gpu
        if p is PolicyName.FGD:
            def compute(rows: IntArray) -> tuple[FloatArray, IntArray]:
                return fgd_scores(c.view, rows, cpu, milli, num, self.target, self.access)

            return self.cache.lookup((cpu, milli, num), cands, c.generation, compute)
        if p is PolicyName.STRANDING_FGD:
            def compute_sf(rows: IntArray) -> tuple[FloatArray, IntArray]:
                return fgd_scores(c.view, rows, cpu, milli, num, self.target, self.access,
                                  stranding=self.stranding, any_model=not pod.gpu_spec)

            return self.cache.lookup((cpu, milli, num, bool(pod.gpu_spec)), cands, c.generation, compute_sf)
        o = self.options
        mem = pod.memory_mib if o.memory else 0

        stranding = (Stranding(self.stranding.cpu_per_milli, self.stranding.scarcity, o.cpu_weight,
                               o.scarcity_weight) if o.cpu_weight or o.scarcity_weight else None)

        def compute_new(rows: IntArray) -> tuple[FloatArray, IntArray]:
            return fgd_scores(c.view, rows, cpu, milli, num, self.target, self.access, mem=mem,
                              continuous=o.continuous, stranding=stranding, any_model=not pod.gpu_spec)

        key = (cpu, milli, num, mem, bool(pod.gpu_spec))
        scores, gpu = self.cache.lookup(key, cands, c.generation, compute_new)
        if o.quantum != 1.0:
            scores = np.floor(scores / o.quantum)
        if o.pack_weight:
            left = c.gpu_left[cands].sum(axis=1) - milli * num
            fit = (c.cpu_left[cands] - cpu) / bs.MAX_SPEC_CPU + left / bs.MAX_SPEC_GPU
            scores = scores - o.pack_weight * fit
        return scores, gpu

    def choose(self, cands: IntArray, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
        c = self.c
        cpu, milli, num = pod.score_cpu_milli, pod.gpu_milli, pod.num_gpu
        sharing = num == 1 and milli < bs.MILLI
        p = self.policy
        if p is PolicyName.RANDOM:
            node = int(cands[self.rng.integers(cands.size)])
            if num == 0:
                return node, ()
            if sharing:
                return node, (bs.random_gpu(c.gpu_left[node], milli, self.rng),)
            return node, tuple(bs.whole_gpus(c.gpu_left[node], num))
        if p in (PolicyName.FGD, PolicyName.STRANDING_FGD, PolicyName.NEW):
            scores, gpu = self._fgd_family(cands, pod)
            k = self._pick(scores, cands)
            node = int(cands[k])
            if num == 0:
                return node, ()
            if sharing:
                return node, (int(gpu[k]),)
            return node, tuple(bs.whole_gpus(c.gpu_left[node], num))
        gl = c.gpu_left[cands]
        total_left = gl.sum(axis=1)
        scores_i: IntArray
        if p is PolicyName.DOTPROD:
            scores_i = bs.dotprod_scores(c.cpu_left[cands], total_left, cpu, milli * num)
        elif p is PolicyName.CLUSTERING:
            scores_i = bs.clustering_scores(total_left, c.kinds[cands], bs.gpu_kind(num, milli))
        elif p is PolicyName.PACKING:
            scores_i = bs.packing_scores(gl, c.gpu_count[cands], milli, num)
        else:
            scores_i = bs.minmax_normalise(bs.bestfit_raw(c.cpu_left[cands], total_left, cpu, milli * num))
        node = int(cands[self._pick(scores_i, cands)])
        if num == 0:
            return node, ()
        if sharing:
            return node, (bs.best_fit_gpu(c.gpu_left[node], milli),)
        return node, tuple(bs.whole_gpus(c.gpu_left[node], num))


def run(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], policy: PolicyName, target: TargetWorkload,
        rng: np.random.Generator, rank: IntArray | None = None, options: NewOptions | None = None,
        policy_target: TargetWorkload | None = None, chooser_cls: type[Chooser] = Chooser) -> RunLog:
    """Try every pod once, in order; log allocation and fragmentation after each.

    ``rank`` (a permutation of the nodes) breaks ties among equally scored nodes: the lowest rank wins, as in
    the FGD simulator (its scheduler picks the lexicographically smallest node name, and node names carry a
    per-seed random prefix). Without ``rank`` ties are broken uniformly at random.

    ``chooser_cls`` lets a study substitute its own decisions (``bench/placement_limits.py``); a chooser that
    returns node -1 declines the pod, which then counts as failed. The shipped policies never decline a pod
    that fits.
    """
    c = FastCluster(nodes)
    chooser = chooser_cls(policy, c, policy_target or target, rng, rank, options)
    log_access = target.access(c.model_names)
    node_frag = fragmentation(c.cpu_left, c.gpu_left, c.model, target, log_access)
    frag_total = float(node_frag.sum())
    idle = c.total_gpu_milli
    used = 0
    arrived = 0
    n = len(pods)
    log = RunLog(np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, np.float64), np.zeros(n, np.int64),
                 np.zeros(n, np.bool_), np.full(n, -1, np.int64), [])
    for i, pod in enumerate(pods):
        total = pod.total_gpu_milli
        arrived += total
        cands = c.candidates(pod)
        gpus: tuple[int, ...] = ()
        node = -1
        if cands.size:
            node, gpus = chooser.choose(cands, pod)
        if node >= 0:
            c.place_pod(node, pod, gpus)
            new = fragmentation(c.cpu_left[node : node + 1], c.gpu_left[node : node + 1], c.model[node : node + 1],
                                target, log_access)
            node_frag[node] = new[0]
            frag_total = float(node_frag.sum())
            used += total
            idle -= total
            log.placed[i] = True
            log.node[i] = node
        log.gpus.append(gpus)
        log.arrived_milli[i] = arrived
        log.used_milli[i] = used
        log.frag_milli[i] = frag_total
        log.idle_milli[i] = idle
    return log
