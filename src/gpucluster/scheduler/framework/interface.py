"""The scheduling phases as narrow protocols (kube-scheduler's names and contracts, vectorised).

Filter and Score work on all nodes at once: Filter returns a reason code per node (``Reason.OK`` = passes),
Score returns one 0..100 score per candidate node. Only the runtime applies weights. Work that is inherently
inside one node (choosing devices on the chosen node) happens in Reserve, on that node alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from gpucluster.model import Allocation, DeviceRequest, Pod, Snapshot
from gpucluster.scheduler.framework.cycle_state import CycleState
from gpucluster.scheduler.framework.status import Status

ReasonArray = npt.NDArray[np.int16]
"""Per node: 0 when the node passes, else a :class:`~gpucluster.scheduler.framework.status.Reason` value."""
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        """Validate the pod and compute what Filter/Score need, once, into ``state``.

        Returns SUCCESS, SKIP (the plugin has nothing to check for this pod: its Filter is not called),
        UNSCHEDULABLE(_AND_UNRESOLVABLE) (the pod cannot be placed anywhere), or ERROR.
        """
        ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        """For every node of ``snap``, 0 if the pod fits as far as this plugin knows, else a reason code.

        Must not mutate anything. The runtime ANDs the plugins' verdicts and keeps, per node, the reason of
        the first plugin that rejected it.
        """
        ...


@runtime_checkable
class FilterExplainer(Plugin, Protocol):
    def explain(self, state: CycleState, pod: Pod, snap: Snapshot, nodes: IntArray) -> ReasonArray:
        """Optional companion of Filter: for the given rejected ``nodes``, a precise reason each.

        Lets Filter stay cheap (one generic code) on the hot path; the runtime calls ``explain`` only when the
        reasons are reported (the pod fits nowhere)."""
        ...


@dataclass(slots=True)
class PostFilterResult:
    status: Status
    nominated_node: int = -1
    victims: list[str] = field(default_factory=list)
    """Pods whose eviction would let the pod fit on ``nominated_node``."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, state: CycleState, pod: Pod, snap: Snapshot, reasons: ReasonArray) -> PostFilterResult:
        """Called only when no node passed Filter (e.g. preemption). Returns SUCCESS with a nominated node and
        victims when evicting them would make room, else UNSCHEDULABLE. Must not evict anything itself."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        """Prepare scoring of ``candidates`` (node indices). SKIP means its Score is not called."""
        ...


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        """One score in 0..100 per candidate (higher is better), unweighted. Must not mutate anything."""
        ...


@runtime_checkable
class DeviceScorePlugin(Plugin, Protocol):
    def score_devices(
        self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
        feasible: BoolArray, taken: IntArray,
    ) -> FloatArray:
        """Score each device slot of ``node`` for one device request (higher is preferred); only entries where
        ``feasible`` is True are read. ``taken`` holds core milli already given to earlier requests of this pod
        on each device. Used by Reserve to choose devices on the chosen node."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        """Claim what the pod needs on ``node`` (e.g. choose devices, write them to ``state.grants``).

        Idempotent. On any later failure ``unreserve`` is called for every Reserve plugin."""
        ...

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        """Undo ``reserve``; idempotent and safe to call when ``reserve`` was not called."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        """SUCCESS to bind now, WAIT to hold the reservation (gangs), UNSCHEDULABLE to reject."""
        ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(self, pod: Pod, allocation: Allocation) -> Status:
        """Prepare binding (e.g. write device annotations). SUCCESS or ERROR."""
        ...


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, pod: Pod, allocation: Allocation) -> Status:
        """Carry out the decision. SUCCESS, SKIP (let the next Bind plugin do it) or ERROR."""
        ...


@runtime_checkable
class BindCheckPlugin(Plugin, Protocol):
    def check_bind(self, pod: Pod, allocation: Allocation) -> Status:
        """Would :meth:`BindPlugin.bind` succeed now? No effect (e.g. a dry-run Binding: the pod still exists,
        is not bound yet, admission allows it). Runs for every member of a group before any member binds, so a
        group that cannot bind whole usually binds nothing. SUCCESS or ERROR."""
        ...


@runtime_checkable
class UnbindPlugin(Plugin, Protocol):
    def unbind(self, pod: Pod, allocation: Allocation) -> Status:
        """Undo this plugin's bind of ``pod`` (its group did not bind whole and is rolled back); after it the
        pod holds nothing and will be scheduled again (or, for a pod of ours, is gone). Idempotent. SUCCESS or
        ERROR (the caller logs it: the pod may stay bound)."""
        ...


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, pod: Pod, allocation: Allocation) -> None:
        """Informational; cannot fail."""
        ...
