"""``bench/earliest_failure_run.py``'s blocker makes must-place runs (the checker passes them), and the first
failure it finds for a shape never falls inside the prefix that ``bound.EARLIEST_DOC``'s probes prove placed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.simulator.experiments.bound import _OrderLP
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

BENCH = Path(__file__).resolve().parents[2] / "bench" / "earliest_failure_run.py"


@pytest.fixture(scope="module")
def blocker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("earliest_failure_run", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([4000, 8000, 32000]),
                    memory_mib=st.sampled_from([8192, 65536]), gpus=st.sampled_from([0, 1, 2]),
                    model=st.sampled_from(["G2", "T4"]))
pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152, 4000]),
                   memory_mib=st.sampled_from([0, 4096]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                   gpu_milli=st.sampled_from([160, 470, 650, 810, 1000]),
                   gpu_spec=st.sampled_from([(), (), ("T4",)]))
Q = (3152, 4096, 470)


def _fix(p: OpenbPod, i: int) -> OpenbPod:
    milli = 0 if p.num_gpu == 0 else (1000 if p.num_gpu > 1 else p.gpu_milli)
    return OpenbPod(f"p{i}", p.cpu_milli, p.memory_mib, p.num_gpu, milli, p.gpu_spec if p.num_gpu else ())


@settings(max_examples=60, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=3), st.lists(pod_st, min_size=0, max_size=10), st.integers(0, 10),
       st.integers(0, 10))
def test_the_blocker_runs_are_must_place_and_fail_after_the_proved_prefix(
        blocker: ModuleType, nodes: list[OpenbNode], pods: list[OpenbPod], at: int, again: int) -> None:
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    order = [_fix(p, i) for i, p in enumerate(pods)]
    for k in sorted((at, again), reverse=True):  # two more pods of Q somewhere in the order
        order.insert(min(k, len(order)), OpenbPod(f"q{k}", Q[0], Q[1], 1, Q[2]))
    got = blocker.block_run(nodes, order, Q)
    assert got["checker"] == "ok"
    lp = _OrderLP(nodes, order, 2, [lambda _s: True])
    qi = lp.plist.index((Q[0], Q[1], 1, Q[2], ()))
    lp.earliest_failures([qi])
    proved = int(lp.prefix[lp.placed_before[qi]][qi])  # the first `proved` Q pods are placed in every run
    if got["first_failure"] is not None:
        failed = order[got["first_failure"]]
        assert (failed.cpu_milli, failed.memory_mib, failed.num_gpu, failed.gpu_milli, failed.gpu_spec) == (
            Q[0], Q[1], 1, Q[2], ())
        assert got["shape_pods_before"] >= proved


def test_the_blocker_takes_the_room_a_q_pod_would_need(blocker: ModuleType) -> None:
    """Two 8-core nodes with one GPU each: a 5-core CPU pod, a 1-core whole-GPU pod, then a 3.152-core 470-milli
    pod (Q). The CPU pod leaves 3 cores on the first node (no Q fits there); the whole-GPU pod fits both, and the
    blocker puts it on the second, the last node a Q pod fits: the Q pod fails at index 2. (First fit would put
    it on the first node and place the Q pod on the second.)"""
    nodes = [OpenbNode("a", 8000, 65536, 1, "G2"), OpenbNode("b", 8000, 65536, 1, "G2")]
    order = [OpenbPod("c", 5000, 0, 0, 0), OpenbPod("w", 1000, 0, 1, 1000), OpenbPod("q", 3152, 4096, 1, 470)]
    got = blocker.block_run(nodes, order, Q)
    assert got == {"shape": list(Q), "first_failure": 2, "pods": 3, "shape_pods_before": 0, "shape_pods": 1,
                   "checker": "ok"}
