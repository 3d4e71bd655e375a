"""The one protocol every device vendor implements, and the HAMi-style behaviour they share.

HAMi describes each vendor by the same handful of names: resource names for the device count, memory and
cores a container asks for, annotations that include or exclude device models and UUIDs, and the node
annotations its device plugin writes to register devices and to handshake with the scheduler. A vendor module
declares those names in a :class:`VendorNames` and gets parsing from :class:`HamiVendor`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from gpucluster.devices.quantity import whole_number
from gpucluster.model import DeviceRequest
from gpucluster.model.limits import MAX_DEVICE_MEMORY_MIB, MAX_DEVICES_PER_REQUEST, MAX_WHOLE_NUMBER
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI


class DeviceInputError(ValueError):
    """A pod's resources or a node's register annotation cannot be understood. The message says why."""


@dataclass(frozen=True, slots=True)
class VendorSettings:
    """Per-vendor scheduler settings (HAMi's names in brackets)."""

    split_count: int = 10
    """Most tasks per device (``deviceSplitCount``); used when the node does not report its own."""
    memory_scaling: float = 1.0
    """Memory overcommit factor (``deviceMemoryScaling``); > 1 lets tasks' memory sum exceed the device."""
    default_memory_mib: int = 0
    """Memory per device when a container names neither memory nor percentage (``defaultMem``); 0 = 100%."""
    default_cores_pct: int = 0
    """Cores (percent) per device when a container names none (``defaultCores``)."""


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
    allocate_annotation: str = ""
    """Pod annotation HAMi writes with the devices it chose (``hami.io/vgpu-devices-to-allocate``)."""
    device_type_prefix: str = ""
    """Prefix the device plugin puts in front of the model name in the register annotation."""


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


class DeviceVendor(Protocol):
    """What the scheduler needs from a vendor.

    ``parse_container`` turns a container's resource limits into a :class:`DeviceRequest` (or None when the
    container asks for none of this vendor's devices). ``parse_register`` / ``encode_register`` read and write
    the node annotation the vendor's device plugin keeps up to date. Errors are :class:`DeviceInputError`.
    """

    names: VendorNames
    settings: VendorSettings

    def parse_container(self, limits: Mapping[str, object], where: str) -> DeviceRequest | None: ...

    def parse_register(self, value: str, where: str) -> list[RegisteredDevice]: ...

    def encode_register(self, devices: list[RegisteredDevice]) -> str: ...

    def display_model(self, registered_type: str) -> str: ...


def _quantity(value: object, where: str, name: str, upper: int = MAX_WHOLE_NUMBER) -> int:
    """A Kubernetes quantity that must be a plain non-negative integer within ``upper`` here (the one bounded
    parser: ``devices.quantity.whole_number``)."""
    try:
        return whole_number(value, upper)
    except ValueError as exc:
        raise DeviceInputError(f"{where}: {name}: {exc}") from None


class HamiVendor:
    """A vendor whose pods and nodes use HAMi's conventions."""

    def __init__(self, names: VendorNames, settings: VendorSettings | None = None) -> None:
        self.names = names
        self.settings = settings or VendorSettings()

    def parse_container(self, limits: Mapping[str, object], where: str) -> DeviceRequest | None:
        n = self.names
        mine = {k for k in limits if k in (n.resource_count, n.resource_memory, n.resource_cores,
                                           n.resource_memory_pct) and k}
        if not mine:
            return None
        if n.resource_count not in limits:
            raise DeviceInputError(
                f"{where}: {sorted(mine)[0]} needs {n.resource_count} (the number of devices) as well"
            )
        count = _quantity(limits[n.resource_count], where, n.resource_count, MAX_DEVICES_PER_REQUEST)
        if count == 0:
            return None
        memory = (_quantity(limits[n.resource_memory], where, n.resource_memory, MAX_DEVICE_MEMORY_MIB)
                  if n.resource_memory in limits else None)
        pct = None
        if n.resource_memory_pct and n.resource_memory_pct in limits:
            pct = _quantity(limits[n.resource_memory_pct], where, n.resource_memory_pct)
            if pct > 100:
                raise DeviceInputError(f"{where}: {n.resource_memory_pct}: must be within 0..100, got {pct}")
        if memory is not None and pct is not None:
            raise DeviceInputError(
                f"{where}: give either {n.resource_memory} or {n.resource_memory_pct}, not both"
            )
        cores = (
            _quantity(limits[n.resource_cores], where, n.resource_cores)
            if n.resource_cores in limits
            else self.settings.default_cores_pct
        )
        if cores > 100:
            raise DeviceInputError(f"{where}: {n.resource_cores}: must be within 0..100, got {cores}")
        if memory is None and pct is None:
            if self.settings.default_memory_mib > 0:
                memory = self.settings.default_memory_mib
            else:
                pct = 100
        return DeviceRequest(
            vendor=n.vendor,
            count=count,
            memory_mib=memory or 0,
            memory_pct=pct,
            core_milli=cores * PERCENT_TO_CORE_MILLI,
        )

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
                    index=_quantity(item.get("index", i), at, "index"),
                    split_count=_quantity(item.get("count", self.settings.split_count), at, "count"),
                    memory_mib=_quantity(item.get("devmem", 0), at, "devmem", MAX_DEVICE_MEMORY_MIB),
                    cores_pct=_quantity(item.get("devcore", 100), at, "devcore"),
                    model=str(item.get("type", "")),
                    numa=_quantity(item.get("numa", 0), at, "numa"),
                    healthy=bool(item.get("health", False)),
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
                    f"{at}: expected 'uuid,count,devmem,devcore,type,numa,health', got {part!r}"
                )
            out.append(
                RegisteredDevice(
                    uuid=fields[0],
                    index=_quantity(fields[7], at, "index") if len(fields) > 7 else i,
                    split_count=_quantity(fields[1], at, "count"),
                    memory_mib=_quantity(fields[2], at, "devmem", MAX_DEVICE_MEMORY_MIB),
                    cores_pct=_quantity(fields[3], at, "devcore"),
                    model=fields[4],
                    numa=_quantity(fields[5], at, "numa"),
                    healthy=fields[6].strip().lower() == "true",
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
                    "mode": "hami-core",
                    "health": d.healthy,
                }
                for d in devices
            ],
            separators=(",", ":"),
        )

    def display_model(self, registered_type: str) -> str:
        prefix = self.names.device_type_prefix
        if prefix and registered_type.startswith(prefix):
            return registered_type[len(prefix):]
        return registered_type
