"""What every router needs: the service, the caller, and the small access rules they share."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Depends, Request, Response
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
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
    """The job held in memory, else a finished one the retention policy pruned, read back from the store."""
    job = service.find_job(job_id) or service.stored_job(job_id)
    if job is None or not visible(who, job):  # a tenant cannot tell others' jobs from missing ones
        raise ApiError(404, "path.id", f"no job {job_id[:64]!r}")
    return job


_QUERY_NAMES: dict[int, frozenset[str]] = {}


def _query_names(dependant: Dependant) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


async def known_query_only(request: Request) -> None:
    """422 for a query parameter the route does not declare (a typo such as ``?stauts=`` is an error, not a
    silently ignored filter) or one given twice (every parameter here takes one value)."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or not request.query_params:
        return
    names = _QUERY_NAMES.get(id(route))
    if names is None:
        names = frozenset(_query_names(route.dependant))
        _QUERY_NAMES[id(route)] = names
    unknown = [k for k in request.query_params if k not in names]
    if unknown:
        known = ", ".join(sorted(names)) or "none"
        raise ApiError(422, f"query.{unknown[0][:64]}", f"unknown query parameter (this endpoint takes: {known})")
    repeated = [k for k in request.query_params if len(request.query_params.getlist(k)) > 1]
    if repeated:
        raise ApiError(422, f"query.{repeated[0]}", "given more than once")


def cached_json(service: Service, key: str, compute: Callable[[], Any]) -> Response:
    """A view encoded once per service version and served as is to every request of that version (the
    response model documents it; encoding a node list per request would cost more than computing it)."""
    body: bytes = service.cached(f"{key}:bytes", lambda: json.dumps(compute(), separators=(",", ":"),
                                                                  allow_nan=False).encode())
    return Response(content=body, media_type="application/json")


__all__ = ["PRINCIPAL_KEY", "Auth", "Svc", "admin_only", "cached_json", "get_service", "job_or_404",
           "known_query_only", "principal", "visible"]
