"""Binpack and spread as HAMi v2.10 does them, for nodes (Score) and for devices inside the chosen node
(DeviceScore).

The strategy is picked from a table keyed by policy name; a pod's ``hami.io/node-scheduler-policy`` /
``hami.io/gpu-scheduler-policy`` annotation selects another entry.

* Node (pods with devices): HAMi's node score, the node's device usage *before* the pod,
  ``10 x (tasks / task slots + used cores / cores + used memory / memory)`` over all its devices. Binpack
  prefers the highest, spread the lowest. CPU-only pods: the mean of CPU and memory usage after the pod.
* Device: HAMi's device score for the request, ``10 x (slot x (1 + tasks) / slots + core x (cores asked +
  used) / cores + memory x (memory asked + used) / memory)`` (weights from ``hami.io/device-scoring-weights``,
  1 each by default), then HAMi's order: spread tries the lowest score first, binpack the highest; ties go to
  the higher NUMA node, then the later device. ``mutex`` tries idle devices first; ``numa`` and comma chains
  (``binpack,numa``) sort key by key; ``nvidia.com/numa-bind`` keeps each NUMA node's devices together.
  ``fewest-tasks`` (gpucluster's own spread before HAMi conformance) prefers the device with the fewest tasks,
  then the least used.

DeviceScore returns ranks (100 for the device tried first), so Reserve's choice is exactly HAMi's order.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from gpucluster.devices import hami
from gpucluster.model import DeviceRequest, Pod, Policy, Snapshot
from gpucluster.scheduler.framework import BoolArray, CycleState, FloatArray, Handle, IntArray
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args
from gpucluster.scheduler.plugins.devicefit import OPTIONS_KEY, TAKEN_KEY, PodOptions, pod_options

F32 = npt.NDArray[np.float32]
HAMI_WEIGHT = np.float32(10)
"""HAMi's ``util.Weight``: node and device scores are 10 x a sum of usage ratios."""
FEWEST_TASKS = "fewest-tasks"


# ------------------------------------------------------------------------------------------------ nodes
def hami_node_scores(snap: Snapshot, candidates: IntArray) -> F32:
    """HAMi's node score (``ComputeDefaultScore``) of each candidate: 0 .. 30, float32 as HAMi computes it."""
    task_cap, core_cap, mem_cap = (snap.node_task_cap[candidates], snap.node_core_cap[candidates],
                                   snap.node_dmem_cap[candidates])
    ok = (task_cap > 0) & (core_cap > 0) & (mem_cap > 0)
    f = np.float32
    use = snap.node_tasks[candidates].astype(f) / np.maximum(task_cap, 1).astype(f)
    core = snap.node_core_used[candidates].astype(f) / np.maximum(core_cap, 1).astype(f)
    mem = snap.node_dmem_used[candidates].astype(f) / np.maximum(mem_cap, 1).astype(f)
    score = HAMI_WEIGHT * (use + core + mem)
    return np.where(ok, score, np.float32(0)).astype(np.float32)


