"""Device-metric sources behind one protocol: NVML (real GPUs) and a simulated cluster."""

from gpucluster.model.labels import ACTIVITY_ANNOTATION
from gpucluster.monitoring.collectors.base import DeviceSample, DeviceSource
from gpucluster.monitoring.collectors.nvml import NvmlSource, NvmlUnavailableError, nvml_device_count
from gpucluster.monitoring.collectors.sim import PROFILES, ActivityProfile, Phase, SimSource

__all__ = [
    "ACTIVITY_ANNOTATION",
    "PROFILES",
    "ActivityProfile",
    "DeviceSample",
    "DeviceSource",
    "NvmlSource",
    "NvmlUnavailableError",
    "Phase",
    "SimSource",
    "nvml_device_count",
]
