"""GPU fragmentation: the measure (:mod:`.measure`) and the FGD placement plugin.

``FGDScore`` (Score + DeviceScore, plus a PreFilter that only observes pods) scores each feasible node by how
much placing the pod there lowers the node's fragmentation against a target workload:
``int(sigmoid((frag_before - frag_after) / 1000) * 100)``; for a sharing pod it tries every GPU that holds it
and keeps the best (that GPU is then the one DeviceScore prefers). The target workload is given in the
plugin's args (``target``: shapes with weights) or, without it, learned online from the pods seen so far
(rebuilt every ``refresh`` pods). Scores are cached per pod shape and node and recomputed only for nodes whose
``node_generation`` moved.

``StrandingFGDScore`` (policy ``stranding-fgd``, the scheduler's default) is FGD whose fragmentation drop also
counts the GPU capacity a placement strands by CPU and the scarce-model GPUs an unconstrained pod takes
(:class:`~.measure.Stranding`); ``docs/placement-policy.md`` has the reasoning and the measurements.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from gpucluster.model import DeviceRequest, Pod, Snapshot
from gpucluster.model.capacity import Layout
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
from gpucluster.scheduler.plugins.fragmentation.incremental import IncrementalScores, NodeMirror, Scorer
from gpucluster.scheduler.plugins.fragmentation.measure import (
    MILLI,
    Drops,
    NodeArrays,
    Shape,
    Stranding,
    TargetWorkload,
    build_target_workload,
    cpu_per_gpu_milli,
    fgd_drops,
    fgd_scores,
    fragmentation,
    model_capacity,
    model_scarcity,
    node_fragmentation,
    placement_diff,
    pod_shape,
    target_from_counts,
)

__all__ = [
    "FGDScore",
    "NodeArrays",
    "Shape",
    "StrandingFGDScore",
    "TargetWorkload",
    "build_target_workload",
    "fgd_scores",
    "fragmentation",
    "node_fragmentation",
    "pod_shape",
    "register",
]


class TargetShapeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    cpu_milli: int = Field(ge=0)
    gpu_milli: int = Field(ge=0, le=MILLI)
    """GPU milli per GPU (0 for CPU-only shapes)."""
    gpu_count: int = Field(ge=0)
    gpu_models: str = ""
    """Allowed models, ``|``-separated (empty = any)."""
    weight: float = Field(gt=0)


class FGDArgs(PluginArgs):
    target: list[TargetShapeArgs] | None = None
    """Fixed target workload; None = learn it online from the pods seen."""
    coverage: float = Field(default=0.95, gt=0, le=1)
    """Share of pods the learned target's most frequent shapes must cover."""
    refresh: int = Field(default=256, ge=1)
    """Rebuild the learned target every ``refresh`` observed pods."""
    incremental: bool = True
    """Keep scores across rebuilds of a learned target where a bound proves them unchanged (same decisions,
    less work; ``fragmentation/incremental.py``). False recomputes every node after each rebuild."""


class StrandingFGDArgs(FGDArgs):
    cpu_weight: float = Field(default=1.0, ge=0)
    """Weight of the CPU-stranding term (GPU milli a node can no longer feed with CPU)."""
    scarcity_weight: float = Field(default=1.0, ge=0)
    """Weight of the model-scarcity term (scarce-model GPU milli taken by a pod that could run elsewhere)."""


def target_from_args(shapes: list[TargetShapeArgs]) -> TargetWorkload:
    w = np.array([s.weight for s in shapes], np.float64)
    return TargetWorkload(tuple((s.cpu_milli, s.gpu_milli, s.gpu_count, s.gpu_models) for s in shapes), w / w.sum())


@dataclass(frozen=True, slots=True)
class _Chosen:
    """Per scored candidate (sorted node indices), the GPU a sharing pod would take there."""

    candidates: IntArray
    gpus: IntArray

    def gpu_on(self, node: int) -> int:
        k = int(np.searchsorted(self.candidates, node))
        return int(self.gpus[k]) if k < self.candidates.size and self.candidates[k] == node else -1


