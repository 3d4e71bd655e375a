"""The placement bounds (``simulator.experiments.bound``): the dual-feasible functions are dual-feasible, and
no must-place policy run ever allocates more than either bound."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.bound import MILLI, allocation_bound, dff_family, must_place_bound
from gpucluster.simulator.experiments.fgd import target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

SIZES = [50, 110, 160, 190, 230, 320, 460, 470, 500, 550, 650, 810, 1000]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(SIZES[:-1]), min_size=1, max_size=12))
def test_every_function_of_the_family_is_dual_feasible(items: list[int]) -> None:
    """Items that fit one GPU (sum <= 1000) keep their f-values <= 1000."""
    fitting: list[int] = []
    for m in items:
        if sum(fitting) + m <= MILLI:
            fitting.append(m)
    for f in dff_family(SIZES):
        assert sum(f(m) for m in fitting) <= MILLI + 1e-9


node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([8000, 32000, 96000]),
                    memory_mib=st.sampled_from([32768, 262144]), gpus=st.sampled_from([1, 2, 4, 8]),
                    model=st.sampled_from(["G2", "T4"]))
pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 2000, 4000, 16000]),
                   memory_mib=st.sampled_from([0, 4096, 65536]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                   gpu_milli=st.sampled_from([230, 470, 650, 810, 1000]),
                   gpu_spec=st.sampled_from([(), (), ("T4",)]))


def _fix(p: OpenbPod, i: int) -> OpenbPod:
    milli = 0 if p.num_gpu == 0 else (1000 if p.num_gpu > 1 else p.gpu_milli)
    return OpenbPod(f"p{i}", p.cpu_milli, p.memory_mib, p.num_gpu, milli, p.gpu_spec if p.num_gpu else ())


@settings(max_examples=25, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=4), st.lists(pod_st, min_size=1, max_size=20), st.integers(0, 99))
def test_no_must_place_policy_beats_the_bounds(nodes: list[OpenbNode], pods: list[OpenbPod], seed: int) -> None:
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    anyp = allocation_bound(nodes, pods).bound_milli
    mp = must_place_bound(nodes, pods, segments=4).bound_milli
    assert mp <= anyp + 1e-6
    tgt = target_workload(pods)
    for policy in (PolicyName.RANDOM, PolicyName.BESTFIT, PolicyName.FGD, PolicyName.STRANDING_FGD):
        log = run(nodes, pods, policy, tgt, np.random.default_rng(seed), node_rank(seed, len(nodes)))
        assert int(log.used_milli[-1]) <= mp + 1e-6, policy


def test_the_must_place_rule_lowers_the_bound() -> None:
    """One GPU; an 810-milli pod arrives before a whole-GPU pod. Any placement could take the whole pod (1000);
    a policy that places every pod that fits must take the 810 first and then cannot fit the whole one."""
    nodes = [OpenbNode("n0", 96000, 262144, 1, "G2")]
    pods = [OpenbPod("a", 1000, 1024, 1, 810), OpenbPod("b", 1000, 1024, 1, 1000)]
    assert allocation_bound(nodes, pods).bound_milli == MILLI
    mp = must_place_bound(nodes, pods, segments=2).bound_milli
    assert 810 <= mp < MILLI
