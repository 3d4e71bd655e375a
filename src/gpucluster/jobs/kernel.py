"""The discrete-event kernel: a heap of ``(time, priority, seq, event)`` with a read-only ``now``.

Events at the same time run in ``priority`` order (lower first), then in the order they were scheduled
(``seq``), so a run is deterministic. Cancelling is lazy: a cancelled entry stays in the heap and is skipped
when it reaches the top.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable
from typing import Any, Generic, TypeVar

E = TypeVar("E")


class Kernel(Generic[E]):
    """Holds pending events and the simulated clock; the caller decides what an event does.

    ``step`` pops the next event and advances ``now`` to its time; time never goes backwards.
    """

    __slots__ = ("_cancelled", "_heap", "_now", "_seq")

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._heap: list[tuple[float, int, int, E]] = []
        self._seq = itertools.count()
        self._cancelled: set[int] = set()

    @property
    def now(self) -> float:
        """The current simulated time in seconds (read-only)."""
        return self._now

    def schedule(self, at: float, event: E, priority: int = 0) -> int:
        """Queue ``event`` for time ``at`` (not earlier than ``now``); returns its sequence number."""
        if math.isnan(at) or at < self._now:
            raise ValueError(f"cannot schedule an event at t={at} before now={self._now}")
        seq = next(self._seq)
        heapq.heappush(self._heap, (float(at), priority, seq, event))
        return seq

    def cancel(self, seq: int) -> None:
        """Drop a scheduled event (idempotent; unknown or already-run numbers are ignored)."""
        self._cancelled.add(seq)

    def _drop_cancelled(self) -> None:
        while self._heap and self._heap[0][2] in self._cancelled:
            self._cancelled.discard(heapq.heappop(self._heap)[2])

    def peek(self) -> float:
        """Time of the next live event, or ``inf`` when none is left."""
        self._drop_cancelled()
        return self._heap[0][0] if self._heap else math.inf

    def step(self) -> E | None:
        """Pop the next live event and advance the clock to it; ``None`` when the heap is empty."""
        self._drop_cancelled()
        if not self._heap:
            return None
        at, _, _, event = heapq.heappop(self._heap)
        self._now = at
        return event

    def advance(self, to: float) -> None:
        """Move the clock forward to ``to`` without running anything (must not skip a pending event)."""
        if to < self._now:
            raise ValueError(f"cannot move the clock back from {self._now} to {to}")
        if to > self.peek():
            raise ValueError(f"advancing to {to} would skip an event at {self.peek()}")
        self._now = float(to)

    def run(self, handler: Callable[[E], Any], until: float = math.inf) -> int:
        """Run events with time <= ``until`` through ``handler``; returns how many ran."""
        n = 0
        while (t := self.peek()) <= until and t != math.inf:
            event = self.step()
            assert event is not None
            handler(event)
            n += 1
        if until != math.inf and until > self._now:
            self._now = float(until)
        return n

    def __len__(self) -> int:
        return sum(1 for entry in self._heap if entry[2] not in self._cancelled)
