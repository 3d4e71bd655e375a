"""Issue 28, item 1: quota changes apply to admission, never retroactively.

A job admitted under a higher quota keeps running when the quota is lowered, and is put back as running after a
restart (``SIGTERM`` or ``kill -9``); a queued job beyond the lowered quota stays pending, saying it waits for
the quota (never ``rejected`` or ``failed``), and runs when the quota rises again. On main before this change,
the restart failed both jobs ("not restored after a control-plane restart: quota: can never fit ...").

The in-process test restarts by closing the service and opening the data directory again; the integration
test does the same to a real ``gpucluster up`` process.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.service.inproc import in_process, write_small_cluster
from tests.service.server import Server, start_server, wait_for

FOUR = {"nvidia.com/gpu": 4, "nvidia.com/gpucores": 100}
ARGS = ("--speed", "20", "--background", "0", "--faults-per-hour", "0")


def _quota(client: Any, gpus: float) -> None:
    r = client.post("/api/v1/tenants", json={"name": "team", "quota_gpus": gpus})
    assert r.status_code == 201, r.text


def _job(client: Any, jid: str) -> dict[str, Any]:
    r = client.get(f"/api/v1/jobs/{jid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def test_a_lowered_quota_keeps_admitted_jobs_across_a_restart_in_process(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        _quota(ip.client, 8)
        ran = ip.client.post("/api/v1/jobs", json={"name": "ran", "tenant": "team", "resources": FOUR}).json()["id"]
        ip.tick()
        assert _job(ip.client, ran)["status"] == "running"
        _quota(ip.client, 6)
        waits = ip.client.post("/api/v1/jobs", json={"name": "waits", "tenant": "team", "resources": FOUR})
        assert waits.status_code == 201, waits.text
        waits_id = waits.json()["id"]
        ip.tick()
        _quota(ip.client, 2)
        ip.tick()
        assert _job(ip.client, ran)["status"] == "running"
        queued = _job(ip.client, waits_id)
        assert queued["status"] == "pending" and "quota" in queued["message"], queued
        # a new job beyond the lowered quota is refused at admission, as before
        r = ip.client.post("/api/v1/jobs", json={"name": "new", "tenant": "team", "resources": FOUR})
        assert r.status_code == 422 and r.json()["where"] == "quota", r.text
    with in_process(data) as ip:  # the restart
        ip.tick()
        assert _job(ip.client, ran)["status"] == "running"
        queued = _job(ip.client, waits_id)
        assert queued["status"] == "pending" and "quota" in queued["message"], queued
        tenants = {t["name"]: t for t in ip.client.get("/api/v1/tenants").json()["tenants"]}
        assert tenants["team"]["gpus"] == 4 and tenants["team"]["quota_gpus"] == 2
        _quota(ip.client, 8)
        ip.tick()
        assert _job(ip.client, waits_id)["status"] == "running"
        assert _job(ip.client, ran)["status"] == "running"
        kinds = [e["kind"] for e in _job(ip.client, waits_id)["events"]]
        assert "rejected" not in kinds and "failed" not in kinds


def _status(server: Server, jid: str) -> dict[str, Any]:
    with server.client() as c:
        return _job(c, jid)


@pytest.mark.integration
@pytest.mark.parametrize("how", ["sigterm", "kill9"])
def test_a_lowered_quota_keeps_admitted_jobs_across_a_restart_of_up(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    spec = write_small_cluster(tmp_path / "cluster.yaml")
    first = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        with first.client() as admin:
            _quota(admin, 8)
            ran = admin.post("/api/v1/jobs", json={"name": "ran", "tenant": "team", "resources": FOUR}).json()["id"]
            wait_for(lambda: _status(first, ran)["status"] == "running", "the first job to run")
            _quota(admin, 6)
            r = admin.post("/api/v1/jobs", json={"name": "waits", "tenant": "team", "resources": FOUR})
            assert r.status_code == 201, r.text
            waits = r.json()["id"]
            wait_for(lambda: "quota" in _status(first, waits)["message"], "the second job to wait for quota")
            _quota(admin, 2)
    finally:
        if how == "kill9":
            first.kill9()
        else:
            first.stop()
    again = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        def settled() -> dict[str, Any] | None:
            q = _status(again, waits)
            return q if "quota" in q["message"] and _status(again, ran)["status"] == "running" else None

        queued = wait_for(settled, "the restored jobs")
        assert queued["status"] == "pending", queued
        assert _status(again, ran)["status"] == "running"
        with again.client() as admin:
            _quota(admin, 8)
        wait_for(lambda: _status(again, waits)["status"] == "running", "the waiting job to run once raised")
        assert _status(again, ran)["status"] == "running"
        assert not {e["kind"] for e in _status(again, waits)["events"]} & {"rejected", "failed"}
    finally:
        again.stop()


