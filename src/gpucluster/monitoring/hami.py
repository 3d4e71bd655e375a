"""HAMi's metric names, units and labels, so the dashboards and alerts HAMi users already have read our
scheduler and agent unchanged.

Taken from HAMi's own exporters (``cmd/scheduler/metrics.go`` and ``cmd/vGPUmonitor/metrics.go``):

* the scheduler's families (``hami_gpu_*``, ``hami_node_gpu_*``, ``hami_vgpu_*_allocated_*``,
  ``hami_resource_quota_used``), every series carrying ``zone="vGPU"`` as HAMi's registry wraps them;
* with ``legacy=True`` also the pre-2.6 family (``GPUDeviceMemoryAllocated``, ``GPUDeviceCoreAllocated``,
  ``GPUDeviceSharedNum``, ``vGPUMemoryAllocated``, ``QuotaUsed`` ...) with its own label names (``nodeid``,
  ``deviceuuid``, ``deviceidx``, ``devicetype``), as HAMi's ``--legacy-metrics`` flag does;
* the node monitor's host families (``hami_host_gpu_memory_used_bytes``, ``hami_host_gpu_utilization_ratio``)
  from the agent's device samples.

Units are HAMi's, not ours: memory in bytes (HAMi converts its MiB accounting with ``x 1024 x 1024``), core
figures in HAMi's percent of a device (0..100, a whole device = 100) even where the name ends in
``_ratio``, the one true ratio being ``hami_node_gpu_memory_allocated_ratio`` (0..1). Our own
``gpucluster_*`` families stay beside these (see :mod:`gpucluster.monitoring.metrics`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from typing import Final

import numpy as np
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.model import PERCENT_TO_CORE_MILLI, ClusterState
from gpucluster.monitoring.collectors.base import DeviceSource

ZONE: Final = "vGPU"
"""The ``zone`` label HAMi's scheduler and monitor put on every series."""
MIB: Final = 1024 * 1024

# ------------------------------------------------------------------ current names (HAMi >= 2.6)
GPU_MEMORY_LIMIT: Final = "hami_gpu_memory_limit_bytes"
GPU_CORE_LIMIT: Final = "hami_gpu_core_limit_ratio"
GPU_MEMORY_ALLOCATED: Final = "hami_gpu_memory_allocated_bytes"
GPU_SHARED_COUNT: Final = "hami_gpu_shared_count"
GPU_CORE_ALLOCATED: Final = "hami_gpu_core_allocated_ratio"
NODE_GPU_OVERVIEW: Final = "hami_node_gpu_overview"
NODE_GPU_MEMORY_ALLOCATED_RATIO: Final = "hami_node_gpu_memory_allocated_ratio"
RESOURCE_QUOTA_USED: Final = "hami_resource_quota_used"
VGPU_MEMORY_ALLOCATED: Final = "hami_vgpu_memory_allocated_bytes"
VGPU_CORE_ALLOCATED: Final = "hami_vgpu_core_allocated_ratio"
HOST_GPU_MEMORY_USED: Final = "hami_host_gpu_memory_used_bytes"
HOST_GPU_UTILIZATION: Final = "hami_host_gpu_utilization_ratio"
HOST_GPU_MEMORY_CONTROLLER_UTILIZATION: Final = "hami_host_gpu_memory_controller_utilization_ratio"

DEVICE_LABELS: Final = ("node", "device_uuid", "device_index", "device_type", "zone")
DEVICE_CORES_LABELS: Final = ("node", "device_uuid", "device_index", "device_cores", "device_type", "zone")
OVERVIEW_LABELS: Final = ("node", "device_uuid", "device_index", "device_cores", "device_memory_limit",
                          "device_type", "zone")
