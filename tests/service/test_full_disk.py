"""Issue 28, items 2-4: a store that cannot be written changes nothing, and says so.

* In process, with :class:`FakeFullDiskStore` (a real ``Store`` on the real file whose writes fail, when armed, with
  the error SQLite raises on a full disk, or another one): a cancel, a tenant's quota, a silence and a token are
  507 (503 with ``Retry-After`` for another store error), and neither memory nor the store changed, before or
  after a restart; the scheduling loop keeps the events of the ticks it could not store and stores them later.
  On main before this change the cancel answered 500 and was applied in memory anyway.
* For real (integration; root only): the data directory on a 3 MiB tmpfs, filled up with a file: a cancel is 507
  and the job keeps running, also after a restart once there is room again, and ``gpucluster up`` on the full
  disk exits 2 with one line naming the data directory.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gpucluster.service.store import Store, StoreWriteError
from tests.service.inproc import InProc, in_process, write_small_cluster
from tests.service.server import ADMIN, free_port, start_server, wait_for

FULL = "database or disk is full"
GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


class FakeFullDiskStore(Store):
    """A fake for a fault not caused for real here: every write fails, while :attr:`error` is set, as SQLite fails
    it (the real store code handles the error: rollback, classification)."""

    error: sqlite3.Error | None = None

    def _writable(self) -> None:
        if self.error is not None:
            raise self.error


def _fake(ip: InProc) -> FakeFullDiskStore:
    old = ip.service.store
    old.close()
    fake = FakeFullDiskStore(old.path)
    ip.service.store = fake
    return fake


def _job(ip: InProc, jid: str) -> dict[str, Any]:
    r = ip.client.get(f"/api/v1/jobs/{jid}")
    assert r.status_code == 200, r.text
    out: dict[str, Any] = r.json()
    return out


def _tenants(ip: InProc) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in ip.client.get("/api/v1/tenants").json()["tenants"]}


def test_a_full_disk_is_507_and_changes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        token = ip.tenant("team", quota_gpus=4)
        jid = ip.client.post("/api/v1/jobs", json={"name": "keep", "tenant": "team", "resources": GPU}).json()["id"]
        ip.tick()
        assert _job(ip, jid)["status"] == "running"
        before = _tenants(ip)["team"]
        fake = _fake(ip)
        fake.error = sqlite3.OperationalError(FULL)

        r = ip.client.delete(f"/api/v1/jobs/{jid}")
        assert r.status_code == 507 and r.json()["where"] == "store" and "full" in r.json()["error"], r.text
        assert _job(ip, jid)["status"] == "running"
        r = ip.client.post("/api/v1/tenants", json={"name": "team", "quota_gpus": 0.5})
        assert r.status_code == 507, r.text
        assert _tenants(ip)["team"]["quota_gpus"] == 4 and ip.service.runtime.usage_by_tenant()["team"]["gpus"] == 1
        r = ip.client.post("/api/v1/silences", json={"alert": "GpuXidCritical", "duration_s": 60})
        assert r.status_code == 507, r.text
        assert ip.client.get("/api/v1/silences").json()["silences"] == []
        r = ip.client.post("/api/v1/tenants/team/tokens")
        assert r.status_code == 507, r.text
        assert ip.as_(token).get("/api/v1/jobs").status_code == 200  # the old token still works
        r = ip.client.post("/api/v1/jobs", json={"name": "new", "tenant": "team", "resources": GPU})
        assert r.status_code == 507, r.text
        assert ip.client.get("/api/v1/jobs").json()["total"] == 1
        assert _tenants(ip)["team"] == before

        fake.error = sqlite3.OperationalError("database is locked")  # another store error: 503, retry
        r = ip.client.delete(f"/api/v1/jobs/{jid}")
        assert r.status_code == 503 and r.headers["Retry-After"].isdigit(), r.text
        assert _job(ip, jid)["status"] == "running"
        fake.error = None
    with in_process(data) as ip:  # after a restart: still running, still quota 4, no silence
        ip.tick()
        assert _job(ip, jid)["status"] == "running"
        assert _tenants(ip)["team"]["quota_gpus"] == 4
        assert ip.client.get("/api/v1/silences").json()["silences"] == []
        assert ip.as_(token).get("/api/v1/jobs").status_code == 200
        assert ip.client.delete(f"/api/v1/jobs/{jid}").status_code == 200  # with room, it works
    with in_process(data) as ip:
        assert _job(ip, jid)["status"] == "cancelled"


def test_the_loop_keeps_the_events_it_could_not_store(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        jid = ip.client.post("/api/v1/jobs", json={"name": "short", "resources": GPU, "duration_s": 5}).json()["id"]
        ip.tick()
        assert _job(ip, jid)["status"] == "running"
        fake = _fake(ip)
        fake.error = sqlite3.OperationalError(FULL)
        for _ in range(3):  # the job ends while nothing can be stored
            with pytest.raises(StoreWriteError):
                ip.tick(5.0)
        assert ip.service.find_job(jid) is not None and ip.service.find_job(jid).status.value == "succeeded"
        assert any(e.job_id == jid for e in ip.service.unrecorded)
        fake.error = None
        ip.tick()
        assert ip.service.unrecorded == []
    with in_process(data) as ip:
        job = _job(ip, jid)
        assert job["status"] == "succeeded" and [e["kind"] for e in job["events"]][-1] == "succeeded"


def test_a_stop_stores_the_events_earlier_ticks_could_not(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The disk was full for a tick (its events kept), has room again, and ``up`` stops before the next tick:
    the stop stores them. On main before this test they were dropped without a word; when the store still
    cannot take them the stop says how many are lost."""
    data = tmp_path / "d"
    with in_process(data) as ip:
        jid = ip.client.post("/api/v1/jobs", json={"name": "short", "resources": GPU, "duration_s": 5}).json()["id"]
        ip.tick()
        fake = _fake(ip)
        fake.error = sqlite3.OperationalError(FULL)
        with pytest.raises(StoreWriteError):
            ip.tick(5.0)  # the job ends while nothing can be stored
        assert any(e.job_id == jid for e in ip.service.unrecorded)
        fake.error = None  # room again; the service stops before its next tick
    with in_process(data) as ip:
        job = _job(ip, jid)
        assert job["status"] == "succeeded" and [e["kind"] for e in job["events"]][-1] == "succeeded"
        jid2 = ip.client.post("/api/v1/jobs", json={"name": "lost", "resources": GPU, "duration_s": 5}).json()["id"]
        ip.tick()
        fake = _fake(ip)
        fake.error = sqlite3.OperationalError(FULL)
        with pytest.raises(StoreWriteError):
            ip.tick(5.0)
        caplog.set_level("ERROR")  # the disk is still full when the service stops
    assert any("could not take; they are lost" in r.getMessage() for r in caplog.records), jid2


