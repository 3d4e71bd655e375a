"""A real Prometheus (Debian's package) scrapes the agent and the control plane; PromQL gets the expected series
and values; the generated rules fire in Prometheus on an injected XID 79, and remediation driven by
Prometheus' own alerts drains the node with no pod lost."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from polling import wait_until
from prometheus_client.parser import text_string_to_metric_families

from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod
from gpucluster.monitoring import (
    ControlPlaneMetrics,
    MetricsServer,
    QueueStats,
    Remediator,
    SimSource,
    SimTarget,
    build_registry,
    control_plane_registry,
    lost_pods,
)
from gpucluster.monitoring.prometheus_api import fetch_alerts
from gpucluster.scheduler import Outcome, Scheduler, profile_for

Prometheus = Any  # tests/integration/conftest.py's Prometheus (query(promql) -> result list, base_url)
REPO = Path(__file__).resolve().parents[2]
RULE_FILE = REPO / "src/gpucluster/monitoring/rules/gpucluster-alerts.yml"



def gpu_node(name: str) -> NodeSpec:
    return NodeSpec(name, 128000, 1048576, tuple(
        DeviceSpec(f"GPU-{name}-{j}", j, "nvidia", "H100-SXM5-80GB", 81920, nvlink_domain=0) for j in range(8)))


def gpu_pod(name: str, count: int = 1, memory_mib: int = 0, cores_pct: int = 0, tenant: str = "") -> Pod:
    req = DeviceRequest("nvidia", count, memory_mib=memory_mib, core_milli=cores_pct * 10)
    return Pod(name, containers=(ContainerRequest("main", 1000, 1024, (req,)),), tenant=tenant)


@dataclass
class Rig:
    state: ClusterState
    sched: Scheduler
    source: SimSource
    control: ControlPlaneMetrics
    agent_url: str
    control_url: str
    servers: list[MetricsServer]
    placed: list[str]
    pending: int
    lock: threading.RLock


@pytest.fixture
def rig() -> Iterator[Rig]:
    state = ClusterState([gpu_node(f"node-{i}") for i in range(3)])
    sched = Scheduler(state, profile_for("binpack"))
    lock = threading.RLock()
    waiting: list[str] = []
    creg, control = control_plane_registry(state, lambda: QueueStats(len(waiting), 5.0 if waiting else 0.0), lock)
    pods = [gpu_pod(f"job-{k}", count=2, memory_mib=30000, cores_pct=100, tenant="team-a") for k in range(5)]
    pods += [gpu_pod(f"svc-{k}", memory_mib=8000, cores_pct=25, tenant="team-b") for k in range(4)]
    pods += [gpu_pod("huge", count=9, cores_pct=100)]
    for p in pods:
        d = control.timed(lambda p=p: sched.schedule_and_bind(p), lambda d: str(d.outcome))
        if d.outcome != Outcome.SCHEDULED:
            waiting.append(p.key)
    # the agent of two nodes (16 GPUs), as on a node with 16 GPUs or two 8-GPU nodes behind one exporter
    source = SimSource(state, ["node-0", "node-1"])
    agent = MetricsServer(build_registry(source, state, ["node-0", "node-1"], lock), "127.0.0.1", 0)
    cp = MetricsServer(creg, "127.0.0.1", 0)
    r = Rig(state, sched, source, control, agent.url, cp.url, [agent, cp], sorted(state.allocations), len(waiting),
            lock)
    try:
        yield r
    finally:
        for s in r.servers:
            s.stop()


def _target(url: str) -> str:
    return url.removeprefix("http://").removesuffix("/metrics")


def _start(prometheus_factory: Callable[..., Prometheus], rig: Rig) -> Prometheus:
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULE_FILE)],
        "scrape_configs": [
            {"job_name": "gpucluster-agent", "static_configs": [{"targets": [_target(rig.agent_url)]}]},
            {"job_name": "gpucluster-control-plane", "static_configs": [{"targets": [_target(rig.control_url)]}]},
        ],
    }
    prom = prometheus_factory(config)
    wait_until(lambda: len(prom.query("up == 1")) == 2, 30, "both targets up")
    return prom


def _buckets(url: str, name: str) -> list[tuple[float, float]]:
    """``(upper bound, cumulative count)`` of histogram ``name`` as the endpoint at ``url`` exports it."""
    text = httpx.get(url, timeout=10).text
    return sorted((float(s.labels["le"]), s.value) for fam in text_string_to_metric_families(text)
                  for s in fam.samples if s.name == f"{name}_bucket")


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float:
    """Prometheus' ``histogram_quantile``: linear interpolation inside the bucket the rank falls in (the bucket
    below +Inf's bound when it falls in +Inf)."""
    total = buckets[-1][1]
    rank = q * total
    lower, below = 0.0, 0.0
    for k, (le, count) in enumerate(buckets):
        if count >= rank:
            if le == float("inf"):
                return buckets[k - 1][0]
            return lower + (le - lower) * (rank - below) / (count - below)
        lower, below = le, count
    raise AssertionError("unreachable: the +Inf bucket holds every observation")


def _value(result: list[dict[str, Any]]) -> float:
    assert len(result) == 1, result
    return float(result[0]["value"][1])


