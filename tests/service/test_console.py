"""Issue 32 (an operator's console) in-process: the real app, EmbeddedRuntime and SQLite store with the clock
driven by hand. Event folding, typo refusal, the queue estimate, node actions, approving a planned remediation,
tenants made explicitly, duplicate names and utilisation beside allocation."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpucluster.jobs import job_spec
from gpucluster.jobs.engine import NOTE_REPEAT_S
from gpucluster.service import EmbeddedRuntime, Job
from gpucluster.service.store import Store
from tests.service.inproc import in_process, small_cluster


def _job(name: str, gpus: int = 1, replicas: int = 1, duration: float | None = 10.0, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "replicas": replicas, "resources": {"nvidia.com/gpu": gpus}}
    if duration is not None:
        body["duration_s"] = duration
    return {**body, **extra}


# ---------------------------------------------------------------------------------------------- event folding
def test_a_waiting_gang_is_one_folded_event_with_a_count(tmp_path: Path) -> None:
    """A gang that waits while the cluster churns (small jobs come and go, so the free count moves every few
    seconds) has one ``unschedulable`` event whose count grows, with its first and last time; the store holds
    one row for it, not one per pass."""
    with in_process(tmp_path / "data") as p:
        c = p.client
        hog = c.post("/api/v1/jobs", json=_job("hog", gpus=8, replicas=4, duration=None)).json()  # every H100
        p.tick()
        gang = c.post("/api/v1/jobs", json=_job("gang", gpus=8, replicas=2, duration=60,
                                                gpu_type="H100")).json()
        for k in range(60):  # 300 clock-s of churn on the L40S nodes
            c.post("/api/v1/jobs", json=_job(f"churn-{k}", duration=3, gpu_type="L40S"))
            p.tick(5.0)
        detail = c.get(f"/api/v1/jobs/{gang['id']}").json()
        assert detail["status"] == "pending"
        waits = [e for e in detail["events"] if e["kind"] == "unschedulable"]
        assert len(waits) == 1, detail["events"]
        ev = waits[0]
        assert ev["count"] >= 300 // NOTE_REPEAT_S  # reported again at least once a minute while it waits
        assert ev["first_t"] < ev["t"] and ev["first_at"] <= ev["at"]
        assert [e["kind"] for e in detail["events"]] == ["submitted", "unschedulable"]
        # the feed shows it once too, and a follower sees it again (a new id, a higher count) when it repeats
        feed = c.get("/api/v1/events", params={"job": gang["id"]}).json()
        assert [e["kind"] for e in feed["events"]] == ["submitted", "unschedulable"]
        cursor, first = feed["cursor"], feed["events"][-1]
        for k in range(15):
            c.post("/api/v1/jobs", json=_job(f"churn-late-{k}", duration=3, gpu_type="L40S"))
            p.tick(5.0)
        newer = c.get("/api/v1/events", params={"job": gang["id"], "cursor": cursor}).json()["events"]
        assert [e["kind"] for e in newer] == ["unschedulable"]
        assert newer[0]["count"] > first["count"] and newer[0]["id"] != first["id"]
        assert newer[0]["first_t"] == first["first_t"]
        c.delete(f"/api/v1/jobs/{hog['id']}")
        p.tick()
        p.tick()
        done = c.get(f"/api/v1/jobs/{gang['id']}").json()
        assert [e["kind"] for e in done["events"]][-1] == "running"  # a new kind starts a new event


def test_the_store_folds_repeats_only_of_the_same_kind_in_a_row(tmp_path: Path) -> None:
    from gpucluster.service.runtime import JobEvent, JobState

    store = Store(tmp_path / "gpucluster.db")
    job = Job(job_spec("j-1", name="one", tenant="t", replicas=1, resources={"nvidia.com/gpu": 1},
                       duration_s=None, submit_s=0.0, submitted_at=time.time()))
    store.insert_job(job, "admin")
    q, r = JobState.QUEUED, JobState.RUNNING
    store.record_events([JobEvent("j-1", 1.0, "unschedulable", q, "a"), JobEvent("j-1", 2.0, "unschedulable", q, "b"),
                         JobEvent("j-1", 3.0, "unschedulable", q, "b")])
    store.record_events([JobEvent("j-1", 4.0, "running", r, "on n0"), JobEvent("j-1", 5.0, "evicted", q, "x"),
                         JobEvent("j-1", 6.0, "unschedulable", q, "c")])
    rows = store.job_events("j-1")
    assert [(e["kind"], e["count"], e["first_t"], e["t"], e["message"]) for e in rows] == [
        ("submitted", 1, 0.0, 0.0, "accepted"), ("unschedulable", 3, 1.0, 3.0, "b"), ("running", 1, 4.0, 4.0, "on n0"),
        ("evicted", 1, 5.0, 5.0, "x"), ("unschedulable", 1, 6.0, 6.0, "c")]
    store.close()


def test_the_waiting_reason_does_not_carry_the_free_count() -> None:
    """One reason per wait: the message of a job that waits for GPUs stays the same as other jobs come and go."""
    rt = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0)

    def job(name: str, gpus: int, replicas: int = 1, duration: float | None = None, gpu_type: str = "") -> Job:
        return rt.submit(Job(job_spec(name, name=name, tenant="t", replicas=replicas, duration_s=duration,
                                      resources={"nvidia.com/gpu": gpus}, gpu_type=gpu_type, submit_s=rt.now,
                                      submitted_at=time.time())))

    job("hog", 8, replicas=4)  # every H100
    rt.advance(rt.now + 1.0)
    big = job("big", 8, replicas=2, gpu_type="H100")
    seen = set()
    for k in range(10):
        job(f"s{k}", 1 + k % 3, duration=2.0, gpu_type="L40S")
        rt.advance(rt.now + 1.0)
        seen.add(big.message)
    assert big.status == "pending" and len(seen) == 1, seen
