"""Jobs: submit (admitted in full before it is committed), list, read, cancel."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import math
import sqlite3
import time
import uuid
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query, Response
from fastapi.responses import StreamingResponse

from gpucluster.jobs import Fail, job_spec, transition
from gpucluster.model.limits import DEFAULT_TENANT_MAX_PRIORITY, MAX_REPLICAS
from gpucluster.service.api.deps import Auth, Svc, job_or_404, visible
from gpucluster.service.api.models import ERRORS, JobDetail, JobIn, JobList, JobOut
from gpucluster.service.auth import Principal
from gpucluster.service.core import SYNTHETIC_TENANT, Service
from gpucluster.service.errors import ApiError
from gpucluster.service.limits import MAX_IDEMPOTENCY_KEY_CHARS, TokenBucket
from gpucluster.service.runtime import Job, JobEvent, JobState, JobStatus, PodLogs
from gpucluster.service.store import StoreWriteError

log = logging.getLogger(__name__)
router = APIRouter(tags=["jobs"])

IdempotencyKey = Annotated[str | None, Header(
    alias="Idempotency-Key", max_length=MAX_IDEMPOTENCY_KEY_CHARS, pattern=r"^[\x21-\x7e]+$",
    description="A client-chosen key: a retry with the same key and body answers 200 with the job the first "
                "request created instead of creating another (the same key with another body is 409).")]


DEFAULT_TENANT = "default"
"""The tenant of the admin's jobs that name none (always allowed, created on first use)."""


def _tenant_of(body: JobIn, who: Principal) -> str:
    if who.is_admin:
        tenant = body.tenant or DEFAULT_TENANT
        if tenant == SYNTHETIC_TENANT:
            raise ApiError(422, "tenant", f"{SYNTHETIC_TENANT!r} is reserved for the background workload")
        return tenant
    if body.tenant is not None and body.tenant != who.tenant:
        raise ApiError(403, "tenant", f"your token is for tenant {who.tenant!r}, not {body.tenant!r}")
    assert who.tenant is not None
    return who.tenant


def check_rate(service: Service, who: Principal, what: str) -> None:
    """Spend one of the caller's submissions (tenants only); 429 with Retry-After when there is none left."""
    if who.is_admin or who.tenant is None:
        return
    wait = service.limiter.take(who.tenant)
    if wait > 0:
        raise ApiError(429, "tenant", f"tenant {who.tenant} is over its rate of {service.config.rates.submit_per_s:g} "
                                      f"{what} per second; retry in {wait:.1f} s",
                       {"Retry-After": TokenBucket.retry_after(wait)})


def _admit_queued(service: Service, tenant: str, row: dict[str, Any] | None) -> None:
    """429 when the tenant already has its limit of pending jobs (whoever submits: the limit keeps the
    scheduling pass and the store in bounds)."""
    most = service.max_queued(row)
    pending = service.pending_jobs(tenant)
    if pending >= most:
        raise ApiError(429, "tenant", f"tenant {tenant} has {pending} job(s) pending, its limit of queued jobs is "
                                      f"{most} (max_queued_jobs); wait for some to start or end, or ask the admin "
                                      "to raise it")


def _admit_priority(service: Service, who: Principal, tenant: str, priority: int,
                    row: dict[str, Any] | None) -> None:
    if who.is_admin:
        return
    most = row["max_priority"] if row is not None and row["max_priority"] is not None else DEFAULT_TENANT_MAX_PRIORITY
    if priority > most:
        raise ApiError(422, "priority", f"tenant {tenant} may use priorities up to {most}, got {priority}")


@router.post("/api/v1/jobs", status_code=201, response_model=JobOut,
             responses={200: {"model": JobOut, "description": "A retry with a known Idempotency-Key: the job "
                                                                "the first request created."}, **ERRORS})
