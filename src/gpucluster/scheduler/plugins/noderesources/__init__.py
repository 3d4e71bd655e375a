"""Node-level checks: the node is schedulable, the pod is not bound for another node, its free CPU and memory
hold the pod, and it offers the extended resources the pod asks for (``example.com/foo``; device vendors'
resources are DeviceFit's). An extended resource no node offers (a typo such as ``nvidia.com/gpus``) makes the
pod unschedulable with ``Insufficient <name>`` on every node, as kube-scheduler says it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.model import Pod, Snapshot
from gpucluster.model.labels import NODE_NAME_ANNOTATION
from gpucluster.scheduler.framework import CycleState, Handle, Reason, ReasonArray, Status
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args


class NodeUnschedulable:
    """Rejects cordoned, removed or otherwise unschedulable nodes."""

    name = "NodeUnschedulable"

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        out[~snap.schedulable] = Reason.NodeUnschedulable
        return out


"""Annotation naming the one node a pod may go to (Kubernetes' ``spec.nodeName``; the simulator's offers
policy sets it to the node whose offer the job's framework accepted)."""


class NodeName:
    """Rejects every node but the one the pod names in ``gpucluster.io/node-name`` (no-op without it)."""

    name = "NodeName"

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        want = pod.annotations.get(NODE_NAME_ANNOTATION)
        if want is not None:
            out[:] = Reason.NodeNameMismatch
            i = snap.node_index.get(want)
            if i is not None:
                out[i] = 0
        return out


class NodeResourcesFit:
    """Host CPU and memory: the pod's total requests must fit the node's free CPU and memory; extended
    resources: the node must offer at least what the pod asks (checked against the node's allocatable)."""

    name = "NodeResourcesFit"

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        wanted = pod.extended
        if not wanted:
            state.write(self.name, None)
            return Status.success()
        short = np.zeros(snap.n_nodes, np.bool_)
        missing = []
        for res, n in sorted(wanted.items()):
            lacking = np.array([node.extended.get(res, 0) < n for node in snap.nodes], np.bool_)
            if lacking.size == 0 or lacking[np.asarray(snap.present)].all():
                missing.append(f"Insufficient {res}")
            short |= lacking
        if missing:
            return Status.unschedulable(self.name, *missing, unresolvable=True)
        state.write(self.name, short)
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        short = state.get(self.name)
        if short is not None:
            out[short] = Reason.InsufficientExtendedResource
        cpu, mem = pod.cpu_milli, pod.memory_mib
        if mem:
            out[snap.mem_free < mem] = Reason.InsufficientMemory
        if cpu:
            out[snap.cpu_free < cpu] = Reason.InsufficientCPU
        return out


class _NoArgs(PluginArgs):
    pass


def new_node_unschedulable(args: Mapping[str, Any], handle: Handle) -> NodeUnschedulable:
    parse_args(_NoArgs, NodeUnschedulable.name, args)
    return NodeUnschedulable()


def new_node_name(args: Mapping[str, Any], handle: Handle) -> NodeName:
    parse_args(_NoArgs, NodeName.name, args)
    return NodeName()


def new_node_resources_fit(args: Mapping[str, Any], handle: Handle) -> NodeResourcesFit:
    parse_args(_NoArgs, NodeResourcesFit.name, args)
    return NodeResourcesFit()
