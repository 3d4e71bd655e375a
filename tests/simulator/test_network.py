from __future__ import annotations

import pytest

from gpucluster.jobs.model import JobSpec
from gpucluster.model import Fabric, TopologyLevel
from gpucluster.simulator.network import NetworkModel
from gpucluster.simulator.runner import Simulation

from .conftest import make_cluster


def test_ring_allreduce_alpha_beta() -> None:
    net = NetworkModel(Fabric(link_gbps=100))
    size = 1e9
    t = net.allreduce_s(size, 4, TopologyLevel.LEAF)
    expected = 2 * 3 * 2e-6 + 2 * 3 / 4 * size / (100e9 / 8)
    assert t == pytest.approx(expected)
    assert net.allreduce_s(size, 1, TopologyLevel.CORE) == 0.0


def test_farther_placements_are_slower() -> None:
    net = NetworkModel(Fabric(link_gbps=100, oversubscription=4.0))
    levels = list(TopologyLevel)
    times = [net.iteration_s("ResNet-50", 16, lv) for lv in levels]
    assert times == sorted(times)
    assert net.slowdown("ResNet-50", 16, TopologyLevel.CORE, TopologyLevel.LEAF) > \
        net.slowdown("ResNet-50", 16, TopologyLevel.SPINE, TopologyLevel.LEAF) > 1.0
    assert net.slowdown("ResNet-50", 8, TopologyLevel.NVLINK, TopologyLevel.NVLINK) == 1.0


def test_spread_placement_stretches_the_job() -> None:
    # 4 nodes of 4 GPUs in 2-GPU NVLink domains: an 8-GPU job must cross nodes, a 2-GPU job need not
    sim = Simulation(make_cluster(nodes=4, gpus=4, domain=2), "fifo")
    sim.submit(JobSpec("wide", 0, 8, 1000, model="ResNet-50", gpus_per_task=4))
    sim.submit(JobSpec("pair", 0, 2, 1000, model="ResNet-50"))
    sim.run()
    assert sim.job("wide").slowdown == 1.0  # two nodes under one leaf is the best an 8-GPU job can get
    assert sim.job("pair").slowdown == 1.0
    assert sim.job("pair").extra["level"] == TopologyLevel.NVLINK
