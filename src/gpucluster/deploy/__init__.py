"""Deploying onto a GPU kind cluster as nvkind does: the kind config with GPUs given to workers, and
preflight checks of the tools and versions it needs."""

from gpucluster.deploy.kind import KindConfigError, gpu_assignment, kind_config, kind_config_yaml
from gpucluster.deploy.preflight import Check, PreflightReport, run_preflight

__all__ = [
    "Check",
    "KindConfigError",
    "PreflightReport",
    "gpu_assignment",
    "kind_config",
    "kind_config_yaml",
    "run_preflight",
]
