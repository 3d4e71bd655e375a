"""The control plane process: FastAPI app, bearer-token auth, the scheduling loop.

Concurrency model: every request handler is ``async`` and the scheduling loop is an asyncio task, so the runtime
and the store are only touched from the event loop thread, one call at a time (the Runtime contract). Design and
experiment work runs on worker threads and never touches either.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpucluster import __version__
from gpucluster.jobs import STATUSES, job_spec
from gpucluster.model import ClusterState
from gpucluster.service import background
from gpucluster.service.monitor import describe
from gpucluster.service.runtime import FaultDrill, Job, JobEvent, JobState, RemediationAudit, Runtime
from gpucluster.service.store import Store
from gpucluster.service.tasks import TaskError, TaskManager

log = logging.getLogger(__name__)

ADMIN_ENV = "GPUCLUSTER_ADMIN_TOKEN"
NAME_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
SYNTHETIC_TENANT = "synthetic"
REMEDIATION_ACTOR = "remediation"


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """How ``gpucluster up`` runs."""

    data_dir: Path
    """Where the SQLite store (``gpucluster.db``) and the generated admin token live."""
    speed: float = 1.0
    """Runtime clock seconds per wall-clock second."""
    tick_s: float = 0.25
    """Wall-clock seconds between scheduling-loop ticks."""
    admin_token: str | None = None
    """Admin bearer token; None = ``$GPUCLUSTER_ADMIN_TOKEN``, else the one saved under data_dir, else new."""


class ApiError(Exception):
    """A user error: HTTP ``status`` with a JSON body naming ``where`` and ``why``."""

    def __init__(self, status: int, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.status = status
        self.where = where
        self.why = why


@dataclass(frozen=True, slots=True)
class Principal:
    role: str
    """``admin`` or ``tenant``."""
    tenant: str | None

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def actor(self) -> str:
        return "admin" if self.is_admin else f"tenant:{self.tenant}"


# ---------------------------------------------------------------------------------------------- API models
class JobIn(BaseModel):
    """A job: ``replicas`` identical pods, each with these HAMi-style container limits."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_RE, description="DNS-label job name.")
    tenant: str | None = Field(None, pattern=NAME_RE, description="Tenant; defaults to the caller's tenant.")
    replicas: int = Field(1, ge=1, le=256, description="Pods placed all-or-nothing (a gang).")
    resources: dict[str, int | str] = Field(
        description='Per-pod limits, e.g. {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, '
                    '"nvidia.com/gpumem": 20000, "cpu": "4", "memory": "16Gi"}.')
    duration_s: float | None = Field(None, gt=0, le=30 * 86400, description="Run time; omit to run until deleted.")
    priority: int = Field(0, ge=0, le=1000)
    gpu_type: str | list[str] | None = Field(
        None, description="GPU models the job may use (HAMi nvidia.com/use-gputype: model-name substrings, a "
                          "comma list or a list); omit for any. A gang stays on one model either way.")
    node_selector: dict[str, str] = Field(default_factory=dict,
                                          description="Node labels every pod's node must carry (nodeSelector).")
    kind: Literal["train", "infer"] = Field("train", description="Training or inference job.")
    preemptible: bool = Field(True, description="False: never stopped to make room for another job.")

    def gpu_types(self) -> str:
        raw = self.gpu_type if isinstance(self.gpu_type, list) else [self.gpu_type or ""]
        return ",".join(t.strip() for t in raw if t and t.strip())


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=NAME_RE)
    quota_gpus: float | None = Field(None, ge=0, description="GPU-equivalents the tenant may hold; omit = none.")
    weight: float = Field(1.0, gt=0, le=1000, description="Fair-share weight.")


class ExperimentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    policies: list[str] = Field(default_factory=lambda: ["stranding-fgd", "binpack", "spread"], min_length=1,
                                max_length=4)
    jobs: int = Field(3000, ge=10, le=20000)
    seed: int = 0


