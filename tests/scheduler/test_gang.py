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
    d2 = s.schedule(_pod("a-1", "a", 2))
    assert d2.outcome == Outcome.SCHEDULED
    assert {d1.node, d2.node} == {"n0", "n1"}


def test_gang_larger_than_free_capacity_is_rejected_up_front() -> None:
    state = _state(2)
    s = Scheduler(state, _profile())
    assert s.schedule(_pod("x", "", 0)).outcome == Outcome.SCHEDULED  # fills n0
    d = s.schedule(_pod("b-0", "b", 2))
    assert d.outcome == Outcome.UNSCHEDULABLE
    assert "GangNotReady" in d.reasons
    assert len(state.allocations) == 1  # nothing of the gang reserved


def test_reject_forgets_partial_reservations() -> None:
    s = Scheduler(_state(3), _profile())
    gang = s.framework.plugin("Gang")
    assert s.schedule(_pod("c-0", "c", 3)).outcome == Outcome.WAITING
    assert gang.reserved("c") == 1  # type: ignore[attr-defined]
    gang.reject("c")  # type: ignore[attr-defined]
    assert gang.reserved("c") == 0  # type: ignore[attr-defined]
