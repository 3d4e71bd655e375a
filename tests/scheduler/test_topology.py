from __future__ import annotations

from gpucluster.jobs.model import JobSpec, JobState
from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.simulator.runner import Simulation, jobs_profile
from gpucluster.spec import Cluster


def _cluster(domain: int = 4) -> Cluster:
    """2 leaves x 4 nodes x 8 GPUs (NVLink domains of ``domain`` GPUs)."""
    nodes = []
    for i in range(8):
        devs = tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "H100", 81920, nvlink_domain=j // domain)
                     for j in range(8))
        nodes.append(NodeSpec(name=f"n{i}", cpu_milli=128000, memory_mib=1 << 21, devices=devs,
                              leaf=f"leaf-{i // 4}", spine="s0", rack=f"r{i // 4}"))
    return Cluster("t", tuple(nodes), Fabric(link_gbps=400), "test")


def _sim(cluster: Cluster, topology: bool = True) -> Simulation:
    return Simulation(cluster, "fifo", profile=jobs_profile(topology))


def test_eight_gpu_job_lands_in_one_nvlink_domain() -> None:
    sim = _sim(_cluster(domain=8))
    sim.submit(JobSpec("one-gpu", 0, 1, 1000))
    sim.submit(JobSpec("eight", 1, 8, 1000, gpus_per_task=4))  # two 4-GPU tasks
    sim.run_until(2)
    job = sim.job("eight")
    assert job.state == JobState.RUNNING
    assert len(set(job.nodes)) == 1
    node = sim.state.node_index[job.nodes[0]]
    links = {int(sim.state.dev_nvlink[node, g.device_index])
             for a in sim.state.allocations.values() if a.pod is not None and a.pod.name.startswith("eight")
             for g in a.grants}
    assert len(links) == 1


def test_four_gpu_request_stays_inside_one_domain() -> None:
    sim = _sim(_cluster(domain=4))
    sim.submit(JobSpec("four", 0, 4, 1000))
    sim.run_until(1)
    alloc = next(iter(sim.state.allocations.values()))
    node = sim.state.node_index[alloc.node]
    assert len({int(sim.state.dev_nvlink[node, g.device_index]) for g in alloc.grants}) == 1


def test_thirty_two_gpu_job_lands_under_one_leaf_when_it_can() -> None:
    cluster = _cluster()
    for topology, want_one_leaf in ((True, True), (False, False)):
        sim = _sim(cluster, topology)
        # leave 2 free nodes in leaf 0 and 4 free nodes in leaf 1, leaf 0 first in index order
        sim.submit(JobSpec("f0", 0, 8, 10_000, gpus_per_task=8))
        sim.submit(JobSpec("f1", 0, 8, 10_000, gpus_per_task=8))
        sim.run_until(1)
        assert {n for j in ("f0", "f1") for n in sim.job(j).nodes} == {"n0", "n1"}
        sim.submit(JobSpec("big", 2, 32, 1000, model="ResNet-50"))
        sim.run_until(3)
        big = sim.job("big")
        assert big.state == JobState.RUNNING
        leaves = {sim.state.node_spec(n).leaf for n in big.nodes}
        assert (len(leaves) == 1) is want_one_leaf
        assert (big.slowdown == 1.0) is want_one_leaf


def test_hard_leaf_constraint_waits_instead_of_spreading() -> None:
    from dataclasses import replace

    from gpucluster.model import ContainerRequest, DeviceConstraints, DeviceRequest, Pod
    from gpucluster.scheduler import Outcome, Scheduler

    cluster = _cluster()
    sched = Scheduler(cluster.state(), jobs_profile(True))
    # occupy 3 of 4 nodes in each leaf: 16 GPUs free in total, but only 8 per leaf
    for n in ("n0", "n1", "n2", "n4", "n5", "n6"):
        c = ContainerRequest("m", devices=(DeviceRequest("nvidia", 8, memory_pct=100, core_milli=1000),))
        pin = DeviceConstraints(use_uuids=tuple(f"G{n[1:]}-{j}" for j in range(8)))
        pod = Pod(name=f"fill-{n}", containers=(c,), constraints=pin)
        d = sched.schedule(pod)
        assert d.outcome == Outcome.SCHEDULED
    c = ContainerRequest("m", devices=(DeviceRequest("nvidia", 8, memory_pct=100, core_milli=1000),))
    member = Pod(name="g-0", containers=(c,), gang="g", gang_min_member=2,
                 annotations={"gpucluster.io/topology-required": "leaf", "gpucluster.io/job-gpus": "16"})
    d = sched.schedule(member)
    assert d.outcome == Outcome.UNSCHEDULABLE
    assert d.reasons.get("TopologyConstraint", 0) > 0
    soft = replace(member, name="s-0", gang="s", annotations={"gpucluster.io/job-gpus": "16"})
    assert sched.schedule(soft).outcome == Outcome.WAITING
