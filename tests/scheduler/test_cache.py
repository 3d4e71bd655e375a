"""The scheduler cache: assumed allocations expire after their TTL, and not before."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.model import Allocation, DeviceGrant
from gpucluster.scheduler.cache import SchedulerCache
from tests.helpers import gpu_node, state_of


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _alloc(i: int) -> Allocation:
    return Allocation(f"default/p{i}", "a", 100, 10, ((DeviceGrant(i % 4, f"a-gpu{i % 4}", "nvidia", 10, 10),),))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["assume", "confirm", "forget", "tick", "ttl"]), st.integers(0, 30)),
                max_size=60))
def test_expire_releases_exactly_what_is_past_its_deadline(ops: list[tuple[str, int]]) -> None:
    clock = Clock()
    cache = SchedulerCache(state_of(gpu_node("a", gpus=4, max_tasks=1000)), clock, ttl=10.0)
    deadlines: dict[str, float] = {}  # the model: assumed pod -> deadline
    for i, (op, k) in enumerate(ops):
        key = f"default/p{k}"
        if op == "assume" and key not in cache.state.allocations:
            cache.assume(_alloc(k))
            deadlines[key] = clock.now + cache.ttl
        elif op == "confirm":
            cache.confirm(key)
            deadlines.pop(key, None)
        elif op == "forget":
            cache.forget(key)
            deadlines.pop(key, None)
        elif op == "tick":
            clock.now += k / 3
        elif op == "ttl":  # the TTL may change while assumptions are out
            cache.ttl = float(1 + k)
        expired = {a.pod_key for a in cache.expire()}
        due = {p for p, d in deadlines.items() if d <= clock.now}
        assert expired == due, f"step {i}"
        for p in due:
            del deadlines[p]
        assert all(cache.is_assumed(p) for p in deadlines)
