"""``SchedulerCache`` with a clock the test sets: assumptions expire exactly at their deadline, confirmed ones
never; forget gives back only what is still merely assumed; remove gives back either."""

from __future__ import annotations

import pytest

from gpucluster.model import Allocation, ClusterState, DeviceGrant
from gpucluster.scheduler.cache import SchedulerCache
from tests.helpers import gpu_node, state_of


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _alloc(key: str, device: int = 0) -> Allocation:
    return Allocation(key, "n0", 1000, 1024, ((DeviceGrant(device, f"n0-gpu{device}", "nvidia", 4000, 500),),))


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def state() -> ClusterState:
    return state_of(gpu_node("n0", gpus=2))


@pytest.fixture
def cache(state: ClusterState, clock: Clock) -> SchedulerCache:
    return SchedulerCache(state, clock, ttl=5.0)


def test_an_assumption_expires_exactly_at_its_deadline(cache: SchedulerCache, state: ClusterState,
                                                       clock: Clock) -> None:
    cache.assume(_alloc("a"))
    assert cache.is_assumed("a") and int(state.dev_core_used[0, 0]) == 500
    assert cache.expire() == []  # at the moment it was assumed
    clock.now = 104.999
    assert cache.expire() == []
    clock.now = 105.0
    assert [a.pod_key for a in cache.expire()] == ["a"]
    assert "a" not in state.allocations and not cache.is_assumed("a")
    assert int(state.dev_core_used[0, 0]) == 0 and int(state.cpu_used[0]) == 0
    assert cache.expire() == []


def test_a_confirmed_allocation_never_expires_and_forget_leaves_it(cache: SchedulerCache, state: ClusterState,
                                                                    clock: Clock) -> None:
    cache.assume(_alloc("a"))
    cache.confirm("a")
    clock.now = 1e9
    assert cache.expire() == []
    assert cache.forget("a") is None  # bound for good: a late "bind failed" must not free it
    assert "a" in state.allocations


def test_forget_gives_an_assumption_back_at_once(cache: SchedulerCache, state: ClusterState) -> None:
    cache.assume(_alloc("a"))
    forgotten = cache.forget("a")
    assert forgotten is not None and forgotten.pod_key == "a"
    assert state.allocations == {} and int(state.dev_mem_used.sum()) == 0
    cache.assume(_alloc("b"))  # the device is free for another pod
    assert cache.forget("nobody") is None


def test_remove_gives_back_assumed_and_confirmed_alike(cache: SchedulerCache, state: ClusterState,
                                                       clock: Clock) -> None:
    cache.assume(_alloc("assumed", device=0))
    cache.assume(_alloc("bound", device=1))
    cache.confirm("bound")
    assert cache.remove("assumed") is not None and cache.remove("bound") is not None
    assert state.allocations == {} and not cache.is_assumed("assumed")
    clock.now = 1e9
    assert cache.expire() == []  # a removed assumption does not come back to expire
    assert cache.remove("assumed") is None
