"""SQLite store under ``--data-dir``: jobs, job events, tenants, tokens and the audit log.

Durability: every accepted job is committed before the API answers 201, so a restart, even after ``kill -9``,
finds it. The journal is WAL with ``synchronous=NORMAL``: a commit is in the WAL file before it returns, which
survives the process dying at any point; only a crash of the whole machine (power loss) could lose the last
commits. Pass ``durable=True`` for ``synchronous=FULL`` (an fsync per commit) when that matters more than
latency. Tokens are stored as SHA-256 hashes, never in clear; revoking one takes effect on the next request
(the lookup cache is cleared with it). The database file is created mode 0600 (SQLite gives its ``-wal`` and
``-shm`` files the same mode) in a directory of mode 0700.

A job row keeps what the user asked for (name, tenant, replicas, resources, duration, priority, submission time)
and what its last run looked like (runtime clock times of submission, start and end, GPU-equivalents held,
placements, attempts, preemptions, GPU speed): a job that ended before a restart reads back exactly as it was; a
live one is queued again and its run fields are re-created when it is placed.

Writes are all or nothing: each is one transaction (or one statement) under the lock; any failure rolls it back
(only while SQLite still holds the transaction: it ends one itself on a full disk) and raises
:class:`StoreWriteError`, which says whether the disk is full and carries the first error, never a ROLLBACK's.
Callers store a change before they apply it in memory, so a write that fails changes nothing. The WAL is
checkpointed every :data:`WAL_AUTOCHECKPOINT_PAGES` pages and truncated back to :data:`WAL_SIZE_LIMIT` bytes,
so a small disk holds thousands of jobs.

Rows are read defensively: a job row that cannot be turned back into a job (hand-edited, written by a buggy
version) is reported by :meth:`Store.load_jobs` and skipped, never a reason not to start.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpucluster.devices import VendorRegistry
from gpucluster.jobs import FOLDED_EVENT_KINDS, SPEED_KEY, JobSpec, JobState, JobStatus, folds, job_spec
from gpucluster.model import Pod
from gpucluster.service.runtime import Job, JobEvent

log = logging.getLogger(__name__)

WAL_AUTOCHECKPOINT_PAGES = 64
"""Pages the WAL may hold before a commit checkpoints it into the database (SQLite's default is 1000: 4 MB)."""
WAL_SIZE_LIMIT = 256 * 1024
"""Bytes the WAL file is truncated back to after a checkpoint (SQLite keeps its largest size otherwise)."""
_SQLITE_FULL = int(getattr(sqlite3, "SQLITE_FULL", 13))


class StoreWriteError(Exception):
    """A write the store could not make; nothing of it was stored. ``full``: the disk (or the file system under
    the data directory) is full; otherwise the store cannot be written for another reason (locked, read-only,
    an I/O error). ``cause`` is the first error."""

    def __init__(self, path: Path, cause: BaseException) -> None:
        self.path = path
        self.cause = cause
        self.full = disk_full(cause)
        what = "the disk is full" if self.full else "it cannot be written"
        super().__init__(f"the store {path} was not changed: {what} ({type(cause).__name__}: {cause})")


def disk_full(exc: BaseException) -> bool:
    """True for SQLite's "database or disk is full" (SQLITE_FULL) and for ENOSPC/EDQUOT."""
    if isinstance(exc, StoreWriteError):
        return exc.full
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        return (code is not None and code & 0xFF == _SQLITE_FULL) or "disk is full" in str(exc)
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


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
CREATE INDEX IF NOT EXISTS jobs_history ON jobs (submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_tenant_history ON jobs (tenant, submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_status_history ON jobs (status, submitted_at, id);
CREATE INDEX IF NOT EXISTS jobs_tenant_status_history ON jobs (tenant, status, submitted_at, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT, job_id TEXT NOT NULL, at REAL NOT NULL, t REAL NOT NULL,
    kind TEXT NOT NULL, status TEXT NOT NULL, message TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS events_job ON events (job_id);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT, at REAL NOT NULL, actor TEXT NOT NULL, action TEXT NOT NULL,
    target TEXT NOT NULL DEFAULT '', detail TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS idempotency (
    owner TEXT NOT NULL, key TEXT NOT NULL, job_id TEXT NOT NULL, request_hash TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (owner, key));
"""
HISTORY_SCHEMA = """
CREATE TABLE job_counts (
    tenant TEXT NOT NULL, status TEXT NOT NULL, n INTEGER NOT NULL, PRIMARY KEY (tenant, status)) WITHOUT ROWID;
CREATE VIRTUAL TABLE jobs_text USING fts5(id, name, tokenize='trigram case_sensitive 1', columnsize=0);
CREATE TRIGGER jobs_counted AFTER INSERT ON jobs BEGIN
    INSERT INTO job_counts(tenant, status, n) VALUES (new.tenant, new.status, 1)
        ON CONFLICT(tenant, status) DO UPDATE SET n = n + 1;
    INSERT INTO jobs_text(rowid, id, name) VALUES (new.rowid, new.id, new.name);
END;
CREATE TRIGGER jobs_recounted AFTER UPDATE OF tenant, status ON jobs
        WHEN old.tenant IS NOT new.tenant OR old.status IS NOT new.status BEGIN
    UPDATE job_counts SET n = n - 1 WHERE tenant = old.tenant AND status = old.status;
    INSERT INTO job_counts(tenant, status, n) VALUES (new.tenant, new.status, 1)
        ON CONFLICT(tenant, status) DO UPDATE SET n = n + 1;
END;
CREATE TRIGGER jobs_retexted AFTER UPDATE OF id, name ON jobs BEGIN
    DELETE FROM jobs_text WHERE rowid = old.rowid;
    INSERT INTO jobs_text(rowid, id, name) VALUES (new.rowid, new.id, new.name);
END;
CREATE TRIGGER jobs_uncounted AFTER DELETE ON jobs BEGIN
    UPDATE job_counts SET n = n - 1 WHERE tenant = old.tenant AND status = old.status;
    DELETE FROM jobs_text WHERE rowid = old.rowid;
END;
INSERT INTO job_counts(tenant, status, n) SELECT tenant, status, COUNT(*) FROM jobs GROUP BY tenant, status;
INSERT INTO jobs_text(rowid, id, name) SELECT rowid, id, name FROM jobs;
"""
"""What makes the job history's counts and text search cost what they find, not the table (:meth:`Store.history`):
``job_counts`` holds how many stored jobs each (tenant, status) has, and ``jobs_text`` is a trigram index of each
job's id and name (SQLite FTS5, case-sensitive as ``instr``); triggers keep both in step with every write to
``jobs``. Created, and filled from the jobs already stored, in one transaction the first time a store opens
without them (an older database). ``jobs_text`` rows share their job's rowid, which the delete and rename triggers
use (the control plane never deletes or renames a stored job); reads join it to ``jobs`` by id, so a ``VACUUM``
that renumbered rowids would not change what a search finds."""
HISTORY_SCAN_ROWS = 2000
"""A text-filtered history page first reads at most this many rows in order, newest first, and stops as soon as
its page is full (a common substring fills it among the first few); only when they do not fill it does it turn to
the trigram index (a rare one)."""
MIN_INDEXED_TEXT = 3
"""The shortest text filter the trigram index answers (its tokens are three characters): a shorter one is matched
by reading the rows (nearly every job matches one or two characters of an id's hexadecimal anyway), as is one
holding a NUL character (an FTS5 phrase ends at it: 'unterminated string')."""

MIGRATIONS = (
    ("tenants", "max_priority", "ALTER TABLE tenants ADD COLUMN max_priority INTEGER"),
    ("tenants", "max_queued_jobs", "ALTER TABLE tenants ADD COLUMN max_queued_jobs INTEGER"),
    ("jobs", "options", "ALTER TABLE jobs ADD COLUMN options TEXT NOT NULL DEFAULT '{}'"),
    ("jobs", "submitted_t", "ALTER TABLE jobs ADD COLUMN submitted_t REAL"),
    ("jobs", "started_t", "ALTER TABLE jobs ADD COLUMN started_t REAL"),
    ("jobs", "finished_t", "ALTER TABLE jobs ADD COLUMN finished_t REAL"),
    ("jobs", "gpus", "ALTER TABLE jobs ADD COLUMN gpus REAL"),
    ("jobs", "placements", "ALTER TABLE jobs ADD COLUMN placements TEXT"),
    ("jobs", "attempts", "ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "preemptions", "ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0"),
    ("jobs", "gpu_speed", "ALTER TABLE jobs ADD COLUMN gpu_speed REAL"),
    ("events", "count", "ALTER TABLE events ADD COLUMN count INTEGER NOT NULL DEFAULT 1"),
    ("events", "first_at", "ALTER TABLE events ADD COLUMN first_at REAL"),
    ("events", "first_t", "ALTER TABLE events ADD COLUMN first_t REAL"),
)
"""(table, column, statement) applied when an older database lacks the column."""


@dataclass(frozen=True, slots=True)
class BadRow:
    """A stored job that could not be read back: its id and why."""

    job_id: str
    why: str


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class Store:
    """A small synchronous wrapper over one SQLite connection (callers serialise; a lock guards anyway)."""

    def __init__(self, path: Path, durable: bool = False) -> None:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._token_cache: dict[str, tuple[str, str | None]] = {}
        """Token hash -> (role, tenant); cleared whenever a token is revoked."""
        os.close(os.open(path, os.O_RDWR | os.O_CREAT, 0o600))
        os.chmod(path, 0o600)  # also an older file created with the umask's mode
        for suffix in ("-wal", "-shm"):
            side = path.with_name(path.name + suffix)
            if side.exists():
                os.chmod(side, 0o600)
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._db.row_factory = sqlite3.Row
        try:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
            self._db.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
            self._db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self._db.executescript(SCHEMA)
            if self._missing_columns():
                # looked at again under the write lock: another process opening this older store at the same
                # time may have added them while this one waited for it ('duplicate column name' before)
                self._db.execute("BEGIN IMMEDIATE")
                for statement in self._missing_columns():
                    self._db.execute(statement)
                self._db.execute("COMMIT")
            if self._db.execute("SELECT 1 FROM sqlite_master WHERE name='job_counts'").fetchone() is None:
                # looked at again under the write lock: another process opening this older store at the same
                # time may have made them while this one waited for it
                self._db.execute("BEGIN IMMEDIATE")
                if self._db.execute("SELECT 1 FROM sqlite_master WHERE name='job_counts'").fetchone() is None:
                    for statement in _statements(HISTORY_SCHEMA):
                        self._db.execute(statement)
                self._db.execute("COMMIT")
        except (sqlite3.Error, OSError) as exc:
            self._rollback()
            self._db.close()
            raise StoreWriteError(path, exc) from exc

    def _missing_columns(self) -> list[str]:
        """The :data:`MIGRATIONS` statements this database still needs, in order."""
        out = []
        for table, column, statement in MIGRATIONS:
            have = {str(r["name"]) for r in self._db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                out.append(statement)
        return out

    def close(self) -> None:
        with self._lock:
            with contextlib.suppress(sqlite3.Error):  # a last checkpoint; a full disk keeps the WAL as it is
                self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            self._db.close()

    def _writable(self) -> None:
        """Called before every write (a seam for tests that fake a failing disk: raise as SQLite would)."""

    def _rollback(self) -> None:
        """Roll back the open transaction, if SQLite still holds one (after SQLITE_FULL it may have rolled it
        back itself; a ROLLBACK then fails with "no transaction is active" and would hide the first error)."""
        if self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.debug("rollback after a failed write: %s", exc)

    @contextlib.contextmanager
    def _write(self, transaction: bool = True) -> Iterator[sqlite3.Connection]:
        """One write under the lock: a transaction (``BEGIN IMMEDIATE`` .. ``COMMIT``) or, with
        ``transaction=False``, one autocommitted statement. Any failure rolls it back and a SQLite or OS error
        becomes :class:`StoreWriteError` (the first error, with whether the disk is full); a broken constraint
        (``sqlite3.IntegrityError``) stays what it is."""
        with self._lock:
            try:
                self._writable()
                if transaction:
                    self._db.execute("BEGIN IMMEDIATE")
                yield self._db
                if transaction:
                    self._db.execute("COMMIT")
            except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
                self._rollback()  # what was asked is wrong (a constraint), not the store: the caller's error
                raise
            except (sqlite3.Error, OSError) as exc:
                self._rollback()
                raise StoreWriteError(self.path, exc) from exc
            except BaseException:
                self._rollback()
                raise

    # ------------------------------------------------------------------ meta
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str) -> None:
        with self._write(transaction=False):
            self._db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
                             "value=excluded.value", (key, value))

    # ------------------------------------------------------------------ tokens and tenants
    def add_token(self, token: str, role: str, tenant: str | None, label: str = "") -> None:
        with self._write(transaction=False):
            self._db.execute("INSERT OR REPLACE INTO tokens(hash, tenant, role, label, created) VALUES(?,?,?,?,?)",
                             (token_hash(token), tenant, role, label, time.time()))

    def replace_tokens(self, token: str, role: str, tenant: str | None, label: str = "",
                       audit: tuple[str, str, str, str] | None = None) -> int:
        """Make ``token`` the only token of ``role`` (and ``tenant``): every other one is revoked at once, in
        the same transaction (with ``audit = (actor, action, target, detail)`` its audit line, whose detail may
        name ``{revoked}``). Returns how many were revoked."""
        with self._write():
            revoked = self._replace_tokens(token, role, tenant, label)
            if audit is not None:
                actor, action, target, detail = audit
                self._audit(actor, action, target, detail.replace("{revoked}", str(revoked)))
        self._token_cache.clear()
        return revoked

    def _replace_tokens(self, token: str, role: str, tenant: str | None, label: str) -> int:
        cur = self._db.execute("DELETE FROM tokens WHERE role=? AND tenant IS ? AND hash<>?",
                               (role, tenant, token_hash(token)))
        self._db.execute("INSERT OR REPLACE INTO tokens(hash, tenant, role, label, created) "
                         "VALUES(?,?,?,?,?)", (token_hash(token), tenant, role, label, time.time()))
        return int(cur.rowcount)

    def revoke_tokens(self, role: str, tenant: str | None, audit: tuple[str, str, str, str] | None = None) -> int:
        """Revoke every token of ``role`` for ``tenant`` (with ``audit``, its audit line in the same transaction,
        as for :meth:`replace_tokens`); returns how many."""
        with self._write():
            cur = self._db.execute("DELETE FROM tokens WHERE role=? AND tenant IS ?", (role, tenant))
            revoked = int(cur.rowcount)
            if audit is not None:
                actor, action, target, detail = audit
                self._audit(actor, action, target, detail.replace("{revoked}", str(revoked)))
        self._token_cache.clear()
        return revoked

    def lookup_token(self, token: str) -> tuple[str, str | None] | None:
        """``(role, tenant)`` for a token, or None. Revoked tokens are gone from the cache as from the table."""
        digest = token_hash(token)
        found = self._token_cache.get(digest)
        if found is not None:
            return found
        with self._lock:
            row = self._db.execute("SELECT hash, role, tenant FROM tokens WHERE hash=?", (digest,)).fetchone()
            if row is None or not secrets.compare_digest(str(row["hash"]), digest):
                return None
            found = (str(row["role"]), row["tenant"])
            self._token_cache[digest] = found
        return found

    def upsert_tenant(self, name: str, quota_gpus: float | None, weight: float,
                      max_priority: int | None = None, token: str | None = None, actor: str = "",
                      max_queued_jobs: int | None = None, audit: tuple[str, str, str, str] | None = None) -> int:
        """Create or update a tenant; with ``token`` it becomes the tenant's only token and the change is audited
        (``actor``), all in one transaction; without, ``audit`` (``(actor, action, target, detail)``) is the
        audit line stored with the change. Returns how many tokens were revoked."""
        revoked = 0
        with self._write():
            self._db.execute(
                "INSERT INTO tenants(name, quota_gpus, weight, max_priority, max_queued_jobs, created) "
                "VALUES(?,?,?,?,?,?) ON CONFLICT(name) DO UPDATE SET quota_gpus=excluded.quota_gpus, "
                "weight=excluded.weight, max_priority=excluded.max_priority, "
                "max_queued_jobs=excluded.max_queued_jobs",
                (name, quota_gpus, weight, max_priority, max_queued_jobs, time.time()))
            if token is not None:
                revoked = self._replace_tokens(token, "tenant", name, name)
                self._audit(actor, "tenant.upsert", name, f"quota={quota_gpus} weight={weight} "
                                                          f"max_priority={max_priority} "
                                                          f"max_queued_jobs={max_queued_jobs}; token issued, "
                                                          f"{revoked} revoked")
            elif audit is not None:
                self._audit(*audit)
        if token is not None:
            self._token_cache.clear()
        return revoked

    def ensure_tenant(self, name: str) -> None:
        """Create ``name`` with the defaults unless it exists."""
        with self._write(transaction=False):
            self._db.execute("INSERT OR IGNORE INTO tenants(name, quota_gpus, weight, created) VALUES(?,?,?,?)",
                             (name, None, 1.0, time.time()))

    def tenants(self) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT name, quota_gpus, weight, max_priority, max_queued_jobs, created "
                                    "FROM tenants ORDER BY name").fetchall()
        return [dict(r) for r in rows]

    def tenant(self, name: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT name, quota_gpus, weight, max_priority, max_queued_jobs, created "
                                   "FROM tenants WHERE name=?", (name,)).fetchone()
        return None if row is None else dict(row)

    # ------------------------------------------------------------------ jobs
    def insert_job(self, job: Job, actor: str, idempotency: tuple[str, str, str] | None = None,
                   message: str = "accepted") -> None:
        """Persist a newly accepted job (its tenant too, with the defaults, unless it exists) with its first event
        (``submitted``, ``message``) and an audit line, in one transaction; with ``idempotency = (owner, key,
        request hash)`` the key is recorded in the same transaction."""
        now = time.time()
        with self._write():
            self._insert_job(job, actor, idempotency, message, now)

    def insert_jobs(self, rows: Sequence[tuple[Job, str, tuple[str, str, str] | None]],
                    message: str = "accepted") -> list[sqlite3.IntegrityError | None]:
        """Persist several newly accepted jobs as :meth:`insert_job` does, all in one transaction (one commit: a
        group commit of the submissions that arrived together). A row that breaks a constraint (its
        Idempotency-Key recorded by an earlier row) is left out alone, its error returned at its index (None for
        a stored row); any other failure stores none of them and raises :class:`StoreWriteError`."""
        now = time.time()
        out: list[sqlite3.IntegrityError | None] = []
        with self._write():
            for job, actor, idempotency in rows:
                self._db.execute("SAVEPOINT job")
                try:
                    self._insert_job(job, actor, idempotency, message, now)
                except sqlite3.IntegrityError as exc:
                    self._db.execute("ROLLBACK TO job")
                    out.append(exc)
                else:
                    out.append(None)
                self._db.execute("RELEASE job")
        return out

    def _insert_job(self, job: Job, actor: str, idempotency: tuple[str, str, str] | None, message: str,
                    now: float) -> None:
        self._db.execute("INSERT OR IGNORE INTO tenants(name, quota_gpus, weight, created) VALUES(?,?,?,?)",
                         (job.tenant, None, 1.0, now))
        if idempotency is not None:
            owner, key, digest = idempotency
            self._db.execute("INSERT INTO idempotency(owner, key, job_id, request_hash, created) "
                             "VALUES(?,?,?,?,?)", (owner, key, job.id, digest, now))
        self._db.execute(
            "INSERT INTO jobs(id, name, tenant, replicas, resources, duration_s, priority, status, "
            "message, submitted_at, updated_at, options, submitted_t, gpus) "
            "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (job.id, job.name, job.tenant, job.replicas, json.dumps(dict(job.spec.resources)),
             _duration(job.spec), job.priority, job.status.value, job.message, job.spec.submitted_at, now,
             json.dumps(_options(job.spec)), job.submitted_t, job.gpus))
        self._db.execute("INSERT INTO events(job_id, at, t, kind, status, message) VALUES(?,?,?,?,?,?)",
                         (job.id, now, job.submitted_t, "submitted", job.status.value, message))
        self._audit(actor, "job.submit", job.id, job.name, now)

    def record_events(self, events: Iterable[JobEvent], jobs: Mapping[str, Job] | None = None,
                      audit: tuple[str, str, str, str] | None = None) -> int:
        """Apply runtime events to persisted jobs (unknown ids, e.g. synthetic jobs, are skipped). A job found in
        ``jobs`` (id -> the job as the runtime holds it after these events) is saved whole: its status, message,
        priority and run fields; otherwise the event's status and message are. ``audit``: an audit line
        ``(actor, action, target, detail)`` written in the same transaction."""
        now = time.time()
        n = 0
        jobs = jobs or {}
        events = list(events)
        with self._write():
            for ev in events:
                cur = self._db.execute("UPDATE jobs SET status=?, message=?, updated_at=? WHERE id=?",
                                       (ev.status, ev.message, now, ev.job_id))
                if cur.rowcount:
                    self._insert_event(ev, now)
                    n += 1
            self._db.executemany(
                "UPDATE jobs SET status=?, message=?, priority=?, submitted_t=?, started_t=?, finished_t=?, "
                "gpus=?, placements=?, attempts=?, preemptions=?, gpu_speed=? WHERE id=?",
                [(j.status.value, j.message, j.priority, j.submitted_t, j.started_t, j.finished_t, j.gpus,
                  json.dumps(j.placements), j.attempts, j.preemptions, j.extra.get(SPEED_KEY), j.id)
                 for j in jobs.values()])
            if audit is not None:
                self._audit(*audit, now)
        return n

    def refile_job(self, job_id: str, tenant: str) -> bool:
        """File a stored job under ``tenant`` (its tenant row made with the defaults unless it exists); False when
        it was already (or is not stored). A Kubernetes workload refused for its namespace is listed under the
        namespace's tenant, and under the one it named once a binding change lets it in (or the reverse)."""
        with self._lock:  # read first: a restart finds every Kubernetes job again, nearly all unchanged
            row = self._db.execute("SELECT tenant FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None or row["tenant"] == tenant:
            return False
        with self._write():
            cur = self._db.execute("UPDATE jobs SET tenant=? WHERE id=? AND tenant<>?", (tenant, job_id, tenant))
            if not cur.rowcount:
                return False
            self._db.execute("INSERT OR IGNORE INTO tenants(name, quota_gpus, weight, created) VALUES(?,?,?,?)",
                             (tenant, None, 1.0, time.time()))
        return True

    def _insert_event(self, ev: JobEvent, now: float) -> None:
        """Append a job event, or fold it into the job's latest event when it repeats it (``jobs.folds``): that
        row is replaced by one with the count plus one, the first time kept and the new message and last time.
        The folded event gets a new id, so a reader following the feed by cursor sees it again. The caller
        holds the lock and a transaction."""
        count, first_at, first_t = 1, now, ev.t
        if ev.kind in FOLDED_EVENT_KINDS:
            last = self._db.execute("SELECT id, kind, count, at, t, first_at, first_t FROM events WHERE job_id=? "
                                    "ORDER BY id DESC LIMIT 1", (ev.job_id,)).fetchone()
            if last is not None and folds(str(last["kind"]), ev.kind):
                count = int(last["count"] or 1) + 1
                first_at = float(last["first_at"] if last["first_at"] is not None else last["at"])
                first_t = float(last["first_t"] if last["first_t"] is not None else last["t"])
                self._db.execute("DELETE FROM events WHERE id=?", (last["id"],))
        self._db.execute("INSERT INTO events(job_id, at, t, kind, status, message, count, first_at, first_t) "
                         "VALUES(?,?,?,?,?,?,?,?,?)",
                         (ev.job_id, now, ev.t, ev.kind, ev.status, ev.message, count, first_at, first_t))

    def idempotent_job(self, owner: str, key: str) -> tuple[str, str] | None:
        """``(job id, request hash)`` recorded for ``owner``'s ``Idempotency-Key``, or None."""
        with self._lock:
            row = self._db.execute("SELECT job_id, request_hash FROM idempotency WHERE owner=? AND key=?",
                                   (owner, key)).fetchone()
        return None if row is None else (str(row["job_id"]), str(row["request_hash"]))

    def load_jobs(self, bad: list[BadRow] | None = None, registry: VendorRegistry | None = None,
                  finished_after: float | None = None, finished_limit: int | None = None) -> list[Job]:
        """Every stored job in submission order, its request parsed with ``registry`` (the runtime's; default the
        configured vendors); rows that cannot be read are appended to ``bad`` and skipped. Of the finished jobs
        only those that finished after clock time ``finished_after`` are read, and of them the ``finished_limit``
        that finished last (the retention policy: the rest are never loaded; :meth:`load_job` reads one by id);
        pending and running jobs always."""
        terminal = tuple(s.value for s in JobStatus if s.terminal)
        marks = ",".join("?" * len(terminal))
        where = f"status IN ({marks})"
        args: list[Any] = [*terminal]
        if finished_after is not None and finished_after > -math.inf:
            where += " AND COALESCE(finished_t, 0) > ?"
            args.append(finished_after if math.isfinite(finished_after) else 1e308)
        finished = f"SELECT * FROM jobs WHERE {where}"
        if finished_limit is not None:
            finished = f"SELECT * FROM ({finished} ORDER BY COALESCE(finished_t, 0) DESC, id DESC LIMIT ?)"
            args.append(finished_limit)
        sql = (f"SELECT * FROM (SELECT * FROM jobs WHERE status NOT IN ({marks}) UNION ALL {finished}) "
               "ORDER BY submitted_at, id")
        with self._lock:
            rows = self._db.execute(sql, (*terminal, *args)).fetchall()
        out: list[Job] = []
        for r in rows:
            try:
                out.append(_job(r, registry))
            except (ValueError, TypeError, OverflowError) as exc:
                if bad is not None:
                    bad.append(BadRow(str(r["id"]), f"{type(exc).__name__}: {exc}"[:300]))
        return out

    def load_job(self, job_id: str, registry: VendorRegistry | None = None) -> Job | None:
        """One stored job as :meth:`load_jobs` reads it; None when there is none or its row cannot be read."""
        with self._lock:
            row = self._db.execute("SELECT * FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            return None
        try:
            return _job(row, registry)
        except (ValueError, TypeError, OverflowError) as exc:
            log.warning("stored job %s cannot be read: %s", job_id[:64], exc)
            return None

    def history(self, *, tenant: str | None = None, status: str | None = None, q: str | None = None,
                before: tuple[float, str] | None = None, limit: int = 200,
                registry: VendorRegistry | None = None) -> tuple[list[Job], int]:
        """A page of the job history, every stored job (pruned ones included), newest submitted first: at most
        ``limit`` of those submitted before the cursor ``before`` (the ``(submitted_at, id)`` of the last job of
        the page before), filtered by tenant, status and a substring of name or id; and how many match the
        filters in all. Unreadable rows are skipped (they read back as failed at the next restart).

        What each costs, at any depth and store size: a page is keyset-paged over the index that has the filters
        first (``(tenant, status, submitted_at, id)`` and its prefixes): ``limit`` rows read. The count without
        ``q`` sums ``job_counts``' rows (one per tenant and status) and never reads ``jobs``. With ``q``
        (:data:`MIN_INDEXED_TEXT` characters or more) the count and a page that :data:`HISTORY_SCAN_ROWS` rows in
        order do not fill look the text up in the trigram index ``jobs_text``: they cost what matches, not the
        table; a shorter ``q`` reads rows."""
        where: list[str] = []
        args: list[Any] = []
        if tenant is not None:
            where.append("tenant = ?")
            args.append(tenant)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        with self._lock:
            if not q:
                rows = self._history_rows(where, args, before, limit)
                total = self._history_count(where, args)
            elif len(q) < MIN_INDEXED_TEXT or "\0" in q:  # FTS5 reads a phrase only up to a NUL
                text = [*where, "(instr(name, ?) > 0 OR instr(id, ?) > 0)"]
                rows = self._history_rows(text, [*args, q, q], before, limit)
                cond = f" WHERE {' AND '.join(text)}"
                total = int(self._db.execute(f"SELECT COUNT(*) AS n FROM jobs{cond}", (*args, q, q)).fetchone()["n"])
            else:
                rows = self._history_text_rows(where, args, q, before, limit)
                total = self._history_text_count(where, args, q)
        out: list[Job] = []
        for r in rows:
            try:
                out.append(_job(r, registry))
            except (ValueError, TypeError, OverflowError) as exc:
                log.warning("stored job %s cannot be read: %s", str(r["id"])[:64], exc)
        return out, total

    def _history_rows(self, where: list[str], args: list[Any], before: tuple[float, str] | None,
                      limit: int) -> list[sqlite3.Row]:
        """At most ``limit`` rows matching ``where`` before the cursor, newest first (the caller holds the lock).
        The cursor is a row value, so the index's range starts at it (an ``OR`` of the two comparisons would read
        every row newer than it first)."""
        cond, params = list(where), list(args)
        if before is not None:
            cond.append("(submitted_at, id) < (?, ?)")
            params += [before[0], before[1]]
        page = f" WHERE {' AND '.join(cond)}" if cond else ""
        return list(self._db.execute(f"SELECT * FROM jobs{page} ORDER BY submitted_at DESC, id DESC LIMIT ?",
                                     (*params, limit)).fetchall())

    def _history_count(self, where: list[str], args: list[Any]) -> int:
        """How many stored jobs match ``where`` (conditions on ``tenant`` and ``status`` only), from ``job_counts``
        (which has those two columns)."""
        sql = "SELECT COALESCE(SUM(n), 0) AS n FROM job_counts" + (f" WHERE {' AND '.join(where)}" if where else "")
        return int(self._db.execute(sql, args).fetchone()["n"])

    def _history_text_rows(self, where: list[str], args: list[Any], q: str, before: tuple[float, str] | None,
                           limit: int) -> list[sqlite3.Row]:
        """A page of the rows whose name or id holds ``q``: the rows in order, newest first, are read one at a
        time until ``limit`` match (then no further row is read), the rows end, or :data:`HISTORY_SCAN_ROWS`
        were read without filling the page: then the rest come from the trigram index, after the last row read."""
        if limit <= 0:
            return []
        cond, params = list(where), list(args)
        if before is not None:
            cond.append("(submitted_at, id) < (?, ?)")
            params += [before[0], before[1]]
        page = f" WHERE {' AND '.join(cond)}" if cond else ""
        cursor = self._db.execute(f"SELECT * FROM jobs{page} ORDER BY submitted_at DESC, id DESC LIMIT ?",
                                  (*params, HISTORY_SCAN_ROWS))
        hits: list[sqlite3.Row] = []
        read = 0
        last: sqlite3.Row | None = None
        try:
            for last in cursor:  # stepped one row at a time: a page filled early reads no further
                read += 1
                if q in str(last["name"]) or q in str(last["id"]):
                    hits.append(last)
                    if len(hits) >= limit:
                        return hits
        finally:
            cursor.close()
        if read < HISTORY_SCAN_ROWS or last is None:
            return hits
        cond = ["jobs_text MATCH ?", *(f"j.{w}" for w in where), "(j.submitted_at, j.id) < (?, ?)"]
        sql = (f"SELECT j.* FROM jobs_text f CROSS JOIN jobs j ON j.id = f.id WHERE {' AND '.join(cond)} "
               "ORDER BY j.submitted_at DESC, j.id DESC LIMIT ?")
        rest = self._db.execute(sql, (_phrase(q), *args, float(last["submitted_at"]), str(last["id"]),
                                      limit - len(hits))).fetchall()
        return hits + [r for r in rest if q in str(r["name"]) or q in str(r["id"])]

    def _history_text_count(self, where: list[str], args: list[Any], q: str) -> int:
        """How many stored jobs match ``where`` and hold ``q`` in name or id, from the trigram index."""
        if not where:
            sql = "SELECT COUNT(*) AS n FROM jobs_text WHERE jobs_text MATCH ?"
        else:
            sql = ("SELECT COUNT(*) AS n FROM jobs_text f CROSS JOIN jobs j ON j.id = f.id WHERE jobs_text MATCH ? "
                   f"AND {' AND '.join(f'j.{w}' for w in where)}")
        return int(self._db.execute(sql, (_phrase(q), *args)).fetchone()["n"])

    def count_finished(self) -> int:
        """How many finished (succeeded, failed, cancelled) jobs the store holds."""
        terminal = tuple(s.value for s in JobStatus if s.terminal)
        with self._lock:
            row = self._db.execute(f"SELECT COUNT(*) AS n FROM jobs WHERE status IN ({','.join('?' * len(terminal))})",
                                   terminal).fetchone()
        return int(row["n"])

    def has_job(self, job_id: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM jobs WHERE id=?", (job_id,)).fetchone() is not None

    def job_ids(self, status: JobStatus) -> set[str]:
        """Ids of the stored jobs whose status is ``status``."""
        with self._lock:
            rows = self._db.execute("SELECT id FROM jobs WHERE status=?", (status.value,)).fetchall()
        return {str(r["id"]) for r in rows}

    def max_event_t(self) -> float | None:
        """The latest runtime clock time any event was recorded at (the clock never restarts below it)."""
        with self._lock:
            row = self._db.execute("SELECT MAX(t) AS t FROM events").fetchone()
        return None if row is None or row["t"] is None else float(row["t"])

    def job_events(self, job_id: str) -> list[dict[str, Any]]:
        """A job's events, oldest first; a folded one (``count`` > 1) carries its first time (``first_at``,
        ``first_t``) beside its last (``at``, ``t``)."""
        with self._lock:
            rows = self._db.execute("SELECT at, t, kind, status, message, count, first_at, first_t FROM events "
                                    "WHERE job_id=? ORDER BY id", (job_id,)).fetchall()
        return [_event_row(r) for r in rows]

    def events_page(self, after: int | None, limit: int, tenant: str | None = None,
                    job_id: str | None = None) -> list[dict[str, Any]]:
        """Job events with their job's name and tenant, oldest first: those after event id ``after``, or (with
        None) the newest ``limit``. ``tenant``/``job_id`` filter."""
        where: list[str] = []
        args: list[int | str] = []
        if after is not None:
            where.append("e.id > ?")
            args.append(after)
        if tenant is not None:
            where.append("j.tenant = ?")
            args.append(tenant)
        if job_id is not None:
            where.append("e.job_id = ?")
            args.append(job_id)
        sql = ("SELECT e.id, e.job_id, e.at, e.t, e.kind, e.status, e.message, e.count, e.first_at, e.first_t, "
               "j.name, j.tenant FROM events e "
               "JOIN jobs j ON j.id = e.job_id" + (" WHERE " + " AND ".join(where) if where else "")
               + (" ORDER BY e.id LIMIT ?" if after is not None else " ORDER BY e.id DESC LIMIT ?"))
        with self._lock:
            rows = [_event_row(r) for r in self._db.execute(sql, (*args, limit)).fetchall()]
        return rows if after is not None else rows[::-1]

    def audit_page(self, after: int | None, limit: int, actors: tuple[str, ...]) -> list[dict[str, Any]]:
        """Audit lines of ``actors`` with their id, oldest first: after id ``after``, or the newest ``limit``."""
        marks = ",".join("?" * len(actors))
        sql = (f"SELECT id, at, actor, action, target, detail FROM audit WHERE actor IN ({marks})"
               + (" AND id > ? ORDER BY id LIMIT ?" if after is not None else " ORDER BY id DESC LIMIT ?"))
        args = (*actors, after, limit) if after is not None else (*actors, limit)
        with self._lock:
            rows = [dict(r) for r in self._db.execute(sql, args).fetchall()]
        return rows if after is not None else rows[::-1]

    def last_ids(self) -> tuple[int, int]:
        """The newest job event id and audit id (0 when none): a cursor at "now"."""
        with self._lock:
            e = self._db.execute("SELECT COALESCE(MAX(id), 0) AS n FROM events").fetchone()["n"]
            a = self._db.execute("SELECT COALESCE(MAX(id), 0) AS n FROM audit").fetchone()["n"]
        return int(e), int(a)

    # ------------------------------------------------------------------ audit
    def audit(self, actor: str, action: str, target: str = "", detail: str = "") -> None:
        with self._write(transaction=False):
            self._audit(actor, action, target, detail)

    def _audit(self, actor: str, action: str, target: str, detail: str, at: float | None = None) -> None:
        """An audit line; the caller holds the lock (and the transaction it belongs to)."""
        self._db.execute("INSERT INTO audit(at, actor, action, target, detail) VALUES(?,?,?,?,?)",
                         (time.time() if at is None else at, actor, action, target, detail))

    def audit_many(self, rows: Iterable[tuple[str, str, str, str]]) -> None:
        """``(actor, action, target, detail)`` rows in one transaction."""
        now = time.time()
        with self._write():
            self._db.executemany("INSERT INTO audit(at, actor, action, target, detail) VALUES(?,?,?,?,?)",
                                 [(now, *row) for row in rows])

    def set_meta_audited(self, key: str, value: str, audit: tuple[str, str, str, str]) -> None:
        """A meta value and its audit line ``(actor, action, target, detail)`` in one transaction."""
        with self._write():
            self._db.execute("INSERT INTO meta(key, value) VALUES(?, ?) ON CONFLICT(key) DO UPDATE SET "
                             "value=excluded.value", (key, value))
            self._audit(*audit)

    def audit_log(self, limit: int = 200) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._db.execute("SELECT at, actor, action, target, detail FROM audit ORDER BY id DESC LIMIT ?",
                                    (limit,)).fetchall()
        return [dict(r) for r in rows]


def _statements(script: str) -> list[str]:
    """``script``'s SQL statements one by one (a trigger's body stays whole), to run inside a transaction the
    caller holds (``executescript`` would commit it first)."""
    out: list[str] = []
    part = ""
    for line in script.splitlines(keepends=True):
        part += line
        if sqlite3.complete_statement(part):
            out.append(part.strip())
            part = ""
    if part.strip():
        out.append(part.strip())
    return out


def _phrase(text: str) -> str:
    """``text`` as one FTS5 phrase: in the trigram index, the rows that hold it as a substring."""
    return '"' + text.replace('"', '""') + '"'


def _event_row(r: sqlite3.Row) -> dict[str, Any]:
    """An events row as a dict: ``count`` (1 unless repeats folded into it), ``first_at``/``first_t`` (the first
    time; an older row without them: its own time)."""
    out = dict(r)
    out["count"] = int(out.get("count") or 1)
    if out.get("first_at") is None:
        out["first_at"] = out["at"]
    if out.get("first_t") is None:
        out["first_t"] = out["t"]
    return out


def _duration(spec: JobSpec) -> float | None:
    return spec.duration_s if math.isfinite(spec.duration_s) else None


def _options(spec: JobSpec) -> dict[str, Any]:
    return {"gpu_type": spec.gpu_type, "node_selector": dict(spec.node_selector), "kind": spec.kind.value,
            "preemptible": spec.preemptible, "ref_gpu": spec.ref_gpu, "work_class": spec.work_class,
            "speedup": dict(spec.speedup), "tokens": spec.tokens,
            **({"workload": spec.workload.to_dict()} if not spec.workload.empty else {}),
            **({"claims": [c.to_dict() for c in spec.claims]} if spec.claims else {})}


def _job(r: sqlite3.Row, registry: VendorRegistry | None) -> Job:
    """A stored job as a new record: live jobs start over (the runtime re-queues them; they keep their submission
    time), ended ones read back as they were (status, message, start and end, GPU-equivalents, placements).
    Raises ``ValueError``/``TypeError`` for a row that cannot be read; an ended job whose request no longer parses
    keeps its record (a placeholder spec), a live one cannot be run and raises."""
    resources = json.loads(r["resources"])
    if not isinstance(resources, dict):
        raise ValueError("resources is not a mapping")
    opts = json.loads(r["options"] or "{}")
    if not isinstance(opts, dict):
        raise ValueError("options is not a mapping")
    placements = json.loads(r["placements"]) if r["placements"] else []
    if not isinstance(placements, list):
        raise ValueError("placements is not a list")
    status = JobStatus(str(r["status"]))
    duration = _opt_float(r["duration_s"])
    submitted_at = float(r["submitted_at"])
    submit_s = max(_opt_float(r["submitted_t"]) or 0.0, 0.0)
    try:
        spec = job_spec(str(r["id"]), name=str(r["name"]), tenant=str(r["tenant"]), replicas=int(r["replicas"]),
                        resources=resources, duration_s=duration, submit_s=submit_s, priority=int(r["priority"]),
                        gpu_type=str(opts.get("gpu_type", "")), node_selector=dict(opts.get("node_selector") or {}),
                        kind=str(opts.get("kind", "train")), preemptible=bool(opts.get("preemptible", True)),
                        submitted_at=submitted_at, registry=registry, ref_gpu=str(opts.get("ref_gpu", "")),
                        work_class=str(opts.get("work_class", "")), tokens=float(opts.get("tokens", 0.0)),
                        speedup={str(k): float(v) for k, v in dict(opts.get("speedup") or {}).items()},
                        workload=opts.get("workload"), claims=opts.get("claims"))
    except ValueError:
        if not status.terminal:
            raise
        # a placeholder that keeps what the row says (replicas) and asks for no device
        spec = JobSpec(str(r["id"]), submit_s, 0, math.inf, tenant=str(r["tenant"]), name=str(r["name"]),
                       template=Pod(str(r["id"]), namespace=str(r["tenant"])), replicas=int(r["replicas"]),
                       resources=resources, submitted_at=submitted_at, priority=int(r["priority"]))
    if not status.terminal:
        return Job(spec, message=str(r["message"]))
    started, finished = _opt_float(r["started_t"]), _opt_float(r["finished_t"])
    job = Job(spec, JobState(status.value), message=str(r["message"]), placements=placements,
              attempt=int(r["attempts"] or 0), preemptions=int(r["preemptions"] or 0))
    if started is not None:
        job.first_start_s = job.run_start_s = started
    if finished is not None:
        job.finish_s = finished
    gpus = _opt_float(r["gpus"])
    if gpus is not None:
        job.least_gpus = gpus
    speed = _opt_float(r["gpu_speed"])
    if speed is not None:
        job.extra[SPEED_KEY] = speed
    return job
