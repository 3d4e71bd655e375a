"""On the real API server (v1.37.2 and v1.35.4): the chart's objects, rendered by ``helm template`` for that
version, pass a server-side dry run, and kube-scheduler's priority preemption goes through the extender's
``preempt`` verb (no patch: current kube-scheduler calls it): the victim kube-scheduler
deletes is the pod whose device the preemptor needs, and the preemptor is bound once that device is free."""

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


def test_priority_preemption_frees_the_victims_device(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, namespace: str, tmp_path: Path,
) -> None:
    """kube-scheduler's DefaultPreemption does not see our device resources (ignoredByScheduler), so it proposes
    no victims; the extender's /preempt names the pod whose GPU the preemptor needs, and refuses a preemptor that
    fits no GPU even on an empty node (nobody is evicted for it)."""
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
        cfg["podInitialBackoffSeconds"] = 1
        cfg["podMaxBackoffSeconds"] = 2
        kube_scheduler_factory(yaml.safe_dump(cfg), name=f"pre-{run}")
        for i in range(2):  # one 60 GB pod per 80 GB GPU
            pod = gpu_pod(f"low-{i}", name, mem=60000, cores=30, run=run)
            pod["spec"]["priorityClassName"] = f"low-{run}"
            core.create_namespaced_pod(namespace, pod)
            wait_until(lambda i=i: f"low-{i}" in bound(list_pods(core, namespace)), 60, f"low-{i} to be bound")

        # 90 GB fits no 80 GB GPU: /preempt drops the node, so kube-scheduler evicts nobody
        huge = gpu_pod("huge", name, mem=90000, cores=50, run=run)
        huge["spec"]["priorityClassName"] = f"high-{run}"
        core.create_namespaced_pod(namespace, huge)
        wait_until(lambda: extender_requests(port, "preempt") >= 1, 60, "kube-scheduler to call /preempt for the huge pod")
        core.delete_namespaced_pod("huge", namespace, grace_period_seconds=0)
        wait_until(lambda: "huge" not in {p["metadata"]["name"] for p in list_pods(core, namespace)}, 30,
                   "the huge pod to be deleted")
        assert set(bound(list_pods(core, namespace))) == {"low-0", "low-1"}

        calls = extender_requests(port, "preempt")
        high = gpu_pod("high", name, mem=70000, cores=50, run=run)
        high["spec"]["priorityClassName"] = f"high-{run}"
        core.create_namespaced_pod(namespace, high)
        placed = wait_until(lambda: "high" in bound(list_pods(core, namespace)) and list_pods(core, namespace),
                            90, "the high-priority pod to preempt a victim and be bound")
        assert extender_requests(port, "preempt") > calls
        names = {p["metadata"]["name"] for p in placed}
        assert len(names & {"low-0", "low-1"}) == 1, names  # exactly one victim: the fewest devices freed
        nodes = list_nodes(core, f"gpucluster.io/run={run}")
        assert device_usage_violations(nodes, placed) == []
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
