"""The default placement policy, stranding-fgd: the measure's extra terms and the plugin's decisions."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState, Policy
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY, Scheduler, profile_for
from gpucluster.scheduler.plugins.fragmentation.measure import (
    NodeArrays,
    Stranding,
    TargetWorkload,
    cpu_per_gpu_milli,
    fgd_scores,
    model_capacity,
    model_scarcity,
)
from gpucluster.scheduler.profiles import fgd_paper_profile, stranding_fgd_profile
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, to_node_specs, to_pod
from tests.scheduler.test_properties import check_invariants

# whole-GPU pods with 12 CPUs each, and CPU-only pods
TARGET = TargetWorkload(((12000, 1000, 1, ""), (16000, 0, 0, "")), np.array([0.6, 0.4]))
TARGET_ARGS = {"target": TARGET.to_json()}


def test_cpu_rate_is_weighted_over_gpu_shapes_only() -> None:
    t = TargetWorkload(((4000, 1000, 1, ""), (2000, 500, 1, ""), (32000, 0, 0, "")), np.array([0.25, 0.25, 0.5]))
    # (0.25 * 4000 + 0.25 * 2000) / (0.25 * 1000 + 0.25 * 500): CPU-only shapes do not count
    assert cpu_per_gpu_milli(t) == pytest.approx(4.0)
    assert cpu_per_gpu_milli(TargetWorkload(((8000, 0, 0, ""),), np.array([1.0]))) == 0.0


def test_stranded_gpu_milli() -> None:
    s = Stranding(cpu_per_milli=4.0, scarcity=np.zeros(1))
    # 8 CPUs feed 2,000 GPU milli at 4 CPU milli per GPU milli: of 4,000 idle, 2,000 are stranded
    got = s.stranded(np.array([8000, 64000, -5]), np.array([4000, 4000, 1000]))
    assert got.tolist() == [2000.0, 0.0, 1000.0]


def test_model_scarcity_counts_constrained_demand_per_model() -> None:
    # T4-only shapes ask for half the GPU demand; the cluster has 2 T4 GPUs of 10: T4 is wanted 2.5x -> capped 1.
    # P100|T4 shapes (a quarter) spread over both; G2 is wanted by nobody in particular
    t = TargetWorkload(((4000, 1000, 1, "T4"), (4000, 1000, 1, "P100|T4"), (4000, 1000, 1, "")),
                       np.array([0.5, 0.25, 0.25]))
    names = ["G2", "P100", "T4"]
    cap = np.array([6.0, 2.0, 2.0])
    got = model_scarcity(t, names, cap)
    assert got.tolist() == pytest.approx([0.0, 0.125 * 10 / 2, 1.0, 0.0])


def _cluster(nodes: list[OpenbNode]) -> ClusterState:
    return ClusterState(to_node_specs(nodes))


@pytest.mark.parametrize("seed", range(6))
def test_cpu_only_pod_goes_where_it_strands_no_gpu(seed: int) -> None:
    # after the pod both nodes keep enough CPU for one more 12-CPU GPU pod, so FGD's measure does not change
    # and FGD leaves the choice to its tie order; "tight" could then feed only one of its two idle GPUs
    nodes = [OpenbNode("tight", 30000, 262144, 2, "G2"), OpenbNode("roomy", 104000, 262144, 2, "G2")]
    pod = OpenbPod("cpu-only", 16000, 1024, 0, 0)
    fgd = Scheduler(_cluster(nodes), fgd_paper_profile("fgd", seed, TARGET_ARGS))
    ours = Scheduler(_cluster(nodes), stranding_fgd_profile(seed, TARGET_ARGS))
    assert ours.schedule_and_bind(to_pod(pod)).node == "roomy"
    fgd_choice = fgd.schedule_and_bind(to_pod(pod)).node
    assert fgd_choice in ("tight", "roomy")


def test_fgd_alone_would_strand_for_some_tie_order() -> None:
    nodes = [OpenbNode("tight", 30000, 262144, 2, "G2"), OpenbNode("roomy", 104000, 262144, 2, "G2")]
    choices = {Scheduler(_cluster(nodes), fgd_paper_profile("fgd", s, TARGET_ARGS))
               .schedule_and_bind(to_pod(OpenbPod("c", 16000, 1024, 0, 0))).node for s in range(8)}
    assert choices == {"tight", "roomy"}  # the difference above is the new term, not the tie order


def test_unconstrained_pod_leaves_the_scarce_model_to_pods_that_need_it() -> None:
    target = TargetWorkload(((8000, 1000, 1, "T4"), (8000, 1000, 1, "")), np.array([0.5, 0.5]))
    args = {"target": target.to_json()}
    nodes = [OpenbNode("t4", 64000, 262144, 2, "T4"), OpenbNode("g2", 64000, 262144, 2, "G2")]
    for seed in range(6):
        sched = Scheduler(_cluster(nodes), stranding_fgd_profile(seed, args))
        assert sched.schedule_and_bind(to_pod(OpenbPod("any", 8000, 1024, 1, 1000))).node == "g2"
        assert sched.schedule_and_bind(to_pod(OpenbPod("t4-only", 8000, 1024, 1, 1000, ("T4",)))).node == "t4"


def test_weights_zero_is_plain_fgd() -> None:
    nodes = [OpenbNode(f"n{i}", c, 262144, 4, "G2") for i, c in enumerate((30000, 50000, 96000))]
    view = NodeArrays.from_snapshot(_cluster(nodes).snapshot())
    rows = np.arange(3)
    access = TARGET.access(view.model_names)
    plain = fgd_scores(view, rows, 16000, 0, 0, TARGET, access)
    zero = Stranding(cpu_per_gpu_milli(TARGET), model_scarcity(TARGET, view.model_names, model_capacity(view)),
                     cpu_weight=0.0, scarcity_weight=0.0)
    same = fgd_scores(view, rows, 16000, 0, 0, TARGET, access, stranding=zero)
    assert np.array_equal(plain[0], same[0]) and np.array_equal(plain[1], same[1])
    on = fgd_scores(view, rows, 16000, 0, 0, TARGET, access,
                    stranding=Stranding(cpu_per_gpu_milli(TARGET), zero.scarcity))
    assert on[0][2] > on[0][0]  # the roomy node now scores above the tight one


@pytest.mark.parametrize("seed", range(4))
def test_pod_annotations_still_select_binpack_or_spread(seed: int) -> None:
    nodes = [OpenbNode(x, 96000, 262144, 4, "G2") for x in "abc"]
    for policy in (Policy.SPREAD, Policy.BINPACK):
        sched = Scheduler(_cluster(nodes), stranding_fgd_profile(seed, TARGET_ARGS))
        first = sched.schedule_and_bind(to_pod(OpenbPod("p0", 12000, 1024, 1, 1000))).node
        pod = replace(to_pod(OpenbPod("p1", 12000, 1024, 1, 1000)), node_policy=policy)
        got = sched.schedule_and_bind(pod).node
        assert (got == first) == (policy is Policy.BINPACK), (policy, first, got)


def test_default_policy_is_stranding_fgd_with_gpu_speed_first() -> None:
    assert DEFAULT_PLACEMENT_POLICY == "speed-fgd"
    names = [p.name for p in profile_for("default").plugins]
    assert "StrandingFGDScore" in names and "NodeRankTieBreak" in names and "GpuSpeedTier" in names
    assert [n for n in names if n != "GpuSpeedTier"] == [p.name for p in profile_for("stranding-fgd").plugins]


pod_st = st.builds(
    OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 2000, 8000, 16000, 40000]),
    memory_mib=st.sampled_from([0, 1024, 65536]), num_gpu=st.sampled_from([0, 1, 1, 2, 4]),
    gpu_milli=st.sampled_from([0, 110, 470, 810, 1000]),
    gpu_spec=st.sampled_from([(), ("T4",), ("G2", "T4")]),
).filter(lambda p: (p.num_gpu == 0) == (p.gpu_milli == 0) and (p.num_gpu <= 1 or p.gpu_milli == 1000))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(pod_st, min_size=1, max_size=40), st.lists(st.integers(0, 1000), max_size=15))
def test_default_policy_never_overcommits(pods: list[OpenbPod], deletes: list[int]) -> None:
    """Online target learning, the extra terms and deletions: no node or device ever goes over capacity."""
    nodes = [OpenbNode("g", 96000, 393216, 8, "G2"), OpenbNode("t", 104000, 524288, 2, "T4"),
             OpenbNode("s", 16000, 65536, 2, "G2")]
    state = _cluster(nodes)
    sched = Scheduler(state, profile_for("default", 1))
    live: list[str] = []
    for i, p in enumerate(pods):
        pod = to_pod(p, name=f"p{i}")
        if sched.schedule_and_bind(pod).ok:
            live.append(pod.key)
        if deletes and i % 3 == 2 and live:
            sched.delete(live.pop(deletes[i % len(deletes)] % len(live)))
        check_invariants(state)
