"""EmbeddedRuntime without a server: gangs, the clock, faults and remediation, validation, views."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import pytest

from gpucluster.jobs import job_spec
from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.service import EmbeddedRuntime, Job, Runtime
from gpucluster.spec import Cluster, load_cluster


def _cluster(nodes: int = 2, gpus: int = 4) -> Cluster:
    specs = tuple(
        NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=262144, rack=f"r{i // 2}", leaf="leaf-0", spine="s0",
                 devices=tuple(DeviceSpec(uuid=f"n{i}-g{j}", index=j, vendor="nvidia", model="H100",
                                          memory_mib=80000, nvlink_domain=0) for j in range(gpus)))
        for i in range(nodes))
    return Cluster(name="tiny", nodes=specs, fabric=load_cluster(None).fabric, source="test")


def _rt(**kw: Any) -> EmbeddedRuntime:
    return EmbeddedRuntime(_cluster(**kw), background=0.0, fault_rate_per_hour=0.0)


def _job(jid: str, gpus: int = 1, replicas: int = 1, duration: float | None = 10.0, **res: Any) -> Job:
    return Job(job_spec(jid, name=jid, tenant="t", replicas=replicas, duration_s=duration, submit_s=0.0,
                        submitted_at=time.time(), resources={"nvidia.com/gpu": gpus, **res}))


def test_embedded_runtime_implements_the_protocol() -> None:
    assert isinstance(_rt(), Runtime)


def test_gang_is_all_or_nothing_and_waits_for_room() -> None:
    rt = _rt(nodes=2, gpus=4)
    big = rt.submit(_job("big", gpus=4, replicas=2, duration=100))
    rt.advance(1)
    assert big.status == "running"
    assert sorted(p["node"] for p in big.placements) == ["n0", "n1"]
    gang = rt.submit(_job("gang", gpus=2, replicas=2, duration=10))
    rt.advance(2)
    assert gang.status == "pending"
    assert gang.message == "waiting for GPUs: needs 4 GPU(s) as 2 task(s), more than are free now"
    assert rt.state.totals()["pods"] == 2  # nothing of the gang is held while it waits
    events = rt.advance(101)
    assert big.status == "succeeded" and big.finished_t == pytest.approx(100.0)  # it arrived and started at 0
    assert gang.status == "running" and gang.started_t == 100
    assert [e.kind for e in events] == ["succeeded", "running"]
    rt.advance(111)
    assert gang.status == "succeeded" and gang.finished_t == 110


def test_fractional_jobs_share_a_device() -> None:
    rt = _rt(nodes=1, gpus=1)
    a = rt.submit(_job("a", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    b = rt.submit(_job("b", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    c = rt.submit(_job("c", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    rt.advance(1)
    assert (a.status, b.status, c.status) == ("running", "running", "pending")
    assert a.gpus == 0.5
    node = rt.node("n0")
    assert node is not None
    assert node["devices"][0]["core_used"] == 1000 and len(node["devices"][0]["pods"]) == 2


def test_cancel_frees_the_devices() -> None:
    rt = _rt(nodes=1, gpus=4)
    j = rt.submit(_job("j", gpus=4, duration=None))
    rt.advance(1)
    assert rt.cancel("j") is j and j.status == "cancelled"
    assert rt.state.totals()["core_used_milli"] == 0
    assert rt.cancel("nope") is None


def test_xid_fault_alerts_drains_requeues_and_repairs() -> None:
    """The fault goes in through monitoring's simulated collector, its GpuXidCritical rule fires, its
    remediator drains the node through the runtime's target; the GPU is repaired 600 s later."""
    rt = _rt(nodes=2, gpus=4)
    j = rt.submit(_job("j", gpus=4, duration=None, **{"nvidia.com/gpucores": 100}))
    rt.advance(1)
    node = j.placements[0]["node"]
    events: list[Any] = []
    rt.inject_fault(node, 2, events)
    assert [e.kind for e in events] == ["evicted"] and j.status == "pending"
    firing = [a for a in rt.alerts() if a["state"] == "firing"]
    assert [(a["name"], a["severity"], a["target"]) for a in firing] == [
        ("GpuXidCritical", "critical", f"{node}/gpu2"), ("GpuXidError", "warning", f"{node}/gpu2")]
    assert rt.overview()["alerts_firing"] == 2
    [drain] = rt.remediations()
    assert (drain["action"], drain["target"], drain["outcome"], drain["alert"]) == (
        "drain", f"{node}/gpu2", "done", "GpuXidCritical")
    assert "cordoned the node and evicted 1 pod(s)" in drain["detail"]
    i = rt.state.node_index[node]
    assert not rt.state.schedulable[i] and not rt.state.dev_healthy[i, 2]
    assert [r.action for r in rt.take_audit_records()] == ["drain"] and rt.take_audit_records() == []
    rt.advance(2)
    assert j.status == "running" and j.placements[0]["node"] != node
    rt.advance(30)  # evaluated again: still firing, not drained twice (one action per alert episode)
    assert [r["action"] for r in rt.remediations()] == ["drain"]
    rt.advance(1 + 600)
    assert rt.state.schedulable[i] and rt.state.dev_healthy[i, 2]
    assert rt.remediations()[0]["action"] == "reset-and-uncordon"
    assert {(a["name"], a["state"]) for a in rt.alerts()} == {("GpuXidCritical", "resolved"),
                                                              ("GpuXidError", "resolved")}


