"""Operator routes: the event feed, the queue, the remediation plan, the long history, per-GPU usage and alert
silences (``service.ops``)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request

from gpucluster.monitoring import RemediationConflictError
from gpucluster.service.api.deps import Auth, Svc, admin_only
from gpucluster.service.api.models import (
    ERRORS,
    EventList,
    HistoryOut,
    NodeUsage,
    QueueView,
    RemediationDecision,
    RemediationPlan,
    SilenceIn,
    SilenceList,
    SilenceOut,
)
from gpucluster.service.errors import ApiError
from gpucluster.service.ops import Operations, Silence, visible_tenant

router = APIRouter(tags=["operations"])

MAX_HISTORY_S = 86400.0


def get_ops(request: Request) -> Operations:
    ops: Operations = request.app.state.ops
    return ops


@router.get("/api/v1/events", response_model=EventList, responses=ERRORS)
async def events(
    request: Request, who: Auth, service: Svc,
    cursor: Annotated[str | None, Query(max_length=40, description="The previous answer's cursor: only newer "
                                                                    "events. Without it, the newest `limit`.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    job: Annotated[str | None, Query(max_length=64, description="Only this job's events.")] = None,
) -> dict[str, Any]:
    """Job events (a tenant sees its own jobs') and cluster events (remediation, alerts firing and resolving),
    oldest first; poll with the cursor to follow."""
    try:
        return get_ops(request).events(cursor, limit, visible_tenant(who.is_admin, who.tenant), job)
    except ValueError as exc:
        raise ApiError(422, "query.cursor", str(exc)) from None


@router.get("/api/v1/queue", response_model=QueueView, responses=ERRORS)
async def queue(request: Request, who: Auth, service: Svc,
                include_synthetic: bool = False) -> dict[str, Any]:
    """Pending jobs in the order they will be tried: position, why each waits, a rough start estimate. A tenant
    sees its own rows (positions are in the whole queue)."""
    out = get_ops(request).queue(visible_tenant(who.is_admin, who.tenant))
    if not (who.is_admin and include_synthetic):
        out["jobs"] = [r for r in out["jobs"] if not r["synthetic"]]
    return out


@router.get("/api/v1/remediations", response_model=RemediationPlan, responses=ERRORS)
async def remediations(request: Request, who: Auth, service: Svc) -> dict[str, Any]:
    """What automatic remediation may do (per action: on, dry-run or off), what it plans but may not do (dry-run
    actions whose alert still fires) and everything it decided, newest first."""
    return get_ops(request).remediation()


RemediationId = Annotated[str, Path(max_length=64)]


def _decide(request: Request, service: Svc, who: Auth, rid: str, decision: str) -> dict[str, Any]:
    admin_only(who)
    mon = get_ops(request).monitor
    if mon is None:
        raise ApiError(409, "backend", f"the {service.runtime.backend} backend plans no remediation here")
    try:
        row = mon.approve(rid, who.actor) if decision == "approved" else mon.dismiss(rid, who.actor)
    except LookupError as exc:
        raise ApiError(404, "path.id", str(exc)) from None
    except RemediationConflictError as exc:
        raise ApiError(409, "path.id", str(exc)) from None
    # done: the record goes to the audit log (actor remediation) with the others, and the operator's line
    # after it, now or, when the store cannot take them now, with the next tick
    service.audit_done(who.actor, f"remediation.{'approve' if decision == 'approved' else 'dismiss'}",
                       row["target"], f"{rid} ({row['action']}): {row['detail']}"[:500])
    service.invalidate_views()
    return {"id": rid, "decision": decision, **row}


@router.post("/api/v1/remediations/{rid}/approve", response_model=RemediationDecision, responses=ERRORS)
async def approve_remediation(request: Request, rid: RemediationId, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: carry out a planned (dry-run) remediation now, as ``up --remediate`` would have, without
    restarting ``up``; 404 for an id that is not planned (its alert resolved), 409 when it was already
    approved or dismissed. Audited."""
    return _decide(request, service, who, rid, "approved")


@router.post("/api/v1/remediations/{rid}/dismiss", response_model=RemediationDecision, responses=ERRORS)
async def dismiss_remediation(request: Request, rid: RemediationId, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: drop a planned remediation (not carried out, not planned again while its alert keeps firing);
    404 / 409 as for approve. Audited."""
    return _decide(request, service, who, rid, "dismissed")


@router.get("/api/v1/history", response_model=HistoryOut, responses=ERRORS)
async def history(request: Request, who: Auth, service: Svc,
                  range_s: Annotated[float, Query(gt=0, le=MAX_HISTORY_S, description="How far back, in runtime "
                                                                                      "clock seconds.")] = 3600.0,
                  ) -> dict[str, Any]:
    """Allocation, memory, fragmentation and queue over the last ``range_s`` (a point per 30 clock-s, the last
    20 clock minutes per 5 clock-s)."""
    ov = service.cached("overview-raw", service.runtime.overview)
    fine = list(ov.get("history", []))
    return {"t": service.runtime.now, "range_s": range_s, "points": get_ops(request).history_points(range_s, fine)}


@router.get("/api/v1/nodes/{name}/usage", response_model=NodeUsage, responses=ERRORS)
async def node_usage(request: Request, name: Annotated[str, Path(max_length=253)], who: Auth,
                     service: Svc) -> dict[str, Any]:
    """Per GPU what the device collector reports (utilisation, memory used, temperature, power, last XID) and its
    recent history, beside the allocation ``GET /nodes/{name}`` shows."""
    if service.runtime.node(name) is None:
        raise ApiError(404, "path.name", f"no node {name[:64]!r}")
    mon = get_ops(request).monitor
    devices = mon.device_usage(name) if mon is not None else None
    return {"name": name, "t": service.runtime.now, "available": devices is not None, "devices": devices or []}


@router.get("/api/v1/silences", response_model=SilenceList, responses=ERRORS)
async def silences(request: Request, who: Auth, service: Svc) -> dict[str, Any]:
    """Active alert silences."""
    t = service.runtime.now
    return {"t": t, "silences": [_silence(s) for s in get_ops(request).silences.active(t)]}


def _silence(s: Silence) -> dict[str, Any]:
    return asdict(s)


@router.post("/api/v1/silences", status_code=201, response_model=SilenceOut, responses=ERRORS)
async def add_silence(request: Request, body: SilenceIn, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: mute matching alerts for ``duration_s`` clock seconds (they stay listed, marked ``silenced``, and
    stop counting as firing). Remediation does not change."""
    admin_only(who)
    s = get_ops(request).silences.add(body.alert, body.target, body.duration_s, body.comment, who.actor)
    service.invalidate_views()
    return _silence(s)


@router.delete("/api/v1/silences/{silence_id}", response_model=SilenceOut, responses=ERRORS)
async def remove_silence(request: Request, silence_id: Annotated[str, Path(max_length=64)], who: Auth,
                         service: Svc) -> dict[str, Any]:
    """Admin: end a silence now."""
    admin_only(who)
    s = get_ops(request).silences.remove(silence_id, who.actor)
    if s is None:
        raise ApiError(404, "path.silence_id", f"no silence {silence_id[:64]!r}")
    service.invalidate_views()
    return _silence(s)


__all__ = ["get_ops", "router"]
