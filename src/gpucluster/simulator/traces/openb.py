"""Loader for the Alibaba ``openb`` GPU-sharing trace (cluster-trace-gpu-v2023) used by the FGD paper.

Two CSV kinds:

* nodes: ``sn,cpu_milli,memory_mib,gpu,model`` (``openb_node_list_gpu_node.csv`` / ``..._all_node.csv``);
* pods: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,creation_time,deletion_time,
  scheduled_time]`` (the ``multigpu*`` files have only the first five columns).

The pod semantics follow the trace's own CSV-to-YAML converter and the FGD simulator:

* ``num_gpu == 0`` is a CPU-only pod (its ``gpu_milli`` and ``gpu_spec`` are ignored);
* ``gpu_milli`` is per GPU and is clamped to ``0..1000``; ``num_gpu > 1`` needs whole GPUs (``gpu_milli`` 1000);
* ``gpu_spec`` is a ``|``-separated list of allowed GPU models (empty entries dropped; empty = any model).

Every malformed line raises :class:`TraceError` with ``file:line: why``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gpucluster import inputfile
from gpucluster.model import ContainerRequest, DeviceConstraints, DeviceRequest, DeviceSpec, Fabric, NodeSpec, Pod
from gpucluster.model.labels import MODEL_LABEL
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import decoded, whole
from gpucluster.spec import Cluster

MILLI = 1000
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
OPTIONAL_POD_COLUMNS = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
DEFAULT_CPU_REQUEST_MILLI = 100
"""kube-scheduler's non-zero CPU request (``GetNonzeroRequests``) used for scoring pods that ask for no CPU."""
OPENB_GPU_MEMORY_MIB = 16384
"""Nominal device memory for openb GPUs when turned into :class:`DeviceSpec` (the trace has no memory figure)."""


@dataclass(frozen=True, slots=True)
class OpenbNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str
    """GPU model (``G2``, ``T4``, ``P100`` ...); empty for CPU-only nodes."""


@dataclass(frozen=True, slots=True)
class OpenbPod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    """Per-GPU share in milli (0 for CPU-only pods)."""
    gpu_spec: tuple[str, ...] = ()
    """Allowed GPU models; empty = any."""

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def score_cpu_milli(self) -> int:
        """CPU as kube-scheduler scores it (non-zero default for pods that ask for none)."""
        return self.cpu_milli if self.cpu_milli > 0 else DEFAULT_CPU_REQUEST_MILLI

    @property
    def shape(self) -> tuple[int, int, int, str]:
        """``(cpu, gpu milli, GPU count, models)``: the FGD simulator's pod resource key."""
        return (self.score_cpu_milli, self.gpu_milli, self.num_gpu, "|".join(self.gpu_spec))


def _int(path: Path, line: int, column: str, raw: str | None, minimum: int = 0) -> int:
    if raw is None or raw.strip() == "":
        raise TraceError(f"{path}:{line}: column {column!r} is empty")
    value = whole(raw, f"{path}:{line}", f"column {column!r}", error=TraceError)
    if value < minimum:
        raise TraceError(f"{path}:{line}: column {column!r}: {value} must be >= {minimum}")
    return value


def _rows(path: Path, required: Sequence[str]) -> Iterable[tuple[int, dict[str, str | None]]]:
    with decoded(path, TraceError) as reading, inputfile.open_text(path, newline="") as handle:
        reader = reading.reader = csv.DictReader(handle)
        header = reader.fieldnames
        if not header:
            raise TraceError(f"{path}:1: empty file (expected a header with {', '.join(required)})")
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(f"{path}:1: header lacks column(s) {', '.join(missing)}")
        for row in reader:
            line = reader.line_num
            if None in row:
                raise TraceError(f"{path}:{line}: {len(header) + len(row[None])} fields, header has {len(header)}")
            if any(row.get(c) is None for c in required):
                raise TraceError(f"{path}:{line}: too few fields (header has {len(header)})")
            yield line, row


def load_nodes(path: str | Path) -> list[OpenbNode]:
    """Read an openb node list."""
    p = Path(path)
    out: list[OpenbNode] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, NODE_COLUMNS):
        name = (row["sn"] or "").strip()
        if not name:
            raise TraceError(f"{p}:{line}: column 'sn' is empty")
        if name in seen:
            raise TraceError(f"{p}:{line}: node {name!r} already defined on line {seen[name]}")
        seen[name] = line
        gpus = _int(p, line, "gpu", row["gpu"])
        model = (row["model"] or "").strip()
        if gpus > 0 and not model:
            raise TraceError(f"{p}:{line}: node {name} has {gpus} GPUs but no model")
        out.append(OpenbNode(name, _int(p, line, "cpu_milli", row["cpu_milli"]),
                             _int(p, line, "memory_mib", row["memory_mib"]), gpus, model if gpus else ""))
    if not out:
        raise TraceError(f"{p}:1: no nodes")
    return out


