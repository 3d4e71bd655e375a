"""``gpucluster up`` runs the job engine the simulator measures: on 2 x 8 H100 + 2 x 8 L40S, a 2 x 8-GPU gang
stays on one GPU model, ``gpu_type`` and ``node_selector`` choose the nodes, the queue policies ``tiresias`` and
``drf`` schedule, and a tenant over its quota waits with a message that says so."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.server import Server, start_server, wait_for

pytestmark = pytest.mark.integration

SPEC = """apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: h100-l40s
fabric: {nodesPerLeaf: 2}
nodePools:
  - name: h100
    count: 2
    cpuMilli: 128000
    memoryMiB: 1048576
    labels: {tier: train}
    gpu: {model: H100-SXM5-80GB, count: 8, memoryMiB: 81920, nvlinkDomainSize: 8}
  - name: l40s
    count: 2
    cpuMilli: 64000
    memoryMiB: 524288
    labels: {tier: infer}
    gpu: {model: L40S-48GB, count: 8, memoryMiB: 49152}
"""


def _start(tmp: Path, queue_policy: str, *more: str) -> Server:
    spec = tmp / "cluster.yaml"
    spec.write_text(SPEC)
    return start_server(tmp / "data", "--cluster", str(spec), "--speed", "50", "--background", "0",
                        "--faults-per-hour", "0", "--queue-policy", queue_policy, *more)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = _start(tmp_path_factory.mktemp("up-engine"), "default")
    yield srv
    srv.stop()


def _submit(api: httpx.Client, **body: Any) -> str:
    resp = api.post("/api/v1/jobs", json=body)
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


def _running(api: httpx.Client, job_id: str) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        job: dict[str, Any] = api.get(f"/api/v1/jobs/{job_id}").json()
        return job if job["status"] == "running" else None

    found: dict[str, Any] = wait_for(check, f"job {job_id} to run")
    return found


def _model(api: httpx.Client, node: str) -> str:
    return str(api.get(f"/api/v1/nodes/{node}").json()["model"])


def test_a_gang_stays_on_one_gpu_model_and_gpu_type_chooses_it(server: Server) -> None:
    with server.client() as api:
        gang = _running(api, _submit(api, name="gang", tenant="ml", replicas=2, duration_s=3600,
                                     resources={"nvidia.com/gpu": 8}))
        nodes = sorted(p["node"] for p in gang["placements"])
        assert len(set(nodes)) == 2 and len({_model(api, n) for n in nodes}) == 1
        assert all(d["cores"] == 100 for p in gang["placements"] for d in p["devices"])  # whole GPUs
        # the gang took one model's two nodes whole: a second gang can only go to the other model
        other = _running(api, _submit(api, name="gang2", tenant="ml", replicas=2, duration_s=3600,
                                      resources={"nvidia.com/gpu": 8}))
        assert {_model(api, p["node"]) for p in other["placements"]} != {_model(api, nodes[0])}
        for job_id in (gang["id"], other["id"]):
            assert api.delete(f"/api/v1/jobs/{job_id}").status_code == 200

        l40s = _running(api, _submit(api, name="infer", tenant="ml", duration_s=3600, gpu_type="L40S",
                                     resources={"nvidia.com/gpu": 1}))
        assert l40s["gpu_type"] == "L40S" and _model(api, l40s["placements"][0]["node"]) == "L40S-48GB"
        h100 = _running(api, _submit(api, name="train", tenant="ml", duration_s=3600, gpu_type=["H100"],
                                     resources={"nvidia.com/gpu": 2}))
        assert _model(api, h100["placements"][0]["node"]) == "H100-SXM5-80GB"
        tier = _running(api, _submit(api, name="tier", tenant="ml", duration_s=3600, kind="infer",
                                     node_selector={"tier": "infer"}, resources={"nvidia.com/gpu": 1}))
        assert tier["placements"][0]["node"].startswith("l40s-") and tier["kind"] == "infer"
        resp = api.post("/api/v1/jobs", json={"name": "nowhere", "tenant": "ml", "gpu_type": "B200",
                                              "resources": {"nvidia.com/gpu": 1}})
        assert resp.status_code == 422 and "can never fit" in resp.json()["error"]


def test_a_tenant_over_its_quota_waits_and_is_told_why(server: Server) -> None:
    with server.client() as api:
        assert api.post("/api/v1/tenants", json={"name": "capped", "quota_gpus": 1}).status_code == 201
        first = _running(api, _submit(api, name="first", tenant="capped", duration_s=3600,
                                      resources={"nvidia.com/gpu": 1}))
        second = _submit(api, name="second", tenant="capped", duration_s=3600, resources={"nvidia.com/gpu": 1})

        def waiting() -> dict[str, Any] | None:
            job: dict[str, Any] = api.get(f"/api/v1/jobs/{second}").json()
            return job if job["message"].startswith("waiting for quota") else None

        job = wait_for(waiting, "the second job to wait for quota")
        assert job["status"] == "pending"
        assert job["message"] == "waiting for quota: tenant capped holds 1 of 1 GPUs, the job needs 1"
        assert "unschedulable" in [e["kind"] for e in job["events"]]
        assert api.delete(f"/api/v1/jobs/{first['id']}").status_code == 200
        _running(api, second)  # the quota frees with the first job


@pytest.mark.parametrize("queue_policy", ["tiresias", "drf"])
def test_other_queue_policies_schedule_jobs(tmp_path: Path, queue_policy: str) -> None:
    srv = _start(tmp_path, queue_policy)
    try:
        with srv.client() as api:
            assert api.get("/api/v1/overview").json()["queue_policy"] == queue_policy
            ids = [_submit(api, name=f"j{i}", tenant=f"t{i % 2}", replicas=1 + i % 2, duration_s=50,
                           resources={"nvidia.com/gpu": 4}) for i in range(4)]

            def done() -> bool:
                return all(api.get(f"/api/v1/jobs/{j}").json()["status"] == "succeeded" for j in ids)

            wait_for(done, f"every job to finish under {queue_policy}", timeout=60)
    finally:
        srv.stop()


def test_up_runs_the_gavel_policies_and_gpu_speed(tmp_path: Path) -> None:
    """``--queue-policy gavel --placement-policy gavel``: jobs are scheduled and finish; a job whose work is
    V100 seconds runs faster than 1.0 on an H100 and says so (``gpu_speed``)."""
    srv = _start(tmp_path, "gavel", "--placement-policy", "gavel")
    try:
        with srv.client() as api:
            overview = api.get("/api/v1/overview").json()
            assert (overview["queue_policy"], overview["policy"]) == ("gavel", "gavel")
            ids = [_submit(api, name=f"g{i}", tenant=f"t{i % 2}", duration_s=100, ref_gpu="V100",
                           kind="infer" if i % 2 else "train", resources={"nvidia.com/gpu": 4}) for i in range(4)]
            fast = _submit(api, name="on-h100", tenant="t0", duration_s=100, ref_gpu="V100", gpu_type="H100",
                           resources={"nvidia.com/gpu": 8})

            def done() -> list[dict[str, Any]] | None:
                jobs = [api.get(f"/api/v1/jobs/{j}").json() for j in [*ids, fast]]
                return jobs if all(j["status"] == "succeeded" for j in jobs) else None

            jobs = wait_for(done, "every job to finish under gavel", timeout=60)
            assert jobs[-1]["gpu_speed"] > 1.5
            assert jobs[-1]["finished_t"] - jobs[-1]["started_t"] == pytest.approx(100 / jobs[-1]["gpu_speed"])
    finally:
        srv.stop()


@pytest.mark.parametrize("ref_gpu", ["H100", "L40S"])
def test_a_training_gang_runs_on_h100_under_the_default_placement(tmp_path: Path, ref_gpu: str) -> None:
    """With default settings (no placement or queue policy named), a 2 x 8-GPU training gang whose work the speed
    model knows goes to the two H100 nodes, where it runs ~3x faster than on the L40S ones, whichever GPU its
    work is measured on. Speed-blind ``stranding-fgd`` (the default before) put it on the L40S nodes."""
    spec = tmp_path / "cluster.yaml"
    spec.write_text(SPEC)
    srv = start_server(tmp_path / "data", "--cluster", str(spec), "--speed", "50", "--background", "0",
                       "--faults-per-hour", "0")
    try:
        with srv.client() as api:
            assert api.get("/api/v1/overview").json()["placement_in_use"] == "speed-fgd"
            gang = _running(api, _submit(api, name="train", tenant="ml", replicas=2, duration_s=3600, kind="train",
                                         ref_gpu=ref_gpu, resources={"nvidia.com/gpu": 8}))
            nodes = sorted(p["node"] for p in gang["placements"])
            assert len(set(nodes)) == 2
            assert {_model(api, n) for n in nodes} == {"H100-SXM5-80GB"}
            assert gang["gpu_speed"] > 2.0 or ref_gpu == "H100"
            overview = api.get("/api/v1/overview").json()
            assert overview["training_share_by_model"] == {"H100-SXM5-80GB": 1.0, "L40S-48GB": 0.0}
    finally:
        srv.stop()
