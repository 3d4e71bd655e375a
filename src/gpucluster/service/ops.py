"""What operators need beyond the resources: the event feed, the queue with reasons and estimates, alert
silences, a longer history for the charts, per-GPU usage and the remediation plan, and the structured log
lines of scheduling, remediation and alerts.

:class:`Operations` hangs off the app (``app.state.ops``) and is fed by the service's scheduling tick
(``Service.tick_hooks``). It reads the runtime only through the :class:`~gpucluster.service.runtime.Runtime`
protocol and two optional ones defined here: :class:`Monitored` (a runtime whose alerts and remediation are
``embedded.monitor.ClusterMonitor``'s: the embedded one) and :class:`QueueOrder` (a runtime that says its queue
order; without it the order is priority, then arrival).
"""

from __future__ import annotations

import json
import logging
import math
import uuid
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol, runtime_checkable

from gpucluster.embedded import ClusterMonitor
from gpucluster.jobs import folds
from gpucluster.model import ClusterState, views
from gpucluster.service.core import REMEDIATION_ACTOR, SYNTHETIC_TENANT, Service
from gpucluster.service.logs import EVENTS_LOGGER, log_event
from gpucluster.service.runtime import Job, JobEvent, JobStatus

log = logging.getLogger(EVENTS_LOGGER)

ALERTING_ACTOR = "alerting"
"""Audit-log actor of alert transitions (``alert.firing``, ``alert.resolved``): they feed ``GET /events``."""
SILENCES_META = "silences"
HISTORY_STEP_S = 30.0
"""Clock seconds between two points of the long history."""
UTILISATION_KEYS = ("gpu_utilisation", "gpu_memory_used_fraction", "allocated_idle_gpus")
"""The runtime's device-metric figures a history point carries beside allocation (embedded backend)."""
HISTORY_POINTS = 2880
"""Points kept: 24 clock hours at :data:`HISTORY_STEP_S`."""
MAX_SILENCES = 200


@runtime_checkable
class Monitored(Protocol):
    """A runtime whose devices, alerts and remediation are watched by a :class:`ClusterMonitor`."""

    monitor: ClusterMonitor


@runtime_checkable
class QueueOrder(Protocol):
    """A runtime that can say in which order it will try its pending jobs."""

    def queue_order(self) -> list[str]:
        """Pending job ids, the next to be tried first."""
        ...


# ---------------------------------------------------------------------------------------------- silences
@dataclass(frozen=True, slots=True)
class Silence:
    """Mutes matching alerts until ``ends_t`` (runtime clock): they stay listed, marked ``silenced``, and do not
    count as firing. Remediation is not affected (that is ``up --remediate``'s business)."""

    id: str
    alert: str
    """Alert name; empty = any alert."""
    target: str
    """``node``, ``node/gpuN`` or ``cluster``; empty = any target. A node also matches its GPUs."""
    starts_t: float
    ends_t: float
    comment: str
    created_by: str

    def matches(self, row: Mapping[str, Any], t: float) -> bool:
        if not self.starts_t <= t < self.ends_t:
            return False
        if self.alert and row.get("name") != self.alert:
            return False
        target = str(row.get("target", ""))
        return not self.target or target == self.target or target.startswith(self.target + "/")


