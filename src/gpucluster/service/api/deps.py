"""What every router needs: the service, the caller, and the small access rules they share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from gpucluster.service.auth import Principal, authenticate
from gpucluster.service.core import Service
from gpucluster.service.errors import ApiError
from gpucluster.service.runtime import Job

PRINCIPAL_KEY = "gpucluster.principal"
"""Where the ASGI guard leaves the authenticated caller in the request scope."""

_bearer = HTTPBearer(auto_error=False, description="An admin or tenant token: `Authorization: Bearer <token>`.")


def get_service(request: Request) -> Service:
    service: Service = request.app.state.service
    return service


async def principal(request: Request,
                    _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)] = None) -> Principal:
    """The caller: authenticated by the guard before the body was read (or here, for an app without it)."""
    found = request.scope.get(PRINCIPAL_KEY)
    if isinstance(found, Principal):
        return found
    return authenticate(get_service(request).store, request.headers.get("authorization", ""))


Auth = Annotated[Principal, Depends(principal)]
Svc = Annotated[Service, Depends(get_service)]


def admin_only(who: Principal) -> None:
    if not who.is_admin:
        raise ApiError(403, "token", "this needs the admin token")


def visible(who: Principal, job: Job) -> bool:
    return who.is_admin or job.tenant == who.tenant


def job_or_404(service: Service, who: Principal, job_id: str) -> Job:
    job = service.find_job(job_id)
    if job is None or not visible(who, job):  # a tenant cannot tell others' jobs from missing ones
        raise ApiError(404, "path.id", f"no job {job_id[:64]!r}")
    return job


def cached_json(service: Service, key: str, compute: Callable[[], Any]) -> Response:
    """A view encoded once per service version and served as is to every request of that version (the
    response model documents it; encoding a node list per request would cost more than computing it)."""
    body: bytes = service.cached(f"{key}:bytes", lambda: json.dumps(compute(), separators=(",", ":"),
                                                                  allow_nan=False).encode())
    return Response(content=body, media_type="application/json")


__all__ = ["PRINCIPAL_KEY", "Auth", "Svc", "admin_only", "cached_json", "get_service", "job_or_404", "principal",
           "visible"]
