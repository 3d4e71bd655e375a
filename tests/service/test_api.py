"""The REST API against a real `gpucluster up` process on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.server import ADMIN, Server, start_server, wait_for

pytestmark = pytest.mark.integration

GPU1 = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


def _job(client: httpx.Client, job_id: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/jobs/{job_id}")
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _tenant(admin: httpx.Client, name: str, **kw: Any) -> str:
    r = admin.post("/api/v1/tenants", json={"name": name, **kw})
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def test_auth_is_required_and_says_why(server: Server) -> None:
    with server.client(token=None) as anon:
        r = anon.get("/api/v1/jobs")
        assert r.status_code == 401
        assert r.json()["where"] == "headers.Authorization"
        assert "missing bearer token" in r.json()["error"]
        r = anon.get("/api/v1/jobs", headers={"Authorization": "Basic abc"})
        assert r.status_code == 401 and "Bearer" in r.json()["error"]
    with server.client(token="not-a-token") as bad:
        r = bad.get("/api/v1/nodes")
        assert r.status_code == 401 and r.json()["error"] == "unknown token"
    with server.client() as admin:
        assert admin.get("/api/v1/whoami").json()["role"] == "admin"


def test_tenant_sees_and_cancels_only_its_own_jobs(server: Server) -> None:
    with server.client() as admin:
        tok_a = _tenant(admin, "team-a")
        tok_b = _tenant(admin, "team-b")
    with server.client(tok_a) as a, server.client(tok_b) as b:
        r = a.post("/api/v1/jobs", json={"name": "secret-train", "resources": GPU1})
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["tenant"] == "team-a" and job["status"] == "pending"
        # B cannot list, read or cancel A's job; it cannot even tell the job exists
        assert all(j["id"] != job["id"] for j in b.get("/api/v1/jobs").json()["jobs"])
        assert b.get("/api/v1/jobs", params={"tenant": "team-a"}).json()["jobs"] == []
        r = b.get(f"/api/v1/jobs/{job['id']}")
        assert r.status_code == 404 and r.json()["where"] == "path.id"
        assert b.delete(f"/api/v1/jobs/{job['id']}").status_code == 404
        # B cannot submit as A, nor administer tenants
        r = b.post("/api/v1/jobs", json={"name": "x", "tenant": "team-a", "resources": GPU1})
        assert r.status_code == 403 and r.json()["where"] == "tenant"
        assert b.post("/api/v1/tenants", json={"name": "team-c"}).status_code == 403
        assert [t["name"] for t in b.get("/api/v1/tenants").json()["tenants"]] == ["team-b"]
        # A sees and cancels its own job; the admin sees it too
        assert any(j["id"] == job["id"] for j in a.get("/api/v1/jobs").json()["jobs"])
        with server.client() as admin:
            assert admin.get(f"/api/v1/jobs/{job['id']}").status_code == 200
        r = a.delete(f"/api/v1/jobs/{job['id']}")
        assert r.status_code == 200 and r.json()["status"] == "cancelled"
        r = a.delete(f"/api/v1/jobs/{job['id']}")
        assert r.status_code == 409 and "already cancelled" in r.json()["error"]
        kinds = [e["kind"] for e in _job(a, job["id"])["events"]]
        assert kinds[0] == "submitted" and kinds[-1] == "cancelled"
        assert a.get("/api/v1/overview").json()["user_jobs"]["cancelled"] == 1  # its own jobs only
        assert sum(b.get("/api/v1/overview").json()["user_jobs"].values()) == 0


@pytest.mark.parametrize(
    ("body", "where", "why"),
    [
        ({"name": "Bad_Name", "resources": GPU1}, "name", "pattern"),
        ({"name": "ok", "replicas": 0, "resources": GPU1}, "replicas", "greater than or equal to 1"),
        ({"name": "ok"}, "resources", "asks for nothing"),
        ({"name": "ok", "resources": GPU1, "colour": "red"}, "colour", "Extra inputs"),
        ({"name": "ok", "resources": {"nvidia.com/gpu": "two"}}, "resources", "must be an integer"),
        ({"name": "ok", "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpumem-percentage": 150}}, "resources",
         "must be at most 100"),
        ({"name": "ok", "resources": {"hygon.com/dcumem": 1000}}, "resources", "needs hygon.com/dcunum"),
        ({"name": "ok", "resources": {}}, "resources", "asks for nothing"),
        ({"name": "ok", "resources": GPU1, "duration_s": -5}, "duration_s", "greater than 0"),
        ({"name": "ok", "tenant": "synthetic", "resources": GPU1}, "tenant", "reserved"),
    ],
)
def test_bad_job_requests_are_422_with_where_and_why(server: Server, body: dict[str, Any], where: str,
                                                     why: str) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/jobs", json=body)
    assert r.status_code == 422, r.text
    err = r.json()
    assert err["where"] == where
    assert why in err["error"]


def test_other_bad_requests(server: Server) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/jobs", content=b"{not json", headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]
        r = admin.get("/api/v1/jobs", params={"status": "sleeping"})
        assert r.status_code == 422 and r.json()["where"] == "status"
        r = admin.get("/api/v1/nope")
        assert r.status_code == 404 and "no such endpoint" in r.json()["error"]
        r = admin.get("/api/v1/nodes/no-such-node")
        assert r.status_code == 404 and r.json()["where"] == "path.name"
        r = admin.post("/api/v1/nodes/train-0000/devices/99/fault")
        assert r.status_code == 422 and r.json()["where"] == "path.index"
        r = admin.post("/api/v1/design", json={"preset": "dgx-z900"})
        assert r.status_code == 422 and r.json()["where"] == "preset"
        r = admin.post("/api/v1/design", json={"requirements": {"gpu": "H100", "servers": 0}})
        assert r.status_code == 422 and r.json()["where"] == "requirements.servers"
        r = admin.post("/api/v1/experiments", json={"policies": ["roundrobin"]})
        assert r.status_code == 422 and r.json()["where"] == "policies"


def test_job_runs_to_completion_on_the_clock(server: Server) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/jobs", json={"name": "short", "tenant": "lifecycle", "replicas": 2,
                                             "resources": {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 100},
                                             "duration_s": 40})
        assert r.status_code == 201
        jid = r.json()["id"]
        seen: set[str] = set()

        def finished() -> bool:
            job = _job(admin, jid)
            seen.add(job["status"])
            return bool(job["status"] == "succeeded")

        wait_for(finished, "the job to succeed", timeout=30)
        job = _job(admin, jid)
        assert job["gpus"] == 4.0
        assert len(job["placements"]) == 2
        assert all(len(p["devices"]) == 2 for p in job["placements"])
        assert job["finished_t"] - job["started_t"] == pytest.approx(40.0)
        kinds = [e["kind"] for e in job["events"] if e["kind"] != "unschedulable"]  # if it had to wait for room
        assert kinds == ["submitted", "running", "succeeded"]
        assert "running" in seen or "pending" in seen
        # the devices it held are visible on its node while it runs; afterwards the listing has it as done
        done = admin.get("/api/v1/jobs", params={"status": "succeeded", "tenant": "lifecycle"}).json()
        assert [j["id"] for j in done["jobs"]] == [jid]


def test_tenant_quota_holds_jobs_back(server: Server) -> None:
    with server.client() as admin:
        tok = _tenant(admin, "small-team", quota_gpus=1)
    with server.client(tok) as t:
        first = t.post("/api/v1/jobs", json={"name": "fits", "resources": GPU1}).json()
        second = t.post("/api/v1/jobs", json={"name": "over", "resources": GPU1}).json()
        wait_for(lambda: _job(t, first["id"])["status"] == "running", "the first job to run")
        held = wait_for(lambda: "waiting for quota" in _job(t, second["id"])["message"] and _job(t, second["id"]),
                        "the second job to wait for quota")
        assert held["status"] == "pending"
        row = t.get("/api/v1/tenants").json()["tenants"][0]
        assert row["name"] == "small-team" and row["quota_gpus"] == 1 and row["gpus"] == 1.0
        t.delete(f"/api/v1/jobs/{first['id']}")
        wait_for(lambda: _job(t, second["id"])["status"] == "running", "the second job to run once freed")


def test_cluster_views(server: Server) -> None:
    with server.client() as admin:
        o = admin.get("/api/v1/overview").json()
        assert o["nodes"] == 240 and o["devices"] == 1920
        assert 0 < o["gpu_alloc"] < 1
        nodes = admin.get("/api/v1/nodes").json()
        assert nodes["total"] == 240
        assert all(len(n["dev_core_used"]) == n["gpus"] for n in nodes["nodes"])
        busy = next(n for n in nodes["nodes"] if n["pods"] > 0)
        detail = admin.get(f"/api/v1/nodes/{busy['name']}").json()
        assert sum(len(d["pods"]) for d in detail["devices"]) >= 1
        topo = admin.get("/api/v1/topology").json()
        leaves = [lf for sp in topo["spines"] for lf in sp["leaves"]]
        assert len(leaves) == 8
        assert sum(len(n) for lf in leaves for r in lf["racks"] for n in [r["nodes"]]) == 240


def test_fault_drill_alerts_and_remediates(server: Server) -> None:
    """XID 79 through the API -> monitoring's simulated collector -> GpuXidCritical in /alerts -> the
    remediator drains the node (cordoned, the job re-queued, later finished elsewhere) -> the audit log."""
    with server.client() as admin:
        r = admin.post("/api/v1/jobs", json={"name": "victim", "tenant": "drill", "resources": GPU1,
                                             "duration_s": 200})
        jid = r.json()["id"]
        job = wait_for(lambda: (j := _job(admin, jid))["status"] == "running" and j, "the job to run")
        node, gpu = job["placements"][0]["node"], job["placements"][0]["devices"][0]["index"]
        r = admin.post(f"/api/v1/nodes/{node}/devices/{gpu}/fault")
        assert r.status_code == 200 and r.json()["ok"] is True and r.json()["evicted_user_jobs"] >= 1
        alerts = admin.get("/api/v1/alerts").json()
        firing = [a for a in alerts["alerts"] if a["state"] == "firing" and a["name"] == "GpuXidCritical"]
        assert [(a["target"], a["severity"]) for a in firing] == [(f"{node}/gpu{gpu}", "critical")]
        assert alerts["firing"] >= 2  # GpuXidError fires with it
        drains = [x for x in alerts["remediations"] if x["target"] == f"{node}/gpu{gpu}"]
        assert [(x["action"], x["outcome"], x["alert"]) for x in drains] == [("drain", "done", "GpuXidCritical")]
        assert "cordoned the node" in drains[0]["detail"]
        detail = admin.get(f"/api/v1/nodes/{node}").json()
        assert detail["schedulable"] is False and detail["dev_healthy"][gpu] is False and detail["pods"] == 0
        entries = admin.get("/api/v1/audit").json()["entries"]
        # newest first; the alert's own transition (actor "alerting") is written at the next tick, which may come
        # before or after this read, so it is left out of the order checked here
        mine = [(e["actor"], e["action"]) for e in entries
                if e["target"] in (f"{node}/{gpu}", f"{node}/gpu{gpu}") and e["actor"] != "alerting"]
        assert mine[:2] == [("remediation", "remediation.drain"), ("admin", "device.fault")]
        # re-queued, placed elsewhere, finished on the clock (200 s = 10 s at x20)
        done = wait_for(lambda: (j := _job(admin, jid))["status"] == "succeeded" and j, "the job to finish",
                        timeout=45)
        kinds = [e["kind"] for e in done["events"] if e["kind"] != "unschedulable"]
        assert kinds == ["submitted", "running", "evicted", "running", "succeeded"]
        assert done["placements"][0]["node"] != node
        # repaired 600 clock seconds after the fault (30 s at x20); the alert resolves at its next evaluation
        wait_for(lambda: admin.get(f"/api/v1/nodes/{node}").json()["schedulable"], "the node to come back",
                 timeout=60, interval=0.5)
        wait_for(lambda: any(a["name"] == "GpuXidCritical" and a["target"] == f"{node}/gpu{gpu}"
                             and a["state"] == "resolved" for a in admin.get("/api/v1/alerts").json()["alerts"]),
                 "the alert to resolve", timeout=30, interval=0.5)
        remediations = admin.get("/api/v1/alerts").json()["remediations"]
        assert any(x["action"] == "reset-and-uncordon" and x["target"] == f"{node}/gpu{gpu}" for x in remediations)
        entries = admin.get("/api/v1/audit").json()["entries"]
        assert any(e["action"] == "remediation.reset-and-uncordon" and e["target"] == f"{node}/gpu{gpu}"
                   for e in entries)


def test_fault_drill_with_another_xid(server: Server) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/nodes/infer-0003/devices/1/fault", params={"xid": 13})
        assert r.status_code == 200 and r.json()["evicted_user_jobs"] == 0
        alerts = admin.get("/api/v1/alerts").json()["alerts"]
        mine = {a["name"] for a in alerts if a["target"] == "infer-0003/gpu1" and a["state"] == "firing"}
        assert mine == {"GpuXidError"}  # a warning, no drain
        assert admin.get("/api/v1/nodes/infer-0003").json()["schedulable"] is True
        r = admin.post("/api/v1/nodes/infer-0003/devices/1/fault", params={"xid": 0})
        assert r.status_code == 422 and r.json()["where"] == "xid"


def test_design_endpoint_runs_in_background(server: Server) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/design", json={"preset": "dgx-h100-superpod", "scalable_units": 2})
        assert r.status_code == 202
        tid = r.json()["id"]
        task = wait_for(lambda: (t := admin.get(f"/api/v1/design/{tid}").json())["status"] in ("done", "failed")
                        and t, "the design task")
        assert task["status"] == "done", task
        assert task["result"]["servers"] == 63 and task["result"]["gpus"] == 504
        svg = admin.get(f"/api/v1/design/{tid}/topology.svg")
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg")
        assert b"<svg" in svg.content[:2000]


def test_experiment_compares_policies(server: Server) -> None:
    with server.client() as admin:
        r = admin.post("/api/v1/experiments", json={"jobs": 400, "policies": ["binpack", "spread"]})
        assert r.status_code == 202
        tid = r.json()["id"]
        task = wait_for(lambda: (t := admin.get(f"/api/v1/experiments/{tid}").json())["status"] in ("done", "failed")
                        and t, "the experiment", timeout=60)
        assert task["status"] == "done", task
        res = task["result"]["policies"]
        assert set(res) == {"binpack", "spread"}
        for v in res.values():
            assert v["placed"] + v["rejected"] == 400
            assert v["series"][-1]["jobs"] == 400


def test_restart_after_kill9_keeps_every_accepted_job(data_dir: Path) -> None:
    srv = start_server(data_dir, "--speed", "10", "--background", "0.2", "--faults-per-hour", "0")
    try:
        ids = []
        with srv.client() as admin:
            done = admin.post("/api/v1/jobs", json={"name": "quick", "resources": GPU1, "duration_s": 5}).json()
            wait_for(lambda: _job(admin, done["id"])["status"] == "succeeded", "the quick job")
            for i in range(20):
                r = admin.post("/api/v1/jobs", json={"name": f"keep-{i}", "resources": GPU1})
                assert r.status_code == 201
                ids.append(r.json()["id"])
        srv.kill9()  # no shutdown hook runs
        assert srv.proc.returncode == -9
    finally:
        srv.stop()
    again = start_server(data_dir, "--speed", "10", "--background", "0.2", "--faults-per-hour", "0")
    try:
        with again.client() as admin:
            listed = {j["id"]: j for j in admin.get("/api/v1/jobs", params={"limit": 100}).json()["jobs"]}
            assert set(ids) <= set(listed)
            assert listed[done["id"]]["status"] == "succeeded"
            wait_for(lambda: all(_job(admin, i)["status"] == "running" for i in ids), "recovered jobs to run")
            kinds = [e["kind"] for e in _job(admin, ids[-1])["events"]]
            assert "requeued" in kinds
        assert ADMIN not in again.output()  # the admin token from the environment is not echoed
    finally:
        again.stop()


def test_metrics_endpoint_exports_allocation_for_the_admin(server: Server) -> None:
    with server.client() as admin:
        r = admin.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
        text = r.text
        assert "gpucluster_" in text and 'Hostname="train-0000"' in text
    with server.client() as admin:
        tok = _tenant(admin, "metrics-peek")
    with server.client(tok) as t:
        assert t.get("/metrics").status_code == 403
