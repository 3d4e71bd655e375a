"""The explicit table of device vendors, built from settings, and what needs all of them at once:
turning Pod manifests into model pods and node annotations into device lists."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from gpucluster.devices import cambricon, hygon, nvidia
from gpucluster.devices.base import DeviceInputError, DeviceVendor, HamiVendor, VendorSettings
from gpucluster.devices.quantity import cpu_milli, memory_mib, show, whole_number
from gpucluster.model import (
    ContainerRequest,
    DeviceConstraints,
    DeviceRequest,
    DeviceSpec,
    Pod,
    Policy,
)
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI

VendorFactory = Callable[[VendorSettings | None], HamiVendor]

FACTORIES: Mapping[str, VendorFactory] = {
    "nvidia": nvidia.make,
    "cambricon": cambricon.make,
    "hygon": hygon.make,
}
"""Every vendor gpucluster knows; a registry holds one instance of each it is configured with."""

NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
GANG_ANNOTATION = "gpucluster.io/gang"
GANG_MIN_ANNOTATION = "gpucluster.io/gang-min-member"
TENANT_ANNOTATION = "gpucluster.io/tenant"
_INT32 = re.compile(r"^[+-]?[0-9]{1,10}$")


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """Scheduler-wide device settings: which vendors are on, each with its own settings."""

    vendors: Mapping[str, VendorSettings] = field(
        default_factory=lambda: {name: VendorSettings() for name in FACTORIES}
    )


def _split(value: str) -> tuple[str, ...]:
    return tuple(s.strip() for s in value.split(",") if s.strip())


class VendorRegistry:
    """Vendor name -> vendor instance. Duplicate or unknown names are errors."""

    def __init__(self, vendors: Iterable[DeviceVendor]) -> None:
        self._vendors: dict[str, DeviceVendor] = {}
        for v in vendors:
            if v.names.vendor in self._vendors:
                raise ValueError(f"vendor {v.names.vendor!r} registered twice")
            self._vendors[v.names.vendor] = v

    @classmethod
    def from_settings(cls, settings: DeviceSettings | None = None) -> VendorRegistry:
        settings = settings or DeviceSettings()
        unknown = sorted(set(settings.vendors) - set(FACTORIES))
        if unknown:
            raise ValueError(f"unknown device vendor(s): {', '.join(unknown)}; known: {', '.join(FACTORIES)}")
        return cls(FACTORIES[name](s) for name, s in settings.vendors.items())

    def __getitem__(self, vendor: str) -> DeviceVendor:
        return self._vendors[vendor]

    def __iter__(self) -> Iterator[DeviceVendor]:
        return iter(self._vendors.values())

    @property
    def names(self) -> list[str]:
        return list(self._vendors)

    # ------------------------------------------------------------------ pods
    def parse_pod(self, manifest: Mapping[str, object], where: str) -> Pod:
        """A Kubernetes Pod manifest -> :class:`Pod`. Errors name ``where`` and the field."""
        if not isinstance(manifest, Mapping):
            raise DeviceInputError(f"{where}: must be a mapping (a Pod manifest)")
        kind = manifest.get("kind", "Pod")
        if kind != "Pod":
            raise DeviceInputError(f"{where}: kind: expected Pod, got {kind!r}")
        meta = manifest.get("metadata") or {}
        if not isinstance(meta, Mapping) or not meta.get("name"):
            raise DeviceInputError(f"{where}: metadata.name: missing")
        name = str(meta["name"])
        namespace = str(meta.get("namespace") or "default")
        annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        spec = manifest.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise DeviceInputError(f"{where}: spec: must be a mapping")
        raw_containers = spec.get("containers") or []
        if not isinstance(raw_containers, list) or not raw_containers:
            raise DeviceInputError(f"{where}: spec.containers: must be a non-empty list")
        containers = tuple(
            self._parse_container(c, f"{where}: spec.containers[{i}]") for i, c in enumerate(raw_containers)
        )
        return Pod(
            name=name,
            namespace=namespace,
            uid=str(meta.get("uid") or ""),
            containers=containers,
            constraints=self._constraints(annotations),
            node_policy=self._policy(annotations, NODE_POLICY_ANNOTATION, where),
            gpu_policy=self._policy(annotations, GPU_POLICY_ANNOTATION, where),
            labels=labels,
            annotations=annotations,
            priority=self._priority(spec.get("priority"), where),
            tenant=annotations.get(TENANT_ANNOTATION, ""),
            gang=annotations.get(GANG_ANNOTATION, ""),
            gang_min_member=self._int_annotation(annotations, GANG_MIN_ANNOTATION, where),
            scheduler_name=str(spec.get("schedulerName") or ""),
        )

    def _parse_container(self, raw: object, where: str) -> ContainerRequest:
        if not isinstance(raw, Mapping):
            raise DeviceInputError(f"{where}: must be a mapping")
        resources = raw.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise DeviceInputError(f"{where}.resources: must be a mapping")
        limits = dict(resources.get("limits") or {})
        requests = dict(resources.get("requests") or {})
        merged = {**requests, **limits}  # device resources are read from limits, falling back to requests
        cpu_raw = requests.get("cpu", limits.get("cpu", 0))
        mem_raw = requests.get("memory", limits.get("memory", 0))
        try:
            cpu = cpu_milli(cpu_raw)
        except ValueError as exc:
            raise DeviceInputError(f"{where}.resources.requests.cpu: {exc}") from None
        try:
            mem = memory_mib(mem_raw)
        except ValueError as exc:
            raise DeviceInputError(f"{where}.resources.requests.memory: {exc}") from None
        devices: list[DeviceRequest] = []
        for vendor in self._vendors.values():
            req = vendor.parse_container(merged, f"{where}.resources.limits")
            if req is not None:
                devices.append(req)
        return ContainerRequest(name=str(raw.get("name") or ""), cpu_milli=cpu, memory_mib=mem,
                                devices=tuple(devices))

    def _constraints(self, annotations: Mapping[str, str]) -> DeviceConstraints:
        use_t: list[str] = []
        nouse_t: list[str] = []
        use_u: list[str] = []
        nouse_u: list[str] = []
        for v in self._vendors.values():
            n = v.names
            use_t += _split(annotations.get(n.use_type_annotation, ""))
            nouse_t += _split(annotations.get(n.nouse_type_annotation, ""))
            use_u += _split(annotations.get(n.use_uuid_annotation, ""))
            nouse_u += _split(annotations.get(n.nouse_uuid_annotation, ""))
        return DeviceConstraints(
            tuple(dict.fromkeys(use_t)), tuple(dict.fromkeys(nouse_t)),
            tuple(dict.fromkeys(use_u)), tuple(dict.fromkeys(nouse_u)),
        )

    @staticmethod
    def _policy(annotations: Mapping[str, str], key: str, where: str) -> Policy | None:
        value = annotations.get(key)
        if value is None or value == "":
            return None
        try:
            return Policy(value.strip().lower())
        except ValueError:
            raise DeviceInputError(
                f"{where}: metadata.annotations[{key}]: must be binpack or spread, got {value!r}"
            ) from None

    @staticmethod
    def _priority(value: object, where: str) -> int:
        """``spec.priority``: an int32, as Kubernetes has it (negative allowed)."""
        text = str(value or 0).strip()
        if not _INT32.match(text) or not -(2**31) <= int(text) < 2**31:
            raise DeviceInputError(f"{where}: spec.priority: must be a 32-bit integer, got {show(value)}")
        return int(text)

    @staticmethod
    def _int_annotation(annotations: Mapping[str, str], key: str, where: str) -> int:
        value = annotations.get(key)
        if not value:
            return 0
        try:
            return whole_number(value)
        except ValueError as exc:
            raise DeviceInputError(f"{where}: metadata.annotations[{key}]: {exc}") from None

    # ------------------------------------------------------------------ nodes
    def node_devices(
        self,
        node_name: str,
        annotations: Mapping[str, str],
        where: str,
        nvlink_domain_size: int = 0,
    ) -> list[DeviceSpec]:
        """Every vendor's registered devices on a node, indexed in order of appearance."""
        devices: list[DeviceSpec] = []
        for vendor in self._vendors.values():
            key = vendor.names.register_annotation
            value = annotations.get(key)
            if not value:
                continue
            for reg in vendor.parse_register(value, f"{where}: metadata.annotations[{key}]"):
                index = len(devices)
                scaling = vendor.settings.memory_scaling
                devices.append(
                    DeviceSpec(
                        uuid=reg.uuid,
                        index=index,
                        vendor=vendor.names.vendor,
                        model=vendor.display_model(reg.model),
                        memory_mib=int(reg.memory_mib * scaling),
                        physical_memory_mib=reg.memory_mib,
                        core_milli=max(reg.cores_pct, 1) * PERCENT_TO_CORE_MILLI if reg.cores_pct else 1000,
                        numa=reg.numa,
                        nvlink_domain=(index // nvlink_domain_size) if nvlink_domain_size > 0 else -1,
                        max_tasks=max(reg.split_count, 1),
                        healthy=reg.healthy,
                    )
                )
        return devices
