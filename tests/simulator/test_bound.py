"""The placement bounds (``simulator.experiments.bound``): the dual-feasible functions are dual-feasible, and
no must-place policy run ever allocates more than either bound."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.bound import (
    MILLI,
    _GpuKnapsack,
    _LPTroubleError,
    _OrderLP,
    allocation_bound,
    class_bound,
    covers,
    dff_family,
    must_place_bound,
)
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


# ------------------------------------------------------------------------ against every must-place run (brute force)
def _best_must_place_run(nodes: list[OpenbNode], pods: list[OpenbPod]) -> int:
    """The largest final allocation over *every* run that places each pod that fits when it arrives: at each pod,
    every node and every choice of its GPUs that can hold it is tried (the fast path's fit test)."""
    from itertools import combinations

    def go(i: int, cpu: tuple[int, ...], mem: tuple[int, ...], gpu: tuple[tuple[int, ...], ...]) -> int:
        if i == len(pods):
            return 0
        p = pods[i]
        best = -1
        for n, node in enumerate(nodes):
            if cpu[n] < p.cpu_milli or mem[n] < p.memory_mib:
                continue
            if p.num_gpu and p.gpu_spec and node.model not in p.gpu_spec:
                continue
            free = [g for g in range(node.gpus) if gpu[n][g] >= p.gpu_milli] if p.num_gpu else []
            choices = list(combinations(free, p.num_gpu)) if p.num_gpu else [()]
            for chosen in choices:
                left = tuple(m - p.gpu_milli if g in chosen else m for g, m in enumerate(gpu[n]))
                rest = go(i + 1, (*cpu[:n], cpu[n] - p.cpu_milli, *cpu[n + 1:]),
                          (*mem[:n], mem[n] - p.memory_mib, *mem[n + 1:]), (*gpu[:n], left, *gpu[n + 1:]))
                best = max(best, p.total_gpu_milli + rest)
        if best < 0:  # fits nowhere: the pod fails and the run goes on
            return go(i + 1, cpu, mem, gpu)
        return best

    return go(0, tuple(n.cpu_milli for n in nodes), tuple(n.memory_mib for n in nodes),
              tuple((MILLI,) * n.gpus for n in nodes))


tiny_node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([4000, 8000, 96000]),
                         memory_mib=st.sampled_from([8192, 262144]), gpus=st.sampled_from([1, 2]),
                         model=st.sampled_from(["G2", "T4"]))
tiny_pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152, 4000]),
                        memory_mib=st.sampled_from([0, 4096]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                        gpu_milli=st.sampled_from([160, 470, 650, 810, 1000]),
                        gpu_spec=st.sampled_from([(), (), ("T4",)]))


@settings(max_examples=120, deadline=None)
@given(st.lists(tiny_node_st, min_size=1, max_size=2), st.lists(tiny_pod_st, min_size=1, max_size=6),
       st.sampled_from([None, 810, 470]), st.integers(1, 6))
