"""The must-place checker (``simulator.experiments.mustplace``): runs of the shipped policies pass, and a run that
skips a fitting pod or over-fills a node is flagged at that pod, with the reason."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.simulator.experiments.fgd import target_workload
from gpucluster.simulator.experiments.fgd_engine import Chooser, PolicyName, run
from gpucluster.simulator.experiments.mustplace import MILLI, Reason, check_must_place, check_run_log
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([4000, 8000, 32000]),
                    memory_mib=st.sampled_from([8192, 65536]), gpus=st.sampled_from([0, 1, 2, 4]),
                    model=st.sampled_from(["G2", "T4"]))
pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152, 8000]),
                   memory_mib=st.sampled_from([0, 4096, 30000]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                   gpu_milli=st.sampled_from([160, 470, 650, 810, 1000]),
                   gpu_spec=st.sampled_from([(), (), ("T4",)]))


def _cluster(nodes: list[OpenbNode], pods: list[OpenbPod]) -> tuple[list[OpenbNode], list[OpenbPod]]:
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model if n.gpus else "")
             for i, n in enumerate(nodes)]
    fixed = []
    for i, p in enumerate(pods):
        milli = 0 if p.num_gpu == 0 else (MILLI if p.num_gpu > 1 else p.gpu_milli)
        fixed.append(OpenbPod(f"p{i}", p.cpu_milli, p.memory_mib, p.num_gpu, milli, p.gpu_spec if p.num_gpu else ()))
    return nodes, fixed


def _fits(node: OpenbNode, pod: OpenbPod, cpu: int, mem: int, gpu: list[int]) -> list[int] | None:
    """Reference fit test, written out per node: the GPUs with room, or None."""
    if cpu < pod.cpu_milli or mem < pod.memory_mib:
        return None
    if not pod.num_gpu:
        return []
    if pod.gpu_spec and node.model not in pod.gpu_spec:
        return None
    free = [g for g in range(node.gpus) if gpu[g] >= pod.gpu_milli]
    return free if len(free) >= pod.num_gpu else None


def _random_run(nodes: list[OpenbNode], pods: list[OpenbPod], rng: random.Random,
                decline: float) -> tuple[list[int], list[tuple[int, ...]], int | None]:
    """A random run: each pod that fits goes to a random fitting node and random GPUs, except that with
    probability ``decline`` it is declined. Also returns the first declined pod that fitted (or None)."""
    cpu = [n.cpu_milli for n in nodes]
    mem = [n.memory_mib for n in nodes]
    gpu = [[MILLI] * n.gpus for n in nodes]
    out_node: list[int] = []
    out_gpus: list[tuple[int, ...]] = []
    first_skip: int | None = None
    for i, p in enumerate(pods):
        options = [(k, f) for k, n in enumerate(nodes) if (f := _fits(n, p, cpu[k], mem[k], gpu[k])) is not None]
        if not options or rng.random() < decline:
            if options and first_skip is None:
                first_skip = i
            out_node.append(-1)
            out_gpus.append(())
            continue
        k, free = rng.choice(options)
        chosen = tuple(sorted(rng.sample(free, p.num_gpu)))
        cpu[k] -= p.cpu_milli
        mem[k] -= p.memory_mib
        for g in chosen:
            gpu[k][g] -= p.gpu_milli
        out_node.append(k)
        out_gpus.append(chosen)
    return out_node, out_gpus, first_skip


@settings(max_examples=40, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=4), st.lists(pod_st, min_size=1, max_size=25), st.integers(0, 99))
def test_runs_of_the_shipped_policies_pass(nodes: list[OpenbNode], pods: list[OpenbPod], seed: int) -> None:
    nodes, pods = _cluster(nodes, pods)
    tgt = target_workload(pods)
    for policy in (PolicyName.RANDOM, PolicyName.BESTFIT, PolicyName.PACKING, PolicyName.FGD,
                   PolicyName.STRANDING_FGD):
        log = run(nodes, pods, policy, tgt, np.random.default_rng(seed), node_rank(seed, len(nodes)))
        assert check_run_log(nodes, pods, log) is None, policy


@settings(max_examples=150, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=3), st.lists(pod_st, min_size=1, max_size=20), st.integers(0, 10**6),
       st.sampled_from([0.0, 0.1, 0.4]))
def test_random_runs_are_flagged_exactly_at_their_first_skipped_fitting_pod(
        nodes: list[OpenbNode], pods: list[OpenbPod], seed: int, decline: float) -> None:
    """Random small clusters, random must-place decisions, some fitting pods declined: the checker passes the
    run iff nothing that fitted was declined, and otherwise names that pod."""
    nodes, pods = _cluster(nodes, pods)
    node, gpus, skipped = _random_run(nodes, pods, random.Random(seed), decline)
    got = check_must_place(nodes, pods, node, gpus)
    if skipped is None:
        assert got is None
    else:
        assert got is not None and got.pod == skipped and got.reason is Reason.SKIPPED
        cpu, mem, gpu = _state_before(nodes, pods, node, gpus, skipped)
        k = got.node
        assert _fits(nodes[k], pods[skipped], cpu[k], mem[k], gpu[k]) is not None


def _state_before(nodes: list[OpenbNode], pods: list[OpenbPod], node: list[int], gpus: list[tuple[int, ...]],
                  stop: int) -> tuple[list[int], list[int], list[list[int]]]:
    cpu = [n.cpu_milli for n in nodes]
    mem = [n.memory_mib for n in nodes]
    gpu = [[MILLI] * n.gpus for n in nodes]
    for i in range(stop):
        if node[i] >= 0:
            cpu[node[i]] -= pods[i].cpu_milli
            mem[node[i]] -= pods[i].memory_mib
            for g in gpus[i]:
                gpu[node[i]][g] -= pods[i].gpu_milli
    return cpu, mem, gpu


@settings(max_examples=150, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=3), st.lists(pod_st, min_size=2, max_size=20), st.integers(0, 10**6))
def test_moving_a_pod_onto_a_full_gpu_is_flagged_at_that_pod(nodes: list[OpenbNode], pods: list[OpenbPod],
                                                             seed: int) -> None:
    """Take a valid run and move one placed GPU pod onto a GPU that had less room than it asks: flagged at that
    pod as GPU milli (or CPU, memory or model, whichever the node lacks first), never earlier."""
    nodes, pods = _cluster(nodes, pods)
    rng = random.Random(seed)
    node, gpus, _ = _random_run(nodes, pods, rng, 0.0)
    assert check_must_place(nodes, pods, node, gpus) is None
    # free milli of every GPU before each pod
    gpu = [[MILLI] * n.gpus for n in nodes]
    for i, p in enumerate(pods):
        if node[i] >= 0 and p.num_gpu == 1:
            full = [(k, g) for k, n in enumerate(nodes) for g in range(n.gpus) if gpu[k][g] < p.gpu_milli]
            if full:
                k, g = rng.choice(full)
                moved_node, moved_gpus = list(node), list(gpus)
                moved_node[i], moved_gpus[i] = k, (g,)
                got = check_must_place(nodes, pods, moved_node, moved_gpus)
                assert got is not None and got.pod == i and got.node == k
                assert got.reason in (Reason.GPU_MILLI, Reason.CPU, Reason.MEMORY, Reason.GPU_MODEL)
                return
        for g in gpus[i]:
            gpu[node[i]][g] -= p.gpu_milli


def test_a_skipped_fitting_pod_is_named_with_the_node_it_fitted() -> None:
    nodes = [OpenbNode("a", 8000, 32768, 1, "G2"), OpenbNode("b", 8000, 32768, 1, "G2")]
    pods = [OpenbPod("big", 3152, 5600, 1, 810), OpenbPod("small", 1000, 1024, 1, 470),
            OpenbPod("second", 3152, 5600, 1, 810)]
    ok = check_must_place(nodes, pods, [0, 1, -1], [(0,), (0,), ()])
    assert ok is None  # the second 810 fits neither node: 190 and 530 milli left
    bad = check_must_place(nodes, pods, [0, -1, -1], [(0,), (), ()])
    assert bad is not None and bad.pod == 1 and bad.reason is Reason.SKIPPED and bad.node == 1
    assert "small" in str(bad) and "FittingPodFailed" in str(bad)


def test_an_over_filled_gpu_and_an_over_filled_node_are_flagged() -> None:
    nodes = [OpenbNode("a", 8000, 32768, 2, "G2")]
    pods = [OpenbPod("p0", 1000, 1024, 1, 810), OpenbPod("p1", 1000, 1024, 1, 470),
            OpenbPod("p2", 7000, 1024, 1, 470), OpenbPod("p3", 1000, 1024, 1, 160)]
    assert check_must_place(nodes, pods, [0, 0, -1, 0], [(0,), (1,), (), (0,)]) is None
    over = check_must_place(nodes, pods, [0, 0, -1, 0], [(0,), (0,), (), (0,)])
    assert over is not None and over.pod == 1 and over.reason is Reason.GPU_MILLI and "1280 milli" in over.detail
    cpu = check_must_place(nodes, pods, [0, 0, 0, 0], [(0,), (1,), (1,), (0,)])
    assert cpu is not None and cpu.pod == 2 and cpu.reason is Reason.CPU
    # with 2,000 more CPU milli p2 fits (7,000 free, 530 milli on GPU 1), so failing it is a violation
    skip = check_must_place([OpenbNode("a", 9000, 32768, 2, "G2")], pods, [0, 0, -1, 0], [(0,), (1,), (), (0,)])
    assert skip is not None and skip.pod == 2 and skip.reason is Reason.SKIPPED


@pytest.mark.parametrize(("node", "gpus", "reason"), [
    (5, (0,), Reason.NO_SUCH_NODE), (0, (), Reason.GPU_COUNT), (0, (0, 1), Reason.GPU_COUNT),
    (0, (2,), Reason.BAD_GPU), (1, (0,), Reason.GPU_MODEL),
])
def test_malformed_placements_are_flagged(node: int, gpus: tuple[int, ...], reason: Reason) -> None:
    nodes = [OpenbNode("a", 8000, 32768, 2, "G2"), OpenbNode("b", 8000, 32768, 2, "G2")]
    pods = [OpenbPod("p0", 1000, 1024, 1, 470, ("T4", "G2")), OpenbPod("p1", 1000, 1024, 1, 470, ("T4",))]
    got = check_must_place(nodes, pods, [0, node], [(0,), gpus])
    assert got is not None and got.pod == 1 and got.reason is reason


def test_a_declining_chooser_run_is_flagged() -> None:
    """A fast-path run whose chooser declines a pod that fits (``run(chooser_cls=...)``) fails the check there."""

    class DeclineThird(Chooser):
        calls = 0

        def choose(self, cands: np.ndarray, pod: OpenbPod) -> tuple[int, tuple[int, ...]]:
            DeclineThird.calls += 1
            return (-1, ()) if DeclineThird.calls == 3 else super().choose(cands, pod)

    nodes = [OpenbNode(f"n{i}", 32000, 65536, 2, "G2") for i in range(2)]
    pods = [OpenbPod(f"p{i}", 1000, 1024, 1, 500) for i in range(6)]
    log = run(nodes, pods, PolicyName.FGD, target_workload(pods), np.random.default_rng(0), chooser_cls=DeclineThird)
    got = check_run_log(nodes, pods, log)
    assert got is not None and got.pod == 2 and got.reason is Reason.SKIPPED


def test_an_outcome_of_the_wrong_length_is_malformed() -> None:
    nodes = [OpenbNode("a", 8000, 32768, 1, "G2")]
    pods = [OpenbPod("p0", 1000, 1024, 1, 470)]
    got = check_must_place(nodes, pods, [], [])
    assert got is not None and got.reason is Reason.MALFORMED
