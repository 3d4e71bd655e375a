"""The job history (``GET /api/v1/jobs?include=pruned``, ``Store.history``) costs what it returns, not the size of
the store: every page is a range of an index that has the filters first, the count without a text filter comes
from ``job_counts`` (kept by triggers, never a scan of ``jobs``), and a text filter of three characters or more is
looked up in the trigram index ``jobs_text``. These tests read the query plans SQLite chose for the statements the
store ran and check the answers against a brute-force reading of the rows; the timings are in
``bench/history_scale.py`` (docs/benchmarks.md). Before this change the count and ``q`` read the whole table and a
deep page read every row newer than its cursor: the plan tests fail there."""

from __future__ import annotations

import dataclasses
import re
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import Job, JobState, job_spec
from gpucluster.service import store as store_mod
from gpucluster.service.runtime import JobEvent
from gpucluster.service.store import Store

GPU = {"nvidia.com/gpu": 1}
STATES = [JobState.QUEUED, JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED]


def _job(i: int, name: str, tenant: str, at: float) -> Job:
    spec = job_spec(f"j-{i:012x}", name=name, tenant=tenant, replicas=1, resources=GPU, duration_s=1.0,
                    submit_s=0.0)
    return Job(dataclasses.replace(spec, submitted_at=at))


def _counts(store: Store) -> dict[tuple[str, str], int]:
    db = store._db
    kept = {(r[0], r[1]): r[2] for r in db.execute("SELECT tenant, status, n FROM job_counts") if r[2]}
    real = {(r[0], r[1]): r[2] for r in db.execute("SELECT tenant, status, COUNT(*) FROM jobs GROUP BY 1, 2")}
    assert kept == real
    return kept


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "s.db")
    yield s
    s.close()


def _plans(store: Store, call: object) -> list[str]:
    """The query plan of every statement the store ran during ``call()`` (``EXPLAIN QUERY PLAN`` of the SQL as
    run, its parameters bound)."""
    seen: list[str] = []
    store._db.set_trace_callback(seen.append)
    try:
        call()  # type: ignore[operator]
    finally:
        store._db.set_trace_callback(None)
    out = []
    for sql in seen:
        if sql.lstrip().upper().startswith("SELECT"):
            plan = store._db.execute("EXPLAIN QUERY PLAN " + sql).fetchall()
            out.append(sql + "\n    " + " | ".join(str(r[3]) for r in plan))
    return out


def _full_scan(plan: str) -> bool:
    """A plan that reads the jobs table through (a scan in an index's order, stopped by LIMIT, is not one)."""
    return re.search(r"SCAN (jobs|j)\b(?! USING INDEX)", plan) is not None


@pytest.mark.parametrize("tenant", [None, "team"])
@pytest.mark.parametrize("status", [None, "succeeded"])
@pytest.mark.parametrize("deep", [False, True])
def test_every_page_is_an_index_range_and_the_count_never_reads_the_jobs(store: Store, tenant: str | None,
                                                                         status: str | None, deep: bool) -> None:
    for i in range(20):
        store.insert_job(_job(i, f"n{i}", "team" if i % 2 else "other", 100.0 + i), "admin")
    before = (110.0, "j-00000000000a") if deep else None
    plans = _plans(store, lambda: store.history(tenant=tenant, status=status, before=before, limit=5))
    page = [p for p in plans if "FROM jobs" in p and "ORDER BY" in p]
    count = [p for p in plans if "job_counts" in p]
    assert len(page) == 1 and len(count) == 1, plans
    # the page: a search of an index whose order is the history's, starting at the cursor; no sort, no scan
    assert "USING INDEX jobs_" in page[0] and "TEMP B-TREE" not in page[0] and not _full_scan(page[0]), page
    if deep:
        assert "(submitted_at,id)<(?,?)" in page[0], page
    # the count: job_counts only (at most a row per tenant and status), never the jobs table
    assert "jobs " not in count[0].split("\n")[1] and len(plans) == 2, plans


