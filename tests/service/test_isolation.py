"""Scheduling passes are isolated per job (issue 14, defect 1): a job whose placement raises fails alone.

No request can make placement raise any more (quantities are bounded at the door), so the failure is injected:
:class:`InjectedPlacementFaultError` is raised by a wrapper around the runtime's scheduler for chosen pods of a
job's group, before the pod is reserved (its earlier replicas are) or after it was bound (a partial reservation).
A fault injection, named so; everything else is real.
"""

from __future__ import annotations

import time
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.jobs import job_spec
from gpucluster.model import DeviceSpec, NodeSpec, Pod
from gpucluster.scheduler import Decision
from gpucluster.scheduler.framework import Status
from gpucluster.service import EmbeddedRuntime, Job, JobStatus
from gpucluster.spec import Cluster, load_cluster
from tests.scheduler.test_properties import check_invariants


class InjectedPlacementFaultError(RuntimeError):
    """Raised by the test's wrapper around ``Scheduler.schedule_and_bind`` (a fault injection)."""


def _cluster(nodes: int = 4, gpus: int = 8) -> Cluster:
    specs = tuple(
        NodeSpec(name=f"n{i}", cpu_milli=128000, memory_mib=1 << 20, rack=f"r{i}", leaf="leaf-0", spine="s0",
                 devices=tuple(DeviceSpec(uuid=f"n{i}-g{j}", index=j, vendor="nvidia", model="H100",
                                          memory_mib=80000, nvlink_domain=0) for j in range(gpus)))
        for i in range(nodes))
    return Cluster(name="iso", nodes=specs, fabric=load_cluster(None).fabric, source="test")


SHAPES = (
    {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100},
    {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 100},
    {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25, "nvidia.com/gpumem": 20000},
    {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "nvidia.com/gpumem": 40000},
)
job_st = st.tuples(st.integers(0, len(SHAPES) - 1), st.integers(1, 2),  # shape, replicas
                   st.one_of(st.none(), st.tuples(st.integers(0, 1), st.booleans())))  # fault: (replica, after bind)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(job_st, min_size=1, max_size=8))
def test_a_job_whose_placement_raises_fails_alone(jobs: list[tuple[int, int, Any]]) -> None:
    rt = EmbeddedRuntime(_cluster(), background=0.0, fault_rate_per_hour=0.0)
    real_schedule, real_bind = rt.scheduler.schedule, rt.scheduler.bind
    faults: dict[str, tuple[int, bool]] = {}

    def fault_of(pod: Pod, after_bind: bool) -> bool:
        jid, _attempt, replica = pod.name.rsplit("-", 2)
        fault = faults.get(jid)
        return fault is not None and fault[1] == after_bind and \
            int(replica) == min(fault[0], rt.job(jid).replicas - 1)  # type: ignore[union-attr]

    def schedule(pod: Pod) -> Decision:
        if fault_of(pod, False):
            raise InjectedPlacementFaultError(f"injected into {pod.key}")
        return real_schedule(pod)

    def bind(decision: Decision) -> Status:
        st = real_bind(decision)  # bind the devices, then fail
        if fault_of(decision.pod, True):
            raise InjectedPlacementFaultError(f"injected into {decision.pod.key}")
        return st

    rt.scheduler.schedule = schedule  # type: ignore[method-assign]
    rt.scheduler.bind = bind  # type: ignore[method-assign]
    submitted: list[Job] = []
    for k, (shape, replicas, fault) in enumerate(jobs):
        job = Job(job_spec(f"j{k}", name=f"j{k}", tenant=f"t{k % 3}", replicas=replicas, resources=SHAPES[shape],
                           duration_s=None, submit_s=0.0, submitted_at=time.time()))
        rt.validate(job)
        submitted.append(rt.submit(job))
        if fault is not None:
            faults[job.id] = fault
    rt.advance(1.0)
    rt.advance(2.0)  # a second pass must not trip over anything the first one left behind
    for job in submitted:
        if job.id in faults:
            assert job.status == JobStatus.FAILED and "InjectedPlacementFaultError" in job.message, job
        else:
            assert job.status == JobStatus.RUNNING, job  # at most 16 of 32 GPUs are asked for: all fit
    check_invariants(rt.state)
    running = {k for job in submitted if job.status == JobStatus.RUNNING for k in job.pod_keys}
    assert set(rt.state.allocations) == running  # nothing of a failed job stays reserved
    failed = [f"{j.tenant}/{j.id}-1-{i}" for j in submitted if j.id in faults for i in range(j.replicas)]
    assert not any(rt.scheduler.cache.is_assumed(k) for k in failed)
    assert rt.state.totals()["pods"] == len(running)
    held = sum(j.gpus for j in submitted if j.status == JobStatus.RUNNING)
    assert held == sum(v["gpus"] for v in rt.usage_by_tenant().values())
