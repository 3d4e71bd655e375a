"""``NodeSelector``: a pod with ``node_selector`` (Kubernetes ``spec.nodeSelector``) goes only to nodes carrying
every one of those labels (cluster spec pools set them with ``labels``; Kubernetes nodes have their own).

Node labels do not change while a node exists, so the mask for a selector is computed once per node set and
kept (a few selectors are in use at a time)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.model import Pod, Snapshot
from gpucluster.scheduler.framework import CycleState, Handle, PluginRegistry, Reason, ReasonArray, Status
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "NodeSelector"
_MAX_CACHED = 64


class NodeSelector:
    """PreFilter (skip pods without a selector) and Filter (``NodeSelectorMismatch`` elsewhere)."""

    name = NAME

    def __init__(self) -> None:
        self._masks: dict[tuple[Any, ...], np.ndarray[Any, np.dtype[np.bool_]]] = {}

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        return Status.success() if pod.node_selector else SKIP

    def matching(self, selector: Mapping[str, str], snap: Snapshot) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Nodes whose labels include every ``key: value`` of ``selector`` (kept per selector while neither the
        nodes nor any node's labels change: a relabelled node is matched again)."""
        items = tuple(sorted(selector.items()))
        key = (items, snap.layout, snap.labels_generation)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.fromiter((all(n.labels.get(k) == v for k, v in items) for n in snap.nodes), np.bool_,
                               len(snap.nodes))
            if len(self._masks) >= _MAX_CACHED:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        out[~self.matching(pod.node_selector, snap)[: snap.n_nodes]] = Reason.NodeSelectorMismatch
        return out


class _NoArgs(PluginArgs):
    pass


def new_node_selector(args: Mapping[str, Any], handle: Handle) -> NodeSelector:
    parse_args(_NoArgs, NAME, args)
    return NodeSelector()


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_node_selector)