QUOTA_LABELS: Final = ("namespace", "quota_name", "limit", "zone")
CONTAINER_LABELS: Final = ("namespace", "node", "pod", "container_index", "device_uuid", "zone")
HOST_LABELS: Final = ("node", "device_index", "device_uuid", "device_type", "zone")
HOST_MC_LABELS: Final = ("device_index", "device_uuid", "device_type", "zone")

# ------------------------------------------------------------------ legacy names (``--legacy-metrics``)
LEGACY_MEMORY_LIMIT: Final = "GPUDeviceMemoryLimit"
LEGACY_CORE_LIMIT: Final = "GPUDeviceCoreLimit"
LEGACY_MEMORY_ALLOCATED: Final = "GPUDeviceMemoryAllocated"
LEGACY_SHARED_NUM: Final = "GPUDeviceSharedNum"
LEGACY_CORE_ALLOCATED: Final = "GPUDeviceCoreAllocated"
LEGACY_OVERVIEW: Final = "nodeGPUOverview"
LEGACY_MEMORY_PERCENTAGE: Final = "nodeGPUMemoryPercentage"
LEGACY_QUOTA_USED: Final = "QuotaUsed"
LEGACY_VGPU_MEMORY_ALLOCATED: Final = "vGPUMemoryAllocated"
LEGACY_VGPU_CORE_ALLOCATED: Final = "vGPUCoreAllocated"
LEGACY_HOST_MEMORY: Final = "HostGPUMemoryUsage"
LEGACY_HOST_CORE: Final = "HostCoreUtilization"

LEGACY_DEVICE_LABELS: Final = ("nodeid", "deviceuuid", "deviceidx", "devicetype", "zone")
LEGACY_DEVICE_CORES_LABELS: Final = ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicetype", "zone")
LEGACY_OVERVIEW_LABELS: Final = ("nodeid", "deviceuuid", "deviceidx", "devicecores", "devicememorylimit",
                                 "devicetype", "zone")
LEGACY_PERCENTAGE_LABELS: Final = ("nodeid", "deviceuuid", "deviceidx", "zone")
LEGACY_QUOTA_LABELS: Final = ("quotanamespace", "quotaName", "limit", "zone")
LEGACY_CONTAINER_LABELS: Final = ("podnamespace", "nodename", "podname", "containeridx", "deviceuuid", "zone")
LEGACY_HOST_LABELS: Final = ("nodeid", "deviceidx", "deviceuuid", "devicetype", "zone")

SCHEDULER_FAMILIES: Final = (GPU_MEMORY_LIMIT, GPU_CORE_LIMIT, GPU_MEMORY_ALLOCATED, GPU_SHARED_COUNT,
                             GPU_CORE_ALLOCATED, NODE_GPU_OVERVIEW, NODE_GPU_MEMORY_ALLOCATED_RATIO,
                             RESOURCE_QUOTA_USED, VGPU_MEMORY_ALLOCATED, VGPU_CORE_ALLOCATED)
LEGACY_SCHEDULER_FAMILIES: Final = (LEGACY_MEMORY_LIMIT, LEGACY_CORE_LIMIT, LEGACY_MEMORY_ALLOCATED,
                                    LEGACY_SHARED_NUM, LEGACY_CORE_ALLOCATED, LEGACY_OVERVIEW,
                                    LEGACY_MEMORY_PERCENTAGE, LEGACY_QUOTA_USED, LEGACY_VGPU_MEMORY_ALLOCATED,
                                    LEGACY_VGPU_CORE_ALLOCATED)

QuotaNames = Mapping[str, tuple[str, str]]
"""vendor key -> (memory resource, cores resource), e.g. ``nvidia -> (nvidia.com/gpumem,
nvidia.com/gpucores)``: HAMi's ``quota_name`` values (a namespace's ``limits.<name>`` quota)."""

StateSource = ClusterState | Callable[[], ClusterState]


