"""Device fit: enough devices of the right vendor and model, each with the memory, cores and task slot asked.

Semantics (HAMi's, with our choices where HAMi is vague; see ``docs/scheduling.md``):

* A request for ``count`` devices needs ``count`` *distinct* devices of its vendor on one node.
* Memory per device is ``memory_mib`` or ``memory_pct`` % of that device's schedulable memory (physical x
  overcommit). Cores are core milli (HAMi percent x 10).
* A request for a whole device's cores (100 %) is exclusive: the device must have no task at all.
* A request for 0 cores may not go on a device whose cores are fully taken.
* Each device holds at most ``max_tasks`` tasks (HAMi ``deviceSplitCount``).
* ``use-gputype`` / ``nouse-gputype`` match model-name substrings, case-insensitively; ``use-gpuuuid`` /
  ``nouse-gpuuuid`` match UUIDs exactly. Unhealthy devices are never used.

Filter checks every request of the pod against all nodes at once (each request on its own; for pods with
several device requests, Reserve then checks them together on the chosen node and the core tries the next
node if they do not fit jointly). Reserve chooses the devices on the chosen node in the order the profile's
DeviceScore plugins prefer, keeping a multi-device request inside one NVLink domain when one can hold it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.model import DeviceGrant, DeviceRequest, Pod, Snapshot
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


@dataclass(frozen=True, slots=True)
class _Prepared:
    requests: tuple[tuple[int, DeviceRequest], ...]
    vendor_ids: tuple[int, ...]
    allowed: BoolArray | None
    """[N, D] devices the pod's type/UUID annotations allow (None = all)."""
    type_bad: BoolArray | None
    """[N, D] devices excluded by model annotations (to tell type from UUID mismatches)."""


def allowed_devices(pod: Pod, snap: Snapshot) -> tuple[BoolArray | None, BoolArray | None]:
    """Devices allowed by the pod's model and UUID annotations, and those excluded by model alone."""
    c = pod.constraints
    if c.empty:
        return None, None
    allowed = np.ones(snap.dev_valid.shape, np.bool_)
    type_bad: BoolArray | None = None
    if c.use_types or c.nouse_types:
        lowered = [m.lower() for m in snap.models]
        ok = np.ones(len(lowered) + 1, np.bool_)  # last slot serves padding (model id -1)
        for k, name in enumerate(lowered):
            if c.use_types and not any(t.lower() in name for t in c.use_types):
                ok[k] = False
            if any(t.lower() in name for t in c.nouse_types):
                ok[k] = False
        type_ok = ok[snap.dev_model]
        type_bad = ~type_ok
        allowed &= type_ok
    if c.use_uuids or c.nouse_uuids:
        use, nouse = set(c.use_uuids), set(c.nouse_uuids)
        uuid_ok = np.zeros(snap.dev_valid.shape, np.bool_)
        for i, uuids in enumerate(snap.dev_uuid):
            for j, u in enumerate(uuids):
                uuid_ok[i, j] = (not use or u in use) and u not in nouse
        allowed &= uuid_ok
    return allowed, type_bad


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
) -> list[tuple[Reason, BoolArray]]:
    """Cumulative masks of the devices (rows x D) that pass each check, in order, with the check's reason.

    Checks that cannot reject anything for this request are skipped (no memory asked, one vendor in the
    cluster, a request below every device's capacity cannot be exclusive), which keeps Filter cheap."""
    valid = snap.dev_valid[rows]
    if len(snap.vendors) > 1:
        valid = valid & (snap.dev_vendor[rows] == vendor_id)
    stages: list[tuple[Reason, BoolArray]] = [(Reason.InsufficientGPUCount, valid)]
    m = valid & snap.dev_healthy[rows]
    stages.append((Reason.GPUUnhealthy, m))
    if allowed is not None:
        if type_bad is not None:
            m = m & ~type_bad[rows]
            stages.append((Reason.GPUTypeMismatch, m))
        m = m & allowed[rows]
        stages.append((Reason.GPUUUIDMismatch, m))
    tasks = snap.dev_tasks[rows] if taken_tasks is None else snap.dev_tasks[rows] + taken_tasks
    m = m & (tasks < snap.dev_max_tasks[rows])
    stages.append((Reason.GPUTaskLimit, m))
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
    if need >= snap.min_core_cap:
        m = m & ((need < snap.dev_core_cap[rows]) | (tasks == 0))
        stages.append((Reason.GPUExclusiveBusy, m))
    return stages


