"""SQLite store under ``--data-dir``: jobs, job events, tenants, tokens and the audit log.

Durability: every accepted job is committed before the API answers 201, so a restart, even after ``kill -9``,
finds it. The journal is WAL with ``synchronous=NORMAL``: a commit is in the WAL file before it returns, which
survives the process dying at any point; only a crash of the whole machine (power loss) could lose the last
commits. Pass ``durable=True`` for ``synchronous=FULL`` (an fsync per commit) when that matters more than
latency. Tokens are stored as SHA-256 hashes, never in clear.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gpucluster.jobs import JobSpec, JobState, job_spec
from gpucluster.service.runtime import Job, JobEvent

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS tenants (
    name TEXT PRIMARY KEY, quota_gpus REAL, weight REAL NOT NULL DEFAULT 1, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tokens (
    hash TEXT PRIMARY KEY, tenant TEXT, role TEXT NOT NULL, label TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, name TEXT NOT NULL, tenant TEXT NOT NULL, replicas INTEGER NOT NULL,
    resources TEXT NOT NULL, duration_s REAL, priority INTEGER NOT NULL DEFAULT 0,
    status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '', submitted_at REAL NOT NULL,
    updated_at REAL NOT NULL, options TEXT NOT NULL DEFAULT '{}');
CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs (tenant);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, at REAL NOT NULL, t REAL NOT NULL,
    kind TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
    target TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '');
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Store:
    """A small synchronous wrapper over one SQLite connection (callers serialise; a lock guards anyway)."""

    def __init__(self, path: Path, durable: bool = False) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._token_cache: dict[str, tuple[str, str | None]] = {}
        """Token hash -> (role, tenant); tokens are only ever added, so positive answers can be kept."""
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        self._db.executescript(SCHEMA)
        columns = {r["name"] for r in self._db.execute("PRAGMA table_info(jobs)").fetchall()}
        if "options" not in columns:  # a store written before jobs had gpu_type, node_selector, kind, preemptible
            self._db.execute("ALTER TABLE jobs ADD COLUMN options TEXT NOT NULL DEFAULT '{}'")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
                             "value=excluded.value", (key, value))

    # ------------------------------------------------------------------ tokens and tenants
    def add_token(self, token: str, role: str, tenant: str | None, label: str = "") -> None:
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO tokens(hash, tenant, role, label, created) VALUES(?,?,?,?,?)",
                             (token_hash(token), tenant, role, label, time.time()))

    def lookup_token(self, token: str) -> tuple[str, str | None] | None:
        """``(role, tenant)`` for a token, or None."""
        digest = token_hash(token)
        found = self._token_cache.get(digest)
        if found is not None:
            return found
        with self._lock:
            row = self._db.execute("SELECT role, tenant FROM tokens WHERE hash=?", (digest,)).fetchone()
        if row is None:
            return None
        found = (str(row["role"]), row["tenant"])
        self._token_cache[digest] = found
        return found

    def upsert_tenant(self, name: str, quota_gpus: float | None, weight: float) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO tenants(name, quota_gpus, weight, created) VALUES(?,?,?,?) ON CONFLICT(name) DO "
                "UPDATE SET quota_gpus=excluded.quota_gpus, weight=excluded.weight",
                (name, quota_gpus, weight, time.time()))

    def tenants(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT name, quota_gpus, weight, created FROM tenants ORDER BY name").fetchall()
        return [dict(r) for r in rows]

    def tenant(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT name, quota_gpus, weight, created FROM tenants WHERE name=?",
                                   (name,)).fetchone()
        return None if row is None else dict(row)

    # ------------------------------------------------------------------ jobs
    def insert_job(self, job: Job, actor: str) -> None:
        """Persist a newly accepted job with its first event and an audit line, in one transaction."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(
                    "INSERT INTO jobs(id, name, tenant, replicas, resources, duration_s, priority, status, "
                    "message, submitted_at, updated_at, options) VALUES(?,?,?,?,?,?,?,?,?,?,?,?)",
                    (job.id, job.name, job.tenant, job.replicas, json.dumps(dict(job.spec.resources)),
                     _duration(job.spec), job.priority, job.status, job.message, job.spec.submitted_at, now,
                     json.dumps(_options(job.spec))))
                self._db.execute("INSERT INTO events(job_id, at, t, kind, status, message) VALUES(?,?,?,?,?,?)",
                                 (job.id, now, job.submitted_t, "submitted", job.status, "accepted"))
                self._db.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES(?,?,?,?,?)",
                                 (now, actor, "job.submit", job.id, job.name))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def record_events(self, events: Iterable[JobEvent]) -> int:
        """Apply runtime events to persisted jobs (unknown ids, e.g. synthetic jobs, are skipped)."""
        now = time.time()
        n = 0
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for ev in events:
                    cur = self._db.execute("UPDATE jobs SET status=?, message=?, updated_at=? WHERE id=?",
                                           (ev.status, ev.message, now, ev.job_id))
                    if cur.rowcount:
                        self._db.execute(
                            "INSERT INTO events(job_id, at, t, kind, status, message) VALUES(?,?,?,?,?,?)",
                            (ev.job_id, now, ev.t, ev.kind, ev.status, ev.message))
                        n += 1
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
        return n

    def load_jobs(self) -> list[Job]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs ORDER BY submitted_at, id").fetchall()
        return [_job(r) for r in rows]

    def job_events(self, job_id: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT at, t, kind, status, message FROM events WHERE job_id=? ORDER BY id",
                                    (job_id,)).fetchall()
        return [dict(r) for r in rows]

    # ------------------------------------------------------------------ audit
    def audit(self, actor: str, action: str, target: str = "", detail: str = "") -> None:
        with self._lock:
            self._db.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES(?,?,?,?,?)",
                             (time.time(), actor, action, target, detail))

    def audit_many(self, rows: Iterable[tuple[str, str, str, str]]) -> None:
        """``(actor, action, target, detail)`` rows in one transaction."""
        now = time.time()
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany("INSERT INTO audit(at, actor, action, target, detail) VALUES(?,?,?,?,?)",
                                     [(now, *row) for row in rows])
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def audit_log(self, limit: int = 200) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ?",
                                    (limit,)).fetchall()
        return [dict(r) for r in rows]


