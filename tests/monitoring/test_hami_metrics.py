"""HAMi's metric names, labels and units next to ours, and dcgm-exporter's default families and types on the
agent, read off the text the agent serves (the way Prometheus reads it)."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from importlib import resources

import pytest

from gpucluster.model import ClusterState
from gpucluster.monitoring import SimSource, TextRenderer, build_registry, control_plane_registry
from gpucluster.monitoring import hami as h
from gpucluster.monitoring import metrics as m
from gpucluster.monitoring.exporter import DEVICE_FIELDS, QueueStats
from gpucluster.scheduler import Scheduler
from tests.helpers import gpu_pod
from tests.monitoring.conftest import activity_pod, place

Sim = Callable[..., tuple[ClusterState, Scheduler, SimSource]]
Series = dict[str, list[tuple[dict[str, str], float]]]


def exposition(text: str) -> tuple[Series, dict[str, str]]:
    """Sample lines and ``# TYPE`` lines of a text exposition, read literally (names as written)."""
    series: Series = defaultdict(list)
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, typ = line.split(" ", 3)
            types[name] = typ
        elif line and not line.startswith("#"):
            mt = re.fullmatch(r'([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)', line)
            assert mt, line
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', mt.group(2) or ""))
            series[mt.group(1)].append((labels, float(mt.group(3))))
    return series, types


def render(reg: object) -> str:
    return TextRenderer().render(reg).decode()  # type: ignore[arg-type]


# ------------------------------------------------------------------------------------------------ HAMi
def test_hami_scheduler_families_carry_hamis_units_and_labels(make_sim: Sim) -> None:
    state, sched, src = make_sim(nodes=2, gpus=4)
    left = place(sched, [gpu_pod("a", cores_pct=30, memory_mib=10000), gpu_pod("b", cores_pct=50, memory_mib=20000),
                         gpu_pod("c", count=2, cores_pct=100, memory_mib=40000, namespace="team-x")])
    assert left == []
    series, types = exposition(render(build_registry(src, state)))
    for name in h.SCHEDULER_FAMILIES:
        assert types[name] == "gauge", name
    for name in h.LEGACY_SCHEDULER_FAMILIES:
        assert name not in types  # legacy names only with --legacy-metrics
    mem = series[h.GPU_MEMORY_ALLOCATED]
    assert {tuple(sorted(lv)) for lv, _ in mem} == {tuple(sorted(h.DEVICE_CORES_LABELS))}
    assert all(lv["zone"] == "vGPU" and lv["device_cores"] == "100" for lv, _ in mem)
    for lv, value in mem:  # bytes, from the state's MiB
        i, j = state.node_index[lv["node"]], int(lv["device_index"])
        assert value == state.dev_mem_used[i, j] * 1024 * 1024
        assert lv["device_uuid"] == state.nodes[i].devices[j].uuid
        assert lv["device_type"] == state.nodes[i].devices[j].model
    assert sum(v for _, v in mem) == (10000 + 20000 + 2 * 40000) * 1024 * 1024
    # HAMi's core figures are percent of a device (100 = whole), although the name says ratio
    cores = {(lv["node"], lv["device_index"]): v for lv, v in series[h.GPU_CORE_ALLOCATED]}
    assert sum(cores.values()) == 30 + 50 + 200 and max(cores.values()) <= 100
    assert all(v == 100 for _, v in series[h.GPU_CORE_LIMIT])
    limits = {lv["device_uuid"]: v for lv, v in series[h.GPU_MEMORY_LIMIT]}
    ratio = {lv["device_uuid"]: v for lv, v in series[h.NODE_GPU_MEMORY_ALLOCATED_RATIO]}
    used = {lv["device_uuid"]: v for lv, v in mem}
    assert all(ratio[u] == pytest.approx(used[u] / limits[u]) and 0 <= ratio[u] <= 1 for u in ratio)
    shared = sum(v for _, v in series[h.GPU_SHARED_COUNT])
    assert shared == 4  # containers sharing devices: a, b, and c's two devices
    # per container
    vmem = series[h.VGPU_MEMORY_ALLOCATED]
    assert {tuple(sorted(lv)) for lv, _ in vmem} == {tuple(sorted(h.CONTAINER_LABELS))}
    by_pod = defaultdict(float)
    for lv, v in vmem:
        by_pod[lv["namespace"], lv["pod"]] += v
    assert by_pod["team-x", "c"] == 80000 * 1024 * 1024
    assert sorted(v for lv, v in series[h.VGPU_CORE_ALLOCATED] if lv["pod"] == "c") == [100, 100]
    # namespace quota use, as HAMi counts it: MiB and core percent per resource name
    quota = {(lv["namespace"], lv["quota_name"]): v for lv, v in series[h.RESOURCE_QUOTA_USED]}
    assert quota["team-x", "nvidia.com/gpumem"] == 80000 and quota["team-x", "nvidia.com/gpucores"] == 200
    # ours stay beside them, and agree
    ours = sum(v for _, v in series[m.DEVICE_ALLOCATED_MEMORY])
    assert ours == sum(v for _, v in mem)


