from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobEvent
from gpucluster.jobs.model import JobSpec, JobState
from gpucluster.model import ContainerRequest, DeviceRequest, DeviceSpec, Fabric, NodeSpec, Pod
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree, pod_charge
from gpucluster.simulator.runner import Simulation, jobs_profile
from gpucluster.spec import Cluster


def _cluster(nodes: int = 4) -> Cluster:
    out = tuple(NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20, leaf="l", spine="s",
                         devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768) for j in range(8)))
                for i in range(nodes))
    return Cluster("q", out, Fabric(), "test")


def _tree() -> QuotaTree:
    return QuotaTree([
        QueueSpec("org", limit={"gpu": 24}),
        QueueSpec("team-a", parent="org", guarantee=8, limit={"gpu": 16}),
        QueueSpec("team-b", parent="org", guarantee=8, limit={"gpumem": 32768 * 12}),
        QueueSpec("team-c", limit={"gpucores": 200}),
    ])


def _sim(tree: QuotaTree, policy: str = "sjf") -> Simulation:
    prof = jobs_profile(False, extra=[PluginConfig(name="Quota")])
    return Simulation(_cluster(), policy, profile=prof, services={"quota": tree})


def test_tree_validation_and_charges() -> None:
    with pytest.raises(ValueError, match="unknown parent"):
        QuotaTree([QueueSpec("a", parent="zz")])
    with pytest.raises(ValueError, match="cycle"):
        QuotaTree([QueueSpec("a", parent="b"), QueueSpec("b", parent="a")])
    c = ContainerRequest("m", devices=(DeviceRequest("nvidia", 2, memory_mib=1000, core_milli=500),))
    assert pod_charge(Pod("p", containers=(c,))) == {"gpu": 1.0, "gpumem": 2000, "gpucores": 100}


def test_limits_hold_jobs_back_and_release_them_when_usage_drops() -> None:
    tree = _tree()
    sim = _sim(tree)
    sim.submit(JobSpec("a1", 0, 16, 100, tenant="team-a"))
    sim.submit(JobSpec("a2", 1, 8, 100, tenant="team-a"))   # team-a limit 16
    sim.submit(JobSpec("b1", 2, 8, 100, tenant="team-b"))   # org limit 24 reached
    sim.submit(JobSpec("b2", 3, 8, 100, tenant="team-b"))
    sim.submit(JobSpec("c1", 4, 2, 100, tenant="team-c"))   # 200 % cores
    sim.submit(JobSpec("c2", 5, 1, 100, tenant="team-c"))
    sim.run_until(10)
    states = {j: sim.job(j).state for j in ("a1", "a2", "b1", "b2", "c1", "c2")}
    assert states == {"a1": JobState.RUNNING, "a2": JobState.QUEUED, "b1": JobState.RUNNING,
                      "b2": JobState.QUEUED, "c1": JobState.RUNNING, "c2": JobState.QUEUED}
    assert tree.used["org"]["gpu"] == 24
    sim.run()
    assert sim.summary()["jobs_lost"] == 0
    assert tree.used["org"]["gpu"] == 0 and tree.used["team-c"]["gpucores"] == 0


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["team-a", "team-b", "team-c"]), st.sampled_from([1, 2, 4, 8, 16]),
                          st.integers(0, 500), st.integers(1, 400)), min_size=1, max_size=25),
       st.sampled_from(["fifo", "sjf", "default"]))
def test_quotas_are_never_exceeded(jobs: list[tuple[str, int, int, int]], policy: str) -> None:
    tree = _tree()
    sim = _sim(tree, policy)
    limits = {q.name: q.limit for q in tree.queues.values()}

    def check(ev: JobEvent) -> None:
        for q, lim in limits.items():
            for r, cap in lim.items():
                assert tree.used[q][r] <= cap + 1e-9, (q, r, tree.used[q][r])

    sim.listeners.append(check)
    for k, (tenant, gpus, at, dur) in enumerate(jobs):
        sim.submit(JobSpec(f"j{k}", at, gpus, dur, tenant=tenant))
    sim.run()
    # jobs larger than their queue's limit are rejected on arrival; everything else completes
    s = sim.summary()
    assert s["jobs_lost"] == 0
    assert s["jobs_completed"] + s["jobs_rejected"] == len(jobs)
