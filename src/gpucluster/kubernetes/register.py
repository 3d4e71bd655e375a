"""``register-nodes``: a simulated cluster (a cluster spec) as Node objects on a real API server, with the
HAMi device-plugin annotations, so the scheduler (or HAMi's) sees GPUs where there are none.

Each node gets capacity/allocatable (CPU, memory, pods, and per vendor ``devices x split count`` of its
count resource, as HAMi's device plugin reports), labels (pool, rack/leaf/spine, ``nvidia.com/gpu.present``,
``gpucluster.io/gpu-model``), the vendor's register annotation (``encode_register``), a fresh handshake
(``Reported_<time>``) and a Ready condition. :class:`NodeRegistrar` keeps the handshakes fresh.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from gpucluster.devices import RegisteredDevice, VendorRegistry
from gpucluster.kubernetes.convert import format_handshake
from gpucluster.model import NodeSpec
from gpucluster.model.labels import GPU_MODEL_LABEL, LEAF_LABEL, RACK_LABEL, REGISTERED_BY_LABEL, SPINE_LABEL
from gpucluster.model.resources import PERCENT_TO_CORE_MILLI

log = logging.getLogger(__name__)



def node_manifest(node: NodeSpec, registry: VendorRegistry, now: float, run: str = "register-nodes") -> dict[str, Any]:
    """The Node object (metadata + status) for one simulated node."""
    labels = {
        "kubernetes.io/hostname": node.name,
        REGISTERED_BY_LABEL: run,
        **node.labels,
    }
    if node.rack:
        labels[RACK_LABEL] = node.rack
    if node.leaf:
        labels[LEAF_LABEL] = node.leaf
    if node.spine:
        labels[SPINE_LABEL] = node.spine
    annotations: dict[str, str] = {}
    resources: dict[str, str] = {
        "cpu": f"{node.cpu_milli}m", "memory": f"{node.memory_mib}Mi", "pods": "250",
        "ephemeral-storage": "1Ti",
    }
    for vendor in registry:
        mine = [d for d in node.devices if d.vendor == vendor.names.vendor]
        if not mine:
            continue
        prefix = vendor.names.device_type_prefix
        regs = [
            RegisteredDevice(
                uuid=d.uuid, index=k, split_count=d.max_tasks, memory_mib=d.memory_mib,
                cores_pct=d.core_milli // PERCENT_TO_CORE_MILLI, model=d.type_name or f"{prefix}{d.model}",
                numa=d.numa, healthy=d.healthy, mode=d.mode,
            )
            for k, d in enumerate(mine)
        ]
        annotations[vendor.names.register_annotation] = vendor.encode_register(regs)
        annotations[vendor.names.handshake_annotation] = format_handshake(now)
        resources[vendor.names.resource_count] = str(sum(d.max_tasks for d in mine))
        if vendor.names.vendor == "nvidia":
            labels["nvidia.com/gpu.present"] = "true"
        labels[GPU_MODEL_LABEL] = mine[0].model.replace(" ", "-")[:63]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node.name, "labels": labels, "annotations": annotations},
        "status": {"capacity": resources, "allocatable": resources},
    }


def _ready_status(now: float) -> dict[str, Any]:
    stamp = dt.datetime.fromtimestamp(now, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "simulated node registered by gpucluster", "lastHeartbeatTime": stamp,
            "lastTransitionTime": stamp,
        }],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
    }


class NodeRegistrar:
    """Creates (or updates) the nodes, then refreshes their handshakes every ``interval`` seconds."""

    def __init__(self, api: ApiClient, nodes: Sequence[NodeSpec], registry: VendorRegistry,
                 interval: float = 30.0, clock: Callable[[], float] = time.time, run: str = "register-nodes") -> None:
        self.core: Any = client.CoreV1Api(api)
        self.nodes = list(nodes)
        self.registry = registry
        self.interval = interval
        self.clock = clock
        self.run_label = run
        self._stop = threading.Event()
        self.refreshes = 0

    def register(self) -> int:
        """Create every node (replacing the labels/annotations/status of one that exists); returns count."""
        now = self.clock()
        for node in self.nodes:
            body = node_manifest(node, self.registry, now, self.run_label)
            status = {**body.pop("status"), **_ready_status(now)}
            try:
                self.core.create_node(body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                self.core.patch_node(node.name, {"metadata": body["metadata"]})
            self.core.patch_node_status(node.name, {"status": status})
        return len(self.nodes)

    def refresh(self) -> None:
        """One handshake round: ``Reported_<now>`` on every vendor's handshake annotation."""
        now = self.clock()
        for node in self.nodes:
            keys = {self.registry[d.vendor].names.handshake_annotation for d in node.devices}
            if not keys:
                continue
            try:
                self.core.patch_node(node.name, {"metadata": {"annotations": {k: format_handshake(now)
                                                                             for k in keys}}})
            except ApiException as exc:
                log.warning("handshake of %s not refreshed: %s %s", node.name, exc.status, exc.reason)
        self.refreshes += 1

    def run(self) -> None:
        while not self._stop.wait(self.interval):
            self.refresh()

    def stop(self) -> None:
        self._stop.set()

    def delete(self) -> None:
        for node in self.nodes:
            try:
                self.core.delete_node(node.name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
