"""Exact fits: a request that takes exactly what is left fits, one unit more does not, for every quantity the
scheduler checks (device memory in MiB and in percent, compute, the per-device task limit, the device count,
node CPU and host memory), both in the Filter/Reserve path (``Scheduler.schedule``) and in the state's own
safety net (``ClusterState.check_fits``)."""

from __future__ import annotations

import dataclasses

import pytest

from gpucluster.model import Allocation, AllocationError, ClusterState, DeviceGrant, Pod
from gpucluster.scheduler import Outcome, Scheduler, profile_for
from gpucluster.scheduler.feasibility import never_fits
from tests.helpers import gpu_node, gpu_pod, state_of


def _sched(gpus: int = 1, memory_mib: int = 16000, max_tasks: int = 3, cpu_milli: int = 4000,
           host_mib: int = 8192) -> Scheduler:
    return Scheduler(state_of(gpu_node("n0", gpus=gpus, memory_mib=memory_mib, max_tasks=max_tasks,
                                       cpu_milli=cpu_milli, host_mib=host_mib)), profile_for("binpack"))


def _place(s: Scheduler, pod: Pod) -> None:
    d = s.schedule_and_bind(pod)
    assert d.outcome == Outcome.SCHEDULED, d.message()


def _refused(s: Scheduler, pod: Pod) -> str:
    d = s.schedule(pod)
    assert d.outcome == Outcome.UNSCHEDULABLE, f"{pod.name} was placed on {d.node}"
    assert pod.key not in s.state.allocations
    return d.message()


@pytest.mark.parametrize(("first", "exact", "over", "why", "used"), [
    ({"memory_mib": 6000}, {"memory_mib": 10000}, {"memory_mib": 10001}, "InsufficientGPUMemory", "dev_mem_used"),
    ({"memory_pct": 60}, {"memory_pct": 40}, {"memory_pct": 41}, "InsufficientGPUMemory", "dev_mem_used"),
    ({"cores_pct": 60}, {"cores_pct": 40}, {"cores_pct": 41}, "InsufficientGPUCores", "dev_core_used"),
], ids=["memory-mib", "memory-pct", "cores"])
def test_device_exact_fit(first: dict[str, int], exact: dict[str, int], over: dict[str, int], why: str,
                          used: str) -> None:
    """After ``first``, ``exact`` takes exactly what is left of the one device (16,000 MiB, 100 %)."""
    s = _sched()
    base = {"memory_mib": 100, "cores_pct": 10, "cpu_milli": 0, "host_mib": 0}
    _place(s, gpu_pod("first", **{**base, **first}))
    assert why in _refused(s, gpu_pod("over", **{**base, **over}))
    _place(s, gpu_pod("exact", **{**base, **exact}))
    assert int(getattr(s.state, used)[0, 0]) == (16000 if used == "dev_mem_used" else 1000)


def test_a_request_without_compute_needs_some_left() -> None:
    """A pod asking no compute still runs on the device: it fits while any compute is left, not after."""
    s = _sched(max_tasks=10)
    _place(s, gpu_pod("a", memory_mib=100, cores_pct=99, cpu_milli=0, host_mib=0))
    _place(s, gpu_pod("zero", memory_mib=100, cores_pct=0, cpu_milli=0, host_mib=0))
    _place(s, gpu_pod("last", memory_mib=100, cores_pct=1, cpu_milli=0, host_mib=0))
    assert "InsufficientGPUCores" in _refused(s, gpu_pod("none-left", memory_mib=100, cores_pct=0, cpu_milli=0,
                                                         host_mib=0))


def test_task_limit_exact_fit() -> None:
    s = _sched(max_tasks=3)
    for k in range(3):  # exactly the limit
        _place(s, gpu_pod(f"t{k}", memory_mib=100, cores_pct=10, cpu_milli=0, host_mib=0))
    assert int(s.state.dev_tasks[0, 0]) == 3
    assert "GPUTaskLimit" in _refused(s, gpu_pod("fourth", memory_mib=100, cores_pct=10, cpu_milli=0, host_mib=0))


def test_a_whole_device_needs_it_empty() -> None:
    """A request for all of a device's compute needs the device free of tasks, even of tasks using no compute."""
    s = _sched(gpus=1, max_tasks=10)
    _place(s, gpu_pod("idle", memory_mib=100, cores_pct=0, cpu_milli=0, host_mib=0))
    assert "GPUExclusiveBusy" in _refused(s, gpu_pod("whole", memory_mib=100, cores_pct=100, cpu_milli=0,
                                                     host_mib=0))
    s.delete("default/idle")
    _place(s, gpu_pod("whole", memory_mib=100, cores_pct=100, cpu_milli=0, host_mib=0))


def test_device_count_exact_fit() -> None:
    s = _sched(gpus=2)
    assert "InsufficientGPUCount" in _refused(s, gpu_pod("three", count=3, cores_pct=10, cpu_milli=0, host_mib=0))
    _place(s, gpu_pod("two", count=2, cores_pct=10, cpu_milli=0, host_mib=0))


