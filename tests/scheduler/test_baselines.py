"""Baseline policy scores (FGD paper) and their plugins."""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.model import ClusterState
from gpucluster.scheduler.framework import PluginArgsError
from gpucluster.scheduler.plugins import builtin_registry
from gpucluster.scheduler.plugins.baselines import scores as bs
from gpucluster.scheduler.profiles import FGD_PAPER_POLICIES, PROFILES, fgd_paper_profile, profile_for
from gpucluster.scheduler.scheduler import Scheduler
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, to_node_specs, to_pod


def test_packing_cases() -> None:
    gl = np.array([[1000] * 8, [1000] * 2 + [0] * 6, [300, 1000, 0, 0, 0, 0, 0, 0], [1000, 0, 0, 0, 0, 0, 0, 0]])
    count = np.array([8, 2, 8, 1])
    # sharing pod (200 milli): idle 8-GPU node 25, idle 2-GPU node 31, shared GPU with 300 left: 100 - 30//10 = 97
    assert bs.packing_scores(gl, count, 200, 1).tolist() == [25, 31, 97, 32]
    # two whole GPUs on a used node: 50 - 2
    assert bs.packing_scores(gl[2:3], count[2:3], 1000, 2).tolist() == [48]
    assert bs.packing_scores(gl, count, 0, 0).tolist() == [0, 0, 0, 0]


def test_clustering_dotprod_bestfit() -> None:
    kinds = np.zeros((3, bs.N_KINDS), np.int64)
    kinds[0, bs.GpuKind.SHARE] = 2
    kinds[1, bs.GpuKind.SHARE] = 1
    kinds[1, bs.GpuKind.ONE] = 1
    left = np.array([4000, 4000, 8000])
    assert bs.clustering_scores(left, kinds, bs.GpuKind.SHARE).tolist() == [12 + 75, 12 + 50, 0 + 25]
    assert bs.clustering_scores(left, kinds, bs.GpuKind.EIGHT).tolist() == [12, 12, 25]
    assert bs.dotprod_scores(np.array([128000]), np.array([8000]), 128000, 8000).tolist() == [0]
    raw = bs.bestfit_raw(np.array([10000, 90000]), np.array([1000, 8000]), 8000, 1000)
    assert bs.minmax_normalise(raw).tolist() == [100, 0]
    assert bs.minmax_normalise(np.array([7, 7])).tolist() == [0, 0]


def test_gpu_choice() -> None:
    row = np.array([1000, 300, 600, 300])
    assert bs.best_fit_gpu(row, 250) == 1 and bs.best_fit_gpu(row, 700) == 0 and bs.best_fit_gpu(row, 2000) == -1
    assert bs.whole_gpus(np.array([500, 1000, 1000, 1000]), 2) == [1, 2]
    assert bs.random_gpu(row, 500, np.random.default_rng(0)) in (0, 2)
    assert bs.gpu_kind(0, 0) is None and bs.gpu_kind(1, 500) is bs.GpuKind.SHARE and bs.gpu_kind(3, 1000) is bs.GpuKind.OTHER


def test_profiles_are_registered() -> None:
    for p in (*FGD_PAPER_POLICIES,):
        assert p in PROFILES
        profile_for(p, 3)  # builds
    reg = builtin_registry()
    for name in ("RandomScore", "DotProductScore", "GpuClusteringScore", "GpuPackingScore", "BestFitScore",
                 "BestFitDevice", "RandomDevice", "NodeRankTieBreak", "FGDScore"):
        assert name in reg
    with pytest.raises(PluginArgsError, match=r"NodeRankTieBreak: args\.seed"):
        Scheduler(ClusterState([]), fgd_paper_profile("dotprod").model_copy(update={"plugins": [
            *fgd_paper_profile("dotprod").plugins[:-1],
            fgd_paper_profile("dotprod").plugins[-1].model_copy(update={"args": {"seed": "x"}})]}))


@pytest.mark.parametrize("policy", FGD_PAPER_POLICIES)
def test_each_policy_schedules_a_mix(policy: str) -> None:
    nodes = [OpenbNode(f"n{i}", 32000, 131072, g, m) for i, (g, m) in enumerate([(8, "G2"), (2, "T4"), (4, "G2")])]
    state = ClusterState(to_node_specs(nodes))
    sched = Scheduler(state, fgd_paper_profile(policy, seed=1))
    pods = [OpenbPod("e", 4000, 8192, 8, 1000), OpenbPod("a", 4000, 8192, 1, 500), OpenbPod("b", 8000, 8192, 2, 1000),
            OpenbPod("c", 2000, 4096, 0, 0), OpenbPod("d", 4000, 8192, 1, 300, ("T4",))]
    out = [sched.schedule_and_bind(to_pod(p)) for p in pods]
    assert all(d.ok for d in out)
    assert out[0].node == "n0"  # only the 8-GPU node holds 8 whole GPUs
    assert out[4].node == "n1"  # the T4 constraint holds
    used = state.totals()["core_used_milli"]
    assert used == 500 + 2000 + 300 + 8000
    # and a pod that cannot fit anywhere is unschedulable, not an error
    assert not sched.schedule_and_bind(to_pod(OpenbPod("f", 1000, 1024, 4, 1000, ("T4",)))).ok
