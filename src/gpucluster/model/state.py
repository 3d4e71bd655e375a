"""Live cluster state kept as a struct of numpy arrays, and the read-only per-cycle snapshot.

Node-level arrays have shape ``[N]``; device-level arrays have shape ``[N, D]`` where ``D`` is the largest
device count of any node (padding slots have ``dev_valid == False`` and zero capacity). Scoring every node
for a pod is then a handful of vectorised expressions over these arrays.

Only :class:`ClusterState` mutates the arrays (``assign`` / ``release`` / node and device changes); every
mutation bumps ``generation`` and the changed node's ``node_generation`` so that caches can recompute just
the nodes that changed, and keeps the capacity facts (free amounts, the usable mask, usable totals) right
itself: :mod:`gpucluster.model.capacity` says what they are and the one change-stamp contract caches use.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt

from gpucluster.model.capacity import Layout, UsableCapacity
from gpucluster.model.device import DeviceSpec
from gpucluster.model.node import NodeSpec
from gpucluster.model.topology import Fabric, TopologyLevel
from gpucluster.model.workload import Pod

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
_STATE_UIDS = itertools.count(1)


class AllocationError(ValueError):
    """An allocation does not fit the node it names (a caller bug or a stale decision)."""


@dataclass(frozen=True, slots=True)
class DeviceGrant:
    """The share of one device given to one container."""

    device_index: int
    """Index of the device inside its node."""
    uuid: str
    vendor: str
    memory_mib: int
    core_milli: int


@dataclass(frozen=True, slots=True)
class Allocation:
    """Everything a bound pod holds on its node."""

    pod_key: str
    node: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[tuple[DeviceGrant, ...], ...] = ()
    """Per container, the device shares it holds."""
    tenant: str = ""
    pod: Pod | None = field(default=None, compare=False)
    init_devices: tuple[tuple[DeviceGrant, ...], ...] = ()
    """Per init container, the device shares it was given (HAMi fits each init container on its own)."""

    @property
    def grants(self) -> Iterator[DeviceGrant]:
        """The app containers' device shares."""
        for per_container in self.devices:
            yield from per_container

    def device_usage(self) -> list[tuple[int, int, int, int]]:
        """What the pod holds per device: ``(device index, memory MiB, core milli, tasks)``, by device index.

        Without init containers that is the sum of the grants (one task each). Init containers run one at a
        time before the app containers, so a device holds the larger of the app containers' sum and the largest
        init container's share, and at least one task (HAMi's ``CollapseInitContainerUsage``)."""
        app: dict[int, list[int]] = {}
        for g in self.grants:
            u = app.setdefault(g.device_index, [0, 0, 0])
            u[0] += g.memory_mib
            u[1] += g.core_milli
            u[2] += 1
        init: dict[int, list[int]] = {}
        for per_container in self.init_devices:
            for g in per_container:
                u = init.setdefault(g.device_index, [0, 0, 1])
                u[0] = max(u[0], g.memory_mib)
                u[1] = max(u[1], g.core_milli)
        out = []
        for j in sorted(app.keys() | init.keys()):
            a, i = app.get(j, [0, 0, 0]), init.get(j, [0, 0, 0])
            out.append((j, max(a[0], i[0]), max(a[1], i[1]), max(a[2], i[2])))
        return out

    @property
    def device_count(self) -> int:
        return sum(len(c) for c in self.devices)

    @property
    def core_milli(self) -> int:
        return sum(g.core_milli for g in self.grants)


