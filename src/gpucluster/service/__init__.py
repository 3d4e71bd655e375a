"""The control plane process: REST API, SQLite store, scheduling loop, and the Runtime seam.

Backends implement :class:`Runtime` and drive the one job engine (:mod:`gpucluster.jobs`):
:class:`EmbeddedRuntime` (the job simulator on the wall clock) and ``gpucluster.kubernetes.KubeRuntime``, picked by
:func:`build_runtime`.
"""

from gpucluster.service.app import ApiError, Principal, Service, ServiceConfig, create_app, open_service
from gpucluster.service.embedded import EmbeddedRuntime
from gpucluster.service.factory import RuntimeOptions, RuntimeUnavailableError, build_runtime
from gpucluster.service.runtime import Job, JobEvent, JobState, Runtime
from gpucluster.service.store import Store

__all__ = [
    "ApiError",
    "EmbeddedRuntime",
    "Job",
    "JobEvent",
    "JobState",
    "Principal",
    "Runtime",
    "RuntimeOptions",
    "RuntimeUnavailableError",
    "Service",
    "ServiceConfig",
    "Store",
    "build_runtime",
    "create_app",
    "open_service",
]
