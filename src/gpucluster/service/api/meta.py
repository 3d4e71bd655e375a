"""Meta routes: liveness, Prometheus metrics, who am I, and the admin token's rotation."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpucluster import __version__
from gpucluster.model import ClusterState
from gpucluster.service import background
from gpucluster.service.api.deps import Auth, Svc, admin_only
from gpucluster.service.api.models import ERRORS, Health, TokenIssued, WhoAmI
from gpucluster.service.auth import authenticate, new_admin_token, save_admin_token
from gpucluster.service.core import Service
from gpucluster.service.errors import ApiError
from gpucluster.service.runtime import JobStatus
from gpucluster.service.store import StoreWriteError

router = APIRouter(tags=["meta"])

TENANT_GPUS_HELD = "gpucluster_tenant_gpus_held"
TENANT_GPUS_PENDING = "gpucluster_tenant_gpus_pending"
TENANT_QUOTA_GPUS = "gpucluster_tenant_quota_gpus"
TENANT_JOBS_PENDING = "gpucluster_tenant_jobs_pending"
JOBS_PRUNED = "gpucluster_jobs_pruned"
"""Counter (exposed as ``gpucluster_jobs_pruned_total``) of finished jobs the retention policy took out of memory."""


class TenantCollector(Collector):
    """Per tenant, at scrape time: the GPU-equivalents its running jobs hold and its queued jobs ask for (the
    figure quota admission and ``GET /api/v1/tenants`` use: ``gpucluster.model.share``), its pending jobs and its
    quota: one series per tenant, whatever is queued (read from the runtime's counts, no scan of the jobs)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    def collect(self) -> Iterator[Metric]:
        usage = self.service.runtime.usage_by_tenant()
        held = GaugeMetricFamily(TENANT_GPUS_HELD, "GPU-equivalents the tenant's running jobs hold (each device "
                                 "counts max(compute share, memory share)).", labels=["tenant"])
        pending = GaugeMetricFamily(TENANT_GPUS_PENDING, "GPU-equivalents the tenant's queued jobs ask for at "
                                    "least.", labels=["tenant"])
        jobs = GaugeMetricFamily(TENANT_JOBS_PENDING, "The tenant's pending jobs (what max_queued_jobs limits).",
                                 labels=["tenant"])
        for tenant in sorted(usage):
            held.add_metric([tenant], float(usage[tenant].get("gpus", 0.0)))
            pending.add_metric([tenant], float(usage[tenant].get("pending_gpus", 0.0)))
            jobs.add_metric([tenant], float(usage[tenant].get("pending", 0.0)))
        quota = GaugeMetricFamily(TENANT_QUOTA_GPUS, "The tenant's GPU-equivalent quota.", labels=["tenant"])
        for row in self.service.store.tenants():
            if row["quota_gpus"] is not None:
                quota.add_metric([str(row["name"])], float(row["quota_gpus"]))
        yield held
        yield pending
        yield jobs
        yield quota
        yield CounterMetricFamily(JOBS_PRUNED, "Finished jobs that left the control plane's memory under the retention "
                                  "policy since it started (they read back from the store by id).",
                                  value=float(self.service.pruned))


def metrics_renderer(service: Service) -> Callable[[], tuple[bytes, str]] | None:
    """``/metrics`` for runtimes that hold a ClusterState: monitoring's allocation collector, queue stats and
    the per-tenant GPU figures."""
    state: Any = getattr(service.runtime, "state", None)
    lock = None
    cluster: Any = getattr(service.runtime, "cluster", None)  # the Kubernetes backend rebuilds its state
    if not isinstance(state, ClusterState) and isinstance(getattr(cluster, "state", None), ClusterState):
        state, lock = (lambda: cluster.state), getattr(cluster, "lock", None)
    elif not isinstance(state, ClusterState):
        return None
    from gpucluster.monitoring.exporter import QueueStats, control_plane_registry
    from gpucluster.monitoring.exposition import Exposition

    kept: Any = getattr(service.runtime, "queue_stats", None)

    def queue() -> QueueStats:
        if callable(kept):  # kept as jobs change (the embedded runtime: gpucluster.jobs.tally): no scan
            stats: QueueStats = kept()
            return stats
        pending = [j for j in service.runtime.jobs() if j.status == JobStatus.PENDING]
        oldest = min((j.submitted_t for j in pending), default=service.runtime.now)
        return QueueStats(pending=sum(j.replicas for j in pending), oldest_wait_s=service.runtime.now - oldest)

    registry, control = control_plane_registry(state, queue, lock, legacy_metrics=service.config.legacy_metrics)
    scheduler: Any = getattr(service.runtime, "scheduler", None)
    if hasattr(scheduler, "on_decision"):  # the embedded runtime's: its decisions feed latency and decisions
        scheduler.on_decision = control.observe_decision
    registry.register(TenantCollector(service))
    exposition = Exposition(registry)

    def render() -> tuple[bytes, str]:
        return exposition.render(), exposition.content_type

    return render


@router.get("/healthz", response_model=Health)
async def healthz(request: Request, service: Svc) -> dict[str, object]:
    """Liveness (no auth). Why a failing scheduling loop fails is shown to the admin token only: the reason
    may name jobs and tenants."""
    error = service.loop_error
    if error is not None:
        try:
            admin = authenticate(service.store, request.headers.get("authorization", "")).is_admin
        except ApiError:
            admin = False
        if not admin:
            error = "the scheduling loop is failing (details in the log, or here with the admin token)"
    return {"ok": service.loop_error is None, "backend": service.runtime.backend, "t": service.runtime.now,
            "ticks": service.ticks, "loop_error": error, "version": __version__}


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}, **ERRORS})
async def prometheus_metrics(request: Request, who: Auth, service: Svc) -> Response:
    """Prometheus exposition of the cluster's allocation metrics (``gpucluster.monitoring.exporter``), the
    queue and each tenant's GPU-equivalents; admin token (configure it as the scrape job's bearer token)."""
    admin_only(who)
    render = request.app.state.metrics
    if render is None:
        raise ApiError(501, "backend", f"the {service.runtime.backend} backend exports no metrics here")
    body, ctype = render()
    return Response(content=body, media_type=ctype)


