"""EmbeddedRuntime without a server: gangs, the clock, faults and remediation, validation, views."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.service import EmbeddedRuntime, Job, JobStatus, Runtime
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
    return Job(id=jid, name=jid, tenant="t", replicas=replicas, duration_s=duration, submitted_at=time.time(),
               resources={"nvidia.com/gpu": gpus, **res})


def test_embedded_runtime_implements_the_protocol() -> None:
    assert isinstance(_rt(), Runtime)


def test_gang_is_all_or_nothing_and_waits_for_room() -> None:
    rt = _rt(nodes=2, gpus=4)
    big = rt.submit(_job("big", gpus=4, replicas=2, duration=100))
    rt.advance(1)
    assert big.status == JobStatus.RUNNING
    assert sorted(p["node"] for p in big.placements) == ["n0", "n1"]
    gang = rt.submit(_job("gang", gpus=2, replicas=2, duration=10))
    rt.advance(2)
    assert gang.status == JobStatus.PENDING
    assert "unschedulable: 0/2 nodes are available" in gang.message
    assert rt.state.totals()["pods"] == 2  # nothing of the gang is held while it waits
    events = rt.advance(101)
    assert big.status == JobStatus.SUCCEEDED and big.finished_t == pytest.approx(101.0)
    assert gang.status == JobStatus.RUNNING and gang.started_t == 101
    assert [e.kind for e in events] == ["succeeded", "running"]
    rt.advance(111)
    assert gang.status == JobStatus.SUCCEEDED


def test_fractional_jobs_share_a_device() -> None:
    rt = _rt(nodes=1, gpus=1)
    a = rt.submit(_job("a", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    b = rt.submit(_job("b", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    c = rt.submit(_job("c", **{"nvidia.com/gpucores": 50, "nvidia.com/gpumem": 30000}))
    rt.advance(1)
    assert (a.status, b.status, c.status) == (JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.PENDING)
    assert a.gpus == 0.5
    node = rt.node("n0")
    assert node is not None
    assert node["devices"][0]["core_used"] == 1000 and len(node["devices"][0]["pods"]) == 2


def test_cancel_frees_the_devices() -> None:
    rt = _rt(nodes=1, gpus=4)
    j = rt.submit(_job("j", gpus=4, duration=None))
    rt.advance(1)
    assert rt.cancel("j") is j and j.status == JobStatus.CANCELLED
    assert rt.state.totals()["core_used_milli"] == 0
    assert rt.cancel("nope") is None


def test_fault_cordons_drains_requeues_and_repairs() -> None:
    rt = _rt(nodes=2, gpus=4)
    j = rt.submit(_job("j", gpus=4, duration=None))
    rt.advance(1)
    node = j.placements[0]["node"]
    events: list[Any] = []
    rt.inject_fault(node, 2, events)
    assert [e.kind for e in events] == ["evicted"] and j.status == JobStatus.PENDING
    assert [a["name"] for a in rt.alerts() if a["state"] == "firing"] == ["GPUFallenOffBus"]
    assert [r["action"] for r in rt.remediations()] == ["drain", "cordon"]
    rt.advance(2)
    assert j.status == JobStatus.RUNNING and j.placements[0]["node"] != node
    rt.advance(1 + 600)
    assert rt.state.schedulable[rt.state.node_index[node]]
    assert rt.remediations()[0]["action"] == "reset-and-uncordon"
    assert [a["state"] for a in rt.alerts()] == ["resolved"]


def test_quota_holds_a_tenant_back() -> None:
    rt = _rt(nodes=1, gpus=4)
    rt.set_quotas({"t": 2})
    a = rt.submit(_job("a", gpus=2))
    b = rt.submit(_job("b", gpus=1))
    rt.advance(1)
    assert a.status == JobStatus.RUNNING and b.status == JobStatus.PENDING
    assert b.message.startswith("waiting for quota")
    assert rt.usage_by_tenant()["t"] == {"gpus": 2.0, "pending_gpus": 1.0, "running": 1.0, "pending": 1.0}


@pytest.mark.parametrize(("resources", "message"), [
    ({"nvidia.com/gpu": -1}, "must not be negative"),
    ({"nvidia.com/gpucores": 30}, "needs nvidia.com/gpu"),
    ({}, "asks for nothing"),
])
def test_validate_names_the_field(resources: dict[str, Any], message: str) -> None:
    rt = _rt()
    job = Job(id="x", name="x", tenant="t", replicas=1, resources=resources, duration_s=None, submitted_at=0)
    with pytest.raises(ValueError, match=message) as info:
        rt.validate(job)
    assert str(info.value).startswith("resources: ")


def test_background_workload_fills_the_default_cluster_to_its_target() -> None:
    rt = EmbeddedRuntime(load_cluster(None), background=0.6, fault_rate_per_hour=0.0, seed=1)
    rt.advance(600)
    o = rt.overview()
    assert 0.4 < o["gpu_alloc"] < 0.8
    assert o["jobs"]["running"] > 100
    assert o["history"][-1]["t"] == pytest.approx(600)
    topo = rt.topology()
    assert sum(len(r["nodes"]) for sp in topo["spines"] for lf in sp["leaves"] for r in lf["racks"]) == 240
