"""The preemption and reclaim planners are pure: they read running jobs and what is free, and name victims."""

from __future__ import annotations

import numpy as np

from gpucluster.jobs import Job, JobSpec, JobState
from gpucluster.jobs.preemption import Free, Running, plan_preemption, plan_reclaim
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree


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
