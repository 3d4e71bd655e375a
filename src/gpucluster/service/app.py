"""The control plane process: the FastAPI app over a :class:`~gpucluster.service.core.Service`.

One router per resource (``service.api``: meta, jobs, cluster, tenants, design/experiments) with typed response
models, so ``/openapi.json`` documents answers as well as requests. In front of them the ASGI guard
(``service.api.guard``) refuses oversized bodies and unknown tokens before anything is parsed, and adds the
security headers. The scheduling loop is an asyncio task started by the app's lifespan.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpucluster import __version__
from gpucluster.service.api import cluster, jobs, meta, ops, tasks, tenants
from gpucluster.service.api.deps import PRINCIPAL_KEY, known_query_only
from gpucluster.service.api.guard import Guard
from gpucluster.service.api.models import NAME_RE, ExperimentIn, JobIn, TenantIn
from gpucluster.service.auth import ADMIN_ENV, Principal
from gpucluster.service.core import REMEDIATION_ACTOR, SYNTHETIC_TENANT, Service, ServiceConfig, open_service
from gpucluster.service.errors import ApiError, error_body
from gpucluster.service.logs import AccessLog
from gpucluster.service.ops import Operations
from gpucluster.service.store import StoreWriteError

log = logging.getLogger(__name__)

BODY_UNREADABLE = "There was an error parsing the body"
"""FastAPI's 400 detail for a body it could not decode (bytes that are not UTF-8 under a JSON media type)."""
STORE_RETRY_AFTER_S = 5
"""``Retry-After`` of a 503 answered because the store could not be written (not for a full disk: 507)."""


def _error(status: int, where: str, why: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, where, why), status_code=status, headers=headers)


_JSON_KINDS = {str: "a string", list: "an array", bool: "a boolean", int: "a number", float: "a number",
               type(None): "null"}


def _body_problem(request: Request, err: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(where, why)`` of a body that is not a JSON object at all, said in terms of the request (FastAPI says
    "JSON decode error" at ``where`` = the character offset, or "Input should be a valid dictionary" for a body
    sent as another media type, e.g. curl's default form encoding); None for any other error."""
    loc = tuple(err.get("loc", ()))
    if err.get("type") == "json_invalid" and loc[:1] == ("body",):
        at = f" at character {loc[1]}" if len(loc) > 1 else ""
        detail = str((err.get("ctx") or {}).get("error", "")).strip()
        return "body", f"not valid JSON{at}" + (f": {detail}" if detail else "")
    if err.get("type") in ("model_attributes_type", "dict_type") and loc == ("body",):
        value = err.get("input")
        if isinstance(value, bytes | bytearray):
            media = request.headers.get("content-type", "").split(";")[0].strip()
            came = f"this one came as {media[:100]}" if media else "this one came without a Content-Type"
            return "headers.Content-Type", f"the body must be a JSON object sent with Content-Type: " \
                                           f"application/json ({came})"
        return "body", f"expected a JSON object, got {_JSON_KINDS.get(type(value), 'something else')}"
    return None


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.where, exc.why, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())]
            where = ".".join(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else ".".join(loc)
            if loc and loc[0] == "header":
                where = f"headers.{where}"
            why = str(err.get("msg", "invalid"))
            body = _body_problem(request, err)
            if body is not None:
                where, why = body
            problems.append({"where": (where or "body")[:300], "why": why[:300]})
        first = problems[0] if problems else {"where": "body", "why": "invalid request"}
        return JSONResponse({"error": first["why"], "where": first["where"], "status": 422,
                             "problems": problems[:20]}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        why = str(exc.detail) if exc.detail else "error"
        where = request.url.path[:200]
        if exc.status_code == 404 and why == "Not Found":
            why = f"no such endpoint: {request.method} {request.url.path[:200]}"
        elif exc.status_code == 400 and why == BODY_UNREADABLE:  # FastAPI's answer to a body it cannot decode
            where, why = "body", "the body could not be read as JSON (it must be UTF-8 text)"
        return _error(exc.status_code, where, why, getattr(exc, "headers", None))

    @app.exception_handler(StoreWriteError)
    async def _store_error(request: Request, exc: StoreWriteError) -> JSONResponse:
        # handled here (not by the catch-all below, which Starlette re-raises after answering and which then
        # resets keep-alive connections); the request changed nothing, so the client may retry
        log.error("%s %s: %s", request.method, request.url.path, exc)
        if exc.full:
            return _error(507, "store", f"nothing was changed: the disk under the data directory is full "
                                        f"({type(exc.cause).__name__}: {exc.cause}); free space and retry")
        return _error(503, "store", f"nothing was changed: the store cannot be written now "
                                    f"({type(exc.cause).__name__}: {exc.cause}); retry",
                      {"Retry-After": str(STORE_RETRY_AFTER_S)})

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:  # a bug: log it, say little
        log.exception("internal error on %s %s", request.method, request.url.path)
        return _error(500, "internal", "internal error (logged)")


def create_app(service: Service, mount_web: Callable[[FastAPI], None] | None = None) -> FastAPI:
    """The app over an opened :class:`Service`, behind the guard; ``mount_web`` adds the dashboard routes."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                try:
                    await service.tick_async()
                    service.loop_error = None
                except StoreWriteError as exc:  # the tick keeps its events and stores them when it can
                    if service.loop_error is None:  # log the first, not one line per tick
                        log.error("scheduling loop: %s", exc)
                    service.loop_error = str(exc)
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
            service.close()

    app = FastAPI(
        title="gpucluster control plane",
        version=__version__,
        description="Submit GPU jobs, watch the cluster. Authenticate with `Authorization: Bearer <token>`. "
                    "Limits and the token lifecycle: docs/security.md.",
        lifespan=lifespan,
        docs_url=None,  # FastAPI's Swagger UI loads from a CDN; the web package serves an offline /docs
        redoc_url=None,
        dependencies=[Depends(known_query_only)],
    )
    app.state.service = service
    app.state.ops = Operations(service)
    app.state.metrics = meta.metrics_renderer(service)
    _install_error_handlers(app)
    for module in (meta, jobs, cluster, tenants, tasks, ops):
        app.include_router(module.router)
    if mount_web is not None:
        mount_web(app)
    app.add_middleware(Guard, service=service)  # runs before any body is read
    app.add_middleware(AccessLog, principal_key=PRINCIPAL_KEY)  # outermost: logs refused requests too
    return app


__all__ = [
    "ADMIN_ENV",
    "NAME_RE",
    "REMEDIATION_ACTOR",
    "SYNTHETIC_TENANT",
    "ApiError",
    "ExperimentIn",
    "JobIn",
    "Principal",
    "Service",
    "ServiceConfig",
    "TenantIn",
    "create_app",
    "open_service",
]
