"""An operator acts (issue 32, item 8) through the real app, runtime and store: cordon, uncordon and drain a
node; approve or dismiss a planned remediation without restarting ``up``. Admin only, audited, 404 for an
unknown node or remediation, 409 when the action does not apply."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucluster.monitoring import Action, RemediationPolicy
from tests.service.inproc import InProc, in_process

PLAN_ONLY = RemediationPolicy.opt_in([])
"""``up``'s default: cordons run, drains (and the other disruptive actions) are planned only."""


def _job(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "resources": {"nvidia.com/gpu": gpus}}


def _audit(p: InProc, action: str) -> list[dict[str, Any]]:
    return [e for e in p.client.get("/api/v1/audit").json()["entries"] if e["action"] == action]


def test_cordon_uncordon_drain_are_admin_only_audited_and_say_what_moved(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as p:
        c = p.client
        gang = c.post("/api/v1/jobs", json=_job("gang", 2, 8)).json()
        p.tick()
        job = c.get(f"/api/v1/jobs/{gang['id']}").json()
        assert job["status"] == "running"
        node = job["placements"][0]["node"]
        tenant = p.as_(p.tenant("t1"))
        for verb in ("cordon", "uncordon", "drain"):
            assert tenant.post(f"/api/v1/nodes/{node}/{verb}").status_code == 403
            r = c.post(f"/api/v1/nodes/no-such-node/{verb}")
            assert r.status_code == 404 and r.json()["where"] == "path.name"

        r = c.post(f"/api/v1/nodes/{node}/cordon")
        assert r.status_code == 200, r.text
        assert r.json()["schedulable"] is False and r.json()["jobs"] == []
        assert c.get(f"/api/v1/nodes/{node}").json()["schedulable"] is False
        assert c.get(f"/api/v1/jobs/{gang['id']}").json()["status"] == "running"  # a cordon moves nothing
        again = c.post(f"/api/v1/nodes/{node}/cordon")
        assert again.status_code == 409 and "already cordoned" in again.json()["error"]

        r = c.post(f"/api/v1/nodes/{node}/uncordon")
        assert r.status_code == 200 and r.json()["schedulable"] is True
        assert c.post(f"/api/v1/nodes/{node}/uncordon").status_code == 409

        r = c.post(f"/api/v1/nodes/{node}/drain")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["schedulable"] is False
        assert [(j["id"], j["name"]) for j in body["jobs"]] == [(gang["id"], "gang")]  # the whole gang moved
        p.tick()
        after = c.get(f"/api/v1/jobs/{gang['id']}").json()
        assert after["status"] == "running" and node not in {pl["node"] for pl in after["placements"]}
        kinds = [e["kind"] for e in c.get("/api/v1/events", params={"job": gang["id"]}).json()["events"]]
        assert "evicted" in kinds
        assert c.get(f"/api/v1/nodes/{node}").json()["pods"] == 0
        assert c.post(f"/api/v1/nodes/{node}/drain").status_code == 409  # cordoned and empty: nothing to do

        assert [e["target"] for e in _audit(p, "node.cordon")] == [node]
        assert [e["target"] for e in _audit(p, "node.uncordon")] == [node]
        [drained] = _audit(p, "node.drain")
        assert drained["target"] == node and drained["actor"] == "admin" and gang["id"] in drained["detail"]


def _planned_drain(p: InProc) -> tuple[dict[str, Any], dict[str, Any]]:
    """A running job, a critical XID on one of its GPUs: the drain is planned (not carried out)."""
    c = p.client
    job = c.post("/api/v1/jobs", json=_job("victim", 1, 1)).json()
    p.tick()
    place = c.get(f"/api/v1/jobs/{job['id']}").json()["placements"][0]
    node, gpu = place["node"], place["devices"][0]["index"]
    assert c.post(f"/api/v1/nodes/{node}/devices/{gpu}/fault").status_code == 200
    plan = c.get("/api/v1/remediations").json()
    [planned] = [r for r in plan["planned"] if r["action"] == str(Action.DRAIN)]
    assert planned["target"] == f"{node}/gpu{gpu}" and planned["id"]
    assert c.get(f"/api/v1/jobs/{job['id']}").json()["status"] == "running"  # planned only: nothing moved
    return job, planned


def test_approving_a_planned_drain_carries_it_out_without_a_restart(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", remediation=PLAN_ONLY) as p:
        c = p.client
        job, planned = _planned_drain(p)
        rid = planned["id"]
        tenant = p.as_(p.tenant("t1"))
        assert tenant.post(f"/api/v1/remediations/{rid}/approve").status_code == 403
        assert c.post("/api/v1/remediations/rem-999/approve").status_code == 404
        r = c.post(f"/api/v1/remediations/{rid}/approve")
        assert r.status_code == 200, r.text
        out = r.json()
        assert (out["id"], out["decision"], out["action"], out["outcome"]) == (rid, "approved", "drain", "done")
        assert "approved by admin" in out["detail"]
        p.tick()
        node = planned["target"].split("/")[0]
        moved = c.get(f"/api/v1/jobs/{job['id']}").json()
        assert node not in {pl["node"] for pl in moved["placements"]}
        assert c.get("/api/v1/remediations").json()["planned"] == []
        again = c.post(f"/api/v1/remediations/{rid}/approve")
        assert again.status_code == 409 and "already approved" in again.json()["error"]
        assert c.post(f"/api/v1/remediations/{rid}/dismiss").status_code == 409
        [entry] = _audit(p, "remediation.approve")
        assert entry["actor"] == "admin" and rid in entry["detail"]
        assert any(e["action"] == "remediation.drain" and "approved by admin" in e["detail"]
                   for e in c.get("/api/v1/audit").json()["entries"])


def test_dismissing_a_planned_drain_leaves_the_jobs_and_the_plan_empty(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", remediation=PLAN_ONLY) as p:
        c = p.client
        job, planned = _planned_drain(p)
        r = c.post(f"/api/v1/remediations/{planned['id']}/dismiss")
        assert r.status_code == 200 and r.json()["outcome"] == "dismissed"
        for _ in range(3):  # the alert keeps firing: the drain is not planned again
            p.tick(30.0)
        assert c.get("/api/v1/remediations").json()["planned"] == []
        assert c.get(f"/api/v1/jobs/{job['id']}").json()["status"] == "running"
        assert c.post(f"/api/v1/remediations/{planned['id']}/approve").status_code == 409
        assert [e["target"] for e in _audit(p, "remediation.dismiss")] == [planned["target"]]
