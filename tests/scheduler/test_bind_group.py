"""``Scheduler.bind_group``: the one way a placed group binds, with one failure rule: whole, or rolled back.

The Bind plugins here are fakes named for the fault they inject (``FakeRefusingBinder``): a real bind failure
on a real API server is exercised by ``tests/integration/test_k8s_gang_bind.py``; these pin down the rule itself
(what is checked, what is unbound, in which order, what is given back) on the framework alone.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.model import Allocation, ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod
from gpucluster.scheduler import Outcome, Scheduler
from gpucluster.scheduler.framework import Handle, PluginConfig, PluginRegistry, Profile, Status
from gpucluster.scheduler.plugins import builtin_registry
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree


class FakeRefusingBinder:
    """Bind, BindCheck and Unbind plugin that records every call; it refuses the bind (or the dry-run check)
    of the pods named in ``refuse_bind`` (``refuse_check``), as an API server or an admission webhook would."""

    name = "FakeRefusingBinder"

    def __init__(self, refuse_bind: frozenset[str] = frozenset(), refuse_check: frozenset[str] = frozenset()) -> None:
        self.refuse_bind, self.refuse_check = set(refuse_bind), set(refuse_check)
        self.calls: list[tuple[str, str]] = []

    def check_bind(self, pod: Pod, allocation: Allocation) -> Status:
        self.calls.append(("check", pod.name))
        if pod.name in self.refuse_check:
            return Status.error(self.name, f"admission webhook denied {pod.name}")
        return Status.success()

    def bind(self, pod: Pod, allocation: Allocation) -> Status:
        self.calls.append(("bind", pod.name))
        if pod.name in self.refuse_bind:
            return Status.error(self.name, f"bind of {pod.name} refused")
        return Status.success()

    def unbind(self, pod: Pod, allocation: Allocation) -> Status:
        self.calls.append(("unbind", pod.name))
        return Status.success()

    def of(self, kind: str) -> list[str]:
        return [name for k, name in self.calls if k == kind]


def _state(nodes: int = 4) -> ClusterState:
    return ClusterState([
        NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20,
                 devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768) for j in range(8)))
        for i in range(nodes)
    ])


def _pod(name: str, gang: str = "g", members: int = 3, gpus: int = 8, tenant: str = "") -> Pod:
    c = ContainerRequest("m", 1000, 1024, (DeviceRequest("nvidia", gpus, memory_pct=100, core_milli=1000),))
    return Pod(name=name, containers=(c,), gang=gang, gang_min_member=members, tenant=tenant)


def _scheduler(state: ClusterState, binder: FakeRefusingBinder, quota: QuotaTree | None = None) -> Scheduler:
    reg: PluginRegistry = builtin_registry()
    reg.register(binder.name, lambda args, handle: binder)
    names = ["NodeUnschedulable", "NodeResourcesFit", "DeviceFit", "Gang", *(["Quota"] if quota else []),
             binder.name]
    handle = Handle(services={"quota": quota} if quota else {})
    return Scheduler(state, Profile(plugins=[PluginConfig(name=n) for n in names], tie_break="first"), reg,
                     handle=handle)


GANG = ["a", "b", "c"]


def test_a_group_binds_whole_after_every_member_was_checked() -> None:
    state = _state()
    binder = FakeRefusingBinder()
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n) for n in GANG], bind=False)
    result = s.bind_group(group.decisions)
    assert result.ok and [d.pod.name for d in result.bound] == GANG
    # every check before the first bind
    assert [k for k, _ in binder.calls] == ["check"] * 3 + ["bind"] * 3
    assert sorted(state.allocations) == [f"default/{n}" for n in GANG]
    assert not any(s.cache.is_assumed(k) for k in state.allocations)  # confirmed


def test_a_refused_check_binds_nothing_and_gives_everything_back() -> None:
    state = _state()
    binder = FakeRefusingBinder(refuse_check=frozenset({"c"}))
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n) for n in GANG], bind=False)
    result = s.bind_group(group.decisions)
    assert not result.ok and result.failed is not None and result.failed.pod.name == "c"
    assert result.failed.outcome == Outcome.ERROR
    assert binder.of("bind") == [] and binder.of("unbind") == []
    assert state.allocations == {} and int(state.dev_core_used.sum()) == 0
    assert "admission webhook denied c" in result.message()


def test_a_bind_refused_part_way_unbinds_the_bound_members_in_reverse_order() -> None:
    state = _state()
    binder = FakeRefusingBinder(refuse_bind=frozenset({"c"}))
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n) for n in GANG], bind=False)
    result = s.bind_group(group.decisions)
    assert not result.ok and [d.pod.name for d in result.rolled_back] == ["a", "b"]
    assert binder.of("bind") == ["a", "b", "c"] and binder.of("unbind") == ["b", "a"]
    assert state.allocations == {} and int(state.dev_core_used.sum()) == 0
    assert s.framework.waiting_pods == {}
    # retried once the fault is gone: the same gang places and binds whole
    binder.refuse_bind.clear()
    again = s.schedule_group([_pod(n) for n in GANG])
    assert again.ok and len(state.allocations) == 3


def test_lost_leadership_part_way_leaves_nothing_bound() -> None:
    state = _state()
    binder = FakeRefusingBinder()
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n) for n in GANG], bind=False)
    leader = iter([True, True, True, True, True, False])  # three checks, two binds, then the lease is gone
    result = s.bind_group(group.decisions, may_bind=lambda: next(leader))
    assert not result.ok and result.status.plugin == "Leader"
    assert binder.of("bind") == ["a", "b"] and binder.of("unbind") == ["b", "a"]
    assert state.allocations == {}


def test_a_rolled_back_group_gives_its_quota_back() -> None:
    """Unreserve runs for every member (the Quota plugin refunds the charge), not only the unbound ones."""
    state = _state()
    quota = QuotaTree([QueueSpec("t", limit={"gpu": 24})])
    binder = FakeRefusingBinder(refuse_bind=frozenset({"b"}))
    s = _scheduler(state, binder, quota)
    assert not s.schedule_group([_pod(n, tenant="t") for n in GANG]).ok
    assert quota.used["t"]["gpu"] == 0
    binder.refuse_bind.clear()
    assert s.schedule_group([_pod(n, tenant="t") for n in GANG]).ok
    assert quota.used["t"]["gpu"] == 24


def test_a_plugin_that_raises_rolls_back_then_propagates() -> None:
    state = _state()
    binder = FakeRefusingBinder()

    def boom(pod: Pod, allocation: Allocation) -> Status:
        binder.calls.append(("bind", pod.name))
        if pod.name == "b":
            raise RuntimeError("connection reset")
        return Status.success()

    binder.bind = boom  # type: ignore[method-assign]
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n) for n in GANG], bind=False)
    with pytest.raises(RuntimeError, match="connection reset"):
        s.bind_group(group.decisions)
    assert binder.of("unbind") == ["a"] and state.allocations == {}


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 4), refuse=st.one_of(st.none(), st.tuples(st.sampled_from(["check", "bind"]),
                                                                      st.integers(0, 3))),
       lose_at=st.one_of(st.none(), st.integers(0, 8)))
def test_whatever_fails_a_group_is_bound_whole_or_not_at_all(size: int, refuse: tuple[str, int] | None,
                                                             lose_at: int | None) -> None:
    """The invariant: after ``bind_group`` either every member is bound and held, or none is held and every
    member that bound was unbound again."""
    names = [f"p{i}" for i in range(size)]
    binder = FakeRefusingBinder()
    if refuse is not None and refuse[1] < size:
        (binder.refuse_check if refuse[0] == "check" else binder.refuse_bind).add(names[refuse[1]])
    state = _state()
    s = _scheduler(state, binder)
    group = s.schedule_group([_pod(n, members=size) for n in names], bind=False)
    assert group.ok
    asked = iter(range(100))
    may_bind: Callable[[], bool] = (lambda: True) if lose_at is None else (lambda: next(asked) < lose_at)
    result = s.bind_group(group.decisions, may_bind=may_bind)
    bound = [n for n in binder.of("bind") if n not in binder.refuse_bind]
    if result.ok:
        assert sorted(binder.of("bind")) == names and binder.of("unbind") == []
        assert len(state.allocations) == size
    else:
        assert state.allocations == {} and int(state.dev_tasks.sum()) == 0
        assert binder.of("unbind") == bound[::-1]
