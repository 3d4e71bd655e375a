"""The online adversary (``simulator.experiments.online``): its forced completions, its best runs and its online
figures agree with every must-place run enumerated by brute force, and no shipped policy escapes it."""

from __future__ import annotations

from functools import cache
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.fgd import target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.experiments.mustplace import check_run_log
from gpucluster.simulator.experiments.online import (
    COMMON,
    LIGHT,
    MILLI,
    Shapes,
    adversary_orders,
    completions,
    online_regret,
    roomy,
    small_pods_per_gpu,
)
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod
from tests.simulator.test_bound import _best_must_place_run

State = tuple[tuple[int, ...], tuple[int, ...], tuple[tuple[int, ...], ...]]

T4 = OpenbNode("t4", 104000, 524288, 2, "T4")
A10 = OpenbNode("a10", 128000, 1048576, 1, "A10")
V100 = OpenbNode("v100", 8000, 32768, 1, "V100M16")  # the leanest of the Alibaba cluster: 8 cores, 32 GiB a GPU
P100 = OpenbNode("p100", 16000, 122880, 2, "P100")
ALIBABA_TYPES = [(96000, 393216, 8, "G2"), (104000, 524288, 2, "T4"), (16000, 122880, 2, "P100"),
                 (128000, 786432, 8, "G3"), (32000, 131072, 4, "V100M16"), (64000, 262144, 2, "P100"),
                 (96000, 786432, 8, "V100M32"), (8000, 32768, 1, "V100M16"), (96000, 393216, 4, "T4"),
                 (48000, 376832, 4, "V100M32"), (64000, 262144, 8, "V100M16"), (8000, 61440, 1, "P100"),
                 (8000, 61440, 2, "P100"), (128000, 1048576, 1, "A10"), (82000, 344064, 8, "V100M16")]
"""Every node type of the Alibaba GPU cluster (``openb_node_list_gpu_node.csv``: CPU milli, MiB, GPUs, model)."""


def _start(nodes: list[OpenbNode]) -> State:
    return (tuple(n.cpu_milli for n in nodes), tuple(n.memory_mib for n in nodes),
            tuple((MILLI,) * n.gpus for n in nodes))


def _moves(nodes: list[OpenbNode], s: State, p: OpenbPod) -> list[State]:
    """Every state after ``p`` is placed on some node and GPUs where it fits (the experiment's fit test); empty
    when it fits nowhere."""
    cpu, mem, gpu = s
    out = []
    for n in range(len(nodes)):
        if cpu[n] < p.cpu_milli or mem[n] < p.memory_mib:
            continue
        free = [g for g in range(len(gpu[n])) if gpu[n][g] >= p.gpu_milli]
        for chosen in combinations(free, p.num_gpu):
            left = tuple(m - p.gpu_milli if g in chosen else m for g, m in enumerate(gpu[n]))
            out.append(((*cpu[:n], cpu[n] - p.cpu_milli, *cpu[n + 1:]),
                        (*mem[:n], mem[n] - p.memory_mib, *mem[n + 1:]), (*gpu[:n], left, *gpu[n + 1:])))
    return out


def _reachable(nodes: list[OpenbNode], pods: list[OpenbPod]) -> set[State]:
    """Every state some must-place run of ``pods`` ends in."""
    now = {_start(nodes)}
    for p in pods:
        nxt: set[State] = set()
        for s in now:
            nxt |= set(_moves(nodes, s, p)) or {s}  # a pod that fits nowhere fails and the run goes on
        now = nxt
    return now


def _completion_range(nodes: list[OpenbNode], s: State, pods: list[OpenbPod]) -> tuple[int, int]:
    """The least and the most GPU milli any must-place run of ``pods`` from ``s`` adds."""

    @cache
    def go(i: int, st_: State) -> tuple[int, int]:
        if i == len(pods):
            return 0, 0
        nxt = _moves(nodes, st_, pods[i])
        if not nxt:
            return go(i + 1, st_)
        got = [go(i + 1, t) for t in nxt]
        g = pods[i].total_gpu_milli
        return g + min(lo for lo, _ in got), g + max(hi for _, hi in got)

    return go(0, s)