async def submit_job(body: JobIn, who: Auth, service: Svc, response: Response,
                     idempotency_key: IdempotencyKey = None) -> dict[str, Any]:
    """Accept a job: validated, checked against the cluster (a job that can never fit is 422 with the reason)
    and the tenant's quota and priority, then committed to the store before this answers 201."""
    tenant = _tenant_of(body, who)
    idem: tuple[str, str, str] | None = None
    if idempotency_key is not None:
        first = service.storing(who.actor, idempotency_key)
        if first is not None:  # a retry while the first request waits for its commit: answer once it is stored
            with contextlib.suppress(Exception):  # the first one failed: this one is a new submission
                await asyncio.shield(first)
        replayed = _replay(service, who, idempotency_key, body, response)
        if replayed is not None:
            return replayed
        idem = (who.actor, idempotency_key, hashlib.sha256(body.model_dump_json().encode()).hexdigest())
    check_rate(service, who, "submissions")
    row = service.store.tenant(tenant)
    if tenant != DEFAULT_TENANT and not service.config.tenants_on_first_use and row is None:
        raise ApiError(422, "tenant", f"no tenant {tenant!r}: create it first (gpucluster tenants create {tenant} "
                                      "[--quota-gpus N], or POST /api/v1/tenants), or start up with --tenants "
                                      "on-first-use")
    _admit_priority(service, who, tenant, body.priority, row)
    _admit_queued(service, tenant, row)
    try:
        job = Job(job_spec(f"j-{uuid.uuid4().hex[:12]}", name=body.name, tenant=tenant, replicas=body.replicas,
                           resources=dict(body.resources), duration_s=body.duration_s,
                           submit_s=service.runtime.now, priority=body.priority, gpu_type=body.gpu_types(),
                           node_selector=body.node_selector, kind=body.kind, preemptible=body.preemptible,
                           submitted_at=time.time(), registry=service.runtime.registry, ref_gpu=body.ref_gpu,
                           work_class=body.work_class, speedup=dict(body.speedup), tokens=body.tokens,
                           workload=body.workload(),
                           claims=[c.model_dump(exclude_none=True) for c in body.claims or ()]))
        service.runtime.validate(job)
    except ValueError as exc:
        where, _, why = str(exc).partition(": ")
        raise ApiError(422, where if why else "resources", why or str(exc)) from None
    # a name conflict only for a job that is valid otherwise (as the API server answers 422 Invalid before 409
    # AlreadyExists); no await between this check and the store_submission call below, so nothing slips between
    if service.config.unique_job_names and (live := service.live_job_named(tenant, body.name)) is not None:
        raise ApiError(409, "name", f"tenant {tenant} already has a {live.status.value} job named {body.name!r}: "
                                    f"{live.id}; cancel it (gpucluster cancel {live.id}), wait for it to finish "
                                    "or choose another name (names are unique among a tenant's live jobs; up "
                                    "--job-names shared lets them repeat)")

    def apply() -> None:  # once stored (its tenant too, in the same transaction)
        service.order[job.id] = None
        service.named(job)
        service.invalidate_views()
        try:
            service.runtime.submit(job)
        except Exception as exc:  # validate built the same pods, so this is a bug: fail the job, keep serving
            log.exception("job %s was committed but the runtime refused it", job.id)
            events = transition(job, Fail(f"accepted but could not be queued: {type(exc).__name__}"),
                                service.runtime.now)
            service.archive[job.id] = job
            service.ended(job)
            service.store.record_events(events)

    try:
        await service.store_submission(job, who.actor, idem, apply)  # a group commit with its neighbours
    except sqlite3.IntegrityError:
        # its Idempotency-Key was stored by a request of the same group commit: answer as a retry would
        replayed = _replay(service, who, idempotency_key, body, response) if idempotency_key is not None else None
        if replayed is None:
            raise
        return replayed
    return job.to_dict()


