"""``kill -9`` soak: a real ``gpucluster up`` killed at random points while tenants submit concurrently, then
restarted on the same data directory, several times over. Afterwards: no accepted job (answered 201) is lost,
no job ran twice at once (a second ``up`` on the directory is refused while one runs, and no job has two
``running`` events without an eviction or a re-queue between them), an ``Idempotency-Key`` retried across the
crash never makes a duplicate, and the clock never goes backwards."""

from __future__ import annotations

import random
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.service.inproc import write_small_cluster
from tests.service.server import ADMIN, Server, start_server, wait_for
from tests.service.test_hardening_up import _up

pytestmark = pytest.mark.integration

ROUNDS = 6
SUBMITTERS = 4
ARGS = ("--speed", "20", "--background", "0.3", "--faults-per-hour", "0", "--submit-rate", "1000",
        "--submit-burst", "10000")


@dataclass
class Ledger:
    """What the clients know: jobs answered 201 (by idempotency key), keys sent without an answer, clock."""

    accepted: dict[str, str] = field(default_factory=dict)
    unanswered: set[str] = field(default_factory=set)
    max_t: float = 0.0
    lock: threading.Lock = field(default_factory=threading.Lock)
    enough: threading.Event = field(default_factory=threading.Event)
    target: int = 0

    def body(self, key: str) -> dict[str, Any]:
        tenant = f"soak-{int(key.split('-')[1]) % 3}"
        return {"name": key, "tenant": tenant, "replicas": 1 + int(key.split("-")[1]) % 2,
                "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 20000},
                "duration_s": 30}


def _submitter(url: str, ledger: Ledger, worker: int, stop: threading.Event) -> None:
    n = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=10.0) as client:
        while not stop.is_set():
            n += 1
            key = f"k-{worker * 100000 + n}-{uuid.uuid4().hex[:6]}"
            try:
                r = client.post("/api/v1/jobs", json=ledger.body(key), headers={"Idempotency-Key": key})
            except httpx.HTTPError:  # killed mid-request: we do not know whether it was committed
                with ledger.lock:
                    ledger.unanswered.add(key)
                return
            assert r.status_code == 201, r.text
            with ledger.lock:
                ledger.accepted[key] = r.json()["id"]
                ledger.max_t = max(ledger.max_t, float(r.json()["submitted_t"]))
                if len(ledger.accepted) >= ledger.target:
                    ledger.enough.set()


def _round(srv: Server, ledger: Ledger, rng: random.Random) -> None:
    """Submit from SUBMITTERS threads; kill -9 once a random number more have been accepted."""
    ledger.target = len(ledger.accepted) + rng.randint(5, 40)
    ledger.enough.clear()
    stop = threading.Event()
    threads = [threading.Thread(target=_submitter, args=(srv.url, ledger, w, stop)) for w in range(SUBMITTERS)]
    for t in threads:
        t.start()
    assert ledger.enough.wait(timeout=60), "submissions stalled"
    with srv.client() as admin:
        ledger.max_t = max(ledger.max_t, float(admin.get("/api/v1/jobs", params={"limit": 1}).json()["t"]))
    srv.kill9()
    stop.set()
    for t in threads:
        t.join(timeout=30)


def _check(srv: Server, ledger: Ledger) -> None:
    with srv.client() as admin:
        t = float(admin.get("/api/v1/jobs", params={"limit": 1}).json()["t"])
        assert t >= ledger.max_t, f"the clock went back from {ledger.max_t} to {t}"
        jobs = {j["id"]: j for j in admin.get("/api/v1/jobs", params={"limit": 5000}).json()["jobs"]}
        lost = [k for k, jid in ledger.accepted.items() if jid not in jobs]
        assert not lost, f"{len(lost)} accepted job(s) lost: {lost[:5]}"
        names = [j["name"] for j in jobs.values()]
        dupes = {n for n in names if names.count(n) > 1}
        assert not dupes, f"submitted twice: {sorted(dupes)[:5]}"
        for key in sorted(ledger.unanswered):  # a client retrying after the crash gets the same job or a new one
            r = admin.post("/api/v1/jobs", json=ledger.body(key), headers={"Idempotency-Key": key})
            assert r.status_code in (200, 201), r.text
            if r.status_code == 200:
                assert r.json()["name"] == key
            ledger.accepted[key] = r.json()["id"]
        ledger.unanswered.clear()
        for jid in list(ledger.accepted.values())[-25:]:
            kinds = [e["kind"] for e in admin.get(f"/api/v1/jobs/{jid}").json()["events"]]
            starts = kinds.count("running")
            restarts = sum(kinds.count(k) for k in ("evicted", "requeued"))
            assert starts <= 1 + restarts, (jid, kinds)


def test_kill_9_during_concurrent_submissions_loses_nothing(tmp_path: Path) -> None:
    spec = write_small_cluster(tmp_path / "soak.yaml")
    data = tmp_path / "data"
    args = ("--cluster", str(spec), *ARGS)
    rng = random.Random(14)
    ledger = Ledger()
    srv = start_server(data, *args)
    try:
        second = _up(data, "--cluster", str(spec))  # only one server per data dir, ever
        try:
            _, err = second.communicate(timeout=120)
        finally:
            if second.poll() is None:
                second.kill()
                second.communicate(timeout=30)
        assert second.returncode == 2 and f"pid {srv.proc.pid}" in err
        for _ in range(ROUNDS):
            _round(srv, ledger, rng)
            assert srv.proc.returncode == -9
            srv = start_server(data, *args)
            _check(srv, ledger)
        assert len(ledger.accepted) >= ROUNDS * 5
        with srv.client() as admin:  # the recovered jobs run and finish on the clock
            wait_for(lambda: admin.get("/api/v1/jobs", params={"status": "pending", "limit": 1}).json()["total"]
                     == 0, "every recovered job to be placed", timeout=60, interval=0.5)
    finally:
        srv.stop()
