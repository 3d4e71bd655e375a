"""Table-driven tests of the built-in plugins, through the real framework."""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.model import ClusterState, DeviceConstraints, Policy
from gpucluster.scheduler import Outcome, Scheduler, binpack_spread_profile
from gpucluster.scheduler.framework import Reason
from tests.helpers import gpu_node, gpu_pod


def sched(*nodes, node_policy=Policy.BINPACK, gpu_policy=Policy.SPREAD) -> Scheduler:  # type: ignore[no-untyped-def]
    return Scheduler(ClusterState(list(nodes)), binpack_spread_profile(node_policy, gpu_policy))


@pytest.mark.parametrize(
    ("pod_kw", "reason"),
    [
        ({"count": 5}, "InsufficientGPUCount"),
        ({"count": 1, "vendor": "hygon"}, "no node has hygon devices"),
        ({"count": 1, "memory_mib": 20000}, "InsufficientGPUMemory"),
        ({"count": 1, "cpu_milli": 10**6}, "InsufficientCPU"),
        ({"count": 1, "host_mib": 10**8}, "InsufficientMemory"),
        ({"count": 1, "constraints": DeviceConstraints(use_types=("H100",))}, "GPUTypeMismatch"),
        ({"count": 1, "constraints": DeviceConstraints(nouse_types=("a100",))}, "GPUTypeMismatch"),
        ({"count": 1, "constraints": DeviceConstraints(use_uuids=("nope",))}, "GPUUUIDMismatch"),
    ],
)
def test_rejections_carry_counted_reasons(pod_kw: dict[str, object], reason: str) -> None:
    s = sched(gpu_node("n0"), gpu_node("n1"), gpu_node("n2"))
    d = s.schedule(gpu_pod("p", **pod_kw))  # type: ignore[arg-type]
    assert d.outcome == Outcome.UNSCHEDULABLE
    if reason.startswith("no node"):
        assert any(reason in r for r in d.status.reasons)
    else:
        assert d.reasons == {reason: 3}
        assert d.message() == f"0/3 nodes are available: 3 {reason}."


def test_cordoned_node_and_mixed_reasons() -> None:
    s = sched(gpu_node("n0"), gpu_node("n1", memory_mib=8000), gpu_node("n2"))
    s.state.set_schedulable("n0", False)
    s.schedule_and_bind(gpu_pod("fill", count=4, cores_pct=100))
    d = s.schedule(gpu_pod("p", memory_mib=10000))
    # n2's devices are fully taken: a 0-core task may not join them
    assert d.reasons == {"NodeUnschedulable": 1, "InsufficientGPUMemory": 1, "InsufficientGPUCores": 1}


def test_device_checks_in_order() -> None:
    s = sched(gpu_node("n0", gpus=2, max_tasks=2))
    assert s.schedule_and_bind(gpu_pod("a", cores_pct=60)).ok
    assert s.schedule_and_bind(gpu_pod("b", cores_pct=60)).ok  # spread: the other device
    assert s.schedule(gpu_pod("c", cores_pct=60)).reasons == {"InsufficientGPUCores": 1}
    assert s.schedule_and_bind(gpu_pod("d", memory_mib=100, cores_pct=10)).ok
    assert s.schedule_and_bind(gpu_pod("e", memory_mib=100, cores_pct=10)).ok
    assert s.schedule(gpu_pod("f", memory_mib=100, cores_pct=10)).reasons == {"GPUTaskLimit": 1}


def test_whole_device_is_exclusive_and_zero_core_avoids_full_devices() -> None:
    s = sched(gpu_node("n0", gpus=1))
    assert s.schedule_and_bind(gpu_pod("small", memory_mib=10, cores_pct=0)).ok
    assert s.schedule(gpu_pod("whole", memory_mib=10, cores_pct=100)).reasons == {"GPUExclusiveBusy": 1}
    s.delete("default/small")
    assert s.schedule_and_bind(gpu_pod("whole", memory_mib=10, cores_pct=100)).ok
    assert s.schedule(gpu_pod("zero", memory_mib=10, cores_pct=0)).reasons == {"InsufficientGPUCores": 1}


def test_memory_percentage_and_overcommit() -> None:
    s = sched(gpu_node("n0", gpus=1, memory_mib=32000))  # e.g. 16 GB x 2 overcommit
    for i in range(4):
        d = s.schedule_and_bind(gpu_pod(f"p{i}", memory_pct=25))
        assert d.ok and d.allocation is not None
        assert next(iter(d.allocation.grants)).memory_mib == 8000
    assert s.schedule(gpu_pod("p5", memory_pct=25)).reasons == {"InsufficientGPUMemory": 1}


