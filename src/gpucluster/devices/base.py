"""The one protocol every device vendor implements, and the HAMi-style behaviour they share.

HAMi describes each vendor by the same handful of names: resource names for the device count, memory and
cores a container asks for, annotations that include or exclude device models and UUIDs, and the node
annotations its device plugin writes to register devices and to handshake with the scheduler. A vendor module
declares those names in a :class:`VendorNames` and subclasses :class:`HamiVendor` where its request semantics
differ (HAMi v2.10's ``GenerateResourceRequests`` of that vendor, plus what HAMi's admission webhook adds).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gpucluster.devices.quantity import show, whole_number
from gpucluster.model import DeviceRequest
from gpucluster.model.limits import MAX_DEVICE_MEMORY_MIB, MAX_DEVICES_PER_REQUEST
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI

INT32_MAX = 2**31 - 1
"""HAMi keeps counts, MiB and percentages in int32; a request beyond it is refused rather than wrapped."""


class DeviceInputError(ValueError):
    """A pod's resources or a node's register annotation cannot be understood. The message says why.

    ``problems`` holds every problem found (one line each); ``str()`` joins them."""

    def __init__(self, *problems: str) -> None:
        self.problems: tuple[str, ...] = tuple(problems) or ("invalid input",)
        super().__init__("\n".join(self.problems))


@dataclass(frozen=True, slots=True)
class VendorSettings:
    """Per-vendor scheduler settings, HAMi's ``device-config.yaml`` names in brackets. The defaults are HAMi's."""

    split_count: int = 10
    """Most tasks per device (``deviceSplitCount``): devices built from a cluster spec, and registered devices
    whose annotation gives no ``count``."""
    memory_scaling: float = 1.0
    """Memory overcommit factor (``deviceMemoryScaling``) for devices built from a cluster spec whose pool does
    not set ``memoryOvercommit``; > 1 lets tasks' memory sum exceed the device. (Registered devices already
    report scaled memory: HAMi's device plugin applies it.)"""
    default_memory_mib: int = 0
    """Memory per device when a container names neither memory nor percentage (``defaultMemory``); 0 = the
    whole device."""
    default_cores_pct: int | None = None
    """Cores (percent) per device when a container names none and is not given a whole device
    (``defaultCores``); None = the vendor's HAMi default (NVIDIA 0, Cambricon and Hygon 100)."""
    default_device_count: int = 1
    """Devices given to a container that names memory or cores but no count (``defaultGPUNum``, NVIDIA only);
    0 = such a container is an error."""
    memory_factor: int | None = None
    """Multiplier from a request's memory unit to MiB (``memoryFactor``); None = the vendor's (NVIDIA 1,
    Hygon 1, Cambricon 256: one ``mlu.smlu.vmemory`` is 256 MiB)."""
    resource_count: str = ""
    """Resource name of the device count (``resourceCountName``); empty = the vendor's default."""
    resource_memory: str = ""
    """``resourceMemoryName``; empty = the vendor's default."""
    resource_memory_pct: str = ""
    """``resourceMemoryPercentageName`` (NVIDIA); empty = the vendor's default."""
    resource_cores: str = ""
    """``resourceCoreName``; empty = the vendor's default."""
    resource_priority: str = ""
    """``resourcePriorityName`` (NVIDIA; read by the device plugin, not the scheduler); empty = the default."""

    def __post_init__(self) -> None:
        if self.split_count < 1:
            raise ValueError(f"deviceSplitCount: must be >= 1, got {self.split_count}")
        if not 0 < self.memory_scaling <= 100:
            raise ValueError(f"deviceMemoryScaling: must be within (0, 100], got {self.memory_scaling}")
        if not 0 <= self.default_memory_mib <= INT32_MAX:
            raise ValueError(f"defaultMemory: must be within 0..{INT32_MAX}, got {self.default_memory_mib}")
        if self.default_cores_pct is not None and not 0 <= self.default_cores_pct <= 100:
            raise ValueError(f"defaultCores: must be within 0..100, got {self.default_cores_pct}")
        if self.default_device_count < 0:
            raise ValueError(f"defaultGPUNum: must be >= 0, got {self.default_device_count}")
        if self.memory_factor is not None and not 1 <= self.memory_factor <= 1 << 20:
            raise ValueError(f"memoryFactor: must be within 1..{1 << 20}, got {self.memory_factor}")


