from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobEvent
from gpucluster.jobs.model import JobSpec, JobState
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate
from gpucluster.spec import Cluster

from .conftest import make_cluster


def test_run_until_steps_the_clock_and_jobs_finish(small_cluster: Cluster) -> None:
    sim = Simulation(small_cluster, "fifo")
    seen: list[JobEvent] = []
    sim.listeners.append(seen.append)
    sim.submit(JobSpec("a", 0, 8, 100))
    sim.submit(JobSpec("b", 10, 4, 50))
    sim.run_until(20)
    assert sim.now == 20
    assert sim.job("a").state == JobState.RUNNING and sim.job("b").state == JobState.RUNNING
    assert sim.busy_gpus == 12
    sim.run()
    assert sim.job("a").finish_s == 100 and sim.job("b").finish_s == 60
    assert [e.kind for e in seen if e.job_id == "a"] == ["queued", "running", "succeeded"]
    s = sim.summary()
    assert s["jobs_completed"] == 2 and s["jobs_lost"] == 0
    assert s["avg_jct_s"] == 75 and 0 < s["gpu_utilization"] <= 1


def test_submit_and_cancel_at_any_time(small_cluster: Cluster) -> None:
    sim = Simulation(small_cluster, "fifo")
    sim.run_until(50)
    sim.submit(JobSpec("late", 0, 1, 100))  # arrives now, not in the past
    sim.run_until(60)
    assert sim.job("late").first_start_s == 50
    assert sim.cancel("late")
    assert not sim.cancel("late")
    assert sim.busy_gpus == 0 and sim.job("late").state == JobState.CANCELLED
    sim.run()
    assert sim.summary()["jobs_lost"] == 0


def test_gang_larger_than_free_capacity_waits_whole(small_cluster: Cluster) -> None:
    sim = Simulation(small_cluster, "sjf")
    sim.submit(JobSpec("big-run", 0, 24, 1000))   # 3 of 4 nodes
    sim.submit(JobSpec("gang", 1, 16, 10))       # 2 nodes: only 1 free -> waits whole
    sim.submit(JobSpec("small", 2, 8, 10))       # fits in what is left
    sim.run_until(5)
    assert sim.job("gang").state == JobState.QUEUED
    assert sim.job("small").state == JobState.RUNNING
    # nothing of the waiting gang holds resources
    assert all(not k.startswith("gang") for k in (a.pod_key.split("/")[1] for a in sim.state.allocations.values()))
    assert len(sim.state.allocations) == 4
    sim.run()
    assert sim.job("gang").first_start_s == 1000
    assert sim.summary()["jobs_lost"] == 0


def test_tiresias_preempts_long_jobs_for_new_short_ones() -> None:
    sim = Simulation(make_cluster(nodes=1), "tiresias")
    sim.submit(JobSpec("long", 0, 8, 100000))
    sim.submit(JobSpec("short", 20000, 8, 100))  # long has 160,000 GPU-s attained by then: demoted
    sim.run()
    short, long_ = sim.job("short"), sim.job("long")
    assert short.first_start_s == 20000 and short.finish_s == 20100
    assert long_.preemptions == 1 and long_.finish_s == 100100
    s = sim.summary()
    assert s["preemptions"] == 1 and s["jobs_lost"] == 0


def test_fifo_blocks_behind_the_head_but_sjf_backfills(small_cluster: Cluster) -> None:
    def run(policy: str) -> Simulation:
        sim = Simulation(small_cluster, policy)
        sim.submit(JobSpec("a", 0, 16, 100))
        sim.submit(JobSpec("head", 1, 32, 100))
        sim.submit(JobSpec("tiny", 2, 1, 10))
        sim.run()
        return sim
    assert run("fifo").job("tiny").first_start_s == 200
    assert run("sjf").job("tiny").first_start_s == 2


@settings(max_examples=15, deadline=None)
@given(st.sampled_from(["fifo", "sjf", "tiresias", "drf", "offers", "default"]), st.integers(0, 10_000))
def test_no_job_is_lost_and_capacity_is_never_exceeded(policy: str, seed: int) -> None:
    cluster = make_cluster(nodes=4)
    sim = Simulation(cluster, policy, seed=seed)
    peak = 0

    def watch(ev: JobEvent) -> None:
        nonlocal peak
        peak = max(peak, sim.busy_gpus)
        assert sim.busy_gpus <= sim.usable_gpus

    sim.listeners.append(watch)
    jobs = generate(50, 32, seed=seed, load=1.5, max_gpus=16)  # > 48 jobs: any draw can fill 1.5 x 32 GPUs
    sim.submit_many(jobs)
    sim.run()
    s = sim.summary()
    assert s["jobs_lost"] == 0
    assert s["jobs_completed"] == len(jobs)
    assert peak <= 32
    for j in sim.jobs.values():
        assert j.finish_s >= j.spec.submit_s + j.spec.duration_s - 1e-6
        assert math.isclose(j.work_done_s, j.spec.duration_s)


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 1000), st.sampled_from([7.0, 333.0, 5000.0]))
def test_stepping_the_clock_does_not_change_the_run(seed: int, step: float) -> None:
    jobs = generate(50, 32, seed=seed, load=1.5, max_gpus=16)  # > 48 jobs: any draw can fill 1.5 x 32 GPUs
    whole = Simulation(make_cluster(nodes=4), "default", seed=seed)
    whole.submit_many(jobs)
    whole.run()
    stepped = Simulation(make_cluster(nodes=4), "default", seed=seed)
    stepped.submit_many(jobs)
    t = 0.0
    while stepped.kernel.peek() != math.inf:
        t += step
        stepped.run_until(t)
    assert [j.finish_s for j in whole.jobs.values()] == [j.finish_s for j in stepped.jobs.values()]