def test_no_must_place_run_at_all_beats_the_bound(nodes: list[OpenbNode], pods: list[OpenbPod], key_milli: int | None,
                                                  segments: int) -> None:
    """Not only the shipped policies: the best of every must-place run (brute force) is within both bounds, for
    every key class and segmentation (the covering and covered-pod rows are valid whatever the order)."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    assert best <= allocation_bound(nodes, pods).bound_milli + 1e-6
    key = None if key_milli is None else (lambda s: s[2] == 1 and s[3] == key_milli)
    assert best <= must_place_bound(nodes, pods, segments=segments, key=key).bound_milli + 1e-6


def test_covering_pods_fail_after_the_first_key_failure() -> None:
    """Two one-GPU nodes of 4 cores. An 810-milli pod (3.152 cores) takes one node, a 3-core CPU pod must go to
    the other, so the next 810-milli pod fits nowhere, and the whole-GPU pod after it (3.2 cores) cannot fit
    either: every must-place run ends at 810. Without the covering, covered-pod and failed-pod rows the bound was
    1810 (the LP left the CPU pod out, or counted the failed 810 as placed, and added part of the whole-GPU pod
    after the failure) - the rows make it exact."""
    nodes = [OpenbNode(f"n{i}", 4000, 65536, 1, "G2") for i in range(2)]
    pods = [OpenbPod("a", 3152, 1024, 1, 810), OpenbPod("b", 3000, 1024, 0, 0),
            OpenbPod("c", 3152, 1024, 1, 810), OpenbPod("d", 3200, 1024, 1, 1000)]
    assert _best_must_place_run(nodes, pods) == 810
    got = must_place_bound(nodes, pods, segments=4, key=lambda s: s[3] == 810)
    assert got.bound_milli == pytest.approx(810, abs=1e-6)


def test_covers_follows_the_fit_test() -> None:
    key = (3152, 5600, 1, 810, ())
    assert covers((4000, 8192, 1, 1000, ()), key)  # a bigger whole-GPU pod
    assert covers((4000, 8192, 8, 1000, ("G2",)), key)  # fewer models allowed than the key: still covers
    assert not covers((3000, 8192, 1, 1000, ()), key)  # less CPU
    assert covers(key, (1000, 0, 0, 0, ()))  # a CPU-only pod that asks less
    assert covers(key, (3152, 5600, 1, 590, ()))
    assert not covers(key, (3152, 5600, 1, 590, ("T4",)))  # the key may land on a model this pod refuses
    assert not covers(key, (3152, 5600, 2, 470, ()))


# ------------------------------------------------------------------------------- two key classes (class_bound)
def _is_a(s: tuple[int, int, int, int, tuple[str, ...]]) -> bool:
    return s[2] == 1 and s[3] == 810


def _is_b(s: tuple[int, int, int, int, tuple[str, ...]]) -> bool:
    return s[2] == 1 and s[3] == 470


@settings(max_examples=60, deadline=None)
@given(st.lists(tiny_node_st, min_size=1, max_size=2), st.lists(tiny_pod_st, min_size=0, max_size=4),
       st.sampled_from([1000, 3152, 4000]), st.sampled_from([1000, 3152, 4000]), st.integers(0, 4), st.integers(0, 5),
       st.integers(1, 5))
def test_no_must_place_run_beats_the_two_class_bound(nodes: list[OpenbNode], pods: list[OpenbPod], cpu_a: int,
                                                     cpu_b: int, at_a: int, at_b: int, segments: int) -> None:
    """Every must-place run (brute force) is within the two-class bound, with an 810-milli pod (class A) and a
    470-milli one (class B, which may hold several shapes: other 470-milli pods of the draw, with other CPU and
    models) somewhere in the order; and class A's one-class figure is ``must_place_bound``'s."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = list(pods)
    pods.insert(min(at_a, len(pods)), OpenbPod("a", cpu_a, 4096, 1, 810))
    pods.insert(min(at_b, len(pods)), OpenbPod("b", cpu_b, 0, 1, 470))
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    got = class_bound(nodes, pods, _is_a, _is_b, segments=segments)
    assert best <= got.bound_milli + 1e-6
    assert got.bound_milli <= min(got.one_class_a_milli, got.one_class_b_milli) + 1e-6
    # without the GPU-packing rows (each bound adds its own, from its own binding LP) the same LPs
    plain = class_bound(nodes, pods, _is_a, _is_b, segments=segments, config_cuts=0)
    assert best <= plain.bound_milli + 1e-6
    one = must_place_bound(nodes, pods, segments=segments, key=_is_a, config_cuts=0).bound_milli
    assert plain.one_class_a_milli == pytest.approx(one, abs=1e-6)


