"""``gpucluster up --kubeconfig``: the control plane shows and schedules a real API server (kube-apiserver
v1.37.2 and v1.35.4, no kubelet). Registered GPU nodes appear in the REST API; a submitted job becomes Pods that the control plane's
own scheduler binds, it runs, and it succeeds after its duration (its pods deleted); cancelled jobs lose their
pods."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from k8s_helpers import GPUCLUSTER, core_api, free_port, registry, wait_until

from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.model.labels import JOB_LABEL, MANAGED_BY, MANAGED_BY_LABEL
from gpucluster.model.labels import TENANT_ANNOTATION as TENANT_LABEL

pytestmark = pytest.mark.integration

NODES = 2
GPUS = 2
NAMESPACE = "default"
ADMIN = "k8s-service-admin-token"


class ControlPlane:
    """``gpucluster up --kubeconfig`` as a real subprocess on 127.0.0.1 at a free port."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"up-{self.port}.log"
        env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": ADMIN}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*GPUCLUSTER, "up", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(self.port),
                 "--data-dir", str(workdir / "data")],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)

        def healthy() -> bool:
            if self.proc.poll() is not None:
                raise AssertionError(f"gpucluster up exited with {self.proc.returncode}:\n{self.output()}")
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200

        try:
            wait_until(healthy, 60, "gpucluster up --kubeconfig to answer /healthz")
        except BaseException:
            self.stop()
            raise

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30.0)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _nodes(run: str) -> list[NodeSpec]:
    return [
        NodeSpec(
            name=f"svc-{run}-{i}", cpu_milli=32000, memory_mib=65536, rack=f"rack-{run}", leaf=f"leaf-{run}",
            labels={"gpucluster.io/run": run},
            devices=tuple(DeviceSpec(uuid=f"GPU-svc-{run}-{i}-{j}", index=j, vendor="nvidia", model="A100-80GB",
                                     memory_mib=81920) for j in range(GPUS)),
        )
        for i in range(NODES)
    ]


@pytest.fixture
def fleet(kube_client: Any) -> Iterator[list[NodeSpec]]:
    """Simulated GPU nodes whose device-plugin handshakes stay fresh while the test runs."""
    nodes = _nodes(uuid.uuid4().hex[:6])
    reg = NodeRegistrar(kube_client, nodes, registry(), interval=5.0)
    reg.register()
    refresher = threading.Thread(target=reg.run, name="handshakes", daemon=True)
    refresher.start()
    try:
        yield nodes
    finally:
        reg.stop()
        refresher.join(10)
        reg.delete()


@pytest.fixture
def control_plane(kube_control_plane: Any, fleet: list[NodeSpec], tmp_path: Path) -> Iterator[ControlPlane]:
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path)
    try:
        yield server
    finally:
        server.stop()


