"""Fixtures that make threads race: fast thread switching and a rendezvous right before ``assume``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from gpucluster.model import Allocation
from gpucluster.scheduler.cache import SchedulerCache

from .helpers import Rendezvous


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Let the interpreter switch threads every microsecond (the default is every 5 ms) during the test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch) -> Rendezvous:
    """A rendezvous between a decision (made from a snapshot) and its ``SchedulerCache.assume``: without the
    locks that serialise deciding and assuming, two concurrent decisions meet here, both made from the same
    snapshot."""
    meet = Rendezvous()
    original = SchedulerCache.assume

    def assume(self: SchedulerCache, allocation: Allocation) -> None:
        meet()
        original(self, allocation)

    monkeypatch.setattr(SchedulerCache, "assume", assume)
    return meet
