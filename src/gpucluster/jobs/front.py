"""What a control plane's runtime says and does about its jobs and shows of its cluster, the same whatever runs
them.

:class:`EngineFront` is the part of ``service.runtime.Runtime`` that only reads or feeds the job engine:
validation (one check: can the job ever fit here), submission of a user's job, cancellation, the job records,
tenant quotas (a ``QuotaTree`` the ``Quota`` plugin enforces) and usage; and the view half, written once: the
overview (figures, queue, job counts, the sampled history), the node rows and one node's detail (each pod with
its job and tenant) and the topology, all read from the cluster state under :meth:`EngineFront.reading`. The
embedded and the Kubernetes runtimes inherit it and add what only they do (a simulated cluster on the wall
clock; real pods) through a few hooks (:meth:`reading`, :meth:`_job_of`, :meth:`_overview_extra`,
:meth:`_alerts_firing`, :meth:`_placement_report`, :meth:`_use_figures`)."""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any

from gpucluster.jobs.admission import user_submission
from gpucluster.jobs.engine import JobEngine
from gpucluster.jobs.model import Job, JobEvent
from gpucluster.model import Allocation, ClusterState, views
from gpucluster.model.labels import JOB_LABEL
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree

HISTORY_POINTS = 240
"""Samples of the overview's history a runtime keeps."""
HISTORY_EVERY_S = 5.0
"""Clock seconds between two samples."""


class EngineFront:
    """Job-facing half and view half of a runtime over ``engine`` (set by the subclass before use)."""

    engine: JobEngine
    quota: QuotaTree
    placement_policy: str
    queue_policy: str
    _events: list[JobEvent]
    """Events of the jobs the runtime reports, waiting for the next ``advance``."""
    _history: deque[dict[str, float]]
    _last_sample: float

    @property
    def backend(self) -> str:
        raise NotImplementedError

    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def cluster_label(self) -> str:
        """The cluster's name as the overview shows it."""
        raise NotImplementedError

    def engine_lock(self) -> contextlib.AbstractContextManager[object]:
        """Held around every engine call (the Kubernetes runtime shares its cluster with the informer)."""
        return contextlib.nullcontext()

    def reading(self) -> contextlib.AbstractContextManager[ClusterState]:
        """The cluster state, held still while the block reads it (the Kubernetes runtime's informer rebuilds
        it under the cluster lock)."""
        raise NotImplementedError

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

    def forget(self, job_id: str) -> bool:
        """Drop a finished job's record (the control plane's retention policy); False when it is not held or not
        finished. The tally stops counting it; what tenants hold is unchanged (a finished job holds nothing)."""
        with self.engine_lock():
            job = self.engine.jobs.get(job_id)
            if job is None or not job.done:
                return False
            self.engine.forget(job_id)
            return True

    def jobs(self) -> list[Job]:
        return list(self.engine.jobs.values())

    def set_quotas(self, quotas: Mapping[str, float], weights: Mapping[str, float] | None = None) -> None:
        """Tenant -> GPU-equivalents it may hold: one queue per tenant with a ``gpu`` limit. ``weights``: tenant ->
        fair-share weight (absent: 1), what the fair queue policies (``drf``, ``offers``) divide its share by:
        its queue's weight when it has a quota, else its DRF weight in the ledger."""
        weight = {str(n): float(w) for n, w in (weights or {}).items()}
        with self.engine_lock():
            self.quota.replace_queues([QueueSpec(n, limit={"gpu": float(q)}, weight=weight.get(n, 1.0))
                                       for n, q in sorted(quotas.items())])
            self.engine.ledger.weights = weight

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        return self.engine.views.usage_by_tenant()

    # ------------------------------------------------------------------ the view half
    def _start_history(self) -> None:
        self._history = deque(maxlen=HISTORY_POINTS)
        self._last_sample = -math.inf

    def _sample_due(self) -> None:
        """Sample the overview's history when :data:`HISTORY_EVERY_S` passed since the last sample."""
        if self.now - self._last_sample >= HISTORY_EVERY_S:
            self._sample()

    def _sample(self) -> None:
        with self.reading() as state:
            self._history.append(views.sample(state, self.now, self.engine.views.queue_length()))
        self._last_sample = self.now

    def _job_of(self, alloc: Allocation) -> str:
        """The id of the job an allocation belongs to (its pod's job label)."""
        return alloc.pod.labels.get(JOB_LABEL, "") if alloc.pod is not None else ""

    def _describe(self, alloc: Allocation) -> dict[str, Any]:
        jid = self._job_of(alloc)
        job = self.engine.jobs.get(jid)
        return {"job": jid, "job_name": job.name if job else "", "tenant": alloc.tenant or (job.tenant if job else "")}

    def _alerts_firing(self) -> int:
        """Alerts firing now (the overview's count)."""
        return 0

    def _placement_report(self) -> dict[str, Any]:
        """The overview's ``placement_in_use`` (the placement policy's name, ``default`` resolved) and, where the
        backend measures it, ``training_share_by_model``."""
        raise NotImplementedError

    def _use_figures(self) -> dict[str, Any]:
        """What the GPUs do beside what they hold (the overview's ``gpu_utilisation``, ``gpu_memory_used_fraction``,
        ``allocated_idle_gpus``, ``allocated_idle``); None where the runtime reads no device metrics (unknown, not
        zero: on Kubernetes they are Prometheus')."""
        return {"gpu_utilisation": None, "gpu_memory_used_fraction": None, "allocated_idle_gpus": None,
                "allocated_idle": []}

    def _overview_extra(self) -> dict[str, Any]:
        """What only this backend adds to the overview (called while :meth:`reading` holds the state)."""
        return {}

    def nodes(self) -> list[dict[str, Any]]:
        with self.reading() as state:
            return views.present_rows(state)

    def node(self, name: str) -> dict[str, Any] | None:
        with self.reading() as state:
            return views.node_detail(state, name, self._describe)

    def topology(self) -> dict[str, Any]:
        with self.reading() as state:
            return views.topology(state)

    def overview(self) -> dict[str, Any]:
        counts, user = self.engine.views.status_counts()
        with self.reading() as state:
            figures = views.figures(state)
            extra = self._overview_extra()
        return {
            "backend": self.backend,
            "cluster": self.cluster_label,
            "policy": self.placement_policy,
            "queue_policy": self.queue_policy,
            **self._placement_report(),
            "t": self.now,
            **figures,
            **self._use_figures(),
            "queue": self.engine.views.queue_length(),
            "jobs": counts,
            "user_jobs": user,
            "alerts_firing": self._alerts_firing(),
            "history": list(self._history),
            **extra,
        }