def test_prometheus_scrapes_expected_series_and_values(prometheus_factory: Callable[..., Prometheus], rig: Rig) -> None:
    prom = _start(prometheus_factory, rig)
    st = rig.state
    # 16 GPUs with dcgm-exporter's names and labels
    wait_until(lambda: _value(prom.query("count(DCGM_FI_DEV_GPU_UTIL)")) == 16, 20, "16 GPU series")
    series = prom.query('DCGM_FI_DEV_FB_USED{Hostname="node-0",gpu="0"}')
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "instance", "job"} <= set(
        series[0]["metric"])
    assert series[0]["metric"]["UUID"] == st.dev_uuid[0][0]
    busy = prom.query('count(DCGM_FI_DEV_GPU_UTIL{job="gpucluster-agent"} > 90)')
    whole_gpus_on_agent = sum(1 for a in st.allocations.values() if a.node in ("node-0", "node-1")
                              for g in a.grants if g.core_milli == 1000)
    assert _value(busy) == whole_gpus_on_agent
    # allocation metrics agree with the state, per device, pod and tenant
    used = int(st.dev_mem_used[0].sum() + st.dev_mem_used[1].sum())
    assert _value(prom.query('sum(gpucluster_device_allocated_memory_bytes{job="gpucluster-agent"})')) == \
        used * 1024 * 1024
    tenant = prom.query('gpucluster_tenant_quota_used_memory_bytes{job="gpucluster-control-plane",tenant="team-a"}')
    assert _value(tenant) == 5 * 2 * 30000 * 1024 * 1024
    assert _value(prom.query('count(gpucluster_pod_allocated_cores_ratio{job="gpucluster-control-plane"})')) == \
        sum(a.device_count for a in st.allocations.values())
    assert _value(prom.query(
        'sum(gpucluster_device_tasks{job="gpucluster-control-plane"})')) == int(st.dev_tasks.sum())
    frag = prom.query('gpucluster_node_fragmentation_ratio{job="gpucluster-control-plane"}')
    assert len(frag) == 3 and all(0 <= float(f["value"][1]) <= 1 for f in frag)
    # control plane: queue, decisions by result, latency histogram
    assert _value(prom.query("gpucluster_scheduler_pending_pods")) == rig.pending == 1
    assert _value(prom.query('gpucluster_scheduling_decisions_total{result="scheduled"}')) == 9
    assert _value(prom.query('gpucluster_scheduling_decisions_total{result="unschedulable"}')) == 1
    assert _value(prom.query("gpucluster_scheduling_latency_seconds_count")) == 10
    # Prometheus reads our latency histogram as exported: its p99 is the one the exported buckets give
    p99 = _value(prom.query("histogram_quantile(0.99, gpucluster_scheduling_latency_seconds_bucket)"))
    assert p99 == pytest.approx(_quantile(0.99, _buckets(rig.control_url, "gpucluster_scheduling_latency_seconds")))
    # the rule file loaded: rules are healthy and nothing fires on a healthy cluster
    assert prom.query('ALERTS{alertname="GpuXidCritical"}') == []


def test_xid79_fires_in_prometheus_and_remediation_drains(prometheus_factory: Callable[..., Prometheus],
                                                         rig: Rig) -> None:
    prom = _start(prometheus_factory, rig)
    st = rig.state
    bad = max(("node-0", "node-1"), key=lambda n: len(st.pods_on_node[st.node_index[n]]))
    victims = {a.pod_key for a in st.allocations_on(bad)}
    assert victims
    rig.source.inject_xid(bad, 3, 79)
    firing = wait_until(
        lambda: prom.query('ALERTS{alertname="GpuXidCritical",alertstate="firing"}'), 30, "GpuXidCritical firing")
    assert firing[0]["metric"]["Hostname"] == bad and firing[0]["metric"]["gpu"] == "3"
    assert firing[0]["metric"]["action"] == "drain"

    target = SimTarget(rig.sched)
    rem = Remediator(target, node_count=lambda: st.n_nodes)
    alerts = [a for a in fetch_alerts(prom.base_url) if a.state == "firing"]
    with rig.lock:  # the scrape threads read the state under the same lock
        records = rem.handle(alerts)
    drain = [r for r in records if r.action == "drain"]
    assert len(drain) == 1 and drain[0].outcome == "done", records
    assert set(drain[0].detail["evicted"]) == victims  # type: ignore[arg-type]
    assert lost_pods(rig.placed, target) == set()
    assert all(st.allocations[k].node != bad for k in victims)

    # Prometheus sees the node cordoned and emptied
    wait_until(lambda: _value(prom.query(f'gpucluster_node_schedulable{{job="gpucluster-control-plane",node="{bad}"}}'))
               == 0, 20, "node cordoned in Prometheus")
    wait_until(lambda: _value(prom.query(f'sum(gpucluster_device_tasks{{job="gpucluster-agent",node="{bad}"}})'))
               == 0, 20, "node emptied in Prometheus")
    assert _value(prom.query(f'gpucluster_device_healthy{{job="gpucluster-agent",node="{bad}",gpu="3"}}')) == 0
