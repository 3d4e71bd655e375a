from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.model import JobSpec, JobState
from gpucluster.simulator.faults import Fault, FaultKind, apply, random_node_failures
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate

from .conftest import make_cluster


def test_failed_nodes_jobs_restart_from_checkpoint_and_finish() -> None:
    sim = Simulation(make_cluster(nodes=2), "fifo")
    sim.submit(JobSpec("a", 0, 8, 10000, checkpoint_interval_s=1000))
    sim.run_until(2500)
    node = sim.job("a").nodes[0]
    evicted = sim.fail_node(node, repair_after_s=100000)
    assert evicted == ["a"]
    job = sim.job("a")
    assert job.work_done_s == 2000 and job.lost_work_s == 500
    sim.run_until(2500)
    assert job.state == JobState.RUNNING and job.nodes[0] != node  # restarted on the other node
    sim.run()
    assert job.state == JobState.SUCCEEDED
    assert job.finish_s == 2500 + 8000
    s = sim.summary()
    assert s["jobs_lost"] == 0 and s["evictions"] == 1 and s["lost_work_s"] == 500


def test_device_failure_evicts_only_jobs_on_that_device() -> None:
    sim = Simulation(make_cluster(nodes=1), "fifo")
    sim.submit(JobSpec("a", 0, 4, 100))
    sim.submit(JobSpec("b", 0, 4, 100))
    sim.run_until(10)
    alloc = next(a for a in sim.state.allocations.values() if a.pod is not None and a.pod.name.startswith("a-"))
    dev = next(iter(alloc.grants)).device_index
    assert sim.fail_device(alloc.node, dev, repair_after_s=50) == ["a"]
    assert sim.job("b").state == JobState.RUNNING
    assert sim.usable_gpus == 7
    sim.run()
    assert sim.summary()["jobs_lost"] == 0


def test_node_down_without_repair_waits_and_repair_by_hand() -> None:
    sim = Simulation(make_cluster(nodes=1), "fifo")
    apply(sim, [Fault(5, "n00", None)])
    sim.submit(JobSpec("a", 0, 8, 100))
    sim.run_until(1000)
    assert sim.job("a").state == JobState.QUEUED
    sim.repair_node("n00")
    sim.run()
    assert sim.job("a").state == JobState.SUCCEEDED
    assert sim.job("a").finish_s == 1000 + 100


@settings(max_examples=10, deadline=None)
@given(st.integers(0, 1000), st.sampled_from(["fifo", "tiresias", "default"]))
def test_random_failures_never_lose_a_job(seed: int, policy: str) -> None:
    cluster = make_cluster(nodes=4)
    sim = Simulation(cluster, policy, seed=seed)
    jobs = generate(40, 32, seed=seed, load=1.0, max_gpus=16)  # > 32 jobs: any draw can fill 32 GPUs
    sim.submit_many(jobs)
    horizon = max(j.submit_s for j in jobs) + 50000
    faults = random_node_failures([n.name for n in cluster.nodes], horizon, mtbf_s=20000, mttr_s=2000, seed=seed)
    apply(sim, faults)
    apply(sim, [Fault(100, "n01", 500, FaultKind.DEVICE, 3)])
    sim.run()
    s = sim.summary()
    assert s["jobs_lost"] == 0
    assert s["jobs_completed"] == len(jobs)
