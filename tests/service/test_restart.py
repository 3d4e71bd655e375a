"""A restart of a real ``gpucluster up`` (``kill -9``, then a new process on the same data directory) changes
nothing a user can see: every field of every job, each tenant's own view, and each tenant's quota and use.

Fields that describe the current run of a live job (when it started, where its pods are, the status line) are
re-created when the restarted control plane places it again; everything else, and everything about jobs that
had already ended, must be equal.
"""

from __future__ import annotations

from pathlib import Path
from pprint import pformat
from typing import Any

import httpx
import pytest

from tests.service.inproc import write_small_cluster
from tests.service.server import Server, start_server, wait_for

pytestmark = pytest.mark.integration

RUN_FIELDS = ("started_t", "placements", "message")
"""Fields of a *live* job that a restart re-creates (it is placed again)."""
ARGS = ("--speed", "20", "--background", "0", "--faults-per-hour", "0")


def _gpu(n: int = 1, **extra: Any) -> dict[str, Any]:
    return {"nvidia.com/gpu": n, "nvidia.com/gpucores": 100, **extra}


PLAN: list[tuple[str, dict[str, Any]]] = [
    # tenant, job body
    ("team-a", {"name": "a-gang", "replicas": 2, "resources": _gpu(1), "priority": 50}),
    ("team-a", {"name": "a-two", "resources": _gpu(2, **{"nvidia.com/gpumem": 40000})}),
    ("team-a", {"name": "a-over-quota", "resources": _gpu(1)}),
    ("team-b", {"name": "b-shared", "replicas": 3, "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50,
                                                                  "nvidia.com/gpumem": 20000, "cpu": "2"}}),
    ("team-b", {"name": "b-quick", "resources": _gpu(1), "duration_s": 2.5}),
    ("team-b", {"name": "b-cancelled", "resources": _gpu(1), "duration_s": 1e6}),
    ("team-b", {"name": "b-timed", "resources": _gpu(4), "duration_s": 1e6, "priority": 5}),
    ("team-c", {"name": "c-one", "resources": _gpu(1, memory="8Gi")}),
    ("team-c", {"name": "c-waits", "resources": _gpu(1)}),
]
EXPECTED = {"a-gang": "running", "a-two": "running", "a-over-quota": "pending", "b-shared": "running",
            "b-quick": "succeeded", "b-cancelled": "cancelled", "b-timed": "running", "c-one": "running",
            "c-waits": "pending"}


def _tenants(admin: httpx.Client) -> dict[str, str]:
    tokens = {}
    for name, kw in (("team-a", {"quota_gpus": 4, "weight": 2.0, "max_priority": 60}),
                     ("team-b", {"weight": 1.0}), ("team-c", {"quota_gpus": 1, "weight": 0.5})):
        r = admin.post("/api/v1/tenants", json={"name": name, **kw})
        assert r.status_code == 201, r.text
        tokens[name] = r.json()["token"]
    return tokens


def _submit(server: Server, tokens: dict[str, str]) -> dict[str, str]:
    ids = {}
    for tenant, body in PLAN:
        with server.client(tokens[tenant]) as c:
            r = c.post("/api/v1/jobs", json=body)
            assert r.status_code == 201, r.text
            ids[body["name"]] = r.json()["id"]
        if body["name"] == "a-two":  # the default queue policy tries small jobs first: the next one comes later
            wait_for(lambda: _status(server, ids["a-two"]) == "running", "a-two to run")
    with server.client() as admin:
        assert admin.delete(f"/api/v1/jobs/{ids['b-cancelled']}").status_code == 200
    return ids


def _status(server: Server, job_id: str) -> str:
    with server.client() as admin:
        return str(admin.get(f"/api/v1/jobs/{job_id}").json()["status"])


