"""Counts over an engine's jobs kept as the jobs change, so reading them costs nothing per job.

The control plane reads, every tick and every request, how many jobs are in each state, what each tenant holds and
asks, and how many pods wait and since when. Counted by a scan of every job, a tenant with 10,000 queued jobs made
each of those reads cost milliseconds (issue 28). :class:`JobTable` is the engine's ``jobs`` dict: a job put in it
is counted by its :class:`JobTally`, and every state change of a job in it is told to the tally by
:func:`gpucluster.jobs.transitions.transition` (the one place a job's state changes; it calls
``job.tally.moved(job)``), so the counts are kept exact by construction. ``tests/jobs/test_tally.py`` checks, after
any sequence of submissions, ticks, cancellations, failures, quota changes and forgotten jobs, that every count
equals a full recount (:func:`recount`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from typing import Any

from gpucluster.jobs.model import Job, JobState

_RUNNING, _NEW, _QUEUED = JobState.RUNNING, JobState.NEW, JobState.QUEUED
_USAGE_KEYS = ("gpus", "pending_gpus", "running", "pending")


def _waits_since(job: Job) -> float:
    """When a waiting job started to wait, as :meth:`JobViews.queue_stats` has always read it."""
    return job.queued_since_s if job.state == _QUEUED else job.spec.submit_s


class JobTally:
    """Jobs per state (all, and the user's), each tenant's live usage and the waiting pods, kept per change.

    A job's contribution is remembered as it was last counted, so a change is one subtraction and one addition,
    whatever changed (state, held GPUs). A tenant with no live job left has no usage row (as a recount gives)."""

    __slots__ = ("_of", "_usage", "_waiting", "pending_pods", "placed", "states", "user_states")

    def __init__(self) -> None:
        self._of: dict[str, tuple[JobState, bool, str, float, int, float | None]] = {}
        """Job id -> (state, synthetic, tenant, GPUs, pods, waiting since or None) as last counted."""
        self.states: dict[JobState, int] = dict.fromkeys(JobState, 0)
        self.user_states: dict[JobState, int] = dict.fromkeys(JobState, 0)
        self._usage: dict[str, list[float]] = {}
        """Tenant -> [held GPUs, asked GPUs, running jobs, pending jobs] of its live jobs."""
        self.pending_pods = 0
        """Pods of the new and queued jobs."""
        self._waiting: list[tuple[float, str]] = []
        """(waiting since, job id) of the waiting jobs: a heap whose stale entries (the job runs, or waits since
        another time) are dropped when they reach the top, and all at once when they outnumber the live ones."""
        self.placed: dict[str, Job] = {}
        """The jobs that have a placement (``nodes``: running, or ended after a run), by id: what the overview's
        training share reads, without the jobs that never ran."""

    # ------------------------------------------------------------------ bookkeeping
    def add(self, job: Job) -> None:
        """Count ``job`` (it joined the table) and watch its changes."""
        job.tally = self
        self.moved(job)

    def remove(self, job: Job) -> None:
        """Stop counting ``job`` (it left the table)."""
        self._uncount(job.spec.job_id)
        self.placed.pop(job.spec.job_id, None)
        if job.tally is self:
            job.tally = None

    def moved(self, job: Job) -> None:
        """``job`` changed (state, held GPUs): count it as it is now."""
        was = self._uncount(job.spec.job_id)
        since = self._count(job)
        if since is not None and (was is None or was[5] != since):
            heapq.heappush(self._waiting, (since, job.spec.job_id))
            if len(self._waiting) > 64 + 2 * (self.states[_NEW] + self.states[_QUEUED]):
                self._waiting = [(w[5], jid) for jid, w in self._of.items() if w[5] is not None]
                heapq.heapify(self._waiting)

    def _count(self, job: Job) -> float | None:
        spec = job.spec
        state = job.state
        gpus = job.gpus
        since: float | None = None
        self.states[state] += 1
        if not spec.synthetic:
            self.user_states[state] += 1
        if not state.terminal:
            use = self._usage.get(spec.tenant)
            if use is None:
                use = self._usage[spec.tenant] = [0.0, 0.0, 0.0, 0.0]
            if state == _RUNNING:
                use[0] += gpus
                use[2] += 1
            else:
                use[1] += gpus
                use[3] += 1
                self.pending_pods += spec.num_tasks
                since = _waits_since(job)
        self._of[spec.job_id] = (state, spec.synthetic, spec.tenant, gpus, spec.num_tasks, since)
        if job.nodes:
            self.placed[spec.job_id] = job
        else:
            self.placed.pop(spec.job_id, None)
        return since

    def _uncount(self, job_id: str) -> tuple[JobState, bool, str, float, int, float | None] | None:
        was = self._of.pop(job_id, None)
        if was is None:
            return None
        state, synthetic, tenant, gpus, pods, _ = was
        self.states[state] -= 1
        if not synthetic:
            self.user_states[state] -= 1
        if state.terminal:
            return was
        use = self._usage[tenant]
        if state == _RUNNING:
            use[0] -= gpus
            use[2] -= 1
        else:
            use[1] -= gpus
            use[3] -= 1
            self.pending_pods -= pods
        if use[2] == 0 and use[3] == 0:
            del self._usage[tenant]  # no live job left: no row, and no rounding left over from the sums
        elif use[2] == 0:
            use[0] = 0.0
        elif use[3] == 0:
            use[1] = 0.0
        return was

    # ------------------------------------------------------------------ reads
    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        """Tenant -> {"gpus": held, "pending_gpus": asked by waiting jobs, "running": n, "pending": n} of the
        tenants with live jobs (a fresh dict: the caller may keep it)."""
        return {t: dict(zip(_USAGE_KEYS, u, strict=True)) for t, u in self._usage.items()}

    def pending(self, tenant: str) -> int:
        """The tenant's new and queued jobs."""
        use = self._usage.get(tenant)
        return 0 if use is None else int(use[3])

    def oldest_wait_since(self) -> float | None:
        """When the job that has waited longest started to wait (None: nothing waits)."""
        heap, of = self._waiting, self._of
        while heap:
            since, jid = heap[0]
            now = of.get(jid)
            if now is not None and now[5] == since:
                return since
            heapq.heappop(heap)
        return None


class JobTable(dict[str, Job]):
    """The engine's jobs by id; every job put in is counted by :attr:`tally` (see the module docstring)."""

    tally: JobTally

    def __init__(self) -> None:
        super().__init__()
        self.tally = JobTally()

    def __setitem__(self, job_id: str, job: Job) -> None:
        old = self.get(job_id)
        if old is not None:
            self.tally.remove(old)
        super().__setitem__(job_id, job)
        self.tally.add(job)

    def __delitem__(self, job_id: str) -> None:
        job = self[job_id]
        super().__delitem__(job_id)
        self.tally.remove(job)

    def pop(self, job_id: str, *default: Any) -> Any:
        if job_id not in self:
            return super().pop(job_id, *default)
        job = self[job_id]
        del self[job_id]
        return job

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError("JobTable: add jobs one at a time (table[id] = job) and remove them with del or pop")

    update = setdefault = popitem = clear = __ior__ = _refuse


def recount(jobs: Iterable[Job]) -> tuple[dict[JobState, int], dict[JobState, int], dict[str, dict[str, float]],
                                          int, float | None, set[str]]:
    """What :class:`JobTally` keeps, counted from scratch over ``jobs``: (jobs per state, user jobs per state,
    usage by tenant, pending pods, oldest wait start, ids of the placed jobs)."""
    states: dict[JobState, int] = dict.fromkeys(JobState, 0)
    user: dict[JobState, int] = dict.fromkeys(JobState, 0)
    usage: dict[str, dict[str, float]] = {}
    pods = 0
    oldest: float | None = None
    placed: set[str] = set()
    for job in jobs:
        states[job.state] += 1
        if job.nodes:
            placed.add(job.job_id)
        if not job.spec.synthetic:
            user[job.state] += 1
        if job.state.terminal:
            continue
        u = usage.setdefault(job.tenant, dict.fromkeys(_USAGE_KEYS, 0.0))
        if job.state == _RUNNING:
            u["gpus"] += job.gpus
            u["running"] += 1
        else:
            u["pending_gpus"] += job.gpus
            u["pending"] += 1
            pods += job.replicas
            since = _waits_since(job)
            oldest = since if oldest is None else min(oldest, since)
    return states, user, usage, pods, oldest, placed
