"""Device metrics from the NVIDIA driver through NVML (``nvidia-ml-py``), for nodes that have GPUs.

Each field is read on its own; a field the device does not support (``NVMLError_NotSupported``) is left out
(``None``), never reported as zero. PCIe throughput is not read: NVML samples it over 20 ms per call, which
would blow the scrape budget (dcgm-exporter takes it from the profiling module instead). XIDs arrive as NVML
events; each scrape drains the event set without waiting and keeps the last XID per device, as dcgm-exporter
does.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable
from typing import Any

from gpucluster.monitoring.collectors.base import DeviceSample


class NvmlUnavailableError(RuntimeError):
    """No NVIDIA driver or no GPU on this machine."""


def _nvml() -> Any:
    try:
        import pynvml
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        raise NvmlUnavailableError("nvidia-ml-py is not installed") from exc
    return pynvml


def nvml_device_count() -> int:
    """Number of GPUs NVML sees; 0 when there is no driver."""
    nv = _nvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError:
        return 0
    try:
        return int(nv.nvmlDeviceGetCount())
    finally:
        nv.nvmlShutdown()


class NvmlSource:
    """One scrape = one pass over the devices; every call is cheap (no sampling windows, no sleeps)."""

    name = "nvml"

    def __init__(self, hostname: str | None = None) -> None:
        self._nv = nv = _nvml()
        try:
            nv.nvmlInit()
        except nv.NVMLError as exc:
            raise NvmlUnavailableError(f"NVML could not start: {exc}") from exc
        self.hostname = hostname or socket.gethostname()
        self._handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        if not self._handles:
            nv.nvmlShutdown()
            raise NvmlUnavailableError("NVML sees no GPU")
        self._static = [self._identity(h) for h in self._handles]
        self._last_xid = [0] * len(self._handles)
        self._events: Any = None
        try:
            self._events = nv.nvmlEventSetCreate()
            for h in self._handles:
                with contextlib.suppress(nv.NVMLError):
                    nv.nvmlDeviceRegisterEvents(h, nv.nvmlEventTypeXidCriticalError, self._events)
        except nv.NVMLError:
            self._events = None

    def _identity(self, h: Any) -> tuple[str, str, str]:
        nv = self._nv
        uuid = _text(nv.nvmlDeviceGetUUID(h))
        model = _text(nv.nvmlDeviceGetName(h))
        bus = _text(nv.nvmlDeviceGetPciInfo(h).busId)
        return uuid, model, bus

    def _get(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)``, or None when the device does not support it."""
        try:
            return fn(*args)
        except self._nv.NVMLError:
            return None

    def _drain_xids(self) -> None:
        if self._events is None:
            return
        nv = self._nv
        by_uuid = {u: i for i, (u, _, _) in enumerate(self._static)}
        while True:
            try:
                ev = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                return
            i = by_uuid.get(_text(nv.nvmlDeviceGetUUID(ev.device)))
            if i is not None:
                self._last_xid[i] = int(ev.eventData)

    def sample(self) -> list[DeviceSample]:
        nv = self._nv
        self._drain_xids()
        out: list[DeviceSample] = []
        for i, h in enumerate(self._handles):
            uuid, model, bus = self._static[i]
            util = self._get(nv.nvmlDeviceGetUtilizationRates, h)
            mem = self._get(nv.nvmlDeviceGetMemoryInfo, h)
            power_mw = self._get(nv.nvmlDeviceGetPowerUsage, h)
            remap = self._get(nv.nvmlDeviceGetRemappedRows, h)
            out.append(
                DeviceSample(
                    hostname=self.hostname,
                    gpu=i,
                    uuid=uuid,
                    model_name=model,
                    pci_bus_id=bus,
                    device=f"nvidia{i}",
                    sm_clock_mhz=_f(self._get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)),
                    mem_clock_mhz=_f(self._get(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)),
                    gpu_temp_c=_f(self._get(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)),
                    power_w=None if power_mw is None else power_mw / 1000.0,
                    total_energy_mj=_f(self._get(nv.nvmlDeviceGetTotalEnergyConsumption, h)),
                    pcie_replay_total=_f(self._get(nv.nvmlDeviceGetPcieReplayCounter, h)),
                    pcie_tx_throughput_kb=_f(self._get(nv.nvmlDeviceGetPcieThroughput, h,
                                                       nv.NVML_PCIE_UTIL_TX_BYTES)),
                    pcie_rx_throughput_kb=_f(self._get(nv.nvmlDeviceGetPcieThroughput, h,
                                                       nv.NVML_PCIE_UTIL_RX_BYTES)),
                    gpu_util_pct=None if util is None else float(util.gpu),
                    mem_copy_util_pct=None if util is None else float(util.memory),
                    enc_util_pct=_first(self._get(nv.nvmlDeviceGetEncoderUtilization, h)),
                    dec_util_pct=_first(self._get(nv.nvmlDeviceGetDecoderUtilization, h)),
                    xid=self._last_xid[i],
                    fb_used_mib=None if mem is None else mem.used / 1048576.0,
                    fb_free_mib=None if mem is None else mem.free / 1048576.0,
                    fb_reserved_mib=None if getattr(mem, "reserved", None) is None
                    else float(mem.reserved) / 1048576.0,
                    ecc_dbe_total=_f(
                        self._get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                  nv.NVML_VOLATILE_ECC)
                    ),
                    ecc_sbe_total=_f(
                        self._get(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                                  nv.NVML_VOLATILE_ECC)
                    ),
                    uncorrectable_remapped_rows=None if remap is None else float(remap[1]),
                    correctable_remapped_rows=None if remap is None else float(remap[0]),
                    row_remap_failure=None if remap is None else float(remap[3]),
                )
            )
        return out

    def close(self) -> None:
        nv = self._nv
        if self._events is not None:
            with contextlib.suppress(nv.NVMLError):
                nv.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _f(v: Any) -> float | None:
    return None if v is None else float(v)


def _first(v: Any) -> float | None:
    """Encoder/decoder utilisation comes as ``(percent, sampling period us)``."""
    return None if v is None else float(v[0])
