"""Pods (tasks) and what their containers ask for."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field


class Policy(enum.StrEnum):
    """Placement preference for nodes or for devices inside a node."""

    BINPACK = "binpack"
    SPREAD = "spread"


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A container's request for ``count`` devices of one vendor, each with the same share."""

    vendor: str
    count: int
    memory_mib: int = 0
    """Device memory per device in MiB (used when ``memory_pct`` is None)."""
    memory_pct: int | None = None
    """Device memory per device as a percentage of that device's memory."""
    core_milli: int = 0
    """Compute per device in core milli (1000 = whole device; a whole-device request is exclusive)."""

    def __post_init__(self) -> None:
        if self.count <= 0:
            raise ValueError("device count must be > 0")
        if self.memory_mib < 0 or self.core_milli < 0:
            raise ValueError("device memory and cores must not be negative")
        if self.memory_pct is not None and not 0 <= self.memory_pct <= 100:
            raise ValueError("device memory percentage must be within 0..100")


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    devices: tuple[DeviceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceConstraints:
    """HAMi's device selection annotations (model substrings and UUIDs), already split."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.use_types or self.nouse_types or self.use_uuids or self.nouse_uuids)


@dataclass(frozen=True, slots=True)
class Pod:
    """One schedulable unit: a Kubernetes Pod or a task of a simulated job."""

    name: str
    namespace: str = "default"
    containers: tuple[ContainerRequest, ...] = ()
    uid: str = ""
    constraints: DeviceConstraints = field(default_factory=DeviceConstraints)
    node_policy: Policy | None = None
    """Per-pod override of the node policy (``hami.io/node-scheduler-policy``)."""
    gpu_policy: Policy | None = None
    """Per-pod override of the device policy (``hami.io/gpu-scheduler-policy``)."""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    priority: int = 0
    tenant: str = ""
    """Tenant (queue) the pod is charged to; empty = its namespace."""
    gang: str = ""
    """Gang (pod group) name; empty when the pod is not part of a gang."""
    gang_min_member: int = 0
    scheduler_name: str = ""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Labels the node must carry (Kubernetes ``spec.nodeSelector``; the ``NodeSelector`` plugin checks it)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cpu_milli(self) -> int:
        return sum(c.cpu_milli for c in self.containers)

    @property
    def memory_mib(self) -> int:
        return sum(c.memory_mib for c in self.containers)

    @property
    def device_requests(self) -> list[tuple[int, DeviceRequest]]:
        """``(container index, request)`` for every device request of the pod."""
        return [(i, r) for i, c in enumerate(self.containers) for r in c.devices]

    @property
    def device_count(self) -> int:
        return sum(r.count for _, r in self.device_requests)

    @property
    def charged_tenant(self) -> str:
        return self.tenant or self.namespace