def request_memory(snap: Snapshot, node: int, device: int, request: DeviceRequest) -> int:
    if request.memory_pct is not None:
        return int(snap.dev_mem_cap[node, device] * request.memory_pct // 100)
    return request.memory_mib


class DeviceFit:
    """Filter and Reserve for device requests (all vendors)."""

    name = NAME

    def __init__(self, handle: Handle) -> None:
        self._handle = handle

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        requests = tuple(pod.device_requests)
        if not requests:
            state.write(NAME, _Prepared((), (), None, None))
            return SKIP
        vendor_ids = []
        for _, r in requests:
            vid = snap.vendor_ids.get(r.vendor)
            if vid is None:
                return Status.unschedulable(NAME, f"no node has {r.vendor} devices", unresolvable=True)
            vendor_ids.append(vid)
        allowed, type_bad = allowed_devices(pod, snap)
        state.write(NAME, _Prepared(requests, tuple(vendor_ids), allowed, type_bad))
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        """Nodes short of fitting devices get ``DeviceDoesNotFit``; ``explain`` says which check failed."""
        prep: _Prepared = state.read(NAME)
        out = np.zeros(snap.n_nodes, np.int16)
        everything = slice(None)
        for (_, req), vid in zip(prep.requests, prep.vendor_ids, strict=True):
            final = device_stages(snap, everything, vid, req, prep.allowed, prep.type_bad)[-1][1]
            out[np.count_nonzero(final, axis=1) < req.count] = Reason.DeviceDoesNotFit
        return out

    def explain(self, state: CycleState, pod: Pod, snap: Snapshot, nodes: IntArray) -> ReasonArray:
        """For rejected ``nodes``, the first device check that left too few devices (per node)."""
        prep: _Prepared = state.read(NAME)
        out = np.zeros(nodes.size, np.int16)
        for (_, req), vid in zip(prep.requests, prep.vendor_ids, strict=True):
            undecided = out == 0
            for k, (reason, mask) in enumerate(device_stages(snap, nodes, vid, req, prep.allowed, prep.type_bad)):
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
        if not prep.requests:
            state.grants = tuple(() for _ in pod.containers)
            return Status.success()
        fw = self._handle.framework
        d = snap.device_slots
        taken_core = np.zeros(d, np.int64)
        taken_mem = np.zeros(d, np.int64)
        taken_tasks = np.zeros(d, np.int64)
        per_container: list[list[DeviceGrant]] = [[] for _ in pod.containers]
        for (ci, req), vid in zip(prep.requests, prep.vendor_ids, strict=True):
            stages = device_stages(snap, node, vid, req, prep.allowed, prep.type_bad,
                                   taken_core, taken_mem, taken_tasks)
            feasible = stages[-1][1]
            if int(feasible.sum()) < req.count:
                reason = next(r for r, m in stages if int(m.sum()) < req.count)
                return Status.unschedulable(NAME, reason.name)
            scores = fw.score_devices(state, pod, snap, node, req, feasible, taken_core)
            chosen = self._choose(snap, node, feasible, scores, req.count)
            vendor = snap.vendors[vid]
            for j in chosen:
                mem = request_memory(snap, node, j, req)
                per_container[ci].append(DeviceGrant(int(j), snap.dev_uuid[node][j], vendor, mem, req.core_milli))
                taken_core[j] += req.core_milli
                taken_mem[j] += mem
                taken_tasks[j] += 1
        state.grants = tuple(tuple(g) for g in per_container)
        return Status.success()

    @staticmethod
    def _choose(snap: Snapshot, node: int, feasible: BoolArray, scores: npt.NDArray[np.float64],
                count: int) -> list[int]:
        idx = np.flatnonzero(feasible)
        # highest score first; ties to the lower index (stable sort on the negated score)
        order = idx[np.argsort(-scores[idx], kind="stable")]
        if count == 1:
            return [int(order[0])]
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

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        state.grants = ()


class _NoArgs(PluginArgs):
    pass


def new_device_fit(args: Mapping[str, Any], handle: Handle) -> DeviceFit:
    parse_args(_NoArgs, NAME, args)
    return DeviceFit(handle)
