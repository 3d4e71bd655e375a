"""An independent check of a must-place run: the rule of the FGD experiment that every pod which fits when it
arrives is placed, and that nothing placed over-fills a node.

A *run* is the arrival order and, per pod, its outcome: a node and the GPUs it took (each GPU giving
``gpu_milli``), or failed (node -1). :func:`check_must_place` replays it on its own copy of the nodes' free
CPU, memory and per-GPU milli (it shares no state or code with the fast path ``fgd_engine`` or the scheduler,
only the trace records) and returns the first violation, with the pod, the node and why, or ``None``:

* a placed pod that does not fit where it was put: an unknown node, a GPU count other than the pod's, a GPU
  index twice or outside the node, a GPU model the pod does not allow, or more CPU, memory or GPU milli than
  is free there (every GPU holds at most 1000 milli);
* a failed pod that fitted some node when it arrived (the first such node is named).

"Fits" is the experiment's test (``fgd_engine.run``; ``tests/simulator/test_bound.py`` enumerates runs with
it): the node's free CPU and memory cover the pod's, and for a GPU pod the node's model is allowed (any model
when the pod names none) and at least ``num_gpu`` of its GPUs have ``gpu_milli`` free. This module is what
``bench/must_place_search.py`` runs on every run it reports.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpucluster.simulator.experiments.fgd_engine import RunLog
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

MILLI = 1000


class Reason(enum.StrEnum):
    """Stable codes of a must-place violation."""

    MALFORMED = "MalformedOutcome"
    """The outcome does not have one entry per pod of the order, or a log's placed flags contradict its nodes."""
    NO_SUCH_NODE = "NoSuchNode"
    GPU_COUNT = "GpuCount"
    """The pod was given a number of GPUs other than it asks (or a CPU-only pod was given GPUs)."""
    BAD_GPU = "BadGpu"
    """A GPU index outside the node, or the same GPU twice."""
    GPU_MODEL = "GpuModel"
    """The node's GPU model is not one the pod allows."""
    CPU = "InsufficientCPU"
    MEMORY = "InsufficientMemory"
    GPU_MILLI = "InsufficientGPUMilli"
    """A chosen GPU had less than the pod's milli free: placing it would take the GPU over 1000 milli."""
    SKIPPED = "FittingPodFailed"
    """The pod failed although it fitted a node when it arrived."""


@dataclass(frozen=True, slots=True)
class Violation:
    """The first pod of a run that breaks the must-place rule or over-fills a node."""

    pod: int
    """Index of the pod in the arrival order (-1 when the outcome's length is wrong)."""
    pod_name: str
    reason: Reason
    node: int
    """The node the run put the pod on (for ``SKIPPED``: the first node it fitted); -1 when none."""
    detail: str

    def __str__(self) -> str:
        return f"pod {self.pod} ({self.pod_name}): {self.reason} on node {self.node}: {self.detail}"


