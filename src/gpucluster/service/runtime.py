"""The seam between the control plane and whatever runs the jobs.

The service talks to one :class:`Runtime`. The first implementation, :class:`~gpucluster.service.embedded.
EmbeddedRuntime`, drives a :class:`~gpucluster.model.ClusterState` with the :class:`~gpucluster.scheduler.
Scheduler` on a clock. The discrete-event ``simulator.Simulation`` and a Kubernetes-backed runtime plug in here
by implementing the same protocol (see ``docs/control-plane.md``).

Everything a runtime returns is JSON-ready (``dict``/``list`` of plain values) so the API layer only filters.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from gpucluster.monitoring import AuditRecord


class JobStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


@dataclass(slots=True)
class Job:
    """A submitted job: ``replicas`` identical pods placed all-or-nothing (a gang)."""

    id: str
    name: str
    tenant: str
    replicas: int
    resources: Mapping[str, Any]
    """HAMi-style container limits, e.g. ``{"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50}``."""
    duration_s: float | None
    """Run time once all replicas run, in clock seconds; None = until cancelled."""
    submitted_at: float
    """Wall-clock (Unix) time the job was accepted."""
    status: JobStatus = JobStatus.PENDING
    message: str = ""
    priority: int = 0
    synthetic: bool = False
    """Part of the background workload (not persisted)."""
    submitted_t: float = 0.0
    """Runtime clock time of submission."""
    started_t: float | None = None
    finished_t: float | None = None
    placements: list[dict[str, Any]] = field(default_factory=list)
    """Per replica: pod key, node and device shares while running."""
    attempts: int = 0
    gpus: float = 0.0
    """GPU-equivalents (``gpucluster.model.share``: each device counts max(compute share, memory share)) the job
    holds while running; before it runs, the least it could hold."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "tenant": self.tenant,
            "replicas": self.replicas,
            "resources": dict(self.resources),
            "duration_s": self.duration_s,
            "priority": self.priority,
            "status": self.status.value,
            "message": self.message,
            "synthetic": self.synthetic,
            "submitted_at": self.submitted_at,
            "submitted_t": self.submitted_t,
            "started_t": self.started_t,
            "finished_t": self.finished_t,
            "gpus": self.gpus,
            "placements": list(self.placements),
        }


@dataclass(frozen=True, slots=True)
class JobEvent:
    """Something that happened to a job; the service persists these (for jobs it persists)."""

    job_id: str
    t: float
    """Runtime clock time."""
    kind: str
    """``submitted``, ``scheduled``, ``running``, ``succeeded``, ``failed``, ``cancelled``, ``evicted``,
    ``migrated``, ``unschedulable``."""
    status: JobStatus
    message: str = ""


@runtime_checkable
class Runtime(Protocol):
    """What the control plane needs from the thing that runs jobs.

    Contract: one caller at a time (the service serialises calls on its event loop). ``advance`` is the only
    call that moves time; every state change of a job is reported exactly once in the events it returns
    (or, for ``submit``/``cancel``, in the returned job).
    """

    @property
    def now(self) -> float:
        """Runtime clock, seconds."""
        ...

    @property
    def backend(self) -> str:
        """``embedded``, ``simulator`` or ``kubernetes``."""
        ...

    def submit(self, job: Job) -> Job:
        """Accept a job (already validated by :meth:`validate`) into the queue."""
        ...

    def validate(self, job: Job) -> None:
        """Raise ``ValueError("where: why")`` if the job can never be turned into pods, or (where the backend
        knows its cluster) can never run on it (``scheduler.feasibility.never_fits``, quota included)."""
        ...

    def restore(self, job: Job) -> None:
        """Re-queue a job recovered from the store after a restart (status becomes pending)."""
        ...

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a pending or running job; None if unknown."""
        ...

    def advance(self, t: float) -> list[JobEvent]:
        """Move the clock to ``t`` (never backwards): schedule, finish jobs, run the background workload."""
        ...

    def set_quotas(self, quotas: Mapping[str, float]) -> None:
        """Tenant -> GPU-equivalent quota (absent tenants are unlimited)."""
        ...

    def job(self, job_id: str) -> Job | None: ...

    def jobs(self) -> list[Job]: ...

    def nodes(self) -> list[dict[str, Any]]: ...

    def node(self, name: str) -> dict[str, Any] | None: ...

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        """Tenant -> {"gpus": held, "pending_gpus": queued, "running": n, "pending": n}."""
        ...

    def overview(self) -> dict[str, Any]: ...

    def topology(self) -> dict[str, Any]: ...

    def alerts(self) -> list[dict[str, Any]]: ...

    def remediations(self) -> list[dict[str, Any]]: ...


@runtime_checkable
class FaultDrill(Protocol):
    """A runtime whose devices can be made to fail on request (``POST /nodes/{name}/devices/{i}/fault``)."""

    def inject_fault(self, node: str, device: int, events: list[JobEvent] | None = None, xid: int = 79) -> None:
        """The device reports XID ``xid``; alerting and remediation follow as for a real fault. Job state
        changes it causes go to ``events`` (when given)."""
        ...


@runtime_checkable
class RemediationAudit(Protocol):
    """A runtime that remediates on its own (``gpucluster.monitoring.Remediator``): the service persists its
    audit records in the store's audit log after every tick."""

    def take_audit_records(self) -> list[AuditRecord]:
        """Records written since the last call (each handed out once)."""
        ...
