"""FGD scores kept across rebuilds of a learned target (``fragmentation/incremental.py``) are the scores a full
recomputation gives, and the scheduler makes the same decisions with them as without them."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.plugins.fragmentation import StrandingFGDScore
from gpucluster.scheduler.plugins.fragmentation.incremental import STEPS, IncrementalScores, NodeMirror, Scorer
from gpucluster.scheduler.plugins.fragmentation.measure import (
    MILLI,
    Drops,
    FloatArray,
    IntArray,
    NodeArrays,
    Stranding,
    TargetWorkload,
    Universe,
    fgd_drops,
    fgd_scores,
    placement_diff,
    sigmoid_score,
    target_from_counts,
)
from gpucluster.scheduler.profiles import fgd_paper_profile, stranding_fgd_profile
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, to_node_specs, to_pod

MODELS = ["G2", "T4", "V100"]
SHAPES = [
    (4000, 500, 1, ""), (8000, 1000, 1, ""), (2000, 0, 0, ""), (16000, 1000, 2, ""), (3000, 250, 1, "T4"),
    (12000, 810, 1, ""), (6000, 1000, 4, "G2|V100"), (1000, 100, 1, ""), (32000, 0, 0, ""), (9000, 470, 1, "G2"),
]


def _random_nodes(rng: np.random.Generator, n: int) -> list[OpenbNode]:
    return [OpenbNode(f"n{i}", int(rng.choice([8000, 32000, 64000, 96000])), 262144, int(rng.choice([0, 1, 2, 4, 8])),
                      str(rng.choice(MODELS))) for i in range(n)]


def _random_pods(rng: np.random.Generator, n: int, kinds: int) -> list[OpenbPod]:
    menu = [SHAPES[k] for k in rng.choice(len(SHAPES), size=kinds, replace=False)]
    # skewed frequencies, so that the learned target's tail shapes come and go
    p = rng.dirichlet(np.full(kinds, 0.6))
    out = []
    for i, k in enumerate(rng.choice(kinds, size=n, p=p)):
        cpu, milli, num, spec = menu[k]
        out.append(OpenbPod(f"p{i}", cpu, 1024, num, milli, tuple(x for x in spec.split("|") if x)))
    return out


def _decisions(nodes: list[OpenbNode], pods: list[OpenbPod], policy: str, incremental: bool, refresh: int,
               seed: int) -> list[tuple[int, tuple[int, ...]]]:
    state = ClusterState(to_node_specs(nodes))
    args = {"incremental": incremental, "refresh": refresh, "coverage": 0.9}
    profile = stranding_fgd_profile(seed, args) if policy == "stranding-fgd" else fgd_paper_profile("fgd", seed, args)
    sched = Scheduler(state, profile)
    rng = np.random.default_rng(seed)
    out = []
    placed: list[str] = []
    for i, p in enumerate(pods):
        d = sched.schedule_and_bind(to_pod(p, name=f"p{i}"))
        gpus = tuple(g.device_index for g in d.allocation.grants) if d.ok and d.allocation else ()
        out.append((d.node_index if d.ok else -1, gpus))
        if d.ok:
            placed.append(d.pod.key)
        if placed and rng.random() < 0.3:  # pods leave too: nodes change back and forth
            sched.delete(placed.pop(int(rng.integers(len(placed)))))
    return out


@pytest.mark.parametrize("policy", ["stranding-fgd", "fgd"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_incremental_makes_the_same_decisions_as_recomputing(policy: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = _random_nodes(rng, int(rng.integers(20, 60)))
    pods = _random_pods(rng, 500, int(rng.integers(4, len(SHAPES) + 1)))
    refresh = int(rng.integers(3, 12))
    fast = _decisions(nodes, pods, policy, True, refresh, seed)
    slow = _decisions(nodes, pods, policy, False, refresh, seed)
    assert fast == slow
    assert sum(n >= 0 for n, _ in fast) > 100


def test_incremental_rescored_most_rows_without_recomputing() -> None:
    rng = np.random.default_rng(5)
    nodes = _random_nodes(rng, 200)
    pods = _random_pods(rng, 1500, 6)
    state = ClusterState(to_node_specs(nodes))
    sched = Scheduler(state, stranding_fgd_profile(5, {"refresh": 16}))
    for i, p in enumerate(pods):
        sched.schedule_and_bind(to_pod(p, name=f"p{i}"))
    plugin = sched.framework.plugin("StrandingFGDScore")
    assert isinstance(plugin, StrandingFGDScore)
    cache = plugin._cache
    assert cache.version > 20
    assert cache.rescored > cache.recomputed  # the point of it


# ------------------------------------------------------------------------------------------ the table alone
def _view(rng: np.random.Generator, n: int, d: int) -> NodeArrays:
    gl = rng.choice([0, 100, 250, 500, 530, 750, 810, 1000], size=(n, d)).astype(np.int64)
    count = rng.integers(0, d + 1, n)
    gl[np.arange(d)[None, :] >= count[:, None]] = 0
    return NodeArrays(cpu_left=rng.integers(0, 40000, n), cpu_cap=np.full(n, 40000), mem_left=np.full(n, 1 << 20),
                      gpu_left=gl, gpu_count=count, model=np.where(count > 0, rng.integers(0, 3, n), -1),
                      model_names=MODELS)


def _scorer(view: NodeArrays, pod: tuple[int, int, int], any_model: bool, target: TargetWorkload,
            access: np.ndarray, stranding: Stranding, universe: Universe | None) -> Scorer:
    """What the plugin hands the table, built on plain arrays."""
    cpu, milli, num = pod
    idle = view.gpu_left.sum(axis=1)

    def compute(r: IntArray) -> Drops:
        return fgd_drops(view, r, cpu, milli, num, target, access, stranding=stranding, any_model=any_model,
                         universe=universe)

    def inputs(r: IntArray) -> tuple[FloatArray | None, FloatArray]:
        return (stranding.gain(view.cpu_left[r], idle[r], view.model[r], cpu, milli * num, any_model),
                idle[r].astype(np.float64))

    def complete(r: IntArray, gpus: IntArray, shapes: TargetWorkload, acc: np.ndarray) -> FloatArray:
        return placement_diff(view, r, gpus, cpu, milli, num, shapes, acc)

    return Scorer(compute, num == 1 and 0 < milli < MILLI, inputs, complete)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_table_scores_equal_full_recomputation(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(1, 40)), int(rng.choice([1, 2, 4, 8]))
    view = _view(rng, n, d)
    counts: Counter[tuple[int, int, int, str]] = Counter()
    cache = IncrementalScores(n, bounds=True)
    generation = np.ones(n, np.int64)
    stranding = Stranding(0.0, np.zeros(4))
    for _ in range(25):
        # the learned target moves: counts grow, shapes come and go at the coverage edge
        for k in rng.choice(len(SHAPES), size=int(rng.integers(1, 6))):
            counts[SHAPES[k]] += int(rng.integers(1, 4))
        target = target_from_counts(counts, float(rng.choice([0.8, 0.95, 1.0])))
        if cache.set_target(target, MODELS):  # the stranding terms move with the target, as in the plugin
            stranding = Stranding(float(rng.uniform(0, 20)), rng.uniform(0, 1, 4) * (rng.random() < 0.5))
        access = target.access(MODELS)
        if rng.random() < 0.3:  # some nodes change
            changed = rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False)
            fresh = _view(rng, n, d)
            view.cpu_left[changed] = fresh.cpu_left[changed]
            view.gpu_left[changed] = np.minimum(fresh.gpu_left[changed], np.where(view.gpu_count[changed, None]
                                                                                 > np.arange(d), MILLI, 0))
            generation[changed] += 1
        cpu, milli, num, spec = SHAPES[int(rng.integers(len(SHAPES)))]
        if milli and num > d:
            continue
        rows = np.flatnonzero(view.cpu_left >= cpu) if not milli else np.flatnonzero(
            (view.cpu_left >= cpu) & ((view.gpu_left >= milli).sum(axis=1) >= num))
        if rows.size == 0:
            continue
        any_model = not spec
        scorer = _scorer(view, (cpu, milli, num), any_model, target, access, stranding, cache.universe)
        got, gpus = cache.lookup((cpu, milli, num, any_model), rows, generation, scorer)
        want, want_gpus = fgd_scores(view, rows, cpu, milli, num, target, access, stranding=stranding,
                                     any_model=any_model)
        assert got.tolist() == want.tolist()
        if num == 1 and 0 < milli < MILLI:
            assert gpus.tolist() == want_gpus.tolist()


def test_steps_are_where_the_score_changes() -> None:
    for k, y in enumerate(STEPS, start=1):
        below, above = np.array([y - 1e-6]), np.array([y + 1e-6])
        assert sigmoid_score(below, np.zeros(1))[0] == k - 1 and sigmoid_score(above, np.zeros(1))[0] == k


def test_placement_diff_matches_the_drops() -> None:
    rng = np.random.default_rng(3)
    view = _view(rng, 30, 4)
    target = target_from_counts(Counter(SHAPES))
    access = target.access(MODELS)
    for cpu, milli, num, _ in SHAPES:
        rows = np.flatnonzero((view.gpu_left >= milli).sum(axis=1) >= num) if milli else np.arange(30)
        if rows.size == 0:
            continue
        d = fgd_drops(view, rows, cpu, milli, num, target, access, universe=None)
        _, gpus = d.scores()
        diff = placement_diff(view, rows, gpus, cpu, milli, num, target, access)
        x = d.x[np.arange(rows.size), gpus if d.sharing else 0]
        assert np.allclose(diff @ target.weight, x)


def test_node_mirror_follows_the_snapshot() -> None:
    nodes = [OpenbNode("a", 32000, 65536, 2, "G2"), OpenbNode("b", 16000, 65536, 4, "T4")]
    state = ClusterState(to_node_specs(nodes))
    mirror = NodeMirror()
    mirror.sync(state.snapshot())
    sched = Scheduler(state, stranding_fgd_profile(0))
    assert sched.schedule_and_bind(to_pod(OpenbPod("x", 6000, 1024, 1, 700))).ok
    state.set_device_health("b", 1, False)
    got = mirror.sync(state.snapshot())
    want = NodeArrays.from_snapshot(state.snapshot())
    for field in ("cpu_left", "mem_left", "gpu_left", "gpu_count", "model"):
        assert getattr(got, field).tolist() == getattr(want, field).tolist(), field
    assert mirror.idle.tolist() == want.gpu_left.sum(axis=1).tolist()


# ------------------------------------------------------------------------------------------ groups of equal nodes
def _many_alike(rng: np.random.Generator, n: int) -> list[OpenbNode]:
    """``n`` nodes of a few kinds (a replicated cluster): most free states are shared by many nodes."""
    kinds = _random_nodes(rng, 5)
    return [OpenbNode(f"m{i}", k.cpu_milli, k.memory_mib, k.gpus, k.model)
            for i, k in enumerate(kinds[j] for j in rng.integers(0, len(kinds), n))]


def _scored(nodes: list[OpenbNode], pods: list[OpenbPod], policy: str, incremental: bool) -> list[tuple[Any, ...]]:
    """Every FGD lookup's scores and GPUs over a run of ``pods`` (some leave again)."""
    seen: list[tuple[Any, ...]] = []
    real = IncrementalScores.lookup

    def recording(self: IncrementalScores, *args: Any, **kw: Any) -> tuple[FloatArray, IntArray]:
        score, gpu = real(self, *args, **kw)
        seen.append((args[1].tolist(), score.tolist(), gpu.tolist()))
        return score, gpu

    IncrementalScores.lookup = recording  # type: ignore[method-assign]
    try:
        _decisions(nodes, pods, policy, incremental, 4, 3)
    finally:
        IncrementalScores.lookup = real  # type: ignore[method-assign]
    return seen


