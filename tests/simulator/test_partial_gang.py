"""A gang whose first task fits and a later one does not, through the discrete-event simulator: nothing of it
stays placed or charged, so the room its first task had taken goes to the next job at once."""

from __future__ import annotations

from gpucluster.jobs import JobSpec, JobState
from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator.runner import Simulation, jobs_profile
from gpucluster.spec import Cluster


def _cluster() -> Cluster:
    """``small``: one V100 and 16 cores; ``big``: two V100s and 64 cores (one model: a gang stays on one)."""
    def node(name: str, cores: int, gpus: int) -> NodeSpec:
        return NodeSpec(name=name, cpu_milli=cores * 1000, memory_mib=1 << 20, leaf="l", spine="s",
                        devices=tuple(DeviceSpec(f"{name}-g{j}", j, "nvidia", "V100", 32768) for j in range(gpus)))
    return Cluster("partial", (node("small", 16, 1), node("big", 64, 2)), Fabric(), "test")


def test_a_gang_that_fits_only_in_part_holds_nothing() -> None:
    tree = QuotaTree([QueueSpec("team", limit={"gpu": 8})])
    sim = Simulation(_cluster(), "sjf", profile=jobs_profile(False, extra=[PluginConfig(name="Quota")]),
                     services={"quota": tree})
    # t=0: a one-GPU job of 60 cores (only big has them), until t=30
    hog = sim.submit(JobSpec("hog", 0, 1, 30, tenant="team", cpu_milli_per_gpu=60000))
    # t=1: a gang of two one-GPU tasks of 8 cores (shortest, so tried first): the first fits "small", the second
    # fits nowhere (big has a free GPU but 4 free cores); then a one-GPU job that only "small" can take
    gang = sim.submit(JobSpec("gang", 1, 2, 20, tenant="team", gpus_per_task=1, cpu_milli_per_gpu=8000))
    single = sim.submit(JobSpec("single", 1, 1, 50, tenant="team", cpu_milli_per_gpu=8000))
    sim.run_until(2)
    assert hog.state == JobState.RUNNING and hog.nodes == ("big",)
    assert gang.state == JobState.QUEUED
    assert single.state == JobState.RUNNING and single.nodes == ("small",)
    assert set(sim.state.allocations) == {*hog.pod_keys, *single.pod_keys}  # nothing of the gang is held
    assert tree.used["team"]["gpu"] == 2  # nor charged
    assert int(sim.state.cpu_used.sum()) == 68000
    sim.run_until(31)  # the hog is done: the gang runs on big
    assert gang.state == JobState.RUNNING and gang.nodes == ("big", "big")
    sim.run()
    assert [j.state for j in (hog, gang, single)] == [JobState.SUCCEEDED] * 3
    assert sim.state.allocations == {} and tree.used["team"] == {"gpu": 0.0, "gpumem": 0.0, "gpucores": 0.0}