def test_node_cpu_and_host_memory_exact_fit() -> None:
    s = _sched(cpu_milli=4000, host_mib=8192)
    _place(s, gpu_pod("a", cores_pct=10, cpu_milli=1500, host_mib=3000))
    assert "InsufficientCPU" in _refused(s, gpu_pod("cpu", cores_pct=10, cpu_milli=2501, host_mib=100))
    assert "InsufficientMemory" in _refused(s, gpu_pod("mem", cores_pct=10, cpu_milli=100, host_mib=5193))
    _place(s, gpu_pod("exact", cores_pct=10, cpu_milli=2500, host_mib=5192))
    assert (int(s.state.cpu_used[0]), int(s.state.mem_used[0])) == (4000, 8192)


# ------------------------------------------------------------------------------- the state's safety net
def _alloc(key: str, mem: int = 0, core: int = 0, cpu: int = 0, host: int = 0, device: int = 0) -> Allocation:
    return Allocation(key, "n0", cpu, host, (( DeviceGrant(device, f"n0-gpu{device}", "nvidia", mem, core),),))


@pytest.fixture
def state() -> ClusterState:
    return state_of(gpu_node("n0", gpus=1, memory_mib=16000, max_tasks=2, cpu_milli=4000, host_mib=8192))


@pytest.mark.parametrize(("first", "exact", "over", "why"), [
    ({"mem": 6000}, {"mem": 10000}, {"mem": 10001}, "over memory"),
    ({"core": 600}, {"core": 400}, {"core": 401}, "over cores"),
    ({"cpu": 1000}, {"cpu": 3000}, {"cpu": 3001}, "CPU over capacity"),
    ({"host": 192}, {"host": 8000}, {"host": 8001}, "memory over capacity"),
])
def test_check_fits_allows_an_exact_fit_and_nothing_more(state: ClusterState, first: dict[str, int],
                                                         exact: dict[str, int], over: dict[str, int],
                                                         why: str) -> None:
    state.assign(_alloc("a", **first))
    with pytest.raises(AllocationError, match=why):
        state.assign(_alloc("over", **over))
    assert "over" not in state.allocations
    state.assign(_alloc("exact", **exact))


def test_check_fits_task_limit_device_and_duplicates(state: ClusterState) -> None:
    state.assign(_alloc("a", core=10))
    state.assign(_alloc("b", core=10))  # exactly the task limit of 2
    with pytest.raises(AllocationError, match="task limit"):
        state.assign(_alloc("c", core=10))
    with pytest.raises(AllocationError, match="already allocated"):
        state.assign(_alloc("a", core=10))
    with pytest.raises(AllocationError, match="has no device 1"):
        state.assign(_alloc("d", core=10, device=1))
    with pytest.raises(AllocationError, match="unknown node"):
        state.assign(Allocation("e", "nowhere", 0, 0))
    state.release("a")
    state.assign(_alloc("c", core=10))
    assert sorted(state.allocations) == ["b", "c"] and int(state.dev_tasks[0, 0]) == 2


# ------------------------------------------------------------------------------- admission (never_fits)
def test_never_fits_lets_every_exact_fit_through() -> None:
    """Refusing a job at submission is only right when it can never run: each quantity exactly at the largest
    the cluster has is let through, one unit more is refused."""
    state = state_of(gpu_node("a", gpus=2, memory_mib=16000, cpu_milli=4000, host_mib=8192, max_tasks=3),
                     gpu_node("b", gpus=1, memory_mib=8000, cpu_milli=2000, host_mib=4096, max_tasks=3))

    def copies(pod: Pod, n: int) -> list[Pod]:
        return [dataclasses.replace(pod, name=f"{pod.name}-{i}") for i in range(n)]

    ok = [
        copies(gpu_pod("mem", memory_mib=16000, cores_pct=10), 1),
        copies(gpu_pod("count", count=2, cores_pct=10), 1),
        copies(gpu_pod("cpu", cores_pct=10, cpu_milli=4000, host_mib=8192), 1),
        copies(gpu_pod("whole", cores_pct=100), 3),  # three devices, one whole device each
        copies(gpu_pod("tasks", cores_pct=10, cpu_milli=0, host_mib=0), 9),  # 3 devices x 3 tasks
        copies(gpu_pod("cores", cores_pct=100, memory_mib=100), 3),
    ]
    for pods in ok:
        assert never_fits(pods, state) is None, pods[0].name
    refused = [
        (copies(gpu_pod("mem", memory_mib=16001, cores_pct=10), 1), "resources"),
        (copies(gpu_pod("count", count=3, cores_pct=10), 1), "resources"),
        (copies(gpu_pod("cpu", cores_pct=10, cpu_milli=4001), 1), "resources"),
        (copies(gpu_pod("whole", cores_pct=100), 4), "replicas"),
        (copies(gpu_pod("tasks", cores_pct=10, cpu_milli=0, host_mib=0), 10), "replicas"),
    ]
    for pods, where in refused:
        found = never_fits(pods, state)
        assert found is not None and found.where == where, (pods[0].name, found)
    two = copies(gpu_pod("q", cores_pct=100), 2)
    assert never_fits(two, state, quota_gpus=2.0, tenant="t") is None
    found = never_fits(two, state, quota_gpus=1.5, tenant="t")
    assert found is not None and found.where == "quota"