def test_non_critical_xid_only_warns() -> None:
    rt = _rt(nodes=2, gpus=4)
    rt.advance(1)
    rt.inject_fault("n0", 1, xid=13)
    assert [a["name"] for a in rt.alerts() if a["state"] == "firing"] == ["GpuXidError"]
    assert rt.remediations() == [] and rt.state.schedulable[0]


def test_overheating_gpu_cordons_its_node_after_two_minutes() -> None:
    rt = _rt(nodes=2, gpus=4)
    j = rt.submit(_job("j", gpus=1, duration=None))
    rt.advance(1)
    node = j.placements[0]["node"]
    rt.monitor.source(node).heat(node, 0, 60.0)
    rt.advance(31)
    assert [(a["name"], a["state"]) for a in rt.alerts()] == [("GpuTemperatureHigh", "pending")]
    assert rt.remediations() == []
    for t in range(61, 200, 30):
        rt.advance(t)
    assert [(a["name"], a["state"]) for a in rt.alerts()] == [("GpuTemperatureHigh", "firing")]
    assert [(r["action"], r["target"]) for r in rt.remediations()] == [("cordon", f"{node}/gpu0")]
    assert not rt.state.schedulable[rt.state.node_index[node]]
    assert j.status == "running"  # a cordon keeps what runs


