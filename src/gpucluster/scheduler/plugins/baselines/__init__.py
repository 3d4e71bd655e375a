"""The FGD paper's baseline placement policies as scheduler plugins.

Score plugins (one per policy, 0..100 integer-valued like the FGD simulator's): ``RandomScore`` (PreScore
picks one feasible node at random; it scores 100, the rest 0), ``DotProductScore``, ``GpuClusteringScore``,
``GpuPackingScore``, ``BestFitScore``. DeviceScore plugins choose the GPU of a sharing pod inside the chosen
node: ``BestFitDevice`` (least milli left that holds it) and ``RandomDevice``; whole-GPU requests take idle
GPUs in index order either way (DeviceFit's tie rule). ``NodeRankTieBreak`` is a Score plugin meant for a tiny
weight: it orders equally scored nodes by a seeded random permutation (the FGD simulator's scheduler picks the
smallest node name, and its node names carry a per-seed random prefix).

The arithmetic lives in :mod:`gpucluster.scheduler.plugins.baselines.scores`, shared with the fast experiment
path so that both make the same decisions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.model import DeviceRequest, Pod, Snapshot
from gpucluster.model.capacity import RowStamps
from gpucluster.scheduler.framework import (
    BoolArray,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    PluginRegistry,
    Status,
)
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args
from gpucluster.scheduler.plugins.baselines import scores as bs
from gpucluster.scheduler.plugins.fragmentation.measure import NodeArrays, pod_shape

__all__ = [
    "BestFitDevice",
    "BestFitScore",
    "DotProductScore",
    "GpuClusteringScore",
    "GpuPackingScore",
    "NodeRankTieBreak",
    "RandomDevice",
    "RandomScore",
    "node_kinds",
    "register",
]


def _view(state: CycleState, snap: Snapshot) -> NodeArrays:
    key = "baselines.view"
    view: NodeArrays | None = state.get(key)
    if view is None:
        view = NodeArrays.from_snapshot(snap)
        state.write(key, view)
    return view


class RandomScore:
    name = "RandomScore"

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        state.write(self.name, int(candidates[self._handle.rng.integers(candidates.size)]))
        return Status.success()

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        chosen = state.read(self.name)
        return np.where(candidates == chosen, 100.0, 0.0)


class DotProductScore:
    name = "DotProductScore"

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        v = _view(state, snap)
        cpu, milli, num, _ = pod_shape(pod)
        gl = v.gpu_left[candidates].sum(axis=1)
        return bs.dotprod_scores(v.cpu_left[candidates], gl, cpu, milli * num).astype(np.float64)


def node_kinds(snap: Snapshot, rows: IntArray) -> IntArray:
    """[len(rows), N_KINDS]: how many GPU pods of each kind run on each node."""
    out = np.zeros((rows.size, bs.N_KINDS), np.int64)
    allocs = snap.allocations
    for r, i in enumerate(rows):
        for key in snap.pods_on(int(i)):
            a = allocs.get(key)
            if a is None or a.pod is None:
                continue
            _, milli, num, _ = pod_shape(a.pod)
            kind = bs.gpu_kind(num, milli)
            if kind is not None:
                out[r, int(kind)] += 1
    return out


class GpuClusteringScore:
    """Keeps per node counts of GPU-pod kinds, recomputed only for nodes whose generation moved (the state's
    change-stamp contract, :class:`gpucluster.model.capacity.RowStamps`)."""

    name = "GpuClusteringScore"

    def __init__(self) -> None:
        self._kinds = np.zeros((0, bs.N_KINDS), np.int64)
        self._stamps = RowStamps()

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        reset, stale = self._stamps.stale(snap, among=candidates)
        if reset:
            self._kinds = np.zeros((snap.n_nodes, bs.N_KINDS), np.int64)
        if stale.size:
            self._kinds[stale] = node_kinds(snap, stale)
            self._stamps.mark(stale)
        v = _view(state, snap)
        _, milli, num, _ = pod_shape(pod)
        gl = v.gpu_left[candidates].sum(axis=1)
        return bs.clustering_scores(gl, self._kinds[candidates], bs.gpu_kind(num, milli)).astype(np.float64)


class GpuPackingScore:
    name = "GpuPackingScore"

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        v = _view(state, snap)
        _, milli, num, _ = pod_shape(pod)
        return bs.packing_scores(v.gpu_left[candidates], v.gpu_count[candidates], milli, num).astype(np.float64)


class BestFitScore:
    name = "BestFitScore"

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        v = _view(state, snap)
        cpu, milli, num, _ = pod_shape(pod)
        gl = v.gpu_left[candidates].sum(axis=1)
        raw = bs.bestfit_raw(v.cpu_left[candidates], gl, cpu, milli * num)
        return bs.minmax_normalise(raw).astype(np.float64)


class NodeRankTieBreak:
    """``100 * (1 - rank / n)`` for a seeded random rank per node index; give it a weight of about 1e-6."""

    name = "NodeRankTieBreak"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._rank = np.zeros(0, np.int64)
        self._score = np.zeros(0, np.float64)

    def rank(self, n: int) -> IntArray:
        if self._rank.size != n:
            self._rank = node_rank(self.seed, n)
            self._score = 100.0 * (1.0 - self._rank / max(n, 1))  # per node, computed once per cluster size
        return self._rank

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        self.rank(snap.n_nodes)
        return self._score[candidates]


def node_rank(seed: int, n: int) -> IntArray:
    """The per-seed node priority used to break ties (lower wins)."""
    return np.random.default_rng([seed, 2]).permutation(n).astype(np.int64)


def _sharing(request: DeviceRequest) -> bool:
    return request.count == 1 and 0 < request.core_milli < bs.MILLI


class BestFitDevice:
    """DeviceScore: the tightest GPU that holds a sharing request scores highest."""

    name = "BestFitDevice"

    def score_devices(self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
                      feasible: BoolArray, taken: IntArray) -> FloatArray:
        if not _sharing(request):
            return np.zeros(snap.device_slots, np.float64)
        left = snap.dev_core_free[node] - taken
        return np.asarray((bs.MILLI - left) / 10.0, np.float64)


class RandomDevice:
    """DeviceScore: a random feasible GPU for a sharing request (100), the rest 0."""

    name = "RandomDevice"

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def score_devices(self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
                      feasible: BoolArray, taken: IntArray) -> FloatArray:
        out = np.zeros(snap.device_slots, np.float64)
        if not _sharing(request):
            return out
        idx = np.flatnonzero(feasible)
        if idx.size == 1:
            out[idx[0]] = 100.0
        elif idx.size > 1:
            out[idx[self._handle.rng.integers(idx.size)]] = 100.0
        return out


class _NoArgs(PluginArgs):
    pass


class _TieArgs(PluginArgs):
    seed: int = 0
    """Seed of the node permutation."""


def register(reg: PluginRegistry) -> None:
    def simple(cls: type[Any]) -> Any:
        def factory(args: Mapping[str, Any], handle: Handle) -> Any:
            parse_args(_NoArgs, cls.name, args)
            return cls()

        return factory

    def with_handle(cls: type[Any]) -> Any:
        def factory(args: Mapping[str, Any], handle: Handle) -> Any:
            parse_args(_NoArgs, cls.name, args)
            return cls(handle)

        return factory

    reg.register(RandomScore.name, with_handle(RandomScore))
    reg.register(DotProductScore.name, simple(DotProductScore))
    reg.register(GpuClusteringScore.name, simple(GpuClusteringScore))
    reg.register(GpuPackingScore.name, simple(GpuPackingScore))
    reg.register(BestFitScore.name, simple(BestFitScore))
    reg.register(BestFitDevice.name, simple(BestFitDevice))
    reg.register(RandomDevice.name, with_handle(RandomDevice))
    reg.register(NodeRankTieBreak.name,
                 lambda args, handle: NodeRankTieBreak(parse_args(_TieArgs, NodeRankTieBreak.name, args).seed))
