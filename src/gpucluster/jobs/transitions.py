"""The one place a job's state changes: ``transition(job, stimulus, now) -> events``.

Modelled on Dask's scheduler transitions table: every allowed (state, stimulus) pair has one handler, which
updates the job record (state, progress, counters, message) and returns the :class:`JobEvent` s it caused; any
other pair is a bug in the caller (:class:`InvalidTransitionError`). The handlers do no I/O and touch nothing but
the job: the engine that calls them carries out the side effects (placing pods, releasing them, timers).

| state | stimulus | next state | event |
|---|---|---|---|
| new | Arrive | queued | ``queued`` |
| new | Reject | failed | ``rejected`` |
| queued | Start | running | ``running`` |
| queued | Note | queued | ``unschedulable`` (when the message changes, or again with ``repeat``) |
| queued | Preempted | queued | ``preempted`` (counts a preemption that took effect) |
| running | Finish | succeeded | ``succeeded`` |
| running | Preempt | queued | (none: ``Preempted`` reports it once the claimant runs) |
| running | Evict | queued | ``evicted`` (rolls back to the last periodic checkpoint) |
| running | Move | running | ``migrated`` |
| new, queued, running | Cancel | cancelled | ``cancelled`` |
| new, queued, running | Fail | failed | ``failed`` |
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.jobs.model import Job, JobEvent, JobState


class InvalidTransitionError(RuntimeError):
    """A stimulus the job's state does not allow (a bug in the engine or a driver)."""


@dataclass(slots=True)
class Arrive:
    """The job's submit time has come: it joins the queue."""


@dataclass(slots=True)
class Reject:
    reason: str


@dataclass(slots=True)
class Start:
    """Every task was placed."""

    attempt: int
    nodes: tuple[str, ...]
    pod_keys: tuple[str, ...]
    run_start_s: float
    """When the work starts (now, plus a restart overhead)."""
    slowdown: float = 1.0
    placements: list[dict[str, Any]] = field(default_factory=list)
    held_gpus: float = 0.0
    bytes_moved: int = 0
    level: float | None = None
    """Topology level of the placement (the simulator's reports)."""


@dataclass(slots=True)
class Finish:
    message: str = ""


@dataclass(slots=True)
class Preempt:
    """Stopped to make room for another job; all progress is saved (a checkpoint on stop)."""

    why: str


@dataclass(slots=True)
class Preempted:
    """The preemption took effect (the claimant started, or the job could not be restarted)."""

    why: str


@dataclass(slots=True)
class Evict:
    """Stopped by a failure (node, device, drain): progress rolls back to the last periodic checkpoint."""

    why: str


@dataclass(slots=True)
class Cancel:
    why: str = "cancelled by request"


@dataclass(slots=True)
class Fail:
    why: str


@dataclass(slots=True)
class Note:
    """Still queued, for this reason (``unschedulable: ...``, ``waiting for quota: ...``). ``repeat``: report it
    again even when the reason did not change (the engine does so at most every ``NOTE_REPEAT_S``: the event's
    last-seen time; a store folds the repeats into one event with a count)."""

    message: str
    repeat: bool = False


@dataclass(slots=True)
class Move:
    """A running pod was moved (defragmentation)."""

    pod_key: str
    placement: dict[str, Any]
    message: str


Stimulus = Arrive | Reject | Start | Finish | Preempt | Preempted | Evict | Cancel | Fail | Note | Move
Handler = Callable[[Job, Any, float], list[JobEvent]]


def running_message(nodes: tuple[str, ...] | list[str]) -> str:
    if len(nodes) == 1:
        return "running on " + nodes[0]
    names = sorted(set(nodes))
    return f"running on {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}"


def _event(job: Job, now: float, kind: str, node: str = "") -> list[JobEvent]:
    return [JobEvent(job.spec.job_id, now, kind, job.state, job.message, node)]


def _stop(job: Job, now: float, failed: bool) -> None:
    """Account the run that ends now: attained service and saved work (a failure keeps only the last periodic
    checkpoint; any other stop saves everything)."""
    ran = max(now - job.run_start_s, 0.0)
    progress = job.progress_at(now) if now >= job.run_start_s else job.work_done_s
    job.attained_gpu_s += ran * job.spec.gpu_share
    if failed:
        interval = job.spec.checkpoint_interval_s
        saved = max(job.checkpoint_s, math.floor(progress / interval) * interval if interval > 0 else 0.0)
        saved = min(saved, progress)
        job.lost_work_s += progress - saved
        job.work_done_s = saved
    else:
        job.work_done_s = progress
    job.checkpoint_s = job.work_done_s


def _requeue(job: Job, now: float, message: str) -> None:
    job.state = JobState.QUEUED
    job.queued_since_s = now
    job.run_start_s = -1.0
    job.nodes = job.pod_keys = ()
    job.placements = []
    job.held_gpus = 0.0
    job.message = message