def test_two_classes_are_tighter_than_either_alone() -> None:
    """Nodes of 4 and 8 cores, one GPU each. The 8-core 470-milli pod (B) only fits the 8-core node, the 810-milli
    pod (A) then takes the other, and neither the CPU pod nor the whole-GPU pod after them fits: every run ends at
    1,280 milli. With A alone the LP may leave B out (1,810: A and the whole-GPU pod); with B alone, A (1,470);
    with both forced before their own failures it is exact."""
    nodes = [OpenbNode("n0", 4000, 65536, 1, "G2"), OpenbNode("n1", 8000, 65536, 1, "G2")]
    pods = [OpenbPod("b", 8000, 1024, 1, 470), OpenbPod("a", 3152, 1024, 1, 810),
            OpenbPod("c", 4000, 1024, 0, 0), OpenbPod("d", 4000, 1024, 1, 1000)]
    assert _best_must_place_run(nodes, pods) == 1280
    got = class_bound(nodes, pods, _is_a, _is_b, segments=4)
    assert got.bound_milli == pytest.approx(1280, abs=1e-6)
    assert got.one_class_a_milli == pytest.approx(1810, abs=1e-6)
    assert got.one_class_b_milli == pytest.approx(1470, abs=1e-6)
    assert must_place_bound(nodes, pods, segments=4, key=_is_a).bound_milli == pytest.approx(1810, abs=1e-6)


# ------------------------------------------------------------------ GPU-packing rows (bound.CONFIG_CUTS_DOC)
def _fillings(sizes: list[int], room: int = MILLI) -> list[list[int]]:
    """Every multiset of ``sizes`` (sorted, any number of each) whose milli sum to at most ``room``."""
    if not sizes:
        return [[]]
    m, rest = sizes[0], sizes[1:]
    out = []
    for k in range(room // m + 1):
        out += [[m] * k + tail for tail in _fillings(rest, room - k * m)]
    return out


def test_the_knapsack_finds_the_heaviest_filling() -> None:
    sizes = [110, 230, 320, 470, 650, 810]
    rng = np.random.default_rng(7)
    for _ in range(20):
        weights = {m: int(w) for m, w in zip(sizes, rng.integers(0, 1000, len(sizes)), strict=True)}
        best, filling = _GpuKnapsack.best_filling(weights)
        assert best == max(sum(weights[m] for m in f) for f in _fillings(sizes))
        assert sum(m * k for m, k in filling.items()) <= MILLI
        assert sum(weights[m] * k for m, k in filling.items()) == best


def test_the_gpu_packing_rows_are_dual_feasible() -> None:
    """Every row found for a GPU's worth of the sizes keeps every filling of one GPU within 1000."""
    sizes = [230, 320, 470, 650, 810]
    knap = _GpuKnapsack(sizes)
    rng = np.random.default_rng(3)
    for _ in range(30):
        items = {m: float(n) for m, n in zip(sizes, rng.integers(0, 6, len(sizes)), strict=True) if n}
        knap.separate([items], [sum(m * n for m, n in items.items()) / MILLI])
    assert knap.functions
    for f in knap.functions:
        for filling in _fillings(sizes):
            assert sum(f(m) for m in filling) <= MILLI + 1e-9


sharing_pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152]),
                           memory_mib=st.just(1024), num_gpu=st.sampled_from([1, 1, 1, 1, 0, 2]),
                           gpu_milli=st.sampled_from([230, 320, 470, 470, 650, 810, 1000]), gpu_spec=st.just(()))
sharing_node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([4000, 8000, 96000]),
                            memory_mib=st.just(262144), gpus=st.sampled_from([1, 2]), model=st.just("G2"))


@settings(max_examples=80, deadline=None)
@given(st.lists(sharing_node_st, min_size=1, max_size=2), st.lists(sharing_pod_st, min_size=2, max_size=7),
       st.sampled_from([None, 810, 470]), st.integers(1, 4))
