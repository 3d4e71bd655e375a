"""Binpack and spread, for nodes (Score) and for devices inside the chosen node (DeviceScore).

The strategy is picked from a table keyed by :class:`~gpucluster.model.Policy`; a pod's
``hami.io/node-scheduler-policy`` / ``hami.io/gpu-scheduler-policy`` annotation selects the other entry.

* Node usage after placing the pod: for pods with devices, the mean of the node's device core, memory and task
  utilisation; for CPU-only pods, the mean of CPU and memory utilisation. Binpack scores ``100 x usage``,
  spread ``100 x (1 - usage)``.
* Device: spread prefers the device with the fewest tasks (the seed's "fewest tasks first"), then the least
  used; binpack prefers the most used (cores and memory), then the one with more tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gpucluster.model import DeviceRequest, Pod, Policy, Snapshot
from gpucluster.scheduler.framework import BoolArray, CycleState, FloatArray, Handle, IntArray
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args


def node_usage_after(pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
    """Usage in 0..1 of each candidate node after the pod lands there."""
    reqs = pod.device_requests
    if not reqs:
        cpu = (snap.cpu_used[candidates] + pod.cpu_milli) / np.maximum(snap.cpu_cap[candidates], 1)
        mem = (snap.mem_used[candidates] + pod.memory_mib) / np.maximum(snap.mem_cap[candidates], 1)
        return np.asarray(np.clip((cpu + mem) / 2.0, 0.0, 1.0), np.float64)
    core_cap = snap.node_core_cap[candidates]
    mem_cap = snap.node_dmem_cap[candidates]
    task_cap = snap.node_task_cap[candidates]
    core_used = snap.node_core_used[candidates]
    mem_used = snap.node_dmem_used[candidates]
    tasks = snap.node_tasks[candidates]
    add_core = sum(r.core_milli * r.count for _, r in reqs)
    add_tasks = sum(r.count for _, r in reqs)
    add_mem = np.zeros(candidates.size, np.float64)
    for _, r in reqs:
        if r.memory_pct is not None:
            per_dev = mem_cap / np.maximum(snap.dev_count[candidates], 1)
            add_mem += per_dev * r.memory_pct / 100.0 * r.count
        else:
            add_mem += r.memory_mib * r.count
    u = (
        (core_used + add_core) / np.maximum(core_cap, 1)
        + (mem_used + add_mem) / np.maximum(mem_cap, 1)
        + (tasks + add_tasks) / np.maximum(task_cap, 1)
    ) / 3.0
    return np.asarray(np.clip(u, 0.0, 1.0), np.float64)


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
        return strategy(node_usage_after(pod, snap, candidates))


def _device_usage(snap: Snapshot, node: int, taken: IntArray) -> FloatArray:
    core = (snap.dev_core_used[node] + taken) / np.maximum(snap.dev_core_cap[node], 1)
    mem = snap.dev_mem_used[node] / np.maximum(snap.dev_mem_cap[node], 1)
    return np.asarray((core + mem) / 2.0, np.float64)


def _binpack_devices(snap: Snapshot, node: int, taken: IntArray) -> FloatArray:
    tasks = snap.dev_tasks[node] / np.maximum(snap.dev_max_tasks[node], 1)
    return np.asarray(100.0 * (0.9 * _device_usage(snap, node, taken) + 0.1 * tasks), np.float64)


def _spread_devices(snap: Snapshot, node: int, taken: IntArray) -> FloatArray:
    tasks = snap.dev_tasks[node].astype(np.float64)
    usage = _device_usage(snap, node, taken)
    # fewest tasks first; among equal task counts, the least used
    return np.asarray(100.0 * (1.0 - (tasks + usage) / (snap.dev_max_tasks[node] + 1.0)), np.float64)


_DEVICE_STRATEGIES: Mapping[Policy, Callable[[Snapshot, int, IntArray], FloatArray]] = {
    Policy.BINPACK: _binpack_devices,
    Policy.SPREAD: _spread_devices,
}


class DevicePolicy:
    """DeviceScore: binpack or spread over the devices of the chosen node."""

    name = "DevicePolicy"

    def __init__(self, default: Policy, annotated_only: bool = False) -> None:
        self.default = default
        self.annotated_only = annotated_only
        self._strategies = _DEVICE_STRATEGIES

    def score_devices(
        self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
        feasible: BoolArray, taken: IntArray,
    ) -> FloatArray:
        if self.annotated_only and pod.gpu_policy is None:
            return np.zeros(snap.device_slots, np.float64)
        return self._strategies[pod.gpu_policy or self.default](snap, node, taken)


class _DeviceArgs(PluginArgs):
    policy: Policy = Policy.SPREAD
    annotated_only: bool = False


def new_node_policy(args: Mapping[str, Any], handle: Handle) -> NodePolicy:
    a = parse_args(_PolicyArgs, NodePolicy.name, args)
    return NodePolicy(a.policy, a.annotated_only)


def new_device_policy(args: Mapping[str, Any], handle: Handle) -> DevicePolicy:
    a = parse_args(_DeviceArgs, DevicePolicy.name, args)
    return DevicePolicy(a.policy, a.annotated_only)