def test_fragmented_node_is_defragmented() -> None:
    rt = _rt(nodes=2, gpus=2)
    half = {"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 20000}
    a = rt.submit(_job("a", duration=None, **half))
    b = rt.submit(_job("b", duration=None, **half))
    rt.advance(1)
    c = rt.submit(_job("c", duration=None, **half))
    rt.advance(2)
    rt.cancel("a")  # two devices half used: every free core of the node sits on a shared GPU
    node = b.placements[0]["node"]
    assert c.placements[0]["node"] == node
    events: list[Any] = []
    for t in range(30, 1000, 30):
        events += rt.advance(t)
        if rt.remediations():
            break
    [rec] = rt.remediations()
    assert (rec["action"], rec["target"], rec["alert"], rec["outcome"]) == (
        "defragment", node, "NodeFragmentationHigh", "done")
    assert "fragmentation 1.00 -> 0.00" in rec["detail"]
    assert {b.placements[0]["node"], c.placements[0]["node"]} == {"n0", "n1"} - {node} or \
        b.placements[0]["node"] == c.placements[0]["node"] != node
    assert [e.kind for e in events if e.kind == "migrated"] and a.status == "cancelled"
    assert b.status == c.status == "running"


def test_idle_allocation_is_released_when_the_policy_allows() -> None:
    from gpucluster.monitoring import PROFILES, Action, RemediationPolicy

    rt = EmbeddedRuntime(_cluster(nodes=1, gpus=2), background=0.0, fault_rate_per_hour=0.0,
                         remediation=RemediationPolicy(allow=frozenset({Action.DRAIN, Action.RELEASE})))
    j = rt.submit(_job("idle", duration=None))
    rt.advance(1)
    rt.monitor.source("n0").activity = {j.placements[0]["pod"]: PROFILES["idle"]}
    events = rt.advance(31) + rt.advance(31 + 1800)
    assert j.status == "cancelled" and "idle" in j.message
    assert [e.kind for e in events] == ["cancelled"]
    assert [(r["action"], r["outcome"]) for r in rt.remediations()] == [("release", "done")]


def test_pending_too_long_warns() -> None:
    rt = _rt(nodes=1, gpus=4)
    rt.submit(_job("hog", gpus=4, duration=None))
    rt.submit(_job("waits", gpus=4, duration=None))  # fits the node, never while the hog runs
    for t in range(1, 800, 30):
        rt.advance(t)
    assert [(a["name"], a["target"], a["state"]) for a in rt.alerts() if a["state"] == "firing"] == [
        ("PodsPendingTooLong", "cluster", "firing")]
    assert rt.queue_stats().pending == 1


def test_monitor_shards_cover_the_reference_cluster() -> None:
    rt = EmbeddedRuntime(load_cluster(None), background=0.0, fault_rate_per_hour=0.0)
    shards = rt.monitor.shards
    assert sorted(n for sh in shards for n in sh.nodes) == sorted(n.name for n in rt.state.nodes)
    assert len({sh.due for sh in shards}) == len(shards)  # staggered over the interval
    rt.monitor.budget_s = 0.0
    rt.advance(30)  # one shard per advance when over budget; the others stay due
    assert sum(sh.due <= 30 for sh in shards) == len(shards) - 1


def test_quota_holds_a_tenant_back() -> None:
    rt = _rt(nodes=1, gpus=4)
    rt.set_quotas({"t": 2})
    a = rt.submit(_job("a", gpus=2))
    b = rt.submit(_job("b", gpus=1))
    rt.advance(1)
    assert b.status == "running" and a.status == "pending"  # the default queue policy: small jobs first
    assert a.message == "waiting for quota: tenant t holds 1 of 2 GPUs, the job needs 2"
    assert rt.usage_by_tenant()["t"] == {"gpus": 1.0, "pending_gpus": 2.0, "running": 1.0, "pending": 1.0}
    rt.set_quotas({"t": 3})
    rt.advance(2)
    assert a.status == "running"


@pytest.mark.parametrize(("resources", "message"), [
    ({"nvidia.com/gpu": -1}, "must not be negative"),
    ({"hygon.com/dcucores": 30}, "needs hygon.com/dcunum"),
    ({}, "asks for nothing"),
])
def test_a_bad_request_names_the_field(resources: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        job_spec("x", name="x", tenant="t", replicas=1, resources=resources, duration_s=None, submit_s=0.0)
    assert str(info.value).startswith("resources: ")


def test_a_job_that_can_never_fit_is_refused() -> None:
    rt = _rt(nodes=2, gpus=4)
    with pytest.raises(ValueError, match=r"resources: can never fit the cluster: .*no node has more than 4"):
        rt.validate(_job("huge", gpus=8))
    with pytest.raises(ValueError, match=r"gpu_type: can never fit the cluster: .*L40S model"):
        rt.validate(Job(job_spec("l40s", name="l40s", tenant="t", replicas=1, duration_s=None, submit_s=0.0,
                                 resources={"nvidia.com/gpu": 1}, gpu_type="L40S")))
    rt.validate(_job("fits", gpus=4, replicas=2))
    with pytest.raises(ValueError, match=r"replicas: can never fit the cluster: .*holds at most 2"):
        rt.validate(_job("wide", gpus=4, replicas=3))
    with pytest.raises(ValueError, match="node_selector: can never fit the cluster: no node carries the labels"):
        rt.validate(Job(job_spec("sel", name="sel", tenant="t", replicas=1, duration_s=None, submit_s=0.0,
                                 resources={"nvidia.com/gpu": 1}, node_selector={"zone": "nowhere"})))


def test_background_workload_fills_the_default_cluster_to_its_target() -> None:
    rt = EmbeddedRuntime(load_cluster(None), background=0.6, fault_rate_per_hour=0.0, seed=1)
    rt.advance(600)
    o = rt.overview()
    assert 0.4 < o["gpu_alloc"] < 0.8
    assert o["jobs"]["running"] > 100
    assert o["history"][-1]["t"] == pytest.approx(600)
    topo = rt.topology()
    assert sum(len(r["nodes"]) for sp in topo["spines"] for lf in sp["leaves"] for r in lf["racks"]) == 240


@pytest.mark.parametrize("policy", ["fifo", "sjf", "drf", "default"])
def test_queue_order_is_the_order_the_queue_policy_tries(policy: str) -> None:
    """``queue_order()`` (service.ops.QueueOrder) lists pending jobs as the next pass will try them: when the
    blocker ends, they start in that order (one at a time: each needs the whole cluster)."""
    rt = EmbeddedRuntime(_cluster(nodes=1, gpus=4), background=0.0, fault_rate_per_hour=0.0, queue_policy=policy)
    rt.submit(_job("blocker", gpus=4, duration=100.0))
    rt.advance(1.0)
    sizes = {"a": 10.0, "b": 30.0, "c": 20.0}
    for jid, duration in sizes.items():
        job = _job(jid, gpus=4, duration=duration)
        job.spec = dataclasses.replace(job.spec, tenant=f"t-{jid}")
        rt.submit(job)
        rt.advance(rt.now + 1.0)
    late = _job("late", gpus=4, duration=5.0)  # submitted, not yet arrived: keyed as it will be
    rt.submit(late)
    order = rt.queue_order()
    assert sorted(order) == ["a", "b", "c", "late"]
    if policy == "fifo":
        assert order == ["a", "b", "c", "late"]
    if policy == "sjf":
        assert order == ["late", "a", "c", "b"]
    started: list[str] = []
    t = rt.now
    while len(started) < 4:
        t += 1.0
        started += [e.job_id for e in rt.advance(t) if e.kind == "running"]
    assert started == order
