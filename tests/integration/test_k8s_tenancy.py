"""Tenant isolation on a real kube-apiserver (with kube-controller-manager's Job controller and the kubelet
stand-in): a Namespace labelled ``gpucluster.io/tenant: A`` binds it to tenant A, and A then takes Jobs only from
its bound namespaces.

* a Job in another namespace naming A (``gpucluster.io/queue: A``) is refused: a Warning ``Refused`` Event on the
  Job says why, it is never released, A's quota is untouched and A's job list does not show it;
* a Job in A's namespace naming A runs and is charged to A;
* removing the label (unbinding) takes effect without a restart: a Job in the other namespace naming A is then
  admitted, as for every tenant with no bound namespace.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_k8s_workloads import _api_job, _kubectl, job_yaml
from up_process import ControlPlane, serving, wait_until

from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import QUEUE_LABEL

pytestmark = pytest.mark.integration


@pytest.fixture
def namespaces(kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any,
               run: str) -> Iterator[tuple[str, str, str]]:
    """(tenant A, its namespace ns-a, another namespace ns-b), made before the control plane starts."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = f"ta-{run}", f"a-{run}", f"b-{run}"
    core.create_namespace({"metadata": {"name": ns_a, "labels": {NAMESPACE_TENANT_LABEL: tenant}}})
    core.create_namespace({"metadata": {"name": ns_b}})
    try:
        yield tenant, ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):
            client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                ns, label_selector=QUEUE_LABEL, propagation_policy="Background")
            core.delete_namespace(ns)


@pytest.fixture
def server(namespaces: tuple[str, str, str], kube_control_plane: Any, fleet: list[Any],
           tmp_path: Path) -> Iterator[ControlPlane]:
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as srv:
        yield srv


def _apply(cp: Any, name: str, namespace: str, tenant: str, run: str) -> None:
    doc = json.loads(job_yaml(name, tenant, run, pods=1, gpus=2, env={"FAKE_RUN_S": "2"}))
    doc["metadata"]["namespace"] = namespace
    _kubectl(cp, "apply", "-f", "-", stdin=json.dumps(doc))



def _refused(kube: Any, namespace: str, name: str) -> list[dict[str, Any]] | None:
    from kubernetes import client

    resp = client.CoreV1Api(kube).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind=Job", _preload_content=False)
    return [e for e in json.loads(resp.data)["items"] if e["reason"] == "Refused"] or None


def _usage(server: ControlPlane, tenant: str) -> dict[str, Any]:
    rows = [t for t in server.get("/api/v1/tenants")["tenants"] if t["name"] == tenant]
    return rows[0] if rows else {"gpus": 0.0, "running": 0, "pending": 0}


def test_a_tenant_bound_to_a_namespace_takes_jobs_from_it_only(kube_control_plane: Any, kube_client: Any,
                                                               run: str, namespaces: tuple[str, str, str],
                                                               server: ControlPlane) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    assert server.overview()["kubernetes"]["bound_namespaces"] >= 1
    # a Job in ns-b naming A: refused, with the reason on the Job; never released, not charged, not A's
    intruder = f"intruder-{run}"
    _apply(kube_control_plane, intruder, ns_b, tenant, run)
    [event] = wait_until(lambda: _refused(kube_client, ns_b, intruder), 60, "a Refused event on the Job in ns-b")
    assert event["type"] == "Warning"
    assert f"namespace {ns_b} may not use tenant {tenant}" in event["message"] and ns_a in event["message"]
    shown = wait_until(lambda: (j := _api_job(server, intruder)) and j["status"] == "failed" and j, 30,
                       "the refused job in get jobs")
    assert shown["tenant"] != tenant and "may not use tenant" in shown["message"]
    job = batch.read_namespaced_job(intruder, ns_b)
    assert job.spec.suspend is True
    assert "may not use tenant" in (job.metadata.annotations or {}).get("gpucluster.io/refused", "")
    assert _usage(server, tenant)["gpus"] == 0
    # a Job in ns-a naming A runs, charged to A
    own = f"own-{run}"
    _apply(kube_control_plane, own, ns_a, tenant, run)
    done = wait_until(lambda: (j := _api_job(server, own)) and j["status"] == "succeeded" and j, 90,
                      "the Job in A's namespace to run")
    assert done["tenant"] == tenant
    assert not _refused(kube_client, ns_a, own)
    # unbinding (the label removed) takes effect without a restart: ns-b may name A again
    core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: None}}})
    wait_until(lambda: server.overview()["kubernetes"]["bound_namespaces"] == 0, 30, "the binding to be gone")
    later = f"later-{run}"
    _apply(kube_control_plane, later, ns_b, tenant, run)
    done = wait_until(lambda: (j := _api_job(server, later)) and j["status"] == "succeeded" and j, 90,
                      "the Job in ns-b to run once A is bound nowhere")
    assert done["tenant"] == tenant and not _refused(kube_client, ns_b, later)