def check_must_place(nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], node: Sequence[int],
                     gpus: Sequence[Sequence[int]]) -> Violation | None:
    """Replay the run (``node[i]`` = pod i's node or -1, ``gpus[i]`` = its GPU indices on that node) and return
    its first violation, or ``None`` when every placed pod fitted where it went and every failed pod fitted
    nowhere."""
    if len(node) != len(order) or len(gpus) != len(order):
        return Violation(-1, "", Reason.MALFORMED, -1,
                         f"{len(order)} pods, {len(node)} nodes and {len(gpus)} GPU lists in the outcome")
    n = len(nodes)
    width = max((x.gpus for x in nodes), default=0)
    cpu = np.array([x.cpu_milli for x in nodes], np.int64)
    mem = np.array([x.memory_mib for x in nodes], np.int64)
    count = np.array([x.gpus for x in nodes], np.int64)
    gpu = np.full((n, max(width, 1)), -1, np.int64)  # -1: no such GPU (never has room)
    for k, x in enumerate(nodes):
        gpu[k, : x.gpus] = MILLI
    models = [x.model for x in nodes]
    allowed_cache: dict[tuple[str, ...], np.ndarray] = {}
    for i, pod in enumerate(order):
        target = int(node[i])
        if target < 0:
            fits = (cpu >= pod.cpu_milli) & (mem >= pod.memory_mib)
            if pod.num_gpu:
                allowed = allowed_cache.get(pod.gpu_spec)
                if allowed is None:
                    allowed = allowed_cache[pod.gpu_spec] = np.array(
                        [c > 0 and (not pod.gpu_spec or m in pod.gpu_spec) for c, m in zip(count, models, strict=True)],
                        np.bool_)
                fits &= allowed & ((gpu >= pod.gpu_milli).sum(axis=1) >= pod.num_gpu)
            hit = np.flatnonzero(fits)
            if hit.size:
                k = int(hit[0])
                return Violation(i, pod.name, Reason.SKIPPED, k,
                                 f"failed, but node {k} ({nodes[k].name}) had {cpu[k]} CPU milli, {mem[k]} MiB and "
                                 f"{int((gpu[k] >= pod.gpu_milli).sum()) if pod.num_gpu else 0} GPUs with "
                                 f"{pod.gpu_milli} milli free for a pod of {pod.cpu_milli} CPU milli, "
                                 f"{pod.memory_mib} MiB, {pod.num_gpu} x {pod.gpu_milli} milli")
            continue
        bad = _misfit(nodes, pod, target, tuple(int(g) for g in gpus[i]), cpu, mem, gpu)
        if bad is not None:
            return Violation(i, pod.name, bad[0], target, bad[1])
        cpu[target] -= pod.cpu_milli
        mem[target] -= pod.memory_mib
        for g in gpus[i]:
            gpu[target, int(g)] -= pod.gpu_milli
    return None


def _misfit(nodes: Sequence[OpenbNode], pod: OpenbPod, target: int, chosen: tuple[int, ...], cpu: np.ndarray,
            mem: np.ndarray, gpu: np.ndarray) -> tuple[Reason, str] | None:
    """Why ``pod`` cannot go on ``target`` with GPUs ``chosen`` in the current state (``None``: it can)."""
    if target >= len(nodes):
        return Reason.NO_SUCH_NODE, f"the cluster has {len(nodes)} nodes"
    x = nodes[target]
    want = pod.num_gpu
    if len(chosen) != want:
        return Reason.GPU_COUNT, f"given GPUs {list(chosen)}, the pod asks for {want}"
    if len(set(chosen)) != len(chosen) or any(g < 0 or g >= x.gpus for g in chosen):
        return Reason.BAD_GPU, f"GPUs {list(chosen)} on a node of {x.gpus} GPUs"
    if want and pod.gpu_spec and x.model not in pod.gpu_spec:
        return Reason.GPU_MODEL, f"node model {x.model!r}, the pod allows {list(pod.gpu_spec)}"
    if cpu[target] < pod.cpu_milli:
        return Reason.CPU, f"{cpu[target]} CPU milli free, the pod asks {pod.cpu_milli}"
    if mem[target] < pod.memory_mib:
        return Reason.MEMORY, f"{mem[target]} MiB free, the pod asks {pod.memory_mib}"
    for g in chosen:
        if gpu[target, g] < pod.gpu_milli:
            return Reason.GPU_MILLI, (f"GPU {g} has {gpu[target, g]} milli free, the pod asks {pod.gpu_milli} "
                                      f"({MILLI - gpu[target, g] + pod.gpu_milli} milli on it after)")
    return None


def check_run_log(nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], log: RunLog) -> Violation | None:
    """:func:`check_must_place` on a fast-path run's log (``fgd_engine.run``)."""
    if (log.placed != (log.node >= 0)).any():
        i = int(np.flatnonzero(log.placed != (log.node >= 0))[0])
        return Violation(i, order[i].name if i < len(order) else "", Reason.MALFORMED, int(log.node[i]),
                         "the log's placed flag and node disagree")
    return check_must_place(nodes, order, [int(x) for x in log.node], log.gpus)


def allocated_milli(order: Sequence[OpenbPod], node: Sequence[int]) -> int:
    """GPU milli of the placed pods of a run."""
    return sum(p.total_gpu_milli for p, k in zip(order, node, strict=True) if k >= 0)
