"""Background work with progress: the design calculator and placement experiments."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Path, Response

from gpucluster.service import background
from gpucluster.service.api.deps import Auth, Svc
from gpucluster.service.api.jobs import check_rate
from gpucluster.service.api.models import ERRORS, ExperimentIn, TaskList, TaskOut
from gpucluster.service.auth import Principal
from gpucluster.service.core import Service
from gpucluster.service.errors import ApiError
from gpucluster.service.limits import MAX_DESIGN_BODY_KEYS, MAX_QUEUED_TASKS
from gpucluster.service.tasks import Task, TaskError

router = APIRouter()

TaskId = Annotated[str, Path(max_length=64)]
MAX_SCALABLE_UNITS = 1000


def task_or_404(service: Service, who: Principal, task_id: str, kind: str) -> Task:
    task = service.tasks.get(task_id)
    if task is None or task.kind != kind or (not who.is_admin and task.owner != who.actor):
        raise ApiError(404, "path.id", f"no {kind} task {task_id[:64]!r}")
    return task


def _room(service: Service, who: Principal, kind: str) -> None:
    """A rate-limited start, and at most MAX_QUEUED_TASKS of a kind waiting or running (429 beyond)."""
    check_rate(service, who, "task starts")
    busy = sum(1 for t in service.tasks.list(kind) if t.status in ("queued", "running"))
    if busy >= MAX_QUEUED_TASKS:
        raise ApiError(429, kind, f"{busy} {kind} tasks are queued or running (at most {MAX_QUEUED_TASKS}); "
                                  "retry when one finishes", {"Retry-After": "5"})


def _check_design_body(body: dict[str, Any]) -> None:
    if len(body) > MAX_DESIGN_BODY_KEYS:
        raise ApiError(422, "body", f"at most {MAX_DESIGN_BODY_KEYS} keys")
    units = body.get("scalable_units", 1)
    if isinstance(units, int) and not isinstance(units, bool) and not 1 <= units <= MAX_SCALABLE_UNITS:
        raise ApiError(422, "scalable_units", f"must be within 1..{MAX_SCALABLE_UNITS}")
    req = body.get("requirements")
    cost = req.get("cost") if isinstance(req, dict) else None
    if isinstance(cost, dict) and cost.get("price_catalog") is not None:
        raise ApiError(422, "requirements.cost.price_catalog",
                       "not accepted over the API (it names a file on the server); use the bundled prices")


@router.post("/api/v1/design", status_code=202, response_model=TaskOut, responses=ERRORS, tags=["design"])
async def start_design(body: Annotated[dict[str, Any], Body(examples=[{"preset": "dgx-h100-superpod",
                                                                       "scalable_units": 4}])],
                       who: Auth, service: Svc) -> dict[str, Any]:
    """Run the design calculator in the background: ``{"preset": "dgx-h100-superpod", "scalable_units":
    4}`` or ``{"requirements": {...}}`` (see docs/design.md). Poll ``GET /api/v1/design/{id}``."""
    if not background.design_available():
        raise ApiError(501, "design", "the design calculator is not installed")
    _check_design_body(body)
    try:
        req = background.parse_design_input(body)
    except TaskError as exc:
        raise ApiError(422, exc.where, exc.why) from None
    _room(service, who, "design")
    task = service.tasks.start("design", who.actor, lambda report, t: background.run_design(req, report, t))
    return task.to_dict()


@router.get("/api/v1/design/{task_id}", response_model=TaskOut, responses=ERRORS, tags=["design"])
async def get_design(task_id: TaskId, who: Auth, service: Svc) -> dict[str, Any]:
    return task_or_404(service, who, task_id, "design").to_dict()


IMAGES: dict[int | str, dict[str, Any]] = {200: {"content": {"image/svg+xml": {}, "image/png": {}, "text/csv": {},
                                                             "application/yaml": {}}}}
MEDIA = {".svg": "image/svg+xml", ".png": "image/png", ".csv": "text/csv; charset=utf-8",
         ".yaml": "application/yaml"}
"""A design's files: the topology diagram, the cable list (``cables.csv``), the cluster spec
(``cluster-spec.yaml``, what ``gpucluster up --spec`` and ``whatif`` read)."""


@router.get("/api/v1/design/{task_id}/{filename}", response_class=Response, responses={**IMAGES, **ERRORS},
            tags=["design"])
async def design_file(task_id: TaskId, filename: Annotated[str, Path(max_length=128)], who: Auth,
                      service: Svc) -> Response:
    task = task_or_404(service, who, task_id, "design")
    data = task.files.get(filename)
    if data is None:
        raise ApiError(404, "path.filename", f"no file {filename[:64]!r} (yet); have {sorted(task.files)}")
    ext = filename[filename.rfind("."):]
    headers = {"Content-Security-Policy": "sandbox"}
    if ext in (".csv", ".yaml"):
        headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return Response(content=data, media_type=MEDIA.get(ext, "application/octet-stream"), headers=headers)


@router.post("/api/v1/experiments", status_code=202, response_model=TaskOut, responses=ERRORS,
             tags=["experiments"])
async def start_experiment(body: ExperimentIn, who: Auth, service: Svc) -> dict[str, Any]:
    """Placement sweep: the same synthetic job stream under each policy on a fresh copy of the cluster."""
    from gpucluster.scheduler import PROFILES

    bad = [p for p in body.policies if p not in PROFILES]
    if bad:
        raise ApiError(422, "policies", f"unknown policy {bad[0][:64]!r}; known: {', '.join(sorted(PROFILES))}")
    _room(service, who, "experiment")
    cluster = getattr(service.runtime, "cluster", None)
    if cluster is None:
        from gpucluster.spec import load_cluster

        cluster = load_cluster(None)
    task = service.tasks.start("experiment", who.actor, lambda report, t: background.run_placement_sweep(
        cluster, list(body.policies), body.jobs, body.seed, report, t))
    return task.to_dict()


@router.get("/api/v1/experiments", response_model=TaskList, responses=ERRORS, tags=["experiments"])
async def list_experiments(who: Auth, service: Svc) -> dict[str, Any]:
    items = [t.to_dict() for t in service.tasks.list("experiment") if who.is_admin or t.owner == who.actor]
    return {"experiments": sorted(items, key=lambda t: -float(t["created"]))}


@router.get("/api/v1/experiments/{task_id}", response_model=TaskOut, responses=ERRORS, tags=["experiments"])
async def get_experiment(task_id: TaskId, who: Auth, service: Svc) -> dict[str, Any]:
    return task_or_404(service, who, task_id, "experiment").to_dict()


__all__ = ["router", "task_or_404"]
