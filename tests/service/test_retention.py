"""Finished jobs leave the control plane's memory under a retention policy (``up --finished-job-ttl``,
``--max-finished-jobs``), as Kubernetes' ``ttlSecondsAfterFinished`` and Slurm's ``MinJobAge``/``MaxJobCount``: a
long-running control plane no longer grows with every job it ever saw. Pending and running jobs never leave; a
pruned job reads back by id from the store (``pruned: true``), the job list counts it in ``pruned``, and tenant
usage, quotas and fair shares are untouched (a finished job holds nothing). On main before this change every job
stayed in memory for ever: the REST, restart and property tests below fail there (the job stays listed,
``pruned`` is absent, memory holds every finished job)."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.tally import recount
from gpucluster.service.retention import FinishedJobs, JobRetention
from gpucluster.service.store import Store, StoreWriteError
from tests.service.inproc import InProc, in_process

GPU = {"nvidia.com/gpu": 1}


def post(ip: InProc, name: str, tenant: str = "team", **kw: Any) -> Any:
    return ip.client.post("/api/v1/jobs", json={"name": name, "tenant": tenant, "resources": GPU, **kw})


# ---------------------------------------------------------------------------------------------- the rule
def test_the_count_limit_lets_the_longest_finished_go_first() -> None:
    held = FinishedJobs(JobRetention(max_age_s=math.inf, max_finished=2))
    for i, t in enumerate((1.0, 2.0, 3.0)):
        assert held.note(f"j{i}", t)
    assert held.due(3.0) == ["j0"]
    assert len(held) == 2 and "j0" not in held and "j1" in held
    assert held.due(1e12) == []  # no age limit
    assert held.note("j3", 4.0) and held.due(4.0) == ["j1"]


def test_the_age_limit_counts_from_when_the_job_finished() -> None:
    held = FinishedJobs(JobRetention(max_age_s=100.0, max_finished=10))
    held.note("a", 10.0)
    held.note("b", 50.0)
    assert held.due(109.0) == []
    assert held.due(110.0) == ["a"]
    assert held.due(149.0) == [] and held.due(150.0) == ["b"] and len(held) == 0


def test_a_job_noted_twice_is_held_once_and_times_never_go_back() -> None:
    held = FinishedJobs(JobRetention(max_age_s=10.0, max_finished=10))
    assert held.note("a", 20.0)
    assert not held.note("a", 30.0)
    held.note("b", 5.0)  # noted later with an earlier time: it waits as if it finished with "a"
    assert len(held) == 2
    assert held.due(29.0) == [] and held.due(30.0) == ["a", "b"]


def test_zero_keeps_nothing_and_bad_limits_are_refused() -> None:
    held = FinishedJobs(JobRetention(max_age_s=math.inf, max_finished=0))
    held.note("a", 0.0)
    assert held.due(0.0) == ["a"]
    with pytest.raises(ValueError, match="max_age_s"):
        JobRetention(max_age_s=-1.0)
    with pytest.raises(ValueError, match="max_age_s"):
        JobRetention(max_age_s=math.nan)
    with pytest.raises(ValueError, match="max_finished"):
        JobRetention(max_finished=-1)
    assert JobRetention() == JobRetention(max_age_s=86400.0, max_finished=10_000)


def test_up_defaults_are_the_documented_ones() -> None:
    from gpucluster.cli.service_cmd import up

    defaults = up.__defaults__ or ()
    assert 86400.0 in defaults and 10_000 in defaults


# ---------------------------------------------------------------------------------------------- REST
def test_a_pruned_job_reads_back_from_the_store_and_leaves_the_list(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", retention=JobRetention(max_age_s=math.inf, max_finished=1)) as ip:
        first = post(ip, "first", duration_s=5).json()["id"]
        second = post(ip, "second", duration_s=5).json()["id"]
        held = post(ip, "held").json()["id"]  # runs until cancelled: never pruned
        ip.tick()
        ip.tick(10.0)  # both finish in this tick: the longest finished goes, one finished job stays
        listed = ip.client.get("/api/v1/jobs").json()
        ids = [j["id"] for j in listed["jobs"]]
        assert len(ids) == 2 and held in ids and listed["total"] == 2 and listed["pruned"] == 1, listed
        gone = next(j for j in (first, second) if j not in ids)
        kept = first if gone == second else second
        r = ip.client.get(f"/api/v1/jobs/{gone}")
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["pruned"] is True and body["status"] == "succeeded" and body["finished_t"] is not None
        assert body["placements"] and [e["kind"] for e in body["events"]][-1] == "succeeded"
        assert ip.client.get(f"/api/v1/jobs/{kept}").json()["pruned"] is False
        assert ip.client.get("/api/v1/jobs", params={"status": "succeeded"}).json()["pruned"] == 1
        # cancelling it is what cancelling any finished job is; another tenant's token cannot tell it exists
        r = ip.client.delete(f"/api/v1/jobs/{gone}")
        assert r.status_code == 409 and "already succeeded" in r.text, r.text
        other = ip.tenant("other")
        assert ip.as_(other).get(f"/api/v1/jobs/{gone}").status_code == 404
        assert ip.client.get("/api/v1/jobs/j-000000000000").status_code == 404
        # a cancel ends a job outside a tick: it is noted too, and pruned at the next tick
        assert ip.client.delete(f"/api/v1/jobs/{held}").status_code == 200
        ip.tick()
        listed = ip.client.get("/api/v1/jobs").json()
        assert [j["id"] for j in listed["jobs"]] == [held] and listed["pruned"] == 2
        metrics = ip.client.get("/metrics").text
        assert "gpucluster_jobs_pruned_total 2.0" in metrics


def test_the_age_limit_prunes_on_the_runtime_clock(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", retention=JobRetention(max_age_s=100.0)) as ip:
        jid = post(ip, "short", duration_s=5).json()["id"]
        ip.tick()
        ip.tick(10.0)
        assert ip.client.get(f"/api/v1/jobs/{jid}").json()["status"] == "succeeded"
        ip.tick(50.0)
        assert ip.service.find_job(jid) is not None
        ip.tick(60.0)
        assert ip.service.find_job(jid) is None and ip.service.runtime.job(jid) is None
        assert jid not in ip.service.order and ip.client.get(f"/api/v1/jobs/{jid}").json()["pruned"] is True


def test_an_idempotent_retry_after_the_job_was_pruned_is_the_same_job(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", retention=JobRetention(max_finished=0)) as ip:
        body = {"name": "keyed", "tenant": "team", "resources": GPU, "duration_s": 5}
        first = ip.client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": "k-1"})
        ip.tick()
        ip.tick(10.0)
        assert ip.service.find_job(first.json()["id"]) is None
        again = ip.client.post("/api/v1/jobs", json=body, headers={"Idempotency-Key": "k-1"})
        assert again.status_code == 200 and again.json()["id"] == first.json()["id"], again.text
        assert again.json()["status"] == "succeeded"


def test_a_restart_keeps_only_what_the_retention_allows(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        done = [post(ip, f"done{i}", duration_s=5 + i).json()["id"] for i in range(3)]  # done[2] finishes last
        live = post(ip, "live").json()["id"]
        ip.tick()
        ip.tick(10.0)
        assert all(ip.service.find_job(j) is not None for j in done)
    with in_process(data, retention=JobRetention(max_finished=1)) as ip:
        listed = ip.client.get("/api/v1/jobs").json()
        assert listed["pruned"] == 2 and {j["id"] for j in listed["jobs"]} == {done[2], live}, listed
        for jid in done:
            r = ip.client.get(f"/api/v1/jobs/{jid}").json()
            assert r["status"] == "succeeded" and r["pruned"] is (jid != done[2])
    with in_process(data, retention=JobRetention(max_age_s=5.5)) as ip:  # by age: they finished at 5, 6, 7; now 11
        listed = ip.client.get("/api/v1/jobs").json()
        assert listed["pruned"] == 1 and {j["id"] for j in listed["jobs"]} == {done[1], done[2], live}, listed
        ip.tick(1.0)  # 12: done[1] is 6 s finished, done[2] 5 s
        assert {j["id"] for j in ip.client.get("/api/v1/jobs").json()["jobs"]} == {done[2], live}
    with in_process(data, retention=JobRetention(max_age_s=math.inf, max_finished=0)) as ip:
        assert [j["id"] for j in ip.client.get("/api/v1/jobs").json()["jobs"]] == [live]
        assert ip.service.runtime.job(live) is not None and ip.service.finished_in_memory() == 0


def test_a_restart_never_loads_the_finished_jobs_past_the_retention(tmp_path: Path) -> None:
    """The store reads only the live jobs and the finished ones the policy keeps (a store of a million finished jobs
    does not pass through memory on the way back up); each of the others reads back by id."""
    data = tmp_path / "d"
    with in_process(data) as ip:
        done = [post(ip, f"done{i}", duration_s=5 + i).json()["id"] for i in range(3)]  # finish at 5, 6, 7
        live = post(ip, "live").json()["id"]  # runs until cancelled
        ip.tick()
        ip.tick(10.0)
        store = ip.service.store
        ids = lambda **kw: [j.id for j in store.load_jobs(**kw)]  # noqa: E731
        assert ids() == [*done, live]
        assert ids(finished_limit=1) == [done[2], live]
        assert ids(finished_after=5.5) == [done[1], done[2], live]
        assert ids(finished_after=5.5, finished_limit=1) == [done[2], live]
        assert ids(finished_after=math.inf, finished_limit=10) == [live]
        assert ids(finished_after=-math.inf, finished_limit=0) == [live]
        assert store.count_finished() == 3
        assert store.load_job(done[0]) is not None and store.load_job("j-none") is None


def test_pruning_leaves_usage_quota_and_fair_shares_as_they_were(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", retention=JobRetention(max_finished=0), queue_policy="drf") as ip:
        ip.tenant("a", quota_gpus=4)
        ip.tenant("b")
        for i in range(3):
            post(ip, f"a{i}", tenant="a", duration_s=5 if i else None)
            post(ip, f"b{i}", tenant="b", duration_s=5 if i else None)
        ip.tick()
        engine: Any = ip.service.runtime.engine  # type: ignore[attr-defined]
        ip.tick(10.0)  # the 5 s jobs finish and are pruned in this tick
        assert ip.service.pruned == 4
        after = (ip.service.runtime.usage_by_tenant(), engine.ledger.share("a"), engine.ledger.share("b"),
                 dict(engine.quota.used["a"]))
        assert after[0]["a"]["running"] == 1 and after[0]["b"]["running"] == 1
        assert ip.client.get("/api/v1/tenants").status_code == 200
        ip.tick()  # nothing more to prune: the figures are those of the two running jobs
        assert (ip.service.runtime.usage_by_tenant(), engine.ledger.share("a"), engine.ledger.share("b"),
                dict(engine.quota.used["a"])) == after
        states, _user, usage, pods, _oldest, placed = recount(engine.jobs.values())
        assert usage == engine.jobs.tally.usage_by_tenant() and pods == engine.jobs.tally.pending_pods
        assert states == engine.jobs.tally.states and placed == set(engine.jobs.tally.placed)


def test_nothing_is_pruned_before_the_store_has_its_final_state(tmp_path: Path) -> None:
    """A tick whose events the store cannot take (a full disk) prunes nothing: the job stays in memory until the
    store has its end, so a pruned job always reads back as it ended."""
    from tests.service.test_node_actions import FailingEventsStore

    with in_process(tmp_path / "d", retention=JobRetention(max_finished=0)) as ip:
        jid = post(ip, "short", duration_s=5).json()["id"]
        ip.tick()
        real = ip.service.store
        real.close()
        ip.service.store = FailingEventsStore(real.path)
        with pytest.raises(StoreWriteError):
            ip.tick(10.0)
        assert ip.service.unrecorded and ip.service.find_job(jid) is not None and ip.service.pruned == 0
        ip.service.store.close()
        ip.service.store = Store(real.path)
        ip.tick()
        assert ip.service.find_job(jid) is None and ip.service.pruned == 1
        r = ip.client.get(f"/api/v1/jobs/{jid}").json()
        assert r["status"] == "succeeded" and r["pruned"] is True and r["finished_t"] is not None


# ---------------------------------------------------------------------------------------------- property
OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([2.0, 5.0, 30.0, None]), st.sampled_from([1, 8, 32])),
    st.tuples(st.just("cancel"), st.integers(0, 20), st.just(0)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 4.0, 20.0]), st.just(0)),
), min_size=1, max_size=16)


@settings(max_examples=20, deadline=None)
@given(ops=OPS, max_age=st.sampled_from([0.0, 5.0, 30.0, math.inf]), max_finished=st.integers(0, 3))
def test_no_live_job_is_pruned_and_no_job_is_lost(ops: list[tuple[str, Any, int]], max_age: float,
                                                   max_finished: int) -> None:
    """After any sequence of submissions (some too big to run now, some without end), cancels and ticks: every
    submitted job is in memory or was pruned after it finished (its final state in the store); no pending or
    running job ever leaves memory; after a tick memory holds at most ``max_finished`` finished jobs, none of them
    past ``max_age``; the engine's counts equal a recount of what it holds."""
    retention = JobRetention(max_age_s=max_age, max_finished=max_finished)
    with tempfile.TemporaryDirectory() as tmp, in_process(Path(tmp) / "d", retention=retention) as ip:
        svc = ip.service
        submitted: list[str] = []
        for n, (op, arg, gpus) in enumerate(ops):
            if op == "submit":
                r = post(ip, f"j{n}", duration_s=arg, resources={"nvidia.com/gpu": min(gpus, 8)},
                         replicas=max(1, gpus // 8))
                assert r.status_code == 201, r.text
                submitted.append(r.json()["id"])
            elif op == "cancel" and submitted:
                ip.client.delete(f"/api/v1/jobs/{submitted[arg % len(submitted)]}")
            elif op == "tick":
                ip.tick(arg)
                finished = [j for j in (svc.find_job(i) for i in submitted) if j is not None and j.status.terminal]
                assert len(finished) <= max_finished
                assert all(svc.runtime.now - j.finish_s < max_age for j in finished)
                assert svc.finished_in_memory() == len(finished)
            for jid in submitted:
                job = svc.find_job(jid)
                stored = svc.store.load_job(jid)
                assert stored is not None
                if job is None:  # pruned: only ever after it finished, and it reads back as it ended
                    assert stored.status.terminal and svc.stored_job(jid) is not None
                    assert jid not in svc.order
                    assert ip.client.get(f"/api/v1/jobs/{jid}").json()["pruned"] is True
                else:
                    assert jid in svc.order
                    if not job.status.terminal:
                        assert svc.runtime.job(jid) is job
            assert len(submitted) - len(svc.order) == svc.pruned
            engine: Any = svc.runtime.engine  # type: ignore[attr-defined]
            states, user, usage, pods, _oldest, placed = recount(engine.jobs.values())
            tally = engine.jobs.tally
            assert (states, user, usage, pods, placed) == (tally.states, tally.user_states, tally.usage_by_tenant(),
                                                          tally.pending_pods, set(tally.placed))


# ---------------------------------------------------------------------------------------------- the history
def test_the_history_lists_pruned_jobs_from_the_store_in_pages(tmp_path: Path) -> None:
    """``GET /api/v1/jobs?include=pruned``: every stored job, newest submitted first, the pruned ones marked, in
    pages whose ``next`` cursor leads to the following page until the last; tenant-scoped as the job list."""
    with in_process(tmp_path / "d", retention=JobRetention(max_age_s=math.inf, max_finished=0)) as ip:
        done = [post(ip, f"done-{i}", duration_s=1).json()["id"] for i in range(5)]
        other = ip.tenant("other")
        theirs = ip.as_(other).post("/api/v1/jobs", json={"name": "theirs", "tenant": "other", "resources": GPU,
                                                          "duration_s": 1}).json()["id"]
        ip.tick()
        ip.tick(5.0)
        live = post(ip, "live").json()["id"]  # runs until cancelled
        ip.tick()
        assert [j["id"] for j in ip.client.get("/api/v1/jobs").json()["jobs"]] == [live]
        newest_first = [live, theirs, *reversed(done)]
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            params: dict[str, Any] = {"include": "pruned", "limit": 3, **({"before": cursor} if cursor else {})}
            body = ip.client.get("/api/v1/jobs", params=params).json()
            assert body["total"] == 7 and len(body["jobs"]) <= 3
            for j in body["jobs"]:
                assert j["pruned"] is (j["id"] != live)
                assert j["status"] == ("running" if j["id"] == live else "succeeded")
            seen += [j["id"] for j in body["jobs"]]
            pages += 1
            cursor = body["next"]
            if cursor is None:
                break
        assert seen == newest_first and pages == 3
        # filters, and a tenant sees only its own
        body = ip.client.get("/api/v1/jobs", params={"include": "pruned", "tenant": "other"}).json()
        assert [j["id"] for j in body["jobs"]] == [theirs] and body["total"] == 1
        body = ip.client.get("/api/v1/jobs", params={"include": "pruned", "status": "running"}).json()
        assert [j["id"] for j in body["jobs"]] == [live]
        body = ip.client.get("/api/v1/jobs", params={"include": "pruned", "q": "done-3"}).json()
        assert [j["id"] for j in body["jobs"]] == [done[3]]
        body = ip.as_(other).get("/api/v1/jobs", params={"include": "pruned"}).json()
        assert [j["id"] for j in body["jobs"]] == [theirs] and body["next"] is None
        body = ip.as_(other).get("/api/v1/jobs", params={"include": "pruned", "tenant": "team"}).json()
        assert body["jobs"] == [] and body["total"] == 0
        # a bad cursor, or one without the history, is 422 with where
        r = ip.client.get("/api/v1/jobs", params={"include": "pruned", "before": "nan:x"})
        assert r.status_code == 422 and "query.before" in r.text, r.text
        r = ip.client.get("/api/v1/jobs", params={"before": "1.0:x"})
        assert r.status_code == 422 and "include=pruned" in r.text, r.text
        assert ip.client.get("/api/v1/jobs", params={"include": "all"}).status_code == 422


def test_the_history_pages_once_over_jobs_submitted_at_the_same_time(tmp_path: Path) -> None:
    """Keyset paging by (submitted_at, id): jobs that share a submission time are each listed once."""
    from gpucluster.jobs import Job, job_spec

    store = Store(tmp_path / "s.db")
    try:
        for i in range(7):
            spec = job_spec(f"j-{i:012d}", name=f"n{i}", tenant="team", replicas=1, resources=GPU, duration_s=1.0,
                            submit_s=0.0)
            store.insert_job(Job(dataclasses.replace(spec, submitted_at=100.0)), "admin")
        assert {j.spec.submitted_at for j in store.history(limit=10)[0]} == {100.0}
        seen: list[str] = []
        cursor = None
        while True:
            page, total = store.history(before=cursor, limit=2)
            assert total == 7
            seen += [j.id for j in page]
            if len(page) < 2:
                break
            cursor = (page[-1].spec.submitted_at, page[-1].id)
        assert seen == sorted(seen, reverse=True) and len(set(seen)) == 7
    finally:
        store.close()


def test_gpucluster_jobs_history_pages_through_the_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpucluster jobs --history``: the pruned jobs marked, a ``more: --before CURSOR`` line under a page that
    has more, ``--before`` giving the next; ``--before`` alone is refused."""
    import contextlib

    from typer.testing import CliRunner

    from gpucluster.cli import service_cmd
    from gpucluster.cli.main import app

    with in_process(tmp_path / "d", retention=JobRetention(max_age_s=math.inf, max_finished=0)) as ip:
        ids = [post(ip, f"hist-{i}", duration_s=1).json()["id"] for i in range(3)]
        ip.tick()
        ip.tick(5.0)
        monkeypatch.setattr(service_cmd, "resolve", lambda *_a: None)
        monkeypatch.setattr(service_cmd, "client", lambda _conn: contextlib.nullcontext(ip.client))
        runner = CliRunner(env={"COLUMNS": "240"})  # the table is cut to the terminal's width
        r = runner.invoke(app, ["jobs", "--history", "--limit", "2"])
        assert r.exit_code == 0, r.output
        assert "succeeded (pruned)" in r.stdout and ids[2] in r.stdout and ids[0] not in r.stdout
        cursor = re.search(r"more: --before (\S+)", r.stdout)
        assert cursor is not None, r.stdout
        r = runner.invoke(app, ["jobs", "--history", "--limit", "2", "--before", cursor.group(1), "--json"])
        assert r.exit_code == 0, r.output
        body = json.loads(r.stdout)
        assert [j["id"] for j in body["jobs"]] == [ids[0]] and body["next"] is None and body["jobs"][0]["pruned"]
        assert runner.invoke(app, ["jobs", "--before", cursor.group(1)]).exit_code == 2
        assert "succeeded" not in runner.invoke(app, ["jobs"]).stdout  # the list: in memory only
