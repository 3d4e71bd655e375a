"""``bench/must_place_search.py``'s offline choosers and rollout search make must-place runs (the checker passes
them) on small random clusters, and the rollout search is never worse than the variants it switches between."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.simulator.experiments.mustplace import allocated_milli, check_must_place, check_run_log
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

BENCH = Path(__file__).resolve().parents[2] / "bench" / "must_place_search.py"


@pytest.fixture(scope="module")
def search() -> ModuleType:
    spec = importlib.util.spec_from_file_location("must_place_search", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


node_st = st.builds(OpenbNode, name=st.just("n"), cpu_milli=st.sampled_from([8000, 32000]),
                    memory_mib=st.sampled_from([16384, 65536]), gpus=st.sampled_from([1, 2, 4]),
                    model=st.sampled_from(["G2", "T4"]))
pod_st = st.builds(OpenbPod, name=st.just("p"), cpu_milli=st.sampled_from([0, 1000, 3152, 8000]),
                   memory_mib=st.sampled_from([0, 4096]), num_gpu=st.sampled_from([0, 1, 1, 1, 2]),
                   gpu_milli=st.sampled_from([160, 320, 470, 650, 810, 1000]),
                   gpu_spec=st.sampled_from([(), (), ("T4",)]))

VARIANTS = ["policy=stranding-fgd", "policy=fgd,oracle=3", "oracle=2,window=5,cov=1", "rank=7", "random=1",
            "policy=new,cpu=1,scar=1,cont=1,mem=0", "pair=810", "tight=0", "tight=5", "open=4/650", "plan=20"]


@settings(max_examples=15, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=3), st.lists(pod_st, min_size=2, max_size=24), st.integers(0, 99))
def test_every_variant_and_the_rollout_search_make_must_place_runs(search: ModuleType, nodes: list[OpenbNode],
                                                                   pods: list[OpenbPod], seed: int) -> None:
    nodes = [OpenbNode(f"n{i}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for i, n in enumerate(nodes)]
    pods = [OpenbPod(f"p{i}", p.cpu_milli, p.memory_mib, p.num_gpu,
                     0 if p.num_gpu == 0 else (1000 if p.num_gpu > 1 else p.gpu_milli), p.gpu_spec if p.num_gpu else ())
            for i, p in enumerate(pods)]
    for v in VARIANTS:
        log = search.run_variant(nodes, pods, pods, seed, v)
        assert check_run_log(nodes, pods, log) is None, v
    node, gpus, trail = search.rollout_search(nodes, pods, pods, seed, VARIANTS[:4], 5)
    assert check_must_place(nodes, pods, node, gpus) is None
    assert len(trail) == -(-len(pods) // 5)
    singles = max(int(search.run_variant(nodes, pods, pods, seed, v).used_milli[-1]) for v in VARIANTS[:4])
    assert allocated_milli(pods, node) >= singles
