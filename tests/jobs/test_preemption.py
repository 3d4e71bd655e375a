"""The preemption and reclaim planners are pure: they read running jobs and what is free, and name victims."""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.jobs import Job, JobSpec, JobState
from gpucluster.jobs.preemption import Free, Running, plan_preemption, plan_reclaim
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator import Simulation
from tests.simulator.conftest import make_cluster


def _running(jid: str, gpus: int, node: str, *, started: float = 0.0, tenant: str = "t",
             preemptible: bool = True) -> Job:
    job = Job(JobSpec(jid, 0.0, gpus, 1000.0, tenant=tenant, preemptible=preemptible), JobState.RUNNING)
    job.run_start_s = started
    job.nodes = (node,)
    return job


def _free(per_node: list[int], gpus: float | None = None) -> Free:
    return Free(float(sum(per_node)) if gpus is None else gpus, np.asarray(per_node, np.int64),
                {f"n{i}": i for i in range(len(per_node))})


def test_preemption_takes_the_worst_rank_first_and_no_more_than_needed() -> None:
    jobs = {j.job_id: j for j in (_running("low", 8, "n0"), _running("mid", 8, "n1"), _running("late", 8, "n2",
                                                                                             started=900.0))}
    ranks = {"low": (0.0, 2.0), "mid": (0.0, 1.0), "late": (0.0, 2.0)}
    running = Running(jobs, ranks, ranks, oldest=600.0)
    claimant = Job(JobSpec("c", 0.0, 8, 100.0))
    # 'late' has not run its lease yet; 'low' ranks worst; one 8-GPU node is enough
    assert [v.job_id for v in plan_preemption(running, claimant, (0.0, 0.0), _free([0, 0, 0]))] == ["low"]
    claimant16 = Job(JobSpec("c16", 0.0, 16, 100.0))
    assert [v.job_id for v in plan_preemption(running, claimant16, (0.0, 0.0), _free([0, 0, 0]))] == ["low", "mid"]
    # nothing strictly worse than rank (0, 1): 'mid' is equal, 'low' would do but alone is too little for 16
    assert plan_preemption(running, claimant16, (0.0, 1.0), _free([0, 0, 0])) == []
    jobs["low"] = _running("low", 8, "n0", preemptible=False)
    assert [v.job_id for v in plan_preemption(running, claimant, (0.0, 0.0), _free([0, 0, 0]))] == ["mid"]


def test_reclaim_takes_from_the_queue_most_over_its_guarantee_down_to_it() -> None:
    tree = QuotaTree([QueueSpec("a", guarantee=8), QueueSpec("b", guarantee=8), QueueSpec("c", guarantee=0)])
    jobs = {j.job_id: j for j in (_running("b1", 8, "n0", tenant="b"), _running("b2", 8, "n1", tenant="b",
                                                                                  started=10.0),
                                  _running("c1", 8, "n2", tenant="c"))}
    for j in jobs.values():
        tree.charge(j.job_id, j.spec.tenant, {"gpu": 8.0})
    keys = dict.fromkeys(jobs, (0.0,))
    running = Running(jobs, keys, keys, oldest=100.0)
    claimant = Job(JobSpec("a1", 0.0, 8, 100.0, tenant="a"))
    usage = {"b": 16.0, "c": 8.0}
    # c is 8 over its guarantee, b 8 over: ties go to the later name; c gives back first, never below guarantee
    assert [v.job_id for v in plan_reclaim(running, claimant, _free([0, 0, 0]), tree, usage)] == ["c1"]
    tree.refund("c1")
    del jobs["c1"]
    keys.pop("c1")
    assert [v.job_id for v in plan_reclaim(running, claimant, _free([0, 0, 0]), tree, usage)] == ["b2"]
    greedy = Job(JobSpec("a2", 0.0, 16, 100.0, tenant="a"))  # would take a above its own guarantee
    assert plan_reclaim(running, greedy, _free([0, 0, 0]), tree, usage) == []


# ---------------------------------------------------------------------------------------------- issue 31
def test_inside_a_priority_class_the_smallest_sufficient_victims_are_stopped() -> None:
    """Jobs of one rank and different sizes: the claimant stops the smallest job that makes room, never a
    larger one, and never a job it does not need once a larger one had to go."""
    # n0: 'small' (1 GPU) beside 'keep' (7 GPUs, a better rank); n1: 'big' (8 GPUs); n2: 'mid' (4 GPUs), 4 free
    jobs = {j.job_id: j for j in (_running("small", 1, "n0"), _running("keep", 7, "n0"), _running("big", 8, "n1"),
                                  _running("mid", 4, "n2"))}
    ranks = {"small": (0.0, 2.0), "keep": (0.0, 0.0), "big": (0.0, 2.0), "mid": (0.0, 2.0)}
    running = Running(jobs, ranks, ranks, oldest=600.0)
    free = _free([0, 0, 4], gpus=0.0)  # the 4 free GPUs of n2 count for whole-GPU tasks only
    one = Job(JobSpec("one", 0.0, 1, 100.0))
    assert [v.job_id for v in plan_preemption(running, one, (0.0, 1.0), free)] == ["small"]
    eight = Job(JobSpec("eight", 0.0, 8, 100.0))  # 8 on one node: 'mid' (n2) or 'big' (n1); 'small' cannot help
    assert [v.job_id for v in plan_preemption(running, eight, (0.0, 1.0), free)] == ["mid"]
    twelve = Job(JobSpec("twelve", 0.0, 12, 100.0))  # three tasks of 4: 'big' frees two of them, n2 has one
    assert [v.job_id for v in plan_preemption(running, twelve, (0.0, 1.0), free)] == ["big"]


@pytest.mark.parametrize(("need", "stopped"), [(1, {"small"}), (8, {"big"})])
def test_the_engine_stops_only_the_smallest_job_that_makes_room(need: int, stopped: set[str]) -> None:
    """Through the engine (a preemptive queue policy): n00 holds 'keep' (7 GPUs, the claimant's priority) and
    'small' (1 GPU), n01 holds 'big' (8 GPUs); 'small' and 'big' share a lower priority. A claimant of one GPU
    stops 'small' alone; one of eight stops 'big' alone ('small' would free a GPU no task of eight can use)."""
    sim = Simulation(make_cluster(nodes=2), "tiresias")
    sim.submit(JobSpec("keep", 0.0, 7, 1e6, priority=10))
    sim.submit(JobSpec("small", 1.0, 1, 1e6))
    sim.submit(JobSpec("big", 2.0, 8, 1e6))
    sim.run_until(1000.0)  # past the policy's lease (600 s), all still in 2D-LAS's first queue
    assert {j: set(sim.job(j).nodes) for j in ("keep", "small", "big")} == {
        "keep": {"n00"}, "small": {"n00"}, "big": {"n01"}}
    assert {sim.job(j).priority_queue for j in ("small", "big")} == {0}  # one priority class
    sim.submit(JobSpec("claimant", 1000.0, need, 100.0, priority=10))
    sim.run_until(1001.0)
    assert sim.job("claimant").state == JobState.RUNNING
    assert {j for j in ("keep", "small", "big") if sim.job(j).state != JobState.RUNNING} == stopped
