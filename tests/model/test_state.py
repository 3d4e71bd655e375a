from __future__ import annotations

import numpy as np
import pytest

from gpucluster.model import Allocation, AllocationError, ClusterState, DeviceGrant, TopologyLevel
from tests.helpers import gpu_node


def grant(j: int, mem: int = 1000, core: int = 300, node: str = "n0") -> DeviceGrant:
    return DeviceGrant(j, f"{node}-gpu{j}", "nvidia", mem, core)


def test_assign_and_release_update_arrays_and_sums() -> None:
    s = ClusterState([gpu_node("n0"), gpu_node("n1", gpus=2)])
    assert s.dev_valid.shape == (2, 4)
    assert s.dev_valid[1].tolist() == [True, True, False, False]
    a = Allocation("ns/p", "n0", 2000, 4096, ((grant(0), grant(1, 500, 1000)),))
    s.assign(a)
    assert s.cpu_used[0] == 2000 and s.mem_used[0] == 4096
    assert s.dev_core_used[0].tolist() == [300, 1000, 0, 0]
    assert s.node_core_used[0] == 1300 and s.node_tasks[0] == 2 and s.node_dmem_used[0] == 1500
    gen = s.generation
    s.release("ns/p")
    assert s.generation > gen
    assert not s.dev_core_used.any() and not s.node_tasks.any() and s.cpu_used[0] == 0


@pytest.mark.parametrize(
    ("alloc", "why"),
    [
        (Allocation("a/x", "nope", 0, 0), "unknown node"),
        (Allocation("a/x", "n0", 10**9, 0), "CPU"),
        (Allocation("a/x", "n0", 0, 10**9), "memory"),
        (Allocation("a/x", "n0", 0, 0, ((grant(0, mem=16001),),)), "over memory"),
        (Allocation("a/x", "n0", 0, 0, ((grant(0, core=600), grant(0, core=600)),)), "over cores"),
        (Allocation("a/x", "n0", 0, 0, ((grant(7),),)), "no device 7"),
    ],
)
def test_assign_rejects_what_does_not_fit(alloc: Allocation, why: str) -> None:
    s = ClusterState([gpu_node("n0")])
    with pytest.raises(AllocationError, match=why):
        s.assign(alloc)
    assert not s.allocations and s.cpu_used[0] == 0


def test_task_limit_is_enforced() -> None:
    s = ClusterState([gpu_node("n0", max_tasks=2)])
    for i in range(2):
        s.assign(Allocation(f"a/{i}", "n0", 0, 0, ((grant(0, 10, 10),),)))
    with pytest.raises(AllocationError, match="task limit"):
        s.assign(Allocation("a/2", "n0", 0, 0, ((grant(0, 10, 10),),)))


def test_double_assign_rejected() -> None:
    s = ClusterState([gpu_node("n0")])
    s.assign(Allocation("a/x", "n0", 1, 1))
    with pytest.raises(AllocationError, match="already allocated"):
        s.assign(Allocation("a/x", "n0", 1, 1))


def test_add_node_widens_device_axis_and_remove_node_evicts() -> None:
    s = ClusterState([gpu_node("n0", gpus=2)])
    s.assign(Allocation("a/x", "n0", 100, 100, ((grant(1),),)))
    i = s.add_node(gpu_node("n1", gpus=8))
    assert i == 1 and s.dev_valid.shape == (2, 8)
    assert s.dev_core_used[0, 1] == 300  # existing usage kept when arrays grow
    evicted = s.remove_node("n0")
    assert [a.pod_key for a in evicted] == ["a/x"]
    assert not s.present[0] and not s.schedulable[0]
    assert s.totals()["nodes"] == 1 and s.totals()["devices"] == 8


def test_snapshot_is_read_only_and_knows_when_stale() -> None:
    s = ClusterState([gpu_node("n0")])
    snap = s.snapshot()
    with pytest.raises(ValueError, match="read-only"):
        snap.cpu_used[0] = 5
    assert np.array_equal(snap.dev_core_free, s.dev_core_cap)
    assert not snap.stale
    s.set_schedulable("n0", False)
    assert snap.stale


def test_topology_levels() -> None:
    s = ClusterState([gpu_node("a", nvlink=2, leaf="l0"), gpu_node("b", leaf="l0"), gpu_node("c", leaf="l1")])
    assert s.topology_level(0, 0, 0, 1) == TopologyLevel.NVLINK
    assert s.topology_level(0, 0, 0, 2) == TopologyLevel.NODE
    assert s.topology_level(0, 1) == TopologyLevel.LEAF
    assert s.topology_level(0, 2) == TopologyLevel.SPINE
