"""What you simulate is what you run: one jobs trace through :class:`Simulation` (the simulator's way: every
job submitted up front, one ``run()``) and through :class:`EmbeddedRuntime` (the control plane's way: jobs handed
in as the clock reaches them, the clock moved by ``advance`` in uneven steps, the engine describing every
waiting job for the API) starts and ends every job at the same times, for every queue policy and placement.

The runtime runs without its background workload, random faults or automatic remediation (each changes the
cluster under the jobs, as a fault injected into a simulation would)."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import POLICIES, Job, JobSpec
from gpucluster.monitoring import RemediationPolicy
from gpucluster.scheduler.plugins.quota import QuotaTree
from gpucluster.simulator import Simulation, generate
from tests.simulator.conftest import make_cluster


@pytest.mark.parametrize("placement", ["default", "jobs"])
@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_simulation_and_embedded_runtime_start_and_end_every_job_at_the_same_times(policy: str,
                                                                                   placement: str) -> None:
    cluster = make_cluster(nodes=4, gpus=8, nodes_per_leaf=2)
    # long 8-GPU jobs fill the cluster first (LAS policies demote and then preempt them), then a mixed stream
    hogs = [JobSpec(f"hog-{i}", 10.0 * i, 8, 30000.0, tenant=f"team-{i % 2}") for i in range(4)]
    stream = [replace(s, submit_s=s.submit_s + 6000.0, duration_s=min(s.duration_s, 20000.0))
              for s in generate(36, 32, profile="philly", load=1.3, seed=7)]
    specs = hogs + stream
    sim = Simulation(cluster, policy, seed=0, placement_policy=placement, slowdown=False,
                     services={"quota": QuotaTree([])})
    sim.submit_many(specs)
    sim.run()
    assert sim.summary()["jobs_completed"] == len(specs)
    if policy == "tiresias":
        assert sim.totals.preemptions > 0  # the trace exercises preemption

    rt = EmbeddedRuntime(cluster, placement, background=0.0, fault_rate_per_hour=0.0, seed=0, queue_policy=policy,
                         remediation=RemediationPolicy(allow=frozenset()))
    rng = random.Random(policy)
    pending = sorted(specs, key=lambda s: s.submit_s)
    end = max(j.finish_s for j in sim.jobs.values()) + 1.0
    t = 0.0
    while t < end:
        t = min(t + rng.uniform(1.0, 900.0) * (1 + t / 20000.0), end)
        while pending and pending[0].submit_s <= t:  # handed in no later than its arrival
            rt.submit(Job(pending.pop(0)))
        rt.advance(t)
    ran = {j.id: (j.first_start_s, j.finish_s) for j in rt.jobs()}
    want = {j.job_id: (j.first_start_s, j.finish_s) for j in sim.jobs.values()}
    assert ran == want
    assert all(j.status == "succeeded" for j in rt.jobs())


def test_a_job_whose_placement_raises_fails_alone_and_the_pass_goes_on() -> None:
    """H14's isolation, on the one engine: a plugin that raises for one job's pods (a fault mocked here: no real
    plugin raises on purpose) fails that job with the reason, leaves nothing of it reserved, and the jobs queued
    behind it still start in the same pass."""
    rt = EmbeddedRuntime(make_cluster(nodes=2, gpus=8), background=0.0, fault_rate_per_hour=0.0)
    fit = next(p for p in rt.scheduler.framework.plugins if p.name == "DeviceFit")
    reserve = fit.reserve  # type: ignore[attr-defined]

    def broken(state, pod, snap, node):  # type: ignore[no-untyped-def]
        if pod.labels["gpucluster.io/job"] == "bad" and pod.name.endswith("-1"):
            raise RuntimeError("device plugin state corrupt")
        return reserve(state, pod, snap, node)

    fit.reserve = broken  # type: ignore[attr-defined]
    jobs = [rt.submit(Job(JobSpec(jid, 0.0, gpus, 100.0, gpus_per_task=4))) for jid, gpus in
            (("bad", 8), ("after", 4), ("last", 8))]
    events = rt.advance(1.0)
    bad, after, last = jobs
    assert bad.status == "failed" and bad.message == "placement failed: RuntimeError: device plugin state corrupt"
    assert after.status == last.status == "running"
    assert not any(k.startswith("default/bad") for k in rt.state.allocations)  # its first pod was given back
    assert rt.scheduler.framework.waiting_pods == {}
    assert ("bad", "failed") in [(e.job_id, e.kind) for e in events]
