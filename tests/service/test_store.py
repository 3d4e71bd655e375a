"""``Store`` on its own (real SQLite in a temporary directory): what goes in comes back out, field by field,
across a close and reopen; transactions are all or nothing; tokens are hashed and revoked at once."""

from __future__ import annotations

import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest

from gpucluster.jobs import job_spec
from gpucluster.jobs.transitions import Arrive, Finish, Preempt, Preempted, Start, transition
from gpucluster.service.runtime import Job, JobEvent, JobState, JobStatus
from gpucluster.service.store import BadRow, Store, token_hash

PERSISTED = ("id", "name", "tenant", "replicas", "resources", "duration_s", "priority", "status", "message",
             "submitted_at")
"""The job fields the store keeps (the rest describe a run and are rebuilt by the runtime)."""


def _mk(*, id: str, name: str, tenant: str, replicas: int, resources: dict[str, Any], duration_s: float | None,
        submitted_at: float, priority: int = 0, message: str = "", status: JobStatus | None = None,
        submit_s: float = 0.0) -> Job:
    """A control-plane job (the engine's record) as the API builds it."""
    job = Job(job_spec(id, name=name, tenant=tenant, replicas=replicas, resources=resources, duration_s=duration_s,
                       submit_s=submit_s, priority=priority, submitted_at=submitted_at))
    job.message = message
    return job


def _jobs() -> list[Job]:
    """Jobs whose persisted fields all differ from each other and from the defaults."""
    return [
        _mk(id="j-a", name="train-a", tenant="team-a", replicas=3,
            resources={"nvidia.com/gpu": 2, "nvidia.com/gpumem": 30000, "cpu": "4"}, duration_s=12.5,
            submitted_at=1000.25, priority=42, message="first"),
        _mk(id="j-b", name="serve-b", tenant="team-b", replicas=1, resources={"nvidia.com/gpucores": 30},
            duration_s=None, submitted_at=1001.5, priority=0, status=JobStatus.PENDING),
        _mk(id="j-c", name="eval-c", tenant="team-a", replicas=7, resources={"memory": "2Gi"}, duration_s=0.5,
            submitted_at=999.0, priority=17),
    ]


def _fields(job: Job) -> dict[str, Any]:
    return {k: (dict(v) if k == "resources" else v) for k in PERSISTED for v in [getattr(job, k)]}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "gpucluster.db"


def test_jobs_come_back_field_by_field_after_a_reopen(path: Path) -> None:
    store = Store(path)
    jobs = _jobs()
    for job in jobs:
        store.insert_job(job, actor="tester")
    store.close()
    again = Store(path)
    loaded = again.load_jobs()
    # submission order (submitted_at, then id), every persisted field equal
    assert [j.id for j in loaded] == ["j-c", "j-a", "j-b"]
    assert [_fields(j) for j in loaded] == [_fields(j) for j in sorted(jobs, key=lambda j: j.submitted_at)]
    assert all(isinstance(j.status, JobStatus) for j in loaded)


def test_events_update_status_and_message_and_are_kept_in_order(path: Path) -> None:
    store = Store(path)
    for job in _jobs():
        store.insert_job(job, actor="tester")
    n = store.record_events([
        JobEvent("j-a", 5.0, "running", JobState.RUNNING, "running on n0"),
        JobEvent("s-000001", 5.0, "running", JobState.RUNNING, "synthetic: not stored"),
        JobEvent("j-a", 9.5, "succeeded", JobState.SUCCEEDED, "completed after 4.5 s"),
        JobEvent("j-b", 7.0, "cancelled", JobState.CANCELLED, "cancelled by request"),
    ])
    assert n == 3  # the unknown (synthetic) id is skipped
    store.close()
    again = Store(path)
    by_id = {j.id: j for j in again.load_jobs()}
    assert (by_id["j-a"].status, by_id["j-a"].message) == (JobStatus.SUCCEEDED, "completed after 4.5 s")
    assert (by_id["j-b"].status, by_id["j-b"].message) == (JobStatus.CANCELLED, "cancelled by request")
    assert (by_id["j-c"].status, by_id["j-c"].message) == (JobStatus.PENDING, "")
    assert [(e["kind"], e["t"], e["status"]) for e in again.job_events("j-a")] == [
        ("submitted", 0.0, "pending"), ("running", 5.0, "running"), ("succeeded", 9.5, "succeeded")]
    assert again.job_events("s-000001") == []
    assert again.max_event_t() == 9.5