# ---------------------------------------------------------------------------------------------- the service
@dataclass
class Service:
    """State shared by the handlers: runtime, store, clock, tasks."""

    runtime: Runtime
    store: Store
    config: ServiceConfig
    admin_token: str
    tasks: TaskManager = field(default_factory=TaskManager)
    archive: dict[str, Job] = field(default_factory=dict)
    """Terminal jobs recovered from the store (the runtime only holds live ones after a restart)."""
    started_wall: float = field(default_factory=time.monotonic)
    clock_origin: float = 0.0
    ticks: int = 0
    loop_error: str | None = None
    order: list[str] = field(default_factory=list)
    """Persisted (user) job ids in submission order: the job list reads it backwards, newest first."""
    version: int = 0
    """Bumped by every tick and every mutation; cached views are valid for one version."""
    _cache: dict[str, Any] = field(default_factory=dict)
    _cache_version: int = -1

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """A view computed at most once per version (many requests share one tick's overview or node list)."""
        if self._cache_version != self.version:
            self._cache.clear()
            self._cache_version = self.version
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def changed(self) -> None:
        self.version += 1

    def clock(self) -> float:
        return self.clock_origin + (time.monotonic() - self.started_wall) * self.config.speed

    def tick(self) -> list[JobEvent]:
        events = self.runtime.advance(self.clock())
        self.ticks += 1
        self.version += 1
        if events:
            self.store.record_events(events)
        self.persist_remediation()
        if self.ticks % 8 == 0:
            self.store.set_meta("clock", repr(self.runtime.now))
        return events

    def persist_remediation(self) -> None:
        """Write the runtime's new remediation audit records to the audit log (actor ``remediation``)."""
        if not isinstance(self.runtime, RemediationAudit):
            return
        records = self.runtime.take_audit_records()
        if records:
            self.store.audit_many((REMEDIATION_ACTOR, f"remediation.{r.action}", r.target, describe(r))
                                  for r in records)

    def find_job(self, job_id: str) -> Job | None:
        return self.runtime.job(job_id) or self.archive.get(job_id)

    def all_jobs(self) -> list[Job]:
        live = self.runtime.jobs()
        seen = {j.id for j in live}
        return live + [j for j in self.archive.values() if j.id not in seen]

    def user_jobs_newest_first(self) -> Iterator[Job]:
        for jid in reversed(self.order):
            job = self.find_job(jid)
            if job is not None:
                yield job

    def sync_quotas(self) -> None:
        self.runtime.set_quotas({t["name"]: float(t["quota_gpus"]) for t in self.store.tenants()
                                 if t["quota_gpus"] is not None})


def _resolve_admin_token(config: ServiceConfig) -> tuple[str, bool]:
    """(token, generated?)."""
    if config.admin_token:
        return config.admin_token, False
    env = os.environ.get(ADMIN_ENV, "").strip()
    if env:
        return env, False
    saved = config.data_dir / "admin-token"
    if saved.is_file():
        text = saved.read_text(encoding="utf-8").strip()
        if text:
            return text, False
    token = "gca_" + secrets.token_urlsafe(24)
    config.data_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(saved, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(token + "\n")
    return token, True


def open_service(runtime: Runtime, config: ServiceConfig) -> tuple[Service, bool]:
    """Open the store, register the admin token, recover persisted jobs into the runtime."""
    store = Store(config.data_dir / "gpucluster.db")
    token, generated = _resolve_admin_token(config)
    store.add_token(token, "admin", None, "admin")
    svc = Service(runtime=runtime, store=store, config=config, admin_token=token)
    clock = store.get_meta("clock")
    svc.clock_origin = max(float(clock), runtime.now) if clock else runtime.now
    if svc.clock_origin > runtime.now:
        runtime.advance(svc.clock_origin)
    svc.sync_quotas()
    recovered: list[JobEvent] = []
    for job in store.load_jobs():
        svc.order.append(job.id)
        if job.state.terminal:
            svc.archive[job.id] = job
            continue
        runtime.restore(job)
        recovered.append(JobEvent(job.id, runtime.now, "requeued", JobState.QUEUED,
                                  "re-queued after a control-plane restart"))
    if recovered:
        store.record_events(recovered)
    store.audit("system", "service.start", "", f"{len(recovered)} live job(s) recovered")
    return svc, generated


async def principal(request: Request) -> Principal:
    """The caller, from ``Authorization: Bearer <token>``; 401 with the reason otherwise."""
    service: Service = request.app.state.service
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if not header:
        raise ApiError(401, "headers.Authorization", "missing bearer token (Authorization: Bearer <token>)")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "headers.Authorization", "expected 'Bearer <token>'")
    found = service.store.lookup_token(token.strip())
    if found is None:
        raise ApiError(401, "headers.Authorization", "unknown token")
    return Principal(found[0], found[1])


Auth = Annotated[Principal, Depends(principal)]


