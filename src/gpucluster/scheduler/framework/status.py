"""Status codes and stable rejection reasons shared by plugins, CLI, web and metrics."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Code(enum.IntEnum):
    SUCCESS = 0
    ERROR = 1
    """An internal error; the pod is retried later."""
    UNSCHEDULABLE = 2
    """Does not fit now; preemption or freed resources may help."""
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    """Can never fit on the rejecting node(s) as they are (wrong model, too few devices in total ...)."""
    WAIT = 4
    """Permit: hold the reservation until the rest of the gang arrives."""
    SKIP = 5
    """PreFilter/PreScore: this plugin has nothing to do for the pod; skip its later phases."""


class Reason(enum.IntEnum):
    """Why a node was rejected. The names are the stable strings users see ("3/8 InsufficientGPUMemory")."""

    OK = 0
    NodeUnschedulable = 1
    NodeNotReady = 2
    InsufficientCPU = 3
    InsufficientMemory = 4
    NoDevicesOfVendor = 5
    InsufficientGPUCount = 6
    GPUUnhealthy = 7
    GPUTypeMismatch = 8
    GPUUUIDMismatch = 9
    GPUTaskLimit = 10
    InsufficientGPUMemory = 11
    InsufficientGPUCores = 12
    GPUExclusiveBusy = 13
    TopologyConstraint = 14
    QuotaExceeded = 15
    GangNotReady = 16
    DataLocality = 17
    NodeHandshakeTimeout = 18
    PolicyRejected = 19
    DeviceDoesNotFit = 20
    """Placeholder a vectorised Filter may return; the plugin's ``explain`` replaces it when reasons are reported."""
    NodeNameMismatch = 21
    """The pod is bound for another node (``gpucluster.io/node-name``, Kubernetes' ``spec.nodeName``)."""
    GPUCordoned = 22
    """The fitting devices are cordoned (HAMi's ``hami.io/device-cordon`` node annotation, ``CardCordoned``)."""
    NumaConstraint = 23
    """``nvidia.com/numa-bind``: no NUMA node holds enough fitting devices (HAMi's ``NumaNotFit``)."""
    InsufficientExtendedResource = 24
    """The node does not offer (enough of) an extended resource the pod asks for."""
    NodeSelectorMismatch = 25
    """The node lacks a label the pod's node selector asks for."""
    GangModelMismatch = 26
    """A gang member would land on another GPU model than the members already placed (or on a model that
    cannot hold the whole gang)."""
    ClaimDeviceMismatch = 27
    """No device on the node matches a ResourceClaim request's DeviceClass and selectors (DRA)."""
    WaitsForFastModel = 28
    """The node's GPU model is a slower one than the pod's long job waits for (``GpuSpeedTier``'s ``wait_fast``):
    its fast model is expected to free enough GPUs soon enough that waiting ends the job sooner."""

    @property
    def unresolvable(self) -> bool:
        """Reasons that freeing resources on the node cannot fix."""
        return self in _UNRESOLVABLE


_UNRESOLVABLE = frozenset(
    {
        Reason.NodeUnschedulable, Reason.NodeNotReady, Reason.NoDevicesOfVendor, Reason.InsufficientGPUCount,
        Reason.ClaimDeviceMismatch, Reason.WaitsForFastModel,
        Reason.GPUTypeMismatch, Reason.GPUUUIDMismatch, Reason.NodeHandshakeTimeout, Reason.NodeNameMismatch,
        Reason.GPUCordoned, Reason.InsufficientExtendedResource, Reason.NodeSelectorMismatch,
    }
)


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)

    @classmethod
    def success(cls) -> Status:
        return _SUCCESS

    @classmethod
    def unschedulable(cls, plugin: str, *reasons: str, unresolvable: bool = False) -> Status:
        code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE if unresolvable else Code.UNSCHEDULABLE
        return cls(code, tuple(reasons), plugin)

    @classmethod
    def error(cls, plugin: str, message: str) -> Status:
        return cls(Code.ERROR, (message,), plugin)


_SUCCESS = Status()
SKIP = Status(Code.SKIP)
