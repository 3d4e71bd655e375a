"""GPU performance: the catalog of per-model facts (``data/gpu_perf.yaml``) and the speed model.

Pure data and arithmetic, importable from every layer (the job engine, the simulator, design, the control plane
and the dashboard). See docs/gpu-speed.md.
"""

from gpucluster.perf.catalog import PerfCatalog, PerfCatalogError, load_perf_catalog, normalize_name
from gpucluster.perf.model import SpeedModel
from gpucluster.perf.speed import FALLBACK, PRECISIONS, GpuPerf, JobSpeed, Precision, WorkClass, custom_class

__all__ = [
    "FALLBACK",
    "PRECISIONS",
    "GpuPerf",
    "JobSpeed",
    "PerfCatalog",
    "PerfCatalogError",
    "Precision",
    "SpeedModel",
    "WorkClass",
    "custom_class",
    "load_perf_catalog",
    "normalize_name",
]