class _Interner:
    """Maps strings to small stable integer ids."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.ids: dict[str, int] = {}

    def id(self, name: str) -> int:
        found = self.ids.get(name)
        if found is None:
            found = len(self.names)
            self.ids[name] = found
            self.names.append(name)
        return found


class ClusterState:
    """The cluster's nodes, devices and allocations.

    Not thread-safe: one writer (the scheduling loop or the simulator) at a time.
    """

    def __init__(self, nodes: Sequence[NodeSpec], fabric: Fabric | None = None) -> None:
        self.fabric = fabric or Fabric()
        self.vendors = _Interner()
        self.models = _Interner()
        self.types = _Interner()
        self.racks = _Interner()
        self.leaves = _Interner()
        self.spines = _Interner()
        self.nodes: list[NodeSpec] = []
        self.node_index: dict[str, int] = {}
        self.allocations: dict[str, Allocation] = {}
        self.pods_on_node: list[set[str]] = []
        self.uid = next(_STATE_UIDS)
        """Unique among the states of this process (``id()`` may be reused): a cache keyed by
        ``node_generation`` is valid only for the state it was filled from."""
        self.generation = 0
        """Bumped by every mutation."""
        self.layout_generation = 0
        """Bumped when nodes are added or removed (with ``uid`` and the shape: :attr:`layout`)."""
        self.labels_generation = 0
        """Bumped when a node's labels change in place (:meth:`set_labels`): with :attr:`layout`, the key of every
        cache of which nodes carry which labels (node selectors)."""
        self.capacity = UsableCapacity()
        """Usable devices (all, per model, idle), CPU and memory of the schedulable nodes (kept by ``_touch``)."""
        self.row_model: list[int] = []
        """Per node, the GPU model id all its devices share (-1: none or several)."""
        self.dra_devices = 0
        """Devices a DRA driver publishes (0: every device is HAMi-published and the source checks are skipped)."""
        self.min_core_cap = 1 << 62
        """The smallest compute capacity of any device (a request at least this large may be exclusive)."""
        self._alloc_arrays(len(nodes), max((len(n.devices) for n in nodes), default=0))
        for i, node in enumerate(nodes):
            self._fill_row(i, node)

    # ------------------------------------------------------------------ arrays
    def _alloc_arrays(self, n: int, d: int) -> None:
        self._views: dict[str, npt.NDArray[Any]] = {}
        """Read-only views of the arrays for snapshots (:meth:`readonly_views`); emptied when arrays are replaced."""
        self.cpu_cap: IntArray = np.zeros(n, np.int64)
        self.cpu_used: IntArray = np.zeros(n, np.int64)
        self.mem_cap: IntArray = np.zeros(n, np.int64)
        self.mem_used: IntArray = np.zeros(n, np.int64)
        self.schedulable: BoolArray = np.zeros(n, np.bool_)
        """False for cordoned or removed nodes."""
        self.present: BoolArray = np.zeros(n, np.bool_)
        """False once a node is removed from the cluster (indices stay stable)."""
        self.pod_count: IntArray = np.zeros(n, np.int64)
        self.rack_id: IntArray = np.zeros(n, np.int64)
        self.leaf_id: IntArray = np.zeros(n, np.int64)
        self.spine_id: IntArray = np.zeros(n, np.int64)
        self.node_generation: IntArray = np.zeros(n, np.int64)
        self.dev_count: IntArray = np.zeros(n, np.int64)
        # per-node sums over the node's devices, kept up to date by assign/release (scores read them)
        self.node_core_cap: IntArray = np.zeros(n, np.int64)
        self.node_core_used: IntArray = np.zeros(n, np.int64)
        self.node_dmem_cap: IntArray = np.zeros(n, np.int64)
        self.node_dmem_used: IntArray = np.zeros(n, np.int64)
        self.node_task_cap: IntArray = np.zeros(n, np.int64)
        self.node_tasks: IntArray = np.zeros(n, np.int64)
        self.dev_valid: BoolArray = np.zeros((n, d), np.bool_)
        self.dev_vendor: IntArray = np.full((n, d), -1, np.int64)
        self.dev_model: IntArray = np.full((n, d), -1, np.int64)
        self.dev_type: IntArray = np.full((n, d), -1, np.int64)
        """Interned full type string (``DeviceSpec.type_name`` or the model) the type annotations match."""
        self.dev_mem_cap: IntArray = np.zeros((n, d), np.int64)
        self.dev_mem_used: IntArray = np.zeros((n, d), np.int64)
        self.dev_core_cap: IntArray = np.zeros((n, d), np.int64)
        self.dev_core_used: IntArray = np.zeros((n, d), np.int64)
        self.dev_tasks: IntArray = np.zeros((n, d), np.int64)
        self.dev_max_tasks: IntArray = np.zeros((n, d), np.int64)
        self.dev_healthy: BoolArray = np.zeros((n, d), np.bool_)
        self.dev_cordoned: BoolArray = np.zeros((n, d), np.bool_)
        """Devices excluded from new placements (HAMi ``hami.io/device-cordon``)."""
        self.dev_dra: BoolArray = np.zeros((n, d), np.bool_)
        """Devices a DRA driver publishes (only ResourceClaim requests may get them)."""
        self.dev_hami: BoolArray = np.zeros((n, d), np.bool_)
        """Devices published through HAMi's annotations or a cluster spec (HAMi-style requests may get them)."""
        self.dev_numa: IntArray = np.zeros((n, d), np.int64)
        self.dev_nvlink: IntArray = np.full((n, d), -1, np.int64)
        self.dev_uuid: list[list[str]] = []
        # kept per node by _touch, so that a snapshot does not recompute them over every node
        self.cpu_free: IntArray = np.zeros(n, np.int64)
        self.mem_free: IntArray = np.zeros(n, np.int64)
        self.dev_core_free: IntArray = np.zeros((n, d), np.int64)
        self.dev_mem_free: IntArray = np.zeros((n, d), np.int64)
        self.dev_live: BoolArray = np.zeros((n, d), np.bool_)
        """Devices that exist and are healthy (whether or not their node is cordoned)."""
        self.dev_usable: BoolArray = np.zeros((n, d), np.bool_)
        """Devices that exist, are healthy and sit on a schedulable node."""
        self.dev_idle: BoolArray = np.zeros((n, d), np.bool_)
        """Usable devices that hold no task and no compute (whole and free)."""
        self.node_idle: IntArray = np.zeros(n, np.int64)
        """Idle (whole, free, usable) devices per node."""
        self.node_usable: IntArray = np.zeros(n, np.int64)
        """Usable devices per node."""
        self.node_live: BoolArray = np.zeros(n, np.bool_)
        """Present and schedulable, as of the node's last change (its CPU and memory count in the totals)."""

    _NODE_ARRAYS = (
        "cpu_cap", "cpu_used", "mem_cap", "mem_used", "schedulable", "present", "pod_count", "rack_id",
        "leaf_id", "spine_id", "node_generation", "dev_count", "node_core_cap", "node_core_used",
        "node_dmem_cap", "node_dmem_used", "node_task_cap", "node_tasks", "cpu_free", "mem_free", "node_idle",
        "node_usable", "node_live",
    )
    _DEV_ARRAYS = (
        "dev_valid", "dev_vendor", "dev_model", "dev_type", "dev_mem_cap", "dev_mem_used", "dev_core_cap",
        "dev_core_used", "dev_tasks", "dev_max_tasks", "dev_healthy", "dev_numa", "dev_nvlink", "dev_cordoned",
        "dev_dra", "dev_hami",
        "dev_core_free", "dev_mem_free", "dev_live", "dev_usable", "dev_idle",
    )

    def _grow(self, need_devices: int) -> None:
        """Append one node row (and widen the device axis when a node brings more devices)."""
        d_old = self.dev_valid.shape[1]
        d_new = max(d_old, need_devices)
        self._views = {}
        for name in self._NODE_ARRAYS:
            arr = getattr(self, name)
            setattr(self, name, np.concatenate([arr, np.zeros(1, arr.dtype)]))
        for name in self._DEV_ARRAYS:
            arr = getattr(self, name)
            fill = -1 if name in ("dev_vendor", "dev_model", "dev_type", "dev_nvlink") else 0
            grown = np.full((arr.shape[0] + 1, d_new), fill, arr.dtype)
            grown[: arr.shape[0], :d_old] = arr
            setattr(self, name, grown)

    # ------------------------------------------------------------------ nodes
    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def device_slots(self) -> int:
        return int(self.dev_valid.shape[1])

    @property
    def layout(self) -> Layout:
        """The key of every cache of this state (:mod:`gpucluster.model.capacity`): another state, a node added
        or removed, or a new GPU model invalidates it."""
        return (self.uid, self.layout_generation, len(self.nodes), int(self.dev_valid.shape[1]),
                len(self.models.names))

    def add_node(self, node: NodeSpec) -> int:
        """Add a node (elastic scale-up); returns its index."""
        self._grow(len(node.devices))
        i = len(self.nodes)
        self._fill_row(i, node)
        self.layout_generation += 1
        return i

    def _fill_row(self, i: int, node: NodeSpec) -> None:
        if node.name in self.node_index:
            raise ValueError(f"node {node.name!r} already exists")
        self.nodes.append(node)
        self.node_index[node.name] = i
        self.pods_on_node.append(set())
        self.cpu_cap[i] = node.cpu_milli
        self.mem_cap[i] = node.memory_mib
        self.schedulable[i] = True
        self.present[i] = True
        self.rack_id[i] = self.racks.id(node.rack)
        self.leaf_id[i] = self.leaves.id(node.leaf)
        self.spine_id[i] = self.spines.id(node.spine)
        self.dev_count[i] = len(node.devices)
        self.dev_uuid.append([d.uuid for d in node.devices])
        for dev in node.devices:
            self._set_device(i, dev)
        models = {int(m) for m in self.dev_model[i][self.dev_valid[i]]}
        self.row_model.append(models.pop() if len(models) == 1 else -1)
        self._touch(i)

    def _set_device(self, i: int, dev: DeviceSpec) -> None:
        j = dev.index
        self.dev_valid[i, j] = True
        self.dev_vendor[i, j] = self.vendors.id(dev.vendor)
        self.dev_model[i, j] = self.models.id(dev.model)
        self.dev_type[i, j] = self.types.id(dev.type_name or dev.model)
        self.dev_mem_cap[i, j] = dev.memory_mib
        self.dev_core_cap[i, j] = dev.core_milli
        self.dev_max_tasks[i, j] = dev.max_tasks
        self.dev_healthy[i, j] = dev.healthy
        self.dev_cordoned[i, j] = dev.cordoned
        self.dev_dra[i, j] = bool(dev.dra)
        self.dev_hami[i, j] = dev.hami
        if dev.dra:
            self.dra_devices += 1
        self.dev_numa[i, j] = dev.numa
        self.dev_nvlink[i, j] = dev.nvlink_domain
        self.node_core_cap[i] += dev.core_milli
        self.min_core_cap = min(self.min_core_cap, dev.core_milli)
        self.node_dmem_cap[i] += dev.memory_mib
        self.node_task_cap[i] += dev.max_tasks

    def remove_node(self, name: str) -> list[Allocation]:
        """Remove a node (scale-down or failure); returns the allocations it held, now released."""
        i = self.node_index[name]
        evicted = [self.release(key) for key in sorted(self.pods_on_node[i])]
        self.present[i] = False
        self.schedulable[i] = False
        self.layout_generation += 1
        self._touch(i)
        return evicted

    def set_schedulable(self, name: str, schedulable: bool) -> None:
        """Cordon (False) or uncordon (True) a node."""
        i = self.node_index[name]
        self.schedulable[i] = schedulable and bool(self.present[i])
        self._touch(i)

    def set_labels(self, name: str, labels: Mapping[str, str], pool: str | None = None) -> None:
        """The node's labels (and its ``pool``) are now ``labels``: a Kubernetes node relabelled
        (``kubectl label node``). Its row is kept; caches of label matches see :attr:`labels_generation` move."""
        i = self.node_index[name]
        old = self.nodes[i]
        self.nodes[i] = replace(old, labels=dict(labels), pool=old.pool if pool is None else pool)
        self.labels_generation += 1
        self._touch(i)

    def set_device_health(self, name: str, device_index: int, healthy: bool) -> None:
        i = self.node_index[name]
        if not 0 <= device_index < self.dev_count[i]:
            raise IndexError(f"node {name} has no device {device_index}")
        self.dev_healthy[i, device_index] = healthy
        self._touch(i)

    def node_spec(self, name: str) -> NodeSpec:
        return self.nodes[self.node_index[name]]

    def _touch(self, i: int) -> None:
        """Node ``i`` changed: bump its generation, recompute its capacity rows and move the totals by the
        difference (:mod:`gpucluster.model.capacity`)."""
        self.generation += 1
        self.node_generation[i] = self.generation
        cap = self.capacity
        cap.move(self, i, -1)
        self.cpu_free[i] = self.cpu_cap[i] - self.cpu_used[i]
        self.mem_free[i] = self.mem_cap[i] - self.mem_used[i]
        self.dev_core_free[i] = self.dev_core_cap[i] - self.dev_core_used[i]
        self.dev_mem_free[i] = self.dev_mem_cap[i] - self.dev_mem_used[i]
        live = self.node_live[i] = self.schedulable[i] and self.present[i]
        self.dev_live[i] = self.dev_valid[i] & self.dev_healthy[i]
        usable = self.dev_usable[i] = self.dev_live[i] & live
        idle = self.dev_idle[i] = usable & (self.dev_tasks[i] == 0) & (self.dev_core_used[i] == 0)
        self.node_usable[i] = usable.sum()
        self.node_idle[i] = idle.sum()
        cap.move(self, i, 1)

    # ------------------------------------------------------------------ allocations
    def check_fits(self, alloc: Allocation) -> None:
        """Raise :class:`AllocationError` unless ``alloc`` fits its node right now."""
        i = self.node_index.get(alloc.node)
        if i is None:
            raise AllocationError(f"{alloc.pod_key}: unknown node {alloc.node!r}")
        if not self.present[i]:
            raise AllocationError(f"{alloc.pod_key}: node {alloc.node} is not in the cluster")
        if alloc.pod_key in self.allocations:
            raise AllocationError(f"{alloc.pod_key}: already allocated on {self.allocations[alloc.pod_key].node}")
        if self.cpu_used[i] + alloc.cpu_milli > self.cpu_cap[i]:
            raise AllocationError(f"{alloc.pod_key}: CPU over capacity on {alloc.node}")
        if self.mem_used[i] + alloc.memory_mib > self.mem_cap[i]:
            raise AllocationError(f"{alloc.pod_key}: memory over capacity on {alloc.node}")
        for j, mem, core, tasks in alloc.device_usage():
            if not 0 <= j < self.dev_count[i]:
                raise AllocationError(f"{alloc.pod_key}: node {alloc.node} has no device {j}")
            if self.dev_mem_used[i, j] + mem > self.dev_mem_cap[i, j]:
                raise AllocationError(f"{alloc.pod_key}: device {j} on {alloc.node} over memory")
            if self.dev_core_used[i, j] + core > self.dev_core_cap[i, j]:
                raise AllocationError(f"{alloc.pod_key}: device {j} on {alloc.node} over cores")
            if self.dev_tasks[i, j] + tasks > self.dev_max_tasks[i, j]:
                raise AllocationError(f"{alloc.pod_key}: device {j} on {alloc.node} over its task limit")

    def assign(self, alloc: Allocation) -> None:
        """Record a pod's allocation; raises :class:`AllocationError` if it does not fit."""
        self.check_fits(alloc)
        i = self.node_index[alloc.node]
        self.cpu_used[i] += alloc.cpu_milli
        self.mem_used[i] += alloc.memory_mib
        self.pod_count[i] += 1
        self._book(i, alloc, 1)
        self.allocations[alloc.pod_key] = alloc
        self.pods_on_node[i].add(alloc.pod_key)
        self._touch(i)

    def release(self, pod_key: str) -> Allocation:
        """Free a pod's allocation; raises ``KeyError`` if the pod holds nothing."""
        alloc = self.allocations.pop(pod_key)
        i = self.node_index[alloc.node]
        self.cpu_used[i] -= alloc.cpu_milli
        self.mem_used[i] -= alloc.memory_mib
        self.pod_count[i] -= 1
        self._book(i, alloc, -1)
        self.pods_on_node[i].discard(pod_key)
        self._touch(i)
        return alloc

    def _book(self, i: int, alloc: Allocation, sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) what ``alloc`` holds on node ``i``'s devices."""
        if not alloc.init_devices:  # the common case, without building the per-device summary
            for g in alloc.grants:
                self._book_device(i, g.device_index, sign * g.memory_mib, sign * g.core_milli, sign)
            return
        for j, mem, core, tasks in alloc.device_usage():
            self._book_device(i, j, sign * mem, sign * core, sign * tasks)

    def _book_device(self, i: int, j: int, mem: int, core: int, tasks: int) -> None:
        self.dev_mem_used[i, j] += mem
        self.dev_core_used[i, j] += core
        self.dev_tasks[i, j] += tasks
        self.node_dmem_used[i] += mem
        self.node_core_used[i] += core
        self.node_tasks[i] += tasks

    def allocations_on(self, name: str) -> list[Allocation]:
        return [self.allocations[k] for k in sorted(self.pods_on_node[self.node_index[name]])]

    # ------------------------------------------------------------------ views
    def snapshot(self) -> Snapshot:
        return Snapshot(self)

    def __getstate__(self) -> dict[str, Any]:
        """Pickled or deep-copied without the cached views: they would be copies, not views of the new arrays."""
        out = dict(self.__dict__)
        out["_views"] = {}
        return out

    def readonly_views(self) -> dict[str, npt.NDArray[Any]]:
        """Array name -> a read-only view of it, made once while the arrays stay the same objects (only
        :meth:`add_node` replaces them): every snapshot shares them."""
        if not self._views:
            self._views = {name: _readonly(getattr(self, name)) for name in (*self._NODE_ARRAYS, *self._DEV_ARRAYS)}
        return self._views

    def topology_level(self, a: int, b: int, dev_a: int = -1, dev_b: int = -1) -> TopologyLevel:
        """How far apart two placements are (node indices, optional device indices)."""
        if a == b:
            if dev_a >= 0 and dev_b >= 0:
                link_a, link_b = self.dev_nvlink[a, dev_a], self.dev_nvlink[b, dev_b]
                if link_a >= 0 and link_a == link_b:
                    return TopologyLevel.NVLINK
                return TopologyLevel.NODE
            return TopologyLevel.NVLINK
        if self.leaf_id[a] == self.leaf_id[b]:
            return TopologyLevel.LEAF
        if self.spine_id[a] == self.spine_id[b]:
            return TopologyLevel.SPINE
        return TopologyLevel.CORE

    def totals(self) -> dict[str, int]:
        """Cluster-wide capacity and usage (present nodes only)."""
        p = self.present
        valid = self.dev_valid & p[:, None]
        return {
            "nodes": int(p.sum()),
            "devices": int(valid.sum()),
            "cpu_milli": int(self.cpu_cap[p].sum()),
            "cpu_used_milli": int(self.cpu_used[p].sum()),
            "memory_mib": int(self.mem_cap[p].sum()),
            "memory_used_mib": int(self.mem_used[p].sum()),
            "core_milli": int(self.dev_core_cap[valid].sum()),
            "core_used_milli": int(self.dev_core_used[valid].sum()),
            "device_memory_mib": int(self.dev_mem_cap[valid].sum()),
            "device_memory_used_mib": int(self.dev_mem_used[valid].sum()),
            "pods": len(self.allocations),
        }


