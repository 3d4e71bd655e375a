"""Pure conversions between Kubernetes objects (camelCase JSON dicts, as the API server sends them) and the
model: Node -> :class:`NodeSpec`, HAMi handshake timestamps, decisions <-> HAMi pod annotations.

No client import here: everything works on plain dicts, so it is unit-tested without a server.

Decision annotations (HAMi's format, one annotation per vendor)::

    hami.io/vgpu-devices-to-allocate: GPU-a,NVIDIA,4000,30:GPU-b,NVIDIA,4000,30:;;
                                      ^ device: UUID,TYPE,<MiB>,<cores %>:   ^ one ';' per container
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpucluster.devices import DeviceInputError, DeviceVendor, VendorRegistry, cambricon
from gpucluster.devices.quantity import cpu_milli, memory_mib
from gpucluster.model import Allocation, DeviceGrant, NodeSpec, Pod
from gpucluster.model.labels import LEAF_LABEL, POOL_LABEL, RACK_LABEL, SPINE_LABEL
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI, VENDOR_CAMBRICON

VGPU_NODE_ANNOTATION = "hami.io/vgpu-node"
VGPU_TIME_ANNOTATION = "hami.io/vgpu-time"
BIND_PHASE_ANNOTATION = "hami.io/bind-phase"
BIND_TIME_ANNOTATION = "hami.io/bind-time"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

_HANDSHAKE_FORMATS = ("%Y.%m.%d %H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S")


class KubeInputError(ValueError):
    """A Kubernetes object (pod, node, annotation) cannot be understood; the message says where and why."""


# ------------------------------------------------------------------------------------------------ names
def device_type(vendor: DeviceVendor) -> str:
    """HAMi's device type word in decision annotations (``NVIDIA``, ``MLU``, ``DCU``)."""
    prefix = vendor.names.device_type_prefix.rstrip("-")
    return prefix or vendor.names.vendor.upper()


def allocated_annotation(vendor: DeviceVendor) -> str:
    """HAMi's record of what was allocated (``hami.io/vgpu-devices-allocated``); unlike ``...-to-allocate``
    the device plugin does not erase it as it hands devices out, so recovery reads it first."""
    return vendor.names.allocate_annotation.replace("-to-allocate", "-allocated")


# ------------------------------------------------------------------------------------------------ nodes
@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What the scheduler keeps about one Kubernetes Node."""

    spec: NodeSpec
    ready: bool
    """The node's Ready condition is True."""
    unschedulable: bool
    """``spec.unschedulable`` (cordoned)."""
    handshake: float
    """Newest device-plugin handshake time (epoch seconds) over the node's vendors; ``inf`` when the node
    has no handshake annotation (no handshake protocol in use), ``-inf`` when the devices were deleted."""

    @property
    def signature(self) -> tuple[Any, ...]:
        """Everything that needs the node's row rebuilt when it changes (health, readiness and handshake
        are updated in place)."""
        s = self.spec
        devs = tuple((d.uuid, d.vendor, d.model, d.type_name, d.memory_mib, d.core_milli, d.max_tasks, d.numa,
                      d.nvlink_domain, d.mode, d.cordoned, d.dra, d.hami) for d in s.devices)
        return (s.cpu_milli, s.memory_mib, s.rack, s.leaf, s.spine, devs, tuple(sorted(s.extended.items())),
                tuple(sorted((k, tuple(sorted(v.items()))) for k, v in s.pair_scores.items())))


def parse_handshake(value: str | None) -> float:
    """``Reported_2024.05.16 09:12:13`` (or ``Requesting_...``, ISO 8601) -> epoch seconds (UTC)."""
    if value is None or not value.strip():
        return math.inf
    text = value.strip()
    prefix, _, stamp = text.partition("_")
    if prefix == "Deleted":
        return -math.inf
    if not stamp:
        raise KubeInputError(f"handshake {value!r}: expected Reported_<time> or Requesting_<time>")
    stamp = stamp.strip()
    cut = stamp.split(".")
    # drop fractional seconds after the seconds field ("... 09:12:13.123456" or "...:13.123Z")
    if len(cut) > 1 and ":" in cut[-2]:
        stamp = ".".join(cut[:-1])
    for fmt in _HANDSHAKE_FORMATS:
        try:
            return dt.datetime.strptime(stamp, fmt).replace(tzinfo=dt.UTC).timestamp()
        except ValueError:
            continue
    raise KubeInputError(f"handshake {value!r}: unknown time format")


def format_handshake(when: float, prefix: str = "Reported") -> str:
    return f"{prefix}_" + dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y.%m.%d %H:%M:%S")


