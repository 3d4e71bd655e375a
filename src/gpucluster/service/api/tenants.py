"""Tenants and their tokens, and the audit log."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query

from gpucluster.model.limits import DEFAULT_TENANT_MAX_PRIORITY
from gpucluster.model.tenants import TenantSettings
from gpucluster.service.api.deps import Auth, Svc, admin_only
from gpucluster.service.api.models import (
    ERRORS,
    NAME_RE,
    AuditLog,
    TenantCreated,
    TenantIn,
    TenantList,
    TenantPatch,
    TenantRow,
    TokenIssued,
    TokensRevoked,
)
from gpucluster.service.auth import Principal, new_tenant_token
from gpucluster.service.core import SYNTHETIC_TENANT, Service
from gpucluster.service.errors import ApiError
from gpucluster.service.runtime import SharedTenantSettings

router = APIRouter(tags=["tenants"])

TenantName = Annotated[str, Path(pattern=NAME_RE, max_length=63)]


async def _publish(service: Service, name: str, settings: TenantSettings,
                   fields: Collection[str] | None = None) -> TenantSettings:
    """Where the replicas share the tenants' settings (Kubernetes), write the change there first, from any replica
    (a worker thread: the write is a request to the API server); every replica, this one too, applies it before
    its next pass. ``fields``: only these change, over the shared value at the write (a PATCH). Returns the
    settings written (``settings`` where nothing is shared). 503 ``where: tenancy`` when it cannot be written:
    nothing changed anywhere."""
    if not isinstance(service.runtime, SharedTenantSettings):
        return settings
    try:
        return await asyncio.to_thread(service.runtime.publish_tenant, name, settings, service.local_tenants(),
                                       fields)
    except RuntimeError as exc:
        raise ApiError(503, "tenancy", f"tenant {name} not changed: {exc}", headers={"Retry-After": "5"}) from None


def _max_priority(row: dict[str, Any]) -> int:
    value = row.get("max_priority")
    return DEFAULT_TENANT_MAX_PRIORITY if value is None else int(value)


@router.get("/api/v1/tenants", response_model=TenantList, responses=ERRORS)
async def tenants(who: Auth, service: Svc) -> dict[str, Any]:
    """Quota, weight, fair share (weight / total weight x GPUs), maximum priority and current use per tenant.
    ``gpus`` is what its running jobs hold (on Kubernetes, with the ResourceClaims other schedulers allocated
    for its pods), each device counted max(compute share, memory share), the figure quota admission uses."""
    rows = {t["name"]: dict(t) for t in service.cached("tenant_rows", service.store.tenants)}
    usage = service.cached("usage", service.runtime.usage_by_tenant)
    for name in usage:
        rows.setdefault(name, {"name": name, "quota_gpus": None, "weight": 1.0, "max_priority": None,
                               "max_queued_jobs": None, "created": None})
    total_gpus = float(service.cached("overview", service.runtime.overview)["devices"])
    total_weight = sum(float(r["weight"]) for r in rows.values()) or 1.0
    out = []
    for name, r in sorted(rows.items()):
        if not who.is_admin and name != who.tenant:
            continue
        u = usage.get(name, {})
        share = float(r["weight"]) / total_weight * total_gpus
        out.append({**r, "max_priority": _max_priority(r), "max_queued_jobs": service.max_queued(r),
                    "fair_share_gpus": round(share, 2),
                    "gpus": round(u.get("gpus", 0.0), 2), "pending_gpus": round(u.get("pending_gpus", 0.0), 2),
                    "running": int(u.get("running", 0)), "pending": int(u.get("pending", 0)),
                    "share_used": round(u.get("gpus", 0.0) / share, 3) if share else 0.0,
                    "over_quota": r["quota_gpus"] is not None and u.get("gpus", 0.0) > float(r["quota_gpus"]) + 1e-9})
    return {"total_gpus": total_gpus, "tenants": out}


@router.post("/api/v1/tenants", status_code=201, response_model=TenantCreated, responses=ERRORS)
async def create_tenant(body: TenantIn, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: create or update a tenant and issue it a new token (shown once); its previous tokens are
    revoked at once."""
    admin_only(who)
    if body.name == SYNTHETIC_TENANT:
        raise ApiError(422, "name", f"{SYNTHETIC_TENANT!r} is reserved for the background workload")
    await _publish(service, body.name, TenantSettings(body.quota_gpus, body.weight, body.max_priority,
                                                       body.max_queued_jobs))
    token = new_tenant_token(body.name)
    # tenant, token and audit line in one transaction, stored before the quota applies
    service.store.upsert_tenant(body.name, body.quota_gpus, body.weight, body.max_priority, token=token,
                                actor=who.actor, max_queued_jobs=body.max_queued_jobs)
    service.sync_quotas()
    service.invalidate_views()
    max_priority = DEFAULT_TENANT_MAX_PRIORITY if body.max_priority is None else body.max_priority
    return {"name": body.name, "quota_gpus": body.quota_gpus, "weight": body.weight, "max_priority": max_priority,
            "max_queued_jobs": service.max_queued({"max_queued_jobs": body.max_queued_jobs}), "token": token}