def node_usage_after(pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
    """Usage in 0..1 of each candidate node after a CPU-only pod lands there (mean of CPU and memory)."""
    cpu = (snap.cpu_used[candidates] + pod.cpu_milli) / np.maximum(snap.cpu_cap[candidates], 1)
    mem = (snap.mem_used[candidates] + pod.memory_mib) / np.maximum(snap.mem_cap[candidates], 1)
    return np.asarray(np.clip((cpu + mem) / 2.0, 0.0, 1.0), np.float64)


def _node_usage(pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
    if pod.device_requests or pod.init_device_requests:
        return np.asarray(hami_node_scores(snap, candidates), np.float64) / 30.0
    return node_usage_after(pod, snap, candidates)


def _binpack_nodes(usage: FloatArray) -> FloatArray:
    return 100.0 * usage


def _spread_nodes(usage: FloatArray) -> FloatArray:
    return 100.0 * (1.0 - usage)


_NODE_STRATEGIES: Mapping[Policy, Callable[[FloatArray], FloatArray]] = {
    Policy.BINPACK: _binpack_nodes,
    Policy.SPREAD: _spread_nodes,
}


class _PolicyArgs(PluginArgs):
    policy: Policy = Policy.BINPACK
    """Default strategy; a pod's annotation overrides it."""
    annotated_only: bool = False
    """Score only pods that carry the annotation (0 for all others): lets another policy be the default while
    HAMi's per-pod binpack/spread annotations still win."""


class NodePolicy:
    """Score: binpack or spread over nodes."""

    name = "NodePolicy"

    def __init__(self, default: Policy, annotated_only: bool = False) -> None:
        self.default = default
        self.annotated_only = annotated_only
        self._strategies = _NODE_STRATEGIES

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        if self.annotated_only and pod.node_policy is None:
            return np.zeros(candidates.size, np.float64)
        strategy = self._strategies[pod.node_policy or self.default]
        return strategy(_node_usage(pod, snap, candidates))


# ------------------------------------------------------------------------------------------------ devices
def hami_device_scores(
    slots: IntArray, tasks: IntArray, core_cap: IntArray, core_used: IntArray, mem_cap: IntArray,
    mem_used: IntArray, core_ask: int, mem_ask: IntArray | int, asks: int = 1,
    weights: hami.ScoringWeights = hami.DEFAULT_WEIGHTS,
) -> F32:
    """HAMi's device score (``DeviceListsScore.ComputeScore``), float32 as HAMi computes it; 0 for a device
    with no slots, cores or memory. ``asks`` requests asking ``core_ask`` cores and ``mem_ask`` memory in all
    (per device) are added to the usage (one container's request: 1; the usage alone: 0)."""
    f = np.float32
    ok = (slots > 0) & (core_cap > 0) & (mem_cap > 0)
    use = (tasks + asks).astype(f) / np.maximum(slots, 1).astype(f)
    core = (core_used + core_ask).astype(f) / np.maximum(core_cap, 1).astype(f)
    mem = (mem_used + np.asarray(mem_ask, np.int64)).astype(f) / np.maximum(mem_cap, 1).astype(f)
    score = HAMI_WEIGHT * (f(weights.slot) * use + f(weights.core) * core + f(weights.memory) * mem)
    return np.where(ok, score, f(0)).astype(f)


def hami_try_order(scores: npt.NDArray[Any], numa: Sequence[int] | IntArray, tasks: Sequence[int] | IntArray,
                   index: Sequence[int] | IntArray, policy: Sequence[str], numa_bind: bool = False,
                   default: str = hami.POLICY_SPREAD) -> list[int]:
    """Positions of the devices in the order HAMi's ``Fit`` tries them: its device list sorted by
    ``DeviceUsageList.Less`` (stable, as Go's insertion sort is for small lists), walked from the end.

    ``policy`` is the pod's ``hami.io/gpu-scheduler-policy`` tokens (empty: ``default``)."""
    tokens = tuple(policy) or (default,)
    n = len(scores)
    if len(tokens) == 1 and not numa_bind and tokens[0] not in (hami.POLICY_MUTEX, hami.POLICY_NUMA):
        # the common case, vectorised: score (descending for spread), then NUMA; np.lexsort is stable
        primary = np.asarray(scores, np.float64)
        if tokens[0] != hami.POLICY_BINPACK:
            primary = -primary
        return [int(k) for k in np.lexsort((np.asarray(numa), primary))[::-1]]
    s = [float(x) for x in scores]
    if len(tokens) > 1 or tokens == (hami.POLICY_NUMA,):
        chain = list(dict.fromkeys(t for t in tokens if t in (hami.POLICY_BINPACK, hami.POLICY_SPREAD,
                                                                  hami.POLICY_NUMA)))
        if not chain:
            chain = [hami.POLICY_SPREAD]
        if numa_bind and chain[0] != hami.POLICY_NUMA:
            chain = [hami.POLICY_NUMA, *(t for t in chain if t != hami.POLICY_NUMA)]

        def chain_key(k: int) -> tuple[float, ...]:
            parts = [s[k] if t == hami.POLICY_BINPACK else -s[k] if t == hami.POLICY_SPREAD else float(numa[k])
                     for t in chain]
            return (*parts, float(index[k]))

        key: Callable[[int], tuple[float, ...]] = chain_key
    else:
        single = tokens[0]
        if single == hami.POLICY_MUTEX:
            def key(k: int) -> tuple[float, ...]:
                return (-float(tasks[k]), float(numa[k]))
        elif numa_bind and single == hami.POLICY_BINPACK:
            def key(k: int) -> tuple[float, ...]:
                return (-float(numa[k]), s[k])
        elif numa_bind:
            def key(k: int) -> tuple[float, ...]:
                return (float(numa[k]), -s[k])
        elif single == hami.POLICY_BINPACK:
            def key(k: int) -> tuple[float, ...]:
                return (s[k], float(numa[k]))
        else:  # spread, and any other single value (topology-aware): HAMi's default branch
            def key(k: int) -> tuple[float, ...]:
                return (-s[k], float(numa[k]))
    return sorted(range(n), key=key)[::-1]


def _fewest_tasks_devices(snap: Snapshot, node: int, taken: IntArray) -> FloatArray:
    tasks = snap.dev_tasks[node].astype(np.float64)
    core = (snap.dev_core_used[node] + taken) / np.maximum(snap.dev_core_cap[node], 1)
    mem = snap.dev_mem_used[node] / np.maximum(snap.dev_mem_cap[node], 1)
    usage = (core + mem) / 2.0
    # fewest tasks first; among equal task counts, the least used
    return np.asarray(100.0 * (1.0 - (tasks + usage) / (snap.dev_max_tasks[node] + 1.0)), np.float64)


DevicePolicyName = Literal["binpack", "spread", "fewest-tasks"]


class DevicePolicy:
    """DeviceScore: HAMi's device order (binpack, spread and the pod's chained policies) over the devices of
    the chosen node, or ``fewest-tasks``."""

    name = "DevicePolicy"

    def __init__(self, default: str, annotated_only: bool = False) -> None:
        self.default = default
        self.annotated_only = annotated_only

    def score_devices(
        self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
        feasible: BoolArray, taken: IntArray,
    ) -> FloatArray:
        out = np.zeros(snap.device_slots, np.float64)
        options: PodOptions = state.get(OPTIONS_KEY) or pod_options(pod)
        if self.annotated_only and not options.policy:
            return out
        if not options.policy and self.default == FEWEST_TASKS:
            return _fewest_tasks_devices(snap, node, taken)
        zeros = np.zeros(snap.device_slots, np.int64)
        taken_core, taken_mem, taken_tasks = state.get(TAKEN_KEY) or (taken, zeros, zeros)
        idx = np.flatnonzero(feasible)
        if idx.size == 0:
            return out
        cap = snap.dev_mem_cap[node, idx]
        mem_ask = cap * request.memory_pct // 100 if request.memory_pct is not None else request.memory_mib
        tasks = snap.dev_tasks[node, idx] + taken_tasks[idx]
        scores = hami_device_scores(
            snap.dev_max_tasks[node, idx], tasks, snap.dev_core_cap[node, idx],
            snap.dev_core_used[node, idx] + taken_core[idx], cap, snap.dev_mem_used[node, idx] + taken_mem[idx],
            request.core_milli, mem_ask, weights=options.weights,
        )
        order = hami_try_order(scores, snap.dev_numa[node, idx], tasks, idx, options.policy,
                               numa_bind=options.numa_bind and request.vendor == "nvidia",
                               default=self.default if self.default != FEWEST_TASKS else hami.POLICY_SPREAD)
        out[idx[order]] = 100.0 * (idx.size - np.arange(idx.size)) / idx.size
        return out


class _DeviceArgs(PluginArgs):
    policy: DevicePolicyName = "spread"
    """Default when the pod names no GPU policy: HAMi's ``spread`` or ``binpack``, or ``fewest-tasks``."""
    annotated_only: bool = False


def new_node_policy(args: Mapping[str, Any], handle: Handle) -> NodePolicy:
    a = parse_args(_PolicyArgs, NodePolicy.name, args)
    return NodePolicy(a.policy, a.annotated_only)


def new_device_policy(args: Mapping[str, Any], handle: Handle) -> DevicePolicy:
    a = parse_args(_DeviceArgs, DevicePolicy.name, args)
    return DevicePolicy(a.policy, a.annotated_only)