def test_a_job_saved_with_its_events_comes_back_with_its_run(path: Path) -> None:
    """Events recorded with the job they are about save the job whole: how its run went reads back after a
    reopen (a job that ended before a restart is shown as it was)."""
    store = Store(path)
    job = _mk(id="j-a", name="train-a", tenant="team-a", replicas=2, resources={"nvidia.com/gpu": 3},
              duration_s=12.5, submitted_at=1000.25, submit_s=3.25, priority=42)
    store.insert_job(job, actor="tester")
    events = transition(job, Arrive(), 3.25)
    events += transition(job, Start(attempt=1, nodes=("n2",), pod_keys=("team-a/j-a-0",), run_start_s=3.5), 3.5)
    events += transition(job, Preempt("for j-z"), 4.0)
    events += transition(job, Preempted("for j-z"), 4.0)
    events += transition(job, Start(attempt=2, nodes=("n0", "n1"), pod_keys=("team-a/j-a-0", "team-a/j-a-1"),
                                    run_start_s=4.5, held_gpus=6.0,
                                    placements=[{"pod": "team-a/j-a-0", "node": "n0",
                                                 "devices": [{"uuid": "G0", "cores": 100}]},
                                                {"pod": "team-a/j-a-1", "node": "n1", "devices": []}]), 4.5)
    store.record_events(events, {"j-a": job})
    live = Store(path).load_jobs()[0].to_dict()  # a live job is queued again, keeping its submission
    assert (live["status"], live["submitted_t"], live["started_t"], live["placements"]) == (
        "pending", 3.25, None, [])
    store.record_events(transition(job, Finish(), 17.0), {"j-a": job})
    store.close()
    (loaded,) = Store(path).load_jobs()
    view = job.to_dict()
    assert (view["status"], view["started_t"], view["finished_t"], view["gpus"], view["attempts"],
            view["preemptions"]) == ("succeeded", 4.5, 17.0, 6.0, 2, 1)  # the run the test made
    assert loaded.to_dict() == view  # and every field the API shows comes back


def test_a_job_refiled_under_another_tenant_comes_back_under_it_with_its_tenant_row(path: Path) -> None:
    """A Kubernetes workload refused for its namespace is stored under the namespace's tenant; a binding change
    that lets it in files it under the tenant it named (and back)."""
    store = Store(path)
    job = _jobs()[0]
    store.insert_job(job, actor="tester")
    assert not store.refile_job("j-a", "team-a") and not store.refile_job("no-such-job", "team-x")
    assert store.tenant("team-x") is None
    assert store.refile_job("j-a", "team-x")
    assert store.tenant("team-x") is not None  # made with the defaults, as a job's first insert makes it
    store.close()
    [again] = Store(path).load_jobs()
    assert again.id == "j-a" and again.tenant == "team-x"


def test_max_event_t_of_an_empty_store_is_none(path: Path) -> None:
    assert Store(path).max_event_t() is None


def test_insert_with_a_used_idempotency_key_commits_nothing(path: Path) -> None:
    store = Store(path)
    first, second = _jobs()[:2]
    store.insert_job(first, actor="tester", idempotency=("team-a", "key-1", "hash-1"))
    assert store.idempotent_job("team-a", "key-1") == ("j-a", "hash-1")
    assert store.idempotent_job("team-b", "key-1") is None
    with pytest.raises(sqlite3.IntegrityError):
        store.insert_job(second, actor="tester", idempotency=("team-a", "key-1", "hash-2"))
    # neither the job, nor its first event, nor its audit line is left behind
    assert [j.id for j in store.load_jobs()] == ["j-a"]
    assert store.job_events("j-b") == []
    assert [e["target"] for e in store.audit_log() if e["action"] == "job.submit"] == ["j-a"]
    store.insert_job(second, actor="tester", idempotency=("team-b", "key-1", "hash-2"))  # another owner
    assert {j.id for j in store.load_jobs()} == {"j-a", "j-b"}


def test_a_row_that_cannot_be_read_is_reported_and_skipped(path: Path) -> None:
    store = Store(path)
    store.insert_job(_jobs()[0], actor="tester")
    store.close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO jobs(id, name, tenant, replicas, resources, status, submitted_at, updated_at) "
                   "VALUES('j-junk', 'x', 't', 1, 'not json', 'pending', 1, 1)")
        db.execute("INSERT INTO jobs(id, name, tenant, replicas, resources, status, submitted_at, updated_at) "
                   "VALUES('j-list', 'x', 't', 1, '[1, 2]', 'pending', 2, 2)")
        db.execute("INSERT INTO jobs(id, name, tenant, replicas, resources, status, submitted_at, updated_at) "
                   "VALUES('j-state', 'x', 't', 1, '{}', 'exploded', 3, 3)")
    bad: list[BadRow] = []
    loaded = Store(path).load_jobs(bad)
    assert [j.id for j in loaded] == ["j-a"]
    assert [b.job_id for b in bad] == ["j-junk", "j-list", "j-state"]
    assert "JSONDecodeError" in bad[0].why and "not a mapping" in bad[1].why and "exploded" in bad[2].why


