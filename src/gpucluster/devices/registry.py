"""The explicit table of device vendors, built from settings, and what needs all of them at once:
turning Pod manifests into model pods and Node manifests into device lists."""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.devices import cambricon, hami, hygon, nvidia
from gpucluster.devices.base import (
    DeviceInputError,
    DeviceVendor,
    HamiVendor,
    RegisteredDevice,
    VendorSettings,
    full_device_type,
    quantity,
)
from gpucluster.devices.hami import GPU_POLICY_ANNOTATION, NODE_POLICY_ANNOTATION
from gpucluster.devices.quantity import cpu_milli, memory_mib, show, whole_number
from gpucluster.model import (
    ContainerRequest,
    DeviceConstraints,
    DeviceRequest,
    DeviceSpec,
    Pod,
    Policy,
)
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION, TENANT_ANNOTATION
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI, VENDOR_CAMBRICON

VendorFactory = Callable[[VendorSettings | None], HamiVendor]

FACTORIES: Mapping[str, VendorFactory] = {
    "nvidia": nvidia.make,
    "cambricon": cambricon.make,
    "hygon": hygon.make,
}
"""Every vendor gpucluster knows; a registry holds one instance of each it is configured with."""

_INT32 = re.compile(r"^[+-]?[0-9]{1,10}$")

CORE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
"""Container resources Kubernetes defines itself (plus ``hugepages-<size>``)."""
RESOURCES_FIELDS = ("limits", "requests", "claims")
"""The fields of a container's ``resources``."""

_TYPE_PREFIXES: Mapping[str, str] = {
    nvidia.NAMES.vendor: nvidia.NAMES.device_type_prefix,
    hygon.NAMES.vendor: hygon.NAMES.device_type_prefix,
}


def device_type_string(vendor: str, model: str) -> str:
    """The full type string HAMi matches ``use-...type`` annotations against (``NVIDIA-A100``, ``DCU-K100_AI``,
    ``MLU``): a model registered with its vendor prefix keeps it, a bare model (cluster specs) gets it."""
    prefix = _TYPE_PREFIXES.get(vendor)
    return model if prefix is None or vendor == VENDOR_CAMBRICON else full_device_type(prefix, model)


@dataclass(frozen=True, slots=True)
class DeviceSettings:
    """Scheduler-wide device settings: which vendors are on, each with its own settings."""

    vendors: Mapping[str, VendorSettings] = field(
        default_factory=lambda: {name: VendorSettings() for name in FACTORIES}
    )


def _suggest(word: str, choices: Iterable[str]) -> str:
    options = list(choices)
    qualified = [c for c in options if c.endswith(f"/{word}")]  # "gpu" -> "nvidia.com/gpu"
    close = qualified or difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


