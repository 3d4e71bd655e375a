"""The scheduler's cache: the cluster state plus *assumed* allocations.

A decision is assumed (its resources taken) the moment it is made, before the binding finishes, so two
concurrent decisions never share a device. An assumed allocation is confirmed when the bind succeeds (or the
API server shows the pod bound), forgotten when the bind fails, and expires after ``ttl`` seconds if neither
happens (as kube-scheduler's cache does).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from gpucluster.model import Allocation, ClusterState


@dataclass(slots=True)
class _Assumed:
    allocation: Allocation
    deadline: float


class SchedulerCache:
    def __init__(self, state: ClusterState, clock: Callable[[], float], ttl: float = 30.0,
                 lock: threading.RLock | None = None) -> None:
        self.state = state
        self.clock = clock
        self.ttl = ttl
        self.lock = lock or threading.RLock()
        """Held by whoever reads a snapshot and assumes from it, so decisions are serialised."""
        self._assumed: dict[str, _Assumed] = {}
        self._next_deadline = float("inf")
        """No assumption expires before this (a lower bound: ``expire`` scans only once it has passed)."""

    def assume(self, allocation: Allocation) -> None:
        """Take the allocation's resources now; raises ``AllocationError`` if they are gone."""
        with self.lock:
            self.state.assign(allocation)
            deadline = self.clock() + self.ttl
            self._assumed[allocation.pod_key] = _Assumed(allocation, deadline)
            self._next_deadline = min(self._next_deadline, deadline)

    def confirm(self, pod_key: str) -> None:
        """The pod is bound for good: its allocation no longer expires."""
        with self.lock:
            self._assumed.pop(pod_key, None)

    def forget(self, pod_key: str) -> Allocation | None:
        """Binding failed: give the resources back (only if still merely assumed)."""
        with self.lock:
            if self._assumed.pop(pod_key, None) is None:
                return None
            return self.state.release(pod_key)

    def remove(self, pod_key: str) -> Allocation | None:
        """The pod is gone (deleted or finished): give its resources back."""
        with self.lock:
            self._assumed.pop(pod_key, None)
            if pod_key in self.state.allocations:
                return self.state.release(pod_key)
            return None

    def is_assumed(self, pod_key: str) -> bool:
        return pod_key in self._assumed

    def expire(self) -> list[Allocation]:
        """Release assumed allocations whose deadline has passed; returns them."""
        now = self.clock()
        with self.lock:
            if now < self._next_deadline:  # every request calls this: O(1) until something can expire
                return []
            gone = [k for k, a in self._assumed.items() if a.deadline <= now]
            self._next_deadline = min((a.deadline for k, a in self._assumed.items() if a.deadline > now),
                                      default=float("inf"))
            return [a for a in (self.forget(k) for k in gone) if a is not None]