def vendor_quota_names(registry: VendorRegistry | None = None) -> dict[str, tuple[str, str]]:
    """Each vendor's (memory, cores) resource names, HAMi's ``quota_name`` values."""
    reg = registry or VendorRegistry.from_settings(DeviceSettings())
    return {v.names.vendor: (v.names.resource_memory, v.names.resource_cores) for v in reg
            if v.names.resource_memory and v.names.resource_cores}


def _pct(core_milli: float) -> float:
    """Core milli (1000 = a device) -> HAMi's core percent (100 = a device)."""
    return float(core_milli) / PERCENT_TO_CORE_MILLI


def _fmt(v: float) -> str:
    """A number as Go's ``fmt.Sprint`` writes an int32 (HAMi's label values)."""
    return str(int(v))


class HamiSchedulerCollector(Collector):
    """HAMi scheduler families read from a :class:`ClusterState` at scrape time.

    ``state`` is the state or a function returning the current one (the Kubernetes backend rebuilds its
    state when a node's devices change). ``nodes`` limits the device families to some nodes (an agent exports
    its own). ``quota_names`` maps a vendor to its memory and core resource names for
    ``hami_resource_quota_used`` (vendors missing from it are left out of that family)."""

    def __init__(self, state: StateSource, *, lock: threading.RLock | None = None, legacy: bool = False,
                 nodes: Sequence[str] | None = None, quota_names: QuotaNames | None = None) -> None:
        self._state = state
        self.lock = lock or threading.RLock()
        self.legacy = legacy
        self.nodes = None if nodes is None else list(nodes)
        self.quota_names = dict(quota_names) if quota_names is not None else vendor_quota_names()

    def state(self) -> ClusterState:
        return self._state() if callable(self._state) else self._state

    def describe(self) -> list[Metric]:
        return []  # unchecked: the families are fixed but their label values are not known in advance

    def collect(self) -> Iterator[Metric]:
        with self.lock:
            return iter(self._collect(self.state()))

    def _collect(self, st: ClusterState) -> list[Metric]:
        if self.nodes is None:
            rows = [int(i) for i in np.flatnonzero(st.present)]
        else:
            rows = [st.node_index[n] for n in self.nodes if n in st.node_index and st.present[st.node_index[n]]]
        g = GaugeMetricFamily
        mem_limit = g(GPU_MEMORY_LIMIT, "Device memory limit for a certain GPU", labels=DEVICE_LABELS)
        core_limit = g(GPU_CORE_LIMIT, "Device core limit for a certain GPU", labels=DEVICE_LABELS)
        mem_alloc = g(GPU_MEMORY_ALLOCATED, "Device memory allocated for a certain GPU", labels=DEVICE_CORES_LABELS)
        shared = g(GPU_SHARED_COUNT, "Number of containers sharing this GPU", labels=DEVICE_LABELS)
        core_alloc = g(GPU_CORE_ALLOCATED, "Device core allocated for a certain GPU", labels=DEVICE_LABELS)
        overview = g(NODE_GPU_OVERVIEW, "GPU overview on a certain node", labels=OVERVIEW_LABELS)
        mem_ratio = g(NODE_GPU_MEMORY_ALLOCATED_RATIO, "GPU Memory Allocated Percentage on a certain GPU",
                      labels=DEVICE_LABELS)
        out: list[Metric] = [mem_limit, core_limit, mem_alloc, shared, core_alloc, overview, mem_ratio]
        legacy: dict[str, GaugeMetricFamily] = {}
        if self.legacy:
            legacy = {
                LEGACY_MEMORY_LIMIT: g(LEGACY_MEMORY_LIMIT, "Device memory limit for a certain GPU",
                                       labels=LEGACY_DEVICE_LABELS),
                LEGACY_CORE_LIMIT: g(LEGACY_CORE_LIMIT, "Device memory core limit for a certain GPU",
                                     labels=LEGACY_DEVICE_LABELS),
                LEGACY_MEMORY_ALLOCATED: g(LEGACY_MEMORY_ALLOCATED, "Device memory allocated for a certain GPU",
                                           labels=LEGACY_DEVICE_CORES_LABELS),
                LEGACY_SHARED_NUM: g(LEGACY_SHARED_NUM, "Number of containers sharing this GPU",
                                     labels=LEGACY_DEVICE_LABELS),
                LEGACY_CORE_ALLOCATED: g(LEGACY_CORE_ALLOCATED, "Device core allocated for a certain GPU",
                                         labels=LEGACY_DEVICE_LABELS),
                LEGACY_OVERVIEW: g(LEGACY_OVERVIEW, "GPU overview on a certain node", labels=LEGACY_OVERVIEW_LABELS),
                LEGACY_MEMORY_PERCENTAGE: g(LEGACY_MEMORY_PERCENTAGE,
                                            "GPU Memory Allocated Percentage on a certain GPU",
                                            labels=LEGACY_PERCENTAGE_LABELS),
            }
        for i in rows:
            spec = st.nodes[i]
            for dev in spec.devices:
                j = dev.index
                node, uuid, idx, typ = spec.name, dev.uuid, str(j), dev.model
                total_mem = float(st.dev_mem_cap[i, j]) * MIB
                used_mem = float(st.dev_mem_used[i, j]) * MIB
                total_core = _pct(float(st.dev_core_cap[i, j]))
                used_core = _pct(float(st.dev_core_used[i, j]))
                tasks = float(st.dev_tasks[i, j])
                cores_label = _fmt(total_core)
                mem_limit.add_metric([node, uuid, idx, typ, ZONE], total_mem)
                core_limit.add_metric([node, uuid, idx, typ, ZONE], total_core)
                mem_alloc.add_metric([node, uuid, idx, cores_label, typ, ZONE], used_mem)
                shared.add_metric([node, uuid, idx, typ, ZONE], tasks)
                core_alloc.add_metric([node, uuid, idx, typ, ZONE], used_core)
                overview.add_metric([node, uuid, idx, cores_label, _fmt(st.dev_mem_cap[i, j]), typ, ZONE], used_mem)
                if total_mem > 0:
                    mem_ratio.add_metric([node, uuid, idx, typ, ZONE], used_mem / total_mem)
                if legacy:
                    legacy[LEGACY_MEMORY_LIMIT].add_metric([node, uuid, idx, typ, ZONE], total_mem)
                    legacy[LEGACY_CORE_LIMIT].add_metric([node, uuid, idx, typ, ZONE], total_core)
                    legacy[LEGACY_MEMORY_ALLOCATED].add_metric([node, uuid, idx, cores_label, typ, ZONE], used_mem)
                    legacy[LEGACY_SHARED_NUM].add_metric([node, uuid, idx, typ, ZONE], tasks)
                    legacy[LEGACY_CORE_ALLOCATED].add_metric([node, uuid, idx, typ, ZONE], used_core)
                    legacy[LEGACY_OVERVIEW].add_metric(
                        [node, uuid, idx, cores_label, _fmt(st.dev_mem_cap[i, j]), typ, ZONE], used_mem)
                    if total_mem > 0:
                        legacy[LEGACY_MEMORY_PERCENTAGE].add_metric([node, uuid, idx, ZONE], used_mem / total_mem)
        out += list(legacy.values())
        out += self._pods(st, set(rows))
        return out

    def _pods(self, st: ClusterState, rows: set[int]) -> list[Metric]:
        g = GaugeMetricFamily
        vmem = g(VGPU_MEMORY_ALLOCATED, "vGPU memory allocated from a container", labels=CONTAINER_LABELS)
        vcore = g(VGPU_CORE_ALLOCATED, "vGPU core allocated from a container", labels=CONTAINER_LABELS)
        quota = g(RESOURCE_QUOTA_USED, "resourcequota usage for a certain device", labels=QUOTA_LABELS)
        out: list[Metric] = [vmem, vcore, quota]
        lvmem = lvcore = lquota = None
        if self.legacy:
            lvmem = g(LEGACY_VGPU_MEMORY_ALLOCATED, "vGPU memory allocated from a container",
                      labels=LEGACY_CONTAINER_LABELS)
            lvcore = g(LEGACY_VGPU_CORE_ALLOCATED, "vGPU core allocated from a container",
                       labels=LEGACY_CONTAINER_LABELS)
            lquota = g(LEGACY_QUOTA_USED, "resourcequota usage for a certain device", labels=LEGACY_QUOTA_LABELS)
            out += [lvmem, lvcore, lquota]
        used: dict[tuple[str, str], float] = {}
        for alloc in list(st.allocations.values()):
            ns, _, name = alloc.pod_key.partition("/")
            i = st.node_index.get(alloc.node)
            for c, grants in enumerate(alloc.devices):
                for gr in grants:
                    names = self.quota_names.get(gr.vendor)
                    if names is not None:
                        used[ns, names[0]] = used.get((ns, names[0]), 0.0) + gr.memory_mib
                        used[ns, names[1]] = used.get((ns, names[1]), 0.0) + _pct(gr.core_milli)
                    if i is None or i not in rows or not gr.uuid:
                        continue
                    lv = [ns, alloc.node, name, str(c), gr.uuid, ZONE]
                    vmem.add_metric(lv, float(gr.memory_mib) * MIB)
                    vcore.add_metric(lv, _pct(gr.core_milli))
                    if lvmem is not None and lvcore is not None:
                        lvmem.add_metric(lv, float(gr.memory_mib) * MIB)
                        lvcore.add_metric(lv, _pct(gr.core_milli))
        for (ns, quota_name), value in sorted(used.items()):
            # HAMi's limit label is the namespace's ResourceQuota hard limit, "0" when none is known to it
            quota.add_metric([ns, quota_name, "0", ZONE], value)
            if lquota is not None:
                lquota.add_metric([ns, quota_name, "0", ZONE], value)
        return out