def test_a_text_filter_is_looked_up_in_the_trigram_index(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rare substring: the count and (once the rows read in order do not fill the page) the page come from
    ``jobs_text``; only a filter shorter than a trigram reads rows."""
    monkeypatch.setattr(store_mod, "HISTORY_SCAN_ROWS", 4)
    for i in range(30):
        store.insert_job(_job(i, "needle-x" if i in (3, 17) else f"hay-{i}", "team", 100.0 + i), "admin")
    found: list[tuple[list[Job], int]] = []
    plans = _plans(store, lambda: found.append(store.history(q="needle", tenant="team", limit=5)))
    jobs, total = found[0]
    assert [j.name for j in jobs] == ["needle-x", "needle-x"] and total == 2
    text = [p for p in plans if "jobs_text" in p]
    assert len(text) == 2 and all("VIRTUAL TABLE" in p and not _full_scan(p) for p in text), plans
    assert not any(_full_scan(p) for p in plans), plans
    short = _plans(store, lambda: store.history(q="x", limit=5))
    assert not any("jobs_text" in p for p in short), short


def test_the_counts_follow_every_write(store: Store) -> None:
    """Inserted, moved to another status (an event, a whole job), filed under another tenant: ``job_counts``
    is what a GROUP BY over the jobs says after each write (each trigger removed once fails this)."""
    jobs = [_job(i, f"n{i}", "team", 100.0 + i) for i in range(4)]
    store.insert_jobs([(j, "admin", None) for j in jobs])
    assert _counts(store) == {("team", "pending"): 4}
    store.record_events([JobEvent(jobs[0].id, 1.0, "running", JobState.RUNNING, "")])
    store.record_events([JobEvent(jobs[0].id, 2.0, "running", JobState.RUNNING, "again")])  # same status: no change
    assert _counts(store) == {("team", "pending"): 3, ("team", "running"): 1}
    jobs[1].state = JobState.SUCCEEDED
    store.record_events([], {jobs[1].id: jobs[1]})
    assert store.refile_job(jobs[2].id, "other")
    assert _counts(store) == {("team", "pending"): 1, ("team", "running"): 1, ("team", "succeeded"): 1,
                              ("other", "pending"): 1}
    assert store.history(tenant="other")[1] == 1 and store.history(status="succeeded")[1] == 1
    with store._lock:
        store._db.execute("DELETE FROM jobs WHERE id=?", (jobs[3].id,))
    assert store.history()[1] == 3 and store.history(q=jobs[3].id)[1] == 0


def test_an_older_store_gets_its_counts_and_text_index_on_open(tmp_path: Path) -> None:
    """A database written before ``job_counts`` and ``jobs_text`` existed: both are made and filled from the
    stored jobs, in one transaction, the first time it opens."""
    path = tmp_path / "old.db"
    s = Store(path)
    for i in range(5):
        s.insert_job(_job(i, f"old-{i}", "team" if i < 3 else "other", 100.0 + i), "admin")
    s.close()
    db = sqlite3.connect(path)
    db.executescript("DROP TRIGGER jobs_counted; DROP TRIGGER jobs_recounted; DROP TRIGGER jobs_retexted; "
                     "DROP TRIGGER jobs_uncounted; DROP TABLE job_counts; DROP TABLE jobs_text;")
    db.close()
    s = Store(path)
    try:
        assert _counts(s) == {("team", "pending"): 3, ("other", "pending"): 2}
        assert s.history(q="old-4")[1] == 1 and s.history(q="old-")[1] == 5
        s.insert_job(_job(9, "old-9", "team", 200.0), "admin")
        assert s.history(tenant="team")[1] == 4
    finally:
        s.close()


NAMES = st.text(alphabet="ab-", min_size=1, max_size=8).map(lambda t: "x" + t + "y")


@settings(max_examples=80, deadline=None)
@given(rows=st.lists(st.tuples(NAMES, st.sampled_from(["t1", "t2"]), st.integers(0, 5),
                               st.sampled_from(STATES)), min_size=1, max_size=25),
       q=st.text(alphabet="ab-xyj0", min_size=1, max_size=5), cut=st.tuples(st.integers(0, 30), st.integers(0, 8),
                                                                          st.integers(3, 6)),
       tenant=st.sampled_from([None, "t1"]),
       status=st.sampled_from([None, "running"]), limit=st.integers(1, 6), scan=st.integers(1, 8))
def test_pages_and_counts_are_what_reading_every_row_says(rows: list[tuple[str, str, int, JobState]], q: str,
                                                          cut: tuple[int, int, int], tenant: str | None,
                                                          status: str | None, limit: int, scan: int) -> None:
    """Whatever path answers (the count table, the trigram index, rows read in order then the index), paging
    through lists exactly the matching jobs once each, newest first, and ``total`` counts them. ``q`` is random
    text or (``cut``) a piece of one of the names, so that it often matches."""
    row, start, size = cut
    name = rows[row % len(rows)][0]
    if row % 3:
        q = name[start % len(name):][:size]
    with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
        mp.setattr(store_mod, "HISTORY_SCAN_ROWS", scan)
        store = Store(Path(tmp) / "s.db")
        try:
            jobs = []
            for i, (name, who, at, st_) in enumerate(rows):
                job = _job(i, name, who, float(at))
                store.insert_job(job, "admin")
                store.record_events([JobEvent(job.id, 0.0, "x", st_, "")])
                jobs.append((float(at), job.id, name, who, st_.status.value))
            want = [jid for at, jid, name, who, st_ in sorted(jobs, reverse=True)
                    if (tenant is None or who == tenant) and (status is None or st_ == status)
                    and (q in name or q in jid)]
            seen: list[str] = []
            before = None
            while True:
                page, total = store.history(tenant=tenant, status=status, q=q, before=before, limit=limit)
                assert total == len(want)
                seen += [j.id for j in page]
                if len(page) < limit:
                    break
                before = (page[-1].spec.submitted_at, page[-1].id)
            assert seen == want
        finally:
            store.close()


def test_a_tenant_never_sees_another_tenants_history_in_the_api_or_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tenant's token, whatever it asks (another tenant, a status, text that only the other's jobs hold, a
    cursor from the admin's paging): its own jobs only, and ``total`` counts its own (the counts and the text
    index answer per tenant). The CLI (``gpucluster jobs --history``, ``get jobs --history``) shows the same."""
    import contextlib
    import json
    import math

    from typer.testing import CliRunner

    from gpucluster.cli import get_cmd, service_cmd
    from gpucluster.cli.main import app
    from gpucluster.service.retention import JobRetention
    from tests.service.inproc import in_process

    with in_process(tmp_path / "d", retention=JobRetention(max_age_s=math.inf, max_finished=0)) as ip:
        tokens = {t: ip.tenant(t) for t in ("alpha", "beta")}
        ids: dict[str, list[str]] = {"alpha": [], "beta": []}
        for i in range(4):
            for t in ("alpha", "beta"):
                r = ip.as_(tokens[t]).post("/api/v1/jobs", json={"name": f"{t}-run-{i}", "resources": GPU,
                                                                 "duration_s": 1})
                assert r.status_code == 201, r.text
                ids[t].append(r.json()["id"])
        ip.tick()
        ip.tick(5.0)
        admin = ip.client.get("/api/v1/jobs", params={"include": "pruned", "limit": 3}).json()
        assert admin["total"] == 8 and all(j["pruned"] for j in admin["jobs"])
        alpha = ip.as_(tokens["alpha"])
        asks: list[tuple[dict[str, str], int]] = [({}, 4), ({"tenant": "beta"}, 0), ({"q": "beta-run"}, 0),
                                                   ({"q": ids["beta"][0]}, 0), ({"status": "succeeded"}, 4),
                                                   ({"before": admin["next"]}, 4)]
        for ask, total in asks:
            body = alpha.get("/api/v1/jobs", params={"include": "pruned", **ask}).json()
            assert {j["tenant"] for j in body["jobs"]} <= {"alpha"} and body["total"] == total, (ask, body)
        body = alpha.get("/api/v1/jobs", params={"include": "pruned", "q": "run-"}).json()
        assert sorted(j["id"] for j in body["jobs"]) == sorted(ids["alpha"]) and body["total"] == 4

        monkeypatch.setattr(service_cmd, "resolve", lambda *_a: None)
        monkeypatch.setattr(service_cmd, "client", lambda _conn: contextlib.nullcontext(alpha))
        monkeypatch.setattr(get_cmd, "resolve", lambda *_a: None)
        monkeypatch.setattr(get_cmd, "client", lambda _conn: contextlib.nullcontext(alpha))
        runner = CliRunner(env={"COLUMNS": "240"})
        for args in (["jobs", "--history"], ["jobs", "--history", "--tenant", "beta"],
                     ["jobs", "--history", "--json"], ["get", "jobs", "--history"]):
            r = runner.invoke(app, args)
            assert r.exit_code == 0, r.output
            assert "beta" not in r.stdout and not any(j in r.stdout for j in ids["beta"]), (args, r.stdout)
            assert ("alpha-run-3" in r.stdout) is ("--tenant" not in args), (args, r.stdout)
        r = runner.invoke(app, ["jobs", "--history", "--json"])
        assert sorted(j["id"] for j in json.loads(r.stdout)["jobs"]) == sorted(ids["alpha"])


def _older_store(path: Path) -> None:
    """A store as a version before ``job_counts`` and ``jobs_text`` wrote it."""
    s = Store(path)
    for i in range(3):
        s.insert_job(_job(i, f"old-{i}", "team", 100.0 + i), "admin")
    s.close()
    db = sqlite3.connect(path)
    db.executescript("DROP TRIGGER jobs_counted; DROP TRIGGER jobs_recounted; DROP TRIGGER jobs_retexted; "
                     "DROP TRIGGER jobs_uncounted; DROP TABLE job_counts; DROP TABLE jobs_text;")
    db.close()


def _open_once_the_other_commits(path: Path, other: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch,
                                 asks: tuple[str, ...]) -> Store:
    """Open a Store on ``path`` in a thread while ``other`` holds the write lock; ``other`` commits only once the
    store has looked and sent a statement starting with one of ``asks`` (its request for the lock). The store."""
    import threading

    asking = threading.Event()
    connect = sqlite3.connect

    def traced(*args: object, **kwargs: object) -> sqlite3.Connection:
        db = connect(*args, **kwargs)  # type: ignore[arg-type]
        db.set_trace_callback(lambda sql: asking.set() if sql.strip().upper().startswith(asks) else None)
        return db

    monkeypatch.setattr(store_mod.sqlite3, "connect", traced)
    opened: list[Store | BaseException] = []

    def open_store() -> None:
        try:
            opened.append(Store(path))
        except BaseException as exc:  # reported by the assertion below
            opened.append(exc)

    t = threading.Thread(target=open_store)
    t.start()
    assert asking.wait(60), "the store never asked for the write lock"
    other.execute("COMMIT")
    other.close()
    t.join(60)
    assert len(opened) == 1 and isinstance(opened[0], Store), opened
    return opened[0]


def test_an_older_store_opened_by_two_at_once_is_migrated_once(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes open an older store at the same time (a server starting on the new version and a CLI
    command): the second one found no ``job_counts`` before the first had committed it, then waited for the write
    lock. It must find the migration done once it has the lock, not fail with 'table job_counts already exists'
    (it did: the check was outside the transaction). The interleaving is forced: the other connection holds the
    write lock with the migration made but not committed until this one has checked and asked for the lock."""

    path = tmp_path / "old.db"
    _older_store(path)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    for statement in store_mod._statements(store_mod.HISTORY_SCHEMA):
        other.execute(statement)
    s = _open_once_the_other_commits(path, other, monkeypatch, ("BEGIN",))
    try:
        assert _counts(s) == {("team", "pending"): 3}
        assert s.history(q="old-")[1] == 3
    finally:
        s.close()


def test_a_text_filter_with_a_nul_character_is_answered_not_an_error(store: Store) -> None:
    """``q`` is free text from the URL (``?q=abc%00def``): FTS5 reads a phrase only up to a NUL character and
    answered 'unterminated string' (a 500 from the API). A NUL is matched by reading the rows, as before the
    trigram index: such a q matches what ``instr`` says (here nothing), in the count and the page."""
    for i in range(3):
        store.insert_job(_job(i, f"nul-{i}", "team", 100.0 + i), "admin")
    for q in ("nul-\x00", "\x00nul", "n\x00u", "\x00\x00\x00"):
        assert store.history(q=q) == ([], 0)
    assert store.history(q="nul-")[1] == 3


def test_a_text_filter_whose_page_fills_early_reads_no_further_rows(store: Store) -> None:
    """A common substring fills a page among the first rows: the page reads those rows and stops, where it read
    the next :data:`~gpucluster.service.store.HISTORY_SCAN_ROWS` rows (here all 300) before looking at any. The
    rows SQLite hands to Python are counted (each goes through the connection's row factory)."""
    for i in range(300):
        store.insert_job(_job(i, f"train-{i}", "team", 100.0 + i), "admin")
    made = [0]

    def counted(cursor: sqlite3.Cursor, row: tuple[object, ...]) -> sqlite3.Row:
        made[0] += 1
        return sqlite3.Row(cursor, row)

    store._db.row_factory = counted
    try:
        jobs, total = store.history(q="train", limit=5)
    finally:
        store._db.row_factory = sqlite3.Row
    assert [j.spec.name for j in jobs] == [f"train-{i}" for i in range(299, 294, -1)] and total == 300
    assert made[0] <= 5 + 1 + 1, made[0]  # the page's 5 rows, the count, one row stepped ahead at most


def _store_without(path: Path, table: str, column: str) -> None:
    """A store as a version before ``table.column`` was added wrote it."""
    s = Store(path)
    s.insert_job(_job(0, "old-0", "team", 100.0), "admin")
    s.close()
    db = sqlite3.connect(path)
    db.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    db.close()


@pytest.mark.parametrize(("table", "column"), [(t, c) for t, c, _s in store_mod.MIGRATIONS[:: 3]])
def test_an_older_store_missing_a_column_opened_by_two_at_once_is_migrated_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, column: str) -> None:
    """The column migrations had the race the history migration had: two processes open a store that lacks a
    column; the second looked (no column), then waited for the write lock while the first added it, then added it
    again and failed with 'duplicate column name'. The interleaving is forced: another connection holds the
    write lock with the column added but not committed until this one has looked and asked for the lock (its
    ``BEGIN``, or the ``ALTER`` that asked for it without one before the fix)."""

    path = tmp_path / "old.db"
    _store_without(path, table, column)
    [statement] = [s for t, c, s in store_mod.MIGRATIONS if (t, c) == (table, column)]
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    other.execute(statement)
    s = _open_once_the_other_commits(path, other, monkeypatch, ("BEGIN", "ALTER"))
    try:
        assert column in {r["name"] for r in s._db.execute(f"PRAGMA table_info({table})")}
        assert [j.spec.name for j in s.history()[0]] == ["old-0"]
    finally:
        s.close()
