"""Upper bounds on every count and size gpucluster accepts from outside (API, CLI, Kubernetes, traces).

Each bound is far above anything a real cluster or job needs and far below what would overflow an ``int64``
array, make a loop run for hours or build a huge integer. Input beyond a bound is refused at the door with
where and why (``docs/security.md`` lists them). Pure constants: every layer may import them.
"""

from __future__ import annotations

from typing import Final

# ---------------------------------------------------------------------------------------------- quantities
MAX_QUANTITY_CHARS: Final = 64
"""Longest text accepted as a Kubernetes quantity (``"16Gi"``, ``"1.5"``, ``"500m"``)."""
MAX_QUANTITY_EXPONENT: Final = 30
"""Largest decimal exponent (either sign) of a quantity's number before its suffix: ``1e30`` is read and then
checked against the field's bound, ``1e31`` or ``1e-31`` is refused before any arithmetic."""
MAX_WHOLE_NUMBER: Final = 2**31 - 1
"""Default bound of an integer field that has no tighter one (Kubernetes' own int32 fields)."""

# ---------------------------------------------------------------------------------------------- pods and jobs
MAX_DEVICES_PER_REQUEST: Final = 128
"""Devices one container may ask for of one vendor (``nvidia.com/gpu``); no node holds more."""
MAX_DEVICE_MEMORY_MIB: Final = 2**24
"""Device memory per device in MiB (16 TiB), asked (``nvidia.com/gpumem``) or offered (a node's devices)."""
MAX_CPU_MILLI: Final = 65_536 * 1000
"""CPU in millicores of a pod or a node (65,536 cores)."""
MAX_MEMORY_MIB: Final = 2**30
"""Host memory in MiB of a pod or a node (1 PiB)."""
MAX_REPLICAS: Final = 256
"""Pods in one job (a gang)."""
MAX_PRIORITY: Final = 1000
"""Highest job priority; a tenant's own maximum (``max_priority``) is at most this."""
DEFAULT_TENANT_MAX_PRIORITY: Final = 100
"""A tenant's maximum job priority unless the admin sets another."""
DEFAULT_TENANT_MAX_QUEUED: Final = 1000
"""Jobs one tenant may have waiting (pending) at once unless the admin sets another limit for it
(``max_queued_jobs``) or for all (``gpucluster up --max-queued-jobs``): 429 beyond it."""
MAX_TENANT_QUEUED: Final = 1_000_000
"""Highest ``max_queued_jobs`` the admin may give a tenant."""
MAX_JOB_DURATION_S: Final = 30 * 86400.0
"""Longest ``duration_s`` of a job submitted to the control plane (30 days)."""
MAX_JOB_TOKENS: Final = 1e16
"""Tokens one inference job may say it processes (``tokens``; ten quadrillion, far above any real job)."""
MAX_JOB_SPEEDUP: Final = 1000.0
"""Largest measured speed of a job on one GPU model relative to its reference GPU (``speedup``)."""

# ---------------------------------------------------------------------------------------------- what a job runs
MAX_IMAGE_CHARS: Final = 512
"""A container image reference."""
MAX_ARGS: Final = 128
"""Items in a job's ``command`` and in its ``args`` (each)."""
MAX_ARG_CHARS: Final = 8192
"""One item of ``command`` or ``args``."""
MAX_ENV: Final = 256
"""Environment variables of a job."""
MAX_ENV_VALUE_CHARS: Final = 32768
"""One environment variable's value."""
MAX_ENV_FROM: Final = 32
"""Secrets and ConfigMaps whose every key becomes a variable."""
MAX_VOLUMES: Final = 64
"""Volume mounts of a job."""
MAX_TOLERATIONS: Final = 64
"""Tolerations of a job's pods."""
MAX_PATH_CHARS: Final = 1024
"""A mount path, sub path or working directory."""

# ---------------------------------------------------------------------------------------------- clusters
MAX_NODES: Final = 50_000
"""Nodes in one cluster (spec file, Node manifests or a trace's cluster)."""
MAX_DEVICES_PER_NODE: Final = 128
"""Devices on one node (a cluster spec pool allows 64; register annotations up to this)."""
MAX_TASKS_PER_DEVICE: Final = 1000
"""Tasks sharing one device (HAMi ``deviceSplitCount``)."""
MAX_LINK_GBPS: Final = 100_000.0
"""Fabric link speed in Gb/s."""

# ---------------------------------------------------------------------------------------------- traces
MAX_TRACE_SECONDS: Final = 1e10
"""Largest time or duration in a trace (about 300 years); NaN and infinity are always refused."""
MAX_TRACE_GPUS: Final = 65_536
"""GPUs of one trace job."""

__all__ = [
    "DEFAULT_TENANT_MAX_PRIORITY",
    "MAX_ARGS",
    "MAX_ARG_CHARS",
    "MAX_CPU_MILLI",
    "MAX_DEVICES_PER_NODE",
    "MAX_DEVICES_PER_REQUEST",
    "MAX_DEVICE_MEMORY_MIB",
    "MAX_ENV",
    "MAX_ENV_FROM",
    "MAX_ENV_VALUE_CHARS",
    "MAX_IMAGE_CHARS",
    "MAX_JOB_DURATION_S",
    "MAX_JOB_SPEEDUP",
    "MAX_JOB_TOKENS",
    "MAX_LINK_GBPS",
    "MAX_MEMORY_MIB",
    "MAX_NODES",
    "MAX_PATH_CHARS",
    "MAX_PRIORITY",
    "MAX_QUANTITY_CHARS",
    "MAX_QUANTITY_EXPONENT",
    "MAX_REPLICAS",
    "MAX_TASKS_PER_DEVICE",
    "MAX_TOLERATIONS",
    "MAX_TRACE_GPUS",
    "MAX_TRACE_SECONDS",
    "MAX_VOLUMES",
    "MAX_WHOLE_NUMBER",
]