def test_no_must_place_run_beats_the_gpu_packing_rows(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                      key_milli: int | None, segments: int) -> None:
    """Sharing-heavy orders (230, 320, 470, 650, 810 milli), where the GPU-packing rows bite: the best of every
    must-place run is within both bounds with the rows, and the rows never loosen either bound."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    key = None if key_milli is None else (lambda s: s[2] == 1 and s[3] == key_milli)
    got = must_place_bound(nodes, pods, segments=segments, key=key).bound_milli
    assert best <= got + 1e-6
    assert got <= must_place_bound(nodes, pods, segments=segments, key=key, config_cuts=0).bound_milli + 1e-6
    two = class_bound(nodes, pods, _is_a, _is_b, segments=segments)
    assert best <= two.bound_milli + 1e-6
    assert two.bound_milli <= class_bound(nodes, pods, _is_a, _is_b, segments=segments,
                                          config_cuts=0).bound_milli + 1e-6


def test_gpu_packing_rows_make_a_two_gpu_case_exact() -> None:
    """One node, two GPUs, plenty of CPU; pods of 470, 470, 470, 320 and 230 milli in that order. Two 470s share
    a GPU (940), the third takes the other, the 320 joins it (790), and the 230 fits neither: every run ends at
    1,730. The family's rows let the LP spread the 1,960 milli over the two GPUs (bound 1,960); the
    configuration LP of these sizes needs 2.08 GPUs for all five, and the rows make the bound exact."""
    nodes = [OpenbNode("n0", 96000, 262144, 2, "G2")]
    pods = [OpenbPod(f"p{i}", 1000, 1024, 1, m) for i, m in enumerate([470, 470, 470, 320, 230])]
    assert _best_must_place_run(nodes, pods) == 1730
    assert must_place_bound(nodes, pods, segments=2, config_cuts=0).bound_milli == pytest.approx(1960, abs=1e-6)
    assert must_place_bound(nodes, pods, segments=2).bound_milli == pytest.approx(1730, abs=1e-3)


# ------------------------------------------------------------------ node-packing rows (bound.NODE_CUTS_DOC)
def _node_holds(node: OpenbNode, shapes: list[tuple[int, int, int, int, tuple[str, ...]]], counts: list[int]) -> bool:
    """Whether one node can hold ``counts[s]`` pods of each shape at once (brute force over the GPUs)."""
    from itertools import product

    pods = [s for s, c in zip(shapes, counts, strict=True) for _ in range(c)]
    if sum(p[0] for p in pods) > node.cpu_milli or sum(p[1] for p in pods) > node.memory_mib:
        return False
    whole = sum(p[2] for p in pods if p[2] and p[3] >= MILLI)
    items = [p[3] for p in pods if p[2] and p[3] < MILLI for _ in range(p[2])]
    free = node.gpus - whole
    if free < 0:
        return False
    if not items:
        return True
    if free == 0:
        return False
    for where in product(range(free), repeat=len(items)):
        load = [0] * free
        for m, g in zip(items, where, strict=True):
            load[g] += m
        if max(load) <= MILLI:
            return True
    return False


def _heaviest_by_brute_force(node: OpenbNode, shapes: list[tuple[int, int, int, int, tuple[str, ...]]],
                             weights: list[int]) -> int:
    from itertools import product

    best = 0
    for counts in product(range(4), repeat=len(shapes)):
        if _node_holds(node, shapes, list(counts)):
            best = max(best, sum(w * c for w, c in zip(weights, counts, strict=True)))
    return best


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([(4000, 8192, 1), (8000, 16384, 2), (16000, 65536, 2), (96000, 262144, 2)]),
       st.lists(st.tuples(st.sampled_from([0, 1000, 3152, 4000, 11908]), st.sampled_from([0, 2048, 8192]),
                          st.sampled_from([0, 1, 1, 2]), st.sampled_from([230, 470, 650, 810, 1000]),
                          st.integers(0, 9)), min_size=1, max_size=4))
def test_the_node_rows_bound_every_filling_of_one_node(node: tuple[int, int, int], drawn: list[tuple]) -> None:
    """``K_t`` (the node's integer program's dual bound, rounded) is at least the weight of every filling of one
    node with up to 3 pods of each shape (brute force), and the filling it returns fits the node."""
    from gpucluster.simulator.experiments.bound import _NodeKnapsack

    n = OpenbNode("n", node[0], node[1], node[2], "G2")
    shapes: list[tuple[int, int, int, int, tuple[str, ...]]] = []
    weights: list[int] = []
    for cpu, mem, k, milli, w in drawn:
        shape = (max(cpu, 1000 if k == 0 else cpu), mem, k, 0 if k == 0 else (MILLI if k > 1 else milli), ())
        if shape not in shapes and k <= n.gpus:
            shapes.append(shape)
            weights.append(w)
    if not shapes:
        return
    t = (n.cpu_milli, n.memory_mib, n.gpus, n.model)
    knap = _NodeKnapsack([t], shapes, {t: 1})
    bound, filling = knap.heaviest(0, {i: float(w) for i, w in enumerate(weights)})
    brute = _heaviest_by_brute_force(n, shapes, weights)
    assert int(np.floor(bound + 0.5)) >= brute
    counts = [filling.get(i, 0) for i in range(len(shapes))]
    assert _node_holds(n, shapes, counts)
    assert sum(w * c for w, c in zip(weights, counts, strict=True)) <= bound + 1e-6


cpu_node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([4000, 8000, 16000]),
                        memory_mib=st.sampled_from([16384, 122880]), gpus=st.sampled_from([1, 2]),
                        model=st.just("G2"))
cpu_pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 3152, 4000, 11908]),
                       memory_mib=st.sampled_from([0, 5600, 47104]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                       gpu_milli=st.sampled_from([320, 470, 650, 810, 1000, 1000]), gpu_spec=st.just(()))


@settings(max_examples=60, deadline=None)
@given(st.lists(cpu_node_st, min_size=1, max_size=2), st.lists(cpu_pod_st, min_size=2, max_size=6),
       st.sampled_from([None, 810, 470]), st.integers(1, 4))
def test_no_must_place_run_beats_the_node_packing_rows(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                       key_milli: int | None, segments: int) -> None:
    """CPU- and memory-tight nodes (16 cores for 2 GPUs, pods of 11.9 cores and 46 GiB), where one node's
    resources bind together: the best of every must-place run is within both bounds with the node-packing rows,
    and the rows never loosen either bound."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    key = None if key_milli is None else (lambda s: s[2] == 1 and s[3] == key_milli)
    got = must_place_bound(nodes, pods, segments=segments, key=key, node_cuts=True).bound_milli
    assert best <= got + 1e-6
    assert got <= must_place_bound(nodes, pods, segments=segments, key=key).bound_milli + 1e-6
    two = class_bound(nodes, pods, _is_a, _is_b, segments=segments, node_cuts=True)
    assert best <= two.bound_milli + 1e-6
    assert two.bound_milli <= class_bound(nodes, pods, _is_a, _is_b, segments=segments).bound_milli + 1e-6