def _replay(service: Service, who: Principal, key: str, body: JobIn, response: Response) -> dict[str, Any] | None:
    """The job an earlier request with this Idempotency-Key created (200, ``Idempotent-Replayed``); 409 when
    that request had another body; None when there is none."""
    digest = hashlib.sha256(body.model_dump_json().encode()).hexdigest()
    found = service.store.idempotent_job(who.actor, key)
    if found is None:
        return None
    if found[1] != digest:
        raise ApiError(409, "headers.Idempotency-Key", "this key was used for another request body")
    earlier = service.find_job(found[0]) or service.stored_job(found[0])  # pruned since: as it ended
    if earlier is None:
        return None
    response.status_code = 200
    response.headers["Idempotent-Replayed"] = "true"
    return earlier.to_dict()


@router.get("/api/v1/jobs", response_model=JobList, responses=ERRORS)
async def list_jobs(
    who: Auth,
    service: Svc,
    tenant: Annotated[str | None, Query(max_length=63)] = None,
    status: Annotated[JobStatus | None, Query(description="Filter by status.")] = None,
    q: Annotated[str | None, Query(max_length=100, description="Substring of name or id.")] = None,
    include_synthetic: bool = False,
    limit: Annotated[int, Query(ge=1, le=5000)] = 200,
    include: Annotated[Literal["pruned"] | None, Query(description=(
        "pruned: the job history from the store, the pruned jobs included (each with pruned: true), newest "
        "submitted first, a page of at most limit with the cursor of the next in next."))] = None,
    before: Annotated[str | None, Query(max_length=400, description=(
        "include=pruned: the next of the page before (its cursor)."))] = None,
) -> dict[str, Any]:
    """Newest first, the jobs held in memory: pending, running and the finished ones the retention policy keeps
    (``up --finished-job-ttl``, ``--max-finished-jobs``); a finished job pruned since reads back by id
    (``GET /api/v1/jobs/{id}``) and is counted in ``pruned``. ``include=pruned``: the history instead, every
    stored job, paged (:func:`_history`). Tenants only ever see their own jobs."""
    if not who.is_admin:
        tenant = tenant if tenant == who.tenant else (who.tenant if tenant is None else "\0none")
    if include == "pruned":
        return _history(service, tenant, status, q, before, limit)
    if before is not None:
        raise ApiError(422, "query.before", "a cursor pages the history: add include=pruned")
    if include_synthetic or tenant == SYNTHETIC_TENANT:
        pool = sorted(service.all_jobs(), key=lambda j: (j.submitted_at or 0.0, j.submitted_t, j.id),
                      reverse=True)
        source: Any = pool
    else:
        source = service.user_jobs_newest_first()
    if who.is_admin and not (tenant or status or q or include_synthetic):
        newest = [j.to_dict() for _, j in zip(range(limit), source, strict=False)]
        return {"total": len(service.order), "t": service.runtime.now, "jobs": newest, "pruned": service.pruned}
    out: list[dict[str, Any]] = []
    total = 0
    for j in source:
        if (tenant and j.tenant != tenant) or (status is not None and j.status != status) \
                or (q and q not in j.name and q not in j.id) or not visible(who, j):
            continue
        total += 1
        if len(out) < limit:
            out.append(j.to_dict())
    return {"total": total, "t": service.runtime.now, "jobs": out, "pruned": service.pruned}


def _history(service: Service, tenant: str | None, status: JobStatus | None, q: str | None, before: str | None,
             limit: int) -> dict[str, Any]:
    """A page of the job history from the store (``Store.history``, keyset-paged, the same cost at any depth):
    a job held in memory as it is now (``pruned: false``), a pruned one as it ended (``pruned: true``); ``next`` is
    the cursor of the page after (``before``), None on the last page. Filters apply to the stored status (a tick
    behind at most). The background workload's jobs are not stored, so never listed here."""
    cursor = None
    if before is not None:
        t, sep, last = before.partition(":")
        try:
            at = float(t)
        except ValueError:
            at = math.nan
        if not sep or not last or not math.isfinite(at):
            raise ApiError(422, "query.before", "expected the next of a page (SUBMITTED_AT:ID)")
        cursor = (at, last)
    stored, total = service.store.history(tenant=tenant, status=status.value if status is not None else None, q=q,
                                          before=cursor, limit=limit + 1, registry=service.runtime.registry)
    out = []
    for job in stored[:limit]:
        held = service.find_job(job.id)
        row = (held or job).to_dict()
        row["pruned"] = held is None
        out.append(row)
    last_job = stored[limit - 1] if len(stored) > limit else None
    nxt = f"{last_job.spec.submitted_at!r}:{last_job.id}" if last_job is not None else None
    return {"total": total, "t": service.runtime.now, "jobs": out, "pruned": service.pruned, "next": nxt}


