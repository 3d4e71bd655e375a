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
    dra: bool = False
    """Served from DRA-published devices (a ResourceClaim's request); else from HAMi-published ones."""
    uuids: frozenset[str] | None = None
    """Only these devices (by UUID) may serve the request (the devices a ResourceClaim request's DeviceClass and
    selectors match); None = any device of the vendor."""

    def __post_init__(self) -> None:
        if self.count <= 0:
            raise ValueError("device count must be > 0")
        if self.memory_mib < 0 or self.core_milli < 0:
            raise ValueError("device memory and cores must not be negative")
        if self.memory_pct is not None and not 0 <= self.memory_pct <= 100:
            raise ValueError("device memory percentage must be within 0..100")

    @property
    def whole(self) -> bool:
        """Each device is taken whole: all of its compute, or all of its memory (HAMi's ``nvidia.com/gpu: 1``
        with the default 100 % memory and no cores given), so nothing else can share it."""
        return self.core_milli >= 1000 or (self.memory_pct or 0) >= 100


@dataclass(frozen=True, slots=True)
class ContainerRequest:
    name: str
    cpu_milli: int = 0
    memory_mib: int = 0
    devices: tuple[DeviceRequest, ...] = ()
    extended: Mapping[str, int] = field(default_factory=dict)
    """Extended resources that are no device vendor's (``example.com/foo: 2``); a node must offer them."""


@dataclass(frozen=True, slots=True)
class DeviceConstraints:
    """HAMi's device selection annotations (model substrings and UUIDs), already split.

    The four tuples apply to every device; ``per_vendor`` holds constraints that apply to one vendor's devices
    only (HAMi's ``nvidia.com/use-gputype`` constrains GPUs, ``hygon.com/use-dcutype`` DCUs)."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    per_vendor: Mapping[str, DeviceConstraints] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not (self.use_types or self.nouse_types or self.use_uuids or self.nouse_uuids) and all(
            c.empty for c in self.per_vendor.values())

    def for_vendor(self, vendor: str) -> DeviceConstraints:
        """The constraints on ``vendor``'s devices: the global ones plus that vendor's own."""
        own = self.per_vendor.get(vendor)
        if own is None:
            return self
        return DeviceConstraints(self.use_types + own.use_types, self.nouse_types + own.nouse_types,
                                 self.use_uuids + own.use_uuids, self.nouse_uuids + own.nouse_uuids)


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
    init_containers: tuple[ContainerRequest, ...] = ()
    """Init containers: they run one after another before the app containers, so the pod needs, per resource,
    the larger of the app containers' sum and the largest init container (Kubernetes' effective request)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def cpu_milli(self) -> int:
        return max(sum(c.cpu_milli for c in self.containers), max((c.cpu_milli for c in self.init_containers),
                                                                  default=0))

    @property
    def memory_mib(self) -> int:
        return max(sum(c.memory_mib for c in self.containers), max((c.memory_mib for c in self.init_containers),
                                                                   default=0))

    @property
    def extended(self) -> dict[str, int]:
        """Effective extended-resource requests (app sum or largest init container, whichever is larger)."""
        out: dict[str, int] = {}
        for c in self.containers:
            for name, n in c.extended.items():
                out[name] = out.get(name, 0) + n
        for c in self.init_containers:
            for name, n in c.extended.items():
                out[name] = max(out.get(name, 0), n)
        return out

    @property
    def device_requests(self) -> list[tuple[int, DeviceRequest]]:
        """``(container index, request)`` for every device request of the pod's app containers."""
        return [(i, r) for i, c in enumerate(self.containers) for r in c.devices]

    @property
    def init_device_requests(self) -> list[tuple[int, DeviceRequest]]:
        """``(init container index, request)`` for every device request of the pod's init containers."""
        return [(i, r) for i, c in enumerate(self.init_containers) for r in c.devices]

    @property
    def device_count(self) -> int:
        return sum(r.count for _, r in self.device_requests)

    @property
    def charged_tenant(self) -> str:
        return self.tenant or self.namespace