def test_a_failed_write_reports_the_first_error_not_the_rollback(tmp_path: Path) -> None:
    store = FakeFullDiskStore(tmp_path / "s.db")
    store.error = sqlite3.OperationalError(FULL)
    with pytest.raises(StoreWriteError) as caught:
        store.audit_many([("a", "b", "c", "d")])
    assert caught.value.full and FULL in str(caught.value) and "no transaction" not in str(caught.value)
    store.error = None
    store.audit("a", "b")
    store.close()


# ------------------------------------------------------------------------------------------------ a real full disk
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 3 MiB tmpfs mounted for the test (root only), unmounted after it."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root; FakeFullDiskStore covers the logic")
    mnt = tmp_path / "small"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(mnt)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _fill(mnt: Path, name: str) -> None:
    """Write a file until the file system is full (one already full refuses even the file: that is full too)."""
    with contextlib.suppress(OSError), (mnt / name).open("wb") as fh:
        while True:
            fh.write(b"\0" * 65536)
            fh.flush()
            os.fsync(fh.fileno())


ARGS = ("--speed", "20", "--background", "0", "--faults-per-hour", "0")


@pytest.mark.integration
def test_a_real_full_disk_cancel_is_507_and_up_exits_2(tmp_path: Path, small_disk: Path) -> None:
    data = small_disk / "data"
    spec = write_small_cluster(tmp_path / "cluster.yaml")
    server = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        with server.client() as c:
            jid = c.post("/api/v1/jobs", json={"name": "keep", "resources": GPU}).json()["id"]
            wait_for(lambda: c.get(f"/api/v1/jobs/{jid}").json()["status"] == "running", "the job to run")
            # jobs whose cancels use up what room the WAL has left once a submission (a larger write: the job's
            # row, its indexes, its text and its count) is refused
            spare = [c.post("/api/v1/jobs", json={"name": f"spare-{i}", "resources": GPU}).json()["id"]
                     for i in range(10)]
            _fill(small_disk, "filler")
            # the WAL may still have room for a few writes: submit until the store refuses one (each job its own
            # name: a second live job of one name is refused 409 before anything is written)
            codes: list[int] = []

            def refused() -> bool:
                name = f"more-{len(codes)}"
                codes.append(c.post("/api/v1/jobs", json={"name": name, "resources": GPU}).status_code)
                return codes[-1] == 507

            wait_for(refused, "a write the full disk refuses", timeout=120, interval=0)
            assert set(codes) <= {201, 507}, codes
            cancels = [c.delete(f"/api/v1/jobs/{s}").status_code for s in spare]
            assert 507 in cancels and set(cancels) <= {200, 507}, cancels
            r = c.delete(f"/api/v1/jobs/{jid}")
            assert r.status_code == 507 and r.json()["where"] == "store", r.text
            assert c.get(f"/api/v1/jobs/{jid}").json()["status"] == "running"
            with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN}"}) as keep_alive:
                for _ in range(10):  # the same connection answers every refusal: no reset
                    assert keep_alive.delete(f"/api/v1/jobs/{jid}").status_code == 507
    finally:
        server.stop()
    assert server.proc.returncode in (0, -2, 130), server.output()
    _fill(small_disk, "filler-2")  # what the stop gave back (its checkpoint) is taken again
    env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": ADMIN}
    done = subprocess.run([sys.executable, "-m", "gpucluster.cli.main", "up", "--port", str(free_port()),
                           "--data-dir", str(data), "--cluster", str(spec), *ARGS], capture_output=True, text=True,
                          env=env, timeout=180, check=False)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert str(data) in done.stderr and "Traceback" not in done.stderr, done.stderr
    for name in ("filler", "filler-2"):
        (small_disk / name).unlink(missing_ok=True)
    again = start_server(data, "--cluster", str(spec), *ARGS)
    try:
        with again.client() as c:
            assert c.get(f"/api/v1/jobs/{jid}").json()["status"] in ("running", "pending")
            wait_for(lambda: c.get(f"/api/v1/jobs/{jid}").json()["status"] == "running", "the job after a restart")
    finally:
        again.stop()
