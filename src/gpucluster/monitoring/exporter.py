"""Prometheus exporter: custom collectors that read live state at scrape time (no per-update bookkeeping).

* :class:`DeviceCollector` - dcgm-exporter's device metrics from a :class:`DeviceSource`.
* :class:`AllocationCollector` - ``gpucluster_`` allocation metrics per device, pod, node and tenant from a
  :class:`ClusterState`.
* :class:`ControlPlaneMetrics` - queue length (read at scrape time), scheduling latency histogram and
  decisions by result (the two event-driven families, observed by the scheduling loop).

Device metrics carry dcgm-exporter's types: its counters are typed ``counter`` and keep their names, which
do not end in ``_total`` (as dcgm-exporter writes them).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpucluster.model import ClusterState
from gpucluster.model.views import node_fragmentation
from gpucluster.monitoring import metrics as m
from gpucluster.monitoring.collectors.base import DeviceSample, DeviceSource
from gpucluster.monitoring.hami import HamiHostCollector, HamiSchedulerCollector, StateSource

# (metric name, DeviceSample field, Prometheus type, help): dcgm-exporter's names and types
# (``monitoring/data/dcgm-exporter-default-counters.csv``; a test compares the two)
DEVICE_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    (m.DCGM_SM_CLOCK, "sm_clock_mhz", "gauge", "SM clock frequency (in MHz)."),
    (m.DCGM_MEM_CLOCK, "mem_clock_mhz", "gauge", "Memory clock frequency (in MHz)."),
    (m.DCGM_GPU_TEMP, "gpu_temp_c", "gauge", "GPU temperature (in C)."),
    (m.DCGM_MEMORY_TEMP, "memory_temp_c", "gauge", "Memory temperature (in C)."),
    (m.DCGM_POWER_USAGE, "power_w", "gauge", "Power draw (in W)."),
    (m.DCGM_TOTAL_ENERGY, "total_energy_mj", "counter", "Total energy consumption since boot (in mJ)."),
    (m.DCGM_PCIE_TX_THROUGHPUT, "pcie_tx_throughput_kb", "counter",
     "Total number of bytes transmitted through PCIe TX (in KB) via NVML."),
    (m.DCGM_PCIE_RX_THROUGHPUT, "pcie_rx_throughput_kb", "counter",
     "Total number of bytes received through PCIe RX (in KB) via NVML."),
    (m.DCGM_PCIE_REPLAY, "pcie_replay_total", "counter", "Total number of PCIe retries."),
    (m.DCGM_GPU_UTIL, "gpu_util_pct", "gauge", "GPU utilization (in %)."),
    (m.DCGM_MEM_COPY_UTIL, "mem_copy_util_pct", "gauge", "Memory utilization (in %)."),
    (m.DCGM_ENC_UTIL, "enc_util_pct", "gauge", "Encoder utilization (in %)."),
    (m.DCGM_DEC_UTIL, "dec_util_pct", "gauge", "Decoder utilization (in %)."),
    (m.DCGM_XID_ERRORS, "xid", "gauge", "Value of the last XID error encountered."),
    (m.DCGM_FB_FREE, "fb_free_mib", "gauge", "Framebuffer memory free (in MiB)."),
    (m.DCGM_FB_USED, "fb_used_mib", "gauge", "Framebuffer memory used (in MiB)."),
    (m.DCGM_FB_RESERVED, "fb_reserved_mib", "gauge", "Framebuffer memory reserved (in MiB)."),
    (m.DCGM_NVLINK_BANDWIDTH_TOTAL, "nvlink_bytes_total", "counter",
     "Total number of NVLink bandwidth counters for all lanes."),
    (m.DCGM_NVLINK_CRC_FLIT_ERRORS, "nvlink_crc_errors_total", "counter",
     "Total number of NVLink flow-control CRC errors."),
    (m.DCGM_ECC_DBE_VOL_TOTAL, "ecc_dbe_total", "counter", "Total number of double-bit volatile ECC errors."),
    (m.DCGM_ECC_SBE_VOL_TOTAL, "ecc_sbe_total", "counter", "Total number of single-bit volatile ECC errors."),
    (m.DCGM_VGPU_LICENSE_STATUS, "vgpu_license_status", "gauge", "vGPU License status"),
    (m.DCGM_UNCORRECTABLE_REMAPPED_ROWS, "uncorrectable_remapped_rows", "counter",
     "Number of remapped rows for uncorrectable errors"),
    (m.DCGM_CORRECTABLE_REMAPPED_ROWS, "correctable_remapped_rows", "counter",
     "Number of remapped rows for correctable errors"),
    (m.DCGM_ROW_REMAP_FAILURE, "row_remap_failure", "gauge", "Whether remapping of rows has failed"),
    (m.DCGM_GR_ENGINE_ACTIVE, "gr_engine_active", "gauge", "Ratio of time the graphics engine is active."),
    (m.DCGM_PIPE_TENSOR_ACTIVE, "tensor_active", "gauge", "Ratio of cycles the tensor (HMMA) pipe is active."),
    (m.DCGM_DRAM_ACTIVE, "dram_active", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
    (m.DCGM_PCIE_TX_BYTES, "pcie_tx_bytes_per_s", "gauge",
     "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in "
     "bytes per second."),
    (m.DCGM_PCIE_RX_BYTES, "pcie_rx_bytes_per_s", "gauge",
     "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in "
     "bytes per second."),
)


def _family(name: str, doc: str, typ: str, labels: Sequence[str]) -> Metric:
    """A gauge, or a counter that keeps dcgm-exporter's bare name (no ``_total`` added to its samples, as
    dcgm-exporter writes them): ``Metric`` with type counter and samples named as the family."""
    if typ == "gauge":
        return GaugeMetricFamily(name, doc, labels=labels)
    return Metric(name, doc, typ)


def device_labels(s: DeviceSample) -> list[str]:
    return [str(s.gpu), s.uuid, s.pci_bus_id, s.device, s.model_name, s.hostname, s.namespace, s.pod, s.container]


class DeviceCollector(Collector):
    """dcgm-exporter-compatible device metrics, sampled from ``source`` on every scrape (under ``lock`` when
    given: the simulated source reads the cluster state). ``fields`` limits the output to those metric names
    (an in-process rule evaluator only needs what its rules read); None exports them all."""

    def __init__(self, source: DeviceSource, lock: threading.RLock | None = None,
                 fields: Collection[str] | None = None) -> None:
        self.source = source
        self.lock = lock
        self.fields = DEVICE_FIELDS if fields is None else tuple(f for f in DEVICE_FIELDS if f[0] in fields)

    def collect(self) -> Iterator[Metric]:
        with self.lock or nullcontext():
            samples = self.source.sample()
        labels = [device_labels(s) for s in samples]
        for name, attr, typ, doc in self.fields:
            fam = _family(name, doc, typ, m.DCGM_LABELS)
            for s, lv in zip(samples, labels, strict=True):
                v = getattr(s, attr)
                if v is None:
                    continue
                if isinstance(fam, GaugeMetricFamily):
                    fam.add_metric(lv, float(v))
                else:
                    fam.add_sample(name, dict(zip(m.DCGM_LABELS, lv, strict=True)), float(v))
            yield fam


class AllocationCollector(Collector):
    """Allocation metrics read from the cluster state at scrape time.

    ``nodes`` limits the output to some nodes (an agent exports its own node); ``lock`` is held while
    reading when the state has a concurrent writer. ``pods=False`` leaves out the per-pod and per-tenant
    families (they read every allocation of the cluster; an in-process evaluator of per-node shards whose
    rules only read device and node series does not need them).
    """

    def __init__(
        self,
        state: StateSource,
        nodes: Sequence[str] | None = None,
        lock: threading.RLock | None = None,
        fragmentation: Callable[[ClusterState], Any] = node_fragmentation,
        pods: bool = True,
    ) -> None:
        self._state = state
        self.nodes = None if nodes is None else list(nodes)
        self.lock = lock or threading.RLock()
        self.fragmentation = fragmentation
        self.pods = pods

    @property
    def state(self) -> ClusterState:
        """The state read at this scrape (``state`` may be a function returning the current one)."""
        return self._state() if callable(self._state) else self._state

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            return iter(self._collect())

    def _collect(self) -> list[Metric]:
        st = self.state
        if self.nodes is None:
            rows = [int(i) for i in np.flatnonzero(st.present)]
        else:
            rows = [st.node_index[n] for n in self.nodes if st.present[st.node_index[n]]]
        row_set = set(rows)
        dmem = GaugeMetricFamily(m.DEVICE_ALLOCATED_MEMORY, "Device memory allocated to pods (bytes).",
                                 labels=m.DEVICE_LABELS)
        dcap = GaugeMetricFamily(m.DEVICE_MEMORY_CAPACITY, "Schedulable device memory (bytes).",
                                 labels=m.DEVICE_LABELS)
        dcores = GaugeMetricFamily(m.DEVICE_ALLOCATED_CORES, "Share of the device's compute allocated (0-1).",
                                   labels=m.DEVICE_LABELS)
        dtasks = GaugeMetricFamily(m.DEVICE_TASKS, "Tasks (containers) sharing the device.", labels=m.DEVICE_LABELS)
        dhealth = GaugeMetricFamily(m.DEVICE_HEALTHY, "1 when the device is healthy.", labels=m.DEVICE_LABELS)
        frag_all = self.fragmentation(st)
        nfrag = GaugeMetricFamily(m.NODE_FRAGMENTATION,
                                  "Free compute on partly used devices / all free compute (0-1).",
                                  labels=m.NODE_LABELS)
        nsched = GaugeMetricFamily(m.NODE_SCHEDULABLE, "1 when the node accepts new pods (not cordoned).",
                                   labels=m.NODE_LABELS)
        for i in rows:
            spec = st.nodes[i]
            nfrag.add_metric([spec.name], float(frag_all[i]))
            nsched.add_metric([spec.name], float(st.schedulable[i]))
            for dev in spec.devices:
                j = dev.index
                lv = [spec.name, spec.name, str(j), dev.uuid, dev.model, dev.vendor]
                dmem.add_metric(lv, float(st.dev_mem_used[i, j]) * m.MIB)
                dcap.add_metric(lv, float(st.dev_mem_cap[i, j]) * m.MIB)
                dcores.add_metric(lv, float(st.dev_core_used[i, j]) / max(1.0, float(st.dev_core_cap[i, j])))
                dtasks.add_metric(lv, float(st.dev_tasks[i, j]))
                dhealth.add_metric(lv, float(st.dev_healthy[i, j]))
        if not self.pods:
            return [dmem, dcap, dcores, dtasks, dhealth, nfrag, nsched]
        pmem = GaugeMetricFamily(m.POD_ALLOCATED_MEMORY, "Device memory a pod holds on one device (bytes).",
                                 labels=m.POD_LABELS)
        pcores = GaugeMetricFamily(m.POD_ALLOCATED_CORES, "Share of one device's compute a pod holds (0-1).",
                                   labels=m.POD_LABELS)
        tmem: dict[str, float] = {}
        tcores: dict[str, float] = {}
        tdev: dict[str, float] = {}
        for alloc in list(st.allocations.values()):
            i = st.node_index[alloc.node]
            ns, _, name = alloc.pod_key.partition("/")
            tenant = alloc.tenant or (alloc.pod.charged_tenant if alloc.pod is not None else ns)
            for g in alloc.grants:
                tmem[tenant] = tmem.get(tenant, 0.0) + g.memory_mib * m.MIB
                tcores[tenant] = tcores.get(tenant, 0.0) + g.core_milli / 1000.0
                tdev[tenant] = tdev.get(tenant, 0.0) + 1
                if i not in row_set:
                    continue
                lv = [ns, name, tenant, alloc.node, str(g.device_index), g.uuid]
                pmem.add_metric(lv, float(g.memory_mib) * m.MIB)
                pcores.add_metric(lv, g.core_milli / max(1.0, float(st.dev_core_cap[i, g.device_index])))
        qmem = GaugeMetricFamily(m.TENANT_QUOTA_USED_MEMORY, "Device memory charged to the tenant (bytes).",
                                 labels=m.TENANT_LABELS)
        qcores = GaugeMetricFamily(m.TENANT_QUOTA_USED_CORES,
                                   "Device compute charged to the tenant (whole devices' worth).",
                                   labels=m.TENANT_LABELS)
        qdev = GaugeMetricFamily(m.TENANT_QUOTA_USED_DEVICES, "Device shares (vGPUs) charged to the tenant.",
                                 labels=m.TENANT_LABELS)
        for tenant in sorted(tmem):
            qmem.add_metric([tenant], tmem[tenant])
            qcores.add_metric([tenant], tcores[tenant])
            qdev.add_metric([tenant], tdev[tenant])
        return [dmem, dcap, dcores, dtasks, dhealth, nfrag, nsched, pmem, pcores, qmem, qcores, qdev]


@dataclass(frozen=True, slots=True)
class QueueStats:
    pending: int
    """Pods waiting to be scheduled (active + parked)."""
    oldest_wait_s: float
    """How long the oldest pending pod has waited (0 when none)."""


LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ControlPlaneMetrics(Collector):
    """Cluster-level metrics of the control plane.

    The queue gauges are read from ``queue_stats`` at scrape time; latency and decisions are events the
    scheduling loop reports with :meth:`observe` (or :meth:`timed`).
    """

    def __init__(self, registry: CollectorRegistry, queue_stats: Callable[[], QueueStats]) -> None:
        self.queue_stats = queue_stats
        self.latency = Histogram(m.SCHEDULING_LATENCY, "Time to decide one pod (seconds).",
                                 buckets=LATENCY_BUCKETS, registry=registry)
        self.decisions = Counter(m.SCHEDULING_DECISIONS, "Scheduling decisions by result.", ["result"],
                                 registry=registry)
        registry.register(self)

    def observe(self, result: str, seconds: float) -> None:
        self.latency.observe(seconds)
        self.decisions.labels(result=result).inc()

    def observe_decision(self, decision: Any, seconds: float) -> None:
        """A scheduler's ``on_decision`` hook: the result is the decision's outcome (``scheduled``, ...)."""
        self.observe(str(decision.outcome), seconds)

    def timed(self, fn: Callable[[], Any], result_of: Callable[[Any], str] = str) -> Any:
        """Run ``fn`` (one scheduling decision), record its latency and ``result_of(return value)``."""
        t0 = time.perf_counter()
        out = fn()
        self.observe(result_of(out), time.perf_counter() - t0)
        return out

    def collect(self) -> Iterator[Metric]:
        q = self.queue_stats()
        pending = GaugeMetricFamily(m.QUEUE_PENDING, "Pods waiting to be scheduled.")
        pending.add_metric([], float(q.pending))
        oldest = GaugeMetricFamily(m.QUEUE_OLDEST_PENDING, "Wait of the oldest pending pod (seconds).")
        oldest.add_metric([], float(q.oldest_wait_s))
        yield pending
        yield oldest


def register_allocation(reg: CollectorRegistry, state: StateSource, nodes: Sequence[str] | None = None,
                        lock: threading.RLock | None = None, legacy_metrics: bool = False) -> None:
    """Our allocation families and HAMi's scheduler families (``legacy_metrics``: HAMi's legacy names too)
    over the same state: every process that exports one exports both."""
    reg.register(AllocationCollector(state, nodes, lock))
    reg.register(HamiSchedulerCollector(state, lock=lock, legacy=legacy_metrics, nodes=nodes))


def build_registry(
    source: DeviceSource | None = None,
    state: ClusterState | None = None,
    nodes: Sequence[str] | None = None,
    lock: threading.RLock | None = None,
    legacy_metrics: bool = False,
    registry: CollectorRegistry | None = None,
) -> CollectorRegistry:
    """A registry with device metrics (``source``: dcgm-exporter's and HAMi's host families) and allocation
    metrics (``state``: ours and HAMi's scheduler families), whichever given; added to ``registry`` when given."""
    reg = registry if registry is not None else CollectorRegistry(auto_describe=False)
    if source is not None:
        reg.register(DeviceCollector(source, lock))
        reg.register(HamiHostCollector(source, lock, legacy=legacy_metrics))
    if state is not None:
        register_allocation(reg, state, nodes, lock, legacy_metrics)
    return reg


def control_plane_registry(
    state: StateSource, queue_stats: Callable[[], QueueStats], lock: threading.RLock | None = None,
    legacy_metrics: bool = False,
) -> tuple[CollectorRegistry, ControlPlaneMetrics]:
    """What the control-plane process exports: cluster-wide allocation metrics (ours and HAMi's) plus queue,
    latency and decisions. Serve it through ``exposition.Exposition(registry)`` (the one exposition path) and
    report each decision with ``metrics.observe`` / ``metrics.timed``."""
    reg = CollectorRegistry(auto_describe=False)
    register_allocation(reg, state, None, lock, legacy_metrics)
    return reg, ControlPlaneMetrics(reg, queue_stats)
