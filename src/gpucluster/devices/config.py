"""HAMi's device configuration file (the ``device-config.yaml`` of its Helm chart) -> :class:`DeviceSettings`.

The file is a mapping of vendor sections. gpucluster reads the ``nvidia``, ``cambricon`` and ``hygon``
sections; the settings the scheduler acts on are listed in ``_ACTED`` below, the ones only HAMi's device
plugin or webhook uses (``overwriteEnv``, ``gpuCorePolicy`` ...) are accepted and reported as not used. Sections
of vendors gpucluster does not schedule (``metax``, ``vnpus`` ...) are accepted and reported too. Anything else is
an error that names the key and suggests the closest known one. A vendor without a section keeps HAMi's
defaults (which are gpucluster's built-in defaults).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucluster import inputfile
from gpucluster.devices.base import VendorSettings
from gpucluster.devices.registry import FACTORIES, DeviceSettings


class DeviceConfigError(ValueError):
    """The device config cannot be used; ``str()`` lists every problem as ``FILE: path: why``."""


_ACTED: Mapping[str, Mapping[str, str]] = {
    # vendor section -> HAMi key -> VendorSettings field
    "nvidia": {
        "resourceCountName": "resource_count",
        "resourceMemoryName": "resource_memory",
        "resourceMemoryPercentageName": "resource_memory_pct",
        "resourceCoreName": "resource_cores",
        "resourcePriorityName": "resource_priority",
        "defaultMemory": "default_memory_mib",
        "defaultCores": "default_cores_pct",
        "defaultGPUNum": "default_device_count",
        "memoryFactor": "memory_factor",
        "deviceSplitCount": "split_count",
        "deviceMemoryScaling": "memory_scaling",
    },
    "cambricon": {
        "resourceCountName": "resource_count",
        "resourceMemoryName": "resource_memory",
        "resourceCoreName": "resource_cores",
    },
    "hygon": {
        "resourceCountName": "resource_count",
        "resourceMemoryName": "resource_memory",
        "resourceCoreName": "resource_cores",
        "memoryFactor": "memory_factor",
    },
}
_NOT_USED: Mapping[str, tuple[str, ...]] = {
    # HAMi keys the device plugin / webhook reads; the scheduler's placements do not depend on them
    "nvidia": ("overwriteEnv", "disableCoreLimit", "migProfileAllowlist", "gpuCorePolicy", "runtimeClassName",
               "deviceCoreScaling", "preConfiguredDeviceMemory", "libCudaLogLevel", "enableNumaTopology",
               "knownMigGeometries"),
    "cambricon": (),
    "hygon": (),
}
_OTHER_VENDORS = ("metax", "mthreads", "iluvatars", "enflame", "kunlun", "awsneuron", "amd", "vastai", "biren",
                  "vnpus")
"""Sections of vendors HAMi supports and gpucluster does not schedule."""

_STRING_FIELDS = frozenset({"resource_count", "resource_memory", "resource_memory_pct", "resource_cores",
                            "resource_priority"})


@dataclass(frozen=True, slots=True)
class DeviceConfig:
    """A loaded device config: the settings, and notes on what in it gpucluster does not act on."""

    settings: DeviceSettings
    notes: tuple[str, ...] = ()
    """One line per accepted-but-unused setting or section (a CLI prints them as warnings)."""
    source: str = ""
    values: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The settings acted on, per vendor section, with HAMi's key names (for ``--json`` reports)."""
    document: Mapping[str, Any] = field(default_factory=dict)
    """The ``device-config.yaml`` document as read (what ``k8s manifests`` ships in its ConfigMap)."""


def _suggest(key: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(key, choices, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _value(raw: Any, attr: str, at: str, problems: list[str]) -> Any:
    if attr in _STRING_FIELDS:
        if not isinstance(raw, str) or not raw.strip() or any(c.isspace() for c in raw.strip()):
            problems.append(f"{at}: must be a resource name, got {raw!r}")
            return None
        return raw.strip()
    if attr == "memory_scaling":
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            problems.append(f"{at}: must be a number, got {raw!r}")
            return None
        return float(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        problems.append(f"{at}: must be an integer, got {raw!r}")
        return None
    return raw


def parse_device_config(doc: Any, source: str = "device-config") -> DeviceConfig:
    """Validate a parsed device-config document; raises :class:`DeviceConfigError` listing every problem."""
    if doc is None:
        doc = {}
    if not isinstance(doc, Mapping):
        raise DeviceConfigError(f"{source}: must be a mapping of vendor sections (nvidia, cambricon, hygon ...)")
    problems: list[str] = []
    notes: list[str] = []
    vendors: dict[str, VendorSettings] = {}
    values: dict[str, dict[str, Any]] = {}
    sections = [*_ACTED, *_OTHER_VENDORS]
    for section, body in doc.items():
        key = str(section)
        if key in _OTHER_VENDORS:
            notes.append(f"{source}: {key}: gpucluster does not schedule this vendor's devices; section not used")
            continue
        if key not in _ACTED:
            problems.append(f"{source}: {key}: unknown section{_suggest(key, sections)}")
            continue
        if body is None:
            body = {}
        if not isinstance(body, Mapping):
            problems.append(f"{source}: {key}: must be a mapping")
            continue
        kwargs: dict[str, Any] = {}
        acted = _ACTED[key]
        for name, raw in body.items():
            at = f"{source}: {key}.{name}"
            if name in acted:
                value = _value(raw, acted[name], at, problems)
                if value is not None:
                    kwargs[acted[name]] = value
                    values.setdefault(key, {})[str(name)] = value
            elif name in _NOT_USED[key]:
                notes.append(f"{at}: used by HAMi's device plugin or webhook, not by the scheduler; not used")
            else:
                problems.append(f"{at}: unknown setting{_suggest(str(name), [*acted, *_NOT_USED[key]])}")
        try:
            vendors[key] = VendorSettings(**kwargs)
        except ValueError as exc:
            problems.append(f"{source}: {key}.{exc}")
    if problems:
        raise DeviceConfigError("\n".join(problems))
    all_vendors = {name: vendors.get(name, VendorSettings()) for name in FACTORIES}
    return DeviceConfig(DeviceSettings(all_vendors), tuple(notes), source, values)


def load_device_config(path: str | Path) -> DeviceConfig:
    """Read a HAMi ``device-config.yaml`` (or a ConfigMap holding one under ``data.device-config.yaml``)."""
    p = Path(path)
    try:
        doc = inputfile.load_yaml(p)
    except inputfile.InputFileError as exc:
        raise DeviceConfigError(str(exc)) from None
    if doc is None:
        raise DeviceConfigError(f"{p}: empty file (expected vendor sections: nvidia, cambricon, hygon ...)")
    source = str(p)
    if isinstance(doc, Mapping) and doc.get("kind") == "ConfigMap":
        data = doc.get("data") or {}
        inner = data.get("device-config.yaml") if isinstance(data, Mapping) else None
        if not isinstance(inner, str):
            raise DeviceConfigError(f"{p}: data.device-config.yaml: missing (a ConfigMap must hold the file there)")
        source = f"{p}: data.device-config.yaml"
        try:
            doc = inputfile.parse_yaml(inner, source)
        except inputfile.InputFileError as exc:
            raise DeviceConfigError(str(exc)) from None
    config = parse_device_config(doc, source)
    return dataclasses.replace(config, document=dict(doc) if isinstance(doc, Mapping) else {})