def _metrics_renderer(service: Service) -> Callable[[], tuple[bytes, str]] | None:
    """``/metrics`` for runtimes that hold a ClusterState: monitoring's allocation collector plus queue stats."""
    state = getattr(service.runtime, "state", None)
    if not isinstance(state, ClusterState):
        return None
    from gpucluster.monitoring.exporter import QueueStats, control_plane_registry
    from gpucluster.monitoring.exposition import CONTENT_TYPE, TextRenderer

    def queue() -> QueueStats:
        pending = [j for j in service.runtime.jobs() if j.status == "pending"]
        oldest = min((j.submitted_t for j in pending), default=service.runtime.now)
        return QueueStats(pending=sum(j.replicas for j in pending), oldest_wait_s=service.runtime.now - oldest)

    registry, _ = control_plane_registry(state, queue)
    renderer = TextRenderer()

    def render() -> tuple[bytes, str]:
        return renderer.render(registry), CONTENT_TYPE

    return render


def _error(status: int, where: str, why: str) -> JSONResponse:
    return JSONResponse({"error": why, "where": where, "status": status}, status_code=status)


def create_app(service: Service, mount_web: Callable[[FastAPI], None] | None = None) -> FastAPI:
    """The FastAPI app over an opened :class:`Service`; ``mount_web`` adds the dashboard routes."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                try:
                    service.tick()
                    service.loop_error = None
                except Exception as exc:  # keep serving; report it on /healthz and in the log
                    service.loop_error = f"{type(exc).__name__}: {exc}"
                    log.exception("scheduling loop tick failed")
                await asyncio.sleep(service.config.tick_s)

        task = asyncio.create_task(loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            service.store.set_meta("clock", repr(service.runtime.now))
            service.store.close()

    app = FastAPI(
        title="gpucluster control plane",
        version=__version__,
        description="Submit GPU jobs, watch the cluster. Authenticate with `Authorization: Bearer <token>`.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's Swagger UI loads from a CDN; the web package serves an offline /docs
        redoc_url=None,
    )
    app.state.service = service

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.where, exc.why)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())]
            where = ".".join(loc[1:]) if loc and loc[0] in ("body", "query", "path") else ".".join(loc)
            problems.append({"where": where or "body", "why": str(err.get("msg", "invalid"))})
        first = problems[0] if problems else {"where": "body", "why": "invalid request"}
        return JSONResponse({"error": first["why"], "where": first["where"], "status": 422, "problems": problems},
                            status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        why = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404 and why == "Not Found":
            why = f"no such endpoint: {request.method} {request.url.path}"
        return _error(exc.status_code, request.url.path, why)

    # ------------------------------------------------------------------ auth
    def admin_only(who: Principal) -> None:
        if not who.is_admin:
            raise ApiError(403, "token", "this needs the admin token")

    def visible(who: Principal, job: Job) -> bool:
        return who.is_admin or job.tenant == who.tenant

    def job_or_404(who: Principal, job_id: str) -> Job:
        job = service.find_job(job_id)
        if job is None or not visible(who, job):  # a tenant cannot tell others' jobs from missing ones
            raise ApiError(404, "path.id", f"no job {job_id!r}")
        return job

    # ------------------------------------------------------------------ meta
    @app.get("/healthz", tags=["meta"])
    async def healthz() -> dict[str, Any]:
        """Liveness (no auth)."""
        return {"ok": service.loop_error is None, "backend": service.runtime.backend, "t": service.runtime.now,
                "ticks": service.ticks, "loop_error": service.loop_error, "version": __version__}

    metrics = _metrics_renderer(service)

    @app.get("/metrics", tags=["meta"])
    async def prometheus_metrics(who: Auth) -> Response:
        """Prometheus exposition of the cluster's allocation metrics (``gpucluster.monitoring.exporter``) and
        the queue; admin token (configure it as the scrape job's bearer token)."""
        admin_only(who)
        if metrics is None:
            raise ApiError(501, "backend", f"the {service.runtime.backend} backend exports no metrics here")
        body, ctype = metrics()
        return Response(content=body, media_type=ctype)

    @app.get("/api/v1/whoami", tags=["meta"])
    async def whoami(who: Auth) -> dict[str, Any]:
        return {"role": who.role, "tenant": who.tenant, "backend": service.runtime.backend,
                "speed": service.config.speed, "design": background.design_available()}

    # ------------------------------------------------------------------ jobs
    @app.post("/api/v1/jobs", status_code=201, tags=["jobs"])
    async def submit_job(body: JobIn, who: Auth) -> dict[str, Any]:
        """Accept a job; it is committed to the store before this answers."""
        tenant = body.tenant
        if who.is_admin:
            tenant = tenant or "default"
            if tenant == SYNTHETIC_TENANT:
                raise ApiError(422, "tenant", f"{SYNTHETIC_TENANT!r} is reserved for the background workload")
        elif tenant is None:
            tenant = who.tenant
        elif tenant != who.tenant:
            raise ApiError(403, "tenant", f"your token is for tenant {who.tenant!r}, not {tenant!r}")
        assert tenant is not None
        try:
            job = Job(job_spec(f"j-{uuid.uuid4().hex[:12]}", name=body.name, tenant=tenant, replicas=body.replicas,
                               resources=dict(body.resources), duration_s=body.duration_s,
                               submit_s=service.runtime.now, priority=body.priority, gpu_type=body.gpu_types(),
                               node_selector=body.node_selector, kind=body.kind, preemptible=body.preemptible,
                               submitted_at=time.time()))
            service.runtime.validate(job)
        except ValueError as exc:
            where, _, why = str(exc).partition(": ")
            raise ApiError(422, where if why else "resources", why or str(exc)) from None
        if service.store.tenant(tenant) is None:
            service.store.upsert_tenant(tenant, None, 1.0)
        service.store.insert_job(job, who.actor)
        service.runtime.submit(job)
        service.order.append(job.id)
        service.changed()
        return job.to_dict()

    @app.get("/api/v1/jobs", tags=["jobs"])
    async def list_jobs(
        who: Auth,
        tenant: str | None = None,
        status: Annotated[Literal["pending", "running", "succeeded", "failed", "cancelled"] | None,
                          Query(description="Filter by status.")] = None,
        q: Annotated[str | None, Query(max_length=100, description="Substring of name or id.")] = None,
        include_synthetic: bool = False,
        limit: Annotated[int, Query(ge=1, le=5000)] = 200,
    ) -> dict[str, Any]:
        """Newest first. Tenants only ever see their own jobs."""
        if not who.is_admin:
            tenant = tenant if tenant == who.tenant else (who.tenant if tenant is None else "\0none")
        if include_synthetic or tenant == SYNTHETIC_TENANT:
            pool = sorted(service.all_jobs(), key=lambda j: (j.submitted_at or 0.0, j.submitted_t, j.id),
                          reverse=True)
            source: Any = pool
        else:
            source = service.user_jobs_newest_first()
        if who.is_admin and not (tenant or status or q or include_synthetic):
            newest = [j.to_dict() for _, j in zip(range(limit), source, strict=False)]
            return {"total": len(service.order), "t": service.runtime.now, "jobs": newest}
        out: list[dict[str, Any]] = []
        total = 0
        for j in source:
            if (tenant and j.tenant != tenant) or (status is not None and j.status != status) \
                    or (q and q not in j.name and q not in j.id) or not visible(who, j):
                continue
            total += 1
            if len(out) < limit:
                out.append(j.to_dict())
        return {"total": total, "t": service.runtime.now, "jobs": out}

    @app.get("/api/v1/jobs/{job_id}", tags=["jobs"])
    async def get_job(job_id: str, who: Auth) -> dict[str, Any]:
        job = job_or_404(who, job_id)
        out = job.to_dict()
        out["events"] = [] if job.synthetic else service.store.job_events(job.id)
        return out

    @app.delete("/api/v1/jobs/{job_id}", tags=["jobs"])
    async def cancel_job(job_id: str, who: Auth) -> dict[str, Any]:
        """Cancel a pending or running job (a finished job is returned unchanged)."""
        job = job_or_404(who, job_id)
        if job.state.terminal:
            raise ApiError(409, "path.id", f"job {job_id} already {job.status}")
        cancelled = service.runtime.cancel(job_id)
        assert cancelled is not None
        service.changed()
        if not cancelled.synthetic:
            service.store.record_events([JobEvent(job_id, service.runtime.now, "cancelled", JobState.CANCELLED,
                                                  f"cancelled by {who.actor}")])
            service.store.audit(who.actor, "job.cancel", job_id, cancelled.name)
        return cancelled.to_dict()

    # ------------------------------------------------------------------ cluster
    @app.get("/api/v1/overview", tags=["cluster"])
    async def overview(who: Auth) -> dict[str, Any]:
        out = dict(service.cached("overview", service.runtime.overview))
        out["speed"] = service.config.speed
        if not who.is_admin:  # "your jobs" are the tenant's own
            counts = dict.fromkeys(STATUSES, 0)
            for job in service.user_jobs_newest_first():
                if job.tenant == who.tenant:
                    counts[job.status] += 1
            out["user_jobs"] = counts
        return out

    @app.get("/api/v1/nodes", tags=["cluster"])
    async def nodes(who: Auth) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            rows = service.runtime.nodes()
            return {"total": len(rows), "t": service.runtime.now, "nodes": rows}

        out: dict[str, Any] = service.cached("nodes", compute)
        return out

    @app.get("/api/v1/nodes/{name}", tags=["cluster"])
    async def node(name: str, who: Auth) -> dict[str, Any]:
        found = service.runtime.node(name)
        if found is None:
            raise ApiError(404, "path.name", f"no node {name!r}")
        if not who.is_admin:
            for dev in found.get("devices", []):
                for pod in dev["pods"]:
                    if pod["tenant"] != who.tenant:
                        pod.update(pod="(other tenant)", job="", job_name="", tenant="other")
        return found

    @app.post("/api/v1/nodes/{name}/devices/{index}/fault", tags=["cluster"])
    async def inject_fault(
        name: str, index: int, who: Auth,
        xid: Annotated[int, Query(ge=1, le=999, description="The XID the device reports (79: fallen off the "
                                                             "bus; 46/48/64/79/94/95 are critical).")] = 79,
    ) -> dict[str, Any]:
        """Admin: make a device report an XID through the simulated collector (embedded backend) and evaluate
        the alert rules for its node at once, to watch alerting and automatic remediation."""
        admin_only(who)
        found = service.runtime.node(name)
        if found is None:
            raise ApiError(404, "path.name", f"no node {name!r}")
        if not 0 <= index < int(found["gpus"]):
            raise ApiError(422, "path.index", f"node {name} has devices 0..{int(found['gpus']) - 1}")
        runtime = service.runtime
        if not isinstance(runtime, FaultDrill):
            raise ApiError(409, "backend", f"the {runtime.backend} backend cannot inject faults")
        service.store.audit(who.actor, "device.fault", f"{name}/{index}", f"XID {xid} injected")
        events: list[JobEvent] = []
        runtime.inject_fault(name, index, events, xid=xid)
        service.changed()
        if events:
            service.store.record_events(events)
        service.persist_remediation()
        return {"ok": True, "evicted_user_jobs": sum(1 for e in events if e.kind == "evicted")}

    @app.get("/api/v1/topology", tags=["cluster"])
    async def topology(who: Auth) -> dict[str, Any]:
        out: dict[str, Any] = service.cached("topology", service.runtime.topology)
        return out

    @app.get("/api/v1/alerts", tags=["cluster"])
    async def alerts(who: Auth) -> dict[str, Any]:
        def compute() -> dict[str, Any]:
            items = service.runtime.alerts()
            return {"firing": sum(1 for a in items if a["state"] == "firing"), "alerts": items,
                    "remediations": service.runtime.remediations()}

        out: dict[str, Any] = service.cached("alerts", compute)
        return out

    # ------------------------------------------------------------------ tenants
    @app.get("/api/v1/tenants", tags=["tenants"])
    async def tenants(who: Auth) -> dict[str, Any]:
        """Quota, weight, fair share (weight / total weight x GPUs) and current use per tenant."""
        rows = {t["name"]: t for t in service.cached("tenant_rows", service.store.tenants)}
        usage = service.cached("usage", service.runtime.usage_by_tenant)
        for name in usage:
            rows.setdefault(name, {"name": name, "quota_gpus": None, "weight": 1.0, "created": None})
        total_gpus = float(service.cached("overview", service.runtime.overview)["devices"])
        total_weight = sum(float(r["weight"]) for r in rows.values()) or 1.0
        out = []
        for name, r in sorted(rows.items()):
            u = usage.get(name, {})
            share = float(r["weight"]) / total_weight * total_gpus
            out.append({**r, "fair_share_gpus": round(share, 2), "gpus": round(u.get("gpus", 0.0), 2),
                        "pending_gpus": round(u.get("pending_gpus", 0.0), 2), "running": int(u.get("running", 0)),
                        "pending": int(u.get("pending", 0)),
                        "share_used": round(u.get("gpus", 0.0) / share, 3) if share else 0.0})
        if not who.is_admin:
            out = [t for t in out if t["name"] == who.tenant]
        return {"total_gpus": total_gpus, "tenants": out}

    @app.post("/api/v1/tenants", status_code=201, tags=["tenants"])
    async def create_tenant(body: TenantIn, who: Auth) -> dict[str, Any]:
        """Admin: create or update a tenant and issue it a new token (shown once)."""
        admin_only(who)
        if body.name == SYNTHETIC_TENANT:
            raise ApiError(422, "name", f"{SYNTHETIC_TENANT!r} is reserved for the background workload")
        service.store.upsert_tenant(body.name, body.quota_gpus, body.weight)
        token = f"gct_{body.name}_" + secrets.token_urlsafe(18)
        service.store.add_token(token, "tenant", body.name, body.name)
        service.store.audit(who.actor, "tenant.upsert", body.name,
                            f"quota={body.quota_gpus} weight={body.weight}; token issued")
        service.sync_quotas()
        service.changed()
        return {"name": body.name, "quota_gpus": body.quota_gpus, "weight": body.weight, "token": token}

    @app.get("/api/v1/audit", tags=["tenants"])
    async def audit(who: Auth, limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
        admin_only(who)
        return {"entries": service.store.audit_log(limit)}

    # ------------------------------------------------------------------ design and experiments
    def task_or_404(who: Principal, task_id: str, kind: str) -> Any:
        task = service.tasks.get(task_id)
        if task is None or task.kind != kind or (not who.is_admin and task.owner != who.actor):
            raise ApiError(404, "path.id", f"no {kind} task {task_id!r}")
        return task

    @app.post("/api/v1/design", status_code=202, tags=["design"])
    async def start_design(body: dict[str, Any], who: Auth) -> dict[str, Any]:
        """Run the design calculator in the background: ``{"preset": "dgx-h100-superpod", "scalable_units":
        4}`` or ``{"requirements": {...}}`` (see docs/design.md). Poll ``GET /api/v1/design/{id}``."""
        if not background.design_available():
            raise ApiError(501, "design", "the design calculator is not installed")
        try:
            req = background.parse_design_input(body)
        except TaskError as exc:
            raise ApiError(422, exc.where, exc.why) from None
        task = service.tasks.start("design", who.actor, lambda report, t: background.run_design(req, report, t))
        return task.to_dict()

    @app.get("/api/v1/design/{task_id}", tags=["design"])
    async def get_design(task_id: str, who: Auth) -> dict[str, Any]:
        out: dict[str, Any] = task_or_404(who, task_id, "design").to_dict()
        return out

    @app.get("/api/v1/design/{task_id}/{filename}", tags=["design"])
    async def design_file(task_id: str, filename: str, who: Auth) -> Response:
        task = task_or_404(who, task_id, "design")
        data = task.files.get(filename)
        if data is None:
            raise ApiError(404, "path.filename", f"no file {filename!r} (yet); have {sorted(task.files)}")
        media = "image/svg+xml" if filename.endswith(".svg") else "image/png"
        return Response(content=data, media_type=media)

    @app.post("/api/v1/experiments", status_code=202, tags=["experiments"])
    async def start_experiment(body: ExperimentIn, who: Auth) -> dict[str, Any]:
        """Placement sweep: the same synthetic job stream under each policy on a fresh copy of the cluster."""
        from gpucluster.scheduler import PROFILES

        bad = [p for p in body.policies if p not in PROFILES]
        if bad:
            raise ApiError(422, "policies", f"unknown policy {bad[0]!r}; known: {', '.join(sorted(PROFILES))}")
        cluster = getattr(service.runtime, "cluster", None)
        if cluster is None:
            from gpucluster.spec import load_cluster

            cluster = load_cluster(None)
        task = service.tasks.start("experiment", who.actor, lambda report, t: background.run_placement_sweep(
            cluster, list(body.policies), body.jobs, body.seed, report, t))
        return task.to_dict()

    @app.get("/api/v1/experiments", tags=["experiments"])
    async def list_experiments(who: Auth) -> dict[str, Any]:
        items = [t.to_dict() for t in service.tasks.list("experiment") if who.is_admin or t.owner == who.actor]
        return {"experiments": sorted(items, key=lambda t: -float(t["created"]))}

    @app.get("/api/v1/experiments/{task_id}", tags=["experiments"])
    async def get_experiment(task_id: str, who: Auth) -> dict[str, Any]:
        out: dict[str, Any] = task_or_404(who, task_id, "experiment").to_dict()
        return out

    if mount_web is not None:
        mount_web(app)
    return app

