"""Invariants over random arrivals and deletions (hypothesis)."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod, Policy
from gpucluster.scheduler import Scheduler, binpack_spread_profile


def cluster() -> ClusterState:
    nodes = []
    for i in range(6):
        vendor = ("nvidia", "nvidia", "cambricon", "hygon", "nvidia", "nvidia")[i]
        gpus = (8, 4, 2, 4, 2, 1)[i]
        nodes.append(
            NodeSpec(
                name=f"n{i}", cpu_milli=32000, memory_mib=65536,
                devices=tuple(
                    DeviceSpec(f"n{i}-{j}", j, vendor, f"M{i % 2}", memory_mib=(16000, 24000)[i % 2],
                               max_tasks=(3, 10)[j % 2], nvlink_domain=j // 4)
                    for j in range(gpus)
                ),
            )
        )
    return ClusterState(nodes)


request = st.builds(
    DeviceRequest,
    vendor=st.sampled_from(["nvidia", "nvidia", "cambricon", "hygon"]),
    count=st.integers(1, 3),
    memory_mib=st.integers(0, 20000),
    memory_pct=st.one_of(st.none(), st.integers(0, 100)),
    core_milli=st.sampled_from([0, 100, 250, 500, 1000]),
)
container = st.builds(
    ContainerRequest,
    name=st.just("c"),
    cpu_milli=st.integers(0, 16000),
    memory_mib=st.integers(0, 30000),
    devices=st.lists(request, max_size=1).map(tuple),
)
action = st.one_of(
    st.tuples(st.just("add"), st.lists(container, min_size=1, max_size=2), st.sampled_from(list(Policy))),
    st.tuples(st.just("del"), st.integers(0, 1000), st.none()),
)


def check_invariants(s: ClusterState) -> None:
    assert (s.cpu_used <= s.cpu_cap).all() and (s.mem_used <= s.mem_cap).all()
    assert (s.dev_mem_used <= s.dev_mem_cap).all()
    assert (s.dev_core_used <= s.dev_core_cap).all()
    assert (s.dev_tasks <= s.dev_max_tasks).all()
    assert (s.cpu_used >= 0).all() and (s.dev_tasks >= 0).all()
    # a whole-device task is alone on its device
    for alloc in s.allocations.values():
        i = s.node_index[alloc.node]
        for g in alloc.grants:
            if g.core_milli >= s.dev_core_cap[i, g.device_index]:
                assert s.dev_tasks[i, g.device_index] == 1
    # sums kept incrementally agree with the arrays
    assert np.array_equal(s.node_tasks, s.dev_tasks.sum(axis=1))
    assert np.array_equal(s.node_core_used, s.dev_core_used.sum(axis=1))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=60), st.sampled_from(list(Policy)))
def test_no_device_or_node_over_capacity_and_delete_all_empties(actions: list, node_policy: Policy) -> None:  # type: ignore[type-arg]
    state = cluster()
    sched = Scheduler(state, binpack_spread_profile(node_policy, Policy.SPREAD))
    live: list[str] = []
    for n, (kind, arg, gpu_policy) in enumerate(actions):
        if kind == "add":
            pod = Pod(f"p{n}", containers=tuple(arg), gpu_policy=gpu_policy)
            d = sched.schedule_and_bind(pod)
            if d.ok:
                live.append(pod.key)
                assert pod.key in state.allocations
            else:
                assert d.reasons or d.status.reasons
                assert pod.key not in state.allocations
        elif live:
            sched.delete(live.pop(arg % len(live)))
        check_invariants(state)
    for key in live:
        sched.delete(key)
    assert not state.allocations
    for arr in (state.cpu_used, state.mem_used, state.dev_mem_used, state.dev_core_used, state.dev_tasks,
                state.node_tasks, state.node_core_used, state.node_dmem_used):
        assert not arr.any()
