"""The job engine: one queue, one scheduling pass, one life cycle for every backend.

:class:`JobEngine` owns the jobs, the queue (kept in the queue policy's order), the clock (a :class:`Kernel` of
arrivals, finishes, re-keys and scheduled calls) and the bookkeeping of what runs; it changes a job's state only
through :func:`~gpucluster.jobs.transitions.transition` and places jobs only through a
:class:`~gpucluster.jobs.placement.Placer` (all of a job's pods or none, through the scheduler framework). The
drivers feed it: the simulator (:class:`gpucluster.simulator.Simulation`: a trace, faults, a network model),
the embedded control plane (the same simulation on the wall clock) and Kubernetes (pods created and
observed).

Beside its core (the event loop, the queue, the pass) the engine holds its other concerns as objects of their
own: :class:`~gpucluster.jobs.capacity.CapacityView` (what it reads of the cluster's capacity: usable totals,
whole-task slots, never-fit verdicts, the change stamp), :class:`~gpucluster.jobs.accounting.TenantLedger`
(what each tenant's running jobs hold, fair shares), :class:`~gpucluster.jobs.offers.OffersAdaptor` (the
``offers`` policy's round) and :class:`~gpucluster.jobs.views.JobViews` (what the control plane reads).

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
import heapq
import logging
import math
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpucluster.jobs.accounting import TenantLedger
from gpucluster.jobs.admission import job_charge, least_gpus
from gpucluster.jobs.capacity import CapacityView
from gpucluster.jobs.kernel import Kernel
from gpucluster.jobs.model import Job, JobEvent, JobSpec, JobState, task_pods
from gpucluster.jobs.offers import OffersAdaptor
from gpucluster.jobs.placement import Placer
from gpucluster.jobs.policies import Key, QueuePolicy
from gpucluster.jobs.preemption import Running, plan_preemption, plan_reclaim
from gpucluster.jobs.queue import Entry, JobQueue
from gpucluster.jobs.tally import JobTable
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
from gpucluster.jobs.views import JobViews, count_message, failure_message
from gpucluster.model import ClusterState, Pod, views
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

OUTSIDE_KEY_PREFIX = "outside:"
"""Quota-tree key prefix of what a tenant holds outside the engine's jobs (:meth:`JobEngine.set_outside_use`)."""
NOTE_REPEAT_S = 60.0
"""A waiting job whose reason did not change is reported again (``unschedulable``, folded into the one event by
whoever records them) after this many clock seconds, so its last-seen time stays fresh without an event per
scheduling pass."""
NOTE_SLICE = 256
"""A pass past its budget still notes this many waiting jobs (and checks the time every this many) before the rest
of its notes wait for the next pass (:meth:`JobEngine._note_groups`)."""
CONTROL_PLANE_PASS_BUDGET_S = 0.02
"""A control plane's scheduling pass runs this long at most, then goes on at the next tick (``pass_budget_s``):
the API it shares the event loop with answers in between, however many jobs are queued. Checked every 128 jobs,
so a shorter queue always gets a whole pass."""
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
    """The engine after a scheduling pass (a point is kept when any field but ``time`` changed)."""

    time: float
    busy_gpus: float
    """GPU shares the running jobs hold."""
    queued_jobs: int
    running_jobs: int
    waiting_jobs: int = 0
    """Queued jobs that wait for GPUs (:meth:`JobEngine.waiting_for_gpus`): while one does, the GPUs no job holds
    are idle while work waits."""
    gpus: int = 0
    """Usable GPUs (healthy, on schedulable nodes) at that time."""