def test_uuid_constraints_pick_the_named_device() -> None:
    s = sched(gpu_node("n0"), gpu_node("n1"))
    d = s.schedule_and_bind(gpu_pod("p", constraints=DeviceConstraints(use_uuids=("n1-gpu2",))))
    assert d.node == "n1" and d.devices_json()[0][0]["id"] == "n1-gpu2"
    d = s.schedule_and_bind(gpu_pod("q", count=4, constraints=DeviceConstraints(nouse_uuids=("n0-gpu0",))))
    assert d.node == "n1"


def test_unhealthy_devices_are_skipped() -> None:
    s = sched(gpu_node("n0", gpus=2))
    s.state.set_device_health("n0", 0, False)
    d = s.schedule_and_bind(gpu_pod("p"))
    assert d.devices_json()[0][0]["id"] == "n0-gpu1"
    assert s.schedule(gpu_pod("q", count=2)).reasons == {"GPUUnhealthy": 1}


def test_node_binpack_vs_spread() -> None:
    for policy, expect_same in ((Policy.BINPACK, True), (Policy.SPREAD, False)):
        s = sched(gpu_node("n0"), gpu_node("n1"), gpu_node("n2"), node_policy=policy)
        first = s.schedule_and_bind(gpu_pod("a", memory_mib=1000, cores_pct=20)).node
        second = s.schedule_and_bind(gpu_pod("b", memory_mib=1000, cores_pct=20)).node
        assert (first == second) is expect_same


def test_pod_annotation_overrides_node_policy() -> None:
    s = sched(gpu_node("n0"), gpu_node("n1"), node_policy=Policy.BINPACK)
    first = s.schedule_and_bind(gpu_pod("a", memory_mib=1000, cores_pct=20)).node
    second = s.schedule_and_bind(gpu_pod("b", memory_mib=1000, cores_pct=20, node_policy=Policy.SPREAD)).node
    assert first != second


def test_device_spread_prefers_fewest_tasks_and_binpack_fills_one() -> None:
    spread = sched(gpu_node("n0"), gpu_policy=Policy.SPREAD)
    ids = [spread.schedule_and_bind(gpu_pod(f"p{i}", memory_mib=100, cores_pct=10)).devices_json()[0][0]["id"]
           for i in range(4)]
    assert len(set(ids)) == 4
    binpack = sched(gpu_node("n0"), gpu_policy=Policy.BINPACK)
    ids = [binpack.schedule_and_bind(gpu_pod(f"p{i}", memory_mib=100, cores_pct=10)).devices_json()[0][0]["id"]
           for i in range(4)]
    assert len(set(ids)) == 1
    # the per-pod annotation switches the device policy
    d = binpack.schedule_and_bind(gpu_pod("x", memory_mib=100, cores_pct=10, gpu_policy=Policy.SPREAD))
    assert d.devices_json()[0][0]["id"] != ids[0]


def test_multi_gpu_request_stays_in_one_nvlink_domain() -> None:
    s = sched(gpu_node("n0", gpus=8, nvlink=4), gpu_policy=Policy.SPREAD)
    # occupy one device in each domain so spread would otherwise mix domains
    s.schedule_and_bind(gpu_pod("a", memory_mib=100, cores_pct=10, constraints=DeviceConstraints(use_uuids=("n0-gpu0",))))
    d = s.schedule_and_bind(gpu_pod("b", count=4, memory_mib=100, cores_pct=10))
    chosen = sorted(int(g["id"].rsplit("gpu", 1)[1]) for g in d.devices_json()[0])
    assert chosen == [4, 5, 6, 7]


def test_multi_container_pod_checked_jointly() -> None:
    from gpucluster.model import ContainerRequest, DeviceRequest, Pod

    pod = Pod("two", containers=(
        ContainerRequest("a", 0, 0, (DeviceRequest("nvidia", 1, memory_mib=10000),)),
        ContainerRequest("b", 0, 0, (DeviceRequest("nvidia", 1, memory_mib=10000),)),
    ))
    s = sched(gpu_node("n0", gpus=1, memory_mib=16000), gpu_node("n1", gpus=2, memory_mib=16000))
    d = s.schedule_and_bind(pod)
    assert d.node == "n1"
    assert len({c[0]["id"] for c in d.devices_json()}) == 2
    assert s.state.dev_mem_used[1].tolist()[:2] == [10000, 10000]


def test_filter_is_vectorised_over_all_nodes() -> None:
    s = sched(*(gpu_node(f"n{i}", gpus=(i % 3) + 1) for i in range(30)))
    fw = s.framework
    from gpucluster.scheduler.framework import CycleState

    state = CycleState()
    pod = gpu_pod("p", count=3)
    snap = s.state.snapshot()
    fw.run_pre_filter(state, pod, snap)
    reasons = fw.run_filter(state, pod, snap)
    assert reasons.shape == (30,)
    assert np.array_equal(reasons == 0, np.arange(30) % 3 == 2)
    fw.explain(state, pod, snap, reasons)
    assert set(reasons[reasons > 0].tolist()) == {int(Reason.InsufficientGPUCount)}