@router.patch("/api/v1/tenants/{name}", response_model=TenantRow, responses=ERRORS)
async def update_tenant(name: TenantName, body: TenantPatch, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: change a tenant's quota (``quota_gpus``: null = none), weight, maximum priority or limit of queued
    jobs; only the fields given change (the others keep their values), its tokens stay. 404 for a tenant that
    does not exist."""
    admin_only(who)
    row = service.store.tenant(name)
    if row is None:
        raise ApiError(404, "path.name", f"no tenant {name!r} (create it: POST /api/v1/tenants)")
    given = body.model_fields_set
    quota = body.quota_gpus if "quota_gpus" in given else row["quota_gpus"]
    weight = body.weight if body.weight is not None else float(row["weight"])
    most = body.max_priority if "max_priority" in given else row["max_priority"]
    queued = body.max_queued_jobs if "max_queued_jobs" in given else row["max_queued_jobs"]
    changed = {f for f in given if f != "weight" or body.weight is not None}
    written = await _publish(service, name, TenantSettings(None if quota is None else float(quota), weight,
                                                           None if most is None else int(most),
                                                           None if queued is None else int(queued)), changed)
    # the other fields as the shared object holds them (another replica may have changed one meanwhile)
    quota, weight, most, queued = written.quota_gpus, written.weight, written.max_priority, written.max_queued_jobs
    # the change and its audit line in one transaction: a store that takes neither changes nothing (507/503)
    service.store.upsert_tenant(name, quota, weight, most, max_queued_jobs=queued,
                                audit=(who.actor, "tenant.update", name, f"quota={quota} weight={weight} "
                                                                         f"max_priority={most} "
                                                                         f"max_queued_jobs={queued}"))
    service.sync_quotas()
    service.invalidate_views()
    rows: list[dict[str, Any]] = (await tenants(who, service))["tenants"]
    return next(t for t in rows if t["name"] == name)


def _own_tenant(service: Service, who: Principal, name: str) -> None:
    """The admin, or the tenant itself, for a tenant that exists (404 otherwise, as for a missing one)."""
    if not who.is_admin and who.tenant != name:
        raise ApiError(404, "path.name", f"no tenant {name!r}")
    if service.store.tenant(name) is None:
        raise ApiError(404, "path.name", f"no tenant {name!r}")


@router.post("/api/v1/tenants/{name}/tokens", status_code=201, response_model=TokenIssued, responses=ERRORS)
async def issue_token(name: TenantName, who: Auth, service: Svc) -> dict[str, Any]:
    """Issue the tenant a new token (shown once) and revoke its previous ones at once: the admin for any
    tenant, a tenant for itself (its current token stops working with this answer)."""
    _own_tenant(service, who, name)
    token = new_tenant_token(name)
    revoked = service.store.replace_tokens(token, "tenant", name, name,
                                           audit=(who.actor, "tenant.token-issue", name, "{revoked} token(s) revoked"))
    return {"name": name, "token": token, "revoked": revoked}


@router.delete("/api/v1/tenants/{name}/tokens", response_model=TokensRevoked, responses=ERRORS)
async def revoke_tokens(name: TenantName, who: Auth, service: Svc) -> dict[str, Any]:
    """Revoke every token of the tenant at once (its jobs keep running): the admin for any tenant, a tenant
    for itself."""
    _own_tenant(service, who, name)
    revoked = service.store.revoke_tokens("tenant", name,
                                          audit=(who.actor, "tenant.token-revoke", name, "{revoked} token(s) revoked"))
    return {"name": name, "revoked": revoked}


@router.get("/api/v1/audit", response_model=AuditLog, responses=ERRORS)
async def audit(who: Auth, service: Svc, limit: Annotated[int, Query(ge=1, le=1000)] = 200) -> dict[str, Any]:
    admin_only(who)
    return {"entries": service.store.audit_log(limit)}


__all__ = ["router"]
