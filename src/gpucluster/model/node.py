"""Static description of one node (server)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpucluster.model.device import DeviceSpec


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """A server with its host resources, its devices and where it sits in the fabric."""

    name: str
    cpu_milli: int
    """Allocatable CPU in millicores."""
    memory_mib: int
    """Allocatable host memory in MiB."""
    devices: tuple[DeviceSpec, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    rack: str = ""
    """Rack the server stands in."""
    leaf: str = ""
    """Leaf switch (group) the server's compute NICs connect to."""
    spine: str = ""
    """Spine group (pod) above the leaf; nodes in different spine groups talk through the core tier."""
    pool: str = ""
    """Node pool the server came from (spec files), or empty."""
    extended: Mapping[str, int] = field(default_factory=dict)
    """Other extended resources the node offers (``status.allocatable`` entries that are neither CPU, memory nor
    a device vendor's resource), by name; a pod asking for one the node lacks does not fit it."""
    pair_scores: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Device UUID -> peer UUID -> link score (HAMi's ``hami.io/node-nvidia-score``), for the
    ``topology-aware`` GPU policy; empty when the node does not report one."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("node name must not be empty")
        if self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"node {self.name}: CPU and memory must not be negative")
        for i, dev in enumerate(self.devices):
            if dev.index != i:
                raise ValueError(f"node {self.name}: device {dev.uuid} has index {dev.index}, expected {i}")

    @property
    def gpu_count(self) -> int:
        return len(self.devices)