def node_info(obj: Mapping[str, Any], registry: VendorRegistry, nvlink_domain_size: int = 8) -> NodeInfo:
    """A Node (JSON dict) -> :class:`NodeInfo`. Raises :class:`KubeInputError` naming the node and field."""
    meta = obj.get("metadata") or {}
    name = str(meta.get("name") or "")
    if not name:
        raise KubeInputError("node: metadata.name: missing")
    where = f"node {name}"
    status = obj.get("status") or {}
    alloc = status.get("allocatable") or status.get("capacity") or {}
    try:
        cpu = cpu_milli(alloc.get("cpu", 0))
    except ValueError as exc:
        raise KubeInputError(f"{where}: status.allocatable.cpu: {exc}") from None
    try:
        mem = memory_mib(alloc.get("memory", 0))
    except ValueError as exc:
        raise KubeInputError(f"{where}: status.allocatable.memory: {exc}") from None
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    capacity = status.get("capacity") or alloc
    try:
        devices = registry.node_devices(name, annotations, where, nvlink_domain_size, capacity=capacity)
        pair_scores = registry.node_pair_scores(annotations, where)
    except DeviceInputError as exc:
        raise KubeInputError(str(exc)) from None
    handshake = math.inf
    stamps: list[float] = []
    for vendor in registry:
        if annotations.get(vendor.names.register_annotation):
            raw = annotations.get(vendor.names.handshake_annotation)
            if raw is not None:
                try:
                    stamps.append(parse_handshake(raw))
                except KubeInputError as exc:
                    raise KubeInputError(
                        f"{where}: metadata.annotations[{vendor.names.handshake_annotation}]: {exc}"
                    ) from None
    if stamps:
        handshake = min(stamps)
    conditions = status.get("conditions") or []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    spec = obj.get("spec") or {}
    node = NodeSpec(
        name=name,
        cpu_milli=cpu,
        memory_mib=mem,
        devices=tuple(devices),
        labels=labels,
        rack=labels.get(RACK_LABEL, labels.get("topology.kubernetes.io/zone", "")),
        leaf=labels.get(LEAF_LABEL, ""),
        spine=labels.get(SPINE_LABEL, ""),
        pool=labels.get(POOL_LABEL, ""),
        extended=registry.node_extended(alloc),
        pair_scores=pair_scores,
    )
    return NodeInfo(node, ready, bool(spec.get("unschedulable")), handshake)


# ------------------------------------------------------------------------------------------------ pods
def pod_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name')}"


def parse_pod(obj: Mapping[str, Any], registry: VendorRegistry) -> Pod:
    """A Pod (JSON dict) -> :class:`Pod` (with ``spec.nodeSelector``); raises :class:`KubeInputError` naming the
    pod and field."""
    try:
        pod = registry.parse_pod(obj, f"pod {pod_key(obj)}")
    except DeviceInputError as exc:
        raise KubeInputError(str(exc)) from None
    selector = (obj.get("spec") or {}).get("nodeSelector")
    if selector:
        if not isinstance(selector, Mapping):
            raise KubeInputError(f"pod {pod_key(obj)}: spec.nodeSelector: must be a mapping of labels")
        pod = dataclasses.replace(pod, node_selector={str(k): str(v) for k, v in selector.items()})
    return pod


def pod_node(obj: Mapping[str, Any]) -> str:
    return str((obj.get("spec") or {}).get("nodeName") or "")


def pod_phase(obj: Mapping[str, Any]) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def pod_holds_resources(obj: Mapping[str, Any]) -> bool:
    """Bound and not finished: its requests count against its node."""
    return bool(pod_node(obj)) and pod_phase(obj) not in TERMINAL_PHASES


def decision_annotations(allocation: Allocation, registry: VendorRegistry, now: float) -> dict[str, str]:
    """The annotations HAMi's scheduler writes on a pod before binding it (for every vendor it uses): per vendor
    ``UUID,TYPE,<MiB>,<cores %>:`` per device, one ``;``-terminated group per container, init containers first."""
    out: dict[str, str] = {}
    containers = (*allocation.init_devices, *allocation.devices)
    for vendor in registry:
        vname = vendor.names.vendor
        mine = [[g for g in per_container if g.vendor == vname] for per_container in containers]
        if not any(mine):
            continue
        kind = device_type(vendor)
        text = "".join(
            "".join(f"{g.uuid},{kind},{g.memory_mib},{g.core_milli // PERCENT_TO_CORE_MILLI}:" for g in grants) + ";"
            for grants in mine
        )
        out[vendor.names.allocate_annotation] = text
        out[allocated_annotation(vendor)] = text
        if vname == VENDOR_CAMBRICON:
            first = next(grants[0] for grants in mine if grants)
            out[cambricon.ASSIGNED_ANNOTATION] = "false"
            out[cambricon.PROFILE_ANNOTATION] = (
                f"{first.device_index}_{first.core_milli // PERCENT_TO_CORE_MILLI}_"
                f"{first.memory_mib // cambricon.MEMORY_UNIT_MIB}"
            )
    stamp = str(int(now))
    out[VGPU_NODE_ANNOTATION] = allocation.node
    out[VGPU_TIME_ANNOTATION] = stamp
    out[BIND_TIME_ANNOTATION] = stamp
    out[BIND_PHASE_ANNOTATION] = "allocating"
    return out


