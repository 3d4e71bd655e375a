from __future__ import annotations

import threading

import numpy as np

from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import decision_annotations, format_handshake, parse_pod
from gpucluster.scheduler import Outcome

from .helpers import node_obj, pod_obj, registry


class Clock:
    def __init__(self, now: float = 10_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def make(n: int = 3, clock: Clock | None = None, **kw: object) -> KubeCluster:
    clock = clock or Clock()
    c = KubeCluster(registry(), "binpack", clock=clock, **kw)  # type: ignore[arg-type]
    c.set_nodes([node_obj(f"n{i}", now=clock.now) for i in range(n)])
    return c


def test_decide_assumes_and_concurrent_decisions_never_overcommit(fast_switching: None) -> None:
    c = make(3)
    reg = registry()
    # 3 nodes x 4 devices x 4 tasks = 48 slots; 25 % cores -> 4 per device as well
    pods = [parse_pod(pod_obj(f"p{i}", cores=25), reg) for i in range(60)]
    results: list[Outcome] = []

    def worker(chunk: list) -> None:  # type: ignore[type-arg]
        for p in chunk:
            results.append(c.decide(p).outcome)

    threads = [threading.Thread(target=worker, args=(pods[i::6],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(Outcome.SCHEDULED) == 48
    assert results.count(Outcome.UNSCHEDULABLE) == 12
    st = c.state
    assert (st.dev_tasks <= st.dev_max_tasks).all()
    assert (st.dev_core_used <= st.dev_core_cap).all()
    assert (st.dev_mem_used <= st.dev_mem_cap).all()
    assert all(c.scheduler.cache.is_assumed(p.key) for p in pods if p.key in st.allocations)


def test_recovery_from_annotations_rebuilds_usage() -> None:
    reg = registry()
    first = make(2)
    pods = [parse_pod(pod_obj(f"p{i}", mem=10000, cores=40), reg) for i in range(5)]
    bound_objs = []
    for p in pods:
        d = first.decide(p)
        assert d.allocation is not None
        ann = decision_annotations(d.allocation, reg, 1.0)
        bound_objs.append(pod_obj(p.name, mem=10000, cores=40, node=d.node or "", annotations=ann,
                                  phase="Running"))
    # a new process: nodes and pods listed from the API server
    second = make(2)
    second.set_pods(bound_objs)
    assert set(second.state.allocations) == set(first.state.allocations)
    assert np.array_equal(second.state.dev_mem_used, first.state.dev_mem_used)
    assert np.array_equal(second.state.dev_tasks, first.state.dev_tasks)
    assert not any(second.scheduler.cache.is_assumed(k) for k in second.state.allocations)
    assert second.unaccounted == {}
    # a finished pod gives its devices back
    done = dict(bound_objs[0], status={"phase": "Succeeded"})
    second.apply_pod(done)
    assert pods[0].key not in second.state.allocations


def test_stale_handshake_gets_no_new_pods() -> None:
    clock = Clock()
    c = make(2, clock, handshake_timeout=60.0)
    reg = registry()
    clock.now += 61
    c.apply_node(node_obj("n1", now=clock.now))  # n1 reports again, n0 does not
    d = c.decide(parse_pod(pod_obj("p"), reg))
    assert d.node == "n1"
    clock.now += 61
    d2 = c.decide(parse_pod(pod_obj("q"), reg))
    assert d2.outcome == Outcome.UNSCHEDULABLE
    assert d2.reasons == {"NodeHandshakeTimeout": 2}


def test_not_ready_node_and_candidates() -> None:
    c = make(3)
    reg = registry()
    c.apply_node(node_obj("n0", ready=False))
    d = c.decide(parse_pod(pod_obj("p"), reg), candidates=["n0", "n2"])
    assert d.node == "n2"
    reasons = c.node_reasons(parse_pod(pod_obj("q", mem=10**6), reg), ["n1", "n2"])
    assert reasons[c.state.node_index["n0"]] != 0


def test_node_device_change_rebuilds_and_keeps_allocations() -> None:
    c = make(2)
    reg = registry()
    d = c.decide(parse_pod(pod_obj("p", mem=5000), reg))
    assert d.node is not None
    c.apply_node(node_obj(d.node, gpus=8))  # the node now reports 8 devices
    assert c.rebuilds >= 2
    assert c.state.node_spec(d.node).gpu_count == 8
    assert "default/p" in c.state.allocations
    assert c.scheduler.cache.is_assumed("default/p")
    c.delete_node(d.node)
    assert not c.state.present[c.state.node_index[d.node]]


def test_bound_pod_on_an_unknown_node_is_accounted_when_the_node_arrives() -> None:
    reg = registry()
    c = make(1)
    ann = {"hami.io/vgpu-devices-allocated": "late-dev1,NVIDIA,3000,10:;"}
    c.apply_pod(pod_obj("p", node="late", annotations=ann, phase="Running"))
    assert "default/p" in c.unaccounted
    c.apply_node(node_obj("late"))
    assert c.unaccounted == {}
    i = c.state.node_index["late"]
    assert c.state.dev_mem_used[i, 1] == 3000
    assert c.decide(parse_pod(pod_obj("p"), reg)).node == "late"  # bound already: stays where it is


def test_handshake_annotation_update_does_not_rebuild() -> None:
    c = make(1)
    before = c.rebuilds
    obj = node_obj("n0")
    obj["metadata"]["annotations"]["hami.io/node-handshake"] = format_handshake(12345.0)
    c.apply_node(obj)
    assert c.rebuilds == before
    assert c.gate.handshake[0] == 12345.0