def load_pods(path: str | Path) -> list[OpenbPod]:
    """Read an openb pod list (any variant), in file order."""
    p = Path(path)
    out: list[OpenbPod] = []
    seen: dict[str, int] = {}
    for line, row in _rows(p, POD_COLUMNS):
        name = (row["name"] or "").strip()
        if not name:
            raise TraceError(f"{p}:{line}: column 'name' is empty")
        if name in seen:
            raise TraceError(f"{p}:{line}: pod {name!r} already defined on line {seen[name]}")
        seen[name] = line
        cpu = _int(p, line, "cpu_milli", row["cpu_milli"])
        mem = _int(p, line, "memory_mib", row["memory_mib"])
        num = _int(p, line, "num_gpu", row["num_gpu"])
        milli = _int(p, line, "gpu_milli", row["gpu_milli"])
        spec: tuple[str, ...] = ()
        if num == 0:
            milli = 0
        else:
            milli = min(milli, MILLI)
            if milli == 0:
                raise TraceError(f"{p}:{line}: pod {name} asks for {num} GPU(s) with gpu_milli 0")
            if num > 1 and milli != MILLI:
                raise TraceError(f"{p}:{line}: pod {name} asks for {num} GPUs; multi-GPU pods need gpu_milli 1000, "
                                 f"got {milli}")
            raw_spec = row.get("gpu_spec") or ""
            spec = tuple(s.strip() for s in raw_spec.split("|") if s.strip())
        out.append(OpenbPod(name, cpu, mem, num, milli, spec))
    if not out:
        raise TraceError(f"{p}:1: no pods")
    return out


# ------------------------------------------------------------------------------------------ to the model
def to_node_specs(nodes: Sequence[OpenbNode], max_tasks: int = 1000) -> list[NodeSpec]:
    """The nodes as :class:`NodeSpec` (NVIDIA devices of 1000 core milli; ``max_tasks`` high so that the share
    limit is the only limit, as in the trace)."""
    specs = []
    for n in nodes:
        devices = tuple(
            DeviceSpec(uuid=f"GPU-{n.name}-{j}", index=j, vendor="nvidia", model=n.model,
                       memory_mib=OPENB_GPU_MEMORY_MIB, core_milli=MILLI, max_tasks=max_tasks)
            for j in range(n.gpus)
        )
        specs.append(NodeSpec(name=n.name, cpu_milli=n.cpu_milli, memory_mib=n.memory_mib, devices=devices))
    return specs


def to_pod(pod: OpenbPod, name: str | None = None) -> Pod:
    """The pod as a model :class:`Pod` (one container; ``gpu_spec`` becomes ``use-gputype``)."""
    devices = (DeviceRequest(vendor="nvidia", count=pod.num_gpu, core_milli=pod.gpu_milli),) if pod.num_gpu else ()
    return Pod(
        name=name or pod.name,
        containers=(ContainerRequest("main", cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib, devices=devices),),
        constraints=DeviceConstraints(use_types=pod.gpu_spec),
    )


@dataclass(frozen=True, slots=True)
class PodArrays:
    """Pods as struct-of-arrays (for the fast experiment path)."""

    cpu: npt.NDArray[np.int64]
    score_cpu: npt.NDArray[np.int64]
    mem: npt.NDArray[np.int64]
    num: npt.NDArray[np.int64]
    milli: npt.NDArray[np.int64]
    spec: tuple[tuple[str, ...], ...]


def pod_arrays(pods: Sequence[OpenbPod]) -> PodArrays:
    return PodArrays(
        cpu=np.array([p.cpu_milli for p in pods], np.int64),
        score_cpu=np.array([p.score_cpu_milli for p in pods], np.int64),
        mem=np.array([p.memory_mib for p in pods], np.int64),
        num=np.array([p.num_gpu for p in pods], np.int64),
        milli=np.array([p.gpu_milli for p in pods], np.int64),
        spec=tuple(p.gpu_spec for p in pods),
    )


def openb_cluster(path: str | Path, nodes_per_leaf: int = 32) -> Cluster:
    """An openb node list as a :class:`Cluster` (``--cluster openb_node_list_gpu_node.csv``): one leaf per
    ``nodes_per_leaf`` nodes and four nodes per rack, as for Node manifests without topology labels."""
    p = Path(path)
    specs = [replace(n, rack=f"rack-{i // 4:04d}", leaf=f"leaf-{i // nodes_per_leaf:03d}", spine="spine-group-00",
                     labels={**n.labels, MODEL_LABEL: n.devices[0].model} if n.devices else n.labels)
             for i, n in enumerate(to_node_specs(load_nodes(p)))]
    if not specs:
        raise TraceError(f"{p}: no nodes in it")
    return Cluster(name=p.stem, nodes=tuple(specs), fabric=Fabric(), source=str(p))
