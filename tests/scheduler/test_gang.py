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


def _mixed() -> ClusterState:
    """n0 and n3 H100, n1 and n2 L40S, 8 GPUs each, every node labelled with its tier."""
    models = {"n0": "H100", "n1": "L40S", "n2": "L40S", "n3": "H100"}
    return ClusterState([
        NodeSpec(name=n, cpu_milli=64000, memory_mib=1 << 20, leaf="l0", spine="s",
                 labels={"tier": "train" if m == "H100" else "infer"},
                 devices=tuple(DeviceSpec(f"G{n}-{j}", j, "nvidia", m, 32768, nvlink_domain=0) for j in range(8)))
        for n, m in models.items()
    ])


def test_a_gang_stays_on_one_gpu_model() -> None:
    state = _mixed()
    s = Scheduler(state, _profile())
    assert s.schedule_and_bind(_pod("x", "", 0, gpus=4)).node == "n0"  # n0 keeps 4 free H100s
    group = s.schedule_group([_pod(f"g-{i}", "g", 2) for i in range(2)])
    # the H100s could take only one 8-GPU member now: the whole gang goes to the L40S nodes
    assert group.ok and sorted(d.node for d in group.decisions) == ["n1", "n2"]
    # with room on both models, the later members follow the first one's model
    s2 = Scheduler(_mixed(), _profile())
    group = s2.schedule_group([_pod(f"h-{i}", "h", 2) for i in range(2)])
    assert group.ok and {d.node for d in group.decisions} in ({"n0", "n3"}, {"n1", "n2"})


def test_a_gang_that_fits_only_across_models_waits() -> None:
    state = _mixed()
    s = Scheduler(state, _profile())
    for node in ("n0", "n1"):  # one free node per model
        assert s.schedule_and_bind(_pod(f"fill-{node}", "", 0)).node == node
    group = s.schedule_group([_pod(f"g-{i}", "g", 2) for i in range(2)])
    assert not group.ok and "GangModelMismatch" in group.message()
    assert len(state.allocations) == 2


def test_node_selector_keeps_pods_on_matching_nodes() -> None:
    state = _mixed()
    profile = Profile(plugins=[PluginConfig(name=n) for n in ("NodeUnschedulable", "NodeResourcesFit", "DeviceFit",
                                                              "NodeSelector")], tie_break="first")
    s = Scheduler(state, profile)
    c = ContainerRequest("m", 1000, 1024, (DeviceRequest("nvidia", 1, memory_pct=100, core_milli=1000),))
    placed = {s.schedule_and_bind(Pod(name=f"p{i}", containers=(c,), node_selector={"tier": "infer"})).node
              for i in range(12)}
    assert placed == {"n1", "n2"}
    d = Scheduler(_mixed(), profile).schedule(Pod(name="none", containers=(c,), node_selector={"tier": "gpu-less"}))
    assert not d.ok and d.reasons == {"NodeSelectorMismatch": 4}
