"""The seam between the control plane and whatever runs the jobs.

The service talks to one :class:`Runtime`; both implementations drive the one job engine
(:mod:`gpucluster.jobs`), so they speak its vocabulary: :class:`~gpucluster.jobs.Job` records (built by
:func:`gpucluster.jobs.job_spec` from the request) and :class:`~gpucluster.jobs.JobEvent` s.
:class:`~gpucluster.embedded.EmbeddedRuntime` is the job simulator on the wall clock with a synthetic
background workload; ``gpucluster.kubernetes.KubeRuntime`` creates and observes real pods (see
``docs/control-plane.md``).

Views a runtime returns are JSON-ready (``dict``/``list`` of plain values) so the API layer only filters.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from typing import Any, Protocol, runtime_checkable

from gpucluster.devices import VendorRegistry
from gpucluster.jobs import Job, JobEvent, JobState, JobStatus
from gpucluster.model.tenants import SharedTenancy, TenantSettings
from gpucluster.monitoring import AuditRecord

__all__ = ["DiscoveredJobs", "FaultDrill", "ForgetsJobs", "Job", "JobEvent", "JobState", "JobStatus", "NodeActions",
           "PodLogs", "RemediationAudit", "Runtime", "SharedTenantSettings"]


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

    @property
    def registry(self) -> VendorRegistry:
        """How job requests are parsed into pods (the device settings it runs with, ``--device-config``)."""
        ...

    def submit(self, job: Job) -> Job:
        """Accept a job (already validated by :meth:`validate`) into the queue."""
        ...

    def validate(self, job: Job, quota: bool = True) -> None:
        """Raise ``ValueError("where: why")`` if the job can never be turned into pods, or could never run here
        (even on the empty cluster, or, with ``quota``, beyond its tenant's quota:
        :func:`gpucluster.jobs.never_fits`)."""
        ...

    def restore(self, job: Job, admitted: bool = False) -> None:
        """Re-queue a job recovered from the store after a restart (status becomes pending). ``admitted``: it ran
        before the restart, so a quota lowered since does not hold it back (quotas apply to admission)."""
        ...

    def cancel(self, job_id: str) -> Job | None:
        """Cancel a pending or running job; None if unknown."""
        ...

    def advance(self, t: float) -> list[JobEvent]:
        """Move the clock to ``t`` (never backwards): schedule, finish jobs, run the background workload."""
        ...

    def set_quotas(self, quotas: Mapping[str, float], weights: Mapping[str, float] | None = None) -> None:
        """Tenant -> GPU-equivalent quota (absent tenants are unlimited); the engine's ``QuotaTree`` enforces it
        through the ``Quota`` plugin. ``weights``: tenant -> fair-share weight (absent: 1), what the fair queue
        policies order tenants by."""
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
class DiscoveredJobs(Protocol):
    """A runtime that finds jobs nobody submitted through this API (Kubernetes: Jobs in the queue created with
    kubectl, or by another replica): the service adds them to its store (history, audit) after every tick."""

    def take_discovered(self) -> list[Job]:
        """Jobs found since the last call (each handed out once)."""
        ...


@runtime_checkable
class ForgetsJobs(Protocol):
    """A runtime that can drop a finished job's record (the control plane's retention policy,
    :mod:`gpucluster.service.retention`)."""

    def forget(self, job_id: str) -> bool:
        """Drop the finished job's record: :meth:`Runtime.job` no longer finds it and nothing brings it back (the
        cluster's object of an ended job included). False when the job is not finished or the runtime keeps it
        (nothing changes); a pending or running job is never dropped. Usage and quotas are unchanged: a finished
        job holds nothing."""
        ...


@runtime_checkable
class PodLogs(Protocol):
    """A runtime whose jobs run real containers: their logs (``GET /api/v1/jobs/{id}/logs``)."""

    def logs(self, job_id: str, replica: int = 0, follow: bool = False, tail: int | None = None) -> Iterator[bytes]:
        """The container log of the job's replica ``replica`` (raises ``LookupError`` saying why there is none);
        with ``follow`` it keeps streaming while the container runs."""
        ...


@runtime_checkable
class RemediationAudit(Protocol):
    """A runtime that remediates on its own (``gpucluster.monitoring.Remediator``): the service persists its
    audit records in the store's audit log after every tick."""

    def take_audit_records(self) -> list[AuditRecord]:
        """Records written since the last call (each handed out once)."""
        ...


@runtime_checkable
class NodeActions(Protocol):
    """A runtime whose nodes an operator can take out of service and put back (``POST /nodes/{name}/cordon``,
    ``uncordon``, ``drain``). Each raises ``LookupError`` for an unknown node."""

    def cordon(self, node: str) -> bool:
        """No new pods on ``node`` until :meth:`uncordon` (whatever else would put it back in service); False when
        an operator already cordoned it (nothing changed)."""
        ...

    def held_nodes(self) -> list[str]:
        """The nodes an operator cordoned or drained and has not uncordoned since (kept across a restart)."""
        ...

    def uncordon(self, node: str) -> bool:
        """New pods may land on ``node`` again; False when it was not cordoned."""
        ...

    def drain(self, node: str, why: str, events: list[JobEvent]) -> list[str]:
        """Cordon ``node`` and evict every job with a pod on it back to the queue (the way remediation drains);
        the evicted job ids. Job events go to ``events``."""
        ...


@runtime_checkable
class SharedTenantSettings(Protocol):
    """A runtime whose replicas share the tenants' settings (Kubernetes: a ConfigMap, ``docs/kubernetes.md``,
    "Tenants shared by the replicas"): the service applies the shared state to its store before each scheduling
    pass, and writes every tenant change there first (:mod:`gpucluster.model.tenants` says how it applies)."""

    def shared_tenancy(self) -> SharedTenancy | None:
        """The newest shared state this replica has not applied yet (None: nothing new)."""
        ...

    def tenancy_applied(self, version: str) -> None:
        """The service applied the shared state of ``version`` (its store and the engine's quotas hold it)."""
        ...

    def seed_tenancy(self, local: Mapping[str, TenantSettings], synced_uid: str | None) -> str:
        """At the start, before the first pass: read the shared state now; when it is missing, or this store never
        applied this shared object (``synced_uid``: the object's uid it applied last), add the local tenants it
        does not name yet (an upgrade from per-replica tenants loses no quota). Returns the object's uid. Raises
        ``RuntimeError`` (the shared object cannot be read nor written) saying why."""
        ...

    def publish_tenant(self, name: str, settings: TenantSettings, local: Mapping[str, TenantSettings],
                       fields: Collection[str] | None = None) -> TenantSettings:
        """Write one tenant's settings to the shared state (blocking: call it off the event loop). ``local``: this
        replica's tenants, what a missing shared object is made of. ``fields``: write only these fields, over
        the shared value as it is at the write (``model.tenants.patched``: a change of another field made through
        another replica and not applied here yet is kept). Returns the settings written for the tenant. Raises
        ``RuntimeError`` saying why nothing was written."""
        ...
