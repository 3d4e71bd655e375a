"""The control plane's state behind the API: runtime, store, clock, tasks, and opening a data directory.

Concurrency model: every request handler is ``async`` and the scheduling loop is an asyncio task, so the runtime
and the store are only touched from the event loop thread, one call at a time (the Runtime contract). Design and
experiment work runs on worker threads and never touches either.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucluster.embedded import run_steps
from gpucluster.jobs import Fail, JobStatus, transition
from gpucluster.model.limits import DEFAULT_TENANT_MAX_QUEUED
from gpucluster.model.tenants import DEFAULTS, TenantSettings, changes
from gpucluster.monitoring import describe_record
from gpucluster.service.auth import AdminToken, resolve_admin_token
from gpucluster.service.factory import RuntimeUnavailableError
from gpucluster.service.limits import RateLimits, TokenBucket
from gpucluster.service.lock import DataDirLock
from gpucluster.service.logs import EVENTS_LOGGER, log_event
from gpucluster.service.retention import FinishedJobs, JobRetention
from gpucluster.service.runtime import (
    DiscoveredJobs,
    ForgetsJobs,
    Job,
    JobEvent,
    JobState,
    NodeActions,
    RemediationAudit,
    Runtime,
    SharedTenantSettings,
)
from gpucluster.service.store import BadRow, Store, StoreWriteError
from gpucluster.service.tasks import TaskManager

log = logging.getLogger(__name__)
events_log = logging.getLogger(EVENTS_LOGGER)

SYNTHETIC_TENANT = "synthetic"
REMEDIATION_ACTOR = "remediation"
DISCOVERED_ACTOR = "cluster"
"""Audit actor of jobs found in the cluster rather than submitted here (a Job created with kubectl)."""
SHARED_ACTOR = "cluster"
"""Audit actor of tenant settings applied from the state the replicas share (set through another replica)."""
TENANCY_UID_META = "shared_tenancy_uid"
"""``meta`` key: the uid of the shared tenant settings object this store applied last (a store that never
applied it adds its own tenants to it at the start)."""
HELD_NODES_META = "held_nodes"
"""``meta`` key of the nodes an operator cordoned or drained (a JSON list of names): a restart cordons them again."""
CLOCK_LEASE_S = 5.0
"""Wall-clock seconds of runtime clock stored ahead of the clock: the clock is written once per lease, not once
per tick (every write is a WAL frame), and a restart resumes at the stored value, at or after any time a client
has seen."""
RECORD_CHUNK = 500
"""Job events stored per step of a tick (:meth:`Service.tick_steps`): a tick with more (a reason that changed for
thousands of waiting jobs) stores them over several steps, giving the event loop back in between."""


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    """How ``gpucluster up`` runs."""

    data_dir: Path
    """Where the SQLite store (``gpucluster.db``), the lock and the generated admin token live."""
    speed: float = 1.0
    """Runtime clock seconds per wall-clock second."""
    tick_s: float = 0.25
    """Wall-clock seconds between scheduling-loop ticks."""
    admin_token: str | None = None
    """Admin bearer token; None = ``$GPUCLUSTER_ADMIN_TOKEN``, else the one saved under data_dir, else new."""
    rates: RateLimits = field(default_factory=RateLimits)
    """Per-tenant submission rate limit."""
    max_queued_jobs: int = DEFAULT_TENANT_MAX_QUEUED
    """Jobs a tenant may have pending at once unless its own ``max_queued_jobs`` says otherwise (429 beyond)."""
    legacy_metrics: bool = False
    """``/metrics`` also carries HAMi's legacy metric names (``GPUDeviceMemoryAllocated`` ...)."""
    tenants_on_first_use: bool = False
    """A job naming a tenant that does not exist creates it (unlimited, weight 1) instead of being refused with
    422 saying how to create it (``up --tenants on-first-use``; ``explicit``, the default, is what Kueue and
    Slurm users expect: a LocalQueue or an account exists before work is submitted to it). The ``default``
    tenant of the admin's jobs always exists."""
    unique_job_names: bool = True
    """A job name is unique among its tenant's live (pending or running) jobs: a second live job of that name is
    refused with 409 naming the live one's id, as a Kubernetes or Kueue user expects of a namespace (a finished
    job's name may be used again). ``up --job-names shared`` (False) lets names repeat, as Slurm does; the id is
    unique either way, and the CLI never picks one of several jobs of a name silently."""
    retention: JobRetention = field(default_factory=JobRetention)
    """Which finished jobs stay in memory (``up --finished-job-ttl``, ``--max-finished-jobs``): the others leave
    it and read back from the store by id (:mod:`gpucluster.service.retention`)."""


