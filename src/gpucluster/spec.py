"""Cluster input: our cluster-spec YAML, or Kubernetes Node manifests; and Pod manifest streams.

Both cluster formats are accepted wherever a command takes ``--cluster``; :func:`load_cluster` tells them
apart by ``kind``. Every error is a :class:`SpecError` whose message names the file, the item and the field::

    spec.yaml: nodePools[2].gpu.memoryMiB: must be > 0
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpucluster import inputfile
from gpucluster.devices import DeviceInputError, DeviceSettings, VendorRegistry, VendorSettings, device_type_string
from gpucluster.devices.quantity import cpu_milli, memory_mib
from gpucluster.model import ClusterState, DeviceSpec, Fabric, FabricType, NodeSpec, Pod
from gpucluster.model.labels import LEAF_LABEL, POOL_LABEL, RACK_LABEL, SPINE_LABEL
from gpucluster.model.limits import (
    MAX_CPU_MILLI,
    MAX_DEVICE_MEMORY_MIB,
    MAX_LINK_GBPS,
    MAX_MEMORY_MIB,
    MAX_NODES,
    MAX_TASKS_PER_DEVICE,
)
from gpucluster.model.resources import KNOWN_VENDORS

DEFAULT_SPEC_NAME = "default-cluster.yaml"


class SpecError(ValueError):
    """Bad cluster or pod input. ``str(err)`` is ``FILE: path.to.field: why``."""


# ---------------------------------------------------------------------------------------------- schema
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True, allow_inf_nan=False)


class GpuSpec(_Model):
    """The devices every node of a pool carries."""

    vendor: Literal["nvidia", "cambricon", "hygon"] = "nvidia"
    """Device vendor."""
    model: str = Field(min_length=1)
    """Model name, e.g. ``H100-SXM5-80GB`` (the scheduler matches ``use-gputype`` substrings against it)."""
    count: Annotated[int, Field(ge=1, le=64)]
    """Devices per node."""
    memory_mib: Annotated[int, Field(alias="memoryMiB", gt=0, le=MAX_DEVICE_MEMORY_MIB)]
    """Physical memory per device in MiB."""
    nvlink_domain_size: Annotated[int, Field(alias="nvlinkDomainSize", ge=0, le=64)] = 0
    """GPUs per NVLink domain inside a node (8 on HGX/DGX boards); 0 = PCIe only."""
    max_tasks: Annotated[int | None, Field(alias="maxTasks", ge=1, le=MAX_TASKS_PER_DEVICE)] = None
    """Most tasks sharing one device (HAMi ``deviceSplitCount``); default: the device config's (10)."""
    memory_overcommit: Annotated[float | None, Field(alias="memoryOvercommit", ge=1.0, le=16.0)] = None
    """Device memory overcommit factor (HAMi ``deviceMemoryScaling``); default: the device config's (1)."""


