"""Quota accounting through everything that moves a job, as a property of the embedded runtime the control plane
runs: submissions of gangs and fractional GPUs by tenants with and without a quota, cancellations, finishes, GPU
faults (with remediation's drains, or without remediation), operator drains and cordons, preemption by the
preemptive queue policies, and quotas raised while jobs wait.

After every step:

* a pod holds an allocation exactly while its job runs (no allocation outlives its job, none is missing);
* what each tenant's queue is charged equals what its running jobs' pods hold, computed independently from the
  devices granted (``model.share.allocation_gpus``): charged once when placed, refunded once when evicted,
  preempted, cancelled or finished, so no leak and no double refund;
* no tenant holds more than its quota (quotas only go up here; a lowered quota keeps what was admitted:
  ``test_lowered_quota.py``);
* ``usage_by_tenant`` (``GET /tenants``, the 429 check) agrees with the jobs' states.

At the end every job is cancelled, and nothing is left charged, allocated or counted.
"""

from __future__ import annotations

import math
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import Job, JobState, job_spec
from gpucluster.model.share import allocation_gpus
from gpucluster.monitoring import RemediationPolicy
from tests.service.inproc import small_cluster

TENANTS = ("a", "b", "c")
"""``a`` and ``b`` have quotas, ``c`` none (it fills the cluster, so the others compete and get preempted)."""
START_QUOTAS = {"a": 4.0, "b": 2.5}

submit = st.tuples(st.just("submit"), st.sampled_from(TENANTS), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3),
                   st.sampled_from([100, 100, 50, 30]), st.sampled_from([0, 0, 60]), st.booleans(),
                   st.sampled_from([None, 40.0, 900.0]))
step = st.one_of(
    submit,
    st.just(("submit", "c", 8, 3, 100, 0, True, None)),  # a big unlimited gang
    st.tuples(st.just("submit"), st.sampled_from(["a", "b"]), st.just(1), st.just(1), st.just(100), st.just(0),
              st.just(True), st.just(None)),
    st.tuples(st.just("cancel"), st.integers(0, 20)),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 50.0, 700.0, 7300.0])),
    st.tuples(st.just("fault"), st.integers(0, 5), st.integers(0, 7), st.sampled_from([79, 13, 48])),
    st.tuples(st.just("drain"), st.integers(0, 5)),
    st.tuples(st.just("cordon"), st.integers(0, 5)),
    st.tuples(st.just("uncordon"), st.integers(0, 5)),
    st.tuples(st.just("raise"), st.sampled_from(["a", "b"]), st.sampled_from([0.5, 1.0, 4.0])),
)


def check(rt: EmbeddedRuntime, quotas: dict[str, float], where: str) -> None:
    jobs = list(rt.engine.jobs.values())
    running = [j for j in jobs if j.state == JobState.RUNNING]
    held = {k for j in running for k in j.pod_keys}
    allocations = rt.state.allocations
    assert set(allocations) == held, f"{where}: allocations without a running job or the reverse: " \
                                     f"{sorted(set(allocations) ^ held)}"
    usage = rt.usage_by_tenant()
    for tenant in TENANTS:
        mine = [j for j in running if j.spec.tenant == tenant]
        holds = sum(allocation_gpus(rt.state, allocations[k]) for j in mine for k in j.pod_keys)
        if tenant in quotas:
            used = rt.quota.used[tenant]["gpu"]
            assert math.isclose(used, holds, abs_tol=1e-6), f"{where}: {tenant} charged {used}, holds {holds}"
            assert used <= quotas[tenant] + 1e-6, f"{where}: {tenant} holds {used} over its quota {quotas[tenant]}"
        row: dict[str, Any] = usage.get(tenant, {})
        assert math.isclose(row.get("gpus", 0.0), sum(j.gpus for j in mine), abs_tol=1e-6), (where, tenant, row)
        waiting = sum(1 for j in jobs if j.spec.tenant == tenant and j.state in (JobState.NEW, JobState.QUEUED))
        assert (int(row.get("running", 0)), int(row.get("pending", 0))) == (len(mine), waiting), (where, tenant, row)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=5, max_size=30), st.booleans(),
       st.sampled_from(["default", "tiresias", "drf", "gavel", "fifo"]))
def test_charges_follow_holdings_through_every_move_and_are_released_once(
        steps: list[tuple[Any, ...]], remediate: bool, policy: str) -> None:
    rt = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0, queue_policy=policy,
                         remediation=RemediationPolicy(max_unschedulable_fraction=1.0) if remediate else None)
    quotas = dict(START_QUOTAS)
    rt.set_quotas(quotas)
    nodes = [n["name"] for n in rt.nodes()]
    for n, s in enumerate(steps):
        if s[0] == "submit":
            _, tenant, gpus, replicas, cores, priority, preemptible, duration = s
            job = Job(job_spec(f"j{n}", name=f"j{n}", tenant=tenant, replicas=replicas, duration_s=duration,
                               resources={"nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores}, submit_s=rt.now,
                               priority=priority, preemptible=preemptible, registry=rt.registry))
            try:
                rt.validate(job)
            except ValueError:
                continue  # can never fit (the cluster or the quota): refused at the door, as the API does
            rt.submit(job)
        elif s[0] == "cancel":
            live = [j for j in rt.engine.jobs.values() if not j.done]
            if live:
                rt.cancel(live[s[1] % len(live)].spec.job_id)
        elif s[0] == "advance":
            rt.advance(rt.now + s[1])
        elif s[0] == "fault":
            rt.inject_fault(nodes[s[1]], s[2], [], xid=s[3])
        elif s[0] == "drain":
            rt.drain(nodes[s[1]], "drained by the test", [])
        elif s[0] == "cordon":
            rt.cordon(nodes[s[1]])
        elif s[0] == "uncordon":
            rt.uncordon(nodes[s[1]])
        else:
            quotas[s[1]] += s[2]
            rt.set_quotas(quotas)
        rt.advance(rt.now + 0.5)
        check(rt, quotas, f"after step {n} {s}")
    for job in list(rt.engine.jobs.values()):
        if not job.done:
            rt.cancel(job.spec.job_id)
    rt.advance(rt.now + 1.0)
    check(rt, quotas, "after cancelling everything")
    assert not rt.state.allocations
    assert all(abs(v) < 1e-6 for t in quotas for v in rt.quota.used[t].values()), rt.quota.used
    assert rt.usage_by_tenant() == {}
