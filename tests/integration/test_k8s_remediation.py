"""Remediation on a real API server: a critical-XID alert drains the node through the Kubernetes API
(cordon, evictions), the other node's pods stay, a dry run changes nothing, and repeating is harmless."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from polling import wait_until

from gpucluster.devices import DeviceSettings, RegisteredDevice, VendorRegistry
from gpucluster.kubernetes import KubeRemediationTarget
from gpucluster.monitoring import Alert, Remediator

pytestmark = pytest.mark.integration

REGISTRY = VendorRegistry.from_settings(DeviceSettings())


def register_annotation(node: str) -> dict[str, str]:
    nvidia = REGISTRY["nvidia"]
    devices = [RegisteredDevice(f"GPU-{node}-{i}", i, 10, 40960, 100, "NVIDIA-A100", 0, True) for i in range(2)]
    return {nvidia.names.register_annotation: nvidia.encode_register(devices)}


def bound_pod(core: client.CoreV1Api, ns: str, name: str, node: str, gpu: int) -> None:
    core.create_namespaced_pod(ns, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": {
            "hami.io/vgpu-devices-to-allocate": f"GPU-{node}-{gpu},NVIDIA,1000,10:;",
            "hami.io/vgpu-node": node}},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {
            "limits": {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000", "nvidia.com/gpucores": "10"}}}]},
    })


def xid_alert(node: str, gpu: int) -> Alert:
    """What Prometheus (or the embedded evaluator) reports for ``GpuXidCritical``."""
    return Alert(
        name="GpuXidCritical",
        labels={"alertname": "GpuXidCritical", "severity": "critical", "action": "drain", "Hostname": node,
                "gpu": str(gpu)},
        annotations={"summary": f"GPU {gpu} on {node} reported a critical XID"},
        state="firing", active_since=0.0, value=79.0,
    )


def test_critical_xid_drains_the_node_through_the_api(
    kube_client: Any, gpu_node_factory: Callable[..., Any]
) -> None:
    core = client.CoreV1Api(kube_client)
    run = uuid.uuid4().hex[:6]
    bad, good = f"xid-{run}-a", f"xid-{run}-b"
    for node in (bad, good):
        gpu_node_factory(node, {"nvidia.com/gpu": 2}, annotations=register_annotation(node))
    ns = f"rem-{run}"
    core.create_namespace({"metadata": {"name": ns}})
    try:
        bound_pod(core, ns, "on-gpu0", bad, 0)
        bound_pod(core, ns, "on-gpu1", bad, 1)
        bound_pod(core, ns, "elsewhere", good, 0)
        target = KubeRemediationTarget(kube_client, REGISTRY, grace_period_s=0)
        assert target.pods_on(bad) == [f"{ns}/on-gpu0", f"{ns}/on-gpu1"]
        assert target.pods_on(bad, gpu=0) == [f"{ns}/on-gpu0"]

        # a dry run logs the drain and changes nothing
        dry = Remediator(target, dry_run=True, node_count=lambda: 8).handle([xid_alert(bad, 0)])
        assert [(r.action, r.outcome) for r in dry] == [("drain", "dry-run")]
        assert not core.read_node(bad).spec.unschedulable

        records = Remediator(target, node_count=lambda: 8).handle([xid_alert(bad, 0)])
        assert [(r.action, r.target, r.outcome) for r in records] == [("drain", f"{bad}/gpu0", "done")]
        assert core.read_node(bad).spec.unschedulable is True
        assert not core.read_node(good).spec.unschedulable

        def names() -> set[str]:
            return {p.metadata.name for p in core.list_namespaced_pod(ns).items}

        assert wait_until(lambda: names() == {"elsewhere"}, 30, "the drained node's pods to be evicted")
        # idempotent: draining an empty, cordoned node again is fine
        assert target.drain(bad).evicted == []
        target.uncordon(bad)
        assert not core.read_node(bad).spec.unschedulable
    finally:
        core.delete_namespace(ns)