class VendorRegistry:
    """Vendor name -> vendor instance. Duplicate or unknown names are errors."""

    def __init__(self, vendors: Iterable[DeviceVendor]) -> None:
        self._vendors: dict[str, DeviceVendor] = {}
        for v in vendors:
            if v.names.vendor in self._vendors:
                raise ValueError(f"vendor {v.names.vendor!r} registered twice")
            self._vendors[v.names.vendor] = v
        self.device_resources: frozenset[str] = frozenset(r for v in self._vendors.values() for r in v.names.resources)
        """Every resource name a configured vendor reads (the rest are plain extended resources)."""

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
        """A Kubernetes Pod manifest -> :class:`Pod`. Errors name ``where`` and the field; one
        :class:`DeviceInputError` carries every problem of the pod."""
        if not isinstance(manifest, Mapping):
            raise DeviceInputError(f"{where}: must be a mapping (a Pod manifest)")
        kind = manifest.get("kind", "Pod")
        if kind != "Pod":
            raise DeviceInputError(f"{where}: kind: expected Pod, got {kind!r}")
        meta = manifest.get("metadata") or {}
        if not isinstance(meta, Mapping) or not meta.get("name"):
            raise DeviceInputError(f"{where}: metadata.name: missing")
        problems: list[str] = []
        name = str(meta["name"])
        namespace = str(meta.get("namespace") or "default")
        annotations = self._string_map(meta.get("annotations"), f"{where}: metadata.annotations", problems)
        labels = self._string_map(meta.get("labels"), f"{where}: metadata.labels", problems)
        spec = manifest.get("spec") or {}
        if not isinstance(spec, Mapping):
            raise DeviceInputError(f"{where}: spec: must be a mapping")
        raw_containers = spec.get("containers") or []
        if not isinstance(raw_containers, list) or not raw_containers:
            problems.append(f"{where}: spec.containers: must be a non-empty list")
            raw_containers = []
        raw_init = spec.get("initContainers") or []
        if not isinstance(raw_init, list):
            problems.append(f"{where}: spec.initContainers: must be a list")
            raw_init = []
        containers = self._containers(raw_containers, f"{where}: spec.containers", problems)
        init_containers = self._containers(raw_init, f"{where}: spec.initContainers", problems)

        def attempt(fn: Callable[[], Any], default: Any) -> Any:
            try:
                return fn()
            except DeviceInputError as exc:
                problems.extend(exc.problems)
                return default

        node_policy = attempt(lambda: self._policy(annotations, NODE_POLICY_ANNOTATION, where), None)
        gpu_policy = attempt(lambda: self._gpu_policy(annotations, where), None)
        attempt(lambda: self._check_hami_annotations(annotations, where), None)
        gang_min = attempt(lambda: self._int_annotation(annotations, GANG_MIN_ANNOTATION, where), 0)
        priority = attempt(lambda: self._priority(spec.get("priority"), where), 0)
        if problems:
            raise DeviceInputError(*problems)
        return Pod(
            name=name,
            namespace=namespace,
            uid=str(meta.get("uid") or ""),
            containers=containers,
            constraints=self._constraints(annotations),
            node_policy=node_policy,
            gpu_policy=gpu_policy,
            labels=labels,
            annotations=annotations,
            priority=priority,
            tenant=annotations.get(TENANT_ANNOTATION, ""),
            gang=annotations.get(GANG_ANNOTATION, ""),
            gang_min_member=gang_min,
            scheduler_name=str(spec.get("schedulerName") or ""),
            init_containers=init_containers,
        )

    @staticmethod
    def _string_map(raw: object, where: str, problems: list[str]) -> dict[str, str]:
        if raw is None:
            return {}
        if not isinstance(raw, Mapping):
            problems.append(f"{where}: must be a mapping")
            return {}
        return {str(k): str(v) for k, v in raw.items()}

    @staticmethod
    def _priority(raw: object, where: str) -> int:
        """``spec.priority``: an int32, as Kubernetes has it (negative allowed)."""
        text = str(raw or 0).strip()
        if not _INT32.match(text) or not -(2**31) <= int(text) < 2**31:
            raise DeviceInputError(f"{where}: spec.priority: must be a 32-bit integer, got {show(raw)}")
        return int(text)

    def _containers(self, raw: list[object], where: str, problems: list[str]) -> tuple[ContainerRequest, ...]:
        out = []
        for i, c in enumerate(raw):
            try:
                out.append(self._parse_container(c, f"{where}[{i}]"))
            except DeviceInputError as exc:
                problems.extend(exc.problems)
        return tuple(out)

    def _parse_container(self, raw: object, where: str) -> ContainerRequest:
        if not isinstance(raw, Mapping):
            raise DeviceInputError(f"{where}: must be a mapping")
        resources = raw.get("resources") or {}
        if not isinstance(resources, Mapping):
            raise DeviceInputError(f"{where}.resources: must be a mapping")
        problems: list[str] = []
        for key in resources:
            if key not in RESOURCES_FIELDS:
                problems.append(f"{where}.resources.{key}: unknown field{_suggest(str(key), RESOURCES_FIELDS)}"
                                f" (a container's resources has {', '.join(RESOURCES_FIELDS)})")
        limits_raw, requests_raw = resources.get("limits") or {}, resources.get("requests") or {}
        for label, value in (("limits", limits_raw), ("requests", requests_raw)):
            if not isinstance(value, Mapping):
                problems.append(f"{where}.resources.{label}: must be a mapping of resource names to quantities")
        limits = {str(k): v for k, v in limits_raw.items()} if isinstance(limits_raw, Mapping) else {}
        requests = {str(k): v for k, v in requests_raw.items()} if isinstance(requests_raw, Mapping) else {}
        merged = {**requests, **limits}  # device resources are read from limits, falling back to requests
        cpu = mem = 0
        try:
            cpu = cpu_milli(requests.get("cpu", limits.get("cpu", 0)))
        except ValueError as exc:
            problems.append(f"{where}.resources.requests.cpu: {exc}")
        try:
            mem = memory_mib(requests.get("memory", limits.get("memory", 0)))
        except ValueError as exc:
            problems.append(f"{where}.resources.requests.memory: {exc}")
        extended: dict[str, int] = {}
        known = (*CORE_RESOURCES, *sorted(self.device_resources))
        for res in merged:
            if res in CORE_RESOURCES or res.startswith("hugepages-") or res in self.device_resources:
                continue
            section = "limits" if res in limits else "requests"
            if "/" not in res:
                problems.append(f"{where}.resources.{section}.{res}: unknown resource{_suggest(res, known)}")
                continue
            try:
                extended[res] = quantity(merged[res], f"{where}.resources.{section}", res, limit=1 << 62)
            except DeviceInputError as exc:
                problems.extend(exc.problems)
        devices: list[DeviceRequest] = []
        for vendor in self._vendors.values():
            try:
                req = vendor.parse_container(merged, f"{where}.resources.limits")
            except DeviceInputError as exc:
                problems.extend(exc.problems)
                continue
            if req is not None:
                devices.append(req)
        if problems:
            raise DeviceInputError(*problems)
        return ContainerRequest(name=str(raw.get("name") or ""), cpu_milli=cpu, memory_mib=mem,
                                devices=tuple(devices), extended=extended)

    def _constraints(self, annotations: Mapping[str, str]) -> DeviceConstraints:
        per_vendor: dict[str, DeviceConstraints] = {}
        for v in self._vendors.values():
            n = v.names
            types = v.type_annotations_apply
            c = DeviceConstraints(
                hami.split_list(annotations.get(n.use_type_annotation, "")) if types else (),
                hami.split_list(annotations.get(n.nouse_type_annotation, "")) if types else (),
                hami.split_list(annotations.get(n.use_uuid_annotation, "")),
                hami.split_list(annotations.get(n.nouse_uuid_annotation, "")),
            )
            if not c.empty:
                per_vendor[n.vendor] = c
        return DeviceConstraints(per_vendor=per_vendor)

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
    def _gpu_policy(annotations: Mapping[str, str], where: str) -> Policy | None:
        """The first binpack/spread of the (possibly chained) GPU policy annotation, validated whole."""
        value = annotations.get(GPU_POLICY_ANNOTATION)
        if value is None:
            return None
        tokens = hami.parse_gpu_policy(value, f"{where}: metadata.annotations[{GPU_POLICY_ANNOTATION}]")
        for t in tokens:
            if t in (hami.POLICY_BINPACK, hami.POLICY_SPREAD):
                return Policy(t)
        return None

    @staticmethod
    def _check_hami_annotations(annotations: Mapping[str, str], where: str) -> None:
        problems: list[str] = []
        checks: list[tuple[str, Callable[[str, str], object]]] = [
            (hami.NUMA_BIND_ANNOTATION, hami.parse_bool),
            (hami.SCORING_WEIGHTS_ANNOTATION, hami.parse_scoring_weights),
        ]
        for key, check in checks:
            if key in annotations:
                try:
                    check(annotations[key], f"{where}: metadata.annotations[{key}]")
                except DeviceInputError as exc:
                    problems.extend(exc.problems)
        if problems:
            raise DeviceInputError(*problems)

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
        capacity: Mapping[str, object] | None = None,
    ) -> list[DeviceSpec]:
        """Every vendor's devices on a node, indexed in order of appearance.

        A vendor whose HAMi backend derives devices from the node's capacity (Cambricon) is read from
        ``capacity`` first; the others (and Cambricon when the capacity has none) from their register
        annotation. The memory a device registers is taken as schedulable memory: HAMi's device plugin has
        already applied ``deviceMemoryScaling``. UUIDs in ``hami.io/device-cordon`` are cordoned."""
        devices: list[DeviceSpec] = []
        cordoned = set(hami.split_list(annotations.get(hami.DEVICE_CORDON_ANNOTATION, "")))
        for vendor in self._vendors.values():
            key = vendor.names.register_annotation
            regs: list[RegisteredDevice] = []
            if capacity:
                regs = vendor.capacity_devices(node_name, capacity, f"{where}: status.capacity")
            if not regs and annotations.get(key):
                regs = vendor.parse_register(annotations[key], f"{where}: metadata.annotations[{key}]")
            scaling = vendor.settings.memory_scaling
            for reg in regs:
                index = len(devices)
                devices.append(
                    DeviceSpec(
                        uuid=reg.uuid,
                        index=index,
                        vendor=vendor.names.vendor,
                        model=vendor.display_model(reg.model),
                        type_name=reg.model,
                        memory_mib=reg.memory_mib,
                        physical_memory_mib=int(reg.memory_mib / scaling),
                        core_milli=reg.cores_pct * PERCENT_TO_CORE_MILLI if reg.cores_pct else 1000,
                        numa=reg.numa,
                        nvlink_domain=(index // nvlink_domain_size) if nvlink_domain_size > 0 else -1,
                        max_tasks=max(reg.split_count, 1),
                        healthy=reg.healthy,
                        mode=reg.mode,
                        cordoned=reg.uuid in cordoned,
                    )
                )
        return devices

    def node_extended(self, allocatable: Mapping[str, object]) -> dict[str, int]:
        """The extended resources a node offers: whole-number ``status.allocatable`` entries that are neither
        Kubernetes' own (CPU, memory, pods, storage, hugepages) nor a device vendor's."""
        out: dict[str, int] = {}
        for name, value in allocatable.items():
            res = str(name)
            if "/" not in res or res in self.device_resources:
                continue
            try:
                out[res] = quantity(value, "", res, limit=1 << 62)
            except DeviceInputError:
                continue  # not a countable resource; a pod cannot ask for a fraction of one either
        return out

    @staticmethod
    def node_pair_scores(annotations: Mapping[str, str], where: str) -> dict[str, dict[str, int]]:
        value = annotations.get(hami.PAIR_SCORE_ANNOTATION)
        if not value:
            return {}
        return hami.parse_pair_scores(value, f"{where}: metadata.annotations[{hami.PAIR_SCORE_ANNOTATION}]")
