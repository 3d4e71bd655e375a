"""Quota accounting over time: what a tenant is charged follows what its jobs hold, whatever happens around it.

* Creating or updating any tenant (a new quota tree) keeps every other tenant's charges: a tenant at its
  quota stays there, its next job keeps waiting.
* The scheduler charges what the chosen devices make of a request (a memory request is a larger share of a
  smaller device) and re-checks the limit with that figure at Reserve: no tenant ever holds more than its quota
  (a property over random jobs on a cluster of two device sizes; with quota 1 a tenant could otherwise hold
  1.27 GPU-equivalents).
* Jobs a restarted control plane adopts (their pods still hold their devices) are charged to their tenant
  again, exactly as if they had been placed.

(Issue 28 covers a job refused for quota staying refused after the quota is raised.)
"""

from __future__ import annotations

import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import (
    Job,
    JobEngine,
    JobSpec,
    JobState,
    SchedulerPlacer,
    job_spec,
    jobs_profile,
    make_policy,
    task_pods,
)
from gpucluster.model import ClusterState, DeviceSpec, Fabric, NodeSpec
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.framework import Handle, PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.spec import Cluster
from tests.service.inproc import in_process

WHOLE = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
H100_MIB, L40S_MIB = 81559, 46068


def _row(ip: object, name: str) -> dict[str, object]:
    rows = ip.client.get("/api/v1/tenants").json()["tenants"]  # type: ignore[attr-defined]
    found: dict[str, object] = next(r for r in rows if r["name"] == name)
    return found


def _status(ip: object, job_id: str) -> str:
    status: str = ip.client.get(f"/api/v1/jobs/{job_id}").json()["status"]  # type: ignore[attr-defined]
    return status


def test_creating_or_updating_a_tenant_keeps_every_other_tenants_charges(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        tok = ip.tenant("holder", quota_gpus=2)
        holder = ip.as_(tok)
        pair = holder.post("/api/v1/jobs", json={"name": "pair", "replicas": 2, "resources": WHOLE}).json()["id"]
        ip.tick()
        third = holder.post("/api/v1/jobs", json={"name": "third", "resources": WHOLE}).json()["id"]
        ip.tick()
        assert (_status(ip, pair), _status(ip, third)) == ("running", "pending")
        changes = [{"name": "newcomer", "quota_gpus": 5}, {"name": "newcomer", "quota_gpus": 1, "weight": 3},
                   {"name": "holder", "quota_gpus": 2, "weight": 2}, {"name": "other"}]
        for change in changes:
            assert ip.client.post("/api/v1/tenants", json=change).status_code == 201
            ip.tick()
            ip.tick()
            row = _row(ip, "holder")
            assert (row["gpus"], row["running"], row["pending"]) == (2.0, 1, 1), change
            assert (_status(ip, pair), _status(ip, third)) == ("running", "pending"), change
        assert "waiting for quota" in ip.client.get(f"/api/v1/jobs/{third}").json()["message"]
        assert ip.as_(ip.tenant("holder", quota_gpus=2)).delete(f"/api/v1/jobs/{pair}").status_code == 200
        ip.tick()
        assert _status(ip, third) == "running"  # the charge was there, and it was given back


# ------------------------------------------------------------------------------------------ Reserve re-checks
def _two_sizes() -> Cluster:
    """One node of 8 large GPUs and one of 8 smaller ones: a memory request is a smaller share of the large."""
    nodes = tuple(NodeSpec(name, 224000, 2 << 20, devices=tuple(DeviceSpec(f"{name}-{j}", j, "nvidia", model, mib)
                                                                 for j in range(8)))
                  for name, model, mib in (("big", "H100-SXM5-80GB", H100_MIB), ("small", "L40S-48GB", L40S_MIB)))
    return Cluster("two-sizes", nodes, Fabric(), "test")


job_shape = st.tuples(st.sampled_from(["a", "b", "c"]),  # c has no quota
                      st.sampled_from([20000, 30000, 40000, 46068, 60000]),  # MiB of one device
                      st.integers(1, 3),  # replicas
                      st.sampled_from([0, 10, 30]),  # cores %
                      st.sampled_from(["", "", "H100", "L40S"]))  # the GPU model it insists on


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1.0, 1.5, 2.0]), st.lists(st.tuples(job_shape, st.booleans()), min_size=2, max_size=12))
def test_no_tenant_ever_holds_more_than_its_quota(
        quota: float, script: list[tuple[tuple[str, int, int, int, str], bool]]) -> None:
    """Jobs asking for device memory in MiB (some insisting on one GPU model), submitted and cancelled at random
    by two tenants of the same quota and one without; after every step each tenant with a quota holds (in the
    figure ``GET /tenants`` shows) at most its quota."""
    rt = EmbeddedRuntime(_two_sizes(), background=0.0, fault_rate_per_hour=0.0)
    rt.set_quotas({"a": quota, "b": quota})
    live: list[str] = []
    for n, ((tenant, mib, replicas, cores, model), cancel) in enumerate(script):
        resources = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib, "nvidia.com/gpucores": cores}
        job = Job(job_spec(f"j{n}", name=f"j{n}", tenant=tenant, replicas=replicas, resources=resources,
                           duration_s=None, submit_s=rt.now, gpu_type=model, registry=rt.registry))
        try:
            rt.validate(job)
        except ValueError:
            continue  # can never fit this quota: refused at the door
        rt.submit(job)
        live.append(job.id)
        rt.advance(rt.now + 1.0)
        if cancel and live:
            rt.cancel(live.pop(0))
            rt.advance(rt.now + 1.0)
        usage = rt.usage_by_tenant()
        for who in ("a", "b"):
            assert usage.get(who, {}).get("gpus", 0.0) <= quota + 1e-6, (who, usage, quota)
            assert rt.quota.used[who]["gpu"] <= quota + 1e-6


