"""Device fit: enough devices of the right vendor and model, each with the memory, cores and task slot asked.

Semantics are HAMi v2.10's (its vendors' ``Fit``; ``docs/hami-compatibility.md`` lists where we differ):

* A request for ``count`` devices needs ``count`` *distinct* devices of its vendor on one node.
* Memory per device is ``memory_mib`` or ``memory_pct`` % of that device's schedulable memory (physical x
  overcommit). Cores are core milli (HAMi percent x 10).
* A request for a whole device's cores (100 %) on a device of 100 % is exclusive: the device must have no task.
  A request for 0 cores may not go on a device whose cores are fully taken.
* Each device holds at most ``max_tasks`` tasks (HAMi ``deviceSplitCount``).
* ``use-gputype`` / ``nouse-gputype`` (and Hygon's ``use-dcutype``) match the device's full type string
  (``NVIDIA-A100``, ``DCU-K100_AI``) as case-insensitive substrings; ``use-gpuuuid`` / ``nouse-gpuuuid`` match
  UUIDs exactly; ``nvidia.com/vgpu-mode`` keeps devices whose mode it names. Unhealthy and cordoned
  (``hami.io/device-cordon``) devices take no new pod.
* ``hami.io/gpu-scheduler-policy: mutex``: only devices with no task. ``nvidia.com/numa-bind: true``: all GPUs of
  a request on one NUMA node. ``topology-aware``: among fitting GPUs, the set with the best pair scores.
* Init containers each fit on their own against the node as it is (they run one at a time); the app containers
  fit together. The pod then holds, per device, the larger of the two (see ``Allocation.device_usage``).

Filter checks every request of the pod against all nodes at once (each request on its own; for pods with
several device requests, Reserve then checks them together on the chosen node and the core tries the next
node if they do not fit jointly). Reserve chooses the devices on the chosen node in the order the profile's
DeviceScore plugins prefer (HAMi's order under the binpack/spread policies), keeping a multi-device request
inside one NVLink domain when one can hold it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.devices import DeviceInputError, hami
from gpucluster.model import DeviceConstraints, DeviceGrant, DeviceRequest, Pod, Snapshot
from gpucluster.model.capacity import Layout, RowStamps
from gpucluster.model.resources import CORE_MILLI_PER_DEVICE, VENDOR_NVIDIA
from gpucluster.scheduler.framework import (
    BoolArray,
    CycleState,
    Handle,
    IntArray,
    Reason,
    ReasonArray,
    Status,
)
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "DeviceFit"
TAKEN_KEY = "DeviceFit/taken"
"""CycleState key: ``(core milli, MiB, tasks)`` arrays ([D]) already given to earlier requests of the pod on the
chosen node, for DeviceScore plugins that score usage after them (HAMi's device score does)."""
OPTIONS_KEY = "DeviceFit/options"
"""CycleState key: the pod's :class:`PodOptions`."""

_MAX_COMBINATIONS = 200_000
"""``topology-aware`` with more candidate sets than this keeps the first ones in preference order."""


@dataclass(frozen=True, slots=True)
class PodOptions:
    """The pod's HAMi device-policy annotations, read once per cycle."""

    policy: tuple[str, ...] = ()
    """``hami.io/gpu-scheduler-policy`` tokens (empty: the pod names none)."""
    numa_bind: bool = False
    weights: hami.ScoringWeights = hami.DEFAULT_WEIGHTS

    @property
    def mutex(self) -> bool:
        return hami.POLICY_MUTEX in self.policy

    @property
    def topology(self) -> bool:
        return hami.POLICY_TOPOLOGY in self.policy


def pod_options(pod: Pod) -> PodOptions:
    """Read a pod's HAMi policy annotations (already validated when the pod was parsed)."""
    a = pod.annotations
    policy: tuple[str, ...] = ()
    if hami.GPU_POLICY_ANNOTATION in a:
        policy = hami.parse_gpu_policy(a[hami.GPU_POLICY_ANNOTATION], "gpu policy")
    elif pod.gpu_policy is not None:
        policy = (pod.gpu_policy.value,)
    numa = hami.NUMA_BIND_ANNOTATION in a and hami.parse_bool(a[hami.NUMA_BIND_ANNOTATION], "")
    weights = hami.DEFAULT_WEIGHTS
    if hami.SCORING_WEIGHTS_ANNOTATION in a:
        weights = hami.parse_scoring_weights(a[hami.SCORING_WEIGHTS_ANNOTATION], "weights")
    return PodOptions(policy, numa, weights)


@dataclass(frozen=True, slots=True)
class _Prepared:
    requests: tuple[tuple[int, DeviceRequest], ...]
    vendor_ids: tuple[int, ...]
    init_requests: tuple[tuple[int, DeviceRequest], ...]
    init_vendor_ids: tuple[int, ...]
    allowed: BoolArray | None
    """[N, D] devices the pod's type/UUID/mode annotations allow (None = all)."""
    type_bad: BoolArray | None
    """[N, D] devices excluded by model or mode annotations (to tell type from UUID mismatches)."""
    options: PodOptions
    selection: tuple[Any, ...] = ()
    """The annotations ``allowed`` derives from, as a hashable key (what :class:`_FitCache` keys on)."""

    def all_requests(self) -> Sequence[tuple[DeviceRequest, int]]:
        return [(r, v) for (_, r), v in zip(self.requests + self.init_requests,
                                            self.vendor_ids + self.init_vendor_ids, strict=True)]


def _type_matches(type_string: str, use: Sequence[str], nouse: Sequence[str]) -> bool:
    upper = type_string.upper()
    if use and not any(t.upper() in upper for t in use):
        return False
    return not any(t.upper() in upper for t in nouse)


def _constraints_key(c: DeviceConstraints) -> tuple[Any, ...]:
    return (c.use_types, c.nouse_types, c.use_uuids, c.nouse_uuids,
            tuple(sorted((v, _constraints_key(own)) for v, own in c.per_vendor.items())))


def selection_key(pod: Pod) -> tuple[Any, ...]:
    """What of ``pod`` :func:`allowed_devices` reads, as a hashable key: pods with equal keys are allowed the
    same devices of any node (the masks change only when a node's devices do, i.e. with its generation)."""
    return (_constraints_key(pod.constraints), pod.annotations.get(hami.VGPU_MODE_ANNOTATION))


def allowed_devices(pod: Pod, snap: Snapshot) -> tuple[BoolArray | None, BoolArray | None]:
    """Devices allowed by the pod's model, UUID and mode annotations, and those excluded by model or mode."""
    c = pod.constraints
    mode = pod.annotations.get(hami.VGPU_MODE_ANNOTATION)
    if c.empty and mode is None:
        return None, None
    shape = snap.dev_valid.shape
    type_bad = np.zeros(shape, np.bool_)
    uuid_bad = np.zeros(shape, np.bool_)
    for vid, vendor in enumerate(snap.vendors):
        cv = c.for_vendor(vendor)
        mine = snap.dev_vendor == vid
        if cv.use_types or cv.nouse_types:
            ok = np.array([_type_matches(t, cv.use_types, cv.nouse_types) for t in snap.types] + [True],
                          np.bool_)  # the last slot serves padding (type id -1)
            type_bad |= mine & ~ok[snap.dev_type]
        if cv.use_uuids or cv.nouse_uuids:
            use, nouse = set(cv.use_uuids), set(cv.nouse_uuids)
            for i, uuids in enumerate(snap.dev_uuid):
                for j, u in enumerate(uuids):
                    if mine[i, j] and ((use and u not in use) or u in nouse):
                        uuid_bad[i, j] = True
    if mode is not None:
        for i, node in enumerate(snap.nodes):
            for dev in node.devices:
                if dev.vendor == VENDOR_NVIDIA and dev.mode not in mode:
                    type_bad[i, dev.index] = True
    return ~(type_bad | uuid_bad), type_bad


def _numa_groups(snap: Snapshot, rows: slice | IntArray | int, m: BoolArray, count: int) -> BoolArray:
    """Devices of ``m`` whose NUMA node holds at least ``count`` devices of ``m`` (per row)."""
    numa = snap.dev_numa[rows]
    out = np.zeros(m.shape, np.bool_)
    for v in np.unique(numa[m]):
        in_group = m & (numa == v)
        enough = np.count_nonzero(in_group, axis=-1) >= count
        out |= in_group & np.expand_dims(enough, -1)
    return out


def device_stages(
    snap: Snapshot,
    rows: slice | IntArray | int,
    vendor_id: int,
    request: DeviceRequest,
    allowed: BoolArray | None,
    type_bad: BoolArray | None,
    taken_core: IntArray | None = None,
    taken_mem: IntArray | None = None,
    taken_tasks: IntArray | None = None,
    options: PodOptions | None = None,
) -> list[tuple[Reason, BoolArray]]:
    """Cumulative masks of the devices (rows x D) that pass each check, in order, with the check's reason.

    Checks that cannot reject anything for this request are skipped (no memory asked, one vendor in the
    cluster, a request below a whole device cannot be exclusive), which keeps Filter cheap."""
    opts = options or PodOptions()
    valid = snap.dev_valid[rows]
    if len(snap.vendors) > 1:
        valid = valid & (snap.dev_vendor[rows] == vendor_id)
    if snap.dra_devices:  # a claim's request gets DRA-published devices, a HAMi-style request HAMi-published ones
        valid = valid & (snap.dev_dra[rows] if request.dra else snap.dev_hami[rows])
    stages: list[tuple[Reason, BoolArray]] = [(Reason.InsufficientGPUCount, valid)]
    if request.uuids is not None:
        valid = valid & uuid_mask(snap, rows, request.uuids)
        stages.append((Reason.ClaimDeviceMismatch, valid))
    m = valid & snap.dev_healthy[rows]
    stages.append((Reason.GPUUnhealthy, m))
    m = m & ~snap.dev_cordoned[rows]
    stages.append((Reason.GPUCordoned, m))
    if allowed is not None:
        if type_bad is not None:
            m = m & ~type_bad[rows]
            stages.append((Reason.GPUTypeMismatch, m))
        m = m & allowed[rows]
        stages.append((Reason.GPUUUIDMismatch, m))
    tasks = snap.dev_tasks[rows] if taken_tasks is None else snap.dev_tasks[rows] + taken_tasks
    m = m & (tasks < snap.dev_max_tasks[rows])
    stages.append((Reason.GPUTaskLimit, m))
    if opts.mutex:
        m = m & (tasks == 0)
        stages.append((Reason.GPUExclusiveBusy, m))
    if request.memory_pct or request.memory_mib:
        mem_free = snap.dev_mem_free[rows] if taken_mem is None else snap.dev_mem_free[rows] - taken_mem
        if request.memory_pct is not None:
            m = m & (mem_free >= snap.dev_mem_cap[rows] * request.memory_pct // 100)
        else:
            m = m & (mem_free >= request.memory_mib)
        stages.append((Reason.InsufficientGPUMemory, m))
    core_free = snap.dev_core_free[rows] if taken_core is None else snap.dev_core_free[rows] - taken_core
    need = request.core_milli
    m = m & (core_free > 0) if need == 0 else m & (core_free >= need)
    stages.append((Reason.InsufficientGPUCores, m))
    if need >= CORE_MILLI_PER_DEVICE:
        m = m & ((snap.dev_core_cap[rows] != CORE_MILLI_PER_DEVICE) | (tasks == 0))
        stages.append((Reason.GPUExclusiveBusy, m))
    if opts.numa_bind and request.vendor == VENDOR_NVIDIA and request.count > 1:
        m = _numa_groups(snap, rows, m, request.count)
        stages.append((Reason.NumaConstraint, m))
    return stages


def uuid_mask(snap: Snapshot, rows: slice | IntArray | int, uuids: frozenset[str]) -> BoolArray:
    """Devices (rows x D) whose UUID is in ``uuids``."""
    d = snap.device_slots
    if isinstance(rows, (int, np.integer)):
        return np.array([u in uuids for u in snap.dev_uuid[int(rows)]] + [False] * (d - len(snap.dev_uuid[int(rows)])),
                        np.bool_)
    index = range(snap.n_nodes)[rows] if isinstance(rows, slice) else [int(i) for i in rows]
    out = np.zeros((len(index), d), np.bool_)
    for k, i in enumerate(index):
        for j, u in enumerate(snap.dev_uuid[i]):
            if u in uuids:
                out[k, j] = True
    return out


def request_memory(snap: Snapshot, node: int, device: int, request: DeviceRequest) -> int:
    if request.memory_pct is not None:
        return int(snap.dev_mem_cap[node, device] * request.memory_pct // 100)
    return request.memory_mib


_FIT_KEYS = 256
"""Request kinds :class:`_FitCache` keeps at most (the oldest is dropped first)."""


class _FitCache:
    """Per request kind (vendor, request, exclusive, NUMA-bound), whether each node has enough devices that pass
    every check of :func:`device_stages`, kept per ``node_generation`` so that Filter recomputes only the nodes
    that changed since the kind was last asked for (one or two per decision in a busy cluster, instead of every
    device of every node). Pods that name devices (UUIDs, types, vGPU modes) are not cached: their masks are
    their own. Keyed by the state's ``layout`` and stamped per node (:class:`gpucluster.model.capacity.RowStamps`):
    another state, a node added or removed resets it.
    """

    def __init__(self) -> None:
        self._layout: Layout | None = None
        self._entries: dict[tuple[Any, ...], tuple[ReasonArray, RowStamps]] = {}

    def verdict(self, snap: Snapshot, vid: int, req: DeviceRequest, prep: _Prepared) -> ReasonArray:
        """Per node, 0 where the request fits and ``DeviceDoesNotFit`` where it does not (a read-only view of
        the kept array)."""
        if snap.layout != self._layout:
            self._layout = snap.layout
            self._entries.clear()
        options = prep.options
        key = (vid, req, options.mutex, options.numa_bind, prep.selection)
        entry = self._entries.pop(key, None)
        if entry is None:
            if len(self._entries) >= _FIT_KEYS:
                del self._entries[next(iter(self._entries))]
            entry = (np.zeros(snap.n_nodes, np.int16), RowStamps())
        self._entries[key] = entry  # most recently used last
        out, stamps = entry
        _, stale = stamps.stale(snap)
        if stale.size:
            rows: slice | IntArray = slice(None) if stale.size == snap.n_nodes else stale
            final = device_stages(snap, rows, vid, req, prep.allowed, prep.type_bad, options=options)[-1][1]
            out[rows] = np.where(final.sum(axis=1) >= req.count, 0, Reason.DeviceDoesNotFit)
            stamps.mark(rows)
        view = out.view()
        view.flags.writeable = False
        return view


class DeviceFit:
    """Filter and Reserve for device requests (all vendors)."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle
        self._fit = _FitCache()

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        requests = tuple(pod.device_requests)
        init_requests = tuple(pod.init_device_requests)
        if not requests and not init_requests:
            state.write(NAME, _Prepared((), (), (), (), None, None, PodOptions()))
            return SKIP
        vendor_ids: list[list[int]] = [[], []]
        for k, group in enumerate((requests, init_requests)):
            for _, r in group:
                vid = snap.vendor_ids.get(r.vendor)
                if vid is None:
                    return Status.unschedulable(NAME, f"no node has {r.vendor} devices", unresolvable=True)
                vendor_ids[k].append(vid)
        try:
            options = pod_options(pod)
        except DeviceInputError as exc:  # a pod built without the parser's checks
            return Status.error(NAME, str(exc))
        allowed, type_bad = allowed_devices(pod, snap)
        state.write(NAME, _Prepared(requests, tuple(vendor_ids[0]), init_requests, tuple(vendor_ids[1]),
                                    allowed, type_bad, options, selection_key(pod)))
        state.write(OPTIONS_KEY, options)
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        """Nodes short of fitting devices get ``DeviceDoesNotFit``; ``explain`` says which check failed."""
        prep: _Prepared = state.read(NAME)
        verdicts = [self._fit.verdict(snap, vid, req, prep) for req, vid in prep.all_requests()]
        if len(verdicts) == 1:
            return verdicts[0]
        return np.maximum.reduce(verdicts) if verdicts else np.zeros(snap.n_nodes, np.int16)

    def explain(self, state: CycleState, pod: Pod, snap: Snapshot, nodes: IntArray) -> ReasonArray:
        """For rejected ``nodes``, the first device check that left too few devices (per node)."""
        prep: _Prepared = state.read(NAME)
        out = np.zeros(nodes.size, np.int16)
        for req, vid in prep.all_requests():
            undecided = out == 0
            stages = device_stages(snap, nodes, vid, req, prep.allowed, prep.type_bad, options=prep.options)
            for k, (reason, mask) in enumerate(stages):
                have = np.count_nonzero(mask, axis=1)
                hit = undecided & (have < req.count)
                out[hit] = reason
                if k == 0:
                    out[hit & (have == 0)] = Reason.NoDevicesOfVendor
                undecided &= ~hit
        return out

    # ------------------------------------------------------------------------------------------ reserve
    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        prep: _Prepared = state.read(NAME)
        if not prep.requests and not prep.init_requests:
            state.grants = tuple(() for _ in pod.containers)
            state.init_grants = tuple(() for _ in pod.init_containers)
            return Status.success()
        init_grants: list[tuple[DeviceGrant, ...]] = []
        for ci in range(len(pod.init_containers)):
            mine = [(r, v) for (c, r), v in zip(prep.init_requests, prep.init_vendor_ids, strict=True) if c == ci]
            # each init container runs alone on the node as it is: a fresh ledger per container
            grants = self._fit_group(state, pod, snap, node, prep, mine, _Ledger(snap.device_slots))
            if isinstance(grants, Status):
                return grants
            init_grants.append(tuple(grants))
        ledger = _Ledger(snap.device_slots)
        per_container: list[tuple[DeviceGrant, ...]] = []
        for ci in range(len(pod.containers)):
            mine = [(r, v) for (c, r), v in zip(prep.requests, prep.vendor_ids, strict=True) if c == ci]
            grants = self._fit_group(state, pod, snap, node, prep, mine, ledger)
            if isinstance(grants, Status):
                return grants
            per_container.append(tuple(grants))
        state.grants = tuple(per_container)
        state.init_grants = tuple(init_grants)
        return Status.success()

    def _fit_group(self, state: CycleState, pod: Pod, snap: Snapshot, node: int, prep: _Prepared,
                   requests: Sequence[tuple[DeviceRequest, int]], ledger: _Ledger) -> list[DeviceGrant] | Status:
        """Devices for one container's requests, booked in ``ledger`` as they are chosen."""
        fw = self._handle.framework
        out: list[DeviceGrant] = []
        for req, vid in requests:
            stages = device_stages(snap, node, vid, req, prep.allowed, prep.type_bad, ledger.core, ledger.mem,
                                   ledger.tasks, prep.options)
            feasible = stages[-1][1]
            if int(feasible.sum()) < req.count:
                reason = next(r for r, m in stages if int(m.sum()) < req.count)
                return Status.unschedulable(NAME, reason.name)
            state.write(TAKEN_KEY, (ledger.core, ledger.mem, ledger.tasks))
            scores = fw.score_devices(state, pod, snap, node, req, feasible, ledger.core)
            if prep.options.topology and req.vendor == VENDOR_NVIDIA:
                chosen = _choose_topology(snap, node, feasible, scores, req.count)
            else:
                chosen = _choose(snap, node, feasible, scores, req.count,
                                 numa_bind=prep.options.numa_bind and req.vendor == VENDOR_NVIDIA)
            vendor = snap.vendors[vid]
            for j in chosen:
                mem = request_memory(snap, node, j, req)
                out.append(DeviceGrant(int(j), snap.dev_uuid[node][j], vendor, mem, req.core_milli))
                ledger.book(j, mem, req.core_milli)
        return out

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        state.grants = ()
        state.init_grants = ()


class _Ledger:
    """What earlier requests of the pod took on the chosen node's devices, per device slot."""

    __slots__ = ("core", "mem", "tasks")

    def __init__(self, slots: int) -> None:
        self.core = np.zeros(slots, np.int64)
        self.mem = np.zeros(slots, np.int64)
        self.tasks = np.zeros(slots, np.int64)

    def book(self, device: int, mem: int, core: int) -> None:
        self.core[device] += core
        self.mem[device] += mem
        self.tasks[device] += 1


def _preference(feasible: BoolArray, scores: npt.NDArray[np.float64]) -> IntArray:
    """Feasible device slots, most preferred first (ties to the lower slot)."""
    idx = np.flatnonzero(feasible)
    return idx[np.argsort(-scores[idx], kind="stable")]


def _choose(snap: Snapshot, node: int, feasible: BoolArray, scores: npt.NDArray[np.float64], count: int,
            numa_bind: bool = False) -> list[int]:
    order = _preference(feasible, scores)
    if count == 1:
        return [int(order[0])]
    if numa_bind:
        # HAMi walks its preference order and restarts at each NUMA change: the first NUMA node to gather
        # ``count`` devices wins (the filter made sure one can)
        groups: dict[int, list[int]] = {}
        for j in order:
            group = groups.setdefault(int(snap.dev_numa[node, j]), [])
            group.append(int(j))
            if len(group) == count:
                return group
    domains = snap.dev_nvlink[node, order]
    best: list[int] | None = None
    best_score = -np.inf
    for dom in np.unique(domains[domains >= 0]):
        members = order[domains == dom]
        if members.size >= count:
            pick = members[:count]
            total = float(scores[pick].sum())
            if total > best_score:
                best, best_score = [int(x) for x in pick], total
    return best if best is not None else [int(x) for x in order[:count]]


def _choose_topology(snap: Snapshot, node: int, feasible: BoolArray, scores: npt.NDArray[np.float64],
                     count: int) -> list[int]:
    """HAMi's ``topology-aware``: one GPU -> the one worst linked to the other candidates (keeping the better
    linked ones for multi-GPU pods); several -> the set with the highest sum of pair scores. Candidates are
    taken in preference order; ties keep the earlier."""
    order = [int(j) for j in _preference(feasible, scores)]
    uuids = snap.dev_uuid[node]
    pairs: Mapping[str, Mapping[str, int]] = snap.nodes[node].pair_scores

    def link(a: int, b: int) -> int:
        return pairs.get(uuids[a], {}).get(uuids[b], 0)

    if count == 1:
        worst, worst_score = order[0], math.inf
        for a in order:
            total = sum(link(a, b) for b in order if b != a)
            if total < worst_score:
                worst, worst_score = a, total
        return [worst]
    best: tuple[int, ...] = tuple(order[:count])
    best_score = -math.inf
    for combo in itertools.islice(itertools.combinations(order, count), _MAX_COMBINATIONS):
        total = sum(link(a, b) for a, b in itertools.combinations(combo, 2))
        if total > best_score:
            best, best_score = combo, total
    return list(best)


class _NoArgs(PluginArgs):
    pass


def new_device_fit(args: Mapping[str, Any], handle: Handle) -> DeviceFit:
    parse_args(_NoArgs, NAME, args)
    return DeviceFit(handle)
