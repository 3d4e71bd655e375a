"""On the real API server (v1.37.2 and v1.35.4): the chart's objects, rendered by ``helm template`` for that
version, pass a server-side dry run; and what kube-scheduler's priority preemption does with the extender's
``preempt`` verb on current releases (it never calls it for device resources it ignores)."""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from k8s_helpers import (
    a100_twins,
    bound,
    core_api,
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
from kubernetes import client, utils
from tests.tools import require_tool

from gpucluster.kubernetes.manifests import scheduler_config

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}  # the Prometheus Operator's: not on this server


@pytest.mark.parametrize("mode", ["extender", "scheduler"])
def test_chart_objects_pass_server_side_dry_run(kube_control_plane: Any, kube_client: Any, namespace: str,
                                                mode: str) -> None:
    proc = subprocess.run(
        [str(require_tool("helm")), "template", f"it-{uuid.uuid4().hex[:6]}", str(REPO / "charts" / "gpucluster"),
         "--kube-version", kube_control_plane.minor, "--namespace", namespace, "--set",
         f"mode={mode},up.enabled=true,monitoring.serviceMonitor.enabled=true,"
         "monitoring.prometheusRule.enabled=true,monitoring.dashboard.enabled=true",
         "--set-string", "twins.cluster=name: t"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    docs = [d for d in yaml.safe_load_all(proc.stdout) if d]
    applied = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        utils.create_from_dict(kube_client, doc, dry_run="All")  # validated and admitted, then discarded
        applied += 1
    assert applied >= 20
    if mode == "extender":
        cfg = yaml.safe_load(next(d for d in docs if d["metadata"]["name"].endswith("-config"))["data"]["config.yaml"])
        assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"


def test_priority_preemption_through_kube_scheduler_evicts_nobody_for_devices(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, namespace: str, tmp_path: Path,
) -> None:
    """What current kube-scheduler (1.35, 1.37) does with the extender's ``preemptVerb``: its DefaultPreemption
    does not see our device resources (ignoredByScheduler), so in its own dry run every lower-priority pod is
    reprieved, a node with no victim is an error ("expected at least one victim pod on node"), and it never
    sends the candidates to the extender's /preempt (kube-scheduler 1.20 did, with kubernetes#102971 fixed).
    So a high-priority pod that needs a GPU held by lower-priority pods evicts nobody and waits with the reason;
    the device accounting stays whole. (The /preempt verb itself is unit-tested in tests/kubernetes.)"""
    run = uuid.uuid4().hex[:6]
    core = core_api(kube_client)
    sched_api = client.SchedulingV1Api(kube_client)
    reg = a100_twins(kube_client, tmp_path, f"pre-{run}", run, nodes=1)
    classes = {f"low-{run}": 10, f"high-{run}": 1000}
    for name, value in classes.items():
        sched_api.create_priority_class(client.V1PriorityClass(metadata=client.V1ObjectMeta(name=name), value=value))
    port = free_port()
    name = f"gpucluster-{run}"
    ext = start_extender(kube_control_plane.kubeconfig, port, tmp_path / "extender.log", "--scheduler-name", name)
    try:
        cfg = scheduler_config(f"http://127.0.0.1:{port}", registry(), name, kube_version=kube_control_plane.minor)
        assert cfg["extenders"][0]["preemptVerb"] == "preempt"
        cfg["podInitialBackoffSeconds"] = 1
        cfg["podMaxBackoffSeconds"] = 2
        kube_scheduler_factory(yaml.safe_dump(cfg), name=f"pre-{run}")
        for i in range(2):  # one 60 GB pod per 80 GB GPU
            pod = gpu_pod(f"low-{i}", name, mem=60000, cores=30, run=run)
            pod["spec"]["priorityClassName"] = f"low-{run}"
            core.create_namespaced_pod(namespace, pod)
            wait_until(lambda i=i: f"low-{i}" in bound(list_pods(core, namespace)), 60, f"low-{i} to be bound")

        high = gpu_pod("high", name, mem=70000, cores=50, run=run)
        high["spec"]["priorityClassName"] = f"high-{run}"
        core.create_namespaced_pod(namespace, high)

        def waiting_reason() -> str:
            pod = core.read_namespaced_pod("high", namespace)
            conds = [c for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"]
            return str(conds[0].message) if conds and "preemption" in (conds[0].message or "") else ""

        msg = wait_until(waiting_reason, 90, "kube-scheduler to try preemption for the high-priority pod")
        assert "InsufficientGPUMemory" in msg and "victim" in msg, msg
        placed = list_pods(core, namespace)
        assert set(bound(placed)) == {"low-0", "low-1"}  # nobody evicted, the high pod waits
        assert extender_requests(port, "preempt") == 0
        assert device_usage_violations(list_nodes(core, f"gpucluster.io/run={run}"), placed) == []
        assert "Traceback" not in ext.log()
        text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        # HAMi's names beside ours, in HAMi's units (bytes)
        assert "hami_gpu_memory_allocated_bytes{" in text and "gpucluster_device_allocated_memory_bytes{" in text
    finally:
        ext.stop()
        reg.delete()
        for name in classes:
            with contextlib.suppress(client.ApiException):
                sched_api.delete_priority_class(name)