class Silences:
    """The silences, kept in the store (``meta`` key ``silences``) so a restart keeps them."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.items: list[Silence] = []
        raw = service.store.get_meta(SILENCES_META)
        try:
            self.items = [Silence(**x) for x in json.loads(raw)] if raw else []
        except (ValueError, TypeError):
            logging.getLogger(__name__).warning("stored silences are unreadable; starting without them")

    def _save(self, items: list[Silence], audit: tuple[str, str, str, str]) -> None:
        """Store ``items`` (with the audit line, one transaction), then make them the silences: a write that
        fails (``StoreWriteError``) changes nothing."""
        self.service.store.set_meta_audited(SILENCES_META, json.dumps([asdict(s) for s in items]), audit)
        self.items = items

    def active(self, t: float) -> list[Silence]:
        return [s for s in self.items if s.starts_t <= t < s.ends_t]

    def add(self, alert: str, target: str, duration_s: float, comment: str, created_by: str) -> Silence:
        t = self.service.runtime.now
        s = Silence(f"sil-{uuid.uuid4().hex[:10]}", alert, target, t, t + duration_s, comment, created_by)
        kept = [x for x in self.items if x.ends_t > t][-(MAX_SILENCES - 1):]
        self._save([*kept, s], (created_by, "alert.silence", s.id, f"{s.alert or '*'} on {s.target or '*'} until "
                                                                   f"t={s.ends_t:.0f}: {s.comment}"[:500]))
        return s

    def remove(self, silence_id: str, actor: str) -> Silence | None:
        found = next((s for s in self.items if s.id == silence_id), None)
        if found is not None:
            self._save([s for s in self.items if s.id != silence_id], (actor, "alert.unsilence", found.id, ""))
        return found

    def mark(self, rows: Iterable[dict[str, Any]], t: float) -> list[dict[str, Any]]:
        """Copies of the alert rows with ``silenced`` (and ``silence`` id when it is)."""
        active = self.active(t)
        out = []
        for row in rows:
            hit = next((s for s in active if s.matches(row, t)), None)
            out.append({**row, "silenced": hit is not None, **({"silence": hit.id} if hit else {})})
        return out


# ---------------------------------------------------------------------------------------------- operations
class Operations:
    """Event feed, queue, silences, history and structured logs over one :class:`Service`."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.silences = Silences(service)
        self.history: deque[dict[str, float]] = deque(maxlen=HISTORY_POINTS)
        self._next_sample = -math.inf
        self._last_kind: dict[str, str] = {}
        """Live user job -> kind of its last logged event (repeats are logged at debug level)."""
        service.tick_hooks.append(self.on_tick)

    @property
    def monitor(self) -> ClusterMonitor | None:
        rt = self.service.runtime
        return rt.monitor if isinstance(rt, Monitored) else None

    # ------------------------------------------------------------------ tick
    def on_tick(self, events: list[JobEvent]) -> None:
        """After each scheduling tick: log user jobs' events, record alert transitions, sample history."""
        svc = self.service
        for ev in events:
            job = svc.find_job(ev.job_id)
            if job is None or job.synthetic:
                continue
            # a repeat (the same kind again: folded into one event by the store) is logged at debug level
            level = logging.DEBUG if folds(self._last_kind.get(job.id), ev.kind) else logging.INFO
            self._last_kind[job.id] = ev.kind
            if (ev.state is not None and ev.state.terminal) or len(self._last_kind) > 100_000:
                self._last_kind.pop(job.id, None)
            log_event(log, f"job {job.id} {ev.kind}: {ev.message}", level, event="job", job=job.id,
                      name=job.name, tenant=job.tenant, kind=ev.kind, status=ev.status, t=round(ev.t, 3))
        mon = self.monitor
        if mon is not None:
            changes = mon.take_transitions()
            if changes:
                marked = self.silences.mark(changes, svc.runtime.now)
                for row in marked:
                    level = logging.WARNING if row["state"] == "firing" and not row["silenced"] else logging.INFO
                    log_event(log, f"alert {row['name']} {row['state']} on {row['target']}: {row['summary']}",
                              level, event="alert", alert=row["name"], target=row["target"],
                              severity=row["severity"], state=row["state"], silenced=row["silenced"])
                svc.store.audit_many((ALERTING_ACTOR, f"alert.{r['state']}", r["target"],
                                      f"{r['name']} ({r['severity']}): {r['summary']}") for r in marked)
        t = svc.runtime.now
        if t >= self._next_sample:
            state = getattr(svc.runtime, "state", None)
            if isinstance(state, ClusterState):
                pending = sum(1 for j in svc.runtime.jobs() if j.status == JobStatus.PENDING)
                point = views.sample(state, t, pending)
                use = getattr(svc.runtime, "utilisation", None)  # device metrics beside allocation, where known
                if callable(use):
                    figures = use()
                    point.update({k: float(figures[k]) for k in UTILISATION_KEYS if figures.get(k) is not None})
                self.history.append(point)
            self._next_sample = t + HISTORY_STEP_S

    # ------------------------------------------------------------------ views
    def alerts(self, t: float) -> tuple[list[dict[str, Any]], int]:
        """The runtime's alert rows marked ``silenced``, and how many fire unsilenced."""
        rows = self.silences.mark(self.service.runtime.alerts(), t)
        return rows, sum(1 for r in rows if r["state"] == "firing" and not r["silenced"])

    def history_points(self, range_s: float, fine: list[dict[str, float]]) -> list[dict[str, float]]:
        """The last ``range_s`` clock seconds: the long (coarse) history, then the runtime's fine points."""
        t = self.service.runtime.now
        start = t - range_s
        first_fine = fine[0]["t"] if fine else math.inf
        coarse = [p for p in self.history if start <= p["t"] < first_fine]
        return coarse + [p for p in fine if p["t"] >= start]

    def remediation(self) -> dict[str, Any]:
        mon = self.monitor
        if mon is None:
            return {"available": False, "modes": {}, "planned": [], "log": self.service.runtime.remediations()}
        return {"available": True, "modes": mon.modes(), "planned": mon.planned(), "log": mon.remediations()}

    def queue(self, tenant: str | None) -> dict[str, Any]:
        """Pending jobs in the order they will be tried: position, why each waits and a rough start estimate.

        The estimate assumes GPU-equivalents free up as running jobs with a ``duration_s`` end and go to the
        queue in order (shapes and fragmentation ignored); it is None when that never frees enough (running jobs
        without a duration hold the rest), and for a ``blocked`` job: ``quota`` (its tenant's quota holds it
        back: freed GPUs would not start it) or ``never`` (it can no longer start here at all). ``tenant``: only
        that tenant's rows (positions stay global)."""
        rt = self.service.runtime
        jobs = {j.id: j for j in rt.jobs() if j.status == JobStatus.PENDING}
        if isinstance(rt, QueueOrder):
            order = [jobs[i] for i in rt.queue_order() if i in jobs]
            seen = {j.id for j in order}
            order += sorted((j for j in jobs.values() if j.id not in seen), key=_queue_key)
        else:
            order = sorted(jobs.values(), key=_queue_key)
        running = [j for j in rt.jobs() if j.status == JobStatus.RUNNING]
        ov = self.service.cached("overview-raw", rt.overview)
        total = float(ov.get("devices", 0)) - float(ov.get("devices_unhealthy", 0))
        held = sum(j.gpus for j in running)
        free = max(0.0, total - held)
        ends = sorted((j.started_t + j.duration_s, j.gpus) for j in running
                      if j.started_t is not None and j.duration_s is not None)
        now = rt.now
        quotas = {t["name"]: float(t["quota_gpus"]) for t in self.service.store.tenants()
                  if t["quota_gpus"] is not None}
        usage = rt.usage_by_tenant()
        demand, released, k = 0.0, 0.0, 0
        ready_at = now  # when the GPUs every job so far needs are free (never earlier than the job before)
        rows = []
        for pos, job in enumerate(order, start=1):
            blocked, why = self._blocked(job, quotas, usage)
            est: float | None = None
            if blocked is None:  # a blocked job takes no GPUs that free up: the jobs behind it may
                demand += job.gpus
                while free + released < demand - 1e-9 and k < len(ends):
                    released += ends[k][1]
                    ready_at = max(ready_at, ends[k][0])
                    k += 1
                est = ready_at if free + released >= demand - 1e-9 else None
            if tenant is not None and job.tenant != tenant:
                continue
            rows.append({"position": pos, "id": job.id, "name": job.name, "tenant": job.tenant,
                         "synthetic": job.synthetic, "priority": job.priority, "replicas": job.replicas,
                         "gpus": job.gpus, "waiting_s": max(0.0, now - job.submitted_t), "why": why,
                         "blocked": blocked, "est_start_t": est,
                         "est_wait_s": None if est is None else max(0.0, est - now)})
        return {"t": now, "total": len(order), "free_gpus": free, "jobs": rows}

    def _blocked(self, job: Job, quotas: Mapping[str, float],
                 usage: Mapping[str, Mapping[str, float]]) -> tuple[str | None, str]:
        """(``never``, ``quota`` or None, the words for WHY): a job that can never start here (the cluster or
        its tenant's quota changed since it was accepted), or one its tenant's quota holds back now."""
        try:
            self.service.runtime.validate(job)
        except ValueError as exc:
            return "never", f"never: {exc}"
        if job.message.startswith("waiting for quota"):
            return "quota", f"blocked by quota: {job.message.removeprefix('waiting for quota: ')}"
        limit = quotas.get(job.tenant)
        held = float(usage.get(job.tenant, {}).get("gpus", 0.0))
        if limit is not None and held + job.gpus > limit + 1e-9:
            return "quota", (f"blocked by quota: tenant {job.tenant} holds {held:g} of {limit:g} GPUs, the job "
                             f"needs {job.gpus:g}")
        return None, job.message

    def events(self, cursor: str | None, limit: int, tenant: str | None, job_id: str | None) -> dict[str, Any]:
        """Job events (the caller's own jobs for a tenant) and cluster events (remediation, alerts), oldest first,
        after ``cursor`` (``"<event id>.<audit id>"`` from a previous answer) or the newest ``limit``."""
        store = self.service.store
        after_e = after_a = None
        if cursor:
            after_e, after_a = _parse_cursor(cursor)
        jobs = store.events_page(after_e, limit, tenant, job_id)
        cluster = [] if job_id else store.audit_page(after_a, limit, (REMEDIATION_ACTOR, ALERTING_ACTOR))
        out = [{"id": f"e{r['id']}", "at": r["at"], "t": r["t"], "type": "job", "kind": r["kind"],
                "object": f"job/{r['job_id']}", "name": r["name"], "tenant": r["tenant"], "status": r["status"],
                "message": r["message"], "count": r["count"], "first_at": r["first_at"], "first_t": r["first_t"]}
               for r in jobs]
        out += [{"id": f"a{r['id']}", "at": r["at"], "t": None,
                 "type": "alert" if r["actor"] == ALERTING_ACTOR else "remediation",
                 "kind": r["action"].partition(".")[2] or r["action"], "object": _object_of(r["target"]),
                 "name": r["target"], "tenant": "", "status": "", "message": r["detail"], "count": 1,
                 "first_at": r["at"], "first_t": None} for r in cluster]
        out.sort(key=lambda e: (e["at"], e["id"]))
        if not cursor:
            out = out[-limit:]
        else:
            out = out[:limit]
        last_e, last_a = (after_e or 0), (after_a or 0)
        if not cursor:  # a first page starts the cursor at the newest rows, shown or not
            last_e, last_a = store.last_ids()
        for e in out:
            n = int(e["id"][1:])
            if e["id"][0] == "e":
                last_e = max(last_e, n)
            else:
                last_a = max(last_a, n)
        return {"events": out, "cursor": f"{last_e}.{last_a}"}


def _queue_key(job: Job) -> tuple[int, float, str]:
    return -job.priority, job.submitted_t, job.id


def _parse_cursor(text: str) -> tuple[int, int]:
    left, sep, right = text.partition(".")
    if not sep or not left.isascii() or not right.isascii() or not left.isdigit() or not right.isdigit() \
            or max(len(left), len(right)) > 18:
        raise ValueError("expected <event id>.<audit id> from a previous answer's cursor, e.g. 120.37")
    return int(left), int(right)


def _object_of(target: str) -> str:
    node = target.partition("/")[0]
    return f"node/{node}" if node and node != "cluster" else "cluster"


def visible_tenant(is_admin: bool, tenant: str | None) -> str | None:
    """The tenant a caller's job views are restricted to (None = every tenant, for the admin)."""
    return None if is_admin else tenant


__all__ = ["ALERTING_ACTOR", "SYNTHETIC_TENANT", "Monitored", "Operations", "QueueOrder", "Silence", "Silences",
           "visible_tenant"]
