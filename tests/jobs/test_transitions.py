"""``transition`` is the only place a job's state changes: the table says which stimulus is allowed in which
state, anything else is refused, and the record stays consistent whatever sequence of stimuli arrives."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import InvalidTransitionError, Job, JobSpec, JobState, transition
from gpucluster.jobs.transitions import (
    TRANSITIONS,
    Arrive,
    Cancel,
    Evict,
    Fail,
    Finish,
    Move,
    Note,
    Preempt,
    Preempted,
    Reject,
    Start,
    Stimulus,
)

SAMPLES: dict[type, Stimulus] = {
    Arrive: Arrive(), Reject: Reject("too big"), Finish: Finish(), Preempt: Preempt("for b"),
    Preempted: Preempted("for b"), Evict: Evict("node_down:n1"), Cancel: Cancel(), Fail: Fail("pod failed"),
    Note: Note("unschedulable: 0/4 nodes are available"),
    Start: Start(1, ("n1", "n2"), ("t/a-1-0", "t/a-1-1"), 0.0),
    Move: Move("t/a-1-0", {"pod": "t/a-1-0", "node": "n3", "devices": []}, "moved"),
}


def _job() -> Job:
    return Job(JobSpec("a", 0.0, 16, 1000.0, tenant="t", checkpoint_interval_s=100.0))


def _in(state: JobState) -> Job:
    job = _job()
    path = {JobState.NEW: [], JobState.QUEUED: [Arrive()], JobState.RUNNING: [Arrive(), SAMPLES[Start]],
            JobState.SUCCEEDED: [Arrive(), SAMPLES[Start], Finish()], JobState.FAILED: [Reject("x")],
            JobState.CANCELLED: [Cancel()]}[state]
    for s in path:
        transition(job, s, 0.0)
    assert job.state == state
    return job


@pytest.mark.parametrize(("state", "kind"), list(itertools.product(JobState, SAMPLES)))
def test_the_table_decides_what_is_allowed(state: JobState, kind: type) -> None:
    job = _in(state)
    if (state, kind) not in TRANSITIONS:
        with pytest.raises(InvalidTransitionError, match=f"{kind.__name__} is not allowed when {state.value}"):
            transition(job, SAMPLES[kind], 5.0)
        assert job.state == state
        return
    events = transition(job, SAMPLES[kind], 5.0)
    assert all(e.job_id == "a" and e.t == 5.0 and e.state == job.state for e in events)
    assert not state.terminal


def test_an_eviction_rolls_back_to_the_checkpoint_and_a_preemption_keeps_everything() -> None:
    job = _in(JobState.RUNNING)
    [ev] = transition(job, Evict("node_down:n1"), 250.0)
    assert (ev.kind, job.state, job.work_done_s, job.lost_work_s, job.failures) == (
        "evicted", JobState.QUEUED, 200.0, 50.0, 1)
    assert job.message == "evicted: node_down:n1; re-queued" and job.nodes == () and job.started_t is None
    transition(job, Start(2, ("n3",), ("t/a-2-0",), 300.0), 300.0)
    assert transition(job, Preempt("for b"), 330.0) == []  # reported once it takes effect
    assert job.work_done_s == 230.0 and job.preemptions == 0
    [ev] = transition(job, Preempted("for b"), 330.0)
    assert (ev.kind, job.preemptions, ev.message) == ("preempted", 1, "preempted for b")
    assert job.attained_gpu_s == pytest.approx(16 * (250 + 30))


def test_a_note_is_an_event_only_when_the_reason_changes() -> None:
    job = _in(JobState.QUEUED)
    assert [e.kind for e in transition(job, Note("waiting for quota: x"), 1.0)] == ["unschedulable"]
    assert transition(job, Note("waiting for quota: x"), 2.0) == []
    assert job.status == "pending" and job.to_dict()["message"] == "waiting for quota: x"


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(sorted(SAMPLES, key=lambda k: k.__name__)),
                          st.floats(0.0, 50.0)), max_size=30))
def test_any_sequence_keeps_the_record_consistent(steps: list[tuple[type, float]]) -> None:
    job = _job()
    now = 0.0
    starts = 0
    for kind, dt in steps:
        now += dt
        before = job.state
        stim = SAMPLES[kind]
        if kind is Start:
            stim = Start(job.attempt + 1, ("n1", "n2"), ("t/a-0", "t/a-1"), now)
        try:
            events = transition(job, stim, now)
        except InvalidTransitionError:
            assert (before, kind) not in TRANSITIONS and job.state == before
            continue
        starts += kind is Start
        assert not before.terminal  # an ended job never changes again
        assert all(e.state == job.state for e in events)
        assert 0.0 <= job.work_done_s <= job.spec.duration_s and job.queue_s >= 0.0
        assert job.attempt == starts
        assert (job.state == JobState.RUNNING) == bool(job.pod_keys) or job.state.terminal
        if job.state.terminal:
            assert job.finish_s == now
