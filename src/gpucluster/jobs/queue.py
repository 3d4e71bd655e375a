"""The job engine's queue: queued job ids kept in the queue policy's order, and grouped.

An entry is ``(key, seq, job id)``: the policy's queue key (its whole key, or for a ``dynamic`` policy the part
that does not move: :meth:`~gpucluster.jobs.policies.QueuePolicy.queue_key`), then arrival order among equal keys
(``seq`` counts every insertion). :class:`JobQueue` keeps the entries sorted and counts the queued jobs that ask
for no GPU (they may start while every GPU is busy).

It also keeps the entries grouped by what the engine's ``grouper`` says of each job (the engine groups jobs that
a scheduling pass treats alike: one shape, one tenant, one preemption rank), each group's entries sorted too, so
a pass can take a group that waits as a whole instead of looking at each of its jobs (``groups``), and note the
reason of only the jobs that joined a group since (``fresh``).

A dynamic policy's order moves with its tenants' standing, never inside a tenant: the engine's groups hold one
tenant each, so each group stays sorted by its whole keys too, and the policy's order is the groups merged by
their whole keys (``compose(queue key, the group's tenant part)``): :meth:`JobQueue.parts` and
:meth:`JobQueue.ordered`, with one standing read per tenant and no re-sort.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from gpucluster.jobs.model import Job
from gpucluster.jobs.policies import Key

Entry = tuple[Key, int, str]
"""(policy key, insertion sequence, job id)."""
Grouper = Callable[[str, Key], Hashable]
"""(job id, policy key) -> the group the queued job belongs to."""


def _no_group(job_id: str, key: Key) -> Hashable:
    return None


class JobQueue:
    """Queued jobs in queue-key order (iterate for the entries, best first: the policy's order unless it is
    dynamic, :meth:`ordered`), and in groups."""

    __slots__ = ("_entries", "_entry", "_group", "_grouper", "fresh", "gpuless", "gpus", "groups", "keep_fresh",
                 "noted", "seq", "whole_tasks")

    def __init__(self, grouper: Grouper = _no_group, *, keep_fresh: bool = False) -> None:
        self._entries: list[Entry] = []
        self._entry: dict[str, Entry] = {}
        self._grouper = grouper
        self._group: dict[str, Hashable] = {}
        self.seq = 0
        """The sequence number the next insertion gets (entries with a smaller one were queued before)."""
        self.groups: dict[Hashable, list[Entry]] = {}
        """Group -> its entries, best first (a group with no entry left is dropped)."""
        self.keep_fresh = keep_fresh
        """Keep ``fresh`` (an engine that notes why jobs wait)."""
        self.fresh: dict[Hashable, list[str]] = {}
        """Group -> the job ids that joined it since the engine last took them (to note their reason); empty
        unless ``keep_fresh``."""
        self.noted: dict[Hashable, tuple[Any, float]] = {}
        """Group -> (what the engine last said of its jobs, when): kept here so it goes with the group."""
        self.gpuless = 0
        """Queued jobs that ask for no GPU."""
        self.gpus = 0.0
        """GPUs the queued jobs ask for (their GPU shares summed)."""
        self.whole_tasks: dict[int, int] = {}
        """Task size (whole GPUs per task) -> queued jobs of whole GPUs with tasks of that size (a size with no
        job left is dropped): :meth:`largest_whole_task` reads it."""

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

    def entry(self, job_id: str) -> Entry:
        """The entry ``job_id`` is queued under."""
        return self._entry[job_id]

    def group_of(self, job_id: str) -> Hashable:
        """The group ``job_id`` is queued in."""
        return self._group[job_id]

    def ids(self) -> list[str]:
        """Queued job ids, best first (by queue key)."""
        return [jid for _, _, jid in self._entries]

    def push(self, job: Job, key: Key) -> None:
        """Queue ``job`` under ``key`` (after the jobs already queued under an equal key)."""
        if job.spec.gpu_share <= 0:
            self.gpuless += 1
        else:
            self.gpus += job.spec.gpu_share
            if job.spec.whole and job.spec.task_gpus > 0:
                size = job.spec.task_gpus
                self.whole_tasks[size] = self.whole_tasks.get(size, 0) + 1
        self._insert(key, job.job_id)

    def remove(self, job: Job) -> None:
        """Take ``job`` out of the queue (it must be queued)."""
        if job.spec.gpu_share <= 0:
            self.gpuless -= 1
        else:
            self.gpus = max(self.gpus - job.spec.gpu_share, 0.0) if len(self._entries) > 1 else 0.0
            if job.spec.whole and job.spec.task_gpus > 0:
                size = job.spec.task_gpus
                left = self.whole_tasks[size] - 1
                if left:
                    self.whole_tasks[size] = left
                else:
                    del self.whole_tasks[size]
        self._unlink(job.job_id)

    def largest_whole_task(self) -> int:
        """The most whole GPUs one task of a queued job asks for on one node (0 when no queued job asks for whole
        GPUs)."""
        return max(self.whole_tasks, default=0)

    def whole_jobs(self, size: int) -> int:
        """Queued jobs of whole GPUs whose tasks ask for at least ``size`` GPUs each."""
        return sum(n for k, n in self.whole_tasks.items() if k >= size)

    def rekey(self, job_id: str, key: Key) -> None:
        """Queue ``job_id`` again under ``key`` (its policy key changed while it waited)."""
        self._unlink(job_id)
        self._insert(key, job_id)

    def parts(self, jobs: Mapping[str, Job], part: Callable[[str], Key]) -> dict[Hashable, Key]:
        """Group -> ``part(tenant)`` of the tenant its jobs belong to (a dynamic policy's tenant part of the key;
        the grouper keeps one tenant per group), asked once per tenant."""
        of_tenant: dict[str, Key] = {}
        out: dict[Hashable, Key] = {}
        for g, members in self.groups.items():
            tenant = jobs[members[0][2]].spec.tenant
            p = of_tenant.get(tenant)
            if p is None:
                p = of_tenant[tenant] = part(tenant)
            out[g] = p
        return out

    def ordered(self, parts: Mapping[Hashable, Key], compose: Callable[[Key, Key], Key]) -> Iterator[Entry]:
        """The entries with their whole keys ``(compose(queue key, parts[group]), seq, job id)``, best first: each
        group's entries in their order, the groups merged (a dynamic policy's order, without a sort)."""
        return heapq.merge(*[[(compose(k, part), s, jid) for k, s, jid in self.groups[g]]
                             for g, part in parts.items()])

    def _insert(self, key: Key, job_id: str) -> None:
        entry = (key, self.seq, job_id)
        self.seq += 1
        bisect.insort(self._entries, entry)
        self._entry[job_id] = entry
        g = self._grouper(job_id, key)
        self._group[job_id] = g
        members = self.groups.get(g)
        if members is None:
            self.groups[g] = [entry]
        else:
            bisect.insort(members, entry)
        if self.keep_fresh:
            self.fresh.setdefault(g, []).append(job_id)

    def _unlink(self, job_id: str) -> None:
        entry = self._entry.pop(job_id)
        i = bisect.bisect_left(self._entries, entry)
        assert self._entries[i] == entry
        del self._entries[i]
        g = self._group.pop(job_id)
        members = self.groups[g]
        k = bisect.bisect_left(members, entry)
        assert members[k] == entry
        del members[k]
        if not members:
            del self.groups[g]
            self.noted.pop(g, None)
            self.fresh.pop(g, None)
