"""The control plane process: REST API, SQLite store, scheduling loop, and the Runtime seam.

Backends implement :class:`Runtime`: :class:`EmbeddedRuntime` (ClusterState + Scheduler on a clock) today; the
simulator's ``Simulation`` and the Kubernetes backend plug in through :func:`build_runtime`.
"""

from gpucluster.service.app import ApiError, Principal, Service, ServiceConfig, create_app, open_service
from gpucluster.service.embedded import EmbeddedRuntime
from gpucluster.service.factory import RuntimeOptions, RuntimeUnavailableError, build_runtime
from gpucluster.service.runtime import Job, JobEvent, JobStatus, Runtime
from gpucluster.service.store import Store

__all__ = [
    "ApiError",
    "EmbeddedRuntime",
    "Job",
    "JobEvent",
    "JobStatus",
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