def test_tenants_upsert_update_and_ensure(path: Path) -> None:
    store = Store(path)
    store.upsert_tenant("team-b", quota_gpus=4.5, weight=2.0, max_priority=50)
    store.upsert_tenant("team-a", quota_gpus=None, weight=1.0)
    store.ensure_tenant("team-b")  # exists: left alone
    store.ensure_tenant("team-c")
    assert [(t["name"], t["quota_gpus"], t["weight"], t["max_priority"]) for t in store.tenants()] == [
        ("team-a", None, 1.0, None), ("team-b", 4.5, 2.0, 50), ("team-c", None, 1.0, None)]
    created = store.tenant("team-b")
    assert created is not None
    store.upsert_tenant("team-b", quota_gpus=1.0, weight=3.0, max_priority=None)
    store.close()
    again = Store(path)
    row = again.tenant("team-b")
    assert row is not None
    assert (row["quota_gpus"], row["weight"], row["max_priority"]) == (1.0, 3.0, None)
    assert row["created"] == created["created"]  # an update keeps the creation time
    assert again.tenant("nobody") is None


def test_tokens_are_stored_hashed_and_revoked_at_once(path: Path) -> None:
    store = Store(path)
    store.add_token("tok-admin-0123456789", "admin", None, "admin")
    store.add_token("tok-a-1", "tenant", "team-a")
    store.add_token("tok-a-2", "tenant", "team-a")
    store.add_token("tok-b-1", "tenant", "team-b")
    assert store.lookup_token("tok-a-1") == ("tenant", "team-a")  # cached from here on
    assert store.lookup_token("tok-admin-0123456789") == ("admin", None)
    assert store.lookup_token("nope") is None
    # one new token for team-a revokes its others, not team-b's or the admin's
    assert store.replace_tokens("tok-a-3", "tenant", "team-a") == 2
    assert store.lookup_token("tok-a-1") is None and store.lookup_token("tok-a-2") is None
    assert store.lookup_token("tok-a-3") == ("tenant", "team-a")
    assert store.lookup_token("tok-b-1") == ("tenant", "team-b")
    assert store.revoke_tokens("tenant", "team-b") == 1
    assert store.lookup_token("tok-b-1") is None
    assert store.lookup_token("tok-admin-0123456789") == ("admin", None)
    store.close()
    raw = b"".join(p.read_bytes() for p in path.parent.iterdir() if p.name.startswith(path.name))
    assert b"tok-a-3" not in raw and token_hash("tok-a-3").encode() in raw
    assert Store(path).lookup_token("tok-a-3") == ("tenant", "team-a")  # and they survive a reopen


def test_meta_and_audit_log(path: Path) -> None:
    store = Store(path)
    assert store.get_meta("clock") is None
    store.set_meta("clock", "1.5")
    store.set_meta("clock", "2.5")
    store.audit("alice", "tenant.create", "team-a", "quota 4")
    store.audit_many([("remediation", "remediation.drain", "n1", "xid 79"),
                      ("remediation", "remediation.cordon", "n2", "")])
    store.close()
    again = Store(path)
    assert again.get_meta("clock") == "2.5"
    log = again.audit_log()
    assert [(e["actor"], e["action"], e["target"], e["detail"]) for e in log] == [
        ("remediation", "remediation.cordon", "n2", ""), ("remediation", "remediation.drain", "n1", "xid 79"),
        ("alice", "tenant.create", "team-a", "quota 4")]
    assert [e["action"] for e in again.audit_log(limit=1)] == ["remediation.cordon"]


def test_files_are_private_and_an_older_database_is_migrated(path: Path) -> None:
    path.parent.mkdir(mode=0o755)
    with sqlite3.connect(path) as db:  # a database written before tenants had max_priority
        db.execute("CREATE TABLE tenants (name TEXT PRIMARY KEY, quota_gpus REAL, weight REAL NOT NULL DEFAULT 1, "
                   "created REAL NOT NULL)")
        db.execute("INSERT INTO tenants VALUES('old', 2.0, 1.0, 5.0)")
    path.chmod(0o644)
    store = Store(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert store.tenant("old") == {"name": "old", "quota_gpus": 2.0, "weight": 1.0, "max_priority": None,
                                   "max_queued_jobs": None, "created": 5.0}
    store.upsert_tenant("old", 2.0, 1.0, max_priority=7)
    assert store.tenant("old")["max_priority"] == 7  # type: ignore[index]
    with sqlite3.connect(path) as db:  # and a job row written before the run fields were stored
        db.execute("INSERT INTO jobs(id, name, tenant, replicas, resources, status, submitted_at, updated_at) "
                   "VALUES('j-old', 'old', 'old', 2, '{}', 'succeeded', 1, 1)")
    (old,) = store.load_jobs()
    assert (old.id, old.replicas, old.status, old.started_t, old.finished_t, old.gpus, old.placements) == (
        "j-old", 2, JobStatus.SUCCEEDED, None, None, 0.0, [])
    fresh = path.parent.parent / "fresh" / "gpucluster.db"
    Store(fresh)
    assert stat.S_IMODE(fresh.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o600