def test_a_memory_request_is_charged_for_the_device_it_gets() -> None:
    """The example behind the property, with quota 1. Another tenant leaves less than 40,000 MiB on every large
    GPU; the tenant runs 10,000 MiB on a small one (0.22). A job of 40,000 MiB looks like 0.49 of a large GPU
    (0.71 in all: within the quota), but the only devices it fits are small ones, where it is 0.87 (1.09 in
    all): it waits, and the tenant holds 0.22."""
    rt = EmbeddedRuntime(_two_sizes(), background=0.0, fault_rate_per_hour=0.0)
    rt.set_quotas({"a": 1.0})

    def submit(jid: str, tenant: str, mib: int, gpu_type: str = "") -> None:
        job = Job(job_spec(jid, name=jid, tenant=tenant, replicas=1, duration_s=None, submit_s=rt.now,
                           resources={"nvidia.com/gpu": 1, "nvidia.com/gpumem": mib}, gpu_type=gpu_type,
                           registry=rt.registry))
        rt.submit(job)
        rt.advance(rt.now + 1.0)

    for n in range(8):
        submit(f"b{n}", "b", 45000, "H100")
    submit("small", "a", 10000, "L40S")
    submit("large", "a", 40000)
    states = {j.id: j.state for j in rt.jobs()}
    assert all(states[f"b{n}"] == JobState.RUNNING for n in range(8)) and states["small"] == JobState.RUNNING
    assert states["large"] == JobState.QUEUED
    assert math.isclose(rt.usage_by_tenant()["a"]["gpus"], 10000 / L40S_MIB)
    assert "waiting for quota" in rt.job("large").message  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------ adopted after restart
def test_jobs_adopted_after_a_restart_are_charged_to_their_tenant() -> None:
    """A restarted control plane finds a job's pods still holding their devices (what the Kubernetes backend
    reads back from the API server) and adopts the job: its tenant is charged exactly as for a placement, so the
    tenant's next job waits for quota until the adopted one ends."""
    cluster = _two_sizes()
    spec = JobSpec("kept", 0.0, 2, math.inf, tenant="a", gpus_per_task=1)
    # before the restart: the job's pods were placed and bound
    before = ClusterState(list(cluster.nodes))
    pods = task_pods(spec, 1)
    first = Scheduler(before, jobs_profile(False))
    assert first.schedule_group(pods).ok
    # after the restart: a fresh engine over the same cluster, the pods found bound
    state = ClusterState(list(cluster.nodes))
    for alloc in before.allocations.values():
        state.assign(alloc)
    tree = QuotaTree([QueueSpec("a", limit={"gpu": 2.0})])
    sched = Scheduler(state, jobs_profile(False, extra=[PluginConfig(name="Quota")]),
                      handle=Handle(services={"quota": tree}))
    engine = JobEngine(SchedulerPlacer(sched), make_policy("sjf"), quota=tree)
    engine.adopt(Job(spec), pods, started_s=0.0)
    engine.submit(JobSpec("next", 0.0, 1, 100.0, tenant="a"))
    engine.run_until(10.0)
    assert engine.job("kept").state == JobState.RUNNING
    assert engine.ledger.usage()["a"]["gpus"] == 2.0 and tree.used["a"]["gpu"] == 2.0
    assert engine.job("next").state == JobState.QUEUED  # the quota is taken by the adopted job
    engine.cancel("kept")
    engine.run_until(20.0)
    assert engine.job("next").state == JobState.RUNNING
    assert tree.used["a"]["gpu"] == 1.0 and set(state.allocations) == {p.key for p in task_pods(
        engine.job("next").spec, 1)}