def _duration(spec: JobSpec) -> float | None:
    return spec.duration_s if math.isfinite(spec.duration_s) else None


def _options(spec: JobSpec) -> dict[str, Any]:
    return {"gpu_type": spec.gpu_type, "node_selector": dict(spec.node_selector), "kind": spec.kind.value,
            "preemptible": spec.preemptible}


def _job(r: sqlite3.Row) -> Job:
    """A stored job as a new record: live jobs start over (the runtime re-queues them), ended ones keep their
    status and message. A job whose request no longer parses is restored as failed, saying why."""
    opts = json.loads(r["options"] or "{}")
    resources = json.loads(r["resources"])
    status = str(r["status"])
    try:
        spec = job_spec(r["id"], name=r["name"], tenant=r["tenant"], replicas=int(r["replicas"]),
                        resources=resources, duration_s=r["duration_s"], submit_s=0.0,
                        priority=int(r["priority"]), gpu_type=str(opts.get("gpu_type", "")),
                        node_selector=opts.get("node_selector") or {}, kind=str(opts.get("kind", "train")),
                        preemptible=bool(opts.get("preemptible", True)), submitted_at=float(r["submitted_at"]))
    except ValueError as exc:
        spec = JobSpec(r["id"], 0.0, 1, math.inf, tenant=r["tenant"], name=r["name"], resources=resources,
                       submitted_at=float(r["submitted_at"]))
        return Job(spec, JobState.FAILED, message=f"cannot be restored: {exc}")
    if status in ("pending", "running"):
        return Job(spec)
    return Job(spec, JobState(status), message=r["message"])