class FGDScore:
    name = "FGDScore"

    def __init__(self, target: TargetWorkload | None, coverage: float = 0.95, refresh: int = 256,
                 incremental: bool = True) -> None:
        self.fixed = target is not None
        self.target = target
        self.coverage = coverage
        self.refresh = refresh
        self.incremental = incremental
        self._counts: Counter[Shape] = Counter()
        self._seen = 0
        self._cache = IncrementalScores(0, False)
        self._nodes = NodeMirror()
        self._target_changed = True
        self._access: BoolArray | None = None
        self._layout: Layout | None = None
        """The layout of the state the cached scores were computed on (``Snapshot.layout``)."""
        self.stranding: Stranding | None = None

    def _stranding(self, target: TargetWorkload, view: NodeArrays) -> Stranding | None:
        """The extra terms of the drop (none for plain FGD)."""
        return None

    # ------------------------------------------------------------------------------ online target
    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        if not self.fixed:
            self._counts[pod_shape(pod)] += 1
            self._seen += 1
            if self.target is None or self._seen % self.refresh == 0:
                self.target = target_from_counts(self._counts, self.coverage)
                self._target_changed = True
        return Status.success()

    def _new_cache(self, snap: Snapshot) -> IncrementalScores:
        return IncrementalScores(snap.n_nodes, bounds=self.incremental and not self.fixed)

    def _prepare(self, snap: Snapshot, view: NodeArrays) -> None:
        assert self.target is not None
        if self._layout != snap.layout:
            self._cache = self._new_cache(snap)
            self._layout = snap.layout
            self._target_changed = True
        if self._target_changed:
            self._target_changed = False
            models = list(snap.models)
            if not self._cache.set_target(self.target, models):
                return
            if not self.incremental:  # the straightforward way: forget every score when the target moves
                self._cache = self._new_cache(snap)
                self._cache.set_target(self.target, models)
            self._access = self.target.access(models)
            self.stranding = self._stranding(self.target, view)

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        if self.target is None:
            self.target = build_target_workload([pod_shape(pod)], self.coverage)
            self._target_changed = True
        view = self._nodes.sync(snap)
        self._prepare(snap, view)
        assert self._access is not None
        target, access, stranding, universe = self.target, self._access, self.stranding, self._cache.universe
        cpu, milli, num, models = pod_shape(pod)
        any_model = not models
        idle = self._nodes.idle

        def compute(rows: IntArray) -> Drops:
            return fgd_drops(view, rows, cpu, milli, num, target, access, stranding=stranding, any_model=any_model,
                             universe=universe)

        def inputs(rows: IntArray) -> tuple[FloatArray | None, FloatArray]:
            gain = (stranding.gain(view.cpu_left[rows], idle[rows], view.model[rows], cpu, milli * num, any_model)
                    if stranding is not None else None)
            return gain, idle[rows].astype(np.float64)

        def complete(rows: IntArray, gpus: IntArray, shapes: TargetWorkload, acc: BoolArray) -> FloatArray:
            return placement_diff(view, rows, gpus, cpu, milli, num, shapes, acc)

        sharing = num == 1 and 0 < milli < MILLI
        scorer = Scorer(compute, sharing, inputs, complete) if universe is not None else Scorer(compute, sharing)
        scores, gpus = self._cache.lookup((cpu, milli, num, any_model), candidates,
                                          np.asarray(snap.node_generation), scorer, self._nodes.group)
        state.write(self.name, _Chosen(candidates, gpus))
        return scores

    def score_devices(self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
                      feasible: BoolArray, taken: IntArray) -> FloatArray:
        out = np.zeros(snap.device_slots, np.float64)
        if request.count == 1 and 0 < request.core_milli < MILLI:
            chosen: _Chosen | None = state.get(self.name)
            j = chosen.gpu_on(node) if chosen is not None else -1
            if j >= 0 and feasible[j]:
                out[j] = 100.0
        return out


class StrandingFGDScore(FGDScore):
    """FGD + CPU stranding + model scarcity: the ``stranding-fgd`` policy (the scheduler's default)."""

    name = "StrandingFGDScore"

    def __init__(self, target: TargetWorkload | None, coverage: float = 0.95, refresh: int = 256,
                 cpu_weight: float = 1.0, scarcity_weight: float = 1.0, incremental: bool = True) -> None:
        super().__init__(target, coverage, refresh, incremental)
        self.cpu_weight = cpu_weight
        self.scarcity_weight = scarcity_weight

    def _stranding(self, target: TargetWorkload, view: NodeArrays) -> Stranding | None:
        scarcity = model_scarcity(target, view.model_names, model_capacity(view))
        return Stranding(cpu_per_gpu_milli(target), scarcity, self.cpu_weight, self.scarcity_weight)


def new_stranding_fgd_score(args: Mapping[str, Any], handle: Handle) -> StrandingFGDScore:
    a = parse_args(StrandingFGDArgs, StrandingFGDScore.name, args)
    return StrandingFGDScore(target_from_args(a.target) if a.target else None, a.coverage, a.refresh,
                             a.cpu_weight, a.scarcity_weight, a.incremental)


def new_fgd_score(args: Mapping[str, Any], handle: Handle) -> FGDScore:
    a = parse_args(FGDArgs, FGDScore.name, args)
    return FGDScore(target_from_args(a.target) if a.target else None, a.coverage, a.refresh, a.incremental)


def register(reg: PluginRegistry) -> None:
    reg.register(FGDScore.name, new_fgd_score)
    reg.register(StrandingFGDScore.name, new_stranding_fgd_score)
