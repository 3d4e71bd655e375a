"""Device sources: the simulated source follows the cluster state and pod activity; NVML maps fields right."""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

import pytest

from gpucluster.model import ClusterState
from gpucluster.monitoring import PROFILES, ActivityProfile, DeviceSource, NvmlSource, Phase, SimSource
from gpucluster.scheduler import Scheduler
from tests.monitoring.conftest import FakeClock, activity_pod, place

Sim = Callable[..., tuple[ClusterState, Scheduler, SimSource]]


def by_gpu(src: SimSource, node: str) -> dict[int, Any]:
    return {s.gpu: s for s in src.sample() if s.hostname == node}


def test_idle_cluster_reports_every_device_cool_and_empty(make_sim: Sim) -> None:
    state, _, src = make_sim(nodes=2, gpus=4)
    samples = src.sample()
    assert isinstance(src, DeviceSource)
    assert len(samples) == 8
    assert {(s.hostname, s.gpu) for s in samples} == {(f"n{i}", j) for i in range(2) for j in range(4)}
    for s in samples:
        assert s.gpu_util_pct == 0 and s.fb_used_mib == 0 and s.fb_free_mib == 81920
        assert s.xid == 0 and s.pod == "" and s.gpu_temp_c == 30.0
        assert s.uuid == state.dev_uuid[state.node_index[s.hostname]][s.gpu]


def test_utilisation_and_memory_follow_the_pods_share_and_phase(make_sim: Sim) -> None:
    state, sched, src = make_sim(nodes=1, gpus=2, policy="binpack")
    pods = [activity_pod("a", "compute", cores_pct=50, memory_mib=20000),
            activity_pod("b", "idle", cores_pct=30, memory_mib=10000)]
    assert place(sched, pods) == []
    (alloc_a, alloc_b) = (state.allocations["default/a"], state.allocations["default/b"])
    dev_a = next(alloc_a.grants).device_index
    dev_b = next(alloc_b.grants).device_index
    s = by_gpu(src, "n0")
    compute, idle = PROFILES["compute"].phases[0], PROFILES["idle"].phases[0]
    expected: dict[int, float] = {0: 0.0, 1: 0.0}
    expected[dev_a] += 100 * compute.sm_active * 0.5
    expected[dev_b] += 100 * idle.sm_active * 0.3
    for j in (0, 1):
        assert s[j].gpu_util_pct == pytest.approx(expected[j], abs=1e-3)
    used = {0: 0.0, 1: 0.0}
    used[dev_a] += compute.memory_fraction * 20000
    used[dev_b] += idle.memory_fraction * 10000
    for j in (0, 1):
        assert s[j].fb_used_mib == pytest.approx(used[j], abs=1e-2)
        assert s[j].fb_used_mib + s[j].fb_free_mib == pytest.approx(81920)
    assert dev_a != dev_b  # the binpack profile spreads inside the node (HAMi's default GPU policy)
    assert (s[dev_a].pod, s[dev_a].namespace, s[dev_b].pod) == ("a", "default", "b")
    assert s[dev_a].gpu_temp_c > s[dev_b].gpu_temp_c > 30.0
    assert s[dev_a].power_w > s[dev_b].power_w


def test_phases_loop_over_time(clock: FakeClock) -> None:
    prof = ActivityProfile((Phase(10, 0.9), Phase(5, 0.1)))
    assert prof.at(0).sm_active == 0.9 and prof.at(9.9).sm_active == 0.9
    assert prof.at(10).sm_active == 0.1 and prof.at(16).sm_active == 0.9
    once = ActivityProfile((Phase(10, 0.9), Phase(5, 0.1)), loop=False)
    assert once.at(1000).sm_active == 0.1
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        Phase(1, 1.5)
    with pytest.raises(ValueError, match="at least one phase"):
        ActivityProfile(())


def test_training_profile_switches_to_communication_phase(make_sim: Sim, clock: FakeClock) -> None:
    _, sched, src = make_sim(nodes=1, gpus=1)
    assert place(sched, [activity_pod("t", "training")]) == []
    first = src.sample()[0]
    clock.t = 55.0
    second = src.sample()[0]
    assert first.gpu_util_pct == pytest.approx(97.0)
    assert second.gpu_util_pct == pytest.approx(55.0)
    assert second.nvlink_bytes_total > first.nvlink_bytes_total


