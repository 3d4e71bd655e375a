"""``gpucluster up --kubeconfig``: the control plane shows and schedules a real API server (kube-apiserver with
kube-controller-manager's Job controller; the test kubelet stand-in runs the pods). Registered GPU nodes appear
in the REST API; a job submitted to the API becomes a batch/v1 Job, admitted when all its pods have a place,
its pods bound there, run and succeeded; a job that can never fit is refused (422), one that does not fit now
waits (its Job suspended, no pods) and says why, cancel deletes the Job; a tenant's quota holds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from k8s_helpers import core_api
from up_process import ControlPlane, gpu_nodes, kubelet_fleet, new_run, wait_until

from gpucluster.model import NodeSpec
from gpucluster.model.labels import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL, QUEUE_LABEL

pytestmark = pytest.mark.integration

NODES = 2
GPUS = 2
NAMESPACE = "default"


@pytest.fixture
def fleet(kube_client: Any, tmp_path: Path) -> Iterator[list[NodeSpec]]:
    """Simulated GPU nodes whose device-plugin handshakes stay fresh, and a kubelet stand-in for them."""
    with kubelet_fleet(kube_client, gpu_nodes(new_run(), NODES, GPUS, model="A100-80GB"), tmp_path) as nodes:
        yield nodes


@pytest.fixture
def control_plane(kube_control_plane: Any, kube_controller_manager: Any, fleet: list[NodeSpec],
                  tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path)
    try:
        yield server
    finally:
        server.stop()


def _pods(core: Any, selector: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(NAMESPACE, label_selector=selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _jobs(kube: Any, selector: str) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.BatchV1Api(kube).list_namespaced_job(NAMESPACE, label_selector=selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _cleanup(kube: Any, tenant: str) -> None:
    from kubernetes import client

    client.BatchV1Api(kube).delete_collection_namespaced_job(NAMESPACE, label_selector=f"{QUEUE_LABEL}={tenant}",
                                                             propagation_policy="Background")


def _job(api: httpx.Client, job_id: str) -> dict[str, Any]:
    resp = api.get(f"/api/v1/jobs/{job_id}")
    resp.raise_for_status()
    body: dict[str, Any] = resp.json()
    return body


def _status_is(api: httpx.Client, job_id: str, status: str) -> dict[str, Any] | None:
    job = _job(api, job_id)
    return job if job["status"] == status else None


def test_up_with_kubeconfig_schedules_the_real_cluster(kube_client: Any, fleet: list[NodeSpec],
                                                       control_plane: ControlPlane) -> None:
    core = core_api(kube_client)
    names = {n.name for n in fleet}
    run = fleet[0].labels["gpucluster.io/run"]
    tenant = f"t-{run}"
    try:
        with control_plane.client() as api:
            assert api.get("/healthz").json()["backend"] == "kubernetes"

            # ---- the registered nodes and their devices, read live from the API server
            def ours() -> list[dict[str, Any]]:
                rows = api.get("/api/v1/nodes").json()["nodes"]
                return [r for r in rows if r["name"] in names and r["gpus"] == GPUS]

            rows = wait_until(lambda: len(ours()) == NODES and ours(), 30, "the registered nodes in GET /nodes")
            assert all(r["model"] == "A100-80GB" and r["schedulable"] for r in rows)
            detail = api.get(f"/api/v1/nodes/{fleet[0].name}").json()
            assert [d["uuid"] for d in detail["devices"]] == [d.uuid for d in fleet[0].devices]
            overview = wait_until(lambda: (o := api.get("/api/v1/overview").json())["kubernetes"]["leader"] and o,
                                  30, "the only replica to take the lease")
            assert overview["backend"] == "kubernetes" and overview["devices"] >= NODES * GPUS
            assert (overview["kubernetes"]["admission"], overview["kubernetes"]["leader_elect"]) == ("devices", True)

            # ---- a 2-replica gang: a Job, its pods made by the Job controller, bound, run, succeeded
            resp = api.post("/api/v1/jobs", json={
                "name": "train", "tenant": tenant, "replicas": 2, "duration_s": 6,
                "node_selector": {"gpucluster.io/run": run},
                "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 50},
                "env": [{"name": "FAKE_RUN_S", "value": "4"}]})
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            selector = f"{JOB_LABEL}={job_id}"
            [job] = wait_until(lambda: _jobs(kube_client, selector) or None, 30, "the job's Job object")
            assert job["metadata"]["labels"][MANAGED_BY_LABEL] == MANAGED_BY
            assert job["metadata"]["labels"][QUEUE_LABEL] == tenant

            def bound_pods() -> list[dict[str, Any]] | None:
                pods = _pods(core, selector)
                return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

            pods = wait_until(bound_pods, 60, "the job's two pods to be made and bound")
            for pod in pods:
                meta, spec = pod["metadata"], pod["spec"]
                assert spec["schedulerName"] == "gpucluster" and spec["nodeName"] in names
                assert meta["annotations"]["hami.io/vgpu-node"] == spec["nodeName"]
                assert ",NVIDIA,20000,50:" in meta["annotations"]["hami.io/vgpu-devices-allocated"]
            running = wait_until(lambda: _status_is(api, job_id, "running"), 30, "the job to show running")
            on_node = {f"{NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"] for p in pods}
            wait_until(lambda: {p["pod"]: p["node"] for p in _job(api, job_id)["placements"]} == on_node, 30,
                       "the job's placements to name its pods")
            assert all(len(p["devices"]) == 1 for p in running["placements"])
            node = api.get(f"/api/v1/nodes/{pods[0]['spec']['nodeName']}").json()
            holders = [h for d in node["devices"] for h in d["pods"]]
            assert any(h["job"] == job_id and h["tenant"] == tenant and h["cores"] == 50 for h in holders)
            done = wait_until(lambda: _status_is(api, job_id, "succeeded"), 60, "the job to succeed")
            kinds = [e["kind"] for e in done["events"]]
            assert kinds[0] == "submitted" and "running" in kinds and kinds[-1] == "succeeded"

            # ---- a job that can never fit is refused at submission, naming why
            resp = api.post("/api/v1/jobs", json={"name": "never", "tenant": tenant, "replicas": 1,
                                                  "resources": {"nvidia.com/gpu": GPUS + 1}})
            assert resp.status_code == 422 and "can never fit" in resp.json()["error"], resp.text

            # ---- a job that runs until cancelled, and one that does not fit now: pending, no pods, says why
            serve = api.post("/api/v1/jobs", json={
                "name": "serve", "tenant": tenant, "replicas": 1, "resources": {"nvidia.com/gpu": 1},
                "node_selector": {"gpucluster.io/run": run}, "env": [{"name": "FAKE_RUN_S", "value": "inf"}]}).json()
            wait_until(lambda: _status_is(api, serve["id"], "running"), 30, "the long job to run")
            huge = api.post("/api/v1/jobs", json={"name": "huge", "tenant": tenant, "replicas": NODES,
                                                  "resources": {"nvidia.com/gpu": GPUS},
                                                  "node_selector": {"gpucluster.io/run": run}}).json()

            def waiting() -> dict[str, Any] | None:
                job = _job(api, huge["id"])
                return job if job["status"] == "pending" and job["message"].startswith(
                    ("unschedulable: ", "waiting for GPUs: ", "waiting for a placement: ")) else None

            wait_until(waiting, 30, "the job that does not fit now to say why it waits")
            [hjob] = _jobs(kube_client, f"{JOB_LABEL}={huge['id']}")
            assert hjob["spec"]["suspend"] is True and _pods(core, f"{JOB_LABEL}={huge['id']}") == []

            # ---- cancel deletes the Job (and so its pods)
            for job_id_ in (serve["id"], huge["id"]):
                resp = api.delete(f"/api/v1/jobs/{job_id_}")
                assert resp.status_code == 200 and resp.json()["status"] == "cancelled", resp.text
                wait_until(lambda j=job_id_: not _jobs(kube_client, f"{JOB_LABEL}={j}"), 30,
                           f"the Job of cancelled job {job_id_} to be deleted")
            assert _job(api, serve["id"])["status"] == "cancelled"
    finally:
        _cleanup(kube_client, tenant)


def test_tenant_quota_on_kubernetes(kube_client: Any, fleet: list[NodeSpec], control_plane: ControlPlane) -> None:
    """A tenant's GPU quota holds on the Kubernetes backend: a job that brings it exactly to its quota is admitted,
    the next one waits (its Job suspended, no pods) with the reason, and is admitted once the first is cancelled."""
    core = core_api(kube_client)
    run = fleet[0].labels["gpucluster.io/run"]
    tenant = f"q-{run}"
    whole = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
    forever = [{"name": "FAKE_RUN_S", "value": "inf"}]
    try:
        with control_plane.client() as api:
            r = api.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
            assert r.status_code == 201, r.text
            headers = {"Authorization": f"Bearer {r.json()['token']}"}
            pair = api.post("/api/v1/jobs", json={"name": "pair", "replicas": 2, "resources": whole, "env": forever,
                                                  "node_selector": {"gpucluster.io/run": run}},
                            headers=headers).json()
            wait_until(lambda: _status_is(api, pair["id"], "running"), 30, "the job at exactly its quota to run")
            extra = api.post("/api/v1/jobs", json={"name": "extra", "resources": whole, "env": forever,
                                                   "node_selector": {"gpucluster.io/run": run}},
                             headers=headers).json()
            assert (pair["tenant"], pair["gpus"], extra["gpus"]) == (tenant, 2.0, 1.0)

            def held() -> dict[str, Any] | None:
                job = _job(api, extra["id"])
                return job if job["status"] == "pending" and "waiting for quota" in job["message"] else None

            job = wait_until(held, 30, "the job over the quota to wait for it")
            assert f"tenant {tenant} holds 2 of 2 GPUs, the job needs 1" in job["message"]
            assert _pods(core, f"{JOB_LABEL}={extra['id']}") == []
            row = next(t for t in api.get("/api/v1/tenants").json()["tenants"] if t["name"] == tenant)
            assert (row["quota_gpus"], row["gpus"], row["running"], row["pending_gpus"], row["pending"]) == (
                2.0, 2.0, 1, 1.0, 1)
            assert api.delete(f"/api/v1/jobs/{pair['id']}").status_code == 200
            wait_until(lambda: _status_is(api, extra["id"], "running"), 30, "the waiting job to run after the cancel")
            wait_until(lambda: len(_pods(core, f"{JOB_LABEL}={extra['id']}")) == 1, 30, "its pod")
            assert api.delete(f"/api/v1/jobs/{extra['id']}").status_code == 200
    finally:
        _cleanup(kube_client, tenant)
