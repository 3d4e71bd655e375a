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
from collections.abc import AsyncIterator, Callable

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

STORE_RETRY_AFTER_S = 5
"""``Retry-After`` of a 503 answered because the store could not be written (not for a full disk: 507)."""


def _error(status: int, where: str, why: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, where, why), status_code=status, headers=headers)


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(exc.status, exc.where, exc.why, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        problems = []
        for err in exc.errors():
            loc = [str(p) for p in err.get("loc", ())]
            where = ".".join(loc[1:]) if loc and loc[0] in ("body", "query", "path", "header") else ".".join(loc)
            if loc and loc[0] == "header":
                where = f"headers.{where}"
            problems.append({"where": (where or "body")[:300], "why": str(err.get("msg", "invalid"))[:300]})
        first = problems[0] if problems else {"where": "body", "why": "invalid request"}
        return JSONResponse({"error": first["why"], "where": first["where"], "status": 422,
                             "problems": problems[:20]}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        why = str(exc.detail) if exc.detail else "error"
        if exc.status_code == 404 and why == "Not Found":
            why = f"no such endpoint: {request.method} {request.url.path[:200]}"
        return _error(exc.status_code, request.url.path[:200], why, getattr(exc, "headers", None))

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
