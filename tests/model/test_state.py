from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.model import Allocation, AllocationError, ClusterState, DeviceGrant, TopologyLevel
from gpucluster.scheduler import Scheduler, profile_for
from tests.helpers import gpu_node, gpu_pod, state_of


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


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["pod", "delete", "cordon", "uncordon", "sick", "well", "add", "remove"]),
                          st.integers(0, 10 ** 6)), max_size=40))
def test_free_arrays_follow_every_change(ops: list[tuple[str, int]]) -> None:
    state = state_of(gpu_node("a", gpus=2), gpu_node("b", gpus=4, cpu_milli=8000))
    sched = Scheduler(state, profile_for("binpack"))
    placed: list[str] = []
    for i, (op, k) in enumerate(ops):
        names = [n.name for n, p in zip(state.nodes, state.present, strict=True) if p]
        name = names[k % len(names)] if names else ""
        if op == "pod":
            d = sched.schedule_and_bind(gpu_pod(f"p{i}", count=1 + k % 2, cores_pct=10 * (k % 10), cpu_milli=500))
            if d.ok:
                placed.append(d.pod.key)
        elif op == "delete" and placed:
            sched.delete(placed.pop(k % len(placed)))
        elif op in ("cordon", "uncordon") and name:
            state.set_schedulable(name, op == "uncordon")
        elif op in ("sick", "well") and name:
            state.set_device_health(name, k % int(state.dev_count[state.node_index[name]]), op == "well")
        elif op == "add":
            state.add_node(gpu_node(f"x{i}", gpus=1 + k % 8))
        elif op == "remove" and len(names) > 1:
            placed = [p for p in placed if state.allocations.get(p) is None or state.allocations[p].node != name]
            state.remove_node(name)
    snap = state.snapshot()
    assert (snap.cpu_free == state.cpu_cap - state.cpu_used).all()
    assert (snap.mem_free == state.mem_cap - state.mem_used).all()
    assert (snap.dev_core_free == state.dev_core_cap - state.dev_core_used).all()
    assert (snap.dev_mem_free == state.dev_mem_cap - state.dev_mem_used).all()
    assert (snap.dev_usable == (state.dev_valid & state.dev_healthy & state.schedulable[:, None])).all()


def test_a_copied_state_snapshots_its_own_arrays() -> None:
    """Snapshots share read-only views made once per state; a deep copy (or unpickled copy) must not reuse the
    original's views, or its snapshots would show the original's arrays."""
    import copy
    import pickle

    s = state_of(gpu_node("n0"))
    s.snapshot()  # the views exist now
    for twin in (copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        twin.set_schedulable("n0", False)
        assert not twin.snapshot().schedulable[0]
        assert s.snapshot().schedulable[0]
