from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.jobs.kernel import Kernel


def test_events_run_in_time_priority_then_fifo_order() -> None:
    k: Kernel[str] = Kernel()
    k.schedule(5, "late")
    k.schedule(1, "b", priority=1)
    k.schedule(1, "a", priority=0)
    k.schedule(1, "c", priority=1)
    seen: list[tuple[float, str]] = []
    k.run(lambda e: seen.append((k.now, e)))
    assert seen == [(1, "a"), (1, "b"), (1, "c"), (5, "late")]


def test_now_is_read_only_and_never_goes_back() -> None:
    k: Kernel[str] = Kernel()
    with pytest.raises(AttributeError):
        k.now = 3  # type: ignore[misc]
    k.schedule(2, "x")
    k.step()
    with pytest.raises(ValueError, match="before now"):
        k.schedule(1, "past")


def test_cancel_skips_the_event_and_run_until_stops_at_the_bound() -> None:
    k: Kernel[str] = Kernel()
    seq = k.schedule(1, "gone")
    k.schedule(2, "kept")
    k.schedule(10, "later")
    k.cancel(seq)
    assert len(k) == 2
    seen: list[str] = []
    assert k.run(seen.append, until=5) == 1
    assert seen == ["kept"] and k.now == 5
    assert k.peek() == 10
    with pytest.raises(ValueError, match="skip"):
        k.advance(11)


@given(st.lists(st.tuples(st.floats(0, 1e6), st.integers(0, 3)), max_size=60))
def test_time_is_monotonic_for_any_schedule(items: list[tuple[float, int]]) -> None:
    k: Kernel[int] = Kernel()
    for n, (t, p) in enumerate(items):
        k.schedule(t, n, priority=p)
    last = -math.inf
    count = 0
    while (e := k.step()) is not None:
        assert k.now >= last
        last = k.now
        count += 1
        assert e is not None
    assert count == len(items)