_A = TypeVar("_A", bound="np.ndarray[Any, Any]")


def _readonly(a: _A) -> _A:
    v = a.view()
    v.flags.writeable = False
    return v


class Snapshot:
    """A read-only view of a :class:`ClusterState` for one scheduling cycle.

    The arrays are views (no copy) with the write flag off; a snapshot is valid until its state's next
    mutation (``stale`` tells). The free-resource arrays are the state's own, kept per node as it changes.
    """

    def __init__(self, state: ClusterState) -> None:
        self._state = state
        self.state_uid = state.uid
        """The viewed state's :attr:`ClusterState.uid`."""
        self.layout = state.layout
        """The viewed state's :attr:`ClusterState.layout` (the key of caches)."""
        self.generation = state.generation
        self.nodes: Sequence[NodeSpec] = state.nodes
        self.labels_generation = state.labels_generation
        """The viewed state's :attr:`ClusterState.labels_generation` (with ``layout``, the key of label caches)."""
        self.node_index = state.node_index
        self.vendors: Sequence[str] = state.vendors.names
        self.vendor_ids = state.vendors.ids
        self.models: Sequence[str] = state.models.names
        self.types: Sequence[str] = state.types.names
        self.fabric = state.fabric
        v = self._views = state.readonly_views()
        self.cpu_cap = v["cpu_cap"]
        self.cpu_used = v["cpu_used"]
        self.mem_cap = v["mem_cap"]
        self.mem_used = v["mem_used"]
        self.schedulable = v["schedulable"]
        self.present = v["present"]
        self.pod_count = v["pod_count"]
        self.rack_id = v["rack_id"]
        self.leaf_id = v["leaf_id"]
        self.spine_id = v["spine_id"]
        self.node_generation = v["node_generation"]
        self.dev_count = v["dev_count"]
        self.node_core_cap = v["node_core_cap"]
        self.node_core_used = v["node_core_used"]
        self.node_dmem_cap = v["node_dmem_cap"]
        self.node_dmem_used = v["node_dmem_used"]
        self.node_task_cap = v["node_task_cap"]
        self.node_tasks = v["node_tasks"]
        self.dev_valid = v["dev_valid"]
        self.dev_vendor = v["dev_vendor"]
        self.dev_model = v["dev_model"]
        self.dev_type = v["dev_type"]
        self.dev_mem_cap = v["dev_mem_cap"]
        self.dev_mem_used = v["dev_mem_used"]
        self.dev_core_cap = v["dev_core_cap"]
        self.dev_core_used = v["dev_core_used"]
        self.dev_tasks = v["dev_tasks"]
        self.dev_max_tasks = v["dev_max_tasks"]
        self.dev_healthy = v["dev_healthy"]
        self.dev_cordoned = v["dev_cordoned"]
        self.dev_dra = v["dev_dra"]
        self.dev_hami = v["dev_hami"]
        self.dra_devices = state.dra_devices
        self.dev_numa = v["dev_numa"]
        self.dev_nvlink = v["dev_nvlink"]
        self.dev_uuid: Sequence[Sequence[str]] = state.dev_uuid
        self.min_core_cap = state.min_core_cap

    @property
    def stale(self) -> bool:
        return self._state.generation != self.generation

    @property
    def n_nodes(self) -> int:
        return len(self.nodes)

    @property
    def device_slots(self) -> int:
        return int(self.dev_valid.shape[1])

    @property
    def cpu_free(self) -> IntArray:
        return self._views["cpu_free"]

    @property
    def mem_free(self) -> IntArray:
        return self._views["mem_free"]

    @property
    def dev_core_free(self) -> IntArray:
        return self._views["dev_core_free"]

    @property
    def dev_mem_free(self) -> IntArray:
        return self._views["dev_mem_free"]

    @property
    def dev_usable(self) -> BoolArray:
        """Devices that exist, are healthy and sit on a schedulable node."""
        return self._views["dev_usable"]

    @property
    def dev_live(self) -> BoolArray:
        """Devices that exist and are healthy (cordoned or not)."""
        return self._views["dev_live"]

    @property
    def dev_idle(self) -> BoolArray:
        """Usable devices holding nothing (whole and free)."""
        return self._views["dev_idle"]

    @property
    def node_idle(self) -> IntArray:
        """Idle devices per node."""
        return self._views["node_idle"]

    @property
    def node_usable(self) -> IntArray:
        """Usable devices per node."""
        return self._views["node_usable"]

    @property
    def allocations(self) -> dict[str, Allocation]:
        return self._state.allocations

    def pods_on(self, node_index: int) -> set[str]:
        return self._state.pods_on_node[node_index]

    def topology_level(self, a: int, b: int, dev_a: int = -1, dev_b: int = -1) -> TopologyLevel:
        return self._state.topology_level(a, b, dev_a, dev_b)



