from __future__ import annotations

import math

import pytest

from gpucluster.jobs.model import Job, JobSpec, JobState
from gpucluster.jobs.policies import POLICIES, TwoDimensionalLAS, make_policy
from gpucluster.simulator.runner import Simulation

from .conftest import make_cluster


class _View:
    def __init__(self, now: float, shares: dict[str, float] | None = None) -> None:
        self.now = now
        self.shares = shares or {}

    def tenant_share(self, tenant: str) -> float:
        return self.shares.get(tenant, 0.0)

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        return (1.0, self.tenant_share(tenant))


def test_las_queues_demotion_time_and_starvation_promotion() -> None:
    las = TwoDimensionalLAS(thresholds=(100.0, 1000.0), starve_factor=2.0, starve_min_s=10.0)
    assert [las.queue_of(x) for x in (0, 99, 100, 999, 1000)] == [0, 0, 1, 1, 2]
    job = Job(JobSpec("j", 0, 4, 1e6), state=JobState.RUNNING, run_start_s=0.0)
    assert las.running_change_at(job, 0.0) == pytest.approx(25.0, abs=0.01)  # 100 GPU-s / 4 GPUs
    job.state, job.attained_gpu_s, job.queued_since_s = JobState.QUEUED, 400.0, 50.0
    assert las.key(job, _View(60.0))[1] == 1
    assert las.queued_change_at(job, 60.0) == 50.0 + 2.0 * 100.0  # waited twice its 100 s run
    assert las.key(job, _View(250.0))[1] == 0  # promoted
    assert las.rank((0, 1, 0, 5.0)) == (0, 1)


def test_fifo_sjf_drf_keys() -> None:
    a = Job(JobSpec("a", 5, 1, 100, tenant="x"))
    b = Job(JobSpec("b", 9, 1, 10, tenant="y"))
    fifo, sjf, drf = make_policy("fifo"), make_policy("sjf"), make_policy("drf")
    v = _View(10.0, {"x": 0.5, "y": 0.1})
    assert fifo.key(a, v) < fifo.key(b, v)
    assert sjf.key(b, v) < sjf.key(a, v)
    assert drf.key(b, v) < drf.key(a, v)
    assert drf.running_change_at(a, 0) == math.inf
    with pytest.raises(ValueError, match="unknown queue policy"):
        make_policy("lottery")
    assert set(POLICIES) >= {"fifo", "sjf", "tiresias", "drf", "offers", "default"}


def test_drf_serves_the_tenant_with_the_lowest_share_first() -> None:
    def run(policy: str) -> Simulation:
        sim = Simulation(make_cluster(nodes=1), policy)
        sim.submit(JobSpec("x-long", 0, 4, 1000, tenant="x"))
        sim.submit(JobSpec("z-block", 0, 4, 100, tenant="z"))
        sim.submit(JobSpec("x-next", 1, 4, 10, tenant="x"))
        sim.submit(JobSpec("y-first", 2, 4, 10, tenant="y"))
        sim.run_until(101)
        return sim
    drf, fifo = run("drf"), run("fifo")
    assert drf.job("y-first").state == JobState.RUNNING and drf.job("x-next").state == JobState.QUEUED
    assert fifo.job("x-next").state == JobState.RUNNING and fifo.job("y-first").state == JobState.QUEUED


def test_sticky_promotion_keeps_a_starved_job_on_top() -> None:
    las = TwoDimensionalLAS(thresholds=(100.0,), starve_factor=1.0, starve_min_s=10.0, sticky_promotion=True)
    job = Job(JobSpec("j", 0, 1, 1e6), state=JobState.QUEUED, attained_gpu_s=500.0, queued_since_s=0.0)
    assert las.key(job, _View(100.0))[1] == 1
    assert las.key(job, _View(600.0))[1] == 0
    job.state, job.run_start_s = JobState.RUNNING, 600.0
    assert las.key(job, _View(10_000.0))[1] == 0
    assert las.running_change_at(job, 10_000.0) == math.inf


def test_a_job_past_the_protection_age_runs_to_completion() -> None:
    def run(protect: float) -> Simulation:
        las = TwoDimensionalLAS(thresholds=(100.0,), protect_age_s=protect, min_run_s=0.0)
        sim = Simulation(make_cluster(nodes=1), las)
        sim.submit(JobSpec("old", 0, 8, 50_000))
        sim.submit(JobSpec("early", 5_000, 8, 100))   # old is demoted and young: preempted
        sim.submit(JobSpec("late", 20_000, 8, 100))   # old has been in the system 20,000 s by then
        sim.run()
        return sim
    protected, plain = run(10_000.0), run(math.inf)
    assert protected.job("early").first_start_s == plain.job("early").first_start_s == 5_000
    assert protected.job("old").preemptions == 1 and protected.job("old").finish_s == 50_100
    assert protected.job("late").first_start_s == 50_100
    assert plain.job("late").first_start_s == 20_000 and plain.job("old").preemptions == 2
    assert protected.summary()["jobs_lost"] == plain.summary()["jobs_lost"] == 0
