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


def _field(loc: tuple[str | int, ...]) -> str:
    """``queues[2].limit.gpu`` from pydantic's ``('queues', 2, 'limit', 'gpu')``."""
    out = ""
    for part in loc:
        if part == "[key]":  # pydantic's mark for a mapping key that is not allowed (the key is the part before)
            return f"{out}: key"
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out or "the file"


def load_quota(path: Path) -> list[QueueSpec]:
    """A queue tree file (YAML: ``queues: [{name, parent, guarantee, limit: {gpu, gpumem, gpucores}, weight}]``;
    a job's tenant names its queue) -> queue specs; raises TraceError saying where (``--quota FILE:LINE``) and
    why."""
    try:
        raw, lines = inputfile.load_yaml_lines(path)
    except inputfile.InputFileError as exc:
        raise TraceError(f"--quota {exc}") from None
    if raw is None:
        raise TraceError(f"--quota {path}:1: an empty file; expected 'queues:' and a list of queues")
    try:
        spec = _QuotaFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = tuple(err["loc"])
        raise TraceError(f"--quota {path}:{lines.line(loc)}: {_field(loc)}: {err['msg']}") from None
    queues = [QueueSpec(q.name, q.parent, q.guarantee, {str(k): v for k, v in q.limit.items()}, q.weight)
              for q in spec.queues]
    first: dict[str, int] = {}
    for k, q in enumerate(queues):
        line = lines.line(("queues", k, "name"))
        seen = first.setdefault(q.name, line)
        if seen != line:
            raise TraceError(f"--quota {path}:{line}: queues[{k}].name: queue {q.name!r} is already defined on "
                             f"line {seen}")
    parent = {q.name: q.parent for q in queues}
    for k, q in enumerate(queues):
        where = f"--quota {path}:{lines.line(('queues', k, 'parent'))}: queues[{k}].parent"
        if q.parent and q.parent not in parent:
            raise TraceError(f"{where}: unknown parent {q.parent!r} (no queue of that name)")
        chain, p = [q.name], q.parent
        while p:
            if p == q.name:
                raise TraceError(f"{where}: parent cycle ({' -> '.join([*chain, p])})")
            if p in chain:
                break  # a cycle above this queue: reported at a queue on it
            chain.append(p)
            p = parent[p]
    try:
        QuotaTree(queues)
    except ValueError as exc:  # a guard: the checks above say where first
        raise TraceError(f"--quota {path}: {exc}") from None
    return queues