def test_node_packing_rows_make_a_cpu_bound_case_exact() -> None:
    """Two nodes of 16 cores and two GPUs (the P100 nodes of the Alibaba cluster); an 810-milli pod (3.152 cores)
    then four whole-GPU pods of 11.9 cores. A node holds one 11.9-core pod (two take 23.8 cores), so every run
    places the 810, two whole pods and ends at 2,810 milli, with two GPUs idle. Pooled over the type, the 32
    cores take the 810's 3.152 and 2.4 whole pods (3,232.6); the node-packing rows make it exact."""
    nodes = [OpenbNode(f"n{i}", 16000, 122880, 2, "P100") for i in range(2)]
    pods = [OpenbPod("k", 3152, 5600, 1, 810)] + [OpenbPod(f"w{i}", 11908, 47104, 1, MILLI) for i in range(4)]
    assert _best_must_place_run(nodes, pods) == 2810
    key = _is_a
    assert must_place_bound(nodes, pods, segments=2, key=key).bound_milli == pytest.approx(3232.573, abs=1e-2)
    assert must_place_bound(nodes, pods, segments=2, key=key, node_cuts=True).bound_milli == pytest.approx(
        2810, abs=1e-3)
    two = class_bound(nodes, pods, _is_a, _is_b, segments=2, node_cuts=True)
    assert two.bound_milli == pytest.approx(2810, abs=1e-3)


