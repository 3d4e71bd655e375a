"""Capacity facts of a :class:`~gpucluster.model.ClusterState`, kept by the state itself, and the one change-stamp
contract every cache of them uses.

**The owner.** Only the state mutates its arrays, and every mutation ends in ``ClusterState._touch(node)``, which
recomputes that node's derived rows and moves the cluster-wide totals here by the row's difference. So whoever
changes the cluster (the scheduler binding a pod, the simulator failing a node, a remediation target cordoning
one, the Kubernetes informer rebuilding the state) leaves every figure below right; nobody tells anyone that
something changed. Per node, on the state (and its snapshots):

* ``cpu_free``, ``mem_free`` (``[N]``), ``dev_core_free``, ``dev_mem_free`` (``[N, D]``): capacity less usage;
* ``dev_live`` (``[N, D]``): the device exists and is healthy (it counts towards measures even when cordoned);
* ``dev_usable``: live and on a schedulable node (``schedulable`` is False for removed nodes too): the one
  usable-device mask;
* ``dev_idle``: usable and holding no task and no compute (a whole device is free); ``node_idle`` /
  ``node_usable`` (``[N]``): how many per node.

Cluster-wide, :class:`UsableCapacity` (``state.capacity``): usable devices in all and per GPU model, idle devices,
CPU and memory of the schedulable nodes (what the job engine's totals, fair shares and the free-GPU pre-check
read).

**The change stamp.** A cache of anything computed from a state is keyed by :attr:`ClusterState.layout`
(``(uid, layout_generation, nodes, device slots, GPU models)``: another state, a node added or removed, a new GPU
model) and guarded per node by ``node_generation`` (bumped by every change of that node). :class:`RowStamps` is
that contract, written once: it says which rows to recompute (all of them after a layout change). A cache of a
whole-cluster figure keys on ``(layout, generation)`` (:func:`state_stamp`), or on ``layout`` alone when it
depends only on which nodes exist (``never_fits``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from gpucluster.model.state import ClusterState

IntArray = npt.NDArray[np.int64]
Layout = tuple[int, int, int, int, int]
"""``(state uid, layout generation, nodes, device slots, GPU models)``."""


class Stamped(Protocol):
    """What a cache reads to know what changed: a :class:`ClusterState` or its :class:`Snapshot`."""

    @property
    def layout(self) -> Layout: ...

    @property
    def node_generation(self) -> IntArray: ...


class UsableCapacity:
    """Cluster-wide usable capacity of one state, moved by each node's difference on every ``_touch``."""

    __slots__ = ("cpu_milli", "devices", "idle_devices", "memory_mib", "usable_by_model")

    def __init__(self) -> None:
        self.devices = 0
        """Usable devices (healthy, on schedulable nodes)."""
        self.idle_devices = 0
        """Usable devices holding nothing (a whole device is free)."""
        self.cpu_milli = 0
        """CPU of the schedulable nodes."""
        self.memory_mib = 0
        """Host memory of the schedulable nodes."""
        self.usable_by_model: IntArray = np.zeros(0, np.int64)
        """Usable devices per GPU model id (``state.models``)."""

    def move(self, state: ClusterState, i: int, sign: int) -> None:
        """Add (``sign`` 1) or take out (-1) node ``i``'s contribution as its derived rows say now."""
        self.devices += sign * int(state.node_usable[i])
        self.idle_devices += sign * int(state.node_idle[i])
        if state.node_live[i]:
            self.cpu_milli += sign * int(state.cpu_cap[i])
            self.memory_mib += sign * int(state.mem_cap[i])
        usable = int(state.node_usable[i])
        if usable:
            if self.usable_by_model.size < len(state.models.names):
                grown = np.zeros(len(state.models.names), np.int64)
                grown[: self.usable_by_model.size] = self.usable_by_model
                self.usable_by_model = grown
            model = state.row_model[i]
            if model >= 0:  # every device of the node is of one model (the common case)
                self.usable_by_model[model] += sign * usable
            else:
                np.add.at(self.usable_by_model, state.dev_model[i][state.dev_usable[i]], sign)

    def by_model(self, names: list[str]) -> dict[str, int]:
        """Usable devices per GPU model name (models with none left out)."""
        return {names[m]: int(n) for m, n in enumerate(self.usable_by_model.tolist()) if n}

    def as_dict(self) -> dict[str, Any]:
        return {"devices": self.devices, "idle_devices": self.idle_devices, "cpu_milli": self.cpu_milli,
                "memory_mib": self.memory_mib, "usable_by_model": self.usable_by_model.tolist()}


def state_stamp(state: ClusterState) -> tuple[Layout, int]:
    """The key of a cache of a whole-cluster figure: valid while neither the layout nor any node changed."""
    return state.layout, state.generation


class RowStamps:
    """Per-node stamps of a cache (see the module docstring): which rows must be recomputed.

    ::

        reset, rows = stamps.stale(snap)        # reset: the layout changed, size the cache again
        cache[rows] = compute(rows)
        stamps.mark(rows)                       # at the generations stale() saw
    """

    __slots__ = ("_gen", "_stamp", "layout")

    def __init__(self) -> None:
        self.layout: Layout | None = None
        self._stamp: IntArray = np.zeros(0, np.int64)
        self._gen: IntArray = np.zeros(0, np.int64)

    def stale(self, snap: Stamped, among: IntArray | None = None) -> tuple[bool, IntArray]:
        """(whether the layout changed, the rows among ``among`` (all nodes by default) to recompute)."""
        gen = np.asarray(snap.node_generation)
        self._gen = gen
        reset = snap.layout != self.layout
        if reset:
            self.layout = snap.layout
            self._stamp = np.full(gen.size, -1, np.int64)
        if among is None:
            return reset, np.flatnonzero(self._stamp != gen)
        return reset, among[self._stamp[among] != gen[among]]

    def mark(self, rows: IntArray | slice) -> None:
        """``rows`` are computed at the generations the last :meth:`stale` saw."""
        self._stamp[rows] = self._gen[rows]
