"""Gang scheduling (all-or-nothing pod groups), as Volcano's ``minMember`` / KAI's PodGroups.

* PreFilter rejects a gang member at once when the cluster's free whole devices cannot hold the members
  still unplaced (so a gang larger than free capacity waits whole, without reserving anything).
* Reserve records the member; Permit answers WAIT (the member waits in the framework's waiting-pods map,
  holding its reservation) until ``gang_min_member`` members hold reservations; the last member's Permit
  allows every waiting member and answers SUCCESS, so the caller binds them all. When a member cannot be
  placed, the group is given up (``Scheduler.schedule_group``): the waiting members are rejected and their
  Unreserve removes them here, so nothing is half-bound and nobody outside the framework touches the gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucluster.model import CORE_MILLI_PER_DEVICE, Pod, Snapshot
from gpucluster.scheduler.framework import Code, CycleState, Handle, PluginRegistry, Reason, Status
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "Gang"


def free_whole_devices(snap: Snapshot) -> int:
    """Devices that are usable and hold no task at all."""
    free = snap.dev_usable & (snap.dev_tasks == 0) & (snap.dev_core_used == 0)
    return int(free.sum())


class Gang:
    """PreFilter (capacity check), Reserve (membership) and Permit (wait for the whole gang)."""

    name = NAME

    def __init__(self, handle: Handle | None = None) -> None:
        self._handle = handle
        self._reserved: dict[str, set[str]] = {}

    def reserved(self, gang: str) -> int:
        return len(self._reserved.get(gang, ()))

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        if not pod.gang:
            return SKIP
        missing = max(pod.gang_min_member - self.reserved(pod.gang), 1)
        whole = [r for _, r in pod.device_requests if r.core_milli >= CORE_MILLI_PER_DEVICE]
        if whole:
            need = missing * sum(r.count for r in whole)
            if free_whole_devices(snap) < need:
                return Status.unschedulable(NAME, Reason.GangNotReady.name)
        return Status.success()

    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if pod.gang:
            self._reserved.setdefault(pod.gang, set()).add(pod.key)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        members = self._reserved.get(pod.gang)
        if members is not None:
            members.discard(pod.key)
            if not members:
                del self._reserved[pod.gang]

    def permit(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if not pod.gang:
            return Status.success()
        if self.reserved(pod.gang) >= pod.gang_min_member:
            del self._reserved[pod.gang]
            fw = self._handle.framework if self._handle is not None else None
            if fw is not None:
                for wp in fw.waiting():
                    if wp.pod.gang == pod.gang:
                        wp.allow(NAME)
            return Status.success()
        return Status(Code.WAIT, (Reason.GangNotReady.name,), NAME)


class _NoArgs(PluginArgs):
    pass


def new_gang(args: Mapping[str, Any], handle: Handle) -> Gang:
    parse_args(_NoArgs, NAME, args)
    return Gang(handle)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_gang)