def _pods(core: Any, selector: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(NAMESPACE, label_selector=selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


@contextlib.contextmanager
def _tenant_pods_removed(core: Any, control_plane: ControlPlane, tenant: str) -> Iterator[None]:
    """On failure print the control plane's log; always delete the tenant's pods."""
    try:
        yield
    except BaseException:
        print(control_plane.output()[-5000:])
        raise
    finally:
        core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"{TENANT_LABEL}={tenant}",
                                              grace_period_seconds=0)


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
    tenant = f"t-{fleet[0].name.split('-')[1]}"
    with _tenant_pods_removed(core, control_plane, tenant), control_plane.client() as api:
        assert api.get("/healthz").json()["backend"] == "kubernetes"

        # ---- the registered nodes and their devices, read live from the API server
        def ours() -> list[dict[str, Any]]:
            rows = api.get("/api/v1/nodes").json()["nodes"]
            return [r for r in rows if r["name"] in names and r["gpus"] == GPUS]

        rows = wait_until(lambda: len(ours()) == NODES and ours(), 30, "the registered nodes in GET /nodes")
        assert all(r["model"] == "A100-80GB" and r["schedulable"] for r in rows)
        detail = api.get(f"/api/v1/nodes/{fleet[0].name}").json()
        assert [d["uuid"] for d in detail["devices"]] == [d.uuid for d in fleet[0].devices]
        overview = api.get("/api/v1/overview").json()
        assert overview["backend"] == "kubernetes" and overview["devices"] >= NODES * GPUS

        # ---- a 2-replica gang: Pods in the API server, bound by our scheduler, running, then succeeded
        duration = 6.0
        resp = api.post("/api/v1/jobs", json={
            "name": "train", "tenant": tenant, "replicas": 2, "duration_s": duration,
            "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 50}})
        assert resp.status_code == 201, resp.text
        job_id = resp.json()["id"]
        selector = f"{JOB_LABEL}={job_id}"

        def bound_pods() -> list[dict[str, Any]] | None:
            pods = _pods(core, selector)
            return pods if len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods) else None

        pods = wait_until(bound_pods, 30, "the job's two pods to be created and bound")
        for pod in pods:
            meta, spec = pod["metadata"], pod["spec"]
            assert spec["schedulerName"] == "gpucluster"
            assert spec["nodeName"] in names
            assert meta["labels"][TENANT_LABEL] == tenant and meta["labels"][MANAGED_BY_LABEL] == MANAGED_BY
            assert meta["annotations"]["gpucluster.io/gang"] == job_id
            assert meta["annotations"]["gpucluster.io/gang-min-member"] == "2"
            assert meta["annotations"]["hami.io/vgpu-node"] == spec["nodeName"]
            assert ",NVIDIA,20000,50:" in meta["annotations"]["hami.io/vgpu-devices-allocated"]
            assert pod["status"].get("phase") == "Pending"  # no kubelet: bound counts as running
        on_node = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods}

        running = wait_until(lambda: _status_is(api, job_id, "running"), 15, "the job to show running")
        placed = {p["pod"].split("/")[1]: p["node"] for p in running["placements"]}
        assert placed == on_node
        assert all(len(p["devices"]) == 1 for p in running["placements"])
        node = api.get(f"/api/v1/nodes/{pods[0]['spec']['nodeName']}").json()
        holders = [h for d in node["devices"] for h in d["pods"]]
        assert any(h["job"] == job_id and h["tenant"] == tenant and h["cores"] == 50 for h in holders)

        done = wait_until(lambda: _status_is(api, job_id, "succeeded"), duration + 30, "the job to succeed")
        assert done["finished_t"] - done["started_t"] == pytest.approx(duration)
        wait_until(lambda: not _pods(core, selector), 30, "the finished job's pods to be deleted")
        kinds = [e["kind"] for e in done["events"]]
        assert kinds[0] == "submitted" and "running" in kinds and kinds[-1] == "succeeded"

        # ---- a job that runs until cancelled: cancel deletes its pods
        resp = api.post("/api/v1/jobs", json={"name": "serve", "tenant": tenant, "replicas": 1,
                                              "resources": {"nvidia.com/gpu": 1}})
        assert resp.status_code == 201, resp.text
        serve = resp.json()["id"]
        wait_until(lambda: _status_is(api, serve, "running"), 30, "the long job to run")
        assert len(_pods(core, f"{JOB_LABEL}={serve}")) == 1

        # ---- a job that can never fit is refused at submission, naming why
        resp = api.post("/api/v1/jobs", json={"name": "never", "tenant": tenant, "replicas": 1,
                                              "resources": {"nvidia.com/gpu": GPUS + 1}})
        assert resp.status_code == 422 and "can never fit" in resp.json()["error"], resp.text

        # ---- a job that fits the fleet but not now (serve holds a GPU): pending, no pods, says why
        run = fleet[0].labels["gpucluster.io/run"]
        resp = api.post("/api/v1/jobs", json={"name": "huge", "tenant": tenant, "replicas": NODES,
                                              "resources": {"nvidia.com/gpu": GPUS},
                                              "node_selector": {"gpucluster.io/run": run}})
        assert resp.status_code == 201, resp.text
        huge = resp.json()["id"]

        def waiting() -> dict[str, Any] | None:
            job = _job(api, huge)
            return job if job["status"] == "pending" and job["message"].startswith(
                ("unschedulable: ", "waiting for GPUs: ")) else None

        wait_until(waiting, 30, "the job that does not fit now to report why it waits")
        assert _pods(core, f"{JOB_LABEL}={huge}") == []  # the engine places whole jobs: no pod yet

        for job_id_ in (serve, huge):
            resp = api.delete(f"/api/v1/jobs/{job_id_}")
            assert resp.status_code == 200 and resp.json()["status"] == "cancelled", resp.text
            wait_until(lambda j=job_id_: not _pods(core, f"{JOB_LABEL}={j}"), 30,
                       f"the pods of cancelled job {job_id_} to be deleted")
        assert _job(api, serve)["status"] == "cancelled"


def test_restarted_control_plane_adopts_running_pods(kube_control_plane: Any, kube_client: Any,
                                                     fleet: list[NodeSpec], tmp_path: Path) -> None:
    """Pods outlive the control plane: after a restart the job is re-queued, its existing pods are adopted (not
    recreated) and it runs again; cancelling it then deletes them."""
    core = core_api(kube_client)
    tenant = f"r-{fleet[0].name.split('-')[1]}"
    first = ControlPlane(kube_control_plane.kubeconfig, tmp_path)
    second: ControlPlane | None = None
    try:
        with first.client() as api:
            resp = api.post("/api/v1/jobs", json={"name": "serve", "tenant": tenant, "replicas": 2,
                                                  "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 30}})
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            wait_until(lambda: _status_is(api, job_id, "running"), 30, "the job to run")
        selector = f"{JOB_LABEL}={job_id}"
        def bound() -> dict[str, tuple[str, str]] | None:  # the writer thread creates and binds after "running"
            pods = _pods(core, selector)
            if len(pods) != 2 or not all(p["spec"].get("nodeName") for p in pods):
                return None
            return {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods}

        before = wait_until(bound, 30, "both pods to be bound")
        assert len(before) == 2
        first.stop()

        second = ControlPlane(kube_control_plane.kubeconfig, tmp_path)
        with second.client() as api:
            again = wait_until(lambda: _status_is(api, job_id, "running"), 30, "the restored job to run again")
            kinds = [e["kind"] for e in again["events"]]
            assert kinds.count("running") == 2 and "requeued" in kinds
            after = {p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
                     for p in _pods(core, selector)}
            assert after == before  # adopted, not recreated
            node = api.get(f"/api/v1/nodes/{next(iter(before.values()))[1]}").json()
            assert any(h["job"] == job_id for d in node["devices"] for h in d["pods"])
            resp = api.delete(f"/api/v1/jobs/{job_id}")
            assert resp.status_code == 200, resp.text
            wait_until(lambda: not _pods(core, selector), 30, "the cancelled job's pods to be deleted")
    except BaseException:
        for cp in (first, second):
            if cp is not None:
                print(cp.output()[-3000:])
        raise
    finally:
        for cp in (first, second):
            if cp is not None:
                cp.stop()
        core.delete_collection_namespaced_pod(NAMESPACE, label_selector=f"{TENANT_LABEL}={tenant}",
                                              grace_period_seconds=0)


def test_tenant_quota_on_kubernetes(kube_client: Any, fleet: list[NodeSpec], control_plane: ControlPlane) -> None:
    """A tenant's GPU quota holds on the Kubernetes backend: a job that brings it exactly to its quota gets its
    pods, the next one waits (no pods created) with the reason, and gets them once the first is cancelled."""
    core = core_api(kube_client)
    tenant = f"q-{fleet[0].name.split('-')[1]}"
    whole = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
    with _tenant_pods_removed(core, control_plane, tenant), control_plane.client() as api:
        r = api.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
        assert r.status_code == 201, r.text
        headers = {"Authorization": f"Bearer {r.json()['token']}"}
        pair = api.post("/api/v1/jobs", json={"name": "pair", "replicas": 2, "resources": whole},
                        headers=headers).json()
        # the default queue policy tries small jobs first: the second job comes once the first runs
        wait_until(lambda: _status_is(api, pair["id"], "running"), 30, "the job at exactly its quota to run")
        extra = api.post("/api/v1/jobs", json={"name": "extra", "resources": whole}, headers=headers).json()
        assert (pair["tenant"], pair["gpus"], extra["gpus"]) == (tenant, 2.0, 1.0)

        def waiting() -> dict[str, Any] | None:
            job = _job(api, extra["id"])
            return job if job["status"] == "pending" and "waiting for quota" in job["message"] else None

        held = wait_until(waiting, 30, "the job over the quota to wait for it")
        assert f"tenant {tenant} holds 2 of 2 GPUs, the job needs 1" in held["message"]
        assert _pods(core, f"{JOB_LABEL}={extra['id']}") == []
        row = next(t for t in api.get("/api/v1/tenants").json()["tenants"] if t["name"] == tenant)
        assert (row["quota_gpus"], row["gpus"], row["running"], row["pending_gpus"], row["pending"]) == (
            2.0, 2.0, 1, 1.0, 1)
        assert api.delete(f"/api/v1/jobs/{pair['id']}").status_code == 200
        wait_until(lambda: _status_is(api, extra["id"], "running"), 30, "the waiting job to run after the cancel")
        assert len(_pods(core, f"{JOB_LABEL}={extra['id']}")) == 1
        assert api.delete(f"/api/v1/jobs/{extra['id']}").status_code == 200
