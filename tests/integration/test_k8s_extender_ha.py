"""High availability as the chart deploys it, on the real API server (v1.37.2 and v1.35.4): two kube-scheduler replicas, each
with its own gpucluster extender as a sidecar, elect a leader through a Lease. Only the leader's kube-scheduler
schedules, so only the leader's extender filters and binds; the follower's extender keeps its informer warm and
binds nothing. When the leader stops, the follower takes the Lease and its extender binds the next pods, with
device accounting that already counts every pod the first leader placed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import (
    a100_twins,
    bound,
    core_api,
    create_pods,
    device_usage_violations,
    extender_requests,
    free_port,
    gpu_pod,
    list_nodes,
    list_pods,
    registry,
    start_extender,
    wait_until,
)
from kubernetes import client

from gpucluster.kubernetes.manifests import scheduler_config

pytestmark = pytest.mark.integration


def _holder(coord: Any, namespace: str, lease: str) -> str:
    try:
        return str(coord.read_namespaced_lease(lease, namespace).spec.holder_identity or "")
    except client.ApiException:
        return ""


def test_only_the_leaders_extender_binds_and_the_follower_takes_over(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, namespace: str, tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    core = core_api(kube_client)
    coord = client.CoordinationV1Api(kube_client)
    reg = a100_twins(kube_client, tmp_path, f"ha-{run}", run, nodes=2)
    name, lease = f"gpucluster-{run}", f"ha-{run}"
    ports = {"a": free_port(), "b": free_port()}
    extenders = {r: start_extender(kube_control_plane.kubeconfig, port, tmp_path / f"extender-{r}.log",
                                   "--scheduler-name", name) for r, port in ports.items()}
    try:
        scheds, holders = {}, {}
        for r in ("a", "b"):  # a first, so a leads; b then waits on the Lease
            cfg = scheduler_config(f"http://127.0.0.1:{ports[r]}", registry(), name, leader_elect=True,
                                   namespace=namespace, kube_version=kube_control_plane.minor,
                                   lease_name=lease)
            # short terms keep the takeover quick (defaults: 15 s lease, 10 s renew deadline, 2 s retry)
            cfg["leaderElection"].update(leaseDuration="4s", renewDeadline="3s", retryPeriod="1s")
            scheds[r] = kube_scheduler_factory(yaml.safe_dump(cfg), name=f"ha-{r}-{run}")
            if r == "a":
                holders["a"] = wait_until(lambda: _holder(coord, namespace, lease), 60, "replica a to take the Lease")

        create_pods(core, namespace, [gpu_pod(f"first-{i}", name, mem=30000, cores=25, run=run) for i in range(4)])
        wait_until(lambda: len(bound(list_pods(core, namespace))) == 4, 60, "the first 4 pods to be bound")
        assert _holder(coord, namespace, lease) == holders["a"]
        assert extender_requests(ports["a"], "bind") == 4
        assert extender_requests(ports["b"], "bind") == 0
        assert extender_requests(ports["b"], "filter") == 0  # the follower's kube-scheduler does not schedule

        scheds["a"].stop()
        holders["b"] = wait_until(lambda: (h := _holder(coord, namespace, lease)) != holders["a"] and h, 60,
                                  "replica b to take over the Lease")
        create_pods(core, namespace, [gpu_pod(f"next-{i}", name, mem=30000, cores=25, run=run) for i in range(4)])
        placed = wait_until(lambda: len(bound(pods := list_pods(core, namespace))) == 8 and pods, 60,
                            "the next 4 pods to be bound by replica b")
        assert extender_requests(ports["b"], "bind") == 4
        assert extender_requests(ports["a"], "bind") == 4
        # b's informer counted a's pods: 8 x 30 GB on 4 x 80 GB GPUs is two per GPU, never three
        assert device_usage_violations(list_nodes(core, f"gpucluster.io/run={run}"), placed) == []
        per_gpu: dict[str, int] = {}
        for p in placed:
            for dev in p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(":"):
                if dev.strip(";"):
                    per_gpu[dev.split(",")[0]] = per_gpu.get(dev.split(",")[0], 0) + 1
        assert sorted(per_gpu.values()) == [2, 2, 2, 2], per_gpu
        for r, ext in extenders.items():
            assert "Traceback" not in ext.log(), r
    finally:
        for ext in extenders.values():
            ext.stop()
        reg.delete()
