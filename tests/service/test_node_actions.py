"""An operator acts (issue 32, item 8) through the real app, runtime and store: cordon, uncordon and drain a
node; approve or dismiss a planned remediation without restarting ``up``. Admin only, audited, 404 for an
unknown node or remediation, 409 when the action does not apply."""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpucluster.embedded.runtime import REPAIR_AFTER_S
from gpucluster.monitoring import Action, RemediationPolicy
from gpucluster.service.store import Store, StoreWriteError
from gpucluster.spec import ClusterSpecFile, cluster_from_spec
from tests.service.inproc import SPEC, InProc, in_process, small_cluster

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


def _schedulable(p: InProc, node: str) -> bool:
    found: bool = p.client.get(f"/api/v1/nodes/{node}").json()["schedulable"]
    return found


def _repair_notes(p: InProc, node: str) -> list[str]:
    return [e["detail"] for e in _audit(p, "remediation.reset-and-uncordon") if e["target"].startswith(f"{node}/")]


def test_an_operators_cordon_outlasts_the_repair_of_a_gpu(tmp_path: Path) -> None:
    """The simulated technician repairs a faulted GPU after REPAIR_AFTER_S and puts back in service a node that
    remediation cordoned, but not one an operator cordoned or drained: that one stays out until uncordoned. On main
    before this test the repair uncordoned every node, so work landed on a node taken out for maintenance."""
    with in_process(tmp_path / "d", remediation=RemediationPolicy(max_unschedulable_fraction=1.0)) as p:
        c = p.client
        operator, drained, remediated, taken_over = (n["name"] for n in c.get("/api/v1/nodes").json()["nodes"][:4])
        # cordoned (or drained) by the operator, then a GPU of it faults (a warning XID: remediation leaves it)
        assert c.post(f"/api/v1/nodes/{operator}/cordon").status_code == 200
        assert c.post(f"/api/v1/nodes/{drained}/drain").status_code == 200
        for node in (operator, drained):
            assert c.post(f"/api/v1/nodes/{node}/devices/0/fault", params={"xid": 13}).status_code == 200
        # a critical XID: remediation cordons the node itself; on one of them the operator cordons it too
        for node in (remediated, taken_over):
            assert c.post(f"/api/v1/nodes/{node}/devices/0/fault").status_code == 200
            assert not _schedulable(p, node)
        r = c.post(f"/api/v1/nodes/{taken_over}/cordon")  # remediation's cordon becomes the operator's
        assert r.status_code == 200 and r.json()["schedulable"] is False, r.text
        assert c.post(f"/api/v1/nodes/{taken_over}/cordon").status_code == 409  # now it is the operator's already
        p.tick(REPAIR_AFTER_S + 1)
        p.tick()
        assert _schedulable(p, remediated)  # repaired: back in service, as before
        assert "node back in service" in _repair_notes(p, remediated)[-1]
        for node in (operator, drained, taken_over):
            assert not _schedulable(p, node), node
            assert "an operator cordoned it" in _repair_notes(p, node)[-1], node
        # no new work lands there: of four whole-node jobs, three run on the three nodes in service, one waits
        ids = [c.post("/api/v1/jobs", json=_job(f"whole-{i}", 1, 8)).json()["id"] for i in range(4)]
        p.tick()
        jobs = [c.get(f"/api/v1/jobs/{i}").json() for i in ids]
        nodes = {pl["node"] for j in jobs for pl in j["placements"] or []}
        assert sorted(j["status"] for j in jobs) == ["pending", "running", "running", "running"], nodes
        assert not nodes & {operator, drained, taken_over}, nodes
        # until the operator puts them back
        for node in (operator, drained, taken_over):
            assert c.post(f"/api/v1/nodes/{node}/uncordon").status_code == 200
            assert _schedulable(p, node)


def _placed_on(p: InProc, job_ids: list[str]) -> set[str]:
    nodes = set()
    for jid in job_ids:
        job = p.client.get(f"/api/v1/jobs/{jid}").json()
        nodes |= {pl["node"] for pl in job["placements"]}
    return nodes


