"""Metric names: dcgm-exporter's for device metrics, ``gpucluster_``-prefixed Prometheus-convention names for
allocation and cluster metrics. Rules, exporter, evaluator and tests all import the names from here."""

from __future__ import annotations

from typing import Final

# ------------------------------------------------------------------ dcgm-exporter (device level)
DCGM_SM_CLOCK: Final = "DCGM_FI_DEV_SM_CLOCK"
"""SM clock, MHz."""
DCGM_MEM_CLOCK: Final = "DCGM_FI_DEV_MEM_CLOCK"
"""Memory clock, MHz."""
DCGM_GPU_TEMP: Final = "DCGM_FI_DEV_GPU_TEMP"
"""GPU temperature, C."""
DCGM_MEMORY_TEMP: Final = "DCGM_FI_DEV_MEMORY_TEMP"
"""Memory temperature, C."""
DCGM_POWER_USAGE: Final = "DCGM_FI_DEV_POWER_USAGE"
"""Power draw, W."""
DCGM_TOTAL_ENERGY: Final = "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"
"""Energy since boot, mJ (counter)."""
DCGM_PCIE_TX_THROUGHPUT: Final = "DCGM_FI_DEV_PCIE_TX_THROUGHPUT"
"""PCIe transmit throughput as NVML reports it, KB (counter in dcgm-exporter's lists up to 3.x)."""
DCGM_PCIE_RX_THROUGHPUT: Final = "DCGM_FI_DEV_PCIE_RX_THROUGHPUT"
"""PCIe receive throughput as NVML reports it, KB (counter in dcgm-exporter's lists up to 3.x)."""
DCGM_PCIE_REPLAY: Final = "DCGM_FI_DEV_PCIE_REPLAY_COUNTER"
"""PCIe replays (counter)."""
DCGM_GPU_UTIL: Final = "DCGM_FI_DEV_GPU_UTIL"
"""GPU utilisation, %."""
DCGM_MEM_COPY_UTIL: Final = "DCGM_FI_DEV_MEM_COPY_UTIL"
"""Memory-copy utilisation, %."""
DCGM_ENC_UTIL: Final = "DCGM_FI_DEV_ENC_UTIL"
DCGM_DEC_UTIL: Final = "DCGM_FI_DEV_DEC_UTIL"
DCGM_XID_ERRORS: Final = "DCGM_FI_DEV_XID_ERRORS"
"""Value of the last XID error seen (0 = none)."""
DCGM_FB_FREE: Final = "DCGM_FI_DEV_FB_FREE"
"""Free framebuffer, MiB."""
DCGM_FB_USED: Final = "DCGM_FI_DEV_FB_USED"
"""Used framebuffer, MiB."""
DCGM_FB_RESERVED: Final = "DCGM_FI_DEV_FB_RESERVED"
"""Framebuffer reserved by the driver, MiB."""
DCGM_VGPU_LICENSE_STATUS: Final = "DCGM_FI_DEV_VGPU_LICENSE_STATUS"
"""vGPU licence status (0 = not a licensed vGPU / unlicensed)."""
DCGM_NVLINK_BANDWIDTH_TOTAL: Final = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
"""NVLink bytes over all links (counter)."""
DCGM_NVLINK_CRC_FLIT_ERRORS: Final = "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"
"""NVLink flow-control CRC errors over all links (counter)."""
DCGM_ECC_DBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"
"""Volatile double-bit ECC errors (counter)."""
DCGM_ECC_SBE_VOL_TOTAL: Final = "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"
"""Volatile single-bit ECC errors (counter)."""
DCGM_UNCORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"
DCGM_CORRECTABLE_REMAPPED_ROWS: Final = "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"
DCGM_ROW_REMAP_FAILURE: Final = "DCGM_FI_DEV_ROW_REMAP_FAILURE"
DCGM_GR_ENGINE_ACTIVE: Final = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"
"""Fraction of time the graphics/compute engine was active, 0..1."""
DCGM_PIPE_TENSOR_ACTIVE: Final = "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"
"""Fraction of cycles the tensor pipes were active, 0..1."""
DCGM_DRAM_ACTIVE: Final = "DCGM_FI_PROF_DRAM_ACTIVE"
"""Fraction of cycles device memory was busy, 0..1."""
DCGM_PCIE_TX_BYTES: Final = "DCGM_FI_PROF_PCIE_TX_BYTES"
"""PCIe transmit rate, bytes/s."""
DCGM_PCIE_RX_BYTES: Final = "DCGM_FI_PROF_PCIE_RX_BYTES"
"""PCIe receive rate, bytes/s."""

DCGM_LABELS: Final = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                      "namespace", "pod", "container")
"""dcgm-exporter's label set; the pod labels are empty for a device nobody holds."""

# ------------------------------------------------------------------ gpucluster (allocation, per device / pod)
DEVICE_ALLOCATED_MEMORY: Final = "gpucluster_device_allocated_memory_bytes"
DEVICE_ALLOCATED_CORES: Final = "gpucluster_device_allocated_cores_ratio"
DEVICE_MEMORY_CAPACITY: Final = "gpucluster_device_memory_capacity_bytes"
DEVICE_TASKS: Final = "gpucluster_device_tasks"
DEVICE_HEALTHY: Final = "gpucluster_device_healthy"
DEVICE_LABELS: Final = ("node", "Hostname", "gpu", "UUID", "modelName", "vendor")

POD_ALLOCATED_MEMORY: Final = "gpucluster_pod_allocated_memory_bytes"
POD_ALLOCATED_CORES: Final = "gpucluster_pod_allocated_cores_ratio"
POD_LABELS: Final = ("namespace", "pod", "tenant", "node", "gpu", "UUID")

NODE_FRAGMENTATION: Final = "gpucluster_node_fragmentation_ratio"
NODE_SCHEDULABLE: Final = "gpucluster_node_schedulable"
NODE_LABELS: Final = ("node",)

TENANT_QUOTA_USED_MEMORY: Final = "gpucluster_tenant_quota_used_memory_bytes"
TENANT_QUOTA_USED_CORES: Final = "gpucluster_tenant_quota_used_cores"
TENANT_QUOTA_USED_DEVICES: Final = "gpucluster_tenant_quota_used_devices"
TENANT_LABELS: Final = ("tenant",)

# ------------------------------------------------------------------ gpucluster (control plane)
QUEUE_PENDING: Final = "gpucluster_scheduler_pending_pods"
QUEUE_OLDEST_PENDING: Final = "gpucluster_scheduler_oldest_pending_seconds"
SCHEDULING_LATENCY: Final = "gpucluster_scheduling_latency_seconds"
SCHEDULING_DECISIONS: Final = "gpucluster_scheduling_decisions"
"""Counter family: exposed as ``gpucluster_scheduling_decisions_total{result=...}``."""

MIB: Final = 1024 * 1024

# ------------------------------------------------------------------ XIDs
CRITICAL_XIDS: Final = (46, 48, 64, 79, 94, 95)
"""XIDs after which the node is drained: 46 GPU stopped processing, 48 double-bit ECC, 64 row-remap failure,
79 GPU fell off the bus, 94/95 contained/uncontained ECC."""
