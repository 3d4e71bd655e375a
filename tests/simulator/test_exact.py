"""The exact must-place optimum (``simulator.experiments.exact``): it equals the best of every must-place run
(brute force), its run passes the independent checker, and no LP bound is below it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.simulator.experiments.bound import allocation_bound, class_bound, must_place_bound
from gpucluster.simulator.experiments.exact import must_place_optimum
from gpucluster.simulator.experiments.mustplace import allocated_milli, check_must_place
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod
from tests.simulator.test_bound import (
    _best_must_place_run,
    _fix,
    _is_a,
    _is_b,
    sharing_node_st,
    sharing_pod_st,
    tiny_node_st,
    tiny_pod_st,
)


def _named(nodes: list[OpenbNode], pods: list[OpenbPod]) -> tuple[list[OpenbNode], list[OpenbPod]]:
    return ([OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)],
            [_fix(p, i) for i, p in enumerate(pods)])


def _check_exact(nodes: list[OpenbNode], pods: list[OpenbPod], segments: int) -> int:
    best = _best_must_place_run(nodes, pods)
    for kw in ({}, {"symmetry": True}, {"symmetry": True, "gpu_symmetry": False, "dff_rows": False}):
        got = must_place_optimum(nodes, pods, **kw)  # type: ignore[arg-type]
        assert got.optimal, kw
        assert got.allocated_milli == best, kw
        assert got.upper_milli == best
        assert check_must_place(nodes, pods, got.node, got.gpus) is None, kw
        assert allocated_milli(pods, got.node) == best
    assert best <= allocation_bound(nodes, pods).bound_milli + 1e-6
    assert best <= must_place_bound(nodes, pods, segments=segments).bound_milli + 1e-6
    assert best <= class_bound(nodes, pods, _is_a, _is_b, segments=segments).bound_milli + 1e-6
    return best


@settings(max_examples=80, deadline=None)
@given(st.lists(tiny_node_st, min_size=1, max_size=3), st.lists(tiny_pod_st, min_size=1, max_size=7),
       st.integers(1, 4))
def test_the_milp_optimum_is_the_best_must_place_run(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                     segments: int) -> None:
    """Mixed pods (CPU-only, sharing, one and two whole GPUs, a model constraint) on up to three nodes of one or
    two GPUs (identical nodes included, where the node-symmetry rows act): the MILP's optimum, with and without
    the symmetry and GPU-packing rows, is the brute-force best, its run passes the checker, and the LP bounds
    are never below it."""
    _check_exact(*_named(nodes, pods), segments)


@settings(max_examples=60, deadline=None)
@given(st.lists(sharing_node_st, min_size=1, max_size=2), st.lists(sharing_pod_st, min_size=2, max_size=8),
       st.integers(1, 4))
def test_the_milp_optimum_on_sharing_heavy_orders(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                  segments: int) -> None:
    """Sharing-heavy orders (230-810 milli), where which GPU a pod shares decides what fits later."""
    _check_exact(*_named(nodes, pods), segments)


def test_the_must_place_rule_is_enforced() -> None:
    """One GPU; an 810-milli pod before a whole-GPU pod: the 810 fits, so it must be placed (810, not 1000)."""
    nodes = [OpenbNode("n0", 96000, 262144, 1, "G2")]
    pods = [OpenbPod("a", 1000, 1024, 1, 810), OpenbPod("b", 1000, 1024, 1, 1000)]
    got = must_place_optimum(nodes, pods)
    assert got.optimal
    assert got.allocated_milli == 810
    assert got.node == (0, -1)


def test_a_two_gpu_case_where_every_run_ends_at_1730() -> None:
    """``test_bound``'s 470, 470, 470, 320, 230 on two GPUs: every run ends at 1,730 milli."""
    nodes = [OpenbNode("n0", 96000, 262144, 2, "G2")]
    pods = [OpenbPod(f"p{i}", 1000, 1024, 1, m) for i, m in enumerate([470, 470, 470, 320, 230])]
    got = must_place_optimum(nodes, pods)
    assert got.allocated_milli == 1730
    assert got.idle_gpus == 0.27


def test_a_choice_that_pays_later() -> None:
    """Two one-GPU nodes, of 4 and 16 cores. A 2-core 470-milli pod, a 12-core 600-milli pod, a 2-core 530: the
    470 on the big node leaves the 600 nowhere (1,000 milli in all); on the small node all three fit (1,600)."""
    nodes = [OpenbNode("n0", 4000, 262144, 1, "G2"), OpenbNode("n1", 16000, 262144, 1, "G2")]
    pods = [OpenbPod("a", 2000, 1024, 1, 470), OpenbPod("b", 12000, 1024, 1, 600),
            OpenbPod("c", 2000, 1024, 1, 530)]
    assert _best_must_place_run(nodes, pods) == 1600
    got = must_place_optimum(nodes, pods)
    assert got.allocated_milli == 1600
    assert got.node[0] == 0
    assert check_must_place(nodes, pods, got.node, got.gpus) is None
    # a known run's allocation as a cut-off changes nothing
    assert must_place_optimum(nodes, pods, at_least_milli=970).allocated_milli == 1600
