"""Embedded mode end to end, and reading alerts back from Prometheus' API."""

from __future__ import annotations

import httpx
import pytest

from gpucluster.monitoring import (
    Action,
    EmbeddedMonitor,
    Remediator,
    SimSource,
    SimTarget,
    build_registry,
    lost_pods,
)
from gpucluster.monitoring.prometheus_api import PrometheusError, fetch_alerts, parse_alerts
from gpucluster.scheduler import Scheduler, profile_for
from tests.helpers import gpu_pod
from tests.monitoring.conftest import FakeClock, place, small_state


def test_gpu_falling_off_the_bus_fires_missing_and_drains() -> None:
    state = small_state(nodes=3, gpus=4)
    sched = Scheduler(state, profile_for("binpack"))
    place(sched, [gpu_pod(f"p{k}", cores_pct=100) for k in range(3)])
    before = sorted(state.allocations)
    node = state.allocations[before[0]].node
    clock = FakeClock()
    src = SimSource(state, clock=clock)
    target = SimTarget(sched)
    mon = EmbeddedMonitor({"agent": build_registry(src, state)},
                          remediator=Remediator(target, node_count=lambda: 3, clock=clock))
    for t in (0.0, 15.0):
        clock.t = t
        assert mon.step(t).firing == []
    src.detach(node, 2)  # no XID: the series simply stop
    clock.t = 30.0
    res = mon.step(30.0)
    missing = [a for a in res.firing if a.name == "GpuMissing"]
    assert len(missing) == 1 and missing[0].labels["gpu"] == "2" and missing[0].node == node
    assert [(r.action, r.outcome) for r in res.actions] == [("drain", "done")]
    assert not state.schedulable[state.node_index[node]] and not state.dev_healthy[state.node_index[node], 2]
    assert lost_pods(before, target) == set() and sorted(state.allocations) == before
    # ten minutes later the series has left the window: the alert resolves
    clock.t = 30.0 + 601
    assert [a for a in mon.step(clock.t).firing if a.name == "GpuMissing"] == []


def test_hot_gpu_is_pending_then_cordons_after_two_minutes() -> None:
    state = small_state(nodes=2, gpus=2)
    sched = Scheduler(state, profile_for("binpack"))
    clock = FakeClock()
    src = SimSource(state, clock=clock)
    mon = EmbeddedMonitor({"agent": build_registry(src, state)},
                          remediator=Remediator(SimTarget(sched), node_count=lambda: 2, clock=clock))
    src.heat("n1", 0, 70)
    states = []
    for t in (0.0, 60.0, 120.0):
        clock.t = t
        res = mon.step(t)
        states.append([(a.name, a.state) for a in res.alerts])
    assert states == [[("GpuTemperatureHigh", "pending")]] * 2 + [[("GpuTemperatureHigh", "firing")]]
    assert not state.schedulable[1] and state.schedulable[0]


BODY = {
    "status": "success",
    "data": {"alerts": [
        {"labels": {"alertname": "GpuXidCritical", "Hostname": "n1", "gpu": "3", "action": "drain",
                    "severity": "critical", "instance": "127.0.0.1:9400", "job": "agent"},
         "annotations": {"summary": "GPU 3 on n1"}, "state": "firing",
         "activeAt": "2026-12-02T15:00:00.123Z", "value": "7.9e+01"},
        {"labels": {"alertname": "GpuTemperatureHigh", "Hostname": "n2", "gpu": "0", "action": "cordon"},
         "annotations": {}, "state": "pending", "activeAt": "2026-12-02T15:00:00Z", "value": "91"},
    ]},
}


def test_parse_prometheus_alerts() -> None:
    alerts = parse_alerts(BODY)
    assert [(a.name, a.state, a.node, a.action, a.value) for a in alerts] == [
        ("GpuXidCritical", "firing", "n1", Action.DRAIN, 79.0),
        ("GpuTemperatureHigh", "pending", "n2", Action.CORDON, 91.0),
    ]
    assert alerts[0].active_since == pytest.approx(1796223600.123)
    with pytest.raises(PrometheusError, match="bad query"):
        parse_alerts({"status": "error", "error": "bad query"})


def test_fetch_alerts_over_http() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/v1/alerts"
        return httpx.Response(200, json=BODY)

    client = httpx.Client(transport=httpx.MockTransport(handler))
    assert len(fetch_alerts("http://prom:9090/", client)) == 2
    broken = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503)))
    with pytest.raises(PrometheusError, match="prom:9090"):
        fetch_alerts("http://prom:9090", broken)


def test_only_the_metrics_the_rules_read_are_ingested_and_alerts_are_the_same() -> None:
    from prometheus_client import CollectorRegistry

    from gpucluster.monitoring import AllocationCollector, DeviceCollector, default_rules
    from gpucluster.monitoring import metrics as m
    from gpucluster.monitoring.rules import rule_metrics

    needed = rule_metrics(default_rules())
    assert {m.DCGM_XID_ERRORS, m.DCGM_GPU_TEMP, m.DEVICE_TASKS, m.NODE_FRAGMENTATION,
            m.QUEUE_OLDEST_PENDING} <= needed and m.DCGM_POWER_USAGE not in needed
    state = small_state(nodes=2, gpus=2)
    sched = Scheduler(state, profile_for("binpack"))
    place(sched, [gpu_pod("p0", cores_pct=100)])
    clock = FakeClock()
    src = SimSource(state, clock=clock)
    full = EmbeddedMonitor({"agent": build_registry(src, state)})
    lean_reg = CollectorRegistry(auto_describe=False)
    lean_reg.register(DeviceCollector(src, fields=needed))
    lean_reg.register(AllocationCollector(state, pods=False))
    lean = EmbeddedMonitor({"agent": lean_reg}, metrics=needed)
    src.inject_xid("n0", 1, 79)
    src.heat("n1", 0, 70)
    for t in (0.0, 60.0, 120.0):
        clock.t = t
        a = [(x.name, x.labels, x.state) for x in full.step(t).alerts]
        b = [(x.name, x.labels, x.state) for x in lean.step(t).alerts]
        assert a == b and a
    assert set(lean.db.series) <= needed and len(lean.db.series) < len(full.db.series)
    families = {f.name for f in lean_reg.collect()}
    assert m.DCGM_POWER_USAGE not in families and m.POD_ALLOCATED_MEMORY not in families
