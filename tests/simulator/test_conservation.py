"""Property: nothing leaks. After every event of a simulation, exactly the pods of running jobs hold devices and
every quota queue is charged exactly what the running jobs below it hold; at the end, nothing is held or charged.

The clusters mix nodes with little and much CPU, so gangs regularly fit in part (a task placed, a later one
refused for CPU) and placements are rolled back; queues have limits of their own and a parent limit. A single GPU
left behind by a rollback, a release or a refund fails the check at the event where it happens. Enough examples
run (derandomized in CI, see ``tests/conftest.py``) for such a leak to be met.
"""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobSpec, JobState
from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator.runner import JobEvent, Simulation, jobs_profile
from gpucluster.spec import Cluster

QUEUES = ("team-a", "team-b", "team-c")

nodes_st = st.lists(st.tuples(st.integers(1, 4), st.sampled_from([8000, 16000, 64000])), min_size=2, max_size=4)
jobs_st = st.lists(
    st.tuples(st.sampled_from(QUEUES), st.sampled_from([1, 2, 3, 4, 6]), st.sampled_from([0, 1, 2]),
              st.sampled_from([2000, 4000, 8000]), st.integers(0, 60), st.integers(1, 50)),
    min_size=1, max_size=14)


def _tree() -> QuotaTree:
    return QuotaTree([QueueSpec("org", limit={"gpu": 8}), QueueSpec("team-a", parent="org", limit={"gpu": 5}),
                      QueueSpec("team-b", parent="org"), QueueSpec("team-c", limit={"gpu": 3})])


def _cluster(shape: list[tuple[int, int]]) -> Cluster:
    nodes = tuple(NodeSpec(name=f"n{i}", cpu_milli=cpu, memory_mib=1 << 20, leaf="l", spine="s",
                           devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768) for j in range(gpus)))
                  for i, (gpus, cpu) in enumerate(shape))
    return Cluster("leaks", nodes, Fabric(), "test")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nodes_st, jobs_st, st.sampled_from(["fifo", "sjf", "default"]))
def test_nothing_is_left_held_or_charged(shape: list[tuple[int, int]],
                                         jobs: list[tuple[str, int, int, int, int, int]], policy: str) -> None:
    tree = _tree()
    sim = Simulation(_cluster(shape), policy, profile=jobs_profile(False, extra=[PluginConfig(name="Quota")]),
                     services={"quota": tree})
    subtree = {q: {q, *(c for c in QUEUES if q in tree.chain(c))} for q in tree.queues}

    def check(ev: JobEvent) -> None:
        running = [j for j in sim.jobs.values() if j.state == JobState.RUNNING]
        held = {k for j in running for k in j.pod_keys}
        assert set(sim.state.allocations) == held, (ev, sorted(set(sim.state.allocations) ^ held))
        for q, members in subtree.items():
            want = sum(j.spec.gpu_share for j in running if j.spec.tenant in members)
            assert math.isclose(tree.used[q]["gpu"], want, abs_tol=1e-9), (ev, q, tree.used[q]["gpu"], want)
        assert int(sim.state.dev_tasks.sum()) == sum(j.spec.num_gpus for j in running), ev

    sim.listeners.append(check)
    for k, (tenant, gpus, per_task, cpu, at, dur) in enumerate(jobs):
        task = per_task if per_task and gpus % per_task == 0 else 0
        sim.submit(JobSpec(f"j{k}", at, gpus, dur, tenant=tenant, gpus_per_task=task, cpu_milli_per_gpu=cpu))
    sim.run()
    assert sim.state.allocations == {}
    assert all(v == 0 for used in tree.used.values() for v in used.values()), tree.used
    assert not [j.job_id for j in sim.jobs.values() if j.state == JobState.RUNNING]
