"""The fragmentation measure and the FGD plugin."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState
from gpucluster.scheduler.plugins.fragmentation import (
    FGDScore,
    build_target_workload,
    fgd_scores,
    fragmentation,
    node_fragmentation,
)
from gpucluster.scheduler.plugins.fragmentation.measure import NodeArrays, TargetWorkload
from gpucluster.scheduler.profiles import fgd_paper_profile
from gpucluster.scheduler.scheduler import Scheduler
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, to_node_specs, to_pod

# half of the pods want 500 milli of a GPU with 4 CPUs, half are CPU-only
TARGET = TargetWorkload(((4000, 500, 1, ""), (2000, 0, 0, "")), np.array([0.5, 0.5]))


def _frag(cpu: list[int], gpus: list[list[int]], model: list[int] | None = None,
          target: TargetWorkload = TARGET, models: tuple[str, ...] = ("G2",)) -> np.ndarray:
    gl = np.array(gpus, np.int64)
    md = np.array(model if model is not None else [0] * len(cpu), np.int64)
    return fragmentation(np.array(cpu, np.int64), gl, md, target, target.access(list(models)))


def test_hand_computed_fragmentation() -> None:
    # node 0: GPUs left 1000 and 300; the 500-milli shape fits (GPU 0) -> 300 fragmented; CPU-only shape: all
    # 1300 idle counted; node 1: not enough CPU for the GPU shape -> all idle counted
    f = _frag([8000, 1000], [[1000, 300], [1000, 300]])
    assert f.tolist() == [0.5 * 300 + 0.5 * 1300, 0.5 * 1300 + 0.5 * 1300]


def test_model_constraint_counts_everything_as_fragmented() -> None:
    target = TargetWorkload(((1000, 500, 1, "T4"),), np.array([1.0]))
    f = _frag([8000, 8000], [[1000, 1000], [1000, 1000]], model=[0, 1], target=target, models=("G2", "T4"))
    assert f.tolist() == [2000.0, 0.0]


def test_target_workload_covers_and_normalises() -> None:
    shapes = [(1, 1000, 1, "")] * 50 + [(2, 500, 1, "")] * 30 + [(3, 0, 0, "")] * 15 + [(4, 0, 0, "")] * 5
    t = build_target_workload(shapes, 0.95)
    assert t.shapes == ((1, 1000, 1, ""), (2, 500, 1, ""), (3, 0, 0, ""))
    assert abs(t.weight.sum() - 1.0) < 1e-12 and t.weight[0] > t.weight[1] > t.weight[2]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 96000), st.lists(st.integers(0, 1000), min_size=8, max_size=8)),
             min_size=1, max_size=20),
)
def test_fragmentation_is_between_zero_and_idle(nodes: list[tuple[int, list[int]]]) -> None:
    cpu = [c for c, _ in nodes]
    gpus = [g for _, g in nodes]
    f = _frag(cpu, gpus)
    idle = np.array(gpus).sum(axis=1)
    assert (f >= 0).all() and (f <= idle + 1e-9).all()
    # with no CPU left, every GPU shape lacks CPU: everything idle is fragmented
    assert np.allclose(_frag([0] * len(nodes), gpus), idle)


def test_snapshot_metric_matches_arrays() -> None:
    nodes = [OpenbNode("a", 8000, 65536, 2, "G2"), OpenbNode("b", 64000, 65536, 8, "G2")]
    state = ClusterState(to_node_specs(nodes))
    sched = Scheduler(state, fgd_paper_profile("bestfit"))
    assert sched.schedule_and_bind(to_pod(OpenbPod("x", 6000, 1024, 1, 700))).ok
    per_node = node_fragmentation(state.snapshot(), TARGET)
    view = NodeArrays.from_snapshot(state.snapshot())
    assert np.allclose(per_node, fragmentation(view.cpu_left, view.gpu_left, view.model, TARGET,
                                               TARGET.access(list(view.model_names))))
    assert per_node[0] == 0.5 * 1300 + 0.5 * 1300  # 2 CPUs left on node a: the GPU shape lacks CPU


def test_fgd_prefers_the_placement_that_fragments_least() -> None:
    # target: whole-GPU pods. A 500-milli pod on node 0 fills the half-used GPU; on node 1 it splits an idle one
    target = TargetWorkload(((4000, 1000, 1, ""),), np.array([1.0]))
    view = NodeArrays(
        cpu_left=np.array([32000, 32000], np.int64), cpu_cap=np.array([32000, 32000], np.int64),
        mem_left=np.array([1, 1], np.int64), gpu_left=np.array([[500, 1000], [1000, 1000]], np.int64),
        gpu_count=np.array([2, 2], np.int64), model=np.array([0, 0], np.int64), model_names=["G2"],
    )
    scores, gpus = fgd_scores(view, np.array([0, 1]), 4000, 500, 1, target, target.access(["G2"]))
    assert scores.tolist() == [62, 37] and gpus[0] == 0  # int(sigmoid(+-0.5) * 100)


def test_fgd_plugin_learns_target_online_and_places() -> None:
    nodes = [OpenbNode("a", 32000, 65536, 2, "G2"), OpenbNode("b", 32000, 65536, 2, "G2")]
    state = ClusterState(to_node_specs(nodes))
    sched = Scheduler(state, fgd_paper_profile("fgd"))
    first = sched.schedule_and_bind(to_pod(OpenbPod("p0", 4000, 1024, 1, 500)))
    second = sched.schedule_and_bind(to_pod(OpenbPod("p1", 4000, 1024, 1, 500)))
    assert first.ok and second.ok
    # the second half-GPU pod completes the first one's GPU instead of splitting another
    assert second.node == first.node
    assert [g.device_index for g in second.allocation.grants] == [g.device_index for g in first.allocation.grants]
    plugin = sched.framework.plugin("FGDScore")
    assert isinstance(plugin, FGDScore) and plugin.target is not None