def _arrive(job: Job, s: Arrive, now: float) -> list[JobEvent]:
    job.state = JobState.QUEUED
    job.queued_since_s = now
    job.message = "waiting to be scheduled"
    return _event(job, now, "queued")


def _reject(job: Job, s: Reject, now: float) -> list[JobEvent]:
    job.state = JobState.FAILED
    job.finish_s = now
    job.message = s.reason
    return _event(job, now, "rejected")


def _start(job: Job, s: Start, now: float) -> list[JobEvent]:
    job.state = JobState.RUNNING
    job.attempt = s.attempt
    if job.first_start_s < 0:
        job.first_start_s = now
    job.queue_s += now - job.queued_since_s
    job.nodes = s.nodes
    job.pod_keys = s.pod_keys
    job.placements = s.placements
    job.held_gpus = s.held_gpus
    job.bytes_moved += s.bytes_moved
    job.slowdown = s.slowdown
    if s.level is not None:
        job.extra["level"] = s.level
    job.run_start_s = s.run_start_s
    job.message = running_message(s.nodes)
    return _event(job, now, "running", ",".join(s.nodes))


def _note(job: Job, s: Note, now: float) -> list[JobEvent]:
    if job.message == s.message and not s.repeat:
        return []
    job.message = s.message
    job.noted_s = now
    return _event(job, now, "unschedulable")


def _preempted(job: Job, s: Preempted, now: float) -> list[JobEvent]:
    job.preemptions += 1
    return [JobEvent(job.spec.job_id, now, "preempted", job.state, f"preempted {s.why}")]


def _finish(job: Job, s: Finish, now: float) -> list[JobEvent]:
    job.attained_gpu_s += max(now - job.run_start_s, 0.0) * job.spec.gpu_share
    job.work_done_s = job.spec.duration_s
    job.state = JobState.SUCCEEDED
    job.finish_s = now
    job.message = s.message or (f"completed after {now - job.run_start_s:g} s" if job.run_start_s >= 0
                                else "completed")
    return _event(job, now, "succeeded")


def _preempt(job: Job, s: Preempt, now: float) -> list[JobEvent]:
    _stop(job, now, failed=False)
    _requeue(job, now, f"preempted {s.why}; re-queued")
    return []


def _evict(job: Job, s: Evict, now: float) -> list[JobEvent]:
    _stop(job, now, failed=True)
    job.failures += 1
    _requeue(job, now, f"evicted: {s.why}; re-queued")
    return _event(job, now, "evicted")


def _end(job: Job, now: float, state: JobState, message: str) -> None:
    if job.state == JobState.RUNNING:
        _stop(job, now, failed=False)
    job.state = state
    job.finish_s = now
    job.held_gpus = 0.0
    job.message = message


def _cancel(job: Job, s: Cancel, now: float) -> list[JobEvent]:
    _end(job, now, JobState.CANCELLED, s.why)
    return _event(job, now, "cancelled")


def _fail(job: Job, s: Fail, now: float) -> list[JobEvent]:
    _end(job, now, JobState.FAILED, s.why)
    return _event(job, now, "failed")


def _move(job: Job, s: Move, now: float) -> list[JobEvent]:
    job.placements = [s.placement if p["pod"] == s.pod_key else p for p in job.placements]
    job.nodes = tuple(p["node"] for p in job.placements) or job.nodes
    job.message = running_message(job.nodes)
    return [JobEvent(job.spec.job_id, now, "migrated", job.state, f"{s.message}; {job.message}", s.placement["node"])]


_NEW, _QUEUED, _RUNNING = JobState.NEW, JobState.QUEUED, JobState.RUNNING
TRANSITIONS: Mapping[tuple[JobState, type], Handler] = {
    (_NEW, Arrive): _arrive,
    (_NEW, Reject): _reject,
    (_NEW, Cancel): _cancel,
    (_NEW, Fail): _fail,
    (_QUEUED, Start): _start,
    (_QUEUED, Note): _note,
    (_QUEUED, Preempted): _preempted,
    (_QUEUED, Cancel): _cancel,
    (_QUEUED, Fail): _fail,
    (_RUNNING, Finish): _finish,
    (_RUNNING, Preempt): _preempt,
    (_RUNNING, Evict): _evict,
    (_RUNNING, Move): _move,
    (_RUNNING, Cancel): _cancel,
    (_RUNNING, Fail): _fail,
}
"""(state, stimulus type) -> handler; the module docstring's table."""


def transition(job: Job, stimulus: Stimulus, now: float) -> list[JobEvent]:
    """Apply ``stimulus`` to ``job`` at ``now``; returns the events it caused. Raises
    :class:`InvalidTransitionError` for a pair the table does not allow."""
    handler = TRANSITIONS.get((job.state, type(stimulus)))
    if handler is None:
        raise InvalidTransitionError(f"job {job.spec.job_id}: {type(stimulus).__name__} is not allowed when "
                                f"{job.state.value}")
    events = handler(job, stimulus, now)
    if job.tally is not None:  # the engine's counts (jobs.tally) follow every change
        job.tally.moved(job)
    return events
