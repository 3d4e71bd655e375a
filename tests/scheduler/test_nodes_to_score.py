"""kube-scheduler's ``percentageOfNodesToScore`` in our own decisions (issue 25: the chart's value takes effect in
scheduler mode too). Semantics as kube-scheduler's ``numFeasibleNodesToFind``: every node below 100 nodes; else
the percentage of all nodes, at least 100; 0 is adaptive (50 % minus 1 % per 125 nodes, at least 5 %). A decision
scores the first that many feasible nodes found walking round-robin from where the previous decision stopped."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.model import ClusterState
from gpucluster.scheduler import Outcome, Scheduler, profile_for
from gpucluster.scheduler.core import nodes_to_score
from tests.helpers import gpu_node, gpu_pod


@pytest.mark.parametrize(("percentage", "nodes", "expected"), [
    (100, 5000, 5000),  # every node
    (30, 1000, 300),
    (5, 1000, 100),     # never under 100 nodes
    (10, 50, 50),       # a small cluster: every node
    (0, 99, 99),
    (0, 1000, 420),     # adaptive: 50 - 1000 // 125 = 42 %
    (0, 5000, 500),     # adaptive: 50 - 40 = 10 %
    (0, 10000, 500),    # adaptive floor: 5 %
    (1, 100, 100),
    (33, 1001, 330),    # rounded down
])
def test_nodes_to_score_is_kube_schedulers(percentage: int, nodes: int, expected: int) -> None:
    assert nodes_to_score(percentage, nodes) == expected


@given(st.integers(0, 100), st.integers(0, 50_000))
def test_nodes_to_score_bounds(percentage: int, nodes: int) -> None:
    n = nodes_to_score(percentage, nodes)
    assert min(nodes, 100) <= n <= nodes
    if percentage:
        assert n == nodes or n == max(100, nodes * percentage // 100)
    assert nodes_to_score(100, nodes) == nodes


def _scheduler(nodes: int, percentage: int, state: ClusterState | None = None) -> Scheduler:
    state = state or ClusterState([gpu_node(f"n{i:04d}", gpus=1, memory_mib=16000) for i in range(nodes)])
    profile = profile_for("binpack").model_copy(update={"percentage_of_nodes_to_score": percentage,
                                                        "tie_break": "first"})
    return Scheduler(state, profile)


def test_a_decision_scores_only_its_share_of_the_feasible_nodes() -> None:
    sched = _scheduler(300, 10)  # 10 % of 300 = 30, below the floor: 100 nodes scored
    first = sched.schedule(gpu_pod("a", memory_mib=1000))
    assert first.outcome == Outcome.SCHEDULED
    assert (first.feasible_nodes, first.scored_nodes, first.total_nodes) == (300, 100, 300)
    # round-robin: the next decisions look at the next hundred nodes, then wrap around
    windows = [first.node_index]
    for name in ("b", "c", "d"):
        d = sched.schedule(gpu_pod(name, memory_mib=1000))
        assert d.scored_nodes == 100
        windows.append(d.node_index)
    assert [w // 100 for w in windows] == [0, 1, 2, 0]
    everything = _scheduler(300, 100).schedule(gpu_pod("a", memory_mib=1000))
    assert (everything.feasible_nodes, everything.scored_nodes) == (300, 300)
    small = _scheduler(80, 10).schedule(gpu_pod("a", memory_mib=1000))  # under 100 nodes: every node
    assert (small.feasible_nodes, small.scored_nodes) == (80, 80)


@pytest.mark.parametrize(("start", "percentage", "scored", "sees_best"), [
    (0, 100, 300, True),
    (0, 10, 100, False),    # n0000..n0099
    (100, 0, 144, True),    # adaptive: 48 % of 300, n0100..n0243
    (200, 40, 120, False),  # n0200..n0299, then n0000..n0019
    (100, 40, 120, True),   # n0100..n0219
])
def test_the_share_decides_which_nodes_can_win(start: int, percentage: int, scored: int, sees_best: bool) -> None:
    """Binpack prefers the one node already in use (n0150): a decision whose share of nodes reaches it picks it,
    one whose share does not cannot: the setting changes decisions, as kube-scheduler's does."""
    seed = _scheduler(300, 10)
    seed.framework.next_start_node = 150  # its hundred nodes are n0150..n0249; the first of them wins the tie
    placed = seed.schedule_and_bind(gpu_pod("seed", memory_mib=4000))
    assert placed.node == "n0150"
    sched = _scheduler(300, percentage, seed.state)
    sched.framework.next_start_node = start
    d = sched.schedule(gpu_pod("p", memory_mib=4000))
    assert d.outcome == Outcome.SCHEDULED
    assert (d.feasible_nodes, d.scored_nodes) == (300, scored)
    assert (d.node == "n0150") is sees_best, d.node
