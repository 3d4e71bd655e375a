"""Pending pods: an active queue ordered by (priority desc, arrival), and a backoff set for pods that did
not fit, moved back when the cluster changes (kube-scheduler's activeQ / unschedulable pods)."""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field

from gpucluster.model import Pod


@dataclass(order=True, slots=True)
class _Entry:
    priority: int
    seq: int
    pod: Pod = field(compare=False)


class SchedulingQueue:
    def __init__(self) -> None:
        self._active: list[_Entry] = []
        self._keys: set[str] = set()
        self._unschedulable: dict[str, Pod] = {}
        self._seq = itertools.count()

    def add(self, pod: Pod) -> None:
        if pod.key in self._keys or pod.key in self._unschedulable:
            return
        heapq.heappush(self._active, _Entry(-pod.priority, next(self._seq), pod))
        self._keys.add(pod.key)

    def pop(self) -> Pod | None:
        while self._active:
            entry = heapq.heappop(self._active)
            if entry.pod.key in self._keys:
                self._keys.discard(entry.pod.key)
                return entry.pod
        return None

    def park(self, pod: Pod) -> None:
        """The pod did not fit: keep it aside until the cluster changes."""
        self._unschedulable[pod.key] = pod

    def move_all_to_active(self) -> None:
        """Something was freed or added: retry every parked pod."""
        parked, self._unschedulable = self._unschedulable, {}
        for pod in parked.values():
            self.add(pod)

    def remove(self, key: str) -> None:
        self._keys.discard(key)
        self._unschedulable.pop(key, None)

    def __len__(self) -> int:
        return len(self._keys) + len(self._unschedulable)

    @property
    def pending(self) -> int:
        return len(self._keys)

    @property
    def parked(self) -> int:
        return len(self._unschedulable)
