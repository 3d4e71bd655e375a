"""Issue 14: no request may wedge, crash or cheat the control plane. One test (or more) per numbered defect,
against the real app, runtime and SQLite store in-process (``tests/service/inproc.py``); what needs a real
``gpucluster up`` process is in ``test_hardening_up.py``."""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from gpucluster.service import DataDirLockedError, TokenError
from gpucluster.service.limits import MAX_BODY_BYTES, RateLimits
from tests.service.inproc import in_process

GPU1 = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


def _job(name: str, resources: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return {"name": name, "resources": resources, **kw}


# ---------------------------------------------------------------------------------------------- defect 1
@pytest.mark.parametrize(("resources", "why"), [
    ({"nvidia.com/gpu": 100000000000000000000}, "must be within 0..9007199254740992"),  # not JSON-safe
    ({"nvidia.com/gpu": 100000000}, "at most 128"),
    ({"nvidia.com/gpu": 1, "nvidia.com/gpumem": 10**15}, "at most 16,777,216"),
    ({"nvidia.com/gpu": 1, "cpu": "1e30"}, "at most 65,536,000 millicores"),
])
def test_one_huge_job_cannot_stop_scheduling_for_everybody(tmp_path: Path, resources: dict[str, Any],
                                                           why: str) -> None:
    with in_process(tmp_path / "d") as ip:
        r = ip.client.post("/api/v1/jobs", json=_job("p", resources))
        assert r.status_code == 422 and why in r.text, r.text
        ids = []
        for tenant in ("a", "b", "c"):  # other tenants' gangs keep arriving and are placed
            r = ip.client.post("/api/v1/jobs", json=_job("g", GPU1, tenant=tenant, replicas=4))
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
            ip.tick()
        assert all(ip.client.get(f"/api/v1/jobs/{i}").json()["status"] == "running" for i in ids)
        health = ip.client.get("/healthz").json()
        assert health["ok"] is True and health["loop_error"] is None


def test_a_job_that_can_never_fit_is_refused_up_front(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        cases = [
            (_job("x", {"nvidia.com/gpu": 16}), "resources", "no node has more than 8"),
            (_job("x", {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 90000}), "resources",
             "largest nvidia device has 81,559 MiB"),
            (_job("x", {"cambricon.com/vmlu": 1}), "resources", "no cambricon devices"),
            (_job("x", {"nvidia.com/gpu": 8, "nvidia.com/gpucores": 100}, replicas=7), "replicas",
             "holds at most 6"),
        ]
        for body, where, why in cases:
            r = ip.client.post("/api/v1/jobs", json=body)
            assert r.status_code == 422, r.text
            assert r.json()["where"] == where and why in r.json()["error"], r.text
        assert ip.client.get("/api/v1/jobs").json()["total"] == 0  # nothing was committed


# ---------------------------------------------------------------------------------------------- defect 2
def test_an_overflowing_quantity_is_a_422_and_commits_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        r = ip.client.post("/api/v1/jobs", json=_job("p", {"nvidia.com/gpu": "1e309"}))
        assert r.status_code == 422 and "out of range" in r.json()["error"], r.text
        assert ip.client.get("/api/v1/jobs").json()["total"] == 0
    with sqlite3.connect(data / "gpucluster.db") as db:
        assert db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0] == 0
    with in_process(data) as ip:  # and the data dir opens again
        assert ip.client.get("/healthz").json()["ok"] is True


def test_restoring_skips_and_reports_a_row_it_cannot_run(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        good = ip.client.post("/api/v1/jobs", json=_job("good", GPU1)).json()["id"]
    with sqlite3.connect(data / "gpucluster.db") as db:  # rows an older, unbounded version could have written
        for jid, resources in (("j-old-overflow", '{"nvidia.com/gpu": "1e309"}'), ("j-old-junk", "not json"),
                               ("j-old-huge", '{"nvidia.com/gpu": 100000000000000000000}')):
            db.execute("INSERT INTO jobs(id, name, tenant, replicas, resources, status, submitted_at, updated_at) "
                       "VALUES(?, 'old', 'default', 1, ?, 'pending', 1, 1)", (jid, resources))
    with in_process(data) as ip:
        ip.tick()
        assert ip.client.get(f"/api/v1/jobs/{good}").json()["status"] == "running"
        for jid in ("j-old-overflow", "j-old-junk", "j-old-huge"):
            job = ip.client.get(f"/api/v1/jobs/{jid}")
            if job.status_code == 200:
                assert job.json()["status"] == "failed" and "not restored" in job.json()["message"]
        audit = ip.client.get("/api/v1/audit").json()["entries"]
        assert {e["target"] for e in audit if e["action"] == "service.restore-skipped"} == {
            "j-old-overflow", "j-old-junk", "j-old-huge"}
    with sqlite3.connect(data / "gpucluster.db") as db:
        states = dict(db.execute("SELECT id, status FROM jobs WHERE id LIKE 'j-old-%'").fetchall())
    assert states == {"j-old-overflow": "failed", "j-old-junk": "failed", "j-old-huge": "failed"}


# ---------------------------------------------------------------------------------------------- defect 3
@pytest.mark.parametrize("resources", [{"nvidia.com/gpu": "1e300000"}, {"memory": "1e300000"},
                                       {"nvidia.com/gpu": 1, "cpu": "1e999999"}, {"memory": "1e-999999"}])
def test_exponent_bombs_are_refused_without_building_the_integer(tmp_path: Path,
                                                                 resources: dict[str, Any]) -> None:
    with in_process(tmp_path / "d") as ip:
        r = ip.client.post("/api/v1/jobs", json=_job("p", resources))
        assert r.status_code == 422 and "out of range" in r.json()["error"], r.text


# ---------------------------------------------------------------------------------------------- defect 4
def test_quota_counts_what_a_job_holds(tmp_path: Path) -> None:
    whole_memory = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 1, "nvidia.com/gpumem": 81559}
    with in_process(tmp_path / "d") as ip:
        tok = ip.tenant("small", quota_gpus=2)
        t = ip.as_(tok)
        r = t.post("/api/v1/jobs", json=_job("many", whole_memory, replicas=32))
        assert r.status_code == 422 and r.json()["where"] == "quota", r.text
        assert "at least 32 GPUs" in r.json()["error"] and "quota is 2" in r.json()["error"]
        first = t.post("/api/v1/jobs", json=_job("two", whole_memory, replicas=2)).json()
        assert first["gpus"] == pytest.approx(2.0)
        ip.tick()  # the default queue policy tries small jobs first: "two" starts before "one-more" arrives
        third = t.post("/api/v1/jobs", json=_job("one-more", whole_memory)).json()
        ip.tick()
        assert t.get(f"/api/v1/jobs/{first['id']}").json()["status"] == "running"
        held = t.get(f"/api/v1/jobs/{third['id']}").json()
        assert held["status"] == "pending" and "waiting for quota" in held["message"]
        row = t.get("/api/v1/tenants").json()["tenants"][0]
        assert row["gpus"] == pytest.approx(2.0) and row["pending_gpus"] == pytest.approx(1.0)
        metrics = ip.client.get("/metrics").text
        assert 'gpucluster_tenant_gpus_held{tenant="small"} 2.0' in metrics
        assert 'gpucluster_tenant_quota_gpus{tenant="small"} 2.0' in metrics
        # on an L40S (46,068 MiB) 40,000 MiB is 0.87 of a GPU, on an H100 0.49: the job holds what it got
        r = ip.client.post("/api/v1/jobs", json=_job("half", {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 10,
                                                              "nvidia.com/gpumem": 40000}, tenant="mixed"))
        ip.tick()
        job = ip.client.get(f"/api/v1/jobs/{r.json()['id']}").json()
        cap = 81559 if job["placements"][0]["node"].startswith("train") else 46068
        assert job["status"] == "running" and job["gpus"] == pytest.approx(40000 / cap)


# ---------------------------------------------------------------------------------------------- defect 5
def test_tokens_are_revoked_at_once(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        old = ip.tenant("team")
        assert ip.as_(old).get("/api/v1/whoami").status_code == 200  # now cached
        new = ip.tenant("team")  # re-issue
        assert ip.as_(old).get("/api/v1/whoami").status_code == 401
        assert ip.as_(new).get("/api/v1/whoami").json()["tenant"] == "team"
        r = ip.as_(new).post("/api/v1/tenants/team/tokens")  # a tenant rotates its own token
        assert r.status_code == 201 and r.json()["revoked"] == 1
        newer = r.json()["token"]
        assert ip.as_(new).get("/api/v1/whoami").status_code == 401
        assert ip.as_(newer).post("/api/v1/tenants/other/tokens").status_code == 404
        r = ip.client.delete("/api/v1/tenants/team/tokens")
        assert r.status_code == 200 and r.json() == {"name": "team", "revoked": 1}
        assert ip.as_(newer).get("/api/v1/whoami").status_code == 401
        assert ip.client.delete("/api/v1/tenants/nobody/tokens").status_code == 404


def test_admin_token_rotation_and_minimum_length(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data, admin="first-admin-token-1234") as ip:
        r = ip.client.post("/api/v1/admin/token")
        assert r.status_code == 409 and "restart" in r.json()["error"]  # it comes from the configuration
    with in_process(data, admin="second-admin-token-5678") as ip:  # the configuration changed: old one revoked
        assert ip.as_("first-admin-token-1234").get("/api/v1/whoami").status_code == 401
        assert ip.client.get("/api/v1/whoami").json()["role"] == "admin"
    with pytest.raises(TokenError, match="at least 16 characters"), in_process(data, admin="x"):
        pass
    env = os.environ.pop("GPUCLUSTER_ADMIN_TOKEN", None)
    try:
        gen = tmp_path / "gen"
        from gpucluster.service import EmbeddedRuntime, ServiceConfig, open_service
        from tests.service.inproc import small_cluster

        svc, generated = open_service(EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0),
                                      ServiceConfig(data_dir=gen))
        svc.close()
        assert generated and svc.admin_source == "generated"
        first = (gen / "admin-token").read_text().strip()
        with in_process(gen, admin="") as ip:
            assert ip.service.admin_source == "file"
            admin = ip.as_(first)
            r = admin.post("/api/v1/admin/token")
            assert r.status_code == 201 and r.json()["revoked"] == 1
            rotated = r.json()["token"]
            assert admin.get("/api/v1/whoami").status_code == 401
            assert ip.as_(rotated).get("/api/v1/whoami").json()["role"] == "admin"
            assert (gen / "admin-token").read_text().strip() == rotated
            assert stat.S_IMODE((gen / "admin-token").stat().st_mode) == 0o600
    finally:
        if env is not None:
            os.environ["GPUCLUSTER_ADMIN_TOKEN"] = env


# ---------------------------------------------------------------------------------------------- defect 6
def test_a_huge_body_is_refused_before_it_is_read(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        anon = ip.as_(None)
        big = b'{"name": "x", "resources": {"a": "' + b"x" * (MAX_BODY_BYTES + 10) + b'"}}'
        r = anon.post("/api/v1/jobs", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["where"] == "body"
        r = ip.client.post("/api/v1/jobs", content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413

        def chunks() -> Any:  # no Content-Length: counted as it arrives
            for _ in range(40):
                yield b"x" * 10_000

        r = ip.client.post("/api/v1/jobs", content=chunks(), headers={"Content-Type": "application/json"})
        assert r.status_code == 413
        r = anon.post("/api/v1/jobs", json=_job("x", GPU1))  # small and anonymous: 401 before parsing
        assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_fields_are_capped(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        many = {f"example.com/r{i}": 1 for i in range(10_000)}
        r = ip.client.post("/api/v1/jobs", json=_job("x", many))
        assert r.status_code in (413, 422)
        r = ip.client.post("/api/v1/jobs", json=_job("x", {f"example.com/r{i}": 1 for i in range(17)}))
        assert r.status_code == 422 and r.json()["where"] == "resources"
        r = ip.client.post("/api/v1/jobs", json=_job("x", {"k" * 300: 1}))
        assert r.status_code == 422
        r = ip.client.post("/api/v1/jobs", json=_job("x", {"nvidia.com/gpu": "1" * 100}))
        assert r.status_code == 422
        r = ip.client.post("/api/v1/jobs", json=_job("n" * 10_000, GPU1))
        assert r.status_code == 422 and r.json()["where"] == "name"
        r = ip.client.get("/api/v1/jobs", params={"q": "q" * 1000})
        assert r.status_code == 422
        r = ip.client.post("/api/v1/design", json={"requirements": {"gpu": "H100", "servers": 10**9}})
        assert r.status_code == 422 and r.json()["where"] == "requirements.servers"
        r = ip.client.post("/api/v1/design", json={"requirements": {"gpu": "H100", "servers": 4,
                                                                    "cost": {"price_catalog": "/etc/passwd"}}})
        assert r.status_code == 422 and r.json()["where"] == "requirements.cost.price_catalog"


def test_submissions_are_rate_limited_per_tenant(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", rates=RateLimits(submit_per_s=0.001, submit_burst=3)) as ip:
        a, b = ip.as_(ip.tenant("a")), ip.as_(ip.tenant("b"))
        for k in range(3):
            assert a.post("/api/v1/jobs", json=_job(f"x{k}", GPU1)).status_code == 201
        r = a.post("/api/v1/jobs", json=_job("x3", GPU1))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1 and r.json()["where"] == "tenant"
        assert b.post("/api/v1/jobs", json=_job("x", GPU1)).status_code == 201  # another tenant is not held back
        assert ip.client.post("/api/v1/jobs", json=_job("x4", GPU1, tenant="a")).status_code == 201  # nor the admin


# ---------------------------------------------------------------------------------------------- defect 7
def test_a_second_service_on_the_same_data_dir_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data):
        with pytest.raises(DataDirLockedError) as err, in_process(data):
            pass
        assert err.value.pid == os.getpid() and f"pid {os.getpid()}" in str(err.value)
    with in_process(data) as ip:  # released on close
        assert ip.client.get("/healthz").status_code == 200


# ---------------------------------------------------------------------------------------------- defect 8
def test_healthz_without_the_admin_token_names_no_job_or_tenant(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        ip.service.loop_error = "AllocationError: pod team-a/j-0123456789ab-0 is already allocated"
        anon = ip.as_(None).get("/healthz").json()
        assert anon["ok"] is False and "j-0123" not in json.dumps(anon) and "team-a" not in json.dumps(anon)
        tenant = ip.as_(ip.tenant("peek")).get("/healthz").json()
        assert "j-0123" not in json.dumps(tenant)
        assert "j-0123456789ab" in ip.client.get("/healthz").json()["loop_error"]


def test_database_and_token_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "d"
    old = os.umask(0o022)
    try:
        with in_process(data) as ip:
            ip.client.post("/api/v1/jobs", json=_job("x", GPU1))
            for name in ("gpucluster.db", "gpucluster.db-wal", "gpucluster.db-shm", "lock"):
                assert stat.S_IMODE((data / name).stat().st_mode) == 0o600, name
            assert stat.S_IMODE(data.stat().st_mode) == 0o700
    finally:
        os.umask(old)


def test_the_clock_never_goes_backwards_after_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "d"
    seen = 0.0
    with in_process(data) as ip:
        for _ in range(5):  # fewer ticks than the old every-8-ticks save
            ip.tick(3.0)
            seen = max(seen, ip.client.get("/api/v1/jobs").json()["t"])
        ip.service.store._db.close()  # "kill -9": no clean shutdown, nothing saved on the way out
        ip.service.lock.release()  # type: ignore[union-attr]  # the kernel would drop it with the process
        ip.service.store.close = lambda: None  # type: ignore[method-assign]
        ip.service.store.set_meta = lambda k, v: None  # type: ignore[method-assign]
    with in_process(data) as ip:
        assert seen >= 15.0
        assert ip.client.get("/api/v1/jobs").json()["t"] >= seen


def test_idempotency_key_makes_a_retry_return_the_first_job(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        key = {"Idempotency-Key": "retry-7f3a"}
        first = ip.client.post("/api/v1/jobs", json=_job("once", GPU1), headers=key)
        again = ip.client.post("/api/v1/jobs", json=_job("once", GPU1), headers=key)
        assert first.status_code == 201 and again.status_code == 200
        assert again.json()["id"] == first.json()["id"] and again.headers["idempotent-replayed"] == "true"
        assert ip.client.get("/api/v1/jobs").json()["total"] == 1
        other = ip.client.post("/api/v1/jobs", json=_job("different", GPU1), headers=key)
        assert other.status_code == 409 and other.json()["where"] == "headers.Idempotency-Key"
        tok = ip.tenant("t")  # keys are per caller: another caller's same key is its own
        assert ip.as_(tok).post("/api/v1/jobs", json=_job("once", GPU1), headers=key).status_code == 201
        bad = ip.client.post("/api/v1/jobs", json=_job("x", GPU1), headers={"Idempotency-Key": "k" * 200})
        assert bad.status_code == 422 and bad.json()["where"] == "headers.Idempotency-Key"


def test_tenants_cannot_give_themselves_top_priority(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        t = ip.as_(ip.tenant("t"))
        r = t.post("/api/v1/jobs", json=_job("x", GPU1, priority=1000))
        assert r.status_code == 422 and r.json()["where"] == "priority" and "up to 100" in r.json()["error"]
        assert t.post("/api/v1/jobs", json=_job("x", GPU1, priority=100)).status_code == 201
        vip = ip.as_(ip.tenant("vip", max_priority=500))
        assert vip.post("/api/v1/jobs", json=_job("x", GPU1, priority=500)).status_code == 201
        rows = {r["name"]: r["max_priority"] for r in ip.client.get("/api/v1/tenants").json()["tenants"]}
        assert rows["t"] == 100 and rows["vip"] == 500
        assert ip.client.post("/api/v1/jobs", json=_job("x", GPU1, priority=1000)).status_code == 201  # admin


def test_dashboard_and_api_answers_carry_security_headers(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from gpucluster import web

    with in_process(tmp_path / "d") as ip:
        web.mount(ip.client.app)  # type: ignore[arg-type]
        page = TestClient(ip.client.app).get("/")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-eval" not in csp
        assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
        api = ip.client.get("/api/v1/whoami")
        assert api.headers["cache-control"] == "no-store" and api.headers["x-frame-options"] == "DENY"
