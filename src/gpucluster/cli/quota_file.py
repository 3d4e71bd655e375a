"""``simulate --quota``: the hierarchical tenant queue file, read and checked (pydantic: imported only by a
command that reads one, never to build a command's parameters)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster import inputfile
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator import TraceError


class _QueueArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    parent: str = ""
    guarantee: float = Field(default=0.0, ge=0)
    limit: dict[Literal["gpu", "gpumem", "gpucores"], float] = Field(default_factory=dict)
    weight: float = Field(default=1.0, gt=0)


class _QuotaFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queues: list[_QueueArgs] = Field(min_length=1)


def load_quota(path: Path) -> list[QueueSpec]:
    """A queue tree file (YAML: ``queues: [{name, parent, guarantee, limit: {gpu, gpumem, gpucores}, weight}]``;
    a job's tenant names its queue) -> queue specs; raises TraceError saying where and why."""
    try:
        raw = inputfile.load_yaml(path)
    except inputfile.InputFileError as exc:
        raise TraceError(f"--quota {exc}") from None
    try:
        spec = _QuotaFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in err["loc"])
        raise TraceError(f"--quota {path}: {where}: {err['msg']}") from None
    queues = [QueueSpec(q.name, q.parent, q.guarantee, {str(k): v for k, v in q.limit.items()}, q.weight)
              for q in spec.queues]
    try:
        QuotaTree(queues)
    except ValueError as exc:
        raise TraceError(f"--quota {path}: {exc}") from None
    return queues
