"""Static description of one accelerator device on a node."""

from __future__ import annotations

from dataclasses import dataclass

from gpucluster.model.resources import CORE_MILLI_PER_DEVICE


@dataclass(frozen=True, slots=True)
class DeviceSpec:
    """One physical device as the scheduler sees it.

    ``memory_mib`` is the *schedulable* memory: the physical memory times the memory-overcommit factor
    (HAMi's ``deviceMemoryScaling``); ``physical_memory_mib`` keeps the real figure for reports and metrics.
    """

    uuid: str
    """Stable unique id (``GPU-...`` for NVIDIA)."""
    index: int
    """Index of the device inside its node (0-based)."""
    vendor: str
    """Vendor key (``nvidia``, ``cambricon``, ``hygon``)."""
    model: str
    """Model name as reported by the device plugin, e.g. ``NVIDIA H100 80GB HBM3`` or ``G2``."""
    memory_mib: int
    """Schedulable device memory in MiB (physical x overcommit factor)."""
    core_milli: int = CORE_MILLI_PER_DEVICE
    """Compute capacity in core milli (1000 = whole device)."""
    numa: int = 0
    """NUMA node the device hangs off."""
    nvlink_domain: int = -1
    """NVLink domain id inside the node; -1 when the device has no NVLink peers (PCIe only)."""
    max_tasks: int = 10
    """Most tasks (containers) that may share the device (HAMi ``deviceSplitCount``)."""
    healthy: bool = True
    """False once the device is reported unhealthy (e.g. after an XID 79)."""
    physical_memory_mib: int = 0
    """Physical memory in MiB (0 = same as ``memory_mib``)."""
    mode: str = "hami-core"
    """Sharing mode the device plugin reports (HAMi ``hami-core``, ``mig``, ``mps``); a pod's
    ``nvidia.com/vgpu-mode`` annotation selects devices by it."""
    type_name: str = ""
    """The full type string the device plugin registers (``NVIDIA-A100``, ``NVIDIA A10``, ``DCU-K100_AI``): HAMi
    matches ``use-gputype`` / ``nouse-gputype`` against it. Empty = the model."""
    cordoned: bool = False
    """Excluded from new placements (HAMi's ``hami.io/device-cordon`` node annotation, or a DRA device taint with
    effect ``NoSchedule`` / ``NoExecute``); pods already on it stay."""
    dra: str = ""
    """``driver/pool/device`` when a DRA driver publishes the device in a ResourceSlice (``resource.k8s.io/v1``),
    else empty. Only ResourceClaim requests (``DeviceRequest.dra``) may be given DRA-published devices."""
    hami: bool = True
    """Published through HAMi's node annotations (or a cluster spec): HAMi-style pods (resource limits, decision
    annotations) may be given it. False for a device only a DRA driver publishes."""

    def __post_init__(self) -> None:
        if self.memory_mib < 0 or self.core_milli <= 0 or self.max_tasks <= 0:
            raise ValueError(f"device {self.uuid}: memory, cores and task limit must be positive")
