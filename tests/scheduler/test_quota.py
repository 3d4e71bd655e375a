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


@settings(max_examples=150, deadline=None)
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
    assert all(v == 0 for used in tree.used.values() for v in used.values()), tree.used  # every charge refunded


# ------------------------------------------------------------------------------- one limit binding at a time
def _org() -> QuotaTree:
    """org (12 GPUs) > team-a (8 GPUs), team-b (no limit of its own); solo: 16 GiB of device memory, 150 % cores."""
    return QuotaTree([
        QueueSpec("org", limit={"gpu": 12}),
        QueueSpec("team-a", parent="org", limit={"gpu": 8}),
        QueueSpec("team-b", parent="org"),
        QueueSpec("solo", limit={"gpumem": 16384, "gpucores": 150}),
    ])


def _use(tree: QuotaTree, key: str, queue: str, gpu: float = 0.0, gpumem: float = 0.0, gpucores: float = 0.0) -> None:
    tree.charge(key, queue, {"gpu": gpu, "gpumem": gpumem, "gpucores": gpucores})


def test_only_the_parent_limit_binds() -> None:
    tree = _org()
    _use(tree, "b", "team-b", gpu=8)
    _use(tree, "a", "team-a", gpu=3)
    # team-a holds 3 of its 8; the org holds 11 of 12: one more GPU fits both, two break only the org's
    assert tree.blocked_by("team-a", {"gpu": 1}) is None
    assert tree.blocked_by("team-a", {"gpu": 2}) == "org.gpu"
    assert tree.blocked_by("team-b", {"gpu": 2}) == "org.gpu"  # team-b has no limit of its own
    tree.refund("b")
    assert tree.blocked_by("team-a", {"gpu": 2}) is None
    assert tree.used["org"]["gpu"] == 3 and tree.used["team-b"]["gpu"] == 0


def test_only_the_child_limit_binds() -> None:
    tree = _org()
    _use(tree, "a", "team-a", gpu=7)
    # team-a holds 7 of 8, the org 7 of 12: two more break only team-a's limit
    assert tree.blocked_by("team-a", {"gpu": 1}) is None
    assert tree.blocked_by("team-a", {"gpu": 2}) == "team-a.gpu"
    assert tree.blocked_by("team-b", {"gpu": 5}) is None


def test_each_resource_limit_binds_alone_and_an_exact_fit_is_allowed() -> None:
    tree = _org()
    _use(tree, "x", "solo", gpu=5, gpumem=8192, gpucores=100)
    assert tree.blocked_by("solo", {"gpu": 99, "gpumem": 8192, "gpucores": 50}) is None  # both exactly at cap
    assert tree.blocked_by("solo", {"gpumem": 8193}) == "solo.gpumem"
    assert tree.blocked_by("solo", {"gpucores": 51}) == "solo.gpucores"
    assert tree.blocked_by("solo", {"gpumem": 8193, "gpucores": 51}) is not None
    assert tree.could_ever_fit("solo", {"gpumem": 16384, "gpucores": 150})
    assert not tree.could_ever_fit("solo", {"gpumem": 16385})
    assert not tree.could_ever_fit("team-a", {"gpu": 9}) and not tree.could_ever_fit("team-b", {"gpu": 13})
    assert tree.could_ever_fit("team-b", {"gpu": 12})


def test_charges_are_idempotent_and_refunds_give_back_exactly() -> None:
    tree = _org()
    _use(tree, "a", "team-a", gpu=2, gpumem=100)
    _use(tree, "a", "team-a", gpu=2, gpumem=100)  # the same pod charged twice counts once
    assert tree.used["team-a"]["gpu"] == tree.used["org"]["gpu"] == 2
    tree.refund("a")
    tree.refund("a")  # and refunded twice, once
    assert tree.used["team-a"] == tree.used["org"] == {"gpu": 0.0, "gpumem": 0.0, "gpucores": 0.0}


def test_refund_all_gives_back_every_charge_and_keeps_the_queues() -> None:
    tree = _org()
    _use(tree, "a", "team-a", gpu=2, gpumem=100)
    _use(tree, "b", "team-a", gpu=3)
    tree.refund_all()
    assert tree.used["team-a"] == tree.used["org"] == {"gpu": 0.0, "gpumem": 0.0, "gpucores": 0.0}
    assert set(tree.queues) == {"org", "team-a", "team-b", "solo"}
    _use(tree, "a", "team-a", gpu=2)  # charged anew (not taken for the old charge of the same pod)
    assert tree.used["org"]["gpu"] == 2
    tree.refund("b")  # a pod refunded by refund_all gives nothing back twice
    assert tree.used["org"]["gpu"] == 2


def _org_sim(tree: QuotaTree) -> Simulation:
    return Simulation(_cluster(), "sjf", profile=jobs_profile(False, extra=[PluginConfig(name="Quota")]),
                      services={"quota": tree})


def test_a_job_waits_for_its_parent_queue_alone() -> None:
    """team-a's 8-GPU job is within team-a's own limit (8) but not the org's (12) while team-b holds 8: it waits
    for team-b, not for anything of team-a's."""
    tree = _org()
    sim = _org_sim(tree)
    b = sim.submit(JobSpec("b", 0, 8, 100, tenant="team-b"))
    a = sim.submit(JobSpec("a", 1, 8, 50, tenant="team-a"))
    sim.run_until(2)
    assert (b.state, a.state) == (JobState.RUNNING, JobState.QUEUED)
    assert tree.used["team-a"]["gpu"] == 0 and tree.used["org"]["gpu"] == 8
    sim.run_until(101)  # b is done
    assert a.state == JobState.RUNNING and tree.used["org"]["gpu"] == 8
    sim.run()
    assert a.state == JobState.SUCCEEDED


def test_a_job_waits_for_its_own_queue_alone_and_an_exact_fit_runs() -> None:
    """team-a holds 5 of its 8: a 3-GPU job fits exactly and runs, a 1-GPU job then waits for team-a's own limit
    while the org (8 of 12) and the cluster have room; team-b's 4 GPUs still run."""
    tree = _org()
    sim = _org_sim(tree)
    first = sim.submit(JobSpec("first", 0, 5, 100, tenant="team-a"))
    exact = sim.submit(JobSpec("exact", 1, 3, 100, tenant="team-a"))
    extra = sim.submit(JobSpec("extra", 2, 1, 10, tenant="team-a"))
    other = sim.submit(JobSpec("other", 3, 4, 10, tenant="team-b"))
    sim.run_until(4)
    assert [j.state for j in (first, exact, extra, other)] == [JobState.RUNNING, JobState.RUNNING,
                                                               JobState.QUEUED, JobState.RUNNING]
    assert tree.used["team-a"]["gpu"] == 8 and tree.used["org"]["gpu"] == 12
    sim.run()
    assert extra.state == JobState.SUCCEEDED and extra.first_start_s == 100  # when "first" ended
