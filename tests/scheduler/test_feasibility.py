"""Jobs that can never fit are found up front (issue 14), and what a pod holds is one figure (model.share)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState, DeviceRequest, Pod
from gpucluster.model.share import allocation_gpus, device_share, largest_devices, pod_gpus_at_least, request_share
from gpucluster.scheduler import Scheduler, profile_for
from gpucluster.scheduler.feasibility import never_fits
from tests.helpers import gpu_node, gpu_pod
from tests.scheduler.test_properties import cluster, container


def _state() -> ClusterState:
    return ClusterState([gpu_node("a", gpus=8, memory_mib=81559), gpu_node("b", gpus=4, memory_mib=46068),
                         gpu_node("m", gpus=2, vendor="cambricon", memory_mib=24000)])


def _copies(pod: Pod, n: int) -> list[Pod]:
    return [dataclasses.replace(pod, name=f"{pod.name}-{i}") for i in range(n)]


def test_a_whole_device_of_memory_is_a_whole_gpu_whatever_gpucores_says() -> None:
    assert device_share(10, 81559, 1000, 81559) == 1.0
    assert device_share(1000, 0, 1000, 81559) == 1.0
    assert device_share(250, 20000, 1000, 80000) == 0.25
    assert device_share(5000, 0, 1000, 80000) == 1.0  # capped at one device
    # defect 4: 1 % of the cores and all 81,559 MiB of an 80 GB device
    req = DeviceRequest("nvidia", 1, memory_mib=81559, core_milli=10)
    assert request_share(req, 1000, 81559) == 1.0
    assert request_share(DeviceRequest("nvidia", 2, memory_pct=50, core_milli=100)) == 1.0
    assert request_share(DeviceRequest("nvidia", 1, memory_pct=100)) == 1.0  # HAMi's default: whole memory


def test_placed_pods_count_what_their_device_gives_them() -> None:
    state = _state()
    sched = Scheduler(state, profile_for("binpack"))
    pod = gpu_pod("p", count=1, memory_mib=40000, cores_pct=10, vendor="nvidia")
    assert pod_gpus_at_least(pod, largest_devices(state)) == pytest.approx(40000 / 81559)
    decision = sched.schedule_and_bind(pod)
    assert decision.ok and decision.allocation is not None
    held = allocation_gpus(state, decision.allocation)
    cap = 81559 if decision.node == "a" else 46068
    assert held == pytest.approx(40000 / cap)


@pytest.mark.parametrize(("pod", "replicas", "where", "why"), [
    (gpu_pod("p", count=16), 1, "resources", "no node has more than 8"),
    (gpu_pod("p", count=1, memory_mib=100_000), 1, "resources", "largest nvidia device has 81,559 MiB"),
    (gpu_pod("p", count=1, vendor="hygon"), 1, "resources", "no hygon devices (it has cambricon, nvidia)"),
    (gpu_pod("p", count=1, cpu_milli=100_000), 1, "resources", "0/3 nodes could ever hold one pod"),
    (gpu_pod("p", count=3, memory_mib=10_000, vendor="cambricon"), 1, "resources", "no node has more than 2"),
    (gpu_pod("p", count=8, cores_pct=100), 2, "replicas", "holds at most 1"),
    (gpu_pod("p", count=1, cores_pct=100), 13, "replicas", "holds at most 12"),
])
def test_never_fits_says_why(pod: Pod, replicas: int, where: str, why: str) -> None:
    found = never_fits(_copies(pod, replicas), _state())
    assert found is not None and found.where == where and why in found.why, found


def test_what_might_fit_is_let_through_and_quota_is_counted_on_the_largest_device() -> None:
    state = _state()
    assert never_fits(_copies(gpu_pod("p", count=4, memory_mib=40000), 3), state) is None
    assert never_fits(_copies(gpu_pod("p", count=1, cores_pct=10, memory_mib=1000), 104), state) is None
    quarter = gpu_pod("q", count=1, cores_pct=25, memory_mib=20000)
    assert never_fits(_copies(quarter, 8), state, quota_gpus=2.0) is None
    whole_memory = gpu_pod("w", count=1, cores_pct=1, memory_mib=81559)  # defect 4's shape
    found = never_fits(_copies(whole_memory, 32), ClusterState([gpu_node(f"n{i}", 8, 81559) for i in range(4)]),
                       quota_gpus=2.0, tenant="team")
    assert found is not None and found.where == "quota" and "at least 32 GPUs" in found.why and "team" in found.why


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(container, min_size=1, max_size=2), st.integers(1, 12))
def test_never_fits_is_sound(containers: list, replicas: int) -> None:  # type: ignore[type-arg]
    """Whatever it refuses really cannot be placed, even one pod at a time on the empty cluster."""
    pod = Pod(name="p", containers=tuple(containers))
    pods = _copies(pod, replicas)
    state = cluster()
    found = never_fits(pods, state)
    if found is None:
        return
    sched = Scheduler(state, profile_for("binpack"))
    placed = [sched.schedule_and_bind(p).ok for p in pods]
    assert not all(placed), found


def test_containers_of_a_pod_may_share_devices() -> None:
    """Found by the property above: two containers asking for 2 and 3 GPUs fit a 4-GPU node (each container is
    fitted on its own and may reuse a device), so a node needs max(2, 3) devices, not 5."""
    from gpucluster.model import ContainerRequest

    pod = Pod(name="p", containers=(
        ContainerRequest("a", 8000, 0, (DeviceRequest("nvidia", 2),)),
        ContainerRequest("b", 8001, 0, (DeviceRequest("nvidia", 3),))))
    pods = _copies(pod, 2)
    state = cluster()
    assert never_fits(pods, state) is None
    sched = Scheduler(state, profile_for("binpack"))
    assert all(sched.schedule_and_bind(p).ok for p in pods)