@dataclass(frozen=True, slots=True)
class VendorNames:
    vendor: str
    """Vendor key used in the model (``nvidia``)."""
    resource_count: str
    resource_memory: str
    resource_cores: str
    register_annotation: str
    handshake_annotation: str
    use_type_annotation: str
    nouse_type_annotation: str
    use_uuid_annotation: str
    nouse_uuid_annotation: str
    resource_memory_pct: str = ""
    """Resource for memory as a percentage of the device (NVIDIA only)."""
    resource_priority: str = ""
    """Task priority resource (NVIDIA only; the device plugin reads it, the scheduler ignores it)."""
    allocate_annotation: str = ""
    """Pod annotation HAMi writes with the devices it chose (``hami.io/vgpu-devices-to-allocate``)."""
    device_type_prefix: str = ""
    """Prefix the device plugin puts in front of the model name in the register annotation."""

    @property
    def resources(self) -> tuple[str, ...]:
        """Every resource name of this vendor (empty names left out)."""
        return tuple(r for r in (self.resource_count, self.resource_memory, self.resource_memory_pct,
                                 self.resource_cores, self.resource_priority) if r)


@dataclass(frozen=True, slots=True)
class RegisteredDevice:
    """One device as a node's register annotation describes it."""

    uuid: str
    index: int
    split_count: int
    memory_mib: int
    cores_pct: int
    model: str
    numa: int
    healthy: bool
    mode: str = "hami-core"


class DeviceVendor(Protocol):
    """What the scheduler needs from a vendor.

    ``parse_container`` turns a container's resources into a :class:`DeviceRequest` (or None when the container
    asks for none of this vendor's devices). ``parse_register`` / ``encode_register`` read and write the node
    annotation the vendor's device plugin keeps up to date; ``capacity_devices`` builds devices from a node's
    capacity for vendors whose HAMi backend does so. Errors are :class:`DeviceInputError`.
    """

    names: VendorNames
    settings: VendorSettings

    def parse_container(self, limits: Mapping[str, object], where: str) -> DeviceRequest | None: ...

    def parse_register(self, value: str, where: str) -> list[RegisteredDevice]: ...

    def encode_register(self, devices: list[RegisteredDevice]) -> str: ...

    def capacity_devices(self, node: str, capacity: Mapping[str, object], where: str) -> list[RegisteredDevice]:
        ...

    def display_model(self, registered_type: str) -> str: ...

    @property
    def type_annotations_apply(self) -> bool: ...


def quantity(value: object, where: str, name: str, limit: int = INT32_MAX) -> int:
    """A Kubernetes quantity that must be a whole number in ``0..limit`` here (the one bounded parser:
    :func:`gpucluster.devices.quantity.whole_number`; the API server canonicalises ``"4000"`` as ``"4k"``)."""
    try:
        return whole_number(value, limit)
    except ValueError as exc:
        raise DeviceInputError(f"{where}: {name}: {exc}") from None