@dataclass(slots=True)
class _Submission:
    """A job waiting for the group commit (:meth:`Service.store_submission`)."""

    job: Job
    actor: str
    idempotency: tuple[str, str, str] | None
    apply: Callable[[], None]
    done: asyncio.Future[None]


@dataclass
class Service:
    """State shared by the handlers: runtime, store, clock, tasks."""

    runtime: Runtime
    store: Store
    config: ServiceConfig
    admin_token: str
    admin_source: str = "generated"
    """Where the admin token came from (``auth.AdminToken.source``)."""
    lock: DataDirLock | None = None
    tasks: TaskManager = field(default_factory=TaskManager)
    archive: dict[str, Job] = field(default_factory=dict)
    """Terminal jobs recovered from the store (the runtime only holds live ones after a restart)."""
    started_wall: float = field(default_factory=time.monotonic)
    clock_origin: float = 0.0
    ticks: int = 0
    loop_error: str | None = None
    order: dict[str, None] = field(default_factory=dict)
    """Persisted (user) job ids held in memory, in submission order (a dict: a pruned job leaves it in O(1)): the
    job list reads it backwards, newest first."""
    pruned: int = 0
    """Finished user jobs that left memory under the retention policy since the start (:meth:`prune_finished`);
    they read back from the store (:meth:`stored_job`)."""
    version: int = 0
    """Bumped by every tick and every mutation; cached views are valid for one version."""
    limiter: TokenBucket = field(default_factory=lambda: TokenBucket(0.0, 0))
    persisted_clock: float = -1.0
    """The clock value last written to the store; the runtime never runs ahead of it."""
    unrecorded: list[JobEvent] = field(default_factory=list)
    """Events of earlier ticks the store could not take (a full disk): stored, in order, before the next ones."""
    discovered: list[Job] = field(default_factory=list)
    """Jobs found in the cluster and not stored yet."""
    remediation_pending: list[Any] = field(default_factory=list)
    """Remediation audit records not stored yet."""
    audit_pending: list[tuple[str, str, str, str]] = field(default_factory=list)
    """Audit lines of actions already carried out that the store did not take (:meth:`audit_done`)."""
    tick_hooks: list[Callable[[list[JobEvent]], None]] = field(default_factory=list)
    """Called after every tick with its events (``service.ops``: logs, alert transitions, history)."""
    name_index_builds: int = 0
    """How often the live-name index was built from every job (once: it is kept up to date after that)."""
    _live_names: dict[tuple[str, str], str] | None = None
    _tenancy_error: str = ""
    """Why the tenants of this store could not be added to a shared object made anew (logged once each)."""
    _cache: dict[str, Any] = field(default_factory=dict)
    _cache_version: int = -1
    _batch: list[_Submission] = field(default_factory=list)
    """Accepted jobs waiting for the group commit (:meth:`store_submission`)."""
    _storing: dict[str, int] = field(default_factory=dict)
    """Tenant -> its jobs in :attr:`_batch` (counted as pending by :meth:`pending_jobs`)."""
    _finished: FinishedJobs = field(init=False)
    """The finished user jobs in memory, in the order they finished (:meth:`ended`, :meth:`prune_finished`)."""

    def __post_init__(self) -> None:
        self._finished = FinishedJobs(self.config.retention)

    async def store_submission(self, job: Job, actor: str, idempotency: tuple[str, str, str] | None,
                               apply: Callable[[], None]) -> None:
        """Store an accepted job, then ``apply`` it in memory; returns once both are done. The jobs submitted in
        the same turn of the event loop are stored in one transaction (a group commit: one commit, not one per
        submission, is what lets a flood of submissions leave the loop time for everything else); each is applied
        right after that commit, in submission order, whether or not its request is still waiting. Raises
        :class:`StoreWriteError` when the transaction failed (nothing of it was stored, nothing applied) and
        ``sqlite3.IntegrityError`` when the job's Idempotency-Key was stored by an earlier job of its batch."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        self._batch.append(_Submission(job, actor, idempotency, apply, done))
        if len(self._batch) == 1:
            loop.call_soon(self._commit_batch)
        self._storing[job.tenant] = self._storing.get(job.tenant, 0) + 1
        try:
            await done
        finally:
            left = self._storing[job.tenant] - 1
            if left:
                self._storing[job.tenant] = left
            else:
                del self._storing[job.tenant]

    def storing(self, owner: str, key: str) -> asyncio.Future[None] | None:
        """The commit a job submitted by ``owner`` with Idempotency-Key ``key`` waits for, if one does."""
        return next((b.done for b in self._batch if b.idempotency is not None
                     and b.idempotency[:2] == (owner, key)), None)

    def _commit_batch(self) -> None:
        batch, self._batch = self._batch, []
        try:
            errors = self.store.insert_jobs([(b.job, b.actor, b.idempotency) for b in batch])
        except Exception as exc:  # nothing stored: each request answers with the store's error
            for b in batch:
                if not b.done.done():
                    b.done.set_exception(exc)
            return
        for b, refused in zip(batch, errors, strict=True):
            error: BaseException | None = refused
            if error is None:
                try:
                    b.apply()
                except Exception as exc:  # a bug in applying one job: its request answers 500, the rest go on
                    log.exception("job %s was stored but not applied", b.job.id)
                    error = exc
            if b.done.done():  # the request went away: the job is stored and applied all the same
                continue
            if error is None:
                b.done.set_result(None)
            else:
                b.done.set_exception(error)

    def cached(self, key: str, compute: Callable[[], Any]) -> Any:
        """A view computed at most once per version (many requests share one tick's overview or node list)."""
        if self._cache_version != self.version:
            self._cache.clear()
            self._cache_version = self.version
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    def invalidate_views(self) -> None:
        """A request changed what the API shows: the cached views (``cached``) are computed again. (The cluster's
        capacity needs no such call: the state keeps it, ``gpucluster.model.capacity``.)"""
        self.version += 1

    def clock(self) -> float:
        return self.clock_origin + (time.monotonic() - self.started_wall) * self.config.speed

    def tick(self) -> list[JobEvent]:
        """Advance the runtime to the clock. The clock is committed to the store *before* the runtime moves
        (a lease of :data:`CLOCK_LEASE_S` ahead, so not on every tick), so whatever time a client has seen, a
        restart (even after ``kill -9``) resumes at or after it. When the store cannot be written (a full disk)
        the runtime still moves, and the tick's events are kept (:attr:`unrecorded`) and stored first by the
        next tick that can: none is lost (while nothing can be stored, a ``kill -9`` loses what the disk could
        not take, as it would any time). Raises
        :class:`~gpucluster.service.store.StoreWriteError` after the tick when something could not be stored."""
        return run_steps(self.tick_steps())

    async def tick_async(self) -> list[JobEvent]:
        """:meth:`tick`, giving the event loop back between its steps (the scheduling passes, the monitor's
        evaluation, storing the events, the tick hooks), so no request waits for a whole tick. Cancelled (the
        service stops) between two steps, it finishes the tick first, so its events are stored."""
        steps = self.tick_steps()
        while True:
            try:
                next(steps)
            except StopIteration as done:
                events: list[JobEvent] = done.value
                return events
            try:
                await asyncio.sleep(0)
            except asyncio.CancelledError:
                with contextlib.suppress(StoreWriteError):  # kept in unrecorded, as any tick's
                    for _ in steps:
                        pass
                raise

    def tick_steps(self) -> Generator[None, None, list[JobEvent]]:
        """:meth:`tick` in steps (it yields where the event loop may serve requests: the runtime and the store
        are idle there, as between two ticks); returns the tick's events."""
        t = self.clock()
        failed: StoreWriteError | None = None
        if t > self.persisted_clock:
            ahead = t + CLOCK_LEASE_S * self.config.speed
            try:
                self.store.set_meta("clock", repr(ahead))
                self.persisted_clock = ahead
            except StoreWriteError as exc:  # the runtime goes on; the next tick stores the clock again
                failed = exc
        try:
            self.apply_shared_tenancy()  # before the pass: a quota changed on another replica holds in it
        except StoreWriteError as exc:  # applied (and the runtime told so) at the next tick that can store it
            failed = failed or exc
        stepped = getattr(self.runtime, "advance_steps", None)
        if callable(stepped):
            events: list[JobEvent] = yield from stepped(t)
        else:
            events = self.runtime.advance(t)
        self.ticks += 1
        self.version += 1
        self.unrecorded.extend(events)
        self._unname(events)
        self._ended_in(events)
        yield
        try:
            self.adopt_discovered()
            yield from self._store_unrecorded()
            self.persist_remediation()
        except StoreWriteError as exc:
            failed = failed or exc
        yield
        for hook in self.tick_hooks:
            hook(events)
        self.prune_finished()
        if failed is not None:
            raise failed
        return events

    def adopt_discovered(self) -> None:
        """Jobs the runtime found in the cluster (kubectl, another replica) join the store and the job list; one
        found again under another tenant (a workload a namespace binding let in or refused) is filed under it."""
        if not isinstance(self.runtime, DiscoveredJobs):
            return
        self.discovered.extend(self.runtime.take_discovered())
        while self.discovered:  # one at a time: a full disk keeps the rest for the next tick
            job = self.discovered[0]
            if self._pruned_again(job):
                self.discovered.pop(0)
                continue
            if not self.store.has_job(job.id):
                self.store.insert_job(job, DISCOVERED_ACTOR, message=f"found in the cluster: {job.message}")
                self.order[job.id] = None
                self.named(job)
                self.invalidate_views()
            else:  # stored already: let in or refused for its namespace (Kubernetes), filed under its tenant now
                back = job.id not in self.order and not job.status.terminal  # pruned refused, let in since
                if back:
                    self.order[job.id] = None
                if self.store.refile_job(job.id, job.tenant) or back:
                    self.named(job)
                    self.invalidate_views()
            self.discovered.pop(0)
            self.ended(job)
            with contextlib.suppress(StoreWriteError):  # its run fields follow with its next event
                self.store.record_events([], {job.id: job})

    def _pruned_again(self, job: Job) -> bool:
        """``job``, found finished in the cluster, is one the retention policy pruned before (a restart read its
        remaining Job object, or a pod group's ended pods, again): the runtime forgets it at once and the store
        keeps it as it ended (no new event, no run fields rewritten), so it is neither listed nor held again."""
        if job.id in self.order or not job.status.terminal or not isinstance(self.runtime, ForgetsJobs):
            return False
        if self.stored_job(job.id) is None:  # not in the store, or not finished there: a job found anew
            return False
        return self.runtime.forget(job.id)

    def record(self, events: list[JobEvent]) -> None:
        """Persist events and, whole, the persisted jobs they are about (status, message, run fields)."""
        if events:
            jobs = {e.job_id: job for e in events if (job := self.find_job(e.job_id)) is not None}
            self.store.record_events(events, jobs)

    def _store_unrecorded(self) -> Iterator[None]:
        """Store the kept events (:attr:`unrecorded`) in order, :data:`RECORD_CHUNK` at a time, yielding between
        chunks (a request is served in between); :class:`StoreWriteError` leaves the rest kept."""
        while self.unrecorded:
            chunk = self.unrecorded[:RECORD_CHUNK]
            self.record(chunk)
            del self.unrecorded[:len(chunk)]
            if self.unrecorded:
                yield

    def record_done(self, events: list[JobEvent], what: str) -> None:
        """Persist the job events of an action already carried out (a drain, a fault drill): a store that does
        not take them now keeps them for the next tick (:attr:`unrecorded`), as a tick's own, so the request is
        answered as done (it is) and no event is lost. Remediation records too (:meth:`persist_remediation`)."""
        self._ended_in(events)
        try:
            self.record(events)
        except StoreWriteError as exc:
            log.warning("%s done; its job events are stored with the next tick: %s", what, exc)
            self.unrecorded.extend(events)
        try:
            self.persist_remediation()
        except StoreWriteError as exc:  # kept in remediation_pending
            log.warning("%s done; its remediation records are stored with the next tick: %s", what, exc)

    def store_held_nodes(self, names: list[str], audit: tuple[str, str, str, str]) -> None:
        """Store the nodes an operator holds out of service (``names``: what ``held_nodes()`` will be once the
        action is applied) with the audit line of the action, in one transaction, so a restart cordons them
        again. Called *before* the action is applied: :class:`StoreWriteError` (nothing stored) leaves the
        action undone, memory and store agree."""
        self.store.set_meta_audited(HELD_NODES_META, json.dumps(sorted(set(names))), audit)

    def persist_remediation(self) -> None:
        """Write the runtime's new remediation audit records to the audit log (actor ``remediation``)."""
        if not isinstance(self.runtime, RemediationAudit):
            return
        records = self.runtime.take_audit_records()
        self.remediation_pending.extend(records)
        for r in records:
            log_event(events_log, f"remediation {r.action} {r.target}: {r.outcome}", event="remediation",
                      action=r.action, target=r.target, outcome=r.outcome, alert=r.alert,
                      detail=describe_record(r))
        if self.remediation_pending:  # kept until stored (a full disk)
            self.store.audit_many((REMEDIATION_ACTOR, f"remediation.{r.action}", r.target, describe_record(r))
                                  for r in self.remediation_pending)
            self.remediation_pending = []
        if self.audit_pending:
            self.store.audit_many(self.audit_pending)
            self.audit_pending = []

    def audit_done(self, actor: str, action: str, target: str, detail: str) -> None:
        """The audit line of an action already carried out (it cannot be stored first: its outcome is part of
        it): a store that does not take it now keeps it for the next tick (:meth:`persist_remediation`), so
        the action is neither reported as not done nor left out of the log."""
        try:
            self.persist_remediation()
            self.store.audit(actor, action, target, detail)
        except StoreWriteError as exc:
            log.warning("%s %s done; its audit line is stored with the next tick: %s", action, target, exc)
            self.audit_pending.append((actor, action, target, detail))

    def find_job(self, job_id: str) -> Job | None:
        """The job held in memory (the runtime's, else a finished one restored from the store), or None."""
        return self.runtime.job(job_id) or self.archive.get(job_id)

    def stored_job(self, job_id: str) -> Job | None:
        """A finished user job that is no longer in memory (the retention policy pruned it), read back from the
        store as it ended; None when the store has no finished job of that id."""
        job = self.store.load_job(job_id, self.runtime.registry)
        return job if job is not None and job.status.terminal else None

    def ended(self, job: Job) -> None:
        """``job`` is finished: it leaves memory once past the retention policy (:meth:`prune_finished`). Called
        wherever a user job ends (the tick's events, a cancel, an action's events, a restart); pending and running
        jobs, and the background workload's (the embedded runtime keeps its last few), are not noted."""
        if job.status.terminal and not job.synthetic:  # the age counts from when it ended (in a tick: its time)
            self._finished.note(job.id, job.finish_s if job.finish_s >= 0 else self.runtime.now)

    def _ended_in(self, events: list[JobEvent]) -> None:
        for e in events:
            if e.state is not None and e.state.terminal:
                job = self.find_job(e.job_id)
                if job is not None:
                    self.ended(job)

    def finished_in_memory(self) -> int:
        """Finished user jobs held in memory and waiting for the retention policy (at most ``max_finished`` after
        a tick)."""
        return len(self._finished)

    def prune_finished(self) -> list[str]:
        """Drop from memory the finished user jobs past the retention policy (the runtime's record, the archive,
        the job list) and return their ids: the store keeps each with its events (:meth:`stored_job`). Only the
        jobs due are looked at (:class:`~gpucluster.service.retention.FinishedJobs`). Nothing is pruned while the
        store has not taken every event and found job (a full disk): a pruned job's final state is in the store.
        Tenant usage, quotas and fair shares are not touched: a finished job holds nothing."""
        if self.unrecorded or self.discovered:
            return []
        out: list[str] = []
        forget = self.runtime.forget if isinstance(self.runtime, ForgetsJobs) else None
        for jid in self._finished.due(self.runtime.now):
            job = self.find_job(jid)
            if job is not None and not job.status.terminal:
                continue  # live again (the cluster's record of it): noted again when it ends
            if forget is not None and self.runtime.job(jid) is not None and not forget(jid):
                continue  # the runtime keeps it (see ForgetsJobs): so does the job list
            self.archive.pop(jid, None)
            self.order.pop(jid, None)
            out.append(jid)
        if out:
            self.pruned += len(out)
            self.invalidate_views()
        return out

    def all_jobs(self) -> list[Job]:
        live = self.runtime.jobs()
        seen = {j.id for j in live}
        return live + [j for j in self.archive.values() if j.id not in seen]

    def user_jobs_newest_first(self) -> Iterator[Job]:
        for jid in reversed(self.order):
            job = self.find_job(jid)
            if job is not None:
                yield job

    def pending_jobs(self, tenant: str) -> int:
        """The tenant's pending jobs, exact at every submission: the runtime keeps the count as jobs change
        (``gpucluster.jobs.tally``), so a flood of submissions costs no scan of the queue; the tenant's jobs
        waiting for the group commit count too."""
        return int(self.runtime.usage_by_tenant().get(tenant, {}).get("pending", 0)) + self._storing.get(tenant, 0)

    def live_job_named(self, tenant: str, name: str) -> Job | None:
        """The tenant's pending or running user job of that name, if any. The index is built from the runtime's
        jobs once (the jobs restored at the start), then kept as jobs change: a job accepted here (:meth:`named`)
        or found in the cluster (:meth:`adopt_discovered`) takes its name, one that ends in a tick gives it back
        (:meth:`tick`), so a flood of submissions costs no scan of every job. A hit is checked against the job's
        status now, so a job that ended outside a tick (a cancel) frees its name at once; the jobs waiting for the
        group commit are checked too."""
        names = self._names()
        key = (tenant, name)
        jid = names.get(key)
        job = None if jid is None else self.find_job(jid)
        if job is not None and not job.status.terminal:
            return job
        if jid is not None:
            del names[key]  # ended (a cancel): the name is free
        # a job of that name waiting for the group commit (not in the runtime yet) is live too
        return next((b.job for b in self._batch if b.job.tenant == tenant and b.job.name == name), None)

    def _names(self) -> dict[tuple[str, str], str]:
        if self._live_names is None:
            self._live_names = {(j.tenant, j.name): j.id for j in self.runtime.jobs()
                                if not j.synthetic and not j.status.terminal}
            self.name_index_builds += 1
        return self._live_names

    def named(self, job: Job) -> None:
        """``job`` was just accepted (or found in the cluster): its name is taken among its tenant's live jobs (see
        :meth:`live_job_named`)."""
        if not job.synthetic and not job.status.terminal:
            self._names()[(job.tenant, job.name)] = job.id

    def _unname(self, events: list[JobEvent]) -> None:
        """The jobs that ended in these events give their names back."""
        if self._live_names is None:
            return
        for e in events:
            if e.state is None or not e.state.terminal:
                continue
            job = self.find_job(e.job_id)
            if job is not None and self._live_names.get((job.tenant, job.name)) == job.id:
                del self._live_names[(job.tenant, job.name)]

    def max_queued(self, row: dict[str, Any] | None) -> int:
        """A tenant's limit on pending jobs (its own, else the service's default)."""
        value = None if row is None else row.get("max_queued_jobs")
        return self.config.max_queued_jobs if value is None else int(value)

    def local_tenants(self) -> dict[str, TenantSettings]:
        """This replica's tenants and their settings, as its store holds them."""
        return {str(row["name"]): TenantSettings.from_row(row) for row in self.store.tenants()}

    def apply_shared_tenancy(self) -> bool:
        """Apply the tenants' settings the replicas share (a runtime with :class:`SharedTenantSettings`; see
        :mod:`gpucluster.model.tenants`) to the store, each changed tenant with an audit line (actor ``cluster``),
        then to the engine's quotas; only then is the runtime told it is applied (a replica about to lead waits
        for that). A shared object this store never applied (another uid: made anew after a deletion) first gets
        this store's tenants it does not name (``seed_tenancy``, as at the start). True when something changed.
        Raises ``StoreWriteError`` (nothing is marked applied: the next tick tries again)."""
        if not isinstance(self.runtime, SharedTenantSettings):
            return False
        shared = self.runtime.shared_tenancy()
        if shared is None:
            return False
        current = self.local_tenants()
        synced = self.store.get_meta(TENANCY_UID_META)
        if shared.uid and shared.uid != synced:
            # an object this store never applied (the ConfigMap made anew after a deletion, by a replica whose
            # store lacks tenants this one holds, e.g. a new replica): add this store's tenants it does not name,
            # as a start does, before applying it, so they are not reset to no quota here and are shared again
            named = {*shared.tenants, *shared.bad}
            if any(s != DEFAULTS and n not in named for n, s in current.items()):
                try:
                    self.runtime.seed_tenancy(current, synced)
                except RuntimeError as exc:  # nothing applied: the next tick tries again
                    if str(exc) != self._tenancy_error:
                        log.error("shared tenant settings (%s) not applied: this store's tenants it does not name "
                                  "cannot be added: %s", shared.uid, exc)
                        self._tenancy_error = str(exc)
                    return False
                shared = self.runtime.shared_tenancy() or shared
            self._tenancy_error = ""
            self.store.set_meta(TENANCY_UID_META, shared.uid)
        changed = changes(current, shared)
        for name, s in changed.items():
            self.store.upsert_tenant(name, s.quota_gpus, s.weight, s.max_priority, max_queued_jobs=s.max_queued_jobs,
                                     audit=(SHARED_ACTOR, "tenant.shared", name,
                                            f"quota={s.quota_gpus} weight={s.weight} max_priority={s.max_priority} "
                                            f"max_queued_jobs={s.max_queued_jobs} (shared version "
                                            f"{shared.version})"))
        if changed:
            log.info("shared tenant settings (version %s) applied: %s", shared.version,
                     ", ".join(f"{n} quota={s.quota_gpus}" for n, s in sorted(changed.items()))[:500])
            self.sync_quotas()
            self.invalidate_views()
        self.runtime.tenancy_applied(shared.version)
        return bool(changed)

    def settle_shared_tenancy(self) -> None:
        """After a REST write stored a tenant's settings as its write to the shared state answered: a pass may have
        applied a newer shared state while the write was in flight (another replica's change of the same tenant),
        which the store write just undid. Apply the newest shared state again now (each tenant it changes back
        audited as any), so the store and the engine's quotas never hold an older state than the one counted
        applied. A store that cannot take it now leaves it to the next pass (nothing is counted applied)."""
        if not isinstance(self.runtime, SharedTenantSettings):
            return
        self.runtime.tenancy_applied("")  # what the store holds is no longer known to be the newest applied
        with contextlib.suppress(StoreWriteError):
            self.apply_shared_tenancy()

    def sync_quotas(self) -> None:
        rows = self.store.tenants()
        self.runtime.set_quotas({t["name"]: float(t["quota_gpus"]) for t in rows if t["quota_gpus"] is not None},
                                {t["name"]: float(t["weight"]) for t in rows if float(t["weight"]) != 1.0})

    def close(self) -> None:
        """Store what earlier ticks could not (a disk that was full), save the clock, close the store, stop the
        runtime's threads (a leader gives its lease back) and give the data directory back. What the store still
        cannot take is counted in an error line: it is lost with the process."""
        try:
            for _ in self._store_unrecorded():
                pass  # no request is served any more: all chunks at once
            self.persist_remediation()
        except StoreWriteError as exc:
            log.error("stopping with %d job event(s) and %d audit line(s) the store could not take; they are lost: "
                      "%s", len(self.unrecorded), len(self.remediation_pending) + len(self.audit_pending), exc)
        try:
            self.store.set_meta("clock", repr(max(self.runtime.now, self.persisted_clock)))
        except StoreWriteError as exc:  # the stored lease is at or after the runtime's clock anyway
            log.warning("clock not saved on close: %s", exc)
        self.store.close()
        stop = getattr(self.runtime, "close", None)
        if callable(stop):
            stop()
        if self.lock is not None:
            self.lock.release()


def _fail_unrestorable(store: Store, job_id: str, t: float, why: str) -> JobEvent:
    log.warning("job %s not restored: %s", job_id, why)
    store.audit("system", "service.restore-skipped", job_id, why)
    return JobEvent(job_id, t, "failed", JobState.FAILED, f"not restored after a control-plane restart: {why}")


def _restore_held_nodes(runtime: Runtime, store: Store) -> None:
    """Cordon again the nodes an operator cordoned or drained before the restart (until they uncordon them); a
    stored name the cluster no longer has is dropped, with a log line."""
    raw = store.get_meta(HELD_NODES_META)
    if not raw or not isinstance(runtime, NodeActions):
        return
    try:
        names = json.loads(raw)
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("not a list of node names")
    except ValueError:
        log.warning("stored operator-cordoned nodes %r are unreadable; no node is cordoned again", raw[:200])
        return
    kept = []
    for name in names:
        try:
            runtime.cordon(name)
        except LookupError:
            log.warning("node %s, cordoned by an operator before the restart, is no longer in the cluster: dropped",
                        name[:64])
            continue
        kept.append(name)
    if kept != names:
        store.set_meta(HELD_NODES_META, json.dumps(kept))
    if kept:
        log.info("cordoned again, as an operator left them: %s", ", ".join(kept))


def _seed_shared_tenancy(svc: Service) -> None:
    """Before the first pass: read the tenants' settings the replicas share (adding this store's tenants the
    shared object does not name, when this store never applied it: an upgrade loses no quota) and apply them.
    Raises :class:`RuntimeUnavailableError` when the shared object can be neither read nor written: the start
    fails (its first pass would apply the watch's read of it, which resets the tenants it does not name to no
    quota, and they would never be added)."""
    runtime = svc.runtime
    if not isinstance(runtime, SharedTenantSettings):
        return
    try:
        uid = runtime.seed_tenancy(svc.local_tenants(), svc.store.get_meta(TENANCY_UID_META))
    except RuntimeError as exc:
        raise RuntimeUnavailableError(f"the tenants' shared settings cannot be read at the start: {exc}") from None
    svc.apply_shared_tenancy()
    if uid and uid != svc.store.get_meta(TENANCY_UID_META):
        svc.store.set_meta(TENANCY_UID_META, uid)


def open_service(runtime: Runtime, config: ServiceConfig, lock: DataDirLock | None = None) -> tuple[Service, bool]:
    """Lock the data directory (unless ``lock`` is already held), open the store, install the admin token
    (revoking any other), resume the clock and recover persisted jobs into the runtime. Returns the service and
    whether the admin token was generated now. A stored job that cannot be restored is marked failed with the
    reason (and audited); it never stops the start.

    Raises ``lock.DataDirLockedError``, ``auth.TokenError``, ``store.StoreWriteError`` (a full disk: nothing is
    restored, the data directory is given back), ``OSError`` and ``factory.RuntimeUnavailableError`` (the tenants'
    shared settings cannot be read: the data directory is given back)."""
    lock = (lock or DataDirLock(config.data_dir)).acquire()
    try:
        admin: AdminToken = resolve_admin_token(config.data_dir, config.admin_token)
        store = Store(config.data_dir / "gpucluster.db")
    except BaseException:
        lock.release()
        raise
    try:
        store.replace_tokens(admin.token, "admin", None, "admin")
        return _restore(runtime, config, lock, admin, store)
    except BaseException:
        store.close()
        lock.release()
        raise


def _restore(runtime: Runtime, config: ServiceConfig, lock: DataDirLock, admin: AdminToken,
             store: Store) -> tuple[Service, bool]:
    svc = Service(runtime=runtime, store=store, config=config, admin_token=admin.token, admin_source=admin.source,
                  lock=lock, limiter=TokenBucket(config.rates.submit_per_s, config.rates.submit_burst))
    saved = store.get_meta("clock")
    candidates = [runtime.now, store.max_event_t() or 0.0]
    try:
        candidates.append(float(saved) if saved else 0.0)
    except ValueError:
        log.warning("stored clock %r is not a number; resuming from the events", saved)
    _restore_held_nodes(runtime, store)  # before anything is placed: no job lands on a node the operator holds
    svc.clock_origin = max(t for t in candidates if math.isfinite(t))
    svc.persisted_clock = svc.clock_origin
    _seed_shared_tenancy(svc)
    # the stored quotas before the first pass: a runtime that found its workloads in the cluster (Kubernetes: a
    # running Job and one waiting for quota) admits at the advance below, which must not see unlimited tenants
    svc.sync_quotas()
    if svc.clock_origin > runtime.now:
        runtime.advance(svc.clock_origin)
    recovered: list[JobEvent] = []
    found: dict[str, Job] = {}
    bad: list[BadRow] = []
    # the finished jobs past the retention policy stay in the store (read back by id), never loaded
    keep = config.retention
    loaded = store.load_jobs(bad, runtime.registry, finished_after=runtime.now - keep.max_age_s,
                             finished_limit=keep.max_finished)
    svc.pruned = store.count_finished() - sum(1 for job in loaded if job.status.terminal)
    svc.order.update(dict.fromkeys(job.id for job in loaded))
    ran = store.job_ids(JobStatus.RUNNING)
    # the jobs that ran before the restart are restored first (in submission order), then the waiting ones
    for job in sorted(loaded, key=lambda j: j.id not in ran):
        if job.status.terminal:
            svc.archive[job.id] = job
            continue
        try:
            # quotas apply to admission, never retroactively: a job accepted before is not re-admitted against
            # today's quota (a running one is put back as it ran, a queued one waits for the quota)
            runtime.validate(job, quota=False)
            runtime.restore(job, admitted=job.id in ran)
        except Exception as exc:  # a row this version cannot run: fail it, say why, go on
            recovered.append(_fail_unrestorable(store, job.id, runtime.now, str(exc)[:300]))
            if not job.done:
                transition(job, Fail(recovered[-1].message), runtime.now)
            svc.archive[job.id] = job
            continue
        current = runtime.job(job.id)
        if current is not None and current is not job and current.status != JobStatus.PENDING:
            # the cluster holds the job's truth (Kubernetes: its Job object): say what it found
            recovered.append(JobEvent(job.id, runtime.now, "recovered", current.state,
                                      f"found {current.status.value} in the cluster after a control-plane "
                                      "restart"))
            found[job.id] = current
            continue
        recovered.append(JobEvent(job.id, runtime.now, "requeued", JobState.QUEUED,
                                  "re-queued after a control-plane restart"))
    for row in bad:
        recovered.append(_fail_unrestorable(store, row.job_id, runtime.now, f"unreadable row: {row.why}"))
    if recovered:
        store.record_events(recovered, found)
    svc.adopt_discovered()
    # the finished jobs restored wait for the retention policy as if they had finished here (in the order they did)
    for job in sorted(svc.archive.values(), key=lambda j: (j.finish_s, j.id)):
        if job.status.terminal and not job.synthetic:
            svc._finished.note(job.id, job.finish_s if job.finish_s >= 0 else runtime.now)
    svc.prune_finished()
    live = sum(1 for e in recovered if e.kind in ("requeued", "recovered"))
    store.audit("system", "service.start", "", f"{live} live job(s) recovered, {len(recovered) - live} not restored")
    return svc, admin.source == "generated"


__all__ = ["REMEDIATION_ACTOR", "SYNTHETIC_TENANT", "Service", "ServiceConfig", "open_service"]