def _check_adversary(nodes: list[OpenbNode], small: int, shapes: Shapes = COMMON) -> None:
    """Every must-place run of the shared prefix ends in a state whose completion on each order is forced (every
    run from it adds the same) and equals ``completions``; the best runs of the two orders (brute force over
    every run) are the module's; and the least, over the reachable prefix states, of the larger loss (the best
    any deterministic online policy can guarantee) is exactly ``online_regret``'s, and so is the randomized
    figure at its ``p``."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    assert all(roomy(n, shapes) for n in nodes)
    gpus = sum(n.gpus for n in nodes)
    order_a, order_b = adversary_orders(gpus, small, shapes)
    prefix, rest_a, rest_b = order_a[:small], order_a[small:], order_b[small:]
    assert order_b[:small] == prefix
    got = online_regret(gpus, small)
    assert _best_must_place_run(nodes, order_a) == got.best_a_milli
    assert _best_must_place_run(nodes, order_b) == got.best_b_milli
    base = 320 * small
    worst, expected = None, None
    for s in _reachable(nodes, prefix):
        assert sum(n.cpu_milli - c for n, c in zip(nodes, s[0], strict=True)) == shapes.small.cpu_milli * small
        lo_a, hi_a = _completion_range(nodes, s, rest_a)
        lo_b, hi_b = _completion_range(nodes, s, rest_b)
        assert lo_a == hi_a and lo_b == hi_b  # forced
        state = small_pods_per_gpu([m for g in s[2] for m in g])
        assert (base + lo_a, base + lo_b) == completions(state, gpus, small)
        ra, rb = got.best_a_milli - base - lo_a, got.best_b_milli - base - lo_b
        worst = max(ra, rb) if worst is None else min(worst, max(ra, rb))
        e = got.p_a * ra + (1 - got.p_a) * rb
        expected = e if expected is None else min(expected, e)
    assert worst == got.deterministic_milli
    assert expected == pytest.approx(got.randomized_milli)


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([COMMON, LIGHT]), st.lists(st.sampled_from([T4, A10, V100, P100]), min_size=1, max_size=3),
       st.data())
def test_every_online_policy_loses_what_the_adversary_says(shapes: Shapes, nodes: list[OpenbNode],
                                                           data: st.DataObject) -> None:
    """``_check_adversary`` on random clusters of 1-3 roomy nodes (1-5 GPUs; the V100 and small P100 nodes only
    for the ``LIGHT`` shapes) and every count of small pods."""
    nodes = [n for n in nodes if roomy(n, shapes)] or [T4]
    _check_adversary(nodes, data.draw(st.integers(0, sum(n.gpus for n in nodes))), shapes)


@pytest.mark.parametrize("small", [0, 1, 2, 3, 4])
def test_the_adversary_on_two_t4_nodes(small: int) -> None:
    """``_check_adversary`` on 2 x 2 GPUs, every count of small pods (no shrinking: a failure shows at once)."""
    _check_adversary([T4, T4], small)


def test_the_light_adversary_on_the_leanest_nodes() -> None:
    """The ``LIGHT`` shapes on a 1-GPU V100 node (8 cores, 32 GiB) and a 2-GPU P100 node (16 cores)."""
    for small in range(4):
        _check_adversary([V100, P100], small, LIGHT)


def test_states_with_three_gpus_of_two_small_pods_never_lose_least() -> None:
    """``states`` leaves out ``a_2 >= 3`` (dominated); over every state the figures are the same."""
    for gpus in range(0, 31, 3):
        for small in range(gpus + 1):
            assert online_regret(gpus, small) == online_regret(gpus, small, every=True)


def test_two_small_pods_on_one_t4_node() -> None:
    """The hand case: two 320-milli pods on a 2-GPU node. Together on one GPU, order A adds a whole pod (1,640)
    and order B one 650 (1,290, where 1,940 was possible); apart, A adds nothing (640, where 1,640 was possible)
    and B two 650s (1,940). So every online policy loses 650 milli on one of them; a randomized one, with A drawn
    with probability 650 / 1,650, 393.9 in expectation."""
    got = online_regret(2, 2)
    assert (got.best_a_milli, got.best_b_milli) == (1640, 1940)
    assert got.deterministic_milli == 650
    assert got.state == (1, 0, 1, 0)
    assert got.p_a == pytest.approx(650 / 1650, abs=1e-6)
    assert got.randomized_milli == pytest.approx(650 * 1000 / 1650, abs=1e-3)


def test_the_loss_grows_with_the_small_pods() -> None:
    """0.1635 GPU per small pod in the continuous limit (``ADVERSARY_DOC``); more than 10 GPUs from 62 small pods
    on 62 GPUs (10 GPUs is issue 30's aim), and not at 61."""
    assert online_regret(61, 61).deterministic_gpus <= 10 < online_regret(62, 62).deterministic_gpus
    big = online_regret(1200, 1200)
    assert big.deterministic_gpus == pytest.approx(0.1635 * 1200, rel=0.01)
    assert big.randomized_gpus == pytest.approx(0.1635 * 1200, rel=0.01)
    assert big.randomized_milli <= big.deterministic_milli


def test_roomy_nodes() -> None:
    """For ``COMMON`` the T4, G3 and 64-core P100 nodes of the Alibaba cluster are roomy, the G2 (12 cores a GPU)
    and the small P100 are not; for ``LIGHT`` every node type of the cluster is."""
    assert roomy(T4) and roomy(A10)
    assert roomy(OpenbNode("g3", 128000, 786432, 8, "G3"))
    assert roomy(OpenbNode("p100", 64000, 262144, 2, "P100"))
    assert not roomy(OpenbNode("g2", 96000, 393216, 8, "G2"))
    assert not roomy(P100) and not roomy(V100)
    assert all(roomy(OpenbNode("n", *t), LIGHT) for t in ALIBABA_TYPES)
    assert COMMON.per_gpu == (15908, 62362) and LIGHT.per_gpu == (3000, 6144)
    with pytest.raises(ValueError, match="small pods"):
        adversary_orders(2, 3)


@pytest.mark.parametrize("policy", [PolicyName.FGD, PolicyName.STRANDING_FGD, PolicyName.BESTFIT])
@pytest.mark.parametrize("shapes", [COMMON, LIGHT])
def test_no_shipped_policy_escapes_the_adversary(policy: PolicyName, shapes: Shapes) -> None:
    """With one target workload for both orders (the shapes of both: what it learned does not tell them apart)
    the policies see the same prefix, end it in one state and lose at least the adversary's figure on one of the
    two orders (24 GPUs: 12 T4 nodes, or for ``LIGHT`` three 8-GPU G2 nodes; runs checked as must-place). With
    each order's own shapes as its target (the future known: not an online policy) FGD loses nothing on either."""
    if shapes is COMMON:
        nodes = [OpenbNode(f"n{i}", T4.cpu_milli, T4.memory_mib, T4.gpus, T4.model) for i in range(12)]
    else:
        nodes = [OpenbNode(f"n{i}", 96000, 393216, 8, "G2") for i in range(3)]
    got = online_regret(24, 24)
    orders = adversary_orders(24, 24, shapes)
    both = target_workload(orders[0] + orders[1])
    losses, knowing = [], []
    for order, best in zip(orders, (got.best_a_milli, got.best_b_milli), strict=True):
        log = run(nodes, order, policy, both, np.random.default_rng(0), node_rank(0, len(nodes)))
        assert check_run_log(nodes, order, log) is None
        losses.append(best - int(log.used_milli[-1]))
        own = run(nodes, order, policy, target_workload(order), np.random.default_rng(0), node_rank(0, len(nodes)))
        knowing.append(best - int(own.used_milli[-1]))
    assert max(losses) >= got.deterministic_milli
    if policy == PolicyName.FGD:
        assert knowing == [0, 0]
