"""What a control plane's runtime says and does about its jobs, the same whatever runs them.

:class:`EngineFront` is the part of ``service.runtime.Runtime`` that only reads or feeds the job engine:
validation (one check: can the job ever fit here), submission of a user's job, cancellation, the job records,
tenant quotas (a ``QuotaTree`` the ``Quota`` plugin enforces) and usage. The embedded and the Kubernetes
runtimes inherit it and add what only they do (a simulated cluster on the wall clock; real pods)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from gpucluster.jobs.admission import user_submission
from gpucluster.jobs.engine import JobEngine
from gpucluster.jobs.model import Job, JobEvent
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree


class EngineFront:
    """Job-facing half of a runtime over ``engine`` (set by the subclass before use)."""

    engine: JobEngine
    quota: QuotaTree
    _events: list[JobEvent]
    """Events of the jobs the runtime reports, waiting for the next ``advance``."""

    def engine_lock(self) -> contextlib.AbstractContextManager[object]:
        """Held around every engine call (the Kubernetes runtime shares its cluster with the informer)."""
        return contextlib.nullcontext()

    def _report(self, event: JobEvent) -> None:
        """Keep an engine event of a reported job for the next ``advance``. A user's job arrives when it is
        submitted, so its ``queued`` arrival says nothing the ``submitted`` event did not."""
        if event.kind != "queued":
            self._events.append(event)

    def _take_events(self) -> list[JobEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    @contextlib.contextmanager
    def _collect(self, into: list[JobEvent] | None) -> Iterator[None]:
        """Events raised inside the block go to ``into`` (dropped when None) instead of the next advance."""
        mark = len(self._events)
        try:
            yield
        finally:
            if into is not None:
                into.extend(self._events[mark:])
            del self._events[mark:]

    def validate(self, job: Job, quota: bool = True) -> None:
        """``ValueError("where: why")`` when the job could never run here (``where``: the request field at fault,
        e.g. ``resources``, ``replicas``, ``gpu_type``, ``node_selector`` or, with ``quota``, ``quota``)."""
        with self.engine_lock():
            found = self.engine.capacity.never_fits(job.spec, quota)
        if found is not None:
            raise ValueError(f"{found.where}: {found.why}")

    def submit(self, job: Job) -> Job:
        """Queue a user's job now (it keeps at least ``USER_PRIORITY``); it arrives at the next advance."""
        job.spec = user_submission(job.spec, self.engine.now)
        with self.engine_lock():
            return self.engine.submit(job)

    def cancel(self, job_id: str) -> Job | None:
        job = self.engine.jobs.get(job_id)
        if job is None:
            return None
        with self._collect(None), self.engine_lock():  # the service records the cancellation itself
            self.engine.cancel(job_id)
        return job

    def queue_order(self) -> list[str]:
        """Pending job ids, the next to be tried first (``service.ops.QueueOrder``): the queue policy's order."""
        with self.engine_lock():
            return self.engine.views.queue_order()

    def job(self, job_id: str) -> Job | None:
        return self.engine.jobs.get(job_id)

    def jobs(self) -> list[Job]:
        return list(self.engine.jobs.values())

    def set_quotas(self, quotas: Mapping[str, float]) -> None:
        """Tenant -> GPU-equivalents it may hold: one queue per tenant with a ``gpu`` limit."""
        with self.engine_lock():
            self.quota.replace_queues([QueueSpec(n, limit={"gpu": float(q)}) for n, q in sorted(quotas.items())])

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        return self.engine.views.usage_by_tenant()