class NodePoolSpec(_Model):
    """``count`` identical servers."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    """Pool name; nodes are called ``<name>-0000``, ``<name>-0001`` ..."""
    count: Annotated[int, Field(ge=1, le=MAX_NODES)]
    """Servers in the pool (the whole cluster holds at most ``MAX_NODES``)."""
    cpu_milli: Annotated[int, Field(alias="cpuMilli", gt=0, le=MAX_CPU_MILLI)]
    """Allocatable CPU per node in millicores."""
    memory_mib: Annotated[int, Field(alias="memoryMiB", gt=0, le=MAX_MEMORY_MIB)]
    """Allocatable host memory per node in MiB."""
    nodes_per_rack: Annotated[int, Field(alias="nodesPerRack", ge=1, le=MAX_NODES)] = 4
    labels: dict[str, str] = Field(default_factory=dict)
    gpu: GpuSpec | None = None
    """Devices on each node; omit for CPU-only nodes."""


class FabricSpec(_Model):
    type: FabricType = FabricType.INFINIBAND
    link_gbps: Annotated[float, Field(alias="linkGbps", gt=0, le=MAX_LINK_GBPS)] = 400.0
    nodes_per_leaf: Annotated[int, Field(alias="nodesPerLeaf", ge=1, le=MAX_NODES)] = 32
    """Nodes under one leaf (a rail group / scalable unit on rail-optimised fabrics)."""
    leaves_per_spine_group: Annotated[int, Field(alias="leavesPerSpineGroup", ge=0, le=MAX_NODES)] = 0
    """Leaves under one spine group; 0 = all leaves share the spines (a 2-tier fabric)."""
    oversubscription: Annotated[float, Field(ge=1.0, le=1000.0)] = 1.0


class ClusterSpecFile(_Model):
    api_version: Literal["gpucluster.io/v1alpha1"] = Field(alias="apiVersion", default="gpucluster.io/v1alpha1")
    kind: Literal["ClusterSpec"] = "ClusterSpec"
    name: str = "cluster"
    description: str = ""
    fabric: FabricSpec = Field(default_factory=FabricSpec)
    node_pools: list[NodePoolSpec] = Field(alias="nodePools", min_length=1)

    @model_validator(mode="after")
    def _unique_pools(self) -> ClusterSpecFile:
        seen: set[str] = set()
        for pool in self.node_pools:
            if pool.name in seen:
                raise ValueError(f"node pool name {pool.name!r} is used twice")
            seen.add(pool.name)
        total = sum(pool.count for pool in self.node_pools)
        if total > MAX_NODES:
            raise ValueError(f"the node pools hold {total:,} nodes; a cluster holds at most {MAX_NODES:,}")
        return self


# ---------------------------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class Cluster:
    """A loaded cluster: its nodes and fabric, ready to become a :class:`ClusterState`."""

    name: str
    nodes: tuple[NodeSpec, ...]
    fabric: Fabric
    source: str
    description: str = ""

    def state(self) -> ClusterState:
        return ClusterState(self.nodes, self.fabric)

    def summary(self) -> dict[str, Any]:
        models: dict[str, int] = {}
        for n in self.nodes:
            for d in n.devices:
                models[d.model] = models.get(d.model, 0) + 1
        return {
            "name": self.name,
            "source": self.source,
            "nodes": len(self.nodes),
            "gpus": sum(models.values()),
            "gpu_models": models,
            "racks": len({n.rack for n in self.nodes}),
            "leaves": len({n.leaf for n in self.nodes}),
            "spine_groups": len({n.spine for n in self.nodes}),
            "cpu_cores": sum(n.cpu_milli for n in self.nodes) // 1000,
            "memory_gib": sum(n.memory_mib for n in self.nodes) // 1024,
            "fabric": {
                "type": str(self.fabric.type),
                "link_gbps": self.fabric.link_gbps,
                "oversubscription": self.fabric.oversubscription,
            },
        }


# ---------------------------------------------------------------------------------------------- errors
def _loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _why(err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    ctx = err.get("ctx") or {}
    if kind == "greater_than":
        return f"must be > {ctx.get('gt')}"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}"
    if kind == "less_than_equal":
        return f"must be <= {ctx.get('le')}"
    if kind == "missing":
        return "required"
    if kind == "extra_forbidden":
        return "unknown field"
    msg = str(err.get("msg", "invalid"))
    return msg[0].lower() + msg[1:] if msg else "invalid"


def _format_validation(source: str, exc: ValidationError, prefix: str = "") -> SpecError:
    first = exc.errors()[0]
    loc = _loc(list(first["loc"]))
    where = f"{prefix}.{loc}" if prefix and loc != "(top level)" else (prefix or loc)
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return SpecError(f"{source}: {where}: {_why(first)}{more}")


# ---------------------------------------------------------------------------------------------- loaders
def _stable_uuid(prefix: str, *parts: object) -> str:
    return f"{prefix}-{uuid.uuid5(uuid.NAMESPACE_URL, '/'.join(str(p) for p in parts))}"


def cluster_from_spec(spec: ClusterSpecFile, source: str, registry: VendorRegistry | None = None) -> Cluster:
    """Expand node pools into nodes: racks per pool, leaves and spine groups across the whole cluster.

    A pool that does not set ``maxTasks`` / ``memoryOvercommit`` takes the vendor's ``deviceSplitCount`` /
    ``deviceMemoryScaling`` from ``registry``'s settings (HAMi's 10 and 1 by default)."""
    registry = registry or VendorRegistry.from_settings(DeviceSettings())
    nodes: list[NodeSpec] = []
    rack_no = 0
    position = 0
    fab = spec.fabric
    for pool in spec.node_pools:
        for i in range(pool.count):
            if i % pool.nodes_per_rack == 0:
                rack_no += 1
            leaf_no = position // fab.nodes_per_leaf
            spine_no = leaf_no // fab.leaves_per_spine_group if fab.leaves_per_spine_group else 0
            name = f"{pool.name}-{i:04d}"
            devices: tuple[DeviceSpec, ...] = ()
            if pool.gpu is not None:
                g = pool.gpu
                vendor_settings = registry[g.vendor].settings if g.vendor in registry.names else VendorSettings()
                max_tasks = g.max_tasks or vendor_settings.split_count
                overcommit = g.memory_overcommit or vendor_settings.memory_scaling
                prefix = {"nvidia": "GPU", "cambricon": "MLU", "hygon": "DCU"}[g.vendor]
                devices = tuple(
                    DeviceSpec(
                        uuid=_stable_uuid(prefix, spec.name, name, j),
                        index=j,
                        vendor=g.vendor,
                        model=g.model,
                        type_name=device_type_string(g.vendor, g.model),
                        memory_mib=int(g.memory_mib * overcommit),
                        physical_memory_mib=g.memory_mib,
                        numa=j * 2 // g.count,
                        nvlink_domain=(j // g.nvlink_domain_size) if g.nvlink_domain_size else -1,
                        max_tasks=max_tasks,
                    )
                    for j in range(g.count)
                )
            nodes.append(
                NodeSpec(
                    name=name,
                    cpu_milli=pool.cpu_milli,
                    memory_mib=pool.memory_mib,
                    devices=devices,
                    labels={POOL_LABEL: pool.name, **pool.labels},
                    rack=f"rack-{rack_no:03d}",
                    leaf=f"leaf-{leaf_no:03d}",
                    spine=f"spine-group-{spine_no:02d}",
                    pool=pool.name,
                )
            )
            position += 1
    fabric = Fabric(type=fab.type, link_gbps=fab.link_gbps, oversubscription=fab.oversubscription)
    return Cluster(name=spec.name, nodes=tuple(nodes), fabric=fabric, source=source,
                   description=spec.description)


def _node_from_manifest(
    doc: Mapping[str, Any], where: str, registry: VendorRegistry, nvlink_domain_size: int
) -> NodeSpec:
    meta = doc.get("metadata") or {}
    if not isinstance(meta, Mapping) or not meta.get("name"):
        raise SpecError(f"{where}: metadata.name: required")
    name = str(meta["name"])
    status = doc.get("status") or {}
    alloc = (status.get("allocatable") or status.get("capacity") or {}) if isinstance(status, Mapping) else {}
    if "cpu" not in alloc:
        raise SpecError(f"{where}: status.allocatable.cpu: required")
    if "memory" not in alloc:
        raise SpecError(f"{where}: status.allocatable.memory: required")
    try:
        cpu = cpu_milli(alloc["cpu"])
    except ValueError as exc:
        raise SpecError(f"{where}: status.allocatable.cpu: {exc}") from None
    try:
        mem = memory_mib(alloc["memory"])
    except ValueError as exc:
        raise SpecError(f"{where}: status.allocatable.memory: {exc}") from None
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    capacity = (status.get("capacity") or alloc) if isinstance(status, Mapping) else alloc
    try:
        devices = registry.node_devices(name, annotations, where, nvlink_domain_size, capacity=capacity)
        pair_scores = registry.node_pair_scores(annotations, where)
    except DeviceInputError as exc:
        raise SpecError(str(exc)) from None
    return NodeSpec(
        name=name,
        cpu_milli=cpu,
        memory_mib=mem,
        devices=tuple(devices),
        extended=registry.node_extended(alloc),
        pair_scores=pair_scores,
        labels=labels,
        rack=labels.get(RACK_LABEL, labels.get("topology.kubernetes.io/zone", "")),
        leaf=labels.get(LEAF_LABEL, ""),
        spine=labels.get(SPINE_LABEL, ""),
    )


def _documents(path: Path) -> Iterator[tuple[int, Any]]:
    try:
        docs = inputfile.load_yaml_all(path)
    except inputfile.InputFileError as exc:
        raise SpecError(str(exc)) from None
    for i, doc in enumerate(docs):
        if doc is not None:
            yield i, doc


def _flatten_lists(docs: Iterator[tuple[int, Any]], source: str) -> Iterator[tuple[str, Any]]:
    for i, doc in docs:
        if (isinstance(doc, Mapping) and doc.get("kind") == "List") or (isinstance(doc, Mapping) and str(
            doc.get("kind", "")
        ).endswith("List")):
            for j, item in enumerate(doc.get("items") or []):
                yield f"{source}: document {i} items[{j}]", item
        else:
            yield f"{source}: document {i}", doc


def load_cluster(path: str | Path | None = None, registry: VendorRegistry | None = None,
                 nvlink_domain_size: int = 8) -> Cluster:
    """Load ``path`` (spec YAML or Node manifests); ``None`` loads the packaged default cluster."""
    registry = registry or VendorRegistry.from_settings(DeviceSettings())
    if path is None:
        text = resources.files("gpucluster.data").joinpath(DEFAULT_SPEC_NAME).read_text(encoding="utf-8")
        return _cluster_from_text(text, f"<builtin>/{DEFAULT_SPEC_NAME}", registry)
    p = Path(path)
    docs = list(_documents(p))
    if not docs:
        raise SpecError(f"{p}: empty file")
    first = docs[0][1]
    if isinstance(first, Mapping) and first.get("kind") == "ClusterSpec":
        if len(docs) > 1:
            raise SpecError(f"{p}: a ClusterSpec file holds one document, found {len(docs)}")
        return _cluster_from_mapping(first, str(p), registry)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for where, doc in _flatten_lists(iter(docs), str(p)):
        if not isinstance(doc, Mapping) or doc.get("kind") != "Node":
            kind = doc.get("kind") if isinstance(doc, Mapping) else type(doc).__name__
            raise SpecError(f"{where}: kind: expected ClusterSpec or Node, got {kind!r}")
        if len(nodes) >= MAX_NODES:
            raise SpecError(f"{where}: more than {MAX_NODES:,} nodes; a cluster holds at most {MAX_NODES:,}")
        node = _node_from_manifest(doc, where, registry, nvlink_domain_size)
        if node.name in seen:
            raise SpecError(f"{where}: metadata.name: node {node.name!r} appears twice")
        seen.add(node.name)
        nodes.append(node)
    if not nodes:
        raise SpecError(f"{p}: no Node found")
    return Cluster(name=p.stem, nodes=tuple(_fill_topology(nodes)), fabric=Fabric(), source=str(p))


def _fill_topology(nodes: list[NodeSpec], nodes_per_leaf: int = 32) -> list[NodeSpec]:
    """Nodes read from manifests without topology labels get one leaf per ``nodes_per_leaf`` nodes."""
    out = []
    for i, n in enumerate(nodes):
        if n.leaf:
            out.append(n)
            continue
        out.append(dataclasses.replace(n, rack=n.rack or f"rack-{i // 4:03d}", leaf=f"leaf-{i // nodes_per_leaf:03d}",
                                       spine=n.spine or "spine-group-00"))
    return out


def _cluster_from_mapping(doc: Mapping[str, Any], source: str, registry: VendorRegistry | None = None) -> Cluster:
    try:
        spec = ClusterSpecFile.model_validate(doc)
    except ValidationError as exc:
        raise _format_validation(source, exc) from None
    return cluster_from_spec(spec, source, registry)


def _cluster_from_text(text: str, source: str, registry: VendorRegistry | None = None) -> Cluster:
    doc = yaml.safe_load(text)
    if not isinstance(doc, Mapping):
        raise SpecError(f"{source}: must be a mapping")
    return _cluster_from_mapping(doc, source, registry)


def default_spec_text() -> str:
    return resources.files("gpucluster.data").joinpath(DEFAULT_SPEC_NAME).read_text(encoding="utf-8")


def load_pods(path: str | Path, registry: VendorRegistry | None = None) -> list[Pod]:
    """A YAML stream of Pod manifests (or a ``kind: List``), in file order."""
    registry = registry or VendorRegistry.from_settings(DeviceSettings())
    p = Path(path)
    pods: list[Pod] = []
    seen: set[str] = set()
    problems: list[str] = []
    docs = list(_documents(p))
    if not docs:
        raise SpecError(f"{p}: empty file (expected Pod manifests)")
    for where, doc in _flatten_lists(iter(docs), str(p)):
        try:
            pod = registry.parse_pod(doc, where)
        except DeviceInputError as exc:
            problems.extend(exc.problems)
            continue
        if pod.key in seen:
            problems.append(f"{where}: metadata.name: pod {pod.key} appears twice")
            continue
        seen.add(pod.key)
        pods.append(pod)
    if problems:
        tail = [f"{p}: {len(problems)} problems"] if len(problems) > 1 else []
        raise SpecError("\n".join([*problems, *tail]))
    return pods


__all__ = [
    "KNOWN_VENDORS",
    "Cluster",
    "ClusterSpecFile",
    "SpecError",
    "cluster_from_spec",
    "default_spec_text",
    "load_cluster",
    "load_pods",
]