@dataclass(slots=True)
class Totals:
    """The run's counters, and the cluster's usable capacity read through from the state that owns it
    (``gpus``, ``cpu_milli``, ``memory_mib``: :class:`gpucluster.model.capacity.UsableCapacity`)."""

    capacity: CapacityView | None = None
    """Where the capacity figures come from (the engine's capacity view)."""
    busy_gpu_s: float = 0.0
    last_t: float = 0.0
    preemptions: int = 0
    evictions: int = 0
    passes: int = 0
    schedule_calls: int = 0
    looked: int = 0
    """Queued jobs the passes looked at (a fit check, a reason each); the jobs of a group that waits in a pass
    are not looked at one by one (:meth:`JobEngine._walk`)."""
    reclaims: int = 0
    """Jobs preempted to give a queue back its guarantee (counted in ``preemptions`` too)."""
    offers_accepted: int = 0
    offers_declined: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        """Usable GPUs (healthy, on schedulable nodes)."""
        return self.capacity.gpus if self.capacity is not None else 0

    @property
    def cpu_milli(self) -> int:
        """CPU of the schedulable nodes."""
        return self.capacity.cpu_milli if self.capacity is not None else 0

    @property
    def memory_mib(self) -> int:
        """Host memory of the schedulable nodes."""
        return self.capacity.memory_mib if self.capacity is not None else 0


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
    pass_budget_s: float = math.inf
    """Seconds one scheduling pass may run before it stops and the next run goes on from where it stopped (a
    control plane slices its pass so the event loop it shares answers whatever is queued); inf: whole passes."""
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
        self.record_series = self.options.record_series
        self.jobs = JobTable()
        """Jobs by id, counted as they change (:mod:`gpucluster.jobs.tally`)."""
        self.listeners: list[Callable[[JobEvent], None]] = []
        self.series: list[SeriesPoint] = []
        self.capacity = CapacityView(lambda: self.placer.state, quota)
        """What the engine reads of the cluster's capacity (usable totals, slots, never-fit verdicts)."""
        self.ledger = TenantLedger(self.capacity, quota, self.options.tenant_weights)
        """What each tenant's running jobs hold, and the fair shares computed from it."""
        self.offers = OffersAdaptor(self.capacity, self.ledger, catalog)
        """The ``offers`` policy's round."""
        self.totals = Totals(capacity=self.capacity)
        self._delay_wake: set[tuple[str, float]] = set()
        assert not (policy.dynamic and policy.preemptive), "a dynamic policy's rank would move its jobs' groups"
        self._queue = JobQueue(self._group_of, keep_fresh=self.options.describe)
        self._order: dict[Hashable, Key] | None = None
        """A dynamic policy's group -> its tenant's part of the key, as of when the last pass began (the queue's
        entries hold the other part: :meth:`_whole`); None before the first pass and for other policies."""
        self._late: dict[Hashable, dict[str, Entry]] = {}
        """A dynamic policy's group -> job id -> whole entry, of the jobs queued since the last pass began (victims,
        arrivals): keyed as of their queueing until the next pass, as when every pass re-keyed the queue."""
        self._firsts: dict[Hashable, tuple[Entry, list[Entry]]] = {}
        """A dynamic policy's group -> (its first whole entry, its entries) when the last pass began (describe):
        the order the pass tells the groups why they wait in (:meth:`_in_pass_order`)."""
        self._firsts_sorted: list[Hashable] | None = None
        """The groups of ``_firsts`` by their first entry (sorted when first needed)."""
        self._running: dict[str, Key] = {}
        self._running_rank: dict[str, Key] = {}
        self.views = JobViews(self.jobs, self._queue, self._running, policy, self, self.ledger, self.jobs.tally)
        """What the control plane reads: queued and running jobs, queue order, counts, usage, queue stats."""
        self._finish_seq: dict[str, int] = {}
        self._charges: dict[Hashable, dict[str, float]] = {}
        """Queue group -> what one job of the group charges its tenant's queues (:meth:`waiting_for_gpus`), for
        the cluster layout ``_charges_layout`` only (emptied when nodes come or go, so it never grows with them)."""
        self._charges_layout: Any = None
        self._dirty = False
        self._seen: tuple[Any, ...] = ()
        """The cluster's change stamp (and the quota tree's revision) when the last pass ended."""
        self._notes_left = False
        """The last pass left reasons untold (past its budget): the next run begins with a pass."""
        self._epoch = 0
        """Counts the jobs started and stopped (and failed in placement): a pass compares it before and after a
        job to know whether anything changed (:meth:`_walk`)."""
        self._failure: GroupDecision | None = None
        self._resume: tuple[Key, int, str] | None = None
        """Where a pass cut short by ``pass_budget_s`` stopped: the next pass goes on from this queue entry."""
        self._revisit = False
        """Something changed while a pass was cut short (a job queued ahead of where it stopped, a job ended):
        once that pass reaches the end of the queue, another starts from the top."""
        self._admitted: set[str] = set()
        """Jobs admitted under an earlier quota (they ran before a control-plane restart): their next placement
        is charged to the quota but not held to a limit lowered since."""
        self._outside: dict[str, tuple[str, dict[str, float]]] = {}
        """Key -> (tenant, quota charge) of what tenants hold outside the jobs (:meth:`set_outside_use`)."""
        self.paused = False
        """True: no scheduling pass runs (a control-plane replica that is not the leader only mirrors what the
        leader decides: :meth:`adopt`, :meth:`withdraw`, :meth:`finish`, :meth:`fail`)."""
        self._seen = self.capacity.stamp()

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
        quota (None when it could): :meth:`CapacityView.never_fits`."""
        return self.capacity.never_fits(spec, quota)

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
            self._admitted.discard(job_id)

    def run_until(self, t: float) -> None:
        """Run every event up to time ``t`` and leave the clock at ``t`` (or at the last event for inf).

        Changes made since the last call (submit, cancel, and any change of the cluster or the quota tree) are
        scheduled first, at the current time; so are the reasons the last pass had no time to tell (the driver
        gives its event loop back between two runs, not inside one)."""
        if self._dirty or self._resume is not None or self._notes_left or self._moved():
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
            if self._dirty or self._resume is not None or self._moved():
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
        elif job.state == JobState.QUEUED and job.job_id in self._queue:
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

    def set_outside_use(self, uses: Mapping[str, tuple[str, Mapping[str, float]]]) -> None:
        """What tenants hold outside the engine's jobs, the whole set each time: ``key -> (tenant, charge)``
        (``gpu`` GPU-equivalents, ``gpumem`` MiB, ``gpucores`` %), e.g. the ResourceClaims another scheduler
        allocated for a tenant's pods. Each is charged to the tenant's quota (its jobs wait over it, saying
        so) and counted in its fair share and usage, until it is no longer in ``uses``. The devices themselves
        are the cluster state's business (they are used capacity there already)."""
        changed = False
        for key in [k for k in self._outside if k not in uses or self._outside[k] != (uses[k][0], dict(uses[k][1]))]:
            old_tenant, old_charge = self._outside.pop(key)
            if self.quota is not None:
                self.quota.refund(OUTSIDE_KEY_PREFIX + key)
            self.ledger.hold_outside(old_tenant, -old_charge.get("gpu", 0.0))
            changed = True
        for key, (tenant, charge) in uses.items():
            if key in self._outside:
                continue
            self._outside[key] = (tenant, dict(charge))
            if self.quota is not None:
                self.quota.charge(OUTSIDE_KEY_PREFIX + key, tenant, charge)
            self.ledger.hold_outside(tenant, charge.get("gpu", 0.0))
            changed = True
        if changed:
            self._dirty = True

    # ---------------------------------------------------------------------------- the policies' view
    def tenant_share(self, tenant: str) -> float:
        """The tenant's dominant share divided by its weight (:meth:`TenantLedger.share`)."""
        return self.ledger.share(tenant)

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        """The tenant's standing against its guarantee (:meth:`TenantLedger.standing`)."""
        return self.ledger.standing(tenant)

    # ================================================================================ internals
    def _apply(self, job: Job, stimulus: Stimulus) -> None:
        events = transition(job, stimulus, self.now)
        if self.listeners:
            for ev in events:
                for fn in self.listeners:
                    fn(ev)

    def _moved(self) -> bool:
        """The cluster or the quota tree changed since the last pass ended (outside the engine: a cordon, a
        failure, a repair, an informer update, new limits)."""
        return self.capacity.stamp() != self._seen

    def _advance(self, t: float) -> None:
        tot = self.totals
        if t > tot.last_t:
            tot.busy_gpu_s += self.ledger.busy * (t - tot.last_t)
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
        self._queue.push(job, self._queue_key(job))
        self._keep_late(job)
        t = self.policy.queued_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(t, _Rekey(job.job_id, job.queued_since_s, False), PRIO_REKEY)
        self._dirty = True

    def _dequeue(self, job: Job) -> None:
        if self._late:
            late = self._late.get(self._queue.group_of(job.job_id))
            if late is not None:
                late.pop(job.job_id, None)
        self._queue.remove(job)

    def _keep_late(self, job: Job) -> None:
        """A dynamic policy's job just (re)queued: its whole key as of now, until the next pass (``_late``)."""
        pol = self.policy
        if pol.dynamic:
            jid = job.job_id
            self._late.setdefault(self._queue.group_of(jid), {})[jid] = (pol.key(job, self), self._queue.seq - 1, jid)

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
            self._queue.rekey(job.job_id, self._queue_key(job))
            self._keep_late(job)
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
        resume, self._resume = self._resume, None
        self._notes_left = False
        if resume is not None and (self._dirty or self._moved()):
            self._revisit = True  # the part of the queue this pass already went through is out of date
        self._dirty = False
        tot = self.totals
        tot.passes += 1
        pol = self.policy
        describe = self.options.describe
        if self.paused:
            return
        if pol.via_offers:
            if self._queue and tot.gpus - self.ledger.busy > 0:
                self._offers_pass()
        elif self._queue and (pol.preemptive or self._reclaim or tot.gpus - self.ledger.busy > 0
                              or self._queue.gpuless):
            self._fix_order()
            self._walk(resume)
        elif describe:
            free = tot.gpus - self.ledger.busy
            jobs = self.jobs
            budget = self.options.pass_budget_s
            self._note_groups({g: [((), self._count_message(jobs[members[0][2]], free))]
                               for g, members in self._in_pass_order(self._queue.groups)},
                              time.perf_counter() + budget if budget != math.inf else math.inf)
        # what the pass itself changed (victims re-queued) waits for the next event, so stepping the clock
        # in small or large increments gives the same run; a pass cut short goes on at the next run, and one
        # that reached the end after something changed during it starts again from the top
        self._dirty = False
        if self._resume is None and self._revisit:
            self._revisit = False
            self._dirty = True
        self._seen = self.capacity.stamp()
        if self.record_series:
            point = SeriesPoint(self.now, self.ledger.busy, len(self._queue), len(self._running),
                                self.waiting_for_gpus(), tot.gpus)
            last = self.series[-1] if self.series else None
            if last is None or (last.busy_gpus, last.queued_jobs, last.running_jobs, last.waiting_jobs,
                                last.gpus) != (point.busy_gpus, point.queued_jobs, point.running_jobs,
                                               point.waiting_jobs, point.gpus):
                self.series.append(point)

    def waiting_for_gpus(self) -> int:
        """Queued jobs that wait for GPUs: every queued job that asks for a GPU share, except those a limit of
        their tenant's queues holds back (charging the whole job now would break a limit on its queue chain, as
        the ``Quota`` plugin's PreFilter checks; a job admitted before, not held to limits, counts). A job held
        back by a quota does not make the free GPUs waste: it could not have them. Counted: jobs that do not
        fit the free devices (too few, or on the wrong nodes or models: stranding), jobs waiting their turn in
        the queue order, jobs held for data locality (delay scheduling), preempted and evicted jobs waiting to
        restart. A job's tasks are one gang (all or none), and no job waits on another job in this engine, so
        there is no dependency to exclude.

        Cost: without a quota limit, two counters of the queue; with one, one check per queue group (jobs of one
        shape, tenant and size: :meth:`_group_of`), each group's charge computed once per cluster layout."""
        queue = self._queue
        n = len(queue) - queue.gpuless
        quota = self.quota
        if n <= 0 or quota is None or not any(q.limit for q in quota.queues.values()):
            return n
        layout = self.state.layout
        if layout != self._charges_layout:
            self._charges, self._charges_layout = {}, layout
        for g, members in queue.groups.items():
            (_, tenant, admitted), share = g[0], g[1]  # type: ignore[index]
            if share <= 0 or admitted or not quota.chain(tenant):
                continue
            charge = self._charges.get(g)
            if charge is None:
                charge = self._charges[g] = job_charge(self.jobs[members[0][2]].spec, self.state)
            if quota.blocked_by(tenant, charge) is not None:
                n -= len(members)
        return n

    def _queue_key(self, job: Job) -> Key:
        """What the queue sorts ``job`` by: the policy's key, or a dynamic policy's part of it that does not move
        (:meth:`~gpucluster.jobs.policies.QueuePolicy.queue_key`)."""
        pol = self.policy
        return pol.queue_key(job, self) if pol.dynamic else pol.key(job, self)

    def _fix_order(self) -> None:
        """At the start of a dynamic policy's pass: each group's tenant part of the key, as of now (one standing
        read per tenant: nothing is re-keyed or re-sorted; the pass composes the whole keys of the jobs it looks
        at, :meth:`_whole`)."""
        pol = self.policy
        if pol.dynamic:
            self._order = self._queue.parts(self.jobs, lambda tenant: pol.tenant_key(tenant, self))
            self._late = {}

    def _whole(self, group: Hashable, entry: Entry) -> Entry:
        """``entry`` of ``group`` with its whole key as the last pass ordered the queue: a dynamic policy's entry
        composed with its tenant's part as of then, or as of its queueing if it came since (``_late``); any other
        policy's unchanged."""
        late = self._late.get(group)
        if late:
            whole = late.get(entry[2])
            if whole is not None and whole[1] == entry[1]:
                return whole
        order = self._order
        if order is None:
            return entry
        return (self.policy.compose(entry[0], order[group]), entry[1], entry[2])

    def _lates(self, group: Hashable) -> list[Entry]:
        """The whole entries of ``group``'s jobs queued since the last pass began (``_late``)."""
        late = self._late.get(group)
        if not late:
            return []
        queue = self._queue
        return [e for jid, e in late.items() if jid in queue and queue.entry(jid)[1] == e[1]]

    def _in_order(self, group: Hashable, members: list[Entry]) -> list[Entry]:
        """``group``'s entries (``members``) by their whole keys (:meth:`_whole`): as queued, unless jobs queued
        since the last pass began (keyed as of then) are among them."""
        if not self._lates(group):
            return members
        return sorted(members, key=lambda e: self._whole(group, e))

    def _in_pass_order(self, groups: dict[Hashable, list[Entry]]) -> list[tuple[Hashable, list[Entry]]]:
        """The groups (``groups.items()``) in the order a pass tells them why they wait: for a dynamic policy, the
        groups there when the last pass began by their first job then (``_firsts``), then those formed since (as
        when every pass re-sorted the queue and formed its groups again); for others as they were formed."""
        firsts = self._firsts
        if self._order is None or not firsts:
            return list(groups.items())
        if self._firsts_sorted is None:  # once per pass that fixed them, however many passes read them
            self._firsts_sorted = sorted(firsts, key=lambda g: firsts[g][0])
        kept = [(g, m) for g in self._firsts_sorted if (m := groups.get(g)) is firsts[g][1]]
        return kept + [(g, m) for g, m in groups.items() if g not in firsts or firsts[g][1] is not m]

    def _last_whole(self, group: Hashable, members: list[Entry]) -> Entry:
        """The last of ``group``'s entries (``members``) by whole key (:meth:`_whole`)."""
        late = self._lates(group)
        if not late:
            return self._whole(group, members[-1])
        seqs = {e[1] for e in late}
        i = len(members) - 1
        while i >= 0 and members[i][1] in seqs:  # the others keep their order
            i -= 1
        if i >= 0:
            late.append(self._whole(group, members[i]))
        return max(late)

    def _group_of(self, job_id: str, key: Key) -> Hashable:
        """The group a queued job waits in: jobs a pass treats alike (one shape, tenant, admission, size and, for
        a preemptive policy, preemption rank), so that while nothing starts or stops in a pass the others of a
        group that one of them could not use are not looked at (:meth:`_walk`)."""
        spec = self.jobs[job_id].spec
        return ((spec.shape, spec.tenant, job_id in self._admitted), spec.gpu_share, spec.task_gpus,
                spec.num_tasks, spec.whole, self.policy.rank(key) if self.policy.preemptive else None)

    def _walk(self, resume: Entry | None) -> None:
        """One scheduling pass over the queue in policy order (from ``resume``, the rest of a pass cut short).

        Every queued job is tried in order, as if one by one: a job that fits starts; one that does not may
        preempt or reclaim (preemptive policies, reclaim), and it says why it waits. The pass stops at the first
        job that waits for policies without backfilling (or when nothing is free and nothing could start).

        What it costs does not grow with the jobs that wait: the queue keeps its jobs in groups of jobs the pass
        treats alike (:meth:`_group_of`), each in policy order, and the pass walks the groups' heads merged in
        policy order (a heap). Once a job of a group was looked at and nothing changed (no job started or stopped:
        ``_epoch``), every later job of that group would be looked at under the same conditions and do the same
        nothing (the fit check and the victims' search depend only on what the group shares, and what the pass
        learns as it goes, ``failed`` and ``no_victims``, only ever rules more out), so the group is set aside;
        when something changes, the groups set aside come back from their first job after that point. A pass
        therefore looks at about (groups) x (starts + 1) jobs, never more than are queued, in the order and
        with the outcome of a job-by-job walk.

        A dynamic policy's queue holds the part of each key that does not move; its groups' tenant parts were
        fixed when the pass began (:meth:`_fix_order`), and the heap holds whole keys: the pass composes one per
        job it looks at (and a few per bisection), as if every queued job had been re-keyed and re-sorted."""
        tot = self.totals
        pol = self.policy
        describe = self.options.describe
        device_check = self.options.device_check
        jobs = self.jobs
        queue = self._queue
        groups = queue.groups
        queued = JobState.QUEUED
        limit = queue.seq  # jobs queued during this pass (victims sent back) wait for the next one
        free = tot.gpus - self.ledger.busy
        failed: dict[tuple[Any, ...], float] = {}
        why: dict[tuple[Any, ...], str] = {}
        said: dict[tuple[Any, ...], str] = {}
        """(shape, need, tasks) -> why such a job waits, while nothing started or stopped in this pass: the
        rest of that shape share one reason instead of composing it each."""
        budget = self.options.pass_budget_s
        deadline = time.perf_counter() + budget if budget != math.inf else math.inf
        worst: Key | None = None
        stale_worst = True
        no_victims: dict[tuple[Key, int], float] = {}
        """(rank, task size) -> smallest need for which preemption found no victims in this pass."""

        def after(members: list[Entry], i: int) -> Entry | None:
            """The first entry from index ``i`` that was queued before this pass began."""
            while i < len(members):
                if members[i][1] < limit:
                    return members[i]
                i += 1
            return None

        heap: list[tuple[Entry, Hashable]] = []

        order = self._order
        compose = pol.compose

        def whole_of(group: Hashable) -> Callable[[Entry], Entry]:
            """A dynamic policy's queue entry of ``group`` -> its entry with the whole key in this pass."""
            assert order is not None
            part = order[group]
            return lambda e: (compose(e[0], part), e[1], e[2])

        def push_next(group: Hashable, past: Entry) -> None:
            """Put ``group``'s first job after ``past`` on the heap (if it has one)."""
            members = groups.get(group)
            if members is not None:
                if order is None:
                    nxt = after(members, bisect.bisect_right(members, past))
                else:
                    whole = whole_of(group)
                    nxt = after(members, bisect.bisect_right(members, past, key=whole))
                    nxt = None if nxt is None else whole(nxt)
                if nxt is not None:
                    heapq.heappush(heap, (nxt, group))

        firsts: dict[Hashable, tuple[Entry, list[Entry]]] = {}
        for g, members in groups.items():
            if order is None:
                head = after(members, 0 if resume is None else bisect.bisect_left(members, resume))
            else:
                whole = whole_of(g)
                head = after(members, 0 if resume is None else bisect.bisect_left(members, resume, key=whole))
                head = None if head is None else whole(head)
                if describe:
                    firsts[g] = (whole(members[0]), members)
            if head is not None:
                heap.append((head, g))
        if order is not None and describe:
            self._firsts, self._firsts_sorted = firsts, None
        heapq.heapify(heap)
        parked: list[Hashable] = []
        """Groups set aside: the last job looked at did nothing, and nothing changed since."""
        reasons: dict[Hashable, list[tuple[tuple[Any, ...], str]]] = {}
        """Group -> [(first entry it applies to, why the group's jobs from there wait)] (describe)."""
        stop_at: Entry | None = None
        sliced = False
        looked = 0
        while heap:
            entry, g = heapq.heappop(heap)
            if looked and not looked & 127 and time.perf_counter() > deadline:
                self._resume = entry
                sliced = True
                break
            looked += 1
            tot.looked += 1
            key, _, jid = entry
            job = jobs[jid]
            epoch = self._epoch
            reason: str | None = None
            stop = False
            if job.state == queued:
                spec = job.spec
                need, task_gpus, tasks = spec.gpu_share, spec.task_gpus, spec.num_tasks
                shape = g[0]  # type: ignore[index]
                started = False
                if need <= free and need < failed.get(shape, math.inf) and (
                        not spec.whole or not device_check or self.capacity.slots_for(task_gpus) >= tasks):
                    if self._try_start(job, key):
                        free -= need
                        stale_worst = True
                        said.clear()
                        started = True
                    elif job.state == queued:
                        failed[shape] = need
                        if describe:
                            why[shape] = self._failure_message(job)
                    else:
                        started = True  # its placement failed outright: it is gone, nothing to say
                if started:
                    pass
                elif self._reclaim and self._reclaim_for(job, key, free):
                    free = tot.gpus - self.ledger.busy
                    failed.clear()
                    said.clear()
                else:
                    preempted = False
                    if pol.preemptive and self._running:
                        if stale_worst:
                            worst, stale_worst = max(self._running_rank.values()), False
                        assert worst is not None
                        rank = pol.rank(key)
                        if rank < worst and need < no_victims.get((rank, task_gpus), math.inf):
                            if self._preempt_for(job, key, free):
                                free = tot.gpus - self.ledger.busy
                                stale_worst = True
                                no_victims.clear()
                                said.clear()
                                preempted = True
                            else:
                                no_victims[(rank, task_gpus)] = need
                        elif free <= 0:
                            stop = True
                    if not preempted:
                        if describe:
                            reason = said.get((shape, need, tasks))
                            if reason is None:
                                reason = said[(shape, need, tasks)] = why.get(shape) or self._count_message(job, free)
                        if stop or not pol.backfill or (free <= 0 and not pol.preemptive and not self._reclaim
                                                        and not queue.gpuless):
                            stop = True
            if reason is not None:
                said_g = reasons.setdefault(g, [])
                if not said_g or said_g[-1][1] != reason:  # a group's reasons change only where the words do
                    said_g.append((entry if said_g else (), reason))
            if stop:
                stop_at = entry
                break
            if self._epoch != epoch:
                # something started or stopped: the groups set aside are looked at again after this job
                for other in parked:
                    push_next(other, entry)
                parked.clear()
                push_next(g, entry)
            elif job.state == queued:
                parked.append(g)
            else:  # not queued (cannot happen: the queue holds queued jobs only): go on with the next of its group
                push_next(g, entry)
        if describe:
            if stop_at is not None and not sliced:  # the jobs after the one the pass stopped at wait their turn
                bound = (stop_at[0], stop_at[1] + 0.5)  # after stop_at, before any later entry
                turn = f"waiting its turn: {pol.name} order stops at job {stop_at[2]}, which waits"
                for g, members in self._in_pass_order(groups):
                    if self._last_whole(g, members) > stop_at:
                        said_g = reasons.setdefault(g, [])
                        if not said_g or said_g[-1][1] != turn:
                            said_g.append((bound if said_g else (), turn))
            self._note_groups(reasons, deadline)

    def _note_groups(self, reasons: Mapping[Hashable, list[tuple[tuple[Any, ...], str]]],
                     deadline: float = math.inf) -> None:
        """Say why the jobs of each group in ``reasons`` wait: ``[(first entry, why)]``, each from its entry on
        (``()``: from the group's first job). Only a group whose reasons changed (or were last said
        ``NOTE_REPEAT_S`` ago) has all its jobs noted; otherwise only the jobs that joined it since.

        Past ``deadline`` (the pass's budget), after at least ``NOTE_SLICE`` notes, the rest waits for the next
        pass (the next run begins with one): a reason that changed for thousands of waiting jobs is told over a
        few passes, never in one hold of the event loop."""
        queue = self._queue
        jobs = self.jobs
        now = self.now
        queued = JobState.QUEUED
        spent = 0
        for g, said in reasons.items():
            members = queue.groups.get(g)
            if not members:
                queue.fresh.pop(g, None)
                continue
            sig = tuple(said)
            last = queue.noted.get(g)
            whole = last is None or last[0] != sig or now - last[1] >= NOTE_REPEAT_S
            if whole and spent >= NOTE_SLICE and time.perf_counter() > deadline:
                self._notes_left = True  # this group at the next pass (its fresh jobs kept for it)
                continue
            fresh = queue.fresh.pop(g, None)
            targets: list[str]
            if whole:
                targets = [e[2] for e in self._in_order(g, members)]
            elif fresh:
                targets = fresh
            else:
                continue
            bounds = [b for b, _ in said]
            done = True
            for jid in targets:
                if spent >= NOTE_SLICE and not spent % NOTE_SLICE and time.perf_counter() > deadline:
                    done = False
                    break
                job = jobs.get(jid)
                if job is None or job.state != queued or jid not in queue or queue.group_of(jid) != g:
                    continue
                reason = said[bisect.bisect_right(bounds, self._whole(g, queue.entry(jid))) - 1][1]
                if job.message == reason and now - job.noted_s < NOTE_REPEAT_S:
                    continue  # told already (by an earlier pass cut short): only a comparison
                spent += 1
                self._note(job, reason)
            if not done:  # the group again at the next pass: its jobs noted already cost a comparison then
                self._notes_left = True
                if fresh:
                    queue.fresh[g] = fresh + queue.fresh.get(g, [])
            elif whole:
                queue.noted[g] = (sig, now)

    def _count_message(self, job: Job, free: float) -> str:
        """Why a job the pass did not try waits (:func:`gpucluster.jobs.views.count_message`)."""
        return count_message(job.spec, free, self.capacity.slots_for if self.options.device_check else None)

    def _failure_message(self, job: Job) -> str:
        """Why the last placement of ``job`` failed (:func:`gpucluster.jobs.views.failure_message`)."""
        return failure_message(job, self._failure, self.quota)

    def _running_view(self) -> Running:
        return Running(self.jobs, self._running, self._running_rank, self.now - self.policy.min_run_s)

    def _preempt_for(self, job: Job, key: Key, free: float) -> bool:
        """Preempt the worst running jobs whose key is worse than ``key`` until ``job`` fits by count, and
        start it; False (nothing changed) if that cannot work."""
        victims = plan_preemption(self._running_view(), job, self.policy.rank(key), self.capacity.free(free))
        return self._evict_and_start(job, key, victims, f"for {job.job_id}")

    def _reclaim_for(self, job: Job, key: Key, free: float) -> bool:
        """Give ``job``'s queue back its guarantee (:func:`~gpucluster.jobs.preemption.plan_reclaim`)."""
        assert self.quota is not None
        victims = plan_reclaim(self._running_view(), job, self.capacity.free(free), self.quota,
                               self.ledger.gpus_by_tenant())
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
            if not self._try_start(victim, self._queue.key(victim.job_id)) and victim.state == JobState.QUEUED:
                self.totals.preemptions += 1
                self._apply(victim, Preempted(why))
        return False

    def _offers_pass(self) -> None:
        """One Mesos-style offer round (:class:`gpucluster.jobs.offers.OffersAdaptor`); place what was
        accepted."""
        delay = self.locality_delay_s or float(getattr(self.policy, "locality_delay_s", 0.0))
        result = self.offers.round(self.views.queued(), self.now, delay)
        if result is None:
            return
        tot = self.totals
        tot.offers_accepted += result.accepted
        tot.offers_declined += result.declined
        for t in result.wake_at:
            stamp = ("", t)
            if stamp not in self._delay_wake:
                self._delay_wake.add(stamp)
                self.at(t, self._wake)
        for job, placement in result.placed:
            self._try_start(job, self._queue.key(job.job_id), placement)

    # ---------------------------------------------------------------------------- start / stop
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
            self._epoch += 1
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
        self._epoch += 1
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
        self.ledger.hold(spec)
        self._running[job.job_id] = self.policy.key(job, self)
        self._running_rank[job.job_id] = self.policy.rank(self._running[job.job_id])
        t = self.policy.running_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(max(t, job.run_start_s), _Rekey(job.job_id, job.run_start_s, True), PRIO_REKEY)

    def _wake(self) -> None:
        self._dirty = True

    def _release(self, job: Job) -> None:
        """Give back what the running job holds (its pods, its quota, its share of the counts)."""
        self._epoch += 1
        self.placer.release(job, job.pod_keys)
        if self.quota is not None:
            for key in job.pod_keys:
                self.quota.refund(key)
        seq = self._finish_seq.pop(job.job_id, None)
        if seq is not None:
            self.kernel.cancel(seq)
        self.ledger.give_back(job.spec)
        self._running.pop(job.job_id, None)
        self._running_rank.pop(job.job_id, None)
        self._dirty = True

    def _complete(self, job: Job, message: str = "") -> None:
        self._release(job)
        self._apply(job, Finish(message))