def _settled(server: Server, ids: dict[str, str]) -> dict[str, Any] | None:
    """Every job, by id, once each has the status the plan expects and each waiting job has been tried (its
    message says it waits for its tenant's quota; a job just submitted is pending before its first pass, and
    that pass adds an event), else None."""
    with server.client() as admin:
        jobs = {j["id"]: j for j in admin.get("/api/v1/jobs", params={"limit": 100}).json()["jobs"]}
    ok = all(jobs.get(jid, {}).get("status") == EXPECTED[name] for name, jid in ids.items())
    tried = all(str(jobs[jid].get("message", "")).startswith("waiting for quota")
                for name, jid in ids.items() if ok and EXPECTED[name] == "pending")
    return jobs if ok and tried else None


def _view(server: Server, tokens: dict[str, str], ids: dict[str, str]) -> dict[str, Any]:
    """What everyone sees: every job in full (with its events), each tenant's own list, the tenant table."""
    out: dict[str, Any] = {"jobs": {}, "tenant_lists": {}}
    with server.client() as admin:
        for jid in ids.values():
            r = admin.get(f"/api/v1/jobs/{jid}")
            assert r.status_code == 200, r.text
            out["jobs"][jid] = r.json()
        out["list"] = admin.get("/api/v1/jobs", params={"limit": 100}).json()
        out["tenants"] = {t["name"]: t for t in admin.get("/api/v1/tenants").json()["tenants"]}
    for tenant, token in tokens.items():
        with server.client(token) as c:
            out["tenant_lists"][tenant] = c.get("/api/v1/jobs", params={"limit": 100}).json()
    return out


def _stable(job: dict[str, Any]) -> dict[str, Any]:
    """A job's fields that must survive a restart (all of them for a job that had ended)."""
    if job["status"] in ("succeeded", "failed", "cancelled"):
        return {k: v for k, v in job.items() if k != "events"}
    return {k: v for k, v in job.items() if k not in (*RUN_FIELDS, "events")}


def _diff(old: dict[str, Any], new: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Field -> (before, after) for every field that differs."""
    return {k: (old.get(k), new.get(k)) for k in sorted(old.keys() | new.keys()) if old.get(k) != new.get(k)}


def test_a_restart_changes_nothing_users_can_see(tmp_path: Path) -> None:
    data = tmp_path / "data"
    spec = write_small_cluster(tmp_path / "cluster.yaml")
    first = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        with first.client() as admin:
            tokens = _tenants(admin)
        ids = _submit(first, tokens)
        wait_for(lambda: _settled(first, ids), "the jobs to settle before the restart")
        before = _view(first, tokens, ids)
        first.kill9()
    finally:
        first.stop()
    again = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        wait_for(lambda: _settled(again, ids), "the restored jobs to settle again")
        after = _view(again, tokens, ids)
    finally:
        again.stop()

    # every field of every job
    assert set(after["jobs"]) == set(before["jobs"])
    changed = {old["name"]: _diff(_stable(old), _stable(after["jobs"][jid])) for jid, old in before["jobs"].items()}
    changed = {name: d for name, d in changed.items() if d}
    assert not changed, f"jobs changed across the restart: {pformat(changed)}"
    for jid, old in before["jobs"].items():
        new = after["jobs"][jid]
        assert new["events"][: len(old["events"])] == old["events"], f"job {old['name']} lost events"
        if old["status"] in ("pending", "running"):
            assert [e["kind"] for e in new["events"][len(old["events"]):]][:1] == ["requeued"]
        else:
            assert new["events"] == old["events"]
    # the job list (newest first) and each tenant's own view
    assert [j["id"] for j in after["list"]["jobs"]] == [j["id"] for j in before["list"]["jobs"]]
    assert after["list"]["total"] == before["list"]["total"] == len(PLAN)
    for tenant in tokens:
        old_list, new_list = before["tenant_lists"][tenant], after["tenant_lists"][tenant]
        assert [_stable(j) for j in new_list["jobs"]] == [_stable(j) for j in old_list["jobs"]], tenant
        assert {j["tenant"] for j in new_list["jobs"]} == {tenant}
    # quotas, weights and what each tenant holds and waits for
    assert after["tenants"] == before["tenants"]
    assert before["tenants"]["team-a"]["gpus"] == 4 and before["tenants"]["team-a"]["pending"] == 1
    assert before["tenants"]["team-c"]["gpus"] == 1 and before["tenants"]["team-c"]["pending"] == 1
