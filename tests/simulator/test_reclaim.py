"""Reclaim across hierarchical tenant queues: a queue below its guarantee takes GPUs back from queues above
theirs, never below, and limits keep holding."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobEvent
from gpucluster.jobs.model import JobSpec, JobState
from gpucluster.jobs.policies import DominantResourceFairness
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator.runner import Simulation, jobs_profile

from .conftest import make_cluster


def _sim(tree: QuotaTree, reclaim: bool = True) -> Simulation:
    prof = jobs_profile(False, extra=[PluginConfig(name="Quota")])
    return Simulation(make_cluster(nodes=4), DominantResourceFairness(reclaim=reclaim), profile=prof,
                      services={"quota": tree})


def _flat(b_guarantee: float = 16) -> QuotaTree:
    return QuotaTree([QueueSpec("a", guarantee=16), QueueSpec("b", guarantee=b_guarantee)])


def _fill_with_b(sim: Simulation) -> None:
    for k in range(4):  # b borrows the whole 32-GPU cluster
        sim.submit(JobSpec(f"b{k}", k, 8, 100_000, tenant="b"))


def test_a_guaranteed_tenant_reclaims_from_a_borrowing_tenant_down_to_its_guarantee() -> None:
    tree = _flat()
    sim = _sim(tree)
    seen: list[JobEvent] = []
    sim.listeners.append(seen.append)
    _fill_with_b(sim)
    sim.submit(JobSpec("a0", 100, 8, 1000, tenant="a"))
    sim.submit(JobSpec("a1", 200, 8, 1000, tenant="a"))
    sim.submit(JobSpec("a2", 300, 8, 1000, tenant="a"))   # a would go past its guarantee of 16: waits
    sim.run_until(400)
    assert sim.job("a0").first_start_s == 100 and sim.job("a1").first_start_s == 200
    assert sim.job("a2").state == JobState.QUEUED
    # the latest started of b's jobs go first; b keeps exactly its guarantee
    assert [e.job_id for e in seen if e.kind == "preempted"] == ["b3", "b2"]
    assert all(e.message.startswith("preempted reclaim for a") for e in seen if e.kind == "preempted")
    assert tree.used["b"]["gpu"] == 16 and tree.used["a"]["gpu"] == 16
    assert sim.totals.reclaims == 2
    sim.run()
    assert sim.summary()["jobs_lost"] == 0


def test_no_reclaim_from_a_tenant_within_its_guarantee_or_without_the_option() -> None:
    for sim in (_sim(_flat(b_guarantee=32)), _sim(_flat(), reclaim=False)):
        _fill_with_b(sim)
        sim.submit(JobSpec("a0", 100, 8, 1000, tenant="a"))
        sim.run_until(200)
        assert sim.job("a0").state == JobState.QUEUED
        assert sim.totals.preemptions == 0


def test_hierarchy_reclaim_between_siblings_and_not_past_an_ancestor_guarantee() -> None:
    tree = QuotaTree([
        QueueSpec("org1", guarantee=16), QueueSpec("team-a", parent="org1", guarantee=8),
        QueueSpec("team-b", parent="org1", guarantee=8),
        QueueSpec("org2", guarantee=16), QueueSpec("team-c", parent="org2", guarantee=16),
    ])
    sim = _sim(tree)
    for k in range(2):
        sim.submit(JobSpec(f"b{k}", k, 8, 100_000, tenant="team-b"))   # org1 at its guarantee, team-b over
    for k in range(2):
        sim.submit(JobSpec(f"c{k}", 2 + k, 8, 100_000, tenant="team-c"))  # org2 at its guarantee
    sim.submit(JobSpec("a0", 100, 8, 1000, tenant="team-a"))
    sim.run_until(150)
    # team-a takes its guarantee from its sibling team-b (over its own), not from org2 (at its guarantee)
    assert sim.job("a0").state == JobState.RUNNING
    assert sim.job("b1").state == JobState.QUEUED and sim.job("b1").preemptions == 1
    assert sim.job("c0").state == sim.job("c1").state == JobState.RUNNING
    assert tree.used["team-b"]["gpu"] == 8 and tree.used["org2"]["gpu"] == 16


def _limits_tree() -> QuotaTree:
    return QuotaTree([
        QueueSpec("org", guarantee=16, limit={"gpu": 28}),
        QueueSpec("team-a", parent="org", guarantee=8, limit={"gpu": 20}, weight=2.0),
        QueueSpec("team-b", parent="org", guarantee=8, limit={"gpu": 24}),
        QueueSpec("team-c", guarantee=16, limit={"gpu": 32}),
    ])


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["team-a", "team-b", "team-c", "guest"]),
                          st.sampled_from([1, 2, 4, 8, 16]), st.integers(0, 2000), st.integers(1, 3000)),
                min_size=1, max_size=30))
def test_with_reclaim_no_limit_is_exceeded_no_guarantee_is_broken_and_no_job_is_lost(
        jobs: list[tuple[str, int, int, int]]) -> None:
    tree = _limits_tree()
    sim = _sim(tree)

    def check(ev: JobEvent) -> None:
        for q, spec in tree.queues.items():
            for r, cap in spec.limit.items():
                assert tree.used[q][r] <= cap + 1e-9, (q, r, tree.used[q][r])
        if ev.kind == "preempted":
            claimant = sim.job(ev.message.removeprefix("preempted reclaim for "))
            victim = sim.job(ev.job_id)
            shared = set(tree.chain(claimant.spec.tenant))
            for q in tree.chain(victim.spec.tenant):
                if q not in shared:  # the victim's queues keep their guarantee
                    assert tree.used[q]["gpu"] >= tree.queues[q].guarantee - 1e-9, (q, tree.used[q])

    sim.listeners.append(check)
    for k, (tenant, gpus, at, dur) in enumerate(jobs):
        sim.submit(JobSpec(f"j{k}", at, gpus, dur, tenant=tenant))
    sim.run()
    s = sim.summary()
    assert s["jobs_lost"] == 0
    assert s["jobs_completed"] + s["jobs_rejected"] == len(jobs)
    assert s["preemptions"] == sim.totals.reclaims  # drf preempts only to reclaim
    assert all(v == 0 for used in tree.used.values() for v in used.values())
