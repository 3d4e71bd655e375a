"""HAMi semantics in the scheduler that the ported cases do not pin down alone: extended resources some nodes
offer, and invariants with init containers and HAMi's policy annotations (hypothesis)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState, ContainerRequest, NodeSpec, Pod, Policy
from gpucluster.scheduler import Scheduler, binpack_spread_profile, profile_for
from tests.scheduler.test_properties import check_invariants, cluster, container


def test_extended_resource_offered_by_some_nodes() -> None:
    nodes = [NodeSpec("plain", 8000, 8192), NodeSpec("fpga", 8000, 8192, extended={"example.com/fpga": 2})]
    sched = Scheduler(ClusterState(nodes), profile_for("binpack"))
    wants = Pod("p", containers=(ContainerRequest("c", 100, 100, extended={"example.com/fpga": 1}),))
    assert sched.schedule_and_bind(wants).node == "fpga"
    too_many = Pod("q", containers=(ContainerRequest("c", 100, 100, extended={"example.com/fpga": 3}),))
    d = sched.schedule_and_bind(too_many)
    assert d.reasons == {"Insufficient example.com/fpga": 2}
    # the effective request: the larger of the app containers' sum and the largest init container
    init = Pod("r", containers=(ContainerRequest("a", extended={"example.com/fpga": 1}),),
               init_containers=(ContainerRequest("i", extended={"example.com/fpga": 2}),))
    assert init.extended == {"example.com/fpga": 2}


annotations = st.fixed_dictionaries({}, optional={
    "hami.io/gpu-scheduler-policy": st.sampled_from(["binpack", "spread", "mutex", "binpack,numa", "numa,spread"]),
    "nvidia.com/numa-bind": st.sampled_from(["true", "false"]),
    "hami.io/device-scoring-weights": st.sampled_from(["slot=1,core=1,memory=3", "slot=0,core=2,memory=1"]),
})
action = st.one_of(
    st.tuples(st.just("add"), st.lists(container, min_size=1, max_size=2), st.lists(container, max_size=2),
              annotations),
    st.tuples(st.just("del"), st.integers(0, 1000), st.none(), st.none()),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=50), st.sampled_from(list(Policy)))
def test_init_containers_and_policies_keep_every_device_within_capacity(actions: list, node_policy: Policy) -> None:  # type: ignore[type-arg]
    state = cluster()
    sched = Scheduler(state, binpack_spread_profile(node_policy, Policy.SPREAD))
    live: list[str] = []
    for n, (kind, arg, init, ann) in enumerate(actions):
        if kind == "add":
            pod = Pod(f"p{n}", containers=tuple(arg), init_containers=tuple(init), annotations=ann)
            d = sched.schedule_and_bind(pod)
            if d.ok:
                live.append(pod.key)
                assert d.allocation is not None and len(d.allocation.init_devices) == len(init)
                if ann.get("hami.io/gpu-scheduler-policy") == "mutex":
                    i = state.node_index[d.allocation.node]
                    assert all(state.dev_tasks[i, j] == tasks for j, _, _, tasks in d.allocation.device_usage())
            else:
                assert pod.key not in state.allocations
        elif live:
            sched.delete(live.pop(arg % len(live)))
        check_invariants(state)
    for key in live:
        sched.delete(key)
    assert not state.allocations and not state.dev_tasks.any() and not state.dev_mem_used.any()
    assert not state.node_dmem_used.any() and not state.node_core_used.any()