@router.get("/api/v1/whoami", response_model=WhoAmI, responses=ERRORS)
async def whoami(who: Auth, service: Svc) -> dict[str, object]:
    return {"role": who.role, "tenant": who.tenant, "backend": service.runtime.backend,
            "speed": service.config.speed, "design": background.design_available()}


@router.post("/api/v1/admin/token", status_code=201, response_model=TokenIssued, responses=ERRORS)
async def rotate_admin_token(who: Auth, service: Svc) -> dict[str, object]:
    """Admin: replace the admin token now (the old one stops working with this answer) and save the new one
    in ``DATA_DIR/admin-token``. A token given by ``$GPUCLUSTER_ADMIN_TOKEN`` or ``--admin-token`` is rotated
    by changing it and restarting instead (409 here)."""
    admin_only(who)
    if service.admin_source not in ("file", "generated"):
        raise ApiError(409, "token", f"the admin token comes from {service.admin_source}; change it there and "
                                     "restart (that revokes the old one)")
    token = new_admin_token()
    save_admin_token(service.config.data_dir, token)
    try:
        revoked = service.store.replace_tokens(token, "admin", None, "admin",
                                               audit=(who.actor, "admin.token-rotate", "admin",
                                                      "{revoked} token(s) revoked"))
    except StoreWriteError:  # nothing changed: the saved token goes back to the one that still works
        with contextlib.suppress(OSError):
            save_admin_token(service.config.data_dir, service.admin_token)
        raise
    service.admin_token = token
    return {"name": "admin", "token": token, "revoked": revoked}


__all__ = ["TENANT_GPUS_HELD", "TENANT_GPUS_PENDING", "TENANT_QUOTA_GPUS", "TenantCollector", "metrics_renderer",
           "router"]
