"""service.ops in-process (the real app, runtime and store, the clock ticked by hand): the queue's order and
start estimates, silences (kept across a restart), the event feed's cursor, the long history, per-GPU usage and
its ring of samples."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.embedded.monitor import USAGE_POINTS, RecordingSource
from gpucluster.monitoring import SimSource
from tests.service.inproc import in_process, small_cluster


def _job(name: str, replicas: int, gpus: int, duration: float | None = None, priority: int = 0) -> dict[str, object]:
    body: dict[str, object] = {"name": name, "replicas": replicas, "resources": {"nvidia.com/gpu": gpus}}
    if duration is not None:
        body["duration_s"] = duration
    if priority:
        body["priority"] = priority
    return body


def test_queue_order_reasons_and_start_estimates(tmp_path: Path) -> None:
    # fifo: priority, then arrival, no preemption (the default policy would preempt for "urgent")
    with in_process(tmp_path / "d", queue_policy="fifo") as p:
        c = p.client
        a = c.post("/api/v1/jobs", json=_job("a", 4, 8, duration=100.0)).json()  # every H100
        b = c.post("/api/v1/jobs", json=_job("b", 2, 8)).json()  # every L40S, until cancelled
        p.tick()
        assert c.get(f"/api/v1/jobs/{a['id']}").json()["status"] == "running"
        assert c.get(f"/api/v1/jobs/{b['id']}").json()["status"] == "running"
        late = c.post("/api/v1/jobs", json=_job("late", 4, 8)).json()
        urgent = c.post("/api/v1/jobs", json=_job("urgent", 1, 8, priority=50)).json()
        p.tick()
        q = c.get("/api/v1/queue").json()
        assert [r["id"] for r in q["jobs"]] == [urgent["id"], late["id"]]  # priority first
        assert [r["position"] for r in q["jobs"]] == [1, 2] and q["total"] == 2 and q["free_gpus"] == 0
        started = c.get(f"/api/v1/jobs/{a['id']}").json()["started_t"]
        first, second = q["jobs"]
        assert first["est_start_t"] == pytest.approx(started + 100.0)  # when a's 32 GPUs come back
        assert second["est_start_t"] is None  # 40 GPUs wanted, only a's 32 will ever free up
        assert "waiting for GPUs: needs 8 GPU(s)" in first["why"] and "more than are free now" in first["why"]
        tenant = p.tenant("other")
        mine = p.as_(tenant).get("/api/v1/queue").json()
        assert mine["jobs"] == [] and mine["total"] == 2  # a tenant sees its own rows only


def test_silences_mark_alerts_and_survive_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as p:
        c = p.client
        assert c.post("/api/v1/nodes/train-0001/devices/2/fault", params={"xid": 13}).status_code == 200
        p.tick()
        body = c.get("/api/v1/alerts").json()
        assert body["firing"] >= 1 and all(a["silenced"] is False for a in body["alerts"])
        r = c.post("/api/v1/silences", json={"target": "train-0001", "duration_s": 600})
        assert r.status_code == 201
        body = c.get("/api/v1/alerts").json()
        on_node = [a for a in body["alerts"] if a["target"].startswith("train-0001")]
        assert on_node and all(a["silenced"] for a in on_node)  # a node silence covers its GPUs
        assert body["firing"] == 0 and body["counts"]["silenced"] == len(on_node)
        assert c.post("/api/v1/silences", json={"duration_s": 0}).status_code == 422
        assert c.post("/api/v1/silences", json={"alert": "x", "extra": 1}).status_code == 422
    with in_process(data) as p:
        silences = p.client.get("/api/v1/silences").json()["silences"]
        assert [s["target"] for s in silences] == ["train-0001"]
        p.tick(700.0)  # past its end
        assert p.client.get("/api/v1/silences").json()["silences"] == []


def test_event_feed_cursor_and_scope(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as p:
        c = p.client
        first = c.get("/api/v1/events").json()
        job = c.post("/api/v1/jobs", json=_job("ev", 1, 1, duration=5.0)).json()
        p.tick()
        p.tick(10.0)
        page = c.get("/api/v1/events", params={"cursor": first["cursor"]}).json()
        kinds = [e["kind"] for e in page["events"] if e["object"] == f"job/{job['id']}"]
        assert kinds == ["submitted", "running", "succeeded"]
        again = c.get("/api/v1/events", params={"cursor": page["cursor"]}).json()
        assert again["events"] == [] and again["cursor"] == page["cursor"]
        for bad in ("nope", "1", "9" * 30 + ".1", "１.2"):  # not a cursor, too large for SQLite, not ASCII digits
            assert c.get("/api/v1/events", params={"cursor": bad}).status_code == 422, bad
        assert c.get("/api/v1/events", params={"job": job["id"]}).json()["events"][0]["kind"] == "submitted"
        tok = p.tenant("t1")
        p.as_(tok).post("/api/v1/jobs", json=_job("mine", 1, 1))
        seen = p.as_(tok).get("/api/v1/events").json()["events"]
        assert {e["tenant"] for e in seen if e["type"] == "job"} == {"t1"}


def test_long_history_and_its_range(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as p:
        for _ in range(10):
            p.tick(60.0)
        pts = p.client.get("/api/v1/history", params={"range_s": 86400}).json()["points"]
        ts = [x["t"] for x in pts]
        assert ts == sorted(ts) and len(ts) >= 10
        recent = p.client.get("/api/v1/history", params={"range_s": 120}).json()
        assert all(x["t"] >= recent["t"] - 120 for x in recent["points"])
        assert p.client.get("/api/v1/history", params={"range_s": 0}).status_code == 422


def test_node_usage_reports_the_collector(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as p:
        job = p.client.post("/api/v1/jobs", json=_job("u", 1, 1)).json()
        p.tick()
        place = p.client.get(f"/api/v1/jobs/{job['id']}").json()["placements"][0]
        for _ in range(3):
            p.tick(30.0)  # the monitor scrapes each shard every 30 clock-s
        u = p.client.get(f"/api/v1/nodes/{place['node']}/usage").json()
        dev = u["devices"][place["devices"][0]["index"]]
        assert u["available"] and dev["reporting"] and dev["util_pct"] > 50 and dev["xid"] == 0
        assert dev["history"]["fields"][0] == "util" and len(dev["history"]["points"]) >= 2
        assert p.client.get("/api/v1/nodes/nope/usage").status_code == 404


def test_recording_source_keeps_the_last_points_oldest_first() -> None:
    state = small_cluster().state()
    t = [0.0]
    src = SimSource(state, nodes=["train-0000"], clock=lambda: t[0])
    rec = RecordingSource(src, [("train-0000", g) for g in range(8)])
    for k in range(USAGE_POINTS + 5):
        t[0] = 10.0 * k
        rec.sample()
    times, points = rec.history("train-0000", 3)
    assert len(times) == USAGE_POINTS and times == sorted(times) and times[-1] == 10.0 * (USAGE_POINTS + 4)
    assert all(p[0] == 0.0 for p in points)  # idle
    src.detach("train-0000", 3)
    rec.sample()
    assert rec.history("train-0000", 3)[1][-1] == [None] * 5  # not reporting: no point
    assert rec.history("nope", 0) == ([], [])