@pytest.mark.parametrize("policy", ["stranding-fgd", "fgd"])
@pytest.mark.parametrize("incremental", [True, False])
def test_nodes_in_the_same_free_state_are_computed_once_with_the_same_scores(
        policy: str, incremental: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Large batches are computed, and re-scored, once per distinct free state (``NodeMirror.group``); every
    score and GPU is the one computing every row gives."""
    import gpucluster.scheduler.plugins.fragmentation.incremental as inc

    rng = np.random.default_rng(11)
    nodes = _many_alike(rng, 400)
    # pods of one GPU shape with different CPU (and the same memory): equal GPUs left, different CPU left
    pods = [OpenbPod(p.name, p.cpu_milli * int(rng.integers(1, 3)), p.memory_mib, p.num_gpu, p.gpu_milli,
                     p.gpu_spec) for p in _random_pods(rng, 500, 7)]
    copied: Counter[str] = Counter()
    real = inc._representatives

    def counting(rows: IntArray, key: IntArray | None) -> tuple[IntArray, IntArray] | None:
        out = real(rows, key)
        if out is not None:
            copied[inspect.stack()[1].function] += rows.size - out[0].size
        return out

    monkeypatch.setattr(inc, "_representatives", counting)
    with_groups = _scored(nodes, pods, policy, incremental)
    # rows copied from an equal node instead of computed, in both places when the target is learned
    assert copied["lookup"] > 1000
    assert copied["_rescore_grouped"] > (1000 if incremental else -1)
    monkeypatch.setattr(inc, "_representatives", lambda rows, key: None)
    every_row = _scored(nodes, pods, policy, incremental)
    assert len(with_groups) == len(every_row) > 200
    for k, (a, b) in enumerate(zip(with_groups, every_row, strict=True)):
        assert a == b, f"lookup {k}"


def test_node_mirror_groups_are_the_distinct_free_states() -> None:
    rng = np.random.default_rng(4)
    state = ClusterState(to_node_specs(_many_alike(rng, 50)))
    sched = Scheduler(state, stranding_fgd_profile(0))
    mirror = NodeMirror()
    for i, p in enumerate(_random_pods(rng, 60, 5)):
        sched.schedule_and_bind(to_pod(p, name=f"p{i}"))
        view = mirror.sync(state.snapshot())
        sig = np.concatenate([view.cpu_left[:, None], view.mem_left[:, None], view.model[:, None], view.gpu_left],
                             axis=1)
        same_state = (sig[:, None, :] == sig[None, :, :]).all(axis=2)
        same_group = mirror.group[:, None] == mirror.group[None, :]
        assert np.array_equal(same_state, same_group), i


@pytest.mark.parametrize("completes", [True, False])
def test_a_zero_drop_is_exact_only_for_the_shapes_it_was_measured_over(completes: bool) -> None:
    """A CPU-only pod on a node with 10 cores and two idle GPUs changes nothing for the first target's shape
    (4 cores each): its drop is exactly 0. A shape that needs 9 cores then joins the target: the same placement
    now strands both GPUs for it (a drop of 2,000 milli times its weight), though the node itself never changed.
    The kept zero may stand only over the shapes it was measured for; the score must be the full computation's,
    whether the table can measure the newer shape for the kept placement (``complete``) or not."""
    view = NodeArrays(cpu_left=np.array([10000]), cpu_cap=np.array([40000]), mem_left=np.array([1 << 20]),
                      gpu_left=np.array([[1000, 1000]]), gpu_count=np.array([2]), model=np.array([0]),
                      model_names=MODELS)
    rows, generation = np.array([0]), np.ones(1, np.int64)
    pod = (2000, 0, 0)
    stranding = Stranding(0.0, np.zeros(4))
    cache = IncrementalScores(1, bounds=True)
    scores = []
    for counts in (Counter({(4000, 500, 1, ""): 4}), Counter({(4000, 500, 1, ""): 4, (9000, 470, 1, "G2"): 4})):
        target = target_from_counts(counts, 1.0)
        assert cache.set_target(target, MODELS)
        access = target.access(MODELS)
        scorer = _scorer(view, pod, True, target, access, stranding, cache.universe)
        if not completes:
            scorer = Scorer(scorer.compute, scorer.sharing, scorer.inputs)
        got, _ = cache.lookup((*pod, True), rows, generation, scorer)
        want, _ = fgd_scores(view, rows, *pod, target, access, stranding=stranding, any_model=True)
        assert got.tolist() == want.tolist()
        scores.append(int(want[0]))
    assert scores[0] != scores[1]  # the newer shape does change the answer