class HamiHostCollector(Collector):
    """The node monitor's host families (HAMi's ``vGPUmonitor``) from device samples: memory used in bytes,
    GPU and memory-controller utilisation in percent (0..100)."""

    def __init__(self, source: DeviceSource, lock: threading.RLock | None = None, legacy: bool = False) -> None:
        self.source = source
        self.lock = lock
        self.legacy = legacy

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        with self.lock or nullcontext():
            samples = self.source.sample()
        g = GaugeMetricFamily
        mem = g(HOST_GPU_MEMORY_USED, "GPU device memory usage in bytes", labels=HOST_LABELS)
        util = g(HOST_GPU_UTILIZATION, "GPU core utilization ratio (0-100)", labels=HOST_LABELS)
        mc = g(HOST_GPU_MEMORY_CONTROLLER_UTILIZATION, "GPU memory controller utilization ratio (0-100)",
               labels=HOST_MC_LABELS)
        lmem = g(LEGACY_HOST_MEMORY, "GPU device memory usage", labels=LEGACY_HOST_LABELS)
        lutil = g(LEGACY_HOST_CORE, "GPU core utilization", labels=LEGACY_HOST_LABELS)
        for s in samples:
            lv = [s.hostname, str(s.gpu), s.uuid, s.model_name, ZONE]
            if s.fb_used_mib is not None:
                mem.add_metric(lv, float(s.fb_used_mib) * MIB)
                lmem.add_metric(lv, float(s.fb_used_mib) * MIB)
            if s.gpu_util_pct is not None:
                util.add_metric(lv, float(s.gpu_util_pct))
                lutil.add_metric(lv, float(s.gpu_util_pct))
            if s.mem_copy_util_pct is not None:
                mc.add_metric(lv[1:], float(s.mem_copy_util_pct))
        yield from (mem, util, mc)
        if self.legacy:
            yield from (lmem, lutil)