# ------------------------------------------------------------- earliest failures (bound.EARLIEST_DOC)
@settings(max_examples=80, deadline=None)
@given(st.lists(tiny_node_st, min_size=1, max_size=2), st.lists(tiny_pod_st, min_size=1, max_size=6),
       st.sampled_from([None, 810, 470]), st.integers(1, 6))
def test_no_must_place_run_beats_the_earliest_failure_rows(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                           key_milli: int | None, segments: int) -> None:
    """Every must-place run (brute force) is within both must-place bounds with every shape's proven prefix
    forced, and the prefixes never loosen either bound (compared without the GPU-packing rows, which each bound
    finds from its own binding LP)."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    key = None if key_milli is None else (lambda s: s[2] == 1 and s[3] == key_milli)
    got = must_place_bound(nodes, pods, segments=segments, key=key, earliest=len(pods)).bound_milli
    assert best <= got + 1e-6
    plain = must_place_bound(nodes, pods, segments=segments, key=key, earliest=len(pods), config_cuts=0).bound_milli
    assert best <= plain + 1e-6
    assert plain <= must_place_bound(nodes, pods, segments=segments, key=key, config_cuts=0).bound_milli + 1e-6
    two = class_bound(nodes, pods, _is_a, _is_b, segments=segments, earliest=len(pods))
    assert best <= two.bound_milli + 1e-6
    two_plain = class_bound(nodes, pods, _is_a, _is_b, segments=segments, earliest=len(pods), config_cuts=0)
    assert two_plain.bound_milli <= class_bound(nodes, pods, _is_a, _is_b, segments=segments,
                                                config_cuts=0).bound_milli + 1e-6


def test_a_pod_that_arrives_on_an_empty_cluster_is_placed() -> None:
    """One 4-core node with one GPU: a 4-core 470-milli pod, then a 1-core 810-milli pod (the key). The first
    finds the cluster empty and takes it, so the 810 never fits (no CPU left): every run ends at 470. Without the
    prefixes the LP of the runs where the key never fails may leave the 470 out and place the 810 (bound 810);
    the probe "a 470 fails before pod 1" is infeasible (nothing is placed before it to block the node), so the
    470 is forced, that LP has no point and the bound is exact."""
    nodes = [OpenbNode("n0", 4000, 65536, 1, "G2")]
    pods = [OpenbPod("p", 4000, 1024, 1, 470), OpenbPod("k", 1000, 1024, 1, 810)]
    assert _best_must_place_run(nodes, pods) == 470
    assert must_place_bound(nodes, pods, segments=2, key=_is_a).bound_milli == pytest.approx(810, abs=1e-6)
    assert must_place_bound(nodes, pods, segments=2, key=_is_a, earliest=2).bound_milli == pytest.approx(
        470, abs=1e-6)
    assert class_bound(nodes, pods, _is_a, _is_b, segments=2, earliest=2).bound_milli == pytest.approx(
        470, abs=1e-6)


def test_a_prefix_ends_between_two_cuts() -> None:
    """The same two pods as above and a third 470 (it finds no CPU left and fails in every run), with one segment:
    the only cut inside the order is its end, and "a 470 fails before the end" holds in every run, so a bisection
    over the cuts proved nothing (bound 810: the key never fails, the 470s stay out). Over the 470s' own count it
    proves the first one placed (the probe "one of the first 470s fails": nothing arrived before it to block the
    node), and the bound is exact."""
    nodes = [OpenbNode("n0", 4000, 65536, 1, "G2")]
    pods = [OpenbPod("p", 4000, 1024, 1, 470), OpenbPod("k", 1000, 1024, 1, 810), OpenbPod("q", 4000, 1024, 1, 470)]
    assert _best_must_place_run(nodes, pods) == 470
    assert must_place_bound(nodes, pods, segments=1, key=_is_a).bound_milli == pytest.approx(810, abs=1e-6)
    assert must_place_bound(nodes, pods, segments=1, key=_is_a, earliest=3).bound_milli == pytest.approx(
        470, abs=1e-6)
    assert class_bound(nodes, pods, _is_a, _is_b, segments=1, earliest=3).bound_milli == pytest.approx(
        470, abs=1e-6)


def test_a_proved_pod_forces_the_earlier_pods_it_covers() -> None:
    """One 4-core node with one GPU: a 2-core 160-milli pod, a 2-core 470 (the node's CPU is taken), the 810-milli
    key, then a 1-core 530-milli pod that does not cover the key: both fail, and every run ends at 630. Probing
    the three largest shapes (``earliest=3``: all but the 160) proves the 470 placed (nothing before it but the
    160 to block the node), not the 530; the LP of the key's failure may still leave the 160 out and place the
    530 beside the 470 (1,000). The 470 covers the 160, which arrived before it and so fitted: forced too, the
    530 finds no CPU and the bound is exact."""
    nodes = [OpenbNode("n0", 4000, 65536, 1, "G2")]
    pods = [OpenbPod("s", 2000, 1024, 1, 160), OpenbPod("p", 2000, 1024, 1, 470), OpenbPod("k", 1000, 1024, 1, 810),
            OpenbPod("x", 1000, 1024, 1, 530)]
    assert _best_must_place_run(nodes, pods) == 630
    assert must_place_bound(nodes, pods, segments=4, key=_is_a).bound_milli == pytest.approx(1000, abs=1e-6)
    assert must_place_bound(nodes, pods, segments=4, key=_is_a, earliest=3).bound_milli == pytest.approx(
        630, abs=1e-6)


# -------------------------------------------------------- blocked GPUs counted by their items (bound.BLOCKED_GPUS_DOC)
mixed_pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152]),
                         memory_mib=st.sampled_from([0, 4096]), num_gpu=st.sampled_from([1, 1, 1, 2]),
                         gpu_milli=st.sampled_from([110, 160, 230, 470, 810, 840, 1000]), gpu_spec=st.just(()))


@settings(max_examples=80, deadline=None)
@given(st.lists(tiny_node_st, min_size=1, max_size=2), st.lists(mixed_pod_st, min_size=1, max_size=6),
       st.sampled_from([810, 470]), st.integers(1, 6), st.booleans())
def test_no_must_place_run_beats_the_weighted_blocking_items(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                             key_milli: int, segments: int, earliest: bool) -> None:
    """Whole-GPU pods with small sharing pods (under the 191 and 531 milli that block a GPU for the 810- and
    470-milli keys): every must-place run (brute force) is within both must-place bounds, with and without the
    earliest-failure prefixes, and the weights never loosen either bound (compared with each item counted as a
    GPU, without the GPU-packing rows)."""
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [_fix(p, i) for i, p in enumerate(pods)]
    best = _best_must_place_run(nodes, pods)
    first = len(pods) if earliest else 0

    def key(s: tuple[int, int, int, int, tuple[str, ...]]) -> bool:
        return s[2] == 1 and s[3] == key_milli

    def bounds() -> tuple[float, float]:
        one = must_place_bound(nodes, pods, segments=segments, key=key, earliest=first, config_cuts=0)
        two = class_bound(nodes, pods, _is_a, _is_b, segments=segments, earliest=first, config_cuts=0)
        return one.bound_milli, two.bound_milli

    one, two = bounds()
    assert best <= one + 1e-6
    assert best <= two + 1e-6
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_OrderLP, "item_cover", False)
        one_before, two_before = bounds()
    assert one <= one_before + 1e-6
    assert two <= two_before + 1e-6


def test_a_small_item_does_not_block_a_gpu_for_the_key() -> None:
    """One node with two GPUs: a whole-GPU pod, a 160-milli pod, the 810-milli key, then an 840-milli pod that asks
    less CPU than the key (so it does not cover it). The whole pod takes one GPU, the 160 the other, and the key
    fits beside the 160: every run ends at 1,970, and the 840 never fits. Counting the 160-milli item as a blocked
    GPU (its GPU's shortfall made up by the whole pod's 1,000 milli, pooled), the LP of the runs where the key
    fails leaves it out and puts the 840 in its room (2,000). Weighted min(1, 160 / 191), the item cannot block
    its GPU: no such run, and both bounds are exact."""
    nodes = [OpenbNode("n0", 96000, 262144, 2, "G2")]
    pods = [OpenbPod("w", 0, 0, 1, 1000), OpenbPod("s", 0, 0, 1, 160), OpenbPod("k", 1000, 1024, 1, 810),
            OpenbPod("y", 0, 0, 1, 840)]
    assert _best_must_place_run(nodes, pods) == 1970
    assert must_place_bound(nodes, pods, segments=4, key=_is_a).bound_milli == pytest.approx(1970, abs=1e-6)
    assert class_bound(nodes, pods, _is_a, _is_b, segments=4).bound_milli == pytest.approx(1970, abs=1e-6)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_OrderLP, "item_cover", False)
        assert must_place_bound(nodes, pods, segments=4, key=_is_a).bound_milli == pytest.approx(2000, abs=1e-6)
        assert class_bound(nodes, pods, _is_a, _is_b, segments=4).bound_milli == pytest.approx(2000, abs=1e-6)


# ------------------------------------------------------------ the tightest scan is reported (bound.SCANS_DOC)
def _time_out_after_the_first_scan(mp: pytest.MonkeyPatch) -> None:
    """Fault injection: once an ``_OrderLP`` has been refined (so from the second scan on), every LP with failure
    rows ends as one that hits HiGHS's time limit does (``_LPTroubleError`` after the three solver tries)."""
    refine, solve_once = _OrderLP.refine, _OrderLP._solve_once

    def refine_then_time_out(self: _OrderLP, *args: object, **kwargs: object) -> bool:
        added = refine(self, *args, **kwargs)  # type: ignore[arg-type]
        self.fault_time_limit = True  # type: ignore[attr-defined]
        return added

    def solve_or_time_out(self: _OrderLP, assign: dict[int, int | None], failure_rows: bool,
                          time_limit: float | None, probe: tuple[int, int] | None = None) -> object:
        if failure_rows and getattr(self, "fault_time_limit", False):
            raise _LPTroubleError("fault injection: the time limit")
        return solve_once(self, assign, failure_rows, time_limit, probe)

    mp.setattr(_OrderLP, "refine", refine_then_time_out)
    mp.setattr(_OrderLP, "_solve_once", solve_or_time_out)


def test_a_later_scan_that_times_out_does_not_loosen_the_bound() -> None:
    """One node with two GPUs: an 810-milli pod (the key), a 320 and a 650 (both on the other GPU, 970), then an
    810 and a 470 that fit nowhere: every run ends at 1,780. The first scan bounds it by 1,810 and finds
    GPU-packing rows; when every blocking LP of the second scan hits the time limit (fault injection) its
    fallbacks (the LPs without failure rows; for a pair, the smaller one-class optimum) give 1,845, valid but
    looser. Both bounds report the first scan's 1,810, and say so."""
    nodes = [OpenbNode("n0", 96000, 262144, 2, "G2")]
    pods = [OpenbPod(f"p{i}", c, 1024, 1, m)
            for i, (c, m) in enumerate([(0, 810), (0, 320), (0, 650), (0, 810), (1000, 470)])]
    assert _best_must_place_run(nodes, pods) == 1780
    with pytest.MonkeyPatch.context() as mp:
        _time_out_after_the_first_scan(mp)
        one = must_place_bound(nodes, pods, segments=2, key=_is_a)
        two = class_bound(nodes, pods, _is_a, _is_b, segments=2)
    for got in (one, two):
        assert len(got.scan_milli) >= 2
        assert got.scan_milli[0] == pytest.approx(1810, abs=1e-3)
        assert got.scan_milli[-1] > 1810 + 1  # the fallback: looser
        assert got.scan == 0
        assert got.bound_milli == pytest.approx(1810, abs=1e-3)
    assert two.one_class_a_milli == pytest.approx(1810, abs=1e-3)
