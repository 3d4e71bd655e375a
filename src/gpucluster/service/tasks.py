"""Background tasks with progress (design calculator, experiments), run on worker threads.

A task is a function ``work(report) -> result`` where ``report(fraction, stage)`` updates its progress. Results
and errors stay in memory (they are cheap to recompute) and are served by ``GET /api/v1/tasks/{id}``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Report = Callable[[float, str], None]
Work = Callable[[Report], dict[str, Any]]
MAX_TASKS = 100


class TaskError(Exception):
    """An error the user caused; ``where`` names the field."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}")
        self.where = where
        self.why = why


@dataclass(slots=True)
class Task:
    id: str
    kind: str
    owner: str
    created: float
    status: str = "queued"
    """``queued``, ``running``, ``done`` or ``failed``."""
    progress: float = 0.0
    stage: str = "queued"
    result: dict[str, Any] | None = None
    error: dict[str, str] | None = None
    files: dict[str, bytes] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "kind": self.kind, "status": self.status, "progress": round(self.progress, 3),
                "stage": self.stage, "created": self.created, "result": self.result, "error": self.error,
                "files": sorted(self.files)}


class TaskManager:
    """Runs tasks one at a time per kind on daemon threads (matplotlib is not thread-safe)."""

    def __init__(self) -> None:
        self._tasks: dict[str, Task] = {}
        self._locks: dict[str, threading.Lock] = {}

    def start(self, kind: str, owner: str, work: Callable[[Report, Task], dict[str, Any]]) -> Task:
        task = Task(id=f"{kind[:3]}-{uuid.uuid4().hex[:10]}", kind=kind, owner=owner, created=time.time())
        self._tasks[task.id] = task
        while len(self._tasks) > MAX_TASKS:
            self._tasks.pop(next(iter(self._tasks)))
        lock = self._locks.setdefault(kind, threading.Lock())

        def report(fraction: float, stage: str) -> None:
            task.progress = max(task.progress, min(fraction, 1.0))
            task.stage = stage

        def run() -> None:
            with lock:
                task.status = "running"
                try:
                    task.result = work(report, task)
                    task.progress = 1.0
                    task.stage = "done"
                    task.status = "done"
                except TaskError as exc:
                    task.error = {"where": exc.where, "why": exc.why}
                    task.status = "failed"
                    task.stage = "failed"
                except Exception as exc:  # an internal error: report it instead of dying silently
                    task.error = {"where": "internal", "why": f"{type(exc).__name__}: {exc}"}
                    task.status = "failed"
                    task.stage = "failed"

        threading.Thread(target=run, name=f"task-{task.id}", daemon=True).start()
        return task

    def get(self, task_id: str) -> Task | None:
        return self._tasks.get(task_id)

    def list(self, kind: str | None = None) -> list[Task]:
        return [t for t in self._tasks.values() if kind is None or t.kind == kind]
