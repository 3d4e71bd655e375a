"""Gang scheduling (all-or-nothing pod groups), as Volcano's ``minMember`` / KAI's PodGroups.

* PreFilter rejects a gang member at once when the cluster's free whole devices cannot hold the members
  still unplaced (so a gang larger than free capacity waits whole, without reserving anything).
* Filter keeps a gang on one GPU model (on a cluster of several): later members go to the model of the first
  member's node; the first member only to a model whose free whole devices could hold the whole gang
  (``GangModelMismatch`` elsewhere). A pod's ``use-gputype`` narrows the models further (DeviceFit).
* Reserve records the member; Permit answers WAIT (the member waits in the framework's waiting-pods map,
  holding its reservation) until ``gang_min_member`` members hold reservations; the last member's Permit
  allows every waiting member and answers SUCCESS, so the caller binds them all. When a member cannot be
  placed, the group is given up (``Scheduler.schedule_group``): the waiting members are rejected and their
  Unreserve removes them here, so nothing is half-bound and nobody outside the framework touches the gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.model import Pod, Snapshot
from gpucluster.scheduler.framework import Code, CycleState, Handle, PluginRegistry, Reason, ReasonArray, Status
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "Gang"


def free_whole_devices(snap: Snapshot) -> int:
    """Devices that are usable and hold no task at all."""
    return int(snap.node_idle.sum())


def node_models(snap: Snapshot) -> np.ndarray[Any, np.dtype[np.int64]]:
    """The GPU model id of each node (its first device's; -1 without devices)."""
    return np.asarray(snap.dev_model[:, 0], np.int64) if snap.dev_model.shape[1] else np.full(snap.n_nodes, -1)


class Gang:
    """PreFilter (capacity check), Filter (one GPU model), Reserve (membership) and Permit (wait for the whole
    gang)."""

    name = NAME

    def __init__(self, handle: Handle | None = None) -> None:
        self._handle = handle
        self._reserved: dict[str, dict[str, int]] = {}
        """Gang -> member pod key -> the node it holds a reservation on (in reservation order)."""

    def reserved(self, gang: str) -> int:
        return len(self._reserved.get(gang, ()))

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        if not pod.gang:
            return SKIP
        missing = max(pod.gang_min_member - self.reserved(pod.gang), 1)
        whole = [r for _, r in pod.device_requests if r.whole]
        if whole:
            need = missing * sum(r.count for r in whole)
            if free_whole_devices(snap) < need:
                return Status.unschedulable(NAME, Reason.GangNotReady.name)
        if len(snap.models) <= 1 or not pod.device_requests:
            return SKIP  # one GPU model: nothing for Filter to keep together
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        models = node_models(snap)
        members = self._reserved.get(pod.gang)
        if members:
            anchor = int(models[next(iter(members.values()))])
            out[models != anchor] = Reason.GangModelMismatch
            return out
        whole = [r for _, r in pod.device_requests if r.whole]
        if whole:  # the first member: only models whose free whole devices could take the whole gang
            per_pod = sum(r.count for r in whole)
            tasks = np.where(models >= 0, snap.node_idle // per_pod, 0)
            per_model = np.bincount(np.maximum(models, 0), weights=tasks)
            ok = per_model >= max(pod.gang_min_member, 1)
            out[(models < 0) | ~ok[np.maximum(models, 0)]] = Reason.GangModelMismatch
        return out

    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if pod.gang:
            self._reserved.setdefault(pod.gang, {})[pod.key] = node
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        members = self._reserved.get(pod.gang)
        if members is not None:
            members.pop(pod.key, None)
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
