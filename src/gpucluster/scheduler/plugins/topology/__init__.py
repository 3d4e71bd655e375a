"""Topology-aware placement: keep a job's tasks (a gang) as close as the fabric allows.

Levels, closest first: one node (one NVLink domain), one leaf, one spine group, anywhere. The first member of
a gang goes to the lowest level that can hold the whole gang, best fit (Slurm's topology/tree: the fullest
leaf that still fits, so big free leaves stay whole); later members are scored by their distance to the
members already placed. Inside a node, DeviceFit keeps a multi-GPU request in one NVLink domain.

Constraints come from the plugin's ``mode`` (``soft`` scores only; ``hard`` also filters) or per pod from
the annotations ``gpucluster.io/topology-required`` / ``gpucluster.io/topology-preferred`` with a level
name (``node``, ``leaf``, ``spine``). A hard constraint rejects nodes with ``TopologyConstraint``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from gpucluster.model import Allocation, Pod, Snapshot, TopologyLevel
from gpucluster.model.labels import JOB_GPUS_ANNOTATION, TOPOLOGY_REQUIRED_ANNOTATION
from gpucluster.scheduler.framework import (
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    PluginRegistry,
    Reason,
    ReasonArray,
    Status,
)
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "Topology"
_LEVELS = {"node": TopologyLevel.NODE, "leaf": TopologyLevel.LEAF, "spine": TopologyLevel.SPINE}
_MAX_GANGS = 4096


@dataclass(frozen=True, slots=True)
class _Prepared:
    job_gpus: int
    members: tuple[int, ...]
    """Nodes of members already reserved."""
    required: TopologyLevel | None
    free: IntArray
    """[N] free whole devices per node."""


def free_devices_per_node(snap: Snapshot) -> IntArray:
    """Idle (whole, free, usable) devices per node: the state keeps them (``node_idle``)."""
    return np.array(snap.node_idle, np.int64)  # a copy: the cycle keeps it


def job_gpus(pod: Pod) -> int:
    raw = pod.annotations.get(JOB_GPUS_ANNOTATION)
    if raw is not None and raw.isdigit():
        return int(raw)
    return pod.device_count * max(pod.gang_min_member, 1)


class _Args(PluginArgs):
    mode: Literal["soft", "hard"] = "soft"
    """``hard``: a gang that fits under one leaf must stay under one leaf (Filter); ``soft``: score only."""


class Topology:
    name = NAME

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self._placed: OrderedDict[str, list[tuple[str, int]]] = OrderedDict()

    def members(self, gang: str) -> list[int]:
        return [n for _, n in self._placed.get(gang, [])]

    # ------------------------------------------------------------------------------------ prefilter
    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        gpus = job_gpus(pod)
        if gpus <= 1 and not pod.gang:
            return SKIP
        required: TopologyLevel | None = None
        raw = pod.annotations.get(TOPOLOGY_REQUIRED_ANNOTATION)
        if raw is not None:
            if raw not in _LEVELS:
                return Status.unschedulable(NAME, f"{TOPOLOGY_REQUIRED_ANNOTATION}: unknown level {raw!r}",
                                            unresolvable=True)
            required = _LEVELS[raw]
        state.write(NAME, _Prepared(gpus, tuple(self.members(pod.gang)) if pod.gang else (),
                                    required, free_devices_per_node(snap)))
        return Status.success()

    def _group_ids(self, snap: Snapshot, level: TopologyLevel) -> IntArray:
        if level == TopologyLevel.LEAF:
            return np.asarray(snap.leaf_id, np.int64)
        if level == TopologyLevel.SPINE:
            return np.asarray(snap.spine_id, np.int64)
        return np.arange(snap.n_nodes, dtype=np.int64)

    def _group_free(self, snap: Snapshot, prep: _Prepared, level: TopologyLevel) -> IntArray:
        ids = self._group_ids(snap, level)
        usable = snap.schedulable
        per_group = np.bincount(ids, weights=np.where(usable, prep.free, 0), minlength=int(ids.max()) + 1)
        return np.asarray(per_group[ids], np.int64)

    def _hard_level(self, pod: Pod, prep: _Prepared, snap: Snapshot) -> TopologyLevel | None:
        if prep.required is not None:
            return prep.required
        if self.mode == "hard" and pod.gang:
            # the lowest level that could hold the whole job in an empty cluster
            for level in (TopologyLevel.LEAF, TopologyLevel.SPINE):
                ids = self._group_ids(snap, level)
                cap = np.bincount(ids, weights=np.asarray(snap.dev_valid.sum(axis=1), np.float64))
                if cap.max() >= prep.job_gpus:
                    return level
        return None

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        prep: _Prepared = state.read(NAME)
        out = np.zeros(snap.n_nodes, np.int16)
        level = self._hard_level(pod, prep, snap)
        if level is None:
            return out
        if prep.members:
            ids = self._group_ids(snap, level)
            out[ids != ids[prep.members[0]]] = Reason.TopologyConstraint
        else:
            out[self._group_free(snap, prep, level) < prep.job_gpus] = Reason.TopologyConstraint
        return out

    # ------------------------------------------------------------------------------------ score
    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        return Status.success() if state.get(NAME) is not None else SKIP

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        prep: _Prepared = state.read(NAME)
        if prep.members:
            anchor = prep.members[0]
            same_node = candidates == anchor
            same_leaf = snap.leaf_id[candidates] == snap.leaf_id[anchor]
            same_spine = snap.spine_id[candidates] == snap.spine_id[anchor]
            return np.where(same_node, 100.0, np.where(same_leaf, 80.0, np.where(same_spine, 40.0, 0.0)))
        need = prep.job_gpus
        node_free = prep.free[candidates]
        out = np.zeros(candidates.size, np.float64)
        # lowest level holding the whole job, best fit inside it
        decided = np.zeros(candidates.size, np.bool_)
        for level, base, span in ((TopologyLevel.NODE, 75.0, 25.0), (TopologyLevel.LEAF, 50.0, 25.0),
                                  (TopologyLevel.SPINE, 25.0, 25.0)):
            free = node_free if level == TopologyLevel.NODE else self._group_free(snap, prep, level)[candidates]
            fits = ~decided & (free >= need)
            out[fits] = base + span * need / np.maximum(free[fits], 1)
            decided |= fits
        rest = ~decided
        if rest.any():
            free = self._group_free(snap, prep, TopologyLevel.SPINE)[candidates]
            out[rest] = 25.0 * free[rest] / max(need, 1)
        return out

    # ------------------------------------------------------------------------------------ reserve
    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if pod.gang:
            members = self._placed.setdefault(pod.gang, [])
            self._placed.move_to_end(pod.gang)
            if all(k != pod.key for k, _ in members):
                members.append((pod.key, node))
            while len(self._placed) > _MAX_GANGS:
                self._placed.popitem(last=False)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        self._drop(pod)

    def _drop(self, pod: Pod) -> None:
        members = self._placed.get(pod.gang)
        if members is not None:
            members[:] = [(k, n) for k, n in members if k != pod.key]
            if not members:
                del self._placed[pod.gang]

    # ------------------------------------------------------------------------------------ post-bind
    def post_bind(self, pod: Pod, allocation: Allocation) -> None:
        """A bound member no longer anchors its gang's later members (the gang is whole once it binds)."""
        self._drop(pod)


def new_topology(args: Mapping[str, Any], handle: Handle) -> Topology:
    return Topology(parse_args(_Args, NAME, args).mode)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_topology)
