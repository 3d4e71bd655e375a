"""The control plane process: REST API, SQLite store, scheduling loop, and the Runtime seam.

Backends implement :class:`Runtime` and drive the one job engine (:mod:`gpucluster.jobs`):
:class:`EmbeddedRuntime` (the job simulator on the wall clock) and ``gpucluster.kubernetes.KubeRuntime``, picked by
:func:`build_runtime`.
"""

from gpucluster.embedded import EmbeddedRuntime
from gpucluster.service.app import create_app
from gpucluster.service.auth import Principal, TokenError
from gpucluster.service.core import Service, ServiceConfig, open_service
from gpucluster.service.errors import ApiError
from gpucluster.service.factory import RuntimeOptions, RuntimeUnavailableError, build_runtime
from gpucluster.service.lock import DataDirLock, DataDirLockedError
from gpucluster.service.runtime import Job, JobEvent, JobState, JobStatus, Runtime
from gpucluster.service.store import Store

__all__ = [
    "ApiError",
    "DataDirLock",
    "DataDirLockedError",
    "EmbeddedRuntime",
    "Job",
    "JobEvent",
    "JobState",
    "JobStatus",
    "Principal",
    "Runtime",
    "RuntimeOptions",
    "RuntimeUnavailableError",
    "Service",
    "ServiceConfig",
    "Store",
    "TokenError",
    "build_runtime",
    "create_app",
    "open_service",
]
