"""The job engine's queue: queued job ids kept in the queue policy's order.

An entry is ``(key, seq, job id)``: the policy's key, then arrival order among equal keys (``seq`` counts every
insertion). :class:`JobQueue` keeps the entries sorted and counts the queued jobs that ask for no GPU (they may
start while every GPU is busy).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator

from gpucluster.jobs.model import Job
from gpucluster.jobs.policies import Key

Entry = tuple[Key, int, str]
"""(policy key, insertion sequence, job id)."""


class JobQueue:
    """Queued jobs in policy order (iterate for the entries, best first)."""

    __slots__ = ("_entries", "_entry", "_seq", "gpuless", "gpus")

    def __init__(self) -> None:
        self._entries: list[Entry] = []
        self._entry: dict[str, Entry] = {}
        self._seq = itertools.count()
        self.gpuless = 0
        """Queued jobs that ask for no GPU."""
        self.gpus = 0.0
        """GPUs the queued jobs ask for (their GPU shares summed)."""

    def __iter__(self) -> Iterator[Entry]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __bool__(self) -> bool:
        return bool(self._entries)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._entry

    def key(self, job_id: str) -> Key:
        """The key ``job_id`` is queued under."""
        return self._entry[job_id][0]

    def ids(self) -> list[str]:
        """Queued job ids, best first."""
        return [jid for _, _, jid in self._entries]

    def push(self, job: Job, key: Key) -> None:
        """Queue ``job`` under ``key`` (after the jobs already queued under an equal key)."""
        if job.spec.gpu_share <= 0:
            self.gpuless += 1
        else:
            self.gpus += job.spec.gpu_share
        self._insert(key, job.job_id)

    def remove(self, job: Job) -> None:
        """Take ``job`` out of the queue (it must be queued)."""
        if job.spec.gpu_share <= 0:
            self.gpuless -= 1
        else:
            self.gpus = max(self.gpus - job.spec.gpu_share, 0.0) if len(self._entries) > 1 else 0.0
        self._unlink(job.job_id)

    def rekey(self, job_id: str, key: Key) -> None:
        """Queue ``job_id`` again under ``key`` (its policy key changed while it waited)."""
        self._unlink(job_id)
        self._insert(key, job_id)

    def resort(self, key: Callable[[str], Key]) -> None:
        """Key every queued job again with ``key`` (a dynamic policy's keys move with the cluster); jobs
        keep their insertion order among equal keys."""
        self._entries = sorted((key(jid), s, jid) for _, s, jid in self._entries)
        self._entry = {e[2]: e for e in self._entries}

    def _insert(self, key: Key, job_id: str) -> None:
        entry = (key, next(self._seq), job_id)
        bisect.insort(self._entries, entry)
        self._entry[job_id] = entry

    def _unlink(self, job_id: str) -> None:
        entry = self._entry.pop(job_id)
        i = bisect.bisect_left(self._entries, entry)
        assert self._entries[i] == entry
        del self._entries[i]
