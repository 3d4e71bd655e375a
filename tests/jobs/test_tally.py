"""Issue 28, item 5: the engine's counts (jobs per state, each tenant's usage, waiting pods and the oldest wait)
are kept as jobs change (``gpucluster.jobs.tally``), and always equal a full recount.

Before, ``usage_by_tenant`` and the queue gauge scanned every job (26 ms a call with 5,000 queued, once per tick):
a tenant's flood of waiting jobs slowed every tick. Now a read costs the number of tenants, not of jobs."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import Job, JobState, job_spec
from gpucluster.jobs.tally import JobTable, recount
from tests.service.inproc import small_cluster

TENANTS = ("a", "b", "c")


def _usage_equal(kept: dict[str, dict[str, float]], counted: dict[str, dict[str, float]]) -> bool:
    return kept.keys() == counted.keys() and all(
        kept[t]["running"] == counted[t]["running"] and kept[t]["pending"] == counted[t]["pending"]
        and math.isclose(kept[t]["gpus"], counted[t]["gpus"], abs_tol=1e-9)
        and math.isclose(kept[t]["pending_gpus"], counted[t]["pending_gpus"], abs_tol=1e-9) for t in kept)


def _check(rt: EmbeddedRuntime) -> None:
    engine = rt.engine
    states, user, usage, pods, oldest, placed = recount(engine.jobs.values())
    assert set(engine.jobs.tally.placed) == placed
    views = engine.views
    assert views.counts() == {s.value: n for s, n in states.items()}
    every, mine = views.status_counts()
    assert sum(every.values()) == len(engine.jobs) and sum(mine.values()) == sum(user.values())
    assert every["pending"] == states[JobState.NEW] + states[JobState.QUEUED]
    assert mine["running"] == user[JobState.RUNNING]
    assert _usage_equal(views.usage_by_tenant(), usage)
    assert _usage_equal(rt.usage_by_tenant(), usage)
    for t in (*TENANTS, "nobody"):
        assert views.pending_jobs(t) == int(usage.get(t, {}).get("pending", 0))
    now = engine.now
    assert views.queue_stats() == (pods, max(0.0, now - (now if oldest is None else oldest)))


OPS = st.lists(st.one_of(
    st.tuples(st.just("submit"), st.sampled_from(TENANTS), st.sampled_from((1, 2, 4, 8)),
              st.sampled_from((None, 5.0, 30.0)), st.integers(1, 2)),
    st.tuples(st.just("advance"), st.sampled_from((0.0, 1.0, 7.0, 40.0))),
    st.tuples(st.just("cancel"), st.integers(0, 60)),
    st.tuples(st.just("fail"), st.integers(0, 60)),
    st.tuples(st.just("quota"), st.sampled_from(TENANTS), st.sampled_from((None, 0.0, 1.0, 4.0, 16.0))),
    st.tuples(st.just("forget"), st.integers(0, 60)),
    st.tuples(st.just("fault"), st.integers(0, 7)),
), max_size=45)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.sampled_from((0.0, 0.5)))
def test_the_kept_counts_equal_a_recount_after_any_sequence(ops: list[tuple[object, ...]],
                                                            background: float) -> None:
    rt = EmbeddedRuntime(small_cluster(), background=background, fault_rate_per_hour=0.0, seed=3)
    quotas: dict[str, float] = {}
    ids: list[str] = []
    nodes = [n["name"] for n in rt.nodes()]
    for op in ops:
        kind = op[0]
        if kind == "submit":
            _, tenant, gpus, duration, replicas = op
            jid = f"j{len(ids)}"
            job = Job(job_spec(jid, name=jid, tenant=str(tenant), replicas=int(replicas),  # type: ignore[call-overload]
                               resources={"nvidia.com/gpu": gpus}, duration_s=duration, submit_s=rt.now,
                               registry=rt.registry))
            try:
                rt.validate(job, quota=False)
            except ValueError:
                continue
            rt.submit(job)
            ids.append(jid)
        elif kind == "advance":
            rt.advance(rt.now + float(op[1]))  # type: ignore[arg-type]
        elif kind in ("cancel", "fail", "forget") and ids:
            jid = ids[int(op[1]) % len(ids)]  # type: ignore[call-overload]
            if jid not in rt.engine.jobs:
                continue
            if kind == "cancel":
                rt.cancel(jid)
            elif kind == "fail":
                rt.engine.fail(jid, "its pods failed")
            else:
                rt.engine.forget(jid)
        elif kind == "quota":
            _, tenant, limit = op
            if limit is None:
                quotas.pop(str(tenant), None)
            else:
                quotas[str(tenant)] = float(limit)  # type: ignore[arg-type]
            rt.set_quotas(quotas)
        elif kind == "fault":
            rt.inject_fault(nodes[int(op[1]) % len(nodes)], 0)  # type: ignore[call-overload]
        _check(rt)


def test_a_read_scans_no_job() -> None:
    """The counts are read without touching the jobs: a table whose jobs cannot be iterated still answers."""
    rt = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0)
    rt.set_quotas({"flood": 1.0})
    for i in range(300):
        job = Job(job_spec(f"f{i}", name=f"f{i}", tenant="flood", replicas=1, resources={"nvidia.com/gpu": 1},
                           duration_s=None, submit_s=rt.now, registry=rt.registry))
        rt.submit(job)
    rt.advance(rt.now + 1)
    table = rt.engine.jobs

    def no_scan(*args: object) -> object:
        raise AssertionError("a count scanned the jobs")

    class Unscannable(JobTable):
        values = items = keys = __iter__ = no_scan  # type: ignore[assignment]

    table.__class__ = Unscannable
    try:
        views = rt.engine.views
        assert views.usage_by_tenant()["flood"] == {"gpus": 1.0, "pending_gpus": 299.0, "running": 1.0,
                                                    "pending": 299.0}
        assert views.pending_jobs("flood") == 299 and views.counts()["queued"] == 299
        assert views.status_counts()[1]["pending"] == 299 and views.queue_stats()[0] == 299
    finally:
        table.__class__ = JobTable


def test_the_table_refuses_bulk_changes_it_would_not_count() -> None:
    table = JobTable()
    with pytest.raises(TypeError, match="one at a time"):
        table.update({})
    with pytest.raises(TypeError, match="one at a time"):
        table.clear()


def test_the_overview_reads_no_queued_job_and_its_device_figures_only_after_a_scrape_or_a_change() -> None:
    """The overview (recomputed after every submission) neither iterates the jobs nor loops over every GPU again
    while nothing but the queue changed; a shard's scrape or a placement computes the device figures again."""
    rt = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0)
    rt.set_quotas({"flood": 1.0})
    monitor = rt.monitor
    real = monitor.utilisation
    calls: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        calls.append(1)
        return real(*args, **kwargs)

    monitor.utilisation = counted  # type: ignore[method-assign]
    rt.advance(rt.now + 1)
    first = rt.overview()
    for i in range(200):
        rt.submit(Job(job_spec(f"f{i}", name=f"f{i}", tenant="flood", replicas=1,
                               resources={"nvidia.com/gpu": 1}, duration_s=None, submit_s=rt.now,
                               registry=rt.registry)))
    table = rt.engine.jobs

    def no_scan(*args: object) -> object:
        raise AssertionError("the overview scanned the jobs")

    class Unscannable(JobTable):
        values = items = keys = __iter__ = no_scan  # type: ignore[assignment]

    table.__class__ = Unscannable
    try:
        before = len(calls)
        for _ in range(20):  # submissions in between change only the queue
            ov = rt.overview()
        assert len(calls) == before
        assert ov["gpu_utilisation"] == first["gpu_utilisation"] and ov["queue"] == 0  # not arrived yet
        rt.advance(rt.now + 1)  # the flood arrives and one job starts: the cluster changed
        ov = rt.overview()
        assert len(calls) == before + 1 and ov["jobs"]["running"] == 1 and ov["queue"] == 199
        rt.overview()
        assert len(calls) == before + 1
        scrapes = monitor.scrapes
        rt.advance(rt.now + 60)  # every shard is scraped again
        assert monitor.scrapes > scrapes
        rt.overview()
        assert len(calls) == before + 2
    finally:
        table.__class__ = JobTable
    fresh = real()
    del fresh["per_node"]
    cached = rt.utilisation()
    del cached["per_node"]
    assert {k: v for k, v in cached.items() if k != "allocated_idle"} == \
        {k: v for k, v in fresh.items() if k != "allocated_idle"}
