"""The fast experiment path makes the same decisions as the policy plugins run by the generic framework.

Always on openb-format lists the test generates (shapes from the trace's published statistics,
``openb_synth``); on the real 1,213-node trace too when ``../shared/traces`` is there."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpucluster.model import ClusterState
from gpucluster.scheduler.framework import Handle
from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.scheduler.profiles import FGD_PAPER_POLICIES, fgd_paper_profile, stranding_fgd_profile
from gpucluster.scheduler.scheduler import Scheduler
from gpucluster.simulator.experiments.fgd import arrival_order, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.traces.openb import load_nodes, load_pods, to_node_specs, to_pod
from tests.simulator import openb_synth

TRACES = Path(__file__).resolve().parents[2] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


@pytest.fixture(scope="module", params=["generated", "shared"])
def trace(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[list, list, int]:  # type: ignore[type-arg]
    """(nodes, pods, pods to compare): 160 generated nodes filled to about 90 % (the fast path's caches and
    ties matter most on a full cluster), or the real trace's first 1,300 pods (a fifth full)."""
    if request.param == "generated":
        d = tmp_path_factory.mktemp("openb")
        nodes = load_nodes(openb_synth.write_nodes(d / "nodes.csv", 160, seed=3))
        pods = load_pods(openb_synth.write_pods(d / "pods.csv", 900, seed=3, gpuspec=0.25))
        return nodes, pods, 1400
    if not (TRACES / "openb_node_list_gpu_node.csv").is_file():
        pytest.skip("openb trace not available (the generated lists still ran)")
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / "openb_pod_list_gpuspec25.csv")
    return nodes, pods, 1300


@pytest.mark.parametrize("policy", [*FGD_PAPER_POLICIES, "stranding-fgd"])
def test_fast_path_matches_plugins(trace: tuple[list, list, int], policy: str) -> None:  # type: ignore[type-arg]
    nodes, pods, count = trace
    seed = 7
    # the first pods of a 1.3x-inflated order: every decision compared
    order = arrival_order(pods, sum(n.gpus for n in nodes) * 1000, seed, 1.3)
    warm, window = order[: count - 300], order[count - 300: count]
    tgt = target_workload(pods)
    rank = node_rank(seed, len(nodes))
    fast = run(nodes, warm + window, PolicyName(policy), tgt, np.random.default_rng([seed, 1]), rank)

    state = ClusterState(to_node_specs(nodes))
    fgd_args = {"target": tgt.to_json()} if policy in ("fgd", "stranding-fgd") else None
    profile = (stranding_fgd_profile(seed, fgd_args) if policy == "stranding-fgd"
               else fgd_paper_profile(policy, seed, fgd_args))
    sched = Scheduler(state, profile,
                      handle=Handle(rng=np.random.default_rng([seed, 1])))
    for i, p in enumerate(warm + window):
        d = sched.schedule_and_bind(to_pod(p, name=f"p{i}"))
        got_node = d.node_index if d.ok else -1
        assert got_node == int(fast.node[i]), f"pod {i} ({p}): plugins chose {got_node}, fast path {fast.node[i]}"
        if d.ok and d.allocation is not None:
            got_gpus = tuple(g.device_index for g in d.allocation.grants)
            assert got_gpus == fast.gpus[i], f"pod {i}: GPUs {got_gpus} vs {fast.gpus[i]}"