class HamiVendor:
    """A vendor whose pods and nodes use HAMi's conventions.

    Request semantics shared by HAMi's NVIDIA, Cambricon and Hygon backends: the count, memory and core
    resources are read from limits, falling back to requests; memory is multiplied by the vendor's memory
    factor; no memory (or 0) means the whole device; cores above 100 are clamped to 100 (a whole device, which
    is exclusive). Subclasses override :meth:`_memory` / :meth:`_cores` / :meth:`_implicit_count`."""

    default_memory_factor = 1
    default_cores_pct = 100
    """Cores of a container that names none (HAMi: 100 for Cambricon and Hygon)."""

    def __init__(self, names: VendorNames, settings: VendorSettings | None = None) -> None:
        self.settings = settings or VendorSettings()
        s = self.settings
        self.names = dataclasses.replace(
            names,
            resource_count=s.resource_count or names.resource_count,
            resource_memory=s.resource_memory or names.resource_memory,
            resource_memory_pct=(s.resource_memory_pct or names.resource_memory_pct) if names.resource_memory_pct
            else "",
            resource_cores=s.resource_cores or names.resource_cores,
            resource_priority=(s.resource_priority or names.resource_priority) if names.resource_priority else "",
        )
        self.memory_factor = s.memory_factor or self.default_memory_factor

    @property
    def type_annotations_apply(self) -> bool:
        """Whether HAMi checks this vendor's ``use-...type`` / ``nouse-...type`` annotations."""
        return True

    # ------------------------------------------------------------------------------------------ requests
    def parse_container(self, limits: Mapping[str, object], where: str) -> DeviceRequest | None:
        n = self.names
        mine = [k for k in (n.resource_count, n.resource_memory, n.resource_memory_pct, n.resource_cores)
                if k and k in limits]
        if not mine:
            return None
        problems: list[str] = []

        def read(name: str, limit: int = INT32_MAX) -> int | None:
            if not name or name not in limits:
                return None
            try:
                return quantity(limits[name], where, name, limit)
            except DeviceInputError as exc:
                problems.extend(exc.problems)
                return None

        count = read(n.resource_count, MAX_DEVICES_PER_REQUEST)
        if n.resource_count not in limits:
            count = self._implicit_count()
            if count == 0:
                problems.append(f"{where}: {mine[0]} needs {n.resource_count} (the number of devices) as well")
        memory = self._memory(read, limits, problems, where)
        cores = self._cores(read, limits, memory)
        if problems:
            raise DeviceInputError(*dict.fromkeys(problems))
        if not count:
            return None
        mib, pct = memory
        return DeviceRequest(vendor=n.vendor, count=count, memory_mib=mib, memory_pct=pct,
                             core_milli=min(cores, 100) * PERCENT_TO_CORE_MILLI)

    def _implicit_count(self) -> int:
        """Devices for a container that names this vendor's memory or cores but no count (0: an error)."""
        return 0

    def _read_memory(self, read: _Reader, problems: list[str], where: str) -> int:
        """The memory resource in MiB (times the memory factor); 0 when absent or 0."""
        name = self.names.resource_memory
        raw = read(name, 10**40)  # parsed here, bounded below with a hint about the unit
        if raw is None:
            return 0
        most = min(INT32_MAX, MAX_DEVICE_MEMORY_MIB) // self.memory_factor
        if raw > most:
            unit = f"{self.memory_factor} MiB" if self.memory_factor > 1 else "MiB"
            problems.append(f"{where}: {name}: must be at most {most:,} (at most {MAX_DEVICE_MEMORY_MIB:,} MiB of "
                            f"device memory; HAMi keeps at most {INT32_MAX} MiB), got {show(raw)}: "
                            f"the unit is {unit}, not bytes")
            return 0
        return raw * self.memory_factor

    def _memory(self, read: _Reader, limits: Mapping[str, object], problems: list[str],
                where: str) -> tuple[int, int | None]:
        """``(MiB, percentage)``: explicit memory, else the whole device."""
        mib = self._read_memory(read, problems, where)
        return (mib, None) if mib > 0 else (0, 100)

    def _cores(self, read: _Reader, limits: Mapping[str, object], memory: tuple[int, int | None]) -> int:
        explicit = read(self.names.resource_cores)
        if explicit is not None:
            return explicit
        default = self.settings.default_cores_pct
        return self.default_cores_pct if default is None else default

    # ------------------------------------------------------------------------------------------ nodes
    def parse_register(self, value: str, where: str) -> list[RegisteredDevice]:
        text = value.strip()
        if not text:
            return []
        if text.startswith("["):
            return self._parse_json(text, where)
        return self._parse_legacy(text, where)

    def _parse_json(self, text: str, where: str) -> list[RegisteredDevice]:
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as exc:
            raise DeviceInputError(f"{where}: not valid JSON: {exc.msg} at position {exc.pos}") from None
        if not isinstance(raw, list):
            raise DeviceInputError(f"{where}: must be a JSON list of devices")
        out: list[RegisteredDevice] = []
        for i, item in enumerate(raw):
            at = f"{where}[{i}]"
            if not isinstance(item, dict):
                raise DeviceInputError(f"{at}: must be an object")
            if not item.get("id"):
                raise DeviceInputError(f"{at}.id: missing")
            out.append(
                RegisteredDevice(
                    uuid=str(item["id"]),
                    index=quantity(item.get("index", i), at, "index"),
                    split_count=quantity(item.get("count", self.settings.split_count), at, "count"),
                    memory_mib=quantity(item.get("devmem", 0), at, "devmem", MAX_DEVICE_MEMORY_MIB),
                    cores_pct=quantity(item.get("devcore", 100), at, "devcore"),
                    model=str(item.get("type", "")),
                    numa=quantity(item.get("numa", 0), at, "numa"),
                    healthy=bool(item.get("health", False)),
                    mode=str(item.get("mode") or "hami-core"),
                )
            )
        return out

    def _parse_legacy(self, text: str, where: str) -> list[RegisteredDevice]:
        out: list[RegisteredDevice] = []
        for i, part in enumerate(p for p in text.split(":") if p.strip()):
            at = f"{where}[{i}]"
            fields = part.split(",")
            if len(fields) < 7:
                raise DeviceInputError(
                    f"{at}: expected 'uuid,count,devmem,devcore,type,numa,health[,index,mode]', got {part!r}"
                )
            out.append(
                RegisteredDevice(
                    uuid=fields[0],
                    index=quantity(fields[7], at, "index") if len(fields) > 7 else i,
                    split_count=quantity(fields[1], at, "count"),
                    memory_mib=quantity(fields[2], at, "devmem", MAX_DEVICE_MEMORY_MIB),
                    cores_pct=quantity(fields[3], at, "devcore"),
                    model=fields[4],
                    numa=quantity(fields[5], at, "numa"),
                    healthy=fields[6].strip().lower() == "true",
                    mode=fields[8].strip() if len(fields) > 8 and fields[8].strip() else "hami-core",
                )
            )
        return out

    def encode_register(self, devices: list[RegisteredDevice]) -> str:
        return json.dumps(
            [
                {
                    "id": d.uuid,
                    "index": d.index,
                    "count": d.split_count,
                    "devmem": d.memory_mib,
                    "devcore": d.cores_pct,
                    "type": d.model,
                    "numa": d.numa,
                    "mode": d.mode,
                    "health": d.healthy,
                }
                for d in devices
            ],
            separators=(",", ":"),
        )

    def capacity_devices(self, node: str, capacity: Mapping[str, object], where: str) -> list[RegisteredDevice]:
        """Devices derived from the node's capacity (none for vendors whose device plugin registers them)."""
        return []

    def display_model(self, registered_type: str) -> str:
        prefix = self.names.device_type_prefix
        if prefix and registered_type.startswith(prefix):
            return registered_type[len(prefix):]
        return registered_type


def full_device_type(prefix: str, model: str) -> str:
    """The type string a device plugin registers for ``model``: ``prefix + model`` unless the model already
    starts with the vendor word (``NVIDIA A10`` stays, ``A100`` becomes ``NVIDIA-A100``)."""
    word = prefix.rstrip("-").upper()
    if not word or model.upper().startswith(word):
        return model
    return f"{prefix}{model}"


class _Reader(Protocol):
    def __call__(self, name: str, limit: int = INT32_MAX) -> int | None: ...
