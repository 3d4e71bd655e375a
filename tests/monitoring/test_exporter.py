"""The exporter: dcgm-exporter names and labels, allocation metrics that add up to the cluster state, the
control-plane families, and /metrics over HTTP."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpucluster.model import ClusterState
from gpucluster.monitoring import (
    ControlPlaneMetrics,
    MetricsServer,
    QueueStats,
    SimSource,
    build_registry,
    node_fragmentation,
)
from gpucluster.monitoring import metrics as m
from gpucluster.monitoring.exposition import CONTENT_TYPE
from gpucluster.scheduler import Scheduler, profile_for
from tests.helpers import gpu_pod
from tests.monitoring.conftest import activity_pod, place, small_state

Sim = Callable[..., tuple[ClusterState, Scheduler, SimSource]]
Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(reg: CollectorRegistry) -> Samples:
    """Parse the text exposition the way Prometheus would read it."""
    out: Samples = defaultdict(list)
    for fam in text_string_to_metric_families(generate_latest(reg).decode()):
        for s in fam.samples:
            out[s.name].append((s.labels, s.value))
    return out


def test_device_metrics_use_dcgm_names_and_labels(make_sim: Sim) -> None:
    state, sched, src = make_sim(nodes=2, gpus=8)
    place(sched, [activity_pod("job", "compute", count=2)])
    got = scrape(build_registry(src, state))
    for name in (m.DCGM_GPU_UTIL, m.DCGM_FB_USED, m.DCGM_FB_FREE, m.DCGM_GPU_TEMP, m.DCGM_POWER_USAGE,
                 m.DCGM_XID_ERRORS, m.DCGM_SM_CLOCK, m.DCGM_TOTAL_ENERGY, m.DCGM_PIPE_TENSOR_ACTIVE):
        assert len(got[name]) == 16, name
    labels, _ = got[m.DCGM_GPU_UTIL][0]
    assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"} <= set(labels)
    busy = [(lab, v) for lab, v in got[m.DCGM_GPU_UTIL] if v > 0]
    assert len(busy) == 2 and all(lab["pod"] == "job" and lab["namespace"] == "default" for lab, _ in busy)
    assert {lab["UUID"] for lab, _ in busy} == {g.uuid for g in state.allocations["default/job"].grants}


def test_allocation_metrics_match_the_state(make_sim: Sim) -> None:
    state, sched, _ = make_sim(nodes=2, gpus=4)
    pods = [gpu_pod("a", memory_mib=10000, cores_pct=30, tenant="team-a"),
            gpu_pod("b", memory_mib=20000, cores_pct=50, tenant="team-b"),
            gpu_pod("c", count=2, memory_mib=5000, cores_pct=100, tenant="team-a")]
    assert place(sched, pods) == []
    got = scrape(build_registry(None, state))
    mem = {(lab["node"], lab["gpu"]): v for lab, v in got[m.DEVICE_ALLOCATED_MEMORY]}
    cores = {(lab["node"], lab["gpu"]): v for lab, v in got[m.DEVICE_ALLOCATED_CORES]}
    tasks = {(lab["node"], lab["gpu"]): v for lab, v in got[m.DEVICE_TASKS]}
    for i, node in enumerate(state.nodes):
        for j in range(4):
            key = (node.name, str(j))
            assert mem[key] == state.dev_mem_used[i, j] * m.MIB
            assert cores[key] == pytest.approx(state.dev_core_used[i, j] / 1000)
            assert tasks[key] == state.dev_tasks[i, j]
    quota = {lab["tenant"]: v for lab, v in got[m.TENANT_QUOTA_USED_MEMORY]}
    assert quota == {"team-a": (10000 + 2 * 5000) * m.MIB, "team-b": 20000 * m.MIB}
    qcores = {lab["tenant"]: v for lab, v in got[m.TENANT_QUOTA_USED_CORES]}
    assert qcores == pytest.approx({"team-a": 0.3 + 2.0, "team-b": 0.5})
    pods_seen = {lab["pod"] for lab, _ in got[m.POD_ALLOCATED_MEMORY]}
    assert pods_seen == {"a", "b", "c"} and len(got[m.POD_ALLOCATED_MEMORY]) == 4
    frag = {lab["node"]: v for lab, v in got[m.NODE_FRAGMENTATION]}
    assert set(frag) == {"n0", "n1"} and all(0 <= v <= 1 for v in frag.values())


def test_agent_exports_only_its_nodes(make_sim: Sim) -> None:
    state, sched, _ = make_sim(nodes=3, gpus=2)
    place(sched, [gpu_pod(f"p{k}", count=2, cores_pct=100) for k in range(3)])
    got = scrape(build_registry(SimSource(state, ["n1"]), state, ["n1"]))
    assert {lab["Hostname"] for lab, _ in got[m.DCGM_GPU_UTIL]} == {"n1"}
    assert {lab["node"] for lab, _ in got[m.DEVICE_TASKS]} == {"n1"}
    assert {lab["node"] for lab, _ in got[m.POD_ALLOCATED_MEMORY]} == {"n1"}
    # quotas stay cluster-wide: a tenant's use does not depend on which agent is asked
    assert len(got[m.TENANT_QUOTA_USED_DEVICES]) == 1 and got[m.TENANT_QUOTA_USED_DEVICES][0][1] == 6


def test_fragmentation_measure() -> None:
    state = small_state(nodes=1, gpus=4)
    sched = Scheduler(state, profile_for("binpack"))
    assert node_fragmentation(state)[0] == 0.0  # all free, all whole
    place(sched, [gpu_pod("x", cores_pct=50, memory_mib=1000)])
    # 3 whole free devices (3000) + half of one (500): 500 / 3500 is on a partly used device
    assert node_fragmentation(state)[0] == pytest.approx(500 / 3500)
    place(sched, [gpu_pod(f"w{k}", cores_pct=100) for k in range(3)])
    assert node_fragmentation(state)[0] == pytest.approx(1.0)
    place(sched, [gpu_pod("y", cores_pct=50)])
    assert node_fragmentation(state)[0] == 0.0  # full: nothing free to be fragmented


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(1, 2), st.integers(0, 100), st.integers(0, 30000), st.sampled_from("abc")),
                min_size=1, max_size=25))
def test_allocation_totals_add_up(requests: list[tuple[int, int, int, str]]) -> None:
    state = small_state(nodes=3, gpus=4)
    sched = Scheduler(state, profile_for("spread"))
    place(sched, [gpu_pod(f"p{k}", count=c, cores_pct=cp, memory_mib=mem, tenant=t)
                  for k, (c, cp, mem, t) in enumerate(requests)])
    got = scrape(build_registry(None, state))
    total_mem = sum(v for _, v in got[m.DEVICE_ALLOCATED_MEMORY])
    assert total_mem == sum(v for _, v in got[m.POD_ALLOCATED_MEMORY])
    assert total_mem == sum(v for _, v in got[m.TENANT_QUOTA_USED_MEMORY])
    assert total_mem == state.totals()["device_memory_used_mib"] * m.MIB
    assert sum(v for _, v in got[m.DEVICE_TASKS]) == sum(v for _, v in got[m.TENANT_QUOTA_USED_DEVICES])
    frag = node_fragmentation(state)
    assert np.all((frag >= 0) & (frag <= 1))


def test_control_plane_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = CollectorRegistry()
    waiting = [3]
    cp = ControlPlaneMetrics(reg, lambda: QueueStats(waiting[0], 42.0))
    cp.observe("scheduled", 0.002)
    cp.observe("scheduled", 0.004)
    cp.observe("unschedulable", 0.5)
    # ``timed`` measures the call it wraps: here a decision that takes 3 ms on a clock the test moves
    clock = [1000.0]
    monkeypatch.setattr("gpucluster.monitoring.exporter.time.perf_counter", lambda: clock[0])

    def decide() -> str:
        clock[0] += 0.003
        return "scheduled"

    assert cp.timed(decide) == "scheduled"
    got = scrape(reg)
    assert got[m.QUEUE_PENDING] == [({}, 3.0)] and got[m.QUEUE_OLDEST_PENDING] == [({}, 42.0)]
    decisions = {lab["result"]: v for lab, v in got[m.SCHEDULING_DECISIONS + "_total"]}
    assert decisions == {"scheduled": 3.0, "unschedulable": 1.0}
    assert got[m.SCHEDULING_LATENCY + "_count"] == [({}, 4.0)]
    assert got[m.SCHEDULING_LATENCY + "_sum"][0][1] == pytest.approx(0.002 + 0.004 + 0.5 + 0.003)
    le = {lab["le"]: v for lab, v in got[m.SCHEDULING_LATENCY + "_bucket"]}
    assert (le["0.0025"], le["0.005"], le["0.25"], le["0.5"], le["+Inf"]) == (1.0, 3.0, 3.0, 4.0, 4.0)
    waiting[0] = 0
    assert scrape(reg)[m.QUEUE_PENDING] == [({}, 0.0)]


def test_metrics_server_serves_over_http(make_sim: Sim) -> None:
    state, _, src = make_sim(nodes=1, gpus=2)
    server = MetricsServer(build_registry(src, state), "127.0.0.1", 0)
    try:
        r = httpx.get(server.url, timeout=5)
        assert r.status_code == 200
        assert f'{m.DCGM_GPU_UTIL}{{' in r.text and m.DEVICE_TASKS in r.text
        assert r.headers["content-type"] == CONTENT_TYPE
        assert r.content == server.exposition.render()  # the one exposition path, served by uvicorn
        assert 'href="/metrics"' in httpx.get(server.url.removesuffix("metrics"), timeout=5).text
        assert httpx.get(server.url.removesuffix("/metrics") + "/nothing", timeout=5).status_code == 404
        with pytest.raises(OSError):  # the address is taken: a clear error, not a server that never answers
            MetricsServer(CollectorRegistry(), "127.0.0.1", server.port)
    finally:
        server.stop()
    again = MetricsServer(CollectorRegistry(), "127.0.0.1", server.port)  # stop gave the port back
    again.stop()


def test_fast_renderer_matches_prometheus_client(make_sim: Sim) -> None:
    from gpucluster.monitoring import TextRenderer

    state, sched, src = make_sim(nodes=2, gpus=4)
    place(sched, [activity_pod("a", "training", cores_pct=40), gpu_pod('we"ird\\name', cores_pct=10)])
    reg = build_registry(src, state)
    cp = ControlPlaneMetrics(reg, lambda: QueueStats(1, 2.5))
    cp.observe("scheduled", 0.01)

    def parse(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        # the client's parser names a counter's samples <family>_total; dcgm-exporter's counters are bare
        return {(s.name.removesuffix("_total") if s.name.startswith("DCGM_") else s.name,
                 tuple(sorted(s.labels.items()))): s.value
                for fam in text_string_to_metric_families(text) for s in fam.samples
                if not s.name.endswith("_created")}

    renderer = TextRenderer()
    ours = renderer.render(reg).decode()
    assert parse(ours) == parse(generate_latest(reg).decode())
    assert renderer.render(reg).decode() == ours  # the label cache changes nothing
    # every sample line names its series as generate_latest does (label names sorted), so a line found in one
    # rendering is found in the other (values aside: the client writes large floats in its own notation)

    def series(text: str) -> set[str]:
        out = set()
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            key = line.rsplit(" ", 1)[0]
            name, brace, rest = key.partition("{")
            if name.endswith("_created"):
                continue
            out.add((name.removesuffix("_total") if name.startswith("DCGM_") else name) + brace + rest)
        return out

    assert series(ours) == series(generate_latest(reg).decode())
    assert "# TYPE gpucluster_scheduling_decisions_total counter" in ours
    # dcgm-exporter's counters: typed counter, samples under the bare name (as dcgm-exporter writes them)
    assert f"# TYPE {m.DCGM_TOTAL_ENERGY} counter\n" in ours
    assert f"\n{m.DCGM_TOTAL_ENERGY}{{" in ours and f"{m.DCGM_TOTAL_ENERGY}_total" not in ours
