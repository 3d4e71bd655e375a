"""The device-metrics source protocol and the record it returns per device per scrape."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """What one device reports at one instant, in dcgm-exporter's units.

    ``None`` means the device does not support the field (the exporter then leaves the series out).
    """

    hostname: str
    gpu: int
    """Index of the device on its node."""
    uuid: str
    model_name: str
    pci_bus_id: str = ""
    device: str = ""
    """Device file name, e.g. ``nvidia0``."""
    namespace: str = ""
    pod: str = ""
    container: str = ""
    """The pod holding the device (empty when free; the first pod by name when shared)."""
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    gpu_temp_c: float | None = None
    memory_temp_c: float | None = None
    power_w: float | None = None
    total_energy_mj: float | None = None
    """Counter since the source started (mJ)."""
    pcie_replay_total: float | None = None
    pcie_tx_throughput_kb: float | None = None
    """PCIe transmit throughput, KB (what NVML's ``nvmlDeviceGetPcieThroughput`` gives DCGM)."""
    pcie_rx_throughput_kb: float | None = None
    gpu_util_pct: float | None = None
    mem_copy_util_pct: float | None = None
    enc_util_pct: float | None = None
    dec_util_pct: float | None = None
    xid: int = 0
    """Last XID error seen (0 = none)."""
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    fb_reserved_mib: float | None = None
    vgpu_license_status: float | None = None
    nvlink_bytes_total: float | None = None
    nvlink_crc_errors_total: float | None = None
    ecc_dbe_total: float | None = None
    ecc_sbe_total: float | None = None
    uncorrectable_remapped_rows: float | None = None
    correctable_remapped_rows: float | None = None
    row_remap_failure: float | None = None
    gr_engine_active: float | None = None
    """0..1"""
    tensor_active: float | None = None
    """0..1"""
    dram_active: float | None = None
    """0..1"""
    pcie_tx_bytes_per_s: float | None = None
    pcie_rx_bytes_per_s: float | None = None


@runtime_checkable
class DeviceSource(Protocol):
    """Where device metrics come from: real devices (NVML) or the simulated cluster.

    ``sample`` is called once per scrape and must be cheap (no blocking waits): it returns one record per
    device currently visible; a device that vanished (fell off the bus) is simply absent.
    """

    name: str
    """``nvml`` or ``sim``."""

    def sample(self) -> Sequence[DeviceSample]: ...

    def close(self) -> None: ...