def test_legacy_flag_adds_hamis_old_names_and_labels(make_sim: Sim) -> None:
    state, sched, src = make_sim(nodes=1, gpus=2)
    place(sched, [gpu_pod("a", cores_pct=25, memory_mib=8000)])
    series, types = exposition(render(build_registry(src, state, legacy_metrics=True)))
    for name in (*h.SCHEDULER_FAMILIES, *h.LEGACY_SCHEDULER_FAMILIES, h.LEGACY_HOST_MEMORY, h.LEGACY_HOST_CORE):
        assert name in types, name
    legacy = series[h.LEGACY_MEMORY_ALLOCATED]
    assert {tuple(sorted(lv)) for lv, _ in legacy} == {tuple(sorted(h.LEGACY_DEVICE_CORES_LABELS))}
    assert sum(v for _, v in legacy) == sum(v for _, v in series[h.GPU_MEMORY_ALLOCATED]) == 8000 * 1024 * 1024
    assert sum(v for _, v in series[h.LEGACY_CORE_ALLOCATED]) == 25
    assert {lv["podname"] for lv, _ in series[h.LEGACY_VGPU_MEMORY_ALLOCATED]} == {"a"}


def test_agent_exports_hamis_host_families_from_device_samples(make_sim: Sim) -> None:
    state, sched, src = make_sim(nodes=1, gpus=2)
    place(sched, [activity_pod("t", "training", cores_pct=100)])
    series, _ = exposition(render(build_registry(src, state)))
    fb = {lv["UUID"]: v for lv, v in series[m.DCGM_FB_USED]}
    host = series[h.HOST_GPU_MEMORY_USED]
    assert {tuple(sorted(lv)) for lv, _ in host} == {tuple(sorted(h.HOST_LABELS))}
    assert {lv["device_uuid"]: v for lv, v in host} == {u: v * 1024 * 1024 for u, v in fb.items()}
    util = {lv["UUID"]: v for lv, v in series[m.DCGM_GPU_UTIL]}
    assert {lv["device_uuid"]: v for lv, v in series[h.HOST_GPU_UTILIZATION]} == util
    assert max(util.values()) > 0


def test_control_plane_registry_reads_a_replaced_state(make_sim: Sim) -> None:
    """The Kubernetes backend rebuilds its state: a callable state source is read at every scrape."""
    state, sched, _ = make_sim(nodes=1, gpus=2)
    current = {"s": state}
    reg, _ = control_plane_registry(lambda: current["s"], lambda: QueueStats(0, 0.0))
    assert sum(v for _, v in exposition(render(reg))[0][h.GPU_MEMORY_ALLOCATED]) == 0
    place(sched, [gpu_pod("a", memory_mib=1000)])
    other, osched, _ = make_sim(nodes=3, gpus=1)
    place(osched, [gpu_pod("b", memory_mib=3000)])
    current["s"] = other
    series = exposition(render(reg))[0]
    assert len(series[h.GPU_MEMORY_LIMIT]) == 3
    assert sum(v for _, v in series[h.GPU_MEMORY_ALLOCATED]) == 3000 * 1024 * 1024


# ------------------------------------------------------------------------------------------------ DCGM
def dcgm_default_counters() -> tuple[dict[str, str], dict[str, str]]:
    """(enabled, listed but commented out) families of dcgm-exporter's default-counters.csv: name -> type."""
    text = resources.files("gpucluster.monitoring").joinpath("data/dcgm-exporter-default-counters.csv").read_text()
    enabled: dict[str, str] = {}
    commented: dict[str, str] = {}
    for line in text.splitlines():
        mt = re.fullmatch(r"(#\s*)?(DCGM_\w+)\s*,\s*(\w+)\s*,.*", line.strip())
        if mt:
            (commented if mt.group(1) else enabled)[mt.group(2)] = mt.group(3)
    return enabled, commented


PRE_3_3_PCIE = {m.DCGM_PCIE_TX_THROUGHPUT: "counter", m.DCGM_PCIE_RX_THROUGHPUT: "counter"}
"""Defaults of dcgm-exporter up to 3.3 (replaced by DCGM_FI_PROF_PCIE_* in its commit 219eb08): dashboards
built then still read them."""


def test_agent_serves_dcgm_exporters_default_families_with_its_types(make_sim: Sim) -> None:
    enabled, commented = dcgm_default_counters()
    assert len(enabled) >= 25 and enabled[m.DCGM_TOTAL_ENERGY] == "counter"
    state, sched, src = make_sim(nodes=1, gpus=2)
    place(sched, [activity_pod("t", "training")])
    series, types = exposition(render(build_registry(src, state)))
    for name, typ in enabled.items():
        if typ == "label":  # static configuration (driver version): a label on dcgm-exporter's series
            continue
        assert types.get(name) == typ, f"{name}: dcgm-exporter has {typ}, we have {types.get(name)}"
        assert len(series[name]) == 2, f"{name}: one series per GPU"
    ours = {name: typ for name, _, typ, _ in DEVICE_FIELDS}
    known = {**commented, **enabled, **PRE_3_3_PCIE}
    for name, typ in ours.items():
        assert known.get(name) == typ, f"{name}: we export {typ}, dcgm-exporter lists {known.get(name)}"
    for name, typ in PRE_3_3_PCIE.items():
        assert types[name] == typ and len(series[name]) == 2