def test_energy_counter_integrates_power(make_sim: Sim, clock: FakeClock) -> None:
    _, sched, src = make_sim(nodes=1, gpus=1)
    place(sched, [activity_pod("c", "compute")])
    e0 = src.sample()[0].total_energy_mj
    clock.t = 10.0
    s = src.sample()[0]
    assert s.total_energy_mj - e0 == pytest.approx(s.power_w * 10 * 1000, rel=1e-6)


def test_fault_injection_and_repair(make_sim: Sim) -> None:
    _, _, src = make_sim(nodes=1, gpus=4)
    src.inject_xid("n0", 1, 79)
    src.inject_ecc("n0", 2, double_bit=3)
    src.inject_nvlink_errors("n0", 3, 7)
    src.heat("n0", 0, 60)
    src.inject_row_remap_failure("n0", 2)
    s = by_gpu(src, "n0")
    assert s[1].xid == 79 and s[0].xid == 0
    assert s[2].ecc_dbe_total == 3 and s[2].row_remap_failure == 1
    assert s[3].nvlink_crc_errors_total == 7
    assert s[0].gpu_temp_c == 90.0
    src.detach("n0", 1)
    assert set(by_gpu(src, "n0")) == {0, 2, 3}
    src.clear("n0", 1)
    src.clear("n0", 2)
    s = by_gpu(src, "n0")
    assert s[1].xid == 0 and s[2].ecc_dbe_total == 3 and s[2].row_remap_failure == 0
    with pytest.raises(KeyError):
        src.inject_xid("nope", 0, 79)
    with pytest.raises(IndexError):
        src.inject_xid("n0", 9, 79)


def test_removed_node_disappears(make_sim: Sim) -> None:
    state, _, src = make_sim(nodes=2, gpus=2)
    state.remove_node("n1")
    assert {s.hostname for s in src.sample()} == {"n0"}


# ---------------------------------------------------------------------------------------------- NVML
class _FakeNvmlError(Exception):
    pass


def fake_pynvml(gpus: int = 2, xids: list[tuple[int, int]] | None = None) -> types.ModuleType:
    """A stand-in for pynvml with the calls NvmlSource makes (no GPU on the test machine)."""
    nv = types.ModuleType("pynvml")
    pending = list(xids or [])
    handles = [object() for _ in range(gpus)]
    nv.NVMLError = _FakeNvmlError  # type: ignore[attr-defined]
    consts = ("NVML_CLOCK_SM", "NVML_CLOCK_MEM", "NVML_TEMPERATURE_GPU", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED",
              "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC", "nvmlEventTypeXidCriticalError",
              "NVML_PCIE_UTIL_TX_BYTES", "NVML_PCIE_UTIL_RX_BYTES")
    for k, c in enumerate(consts):
        setattr(nv, c, k)
    state = {"init": 0}

    def idx(h: object) -> int:
        return handles.index(h)

    def unsupported(*_a: object) -> Any:
        raise _FakeNvmlError("Not Supported")

    def wait(_es: object, _ms: int) -> Any:
        if not pending:
            raise _FakeNvmlError("Timeout")
        g, x = pending.pop(0)
        return types.SimpleNamespace(device=handles[g], eventData=x)

    fns: dict[str, Callable[..., Any]] = {
        "nvmlInit": lambda: state.__setitem__("init", state["init"] + 1),
        "nvmlShutdown": lambda: state.__setitem__("init", state["init"] - 1),
        "nvmlDeviceGetCount": lambda: gpus,
        "nvmlDeviceGetHandleByIndex": lambda i: handles[i],
        "nvmlDeviceGetUUID": lambda h: f"GPU-{idx(h)}",
        "nvmlDeviceGetName": lambda h: b"NVIDIA H100 80GB HBM3",
        "nvmlDeviceGetPciInfo": lambda h: types.SimpleNamespace(busId=f"00000000:{idx(h):02X}:00.0"),
        "nvmlDeviceGetUtilizationRates": lambda h: types.SimpleNamespace(gpu=50 + idx(h), memory=20),
        "nvmlDeviceGetMemoryInfo": lambda h: types.SimpleNamespace(used=1024 * 1048576, free=3072 * 1048576,
                                                                   reserved=512 * 1048576),
        "nvmlDeviceGetPcieThroughput": lambda h, c: 700 if c == consts.index("NVML_PCIE_UTIL_TX_BYTES") else 900,
        "nvmlDeviceGetPowerUsage": lambda h: 350500,
        "nvmlDeviceGetRemappedRows": lambda h: (2, 1, 0, 0),
        "nvmlDeviceGetClockInfo": lambda h, c: 1980 if c == 0 else 2619,
        "nvmlDeviceGetTemperature": lambda h, s: 61,
        "nvmlDeviceGetTotalEnergyConsumption": lambda h: 123456,
        "nvmlDeviceGetPcieReplayCounter": lambda h: 0,
        "nvmlDeviceGetEncoderUtilization": unsupported,
        "nvmlDeviceGetDecoderUtilization": lambda h: (3, 1000),
        "nvmlDeviceGetTotalEccErrors": lambda h, kind, counter: 5 if kind == 3 else 0,
        "nvmlEventSetCreate": lambda: "es",
        "nvmlDeviceRegisterEvents": lambda h, t, es: None,
        "nvmlEventSetWait_v2": wait,
        "nvmlEventSetFree": lambda es: None,
    }
    for name, fn in fns.items():
        setattr(nv, name, fn)
    nv.state = state  # type: ignore[attr-defined]
    return nv


