from __future__ import annotations

from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod
from gpucluster.scheduler import Outcome, Scheduler
from gpucluster.scheduler.framework import PluginConfig, Profile


def _state(nodes: int = 2) -> ClusterState:
    return ClusterState([
        NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20, leaf=f"l{i // 2}", spine="s",
                 devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768, nvlink_domain=0)
                               for j in range(8)))
        for i in range(nodes)
    ])


def _pod(name: str, gang: str, members: int, gpus: int = 8) -> Pod:
    c = ContainerRequest("m", 1000, 1024, (DeviceRequest("nvidia", gpus, memory_pct=100, core_milli=1000),))
    return Pod(name=name, containers=(c,), gang=gang, gang_min_member=members)


def _profile() -> Profile:
    return Profile(plugins=[PluginConfig(name=n) for n in ("NodeUnschedulable", "NodeResourcesFit", "DeviceFit",
                                                           "Gang")], tie_break="first")


def test_members_wait_until_the_whole_gang_is_reserved() -> None:
    s = Scheduler(_state(2), _profile())
    d1 = s.schedule(_pod("a-0", "a", 2))
    assert d1.outcome == Outcome.WAITING
    assert not s.framework.waiting_pods["default/a-0"].allowed  # held in the waiting-pods map
    d2 = s.schedule(_pod("a-1", "a", 2))
    assert d2.outcome == Outcome.SCHEDULED
    assert s.framework.waiting_pods["default/a-0"].allowed  # the last member's Permit allowed the first
    assert {d1.node, d2.node} == {"n0", "n1"}


def test_schedule_group_places_and_binds_the_whole_gang() -> None:
    state = _state(2)
    s = Scheduler(state, _profile())
    group = s.schedule_group([_pod("a-0", "a", 2), _pod("a-1", "a", 2)])
    assert group.ok and [d.outcome for d in group.decisions] == [Outcome.SCHEDULED] * 2
    assert sorted(a.node for a in state.allocations.values()) == ["n0", "n1"]
    assert s.framework.waiting_pods == {}


def test_gang_larger_than_free_capacity_is_rejected_up_front() -> None:
    state = _state(2)
    s = Scheduler(state, _profile())
    assert s.schedule(_pod("x", "", 0)).outcome == Outcome.SCHEDULED  # fills n0
    d = s.schedule(_pod("b-0", "b", 2))
    assert d.outcome == Outcome.UNSCHEDULABLE
    assert "GangNotReady" in d.reasons
    assert len(state.allocations) == 1  # nothing of the gang reserved


def test_a_group_that_does_not_fit_leaves_nothing_reserved() -> None:
    """Two members fit, the third does not: the group is given up, the waiting members are rejected
    (Unreserve), their assumed devices are free again and the next group of the same gang starts afresh."""
    state = _state(2)
    s = Scheduler(state, _profile())
    group = s.schedule_group([_pod(f"c-{i}", "c", 3) for i in range(3)])
    assert not group.ok and group.failed is not None and "GangNotReady" in group.failed.reasons
    assert state.allocations == {} and s.framework.waiting_pods == {}
    assert s.schedule_group([_pod(f"c2-{i}", "c", 2) for i in range(2)]).ok


def test_a_group_short_of_its_min_members_is_given_up() -> None:
    state = _state(3)
    s = Scheduler(state, _profile())
    group = s.schedule_group([_pod("d-0", "d", 3), _pod("d-1", "d", 3)])
    assert not group.ok and "gang d needs 3 members" in group.message()
    assert state.allocations == {} and s.framework.waiting_pods == {}
