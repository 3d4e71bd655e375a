"""The job engine: one queue, one scheduling pass, one life cycle for every backend.

:class:`JobEngine` owns the jobs, the queue (kept in the queue policy's order), the clock (a :class:`Kernel` of
arrivals, finishes, re-keys and scheduled calls) and the bookkeeping of what runs; it changes a job's state only
through :func:`~gpucluster.jobs.transitions.transition` and places jobs only through a
:class:`~gpucluster.jobs.placement.Placer` (all of a job's pods or none, through the scheduler framework). The
drivers feed it: the simulator (:class:`gpucluster.simulator.Simulation`: a trace, faults, a network model),
the embedded control plane (the same simulation on the wall clock) and Kubernetes (pods created and
observed).

A scheduling pass runs only at a time when something changed (arrival, finish, priority change, or the cluster
itself: the engine compares the state's change stamp, :mod:`gpucluster.model.capacity`, with the one its last
pass saw, so no driver has to say that it cordoned, failed or repaired something; a new quota tree revision
counts too), walks the queue in policy order, skips a job without calling the scheduler when the free GPU count
cannot hold it or a job of the same shape already failed in this pass, and stops at the first job that does
not fit for policies without backfilling. Preemption and reclaim ask the planners of
:mod:`gpucluster.jobs.preemption` for victims; the ``offers`` policy runs one Mesos-style round
(:func:`gpucluster.jobs.offers.offer_round`) and places each job whose tasks were all accepted on exactly the
accepted nodes.

Single-threaded by contract: one driver calls it at a time.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpucluster.jobs.admission import least_gpus, never_fits
from gpucluster.jobs.kernel import Kernel
from gpucluster.jobs.model import STATUSES, Job, JobEvent, JobSpec, JobState, task_pods
from gpucluster.jobs.offers import offer_round
from gpucluster.jobs.placement import Placer
from gpucluster.jobs.policies import Key, QueuePolicy
from gpucluster.jobs.preemption import Free, Running, plan_preemption, plan_reclaim
from gpucluster.jobs.transitions import (
    Arrive,
    Cancel,
    Evict,
    Fail,
    Finish,
    Move,
    Note,
    Preempt,
    Preempted,
    Reject,
    Start,
    Stimulus,
    transition,
)
from gpucluster.model import ClusterState, Pod, views
from gpucluster.model.capacity import state_stamp
from gpucluster.model.labels import (
    DATA_LOCALITY_ANNOTATION,
    JOB_LABEL,
    NODE_NAME_ANNOTATION,
    QUOTA_ADMITTED_ANNOTATION,
)
from gpucluster.model.share import allocation_gpus
from gpucluster.scheduler import GroupDecision
from gpucluster.scheduler.feasibility import Infeasible
from gpucluster.scheduler.plugins.datalocality import DataCatalog
from gpucluster.scheduler.plugins.quota import QuotaTree, pod_charge

log = logging.getLogger(__name__)

_NO_CACHE: dict[str, float] = {}
"""Sentinel: tenant shares are not cached (outside a dynamic re-sort)."""

NOTE_REPEAT_S = 60.0
"""A waiting job whose reason did not change is reported again (``unschedulable``, folded into the one event by
whoever records them) after this many clock seconds, so its last-seen time stays fresh without an event per
scheduling pass."""
PRIO_FINISH = 0
PRIO_CALL = 1
PRIO_ARRIVE = 2
PRIO_REKEY = 3


# ------------------------------------------------------------------------------------------------ timers
@dataclass(frozen=True, slots=True)
class _Arrive:
    job_id: str


@dataclass(frozen=True, slots=True)
class _Finish:
    job_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class _Rekey:
    job_id: str
    stamp: float
    running: bool


@dataclass(frozen=True, slots=True)
class _Call:
    fn: Callable[[], None]


Timer = _Arrive | _Finish | _Rekey | _Call
Slowdown = Callable[[Job, list[tuple[int, int]]], tuple[float, float | None]]
"""(job, [(node, device)] of its placement) -> (factor >= 1 the placement stretches it by, topology level)."""


def no_slowdown(job: Job, devices: list[tuple[int, int]]) -> tuple[float, float | None]:
    return 1.0, None


@dataclass(slots=True)
class SeriesPoint:
    time: float
    busy_gpus: float
    queued_jobs: int
    running_jobs: int


@dataclass(slots=True)
class _TenantUse:
    gpus: float = 0.0
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(slots=True)
class Totals:
    """The run's counters, and the cluster's usable capacity read through from the state that owns it
    (``gpus``, ``cpu_milli``, ``memory_mib``: :class:`gpucluster.model.capacity.UsableCapacity`)."""

    state: Callable[[], ClusterState] | None = None
    """Where the capacity figures come from (the engine's placer's current state)."""
    busy_gpu_s: float = 0.0
    last_t: float = 0.0
    preemptions: int = 0
    evictions: int = 0
    passes: int = 0
    schedule_calls: int = 0
    reclaims: int = 0
    """Jobs preempted to give a queue back its guarantee (counted in ``preemptions`` too)."""
    offers_accepted: int = 0
    offers_declined: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """Usable GPUs (healthy, on schedulable nodes)."""
        return self.state().capacity.devices if self.state is not None else 0

    @property
    def cpu_milli(self) -> int:
        """CPU of the schedulable nodes."""
        return self.state().capacity.cpu_milli if self.state is not None else 0

    @property
    def memory_mib(self) -> int:
        """Host memory of the schedulable nodes."""
        return self.state().capacity.memory_mib if self.state is not None else 0


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """How a :class:`JobEngine` runs (every field has the simulator's default)."""

    restart_overhead_s: float = 0.0
    """Seconds a restarted job (after preemption or eviction) spends before its work resumes."""
    tenant_weights: dict[str, float] = field(default_factory=dict)
    """DRF weights of tenants without a queue in the quota tree."""
    locality_delay_s: float = 0.0
    """Delay scheduling: a job with a dataset waits up to this long for nodes holding a replica."""
    record_series: bool = True
    """Keep a point per change of (busy GPUs, queued, running) for plots."""
    describe: bool = False
    """Keep what the control plane shows: why each queued job waits (``Job.message``, ``unschedulable``
    events), each running job's placements and the GPU-equivalents it holds."""
    namespace: str = ""
    """Namespace of the pods (default: the job's tenant)."""
    timed_finish: bool = True
    """A running job ends when its work is done (a timer at ``duration_s``); False: only when the driver says so
    (:meth:`JobEngine.finish`, :meth:`JobEngine.fail`: Kubernetes reports it), ``duration_s`` is an estimate."""
    device_check: bool = True
    """Admit a job only when whole tasks of its size fit the free devices of single nodes (and the placer places
    every pod); False: count-only admission, as a quota system that counts GPUs admits (Kueue), for comparison
    (the placer then decides what it can and the rest waits after admission)."""
    quota_waits: bool = False
    """A job beyond its tenant's quota waits in the queue, saying so, until the quota rises (a control plane,
    whose quotas change while jobs wait: quotas apply to admission, never retroactively); False: it is rejected
    when it arrives (a simulated run, whose quotas are fixed)."""


class JobEngine:
    """Jobs, their queue and their life cycle over a :class:`Placer` (see the module docstring)."""

    def __init__(self, placer: Placer, policy: QueuePolicy, *, quota: QuotaTree | None = None,
                 catalog: DataCatalog | None = None, slowdown: Slowdown = no_slowdown,
                 options: EngineOptions | None = None, kernel: Kernel[Timer] | None = None) -> None:
        self.placer = placer
        self.policy = policy
        self.options = options or EngineOptions()
        self.kernel: Kernel[Timer] = kernel if kernel is not None else Kernel()  # an empty Kernel is falsy
        self.quota = quota
        self.catalog = catalog
        self.slowdown = slowdown
        self._reclaim = bool(policy.reclaim and quota is not None
                             and any(q.guarantee > 0 for q in quota.queues.values()))
        self.locality_delay_s = self.options.locality_delay_s
        self.restart_overhead_s = self.options.restart_overhead_s
        self.tenant_weights = dict(self.options.tenant_weights)
        self.record_series = self.options.record_series
        self.jobs: dict[str, Job] = {}
        self.listeners: list[Callable[[JobEvent], None]] = []
        self.series: list[SeriesPoint] = []
        self.totals = Totals(state=lambda: self.placer.state)
        self._delay_wake: set[tuple[str, float]] = set()
        self._queue: list[tuple[Key, int, str]] = []
        self._entry: dict[str, tuple[Key, int, str]] = {}
        self._seq = itertools.count()
        self._running: dict[str, Key] = {}
        self._running_rank: dict[str, Key] = {}
        self._finish_seq: dict[str, int] = {}
        self._tenants: dict[str, _TenantUse] = {}
        self._dirty = False
        self._busy = 0.0
        self._share_cache: dict[str, float] = _NO_CACHE
        self._slots_stamp: tuple[Any, ...] = ()
        self._slots: dict[int, int] = {}
        """Task size -> whole tasks of that size the free devices hold (cached per state stamp)."""
        self._seen: tuple[Any, ...] = ()
        """The cluster's change stamp (and the quota tree's revision) when the last pass ended."""
        self._shapes: dict[str, tuple[float, int, tuple[Any, ...], bool, int]] = {}
        """Job id -> (GPU share, task GPUs, shape, whole, tasks): the pass reads these for every queued job."""
        self._never: dict[tuple[Any, ...], Infeasible | None] = {}
        """(shape, tasks, tenant, node count) -> why such a job can never fit (None = it can)."""
        self._failure: GroupDecision | None = None
        self._admitted: set[str] = set()
        """Jobs admitted under an earlier quota (they ran before a control-plane restart): their next placement
        is charged to the quota but not held to a limit lowered since."""
        self._gpuless = 0
        """Queued jobs that ask for no GPU (they may start while every GPU is busy)."""
        self.paused = False
        """True: no scheduling pass runs (a control-plane replica that is not the leader only mirrors what the
        leader decides: :meth:`adopt`, :meth:`withdraw`, :meth:`finish`, :meth:`fail`)."""
        self._seen = self._stamp()

    # ================================================================================ public API
    @property
    def now(self) -> float:
        return self.kernel.now

    @property
    def state(self) -> ClusterState:
        return self.placer.state

    def job(self, job_id: str) -> Job:
        return self.jobs[job_id]

    def submit(self, job: JobSpec | Job, *, admitted: bool = False) -> Job:
        """Add a job (a spec, or a record built by the caller); it arrives at ``max(submit_s, now)``. Raises
        ``ValueError`` on a duplicate id. ``admitted``: the job was admitted before (it ran before a control-plane
        restart): its next start is not held to its tenant's quota, which may have been lowered since."""
        spec = job if isinstance(job, JobSpec) else job.spec
        if spec.job_id in self.jobs:
            raise ValueError(f"job {spec.job_id!r} submitted twice")
        per_node = int(self.state.dev_count.max()) if self.state.n_nodes else 0
        fitted = spec.split(per_node)
        if isinstance(job, JobSpec):
            record = Job(fitted)
        else:
            record = job
            record.spec = fitted
        if self.options.describe:
            record.least_gpus = least_gpus(fitted, self.state)
        self.jobs[spec.job_id] = record
        if admitted:
            self._admitted.add(spec.job_id)
        self.kernel.schedule(max(spec.submit_s, self.now), _Arrive(spec.job_id), PRIO_ARRIVE)
        return record

    def never_fits(self, spec: JobSpec, quota: bool = True) -> Infeasible | None:
        """Why ``spec`` could never run here, even on the empty cluster, or (with ``quota``) beyond its tenant's
        quota (None when it could). Cached per shape and tenant under the state's layout (which nodes exist) and
        the quota tree's revision."""
        tree = self.quota if quota else None
        key = (spec.shape, spec.task_gpus, spec.cpu_milli, spec.memory_mib, spec.num_tasks, spec.tenant,
               self.state.layout, tree.revision if tree is not None else -1)
        if key in self._never:
            return self._never[key]
        found = self._never[key] = never_fits(spec, self.state, tree)
        return found

    def cancel(self, job_id: str, why: str = "cancelled by request") -> bool:
        """Cancel a job wherever it is; False if it had already ended."""
        return self._end(job_id, Cancel(why))

    def fail(self, job_id: str, why: str) -> bool:
        """The job failed outside the engine's control (e.g. its pods failed); False if it had already ended."""
        return self._end(job_id, Fail(why))

    def _end(self, job_id: str, stimulus: Cancel | Fail) -> bool:
        job = self.jobs[job_id]
        if job.done:
            return False
        if job.state == JobState.RUNNING:
            self._release(job)
        elif job.state == JobState.QUEUED:
            self._dequeue(job)
        self._apply(job, stimulus)
        self._dirty = True
        return True

    def finish(self, job_id: str, message: str = "") -> bool:
        """The running job completed outside the engine's clock (e.g. every pod succeeded)."""
        job = self.jobs[job_id]
        if job.state != JobState.RUNNING:
            return False
        self._complete(job, message)
        return True

    def forget(self, job_id: str) -> None:
        """Drop an ended job's record (a long-running control plane prunes its background jobs)."""
        job = self.jobs.get(job_id)
        if job is not None and job.done:
            del self.jobs[job_id]
            self._shapes.pop(job_id, None)
            self._admitted.discard(job_id)

    def run_until(self, t: float) -> None:
        """Run every event up to time ``t`` and leave the clock at ``t`` (or at the last event for inf).

        Changes made since the last call (submit, cancel, and any change of the cluster or the quota tree) are
        scheduled first, at the current time."""
        if self._dirty or self._moved():
            self._pass()
        while True:
            nxt = self.kernel.peek()
            if nxt > t or nxt == math.inf:
                break
            self._advance(nxt)
            while self.kernel.peek() == nxt:
                event = self.kernel.step()
                assert event is not None
                self._handle(event)
            if self._dirty or self._moved():
                self._pass()
        if t != math.inf and t > self.now:
            self._advance(t)
            self.kernel.advance(t)

    def run(self) -> None:
        """Run until no event is left."""
        self.run_until(math.inf)

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` at engine time ``t`` (faults and scripted changes use this)."""
        self.kernel.schedule(max(t, self.now), _Call(fn), PRIO_CALL)

    def emit(self, event: JobEvent) -> None:
        for fn in self.listeners:
            fn(event)

    # ---------------------------------------------------------------------------- cluster changes
    def evict_on(self, node: int, hit: Callable[[Any], bool], why: str) -> list[str]:
        """Evict (re-queue from the last checkpoint) every running job with a pod on node index ``node`` whose
        allocation ``hit`` selects; returns their ids."""
        state = self.state
        jobs: list[str] = []
        for key in sorted(state.pods_on_node[node]):
            alloc = state.allocations[key]
            if alloc.pod is None or not hit(alloc):
                continue
            jid = alloc.pod.labels.get(JOB_LABEL, "")
            if jid in self.jobs and jid not in jobs:
                jobs.append(jid)
        for jid in jobs:
            self.requeue(jid, why)
        return jobs

    def requeue(self, job_id: str, why: str) -> bool:
        """Give back what the running job holds and queue it again (an eviction: it restarts from its last
        checkpoint), e.g. its group did not bind whole on the cluster and was rolled back; False if it was not
        running."""
        job = self.jobs[job_id]
        if job.state != JobState.RUNNING:
            return False
        self._release(job)
        self._apply(job, Evict(why))
        self.totals.evictions += 1
        self._enqueue(job)
        return True

    def move(self, pod_key: str, message: str) -> None:
        """A running pod now sits elsewhere (defragmentation): update its job's placement."""
        alloc = self.state.allocations.get(pod_key)
        if alloc is None or alloc.pod is None:
            return
        job = self.jobs.get(alloc.pod.labels.get(JOB_LABEL, ""))
        if job is not None and job.state == JobState.RUNNING:
            self._apply(job, Move(pod_key, views.placement(self.state, pod_key, alloc.node), message))

    def adopt(self, job: Job, pods: Sequence[Pod], started_s: float, attempt: int | None = None) -> None:
        """Take a job whose pods already hold their resources (a restarted control plane finds them bound, a
        follower sees its leader's admission) as running since ``started_s``: no placement, the same bookkeeping
        as a start. A new or queued job is taken out of the queue first; ``attempt`` (default the next) names
        the run."""
        if job.spec.job_id not in self.jobs:
            self.jobs[job.spec.job_id] = job
        if job.state == JobState.NEW:
            self._apply(job, Arrive())
        elif job.state == JobState.QUEUED and job.job_id in self._entry:
            self._dequeue(job)
        state = self.state
        held = [p for p in pods if p.key in state.allocations]
        if self.quota is not None:
            snap = state.snapshot()
            for pod in held:
                self.quota.charge(pod.key, pod.charged_tenant, pod_charge(pod, snap))
        names = tuple(state.allocations[p.key].node for p in held)
        self._begin(job, job.attempt + 1 if attempt is None else attempt, held, names, [], run_start=started_s)

    def resume(self) -> None:
        """Run scheduling passes again (after :attr:`paused`: a replica that became the leader); the next run
        makes one at once."""
        self.paused = False
        self._dirty = True

    def withdraw(self, job_id: str, why: str) -> bool:
        """The running job was stopped outside the engine without losing work (another control-plane replica
        preempted it, its admission was withdrawn): release what it holds and queue it again (a ``preempted``
        event); False if it was not running."""
        job = self.jobs[job_id]
        if job.state != JobState.RUNNING:
            return False
        self._release(job)
        self._apply(job, Preempt(why))
        self._apply(job, Preempted(why))
        self._enqueue(job)
        return True

    # ---------------------------------------------------------------------------- views
    def tenant_share(self, tenant: str) -> float:
        cached = self._share_cache.get(tenant)
        if cached is not None:
            return cached
        use = self._tenants.get(tenant)
        if use is None:
            return 0.0
        t = self.totals
        share = max(use.gpus / max(t.gpus, 1), use.cpu_milli / max(t.cpu_milli, 1),
                    use.memory_mib / max(t.memory_mib, 1))
        share /= self.tenant_weights.get(tenant, 1.0)
        if self._share_cache is not _NO_CACHE:
            self._share_cache[tenant] = share
        return share

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        tree = self.quota
        if tree is not None and tenant in tree.queues:
            q = tree.queues[tenant]
            used = tree.used[tenant]["gpu"]
            return (0.0 if used < q.guarantee else 1.0,
                    max(used - q.guarantee, 0.0) / max(self.totals.gpus, 1) / q.weight)
        return (1.0, self.tenant_share(tenant))

    def tenant_usage(self) -> dict[str, dict[str, float]]:
        return {k: {"gpus": v.gpus, "cpu_milli": v.cpu_milli, "memory_mib": v.memory_mib}
                for k, v in self._tenants.items()}

    @property
    def busy_gpus(self) -> float:
        return self._busy

    @property
    def usable_gpus(self) -> int:
        return self.totals.gpus

    def queued(self) -> list[Job]:
        """Queued jobs in the policy's order."""
        return [self.jobs[jid] for _, _, jid in self._queue]

    def queue_order(self) -> list[str]:
        """Ids of the jobs waiting to run, the next to be tried first: the queued ones in the policy's order (a
        dynamic policy's as its next pass re-sorts them), then those not yet arrived, keyed as they will be."""
        pol = self.policy
        entries = self._queue
        self._share_cache = {}
        try:
            if pol.dynamic:
                entries = sorted((pol.key(self.jobs[jid], self), s, jid) for _, s, jid in self._queue)
            arriving = sorted((j for j in self.jobs.values() if j.state == JobState.NEW),
                              key=lambda j: (j.spec.submit_s, j.job_id))
            late = [(pol.key(j, self), n, j.job_id) for n, j in enumerate(arriving, start=1 << 62)]
        finally:
            self._share_cache = _NO_CACHE
        return [jid for _, _, jid in sorted([*entries, *late])]

    def running(self) -> list[Job]:
        return [self.jobs[jid] for jid in self._running]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        for job in self.jobs.values():
            out[job.state.value] += 1
        return out

    def status_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Jobs per control-plane status (``pending``, ``running`` ...): all jobs, and the user (non-synthetic)
        ones."""
        every = dict.fromkeys(STATUSES, 0)
        user = dict.fromkeys(STATUSES, 0)
        for job in self.jobs.values():
            every[job.status] += 1
            if not job.synthetic:
                user[job.status] += 1
        return every, user

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        """Tenant -> {"gpus": held, "pending_gpus": asked by waiting jobs, "running": n, "pending": n}."""
        out: dict[str, dict[str, float]] = {}
        for job in self.jobs.values():
            if job.state.terminal:
                continue
            u = out.setdefault(job.tenant, {"gpus": 0.0, "pending_gpus": 0.0, "running": 0.0, "pending": 0.0})
            if job.state == JobState.RUNNING:
                u["gpus"] += job.gpus
                u["running"] += 1
            else:
                u["pending_gpus"] += job.gpus
                u["pending"] += 1
        return out

    def queue_stats(self) -> tuple[int, float]:
        """(pods of the jobs waiting to run, seconds the oldest of them has waited)."""
        waiting = [j for j in self.jobs.values() if j.state in (JobState.NEW, JobState.QUEUED)]
        oldest = min((j.queued_since_s if j.state == JobState.QUEUED else j.spec.submit_s for j in waiting),
                     default=self.now)
        return sum(j.replicas for j in waiting), max(0.0, self.now - oldest)

    # ================================================================================ internals
    def _apply(self, job: Job, stimulus: Stimulus) -> None:
        events = transition(job, stimulus, self.now)
        if self.listeners:
            for ev in events:
                for fn in self.listeners:
                    fn(ev)

    def _stamp(self) -> tuple[Any, ...]:
        s = self.state
        return s.layout, s.generation, self.quota.revision if self.quota is not None else 0

    def _moved(self) -> bool:
        """The cluster or the quota tree changed since the last pass ended (outside the engine: a cordon, a
        failure, a repair, an informer update, new limits)."""
        return self._stamp() != self._seen

    def _advance(self, t: float) -> None:
        tot = self.totals
        if t > tot.last_t:
            tot.busy_gpu_s += self._busy * (t - tot.last_t)
            tot.last_t = t

    def _handle(self, event: Timer) -> None:
        if isinstance(event, _Finish):
            job = self.jobs.get(event.job_id)
            if job is not None and job.state == JobState.RUNNING and job.attempt == event.attempt:
                self._complete(job)
        elif isinstance(event, _Arrive):
            job = self.jobs.get(event.job_id)
            if job is not None and job.state == JobState.NEW:
                # a control plane's job beyond its quota waits for it (the quota may rise); an admitted one
                # is not held to it at all
                why = self.never_fits(job.spec, quota=not self.options.quota_waits
                                      and event.job_id not in self._admitted)
                if why is not None:
                    self._apply(job, Reject(f"rejected: {why.why}"))
                else:
                    self._apply(job, Arrive())
                    self._enqueue(job)
        elif isinstance(event, _Rekey):
            self._rekey(event)
        else:
            event.fn()

    # ---------------------------------------------------------------------------- queue
    def _enqueue(self, job: Job) -> None:
        if job.spec.gpu_share <= 0:
            self._gpuless += 1
        entry = (self.policy.key(job, self), next(self._seq), job.job_id)
        bisect.insort(self._queue, entry)
        self._entry[job.job_id] = entry
        t = self.policy.queued_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(t, _Rekey(job.job_id, job.queued_since_s, False), PRIO_REKEY)
        self._dirty = True

    def _dequeue(self, job: Job) -> None:
        if job.spec.gpu_share <= 0:
            self._gpuless -= 1
        entry = self._entry.pop(job.job_id)
        i = bisect.bisect_left(self._queue, entry)
        assert self._queue[i] == entry
        del self._queue[i]

    def _unlink(self, job: Job) -> None:
        entry = self._entry.pop(job.job_id)
        i = bisect.bisect_left(self._queue, entry)
        assert self._queue[i] == entry
        del self._queue[i]

    def _rekey(self, ev: _Rekey) -> None:
        job = self.jobs.get(ev.job_id)
        if job is None:
            return
        if ev.running:
            if job.state != JobState.RUNNING or job.run_start_s != ev.stamp:
                return
            self._running[job.job_id] = self.policy.key(job, self)
            self._running_rank[job.job_id] = self.policy.rank(self._running[job.job_id])
            t = self.policy.running_change_at(job, self.now)
            if t != math.inf:
                self.kernel.schedule(t, _Rekey(job.job_id, ev.stamp, True), PRIO_REKEY)
        else:
            if job.state != JobState.QUEUED or job.queued_since_s != ev.stamp:
                return
            self._unlink(job)
            entry = (self.policy.key(job, self), next(self._seq), job.job_id)
            bisect.insort(self._queue, entry)
            self._entry[job.job_id] = entry
        self._dirty = True

    # ---------------------------------------------------------------------------- the pass
    def _note(self, job: Job, message: str) -> None:
        if job.state != JobState.QUEUED:
            return
        if job.message != message:
            self._apply(job, Note(message))
        elif self.now - job.noted_s >= NOTE_REPEAT_S:
            self._apply(job, Note(message, repeat=True))

    def _pass(self) -> None:
        self._dirty = False
        tot = self.totals
        tot.passes += 1
        pol = self.policy
        describe = self.options.describe
        device_check = self.options.device_check
        if self.paused:
            return
        if pol.via_offers:
            if self._queue and tot.gpus - self._busy > 0:
                self._offers_pass()
        elif self._queue and (pol.preemptive or self._reclaim or tot.gpus - self._busy > 0 or self._gpuless):
            if pol.dynamic:
                self._share_cache = {}
                self._queue = sorted(((pol.key(self.jobs[jid], self), s, jid) for _, s, jid in self._queue))
                self._entry = {jid: e for e in self._queue for jid in (e[2],)}
                self._share_cache = _NO_CACHE
            free = tot.gpus - self._busy
            failed: dict[tuple[Any, ...], float] = {}
            why: dict[tuple[Any, ...], str] = {}
            worst: Key | None = None
            stale_worst = True
            no_victims: dict[tuple[Key, int], float] = {}
            """(rank, task size) -> smallest need for which preemption found no victims in this pass."""
            jobs = self.jobs
            shapes = self._shapes
            queued = JobState.QUEUED
            order = list(self._queue)
            stopped = len(order)
            for pos, (key, _, jid) in enumerate(order):
                job = jobs[jid]
                if job.state != queued:
                    continue
                spec = job.spec
                info = shapes.get(jid)
                if info is None:
                    info = shapes[jid] = (spec.gpu_share, spec.task_gpus,
                                          (spec.shape, spec.tenant, jid in self._admitted), spec.whole,
                                          spec.num_tasks)
                need, task_gpus, shape, whole, tasks = info
                if need <= free and need < failed.get(shape, math.inf) and (
                        not whole or not device_check or self._slots_for(task_gpus) >= tasks):
                    if self._try_start(job, key):
                        free -= need
                        stale_worst = True
                        continue
                    if job.state != queued:  # its placement failed outright
                        continue
                    failed[shape] = need
                    if describe:
                        why[shape] = self._failure_message(job)
                if self._reclaim and self._reclaim_for(job, key, free):
                    free = tot.gpus - self._busy
                    failed.clear()
                    continue
                stop = False
                if pol.preemptive and self._running:
                    if stale_worst:
                        worst, stale_worst = max(self._running_rank.values()), False
                    assert worst is not None
                    rank = pol.rank(key)
                    if rank < worst and need < no_victims.get((rank, task_gpus), math.inf):
                        if self._preempt_for(job, key, free):
                            free = tot.gpus - self._busy
                            stale_worst = True
                            no_victims.clear()
                            continue
                        no_victims[(rank, task_gpus)] = need
                    elif free <= 0:
                        stop = True
                if describe:
                    self._note(job, why.get(shape) or self._count_message(job, free))
                if stop or not pol.backfill or (free <= 0 and not pol.preemptive and not self._reclaim
                                                and not self._gpuless):
                    stopped = pos + 1
                    break
            if describe:  # the jobs the pass did not reach wait their turn
                for ahead, (_, _, jid) in enumerate(order[stopped:], start=stopped):
                    job = jobs[jid]
                    if job.state == queued:
                        self._note(job, self._count_message(job, free) if job.spec.gpu_share > free else
                                   f"waiting its turn: {ahead} job(s) ahead in {pol.name} order")
        elif describe:
            free = tot.gpus - self._busy
            for job in self.queued():
                self._note(job, self._count_message(job, free))
        # what the pass itself changed (victims re-queued) waits for the next event, so stepping the clock
        # in small or large increments gives the same run
        self._dirty = False
        self._seen = self._stamp()
        if self.record_series:
            point = SeriesPoint(self.now, self._busy, len(self._queue), len(self._running))
            last = self.series[-1] if self.series else None
            if last is None or (last.busy_gpus, last.queued_jobs, last.running_jobs) != (
                    point.busy_gpus, point.queued_jobs, point.running_jobs):
                self.series.append(point)

    def _count_message(self, job: Job, free: float) -> str:
        """Why a job the pass did not try waits, in words that do not change as the free count moves (one
        reason, one event: the queue view shows the free GPUs)."""
        spec = job.spec
        if spec.gpu_share > free:
            return (f"waiting for GPUs: needs {spec.gpu_share:g} GPU(s) as {spec.num_tasks} task(s), more than "
                    "are free now")
        if spec.whole and spec.task_gpus > 0:
            if self.options.device_check and self._slots_for(spec.task_gpus) < spec.num_tasks:
                # enough free GPUs in all, in the wrong places: admission sees devices, a count would not
                return (f"waiting for a placement: needs {spec.num_tasks} task(s) of {spec.task_gpus:g} whole "
                        f"GPU(s) on one node each; enough GPUs are free in all but fragmented: too few nodes have "
                        f"{spec.task_gpus:g} free")
            return (f"waiting for GPUs: needs {spec.num_tasks} task(s) of {spec.task_gpus:g} whole GPU(s) each; "
                    "too few nodes have that many free now")
        return "waiting for room: no node can take it now"

    def _failure_message(self, job: Job) -> str:
        """Why the last placement of ``job`` failed, in words (quota first: it is what the tenant can act on)."""
        group = self._failure
        if group is None or group.failed is None:
            return "unschedulable"
        failed = group.failed
        tree = self.quota
        if "QuotaExceeded" in failed.reasons or "QuotaExceeded" in failed.status.reasons:
            tenant = job.spec.tenant
            if tree is not None and tenant in tree.queues and "gpu" in tree.queues[tenant].limit:
                return (f"waiting for quota: tenant {tenant} holds {tree.used[tenant]['gpu']:g} of "
                        f"{tree.queues[tenant].limit['gpu']:g} GPUs, the job needs {job.gpus:g}")
            return f"waiting for quota: {failed.message()}"
        return f"unschedulable: {failed.message()}"

    def _running_view(self) -> Running:
        return Running(self.jobs, self._running, self._running_rank, self.now - self.policy.min_run_s)

    def _free(self, free: float) -> Free:
        return Free(free, self.state.node_idle, self.state.node_index)

    def _preempt_for(self, job: Job, key: Key, free: float) -> bool:
        """Preempt the worst running jobs whose key is worse than ``key`` until ``job`` fits by count, and
        start it; False (nothing changed) if that cannot work."""
        victims = plan_preemption(self._running_view(), job, self.policy.rank(key), self._free(free))
        return self._evict_and_start(job, key, victims, f"for {job.job_id}")

    def _reclaim_for(self, job: Job, key: Key, free: float) -> bool:
        """Give ``job``'s queue back its guarantee (:func:`~gpucluster.jobs.preemption.plan_reclaim`)."""
        assert self.quota is not None
        tenant_gpus = {t: u.gpus for t, u in self._tenants.items()}
        victims = plan_reclaim(self._running_view(), job, self._free(free), self.quota, tenant_gpus)
        before = self.totals.preemptions
        if not self._evict_and_start(job, key, victims, f"reclaim for {job.job_id}"):
            return False
        self.totals.reclaims += self.totals.preemptions - before
        return True

    def _evict_and_start(self, job: Job, key: Key, victims: list[Job], why: str) -> bool:
        """Stop the victims and start ``job``; if it still does not fit (fragmentation) the victims are started
        again at once and False is returned."""
        if not victims:
            return False
        for victim in victims:
            self._release(victim)
            self._apply(victim, Preempt(why))
            self._enqueue(victim)
        if self._try_start(job, key):
            for victim in victims:
                self.totals.preemptions += 1
                self._apply(victim, Preempted(why))
            return True
        for victim in victims:
            if not self._try_start(victim, self._entry[victim.job_id][0]) and victim.state == JobState.QUEUED:
                self.totals.preemptions += 1
                self._apply(victim, Preempted(why))
        return False

    def _offers_pass(self) -> None:
        """One Mesos-style offer round (:mod:`gpucluster.jobs.offers`); place what was accepted."""
        s = self.state
        share = np.where(s.dev_usable, np.maximum(s.dev_core_free, 0), 0).sum(axis=1) / 1000.0
        whole = s.node_idle
        cpu = s.cpu_free
        mem = s.mem_free
        nodes = {s.nodes[i].name: {"gpu": float(share[i]), "whole": float(whole[i]), "cpu": float(cpu[i]),
                                   "mem": float(mem[i])}
                 for i in np.flatnonzero(share > 0).tolist()}
        if not nodes:
            return
        tot = self.totals
        queued: dict[str, list[Job]] = {}
        for _, _, jid in self._queue:
            job = self.jobs[jid]
            queued.setdefault(job.spec.tenant, []).append(job)
        used = {t: {"gpu": u.gpus, "cpu": float(u.cpu_milli), "mem": float(u.memory_mib)}
                for t, u in self._tenants.items()}
        weights = dict(self.tenant_weights)
        if self.quota is not None:
            weights.update({q: spec.weight for q, spec in self.quota.queues.items()})
        delay = self.locality_delay_s or float(getattr(self.policy, "locality_delay_s", 0.0))
        result = offer_round(nodes, {"gpu": float(tot.gpus), "cpu": float(tot.cpu_milli),
                                     "mem": float(tot.memory_mib)},
                             queued, used, weights, self.now, delay, self.catalog)
        tot.offers_accepted += result.accepted
        tot.offers_declined += result.declined
        for t in result.wake_at:
            stamp = ("", t)
            if stamp not in self._delay_wake:
                self._delay_wake.add(stamp)
                self.at(t, self._wake)
        for job, placement in result.placed:
            self._try_start(job, self._entry[job.job_id][0], placement)

    # ---------------------------------------------------------------------------- start / stop
    def _slots_for(self, task_gpus: int) -> int:
        """Whole tasks of ``task_gpus`` devices the idle devices can hold (cached per state stamp)."""
        s = self.placer.state
        stamp = state_stamp(s)
        if self._slots_stamp != stamp:
            self._slots.clear()
            self._slots_stamp = stamp
        n = self._slots.get(task_gpus)
        if n is None:
            n = self._slots[task_gpus] = int((s.node_idle // max(task_gpus, 1)).sum())
        return n

    def _try_start(self, job: Job, key: Key, pinned: tuple[str, ...] = ()) -> bool:
        """Place every task of ``job`` (on ``pinned``, one node per task, when given) or none; start it."""
        spec = job.spec
        attempt = job.attempt + 1
        pods = task_pods(spec, attempt, self.options.namespace)
        if job.job_id in self._admitted:
            pods = [replace(p, annotations={**p.annotations, QUOTA_ADMITTED_ANNOTATION: "true"}) for p in pods]
        if pinned:
            assert len(pinned) == len(pods)
            pods = [replace(p, annotations={**p.annotations, NODE_NAME_ANNOTATION: n})
                    for p, n in zip(pods, pinned, strict=True)]
        waited = self.now - job.queued_since_s
        if self.locality_delay_s > 0 and spec.dataset and self.catalog is not None and not pinned \
                and waited < self.locality_delay_s:
            pods = [replace(p, annotations={**p.annotations, DATA_LOCALITY_ANNOTATION: "required"}) for p in pods]
            stamp = (job.job_id, job.queued_since_s)
            if stamp not in self._delay_wake:
                self._delay_wake.add(stamp)
                self.at(job.queued_since_s + self.locality_delay_s, self._wake)
        try:
            group = self.placer.place(job, pods)
        except Exception as exc:  # a plugin (or the API server) failed on this job: it fails, the pass goes on
            log.exception("placing job %s failed", job.job_id)
            self._dequeue(job)
            self._apply(job, Fail(f"placement failed: {type(exc).__name__}: {exc}"))
            self._failure = None
            return False
        self.totals.schedule_calls += group.cycles
        if not group.ok:
            self._failure = group
            return False
        self._dequeue(job)
        self._admitted.discard(job.job_id)
        names: list[str] = []
        devices: list[tuple[int, int]] = []
        nodes = self.state.nodes
        for d in group.decisions:
            assert d.allocation is not None
            names.append(nodes[d.node_index].name)
            devices.extend((d.node_index, g.device_index) for g in d.allocation.grants)
        self._begin(job, attempt, pods, tuple(names), devices)
        return True

    def _begin(self, job: Job, attempt: int, pods: Sequence[Pod], names: tuple[str, ...],
               devices: list[tuple[int, int]], run_start: float | None = None) -> None:
        """The job's tasks hold their resources: start it (transition, finish timer, bookkeeping)."""
        spec = job.spec
        state = self.state
        moved = 0
        if spec.dataset and self.catalog is not None:
            moved = sum(int(self.catalog.transfer_bytes(spec.dataset, n)) for n in names)
        slowdown, level = self.slowdown(job, devices)
        placements: list[dict[str, Any]] = []
        held = spec.gpu_share
        if self.options.describe:
            placements = [views.placement(state, p.key, state.allocations[p.key].node)
                          for p in pods if p.key in state.allocations]
            held = sum(allocation_gpus(state, state.allocations[p.key]) for p in pods if p.key in state.allocations)
        overhead = self.restart_overhead_s if attempt > 1 else 0.0
        start = self.now + overhead if run_start is None else run_start
        self._apply(job, Start(attempt, names, tuple(p.key for p in pods), start, slowdown, placements, held,
                               moved, level))
        end = max(start + job.remaining_s * job.slowdown, self.now)
        if end != math.inf and self.options.timed_finish:
            self._finish_seq[job.job_id] = self.kernel.schedule(end, _Finish(job.job_id, attempt), PRIO_FINISH)
        self._busy += spec.gpu_share
        use = self._tenants.setdefault(spec.tenant, _TenantUse())
        use.gpus += spec.gpu_share
        use.cpu_milli += spec.cpu_milli
        use.memory_mib += spec.memory_mib
        self._running[job.job_id] = self.policy.key(job, self)
        self._running_rank[job.job_id] = self.policy.rank(self._running[job.job_id])
        t = self.policy.running_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(max(t, job.run_start_s), _Rekey(job.job_id, job.run_start_s, True), PRIO_REKEY)

    def _wake(self) -> None:
        self._dirty = True

    def _release(self, job: Job) -> None:
        """Give back what the running job holds (its pods, its quota, its share of the counts)."""
        self.placer.release(job, job.pod_keys)
        if self.quota is not None:
            for key in job.pod_keys:
                self.quota.refund(key)
        seq = self._finish_seq.pop(job.job_id, None)
        if seq is not None:
            self.kernel.cancel(seq)
        spec = job.spec
        self._busy -= spec.gpu_share
        use = self._tenants[spec.tenant]
        use.gpus -= spec.gpu_share
        use.cpu_milli -= spec.cpu_milli
        use.memory_mib -= spec.memory_mib
        self._running.pop(job.job_id, None)
        self._running_rank.pop(job.job_id, None)
        self._dirty = True

    def _complete(self, job: Job, message: str = "") -> None:
        self._release(job)
        self._apply(job, Finish(message))
