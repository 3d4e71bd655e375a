"""How long the control plane keeps finished jobs in memory (``up --finished-job-ttl``, ``--max-finished-jobs``).

A long-running control plane sees jobs without end; kept in memory for ever, every finished one costs memory and
the job list and the overview slow down with them. Like Kubernetes' ``ttlSecondsAfterFinished`` and Slurm's
``MinJobAge``/``MaxJobCount``, a finished (succeeded, failed, cancelled) job leaves memory once it has been finished
for :attr:`JobRetention.max_age_s` clock seconds, or once more than :attr:`JobRetention.max_finished` finished jobs
are held (the longest finished leave first). Pending and running jobs never leave. The store keeps every job and its
events, so a job that left memory still reads back by id (``GET /api/v1/jobs/{id}``, ``gpucluster describe job``)
from the store, as Slurm's ``sacct`` reads what ``squeue`` no longer shows.

:class:`FinishedJobs` is the rule, kept incrementally: a queue of (time it was seen finished, job id) in the order
the jobs finished, so a tick pops the jobs due and looks at nothing else (no scan of the jobs).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

DEFAULT_MAX_AGE_S = 24 * 3600.0
"""Clock seconds a finished job stays in memory (as Kubernetes' TTL-after-finished controller, a day by default)."""
DEFAULT_MAX_FINISHED = 10_000
"""Finished jobs kept in memory at most (Slurm's ``MaxJobCount`` default is 10,000 jobs in all)."""


@dataclass(frozen=True, slots=True)
class JobRetention:
    """Which finished jobs the control plane keeps in memory (pending and running ones always stay)."""

    max_age_s: float = DEFAULT_MAX_AGE_S
    """A finished job leaves memory this many runtime clock seconds after it finished (wall seconds at ``--speed``
    1 and on Kubernetes); ``inf``: never for its age. ``up --finished-job-ttl``."""
    max_finished: int = DEFAULT_MAX_FINISHED
    """At most this many finished jobs stay in memory; beyond it the longest finished leave first. ``up
    --max-finished-jobs``."""

    def __post_init__(self) -> None:
        if math.isnan(self.max_age_s) or self.max_age_s < 0:
            raise ValueError(f"max_age_s: must be >= 0 (inf: no age limit), got {self.max_age_s!r}")
        if self.max_finished < 0:
            raise ValueError(f"max_finished: must be >= 0, got {self.max_finished!r}")


class FinishedJobs:
    """The finished jobs held in memory, in the order they finished, and which of them are due to leave.

    :meth:`note` a job once it is finished (again: ignored); :meth:`due` pops the ids that are past the
    :class:`JobRetention` at a time. Times given to :meth:`note` are clamped to never go backwards, so the queue is
    sorted by construction and :meth:`due` looks only at its head: O(1) per job that leaves, whatever is held."""

    __slots__ = ("_held", "_last", "_queue", "retention")

    def __init__(self, retention: JobRetention) -> None:
        self.retention = retention
        self._queue: deque[tuple[float, str]] = deque()
        self._held: set[str] = set()
        self._last = -math.inf

    def __len__(self) -> int:
        return len(self._queue)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._held

    def note(self, job_id: str, t: float) -> bool:
        """``job_id`` finished at clock time ``t`` (at the latest time noted so far, if that is later); False when
        it was noted before."""
        if job_id in self._held:
            return False
        self._last = max(self._last, t)
        self._queue.append((self._last, job_id))
        self._held.add(job_id)
        return True

    def due(self, now: float) -> list[str]:
        """Pop and return the ids past the retention at clock time ``now``: finished at or before ``now -
        max_age_s``, or beyond the ``max_finished`` newest; the longest finished first."""
        out: list[str] = []
        queue, held = self._queue, self._held
        cutoff = now - self.retention.max_age_s
        while queue and (len(queue) > self.retention.max_finished or queue[0][0] <= cutoff):
            _, job_id = queue.popleft()
            held.discard(job_id)
            out.append(job_id)
        return out


__all__ = ["DEFAULT_MAX_AGE_S", "DEFAULT_MAX_FINISHED", "FinishedJobs", "JobRetention"]
