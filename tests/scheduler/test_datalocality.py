from __future__ import annotations

from gpucluster.jobs.model import JobSpec
from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.datalocality import DataCatalog, Dataset
from gpucluster.simulator.runner import Simulation, jobs_profile
from gpucluster.spec import Cluster


def _cluster() -> Cluster:
    nodes = tuple(NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20, rack=f"r{i // 2}",
                           leaf=f"l{i // 4}", spine="s",
                           devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768) for j in range(4)))
                  for i in range(8))
    return Cluster("d", nodes, Fabric(), "test")


def _catalog() -> DataCatalog:
    return DataCatalog([Dataset("imagenet", 150 * 2**30, {"n6", "n7"}), Dataset("wiki", 20 * 2**30, {"n3"})])


def _trace() -> list[JobSpec]:
    out = []
    for k in range(40):
        ds = "imagenet" if k % 3 else "wiki"
        out.append(JobSpec(f"j{k}", k * 50.0, 1 + (k % 4 == 0), 400 + 37 * (k % 5), dataset=ds))
    return out


def _run(aware: bool, delay: float = 0.0) -> Simulation:
    extra = [PluginConfig(name="DataLocality", weight=3.0)] if aware else []
    sim = Simulation(_cluster(), "fifo", profile=jobs_profile(False, extra=extra),
                     services={"datasets": _catalog()}, locality_delay_s=delay)
    sim.submit_many(_trace())
    sim.run()
    return sim


def test_locality_aware_moves_fewer_bytes_than_blind() -> None:
    blind = _run(False).summary()
    aware = _run(True).summary()
    delayed = _run(True, delay=300).summary()
    assert blind["jobs_lost"] == aware["jobs_lost"] == delayed["jobs_lost"] == 0
    assert aware["bytes_moved"] < blind["bytes_moved"]
    assert delayed["bytes_moved"] <= aware["bytes_moved"]
    assert delayed["avg_queue_s"] >= aware["avg_queue_s"]


def test_replica_node_is_preferred_and_costs_nothing() -> None:
    sim = Simulation(_cluster(), "fifo", profile=jobs_profile(False, extra=[PluginConfig(name="DataLocality")]),
                     services={"datasets": _catalog()})
    sim.submit(JobSpec("w", 0, 1, 10, dataset="wiki"))
    sim.run_until(1)
    assert sim.job("w").nodes == ("n3",)
    assert sim.job("w").bytes_moved == 0
    cat = _catalog()
    snap = sim.state.snapshot()
    assert cat.transfer_cost("imagenet", "n7", snap) == 0
    assert cat.transfer_cost("imagenet", "n0", snap) > cat.transfer_cost("imagenet", "n4", snap) > 0
