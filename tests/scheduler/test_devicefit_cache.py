"""DeviceFit's Filter keeps, per request kind, which nodes have enough fitting devices, and recomputes only the
nodes whose generation moved (``_FitCache``). Whatever happens to the cluster (pods placed and deleted, devices
failing, nodes cordoned), its answer is the one a full pass over every device of every node gives."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.devices import hami
from gpucluster.model import (
    ClusterState,
    ContainerRequest,
    DeviceConstraints,
    DeviceRequest,
    DeviceSpec,
    NodeSpec,
    Pod,
    Snapshot,
)
from gpucluster.scheduler import Scheduler, binpack_spread_profile
from gpucluster.scheduler.framework import CycleState, Reason
from gpucluster.scheduler.plugins.devicefit import DeviceFit, device_stages

VENDORS = ("nvidia", "nvidia", "cambricon", "hygon", "nvidia", "nvidia")


def _nodes(prefix: str = "n") -> list[NodeSpec]:
    out = []
    for i, vendor in enumerate(VENDORS):
        gpus = (8, 4, 2, 4, 2, 1)[i]
        out.append(NodeSpec(
            name=f"{prefix}{i}", cpu_milli=32000, memory_mib=65536,
            devices=tuple(DeviceSpec(f"{prefix}{i}-{j}", j, vendor, ("A100", "T4")[(i + j) % 2],
                                     memory_mib=(16000, 24000)[i % 2], max_tasks=(3, 10)[j % 2],
                                     numa=j // 2, nvlink_domain=j // 4) for j in range(gpus)),
        ))
    return out


def _full_pass(state: CycleState, snap: Snapshot) -> np.ndarray:
    """The Filter's answer computed the straightforward way: every device of every node, every time."""
    prep = state.read("DeviceFit")
    out = np.zeros(snap.n_nodes, np.int16)
    for req, vid in prep.all_requests():
        final = device_stages(snap, slice(None), vid, req, prep.allowed, prep.type_bad, options=prep.options)[-1][1]
        out[np.count_nonzero(final, axis=1) < req.count] = Reason.DeviceDoesNotFit
    return out


request = st.builds(
    DeviceRequest,
    vendor=st.sampled_from(["nvidia", "nvidia", "cambricon", "hygon"]),
    count=st.integers(1, 3),
    memory_mib=st.sampled_from([0, 4000, 12000, 20000]),
    memory_pct=st.one_of(st.none(), st.sampled_from([0, 30, 100])),
    core_milli=st.sampled_from([0, 100, 250, 500, 1000]),
)
constraints = st.sampled_from([DeviceConstraints(), DeviceConstraints(use_types=("A100",)),
                               DeviceConstraints(nouse_types=("t4",)), DeviceConstraints(use_uuids=("n0-1", "n1-2"))])
ANNOTATION_SETS: tuple[dict[str, str], ...] = (
    {}, {hami.GPU_POLICY_ANNOTATION: hami.POLICY_MUTEX}, {hami.NUMA_BIND_ANNOTATION: "true"},
    {hami.GPU_POLICY_ANNOTATION: hami.POLICY_MUTEX, hami.NUMA_BIND_ANNOTATION: "true"},
)
pod = st.builds(lambda req, ann, c: (req, ann, c), request, st.sampled_from(ANNOTATION_SETS), constraints)
action = st.one_of(
    st.tuples(st.just("add"), pod),
    st.tuples(st.just("del"), st.integers(0, 1000)),
    st.tuples(st.just("health"), st.tuples(st.integers(0, 5), st.integers(0, 7), st.booleans())),
    st.tuples(st.just("cordon"), st.tuples(st.integers(0, 5), st.booleans())),
)


def _pod(name: str, spec: tuple[DeviceRequest, dict[str, str], DeviceConstraints]) -> Pod:
    req, ann, c = spec
    return Pod(name, containers=(ContainerRequest("c", 1000, 1024, (req,)),), annotations=ann, constraints=c)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(action, min_size=1, max_size=40), st.lists(pod, min_size=1, max_size=3))
def test_the_cached_filter_answers_what_a_full_pass_answers(actions: list, probes: list) -> None:  # type: ignore[type-arg]
    state = ClusterState(_nodes())
    sched = Scheduler(state, binpack_spread_profile())
    plugin = DeviceFit(sched.framework.handle)  # one instance across the run: its cache lives as long as it
    live: list[str] = []
    for n, (kind, arg) in enumerate(actions):
        if kind == "add":
            d = sched.schedule_and_bind(_pod(f"p{n}", arg))
            if d.ok:
                live.append(f"default/p{n}")
        elif kind == "del" and live:
            state.release(live.pop(arg % len(live)))
        elif kind == "health":
            i, j, healthy = arg
            if j < len(state.nodes[i].devices):
                state.set_device_health(f"n{i}", j, healthy)
        elif kind == "cordon":
            state.set_schedulable(f"n{arg[0]}", arg[1])
        snap = state.snapshot()
        # each probe also with every other choice of annotations: kinds that differ only there must not mix
        variants = [(req, ann, c) for req, _, c in probes for ann in ANNOTATION_SETS]
        for k, spec in enumerate(variants):
            probe = _pod(f"probe{k}", spec)
            cycle = CycleState()
            if not plugin.pre_filter(cycle, probe, snap).ok:
                continue
            assert np.array_equal(plugin.filter(cycle, probe, snap), _full_pass(cycle, snap)), (n, kind, spec)


def test_a_new_cluster_of_the_same_shape_is_not_answered_from_the_old_one() -> None:
    """Generations restart with every ClusterState: a cache filled on one must not answer for another, even where
    a node's generation happens to be the same number in both."""
    busy, idle = ClusterState(_nodes()), ClusterState(_nodes())
    whole = Pod("w", containers=(ContainerRequest("c", 1000, 1024, (DeviceRequest("nvidia", 8, core_milli=1000),)),))
    sched = Scheduler(busy, binpack_spread_profile())
    plugin = DeviceFit(sched.framework.handle)
    placed = sched.schedule_and_bind(Pod("all8", containers=whole.containers))
    assert placed.ok and placed.node == "n0"  # the only node with 8 GPUs, now full
    idle.set_schedulable("n0", True)  # a no-op change: n0 gets the generation it has in ``busy``
    assert idle.node_generation[0] == busy.node_generation[0]
    for state, fits in ((busy, False), (idle, True)):
        snap, cycle = state.snapshot(), CycleState()
        assert plugin.pre_filter(cycle, whole, snap).ok
        assert (plugin.filter(cycle, whole, snap)[0] == 0) == fits