def _decode_devices(text: str, where: str) -> list[list[tuple[str, str, int, int]]]:
    containers: list[list[tuple[str, str, int, int]]] = []
    for ci, part in enumerate(text.split(";")):
        devs: list[tuple[str, str, int, int]] = []
        for item in (x for x in part.split(":") if x.strip()):
            fields = item.split(",")
            if len(fields) < 4:
                raise KubeInputError(f"{where}: container {ci}: expected 'UUID,TYPE,MEM,CORES', got {item!r}")
            try:
                devs.append((fields[0].strip(), fields[1].strip(), int(fields[2]), int(fields[3])))
            except ValueError:
                raise KubeInputError(f"{where}: container {ci}: memory and cores must be integers: {item!r}") from None
        containers.append(devs)
    # "a;b;" splits into [a, b, ""]: the last empty piece is the terminator, not a container
    if containers and not containers[-1] and text.rstrip().endswith(";"):
        containers.pop()
    return containers


def allocation_from_pod(pod: Pod, node: NodeSpec, registry: VendorRegistry) -> Allocation:
    """Rebuild what a bound pod holds from its decision annotations (recovery after a restart).

    A pod without decision annotations holds only its CPU and memory. Raises :class:`KubeInputError` when
    an annotation names a device the node does not have."""
    n_init = len(pod.init_containers)
    per_container: list[list[DeviceGrant]] = [[] for _ in range(n_init + len(pod.containers))]
    index = {d.uuid: d for d in node.devices}
    for vendor in registry:
        key = allocated_annotation(vendor)
        text = pod.annotations.get(key)
        if text is None:
            key = vendor.names.allocate_annotation
            text = pod.annotations.get(key)
        if not text:
            continue
        where = f"pod {pod.key}: metadata.annotations[{key}]"
        for ci, devs in enumerate(_decode_devices(text, where)):
            if ci >= len(per_container):
                if devs:
                    raise KubeInputError(f"{where}: names container {ci}, the pod has {len(per_container)}"
                                         f"{f' (with {n_init} init containers)' if n_init else ''}")
                continue
            for uuid, _kind, mem, cores in devs:
                dev = index.get(uuid)
                if dev is None:
                    raise KubeInputError(f"{where}: device {uuid} is not on node {node.name}")
                per_container[ci].append(
                    DeviceGrant(dev.index, uuid, dev.vendor, mem, cores * PERCENT_TO_CORE_MILLI)
                )
    return Allocation(
        pod_key=pod.key, node=node.name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib,
        devices=tuple(tuple(c) for c in per_container[n_init:]), tenant=pod.charged_tenant, pod=pod,
        init_devices=tuple(tuple(c) for c in per_container[:n_init]),
    )


def node_names(args: Mapping[str, Any]) -> tuple[list[str], list[Mapping[str, Any]] | None]:
    """ExtenderArgs -> (candidate node names, the full Node objects when not nodeCacheCapable)."""
    names = args.get("nodenames") or args.get("nodeNames") or args.get("NodeNames")
    if names is not None:
        if not isinstance(names, Sequence) or isinstance(names, str):
            raise KubeInputError("nodenames: must be a list of node names")
        return list(map(str, names)), None
    nodes = args.get("nodes") or args.get("Nodes")
    if nodes is None:
        return [], None
    if not isinstance(nodes, Mapping) or not isinstance(nodes.get("items") or [], list):
        raise KubeInputError("nodes: must be a NodeList with items")
    items: list[Mapping[str, Any]] = list(nodes.get("items") or [])
    out: list[str] = []
    for i, item in enumerate(items):
        name = (item.get("metadata") or {}).get("name") if isinstance(item, Mapping) else None
        if not name:
            raise KubeInputError(f"nodes.items[{i}].metadata.name: missing")
        out.append(str(name))
    return out, items
