"""Issue 28, item 5: a scheduling pass whose cost does not grow with queued jobs that cannot fit.

On the control plane's engine (the embedded runtime: ``describe``, ``quota_waits``, a sliced pass):

* jobs of one shape and tenant are tried once per pass: one placement attempt stands for all of them;
* a waiting job gets one ``unschedulable`` event when its reason changes, not one per pass;
* a pass over more jobs than its budget allows stops and goes on at the next run, so every job is reached and the
  event loop the pass shares gets control back in between.
"""

from __future__ import annotations

import dataclasses
import math

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import Job, JobState, job_spec
from tests.service.inproc import small_cluster

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


def _runtime(budget: float | None = None) -> EmbeddedRuntime:
    rt = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0)
    rt.set_quotas({"flood": 1.0})
    if budget is not None:
        rt.engine.options = dataclasses.replace(rt.engine.options, pass_budget_s=budget)
    return rt


def _submit(rt: EmbeddedRuntime, jid: str, tenant: str, resources: dict[str, int]) -> Job:
    job = Job(job_spec(jid, name=jid, tenant=tenant, replicas=1, resources=resources, duration_s=None,
                       submit_s=rt.now, registry=rt.registry))
    rt.validate(job)
    return rt.submit(job)


def test_one_attempt_per_shape_and_one_event_per_reason() -> None:
    rt = _runtime(budget=math.inf)  # whole passes (a sliced one would note the rest at the next run)
    jobs = [_submit(rt, f"f{i}", "flood", GPU) for i in range(800)]
    rt.advance(rt.now + 1)
    assert sum(j.state == JobState.RUNNING for j in jobs) == 1  # its quota: one GPU
    calls = rt.engine.totals.schedule_calls
    _submit(rt, "other-1", "other", GPU)  # something changed: another pass
    events = rt.advance(rt.now + 1)
    # the other tenant's job placed, and one attempt for the 799 waiting jobs of one shape
    assert rt.engine.jobs["other-1"].state == JobState.RUNNING
    assert rt.engine.totals.schedule_calls - calls <= 10  # not one per waiting job
    # their reason did not change: no event for them
    assert not [e for e in events if e.kind == "unschedulable" and e.job_id.startswith("f")]
    waiting = [j for j in jobs if j.state == JobState.QUEUED]
    assert len(waiting) == 799 and all(j.message.startswith("waiting for quota") for j in waiting)


def test_a_pass_over_its_budget_goes_on_at_the_next_run() -> None:
    rt = _runtime(budget=0.0)  # every pass stops at its first check (after 128 jobs)
    jobs = [_submit(rt, f"f{i}", "flood", GPU) for i in range(1000)]
    rt.advance(rt.now + 1)
    noted = sum(j.message.startswith("waiting") for j in jobs)
    assert 0 < noted < 1000
    for _ in range(20):  # 1000 jobs, 128 a slice, two runs an advance
        rt.advance(rt.now + 1)
    assert all(j.message.startswith("waiting") or j.state == JobState.RUNNING for j in jobs)
    assert sum(j.state == JobState.RUNNING for j in jobs) == 1
    _submit(rt, "other-1", "other", GPU)
    for _ in range(10):
        rt.advance(rt.now + 1)
        if rt.engine.jobs["other-1"].state == JobState.RUNNING:
            break
    assert rt.engine.jobs["other-1"].state == JobState.RUNNING


def test_a_job_queued_ahead_of_a_pass_cut_short_is_tried_once_that_pass_ends() -> None:
    """A tenant's job that sorts ahead of where a sliced pass stopped (small jobs first: a 1-GPU job ahead of a
    flood of 2-GPU jobs) is tried once that pass reaches the end of the queue, with nothing else happening. Before
    this, the pass went on from where it stopped, ended, and no further pass ran: the job waited for an unrelated
    event (another submission, a job ending), for ever on a quiet cluster (seen under load in
    bench/queue_flood.py: the other tenant's job still pending after 200 ticks)."""
    rt = _runtime(budget=0.0)  # every pass stops at its first check (after 128 jobs)
    two = {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 100}
    rt.set_quotas({"flood": 2.0})
    jobs = [_submit(rt, f"f{i}", "flood", two) for i in range(1000)]
    rt.advance(rt.now + 1)
    assert rt.engine._resume is not None  # the pass over 1000 jobs was cut short
    other = _submit(rt, "other-1", "other", GPU)
    for _ in range(40):  # 1000 jobs, 128 a slice: a few runs to the end, then one from the top
        rt.advance(rt.now + 1)
        if other.state == JobState.RUNNING:
            break
    assert other.state == JobState.RUNNING, other.message
    assert sum(j.state == JobState.RUNNING for j in jobs) == 1  # the flood's quota: one 2-GPU job
    assert all(j.state == JobState.QUEUED for j in jobs if j.state != JobState.RUNNING)  # nothing lost