def test_nvml_source_maps_fields_and_units(monkeypatch: pytest.MonkeyPatch) -> None:
    nv = fake_pynvml(gpus=2, xids=[(1, 79)])
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    src = NvmlSource(hostname="gpu-host")
    s0, s1 = src.sample()
    assert (s0.uuid, s0.model_name, s0.pci_bus_id, s0.device) == ("GPU-0", "NVIDIA H100 80GB HBM3",
                                                                  "00000000:00:00.0", "nvidia0")
    assert s0.gpu_util_pct == 50 and s1.gpu_util_pct == 51 and s0.mem_copy_util_pct == 20
    assert s0.fb_used_mib == 1024 and s0.fb_free_mib == 3072 and s0.fb_reserved_mib == 512
    assert (s0.pcie_tx_throughput_kb, s0.pcie_rx_throughput_kb) == (700, 900)
    assert s0.power_w == pytest.approx(350.5) and s0.total_energy_mj == 123456
    assert s0.sm_clock_mhz == 1980 and s0.mem_clock_mhz == 2619 and s0.gpu_temp_c == 61
    assert s0.enc_util_pct is None and s0.dec_util_pct == 3  # unsupported -> left out, not zero
    assert s0.ecc_dbe_total == 5 and s0.ecc_sbe_total == 0
    assert (s0.correctable_remapped_rows, s0.uncorrectable_remapped_rows, s0.row_remap_failure) == (2, 1, 0)
    assert s0.xid == 0 and s1.xid == 79 and s0.hostname == "gpu-host"
    assert src.sample()[1].xid == 79  # the last XID is kept
    src.close()
    assert nv.state["init"] == 0  # type: ignore[attr-defined]


def test_nvml_without_gpu_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucluster.monitoring import NvmlUnavailableError
    from gpucluster.monitoring.collectors import nvml_device_count

    nv = fake_pynvml(gpus=0)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    assert nvml_device_count() == 0
    with pytest.raises(NvmlUnavailableError, match="no GPU"):
        NvmlSource()

    def broken() -> None:
        raise _FakeNvmlError("Driver Not Loaded")

    nv.nvmlInit = broken  # type: ignore[attr-defined]
    assert nvml_device_count() == 0
    with pytest.raises(NvmlUnavailableError, match="Driver Not Loaded"):
        NvmlSource()


def test_sim_source_forgets_pods_that_are_gone() -> None:
    from gpucluster.monitoring import SimSource
    from gpucluster.scheduler import Scheduler, profile_for
    from tests.helpers import gpu_pod
    from tests.monitoring.conftest import place, small_state

    state = small_state(nodes=1, gpus=4)
    sched = Scheduler(state, profile_for("binpack"))
    src = SimSource(state, clock=lambda: 0.0)
    for k in range(100):
        place(sched, [gpu_pod(f"p{k}", cores_pct=10, memory_mib=1000)])
        src.sample()
        sched.delete(f"default/p{k}")
    src.sample()
    assert len(src._started) <= 64