@router.get("/api/v1/jobs/{job_id}", response_model=JobDetail, responses=ERRORS)
async def get_job(job_id: str, who: Auth, service: Svc) -> dict[str, Any]:
    job = job_or_404(service, who, job_id)
    out = job.to_dict()
    out["events"] = [] if job.synthetic else service.store.job_events(job.id)
    out["pruned"] = service.find_job(job.id) is None
    return out


@router.get("/api/v1/jobs/{job_id}/logs", response_class=StreamingResponse, responses={
    200: {"content": {"text/plain": {}}, "description": "The container log (streamed while it runs with follow)."},
    **ERRORS})
async def job_logs(
    job_id: str, who: Auth, service: Svc,
    replica: Annotated[int, Query(ge=0, le=MAX_REPLICAS - 1, description="Which replica (pod index).")] = 0,
    follow: Annotated[bool, Query(description="Keep streaming while the container runs.")] = False,
    tail: Annotated[int | None, Query(ge=1, le=100000, description="Only the last N lines.")] = None,
) -> StreamingResponse:
    """The log of one replica's container, read from the cluster (Kubernetes: through the API server, the
    replica's pod of that completion index). 409 when there is none (the embedded backend simulates its jobs;
    a pod that does not exist yet)."""
    job = job_or_404(service, who, job_id)
    if replica >= job.replicas:
        raise ApiError(422, "replica", f"job {job.name} has {job.replicas} replica(s): 0..{job.replicas - 1}")
    runtime = service.runtime
    if not isinstance(runtime, PodLogs):
        raise ApiError(409, "path.id", f"the {runtime.backend} backend simulates its jobs: there are no container "
                                       "logs (run on Kubernetes: gpucluster up --kubeconfig)")
    try:
        chunks = runtime.logs(job.id, replica, follow, tail)
    except LookupError as exc:
        raise ApiError(409, "path.id", str(exc).strip("'\"")) from None
    return StreamingResponse(chunks, media_type="text/plain; charset=utf-8")


@router.delete("/api/v1/jobs/{job_id}", response_model=JobOut, responses=ERRORS)
async def cancel_job(job_id: str, who: Auth, service: Svc) -> dict[str, Any]:
    """Cancel a pending or running job (409 if it already finished)."""
    job = job_or_404(service, who, job_id)
    if job.status.terminal:
        raise ApiError(409, "path.id", f"job {job_id} already {job.status.value}")
    live = service.runtime.job(job_id)
    if live is None:  # a terminal job from the archive is caught above; a live one is in the runtime
        raise ApiError(409, "path.id", f"job {job_id} is not running here")
    message = f"cancelled by {who.actor}"
    if not live.synthetic:  # stored first: a cancel the store did not take changes nothing (507/503)
        service.store.record_events([JobEvent(job_id, service.runtime.now, "cancelled", JobState.CANCELLED, message)],
                                    audit=(who.actor, "job.cancel", job_id, live.name))
    cancelled = service.runtime.cancel(job_id)
    if cancelled is None:
        raise ApiError(409, "path.id", f"job {job_id} is not running here")
    service.invalidate_views()
    service.ended(cancelled)
    if not cancelled.synthetic:
        cancelled.message = message
        try:  # its run fields (when it ended); the cancellation itself is stored above
            service.store.record_events([], {job_id: cancelled})
        except StoreWriteError as exc:
            log.warning("job %s cancelled; its end time was not stored: %s", job_id, exc)
    return cancelled.to_dict()


__all__ = ["check_rate", "router"]