def test_an_operators_cordon_and_drain_survive_a_restart_and_uncordon_after_it_puts_the_node_back(
        tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as p:
        c = p.client
        names = [n["name"] for n in c.get("/api/v1/nodes").json()["nodes"]]
        cordoned, drained = names[0], names[1]
        assert c.post(f"/api/v1/nodes/{cordoned}/cordon").status_code == 200
        assert c.post(f"/api/v1/nodes/{drained}/drain").status_code == 200
        assert c.post(f"/api/v1/nodes/{names[2]}/cordon").status_code == 200
        assert c.post(f"/api/v1/nodes/{names[2]}/uncordon").status_code == 200  # uncordoned: not kept
    with in_process(data) as p:  # the restart, on the same data directory
        c = p.client
        rows = {n["name"]: n for n in c.get("/api/v1/nodes").json()["nodes"]}
        assert not rows[cordoned]["schedulable"] and not rows[drained]["schedulable"]
        assert rows[names[2]]["schedulable"]
        jobs = [c.post("/api/v1/jobs", json=_job(f"fill-{i}", 1, 8)).json()["id"] for i in range(len(names))]
        p.tick()
        assert _placed_on(p, jobs) == set(names) - {cordoned, drained}  # every other node, none of those two
        assert c.post(f"/api/v1/nodes/{cordoned}/cordon").status_code == 409  # still the operator's cordon
        r = c.post(f"/api/v1/nodes/{cordoned}/uncordon")
        assert r.status_code == 200 and r.json()["schedulable"] is True
        p.tick()
        assert cordoned in _placed_on(p, jobs)  # a waiting job took it
    with in_process(data) as p:  # the uncordon is kept too
        rows = {n["name"]: n for n in p.client.get("/api/v1/nodes").json()["nodes"]}
        assert rows[cordoned]["schedulable"] and not rows[drained]["schedulable"]


def test_a_held_node_the_cluster_no_longer_has_is_dropped_at_the_restart(tmp_path: Path,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    spec = copy.deepcopy(SPEC)
    spec["nodePools"][0]["count"] = 1
    smaller = cluster_from_spec(ClusterSpecFile.model_validate(spec), "test")
    gone = min({n.name for n in small_cluster().nodes} - {n.name for n in smaller.nodes})
    kept = smaller.nodes[0].name
    data = tmp_path / "d"
    with in_process(data) as p:
        assert p.client.post(f"/api/v1/nodes/{gone}/cordon").status_code == 200
        assert p.client.post(f"/api/v1/nodes/{kept}/cordon").status_code == 200
    with caplog.at_level(logging.WARNING), in_process(data, cluster=smaller) as p:
        rows = {n["name"]: n["schedulable"] for n in p.client.get("/api/v1/nodes").json()["nodes"]}
        assert gone not in rows and rows[kept] is False
        assert p.service.store.get_meta("held_nodes") == json.dumps([kept])
    assert any(gone in r.getMessage() and "no longer in the cluster" in r.getMessage() for r in caplog.records)


def _store_read_only(p: InProc, on: bool) -> None:
    """Make the service's own SQLite connection refuse every write, for real (``PRAGMA query_only``: SQLite
    answers "attempt to write a readonly database", as it does for a data directory it may no longer write)."""
    p.service.store._db.execute(f"PRAGMA query_only={'ON' if on else 'OFF'}")


def test_a_cordon_uncordon_or_drain_the_store_did_not_take_changes_nothing(tmp_path: Path) -> None:
    """Written first, applied after: when the store cannot be written the answer is 503 and the node, its jobs,
    the held list and the audit log are as they were, also after a restart. On main before this test the cordon
    (and the drain) were applied in memory and only then stored: a 503 that had cordoned the node anyway, and a
    restart that forgot it."""
    data = tmp_path / "d"
    with in_process(data) as p:
        c = p.client
        names = [n["name"] for n in c.get("/api/v1/nodes").json()["nodes"]]
        free, held = names[0], names[1]
        assert c.post(f"/api/v1/nodes/{held}/cordon").status_code == 200
        job = c.post("/api/v1/jobs", json=_job("stays", 1, 8)).json()
        p.tick()
        [busy] = {pl["node"] for pl in c.get(f"/api/v1/jobs/{job['id']}").json()["placements"]}
        audit_before = c.get("/api/v1/audit").json()["entries"]
        _store_read_only(p, True)
        for node, verb in ((free, "cordon"), (held, "uncordon"), (busy, "drain")):
            r = c.post(f"/api/v1/nodes/{node}/{verb}")
            assert r.status_code == 503 and r.json()["where"] == "store", (verb, r.text)
        assert _schedulable(p, free) and not _schedulable(p, held) and _schedulable(p, busy)
        assert p.service.runtime.held_nodes() == [held]  # type: ignore[attr-defined]
        with pytest.raises(StoreWriteError):  # the loop moves on (its clock is not stored either)
            p.tick()
        after = c.get(f"/api/v1/jobs/{job['id']}").json()
        assert after["status"] == "running" and {pl["node"] for pl in after["placements"]} == {busy}
        _store_read_only(p, False)
        assert c.get("/api/v1/audit").json()["entries"] == audit_before
        assert c.post(f"/api/v1/nodes/{free}/cordon").status_code == 200  # with a store that takes it, it works
    with in_process(data) as p:
        rows = {n["name"]: n["schedulable"] for n in p.client.get("/api/v1/nodes").json()["nodes"]}
        assert (rows[free], rows[held], rows[busy]) == (False, False, True)


class FailingEventsStore(Store):
    """A fake for a fault not caused for real here: the store takes the drain's held list and audit line, then
    fails the next write (its job events), as a disk that fills up between two writes would."""

    def record_events(self, *args: Any, **kwargs: Any) -> None:
        raise StoreWriteError(self.path, sqlite3.OperationalError("database or disk is full"))


@contextlib.contextmanager
def _events_refused(p: InProc, job_id: str) -> Iterator[None]:
    """The service's store refuses job events inside the block (``FailingEventsStore``); the job's eviction must
    then wait in ``unrecorded``. After it the real store is back and one tick must store them all."""
    real = p.service.store
    real.close()
    p.service.store = FailingEventsStore(real.path)
    yield
    assert any(e.job_id == job_id and e.kind == "evicted" for e in p.service.unrecorded)
    p.service.store.close()
    p.service.store = Store(real.path)
    p.tick()
    assert p.service.unrecorded == []


def _stored_kinds(p: InProc, job_id: str) -> list[str]:
    return [e["kind"] for e in p.client.get("/api/v1/events", params={"job": job_id}).json()["events"]]


def test_a_drain_whose_job_events_the_store_did_not_take_keeps_them_for_the_next_tick(tmp_path: Path) -> None:
    """The drain is stored (held list, audit line) and applied; its job events could not be stored: the answer
    is still the drain's (200, not "nothing was changed"), and the next tick stores the events. On main before
    this test it answered 503 "nothing was changed" for a drain that was done, and the eviction events were lost."""
    data = tmp_path / "d"
    with in_process(data) as p:
        c = p.client
        job = c.post("/api/v1/jobs", json=_job("moved", 1, 8)).json()
        p.tick()
        [node] = {pl["node"] for pl in c.get(f"/api/v1/jobs/{job['id']}").json()["placements"]}
        with _events_refused(p, job["id"]):
            r = c.post(f"/api/v1/nodes/{node}/drain")
            assert r.status_code == 200 and [j["id"] for j in r.json()["jobs"]] == [job["id"]], r.text
    with in_process(data) as p:
        assert "evicted" in _stored_kinds(p, job["id"])
        assert not _schedulable(p, node)


def test_an_approval_the_store_cannot_log_now_is_done_and_logged_with_the_next_tick(tmp_path: Path) -> None:
    """Approving a planned drain carries it out (its outcome is part of the audit line, so it cannot be stored
    first); a store that cannot take the line now gets it with the next tick that can: 200, not "nothing was
    changed". On main before this test the answer was 503 "nothing was changed" for a drain that was done, and
    the operator's audit line was lost."""
    with in_process(tmp_path / "d", remediation=PLAN_ONLY) as p:
        c = p.client
        job, planned = _planned_drain(p)
        _store_read_only(p, True)
        r = c.post(f"/api/v1/remediations/{planned['id']}/approve")
        assert r.status_code == 200 and r.json()["outcome"] == "done", r.text
        assert p.service.audit_pending and p.service.audit_pending[0][1] == "remediation.approve"
        _store_read_only(p, False)
        p.tick()
        assert p.service.audit_pending == []
        [entry] = _audit(p, "remediation.approve")
        assert entry["actor"] == "admin" and planned["id"] in entry["detail"]
        node = planned["target"].split("/")[0]
        assert node not in {pl["node"] for pl in c.get(f"/api/v1/jobs/{job['id']}").json()["placements"]}


def test_a_fault_drill_whose_job_events_the_store_did_not_take_keeps_them_for_the_next_tick(tmp_path: Path) -> None:
    """The fault is injected (and audited first); its job events could not be stored: 200 with what it evicted,
    and the next tick stores the events. On main before this test it answered 507 "nothing was changed" for a
    fault that was injected and a job that was evicted, and the eviction events were lost."""
    data = tmp_path / "d"
    with in_process(data) as p:
        c = p.client
        job = c.post("/api/v1/jobs", json=_job("hit", 1, 1)).json()
        p.tick()
        place = c.get(f"/api/v1/jobs/{job['id']}").json()["placements"][0]
        with _events_refused(p, job["id"]):
            r = c.post(f"/api/v1/nodes/{place['node']}/devices/{place['devices'][0]['index']}/fault")
            assert r.status_code == 200 and r.json()["evicted_user_jobs"] == 1, r.text
    with in_process(data) as p:
        assert "evicted" in _stored_kinds(p, job["id"])
