"""The job simulator: jobs arrive, queue, are placed task by task through the shared :class:`Scheduler`,
run (slowed by the network model when spread out), get preempted, fail with their nodes, and finish.

:class:`Simulation` is the API the CLI, the benchmarks and the control-plane service use::

    sim = Simulation(load_cluster(None), policy="default")
    sim.submit(JobSpec("j1", submit_s=0, num_gpus=8, duration_s=3600))
    sim.run_until(600.0)          # step the clock; events up to t=600 have run
    sim.job("j1").state           # JobState.RUNNING
    sim.cancel("j1"); sim.fail_node("train-0003", repair_after_s=1800)
    sim.run()                     # until nothing is left to happen
    sim.summary()                 # the metrics dict (see :mod:`gpucluster.simulator.metrics`)

Speed: a scheduling pass runs only at a time when something changed (arrival, finish, failure, repair,
priority change), walks the queue in policy order, skips a job without calling the scheduler when the free
GPU count cannot hold it or a job of the same shape already failed in this pass, and stops at the first
job that does not fit for policies without backfilling.

Offers (policy ``offers``): the pass instead runs one Mesos-style allocation round
(:func:`gpucluster.simulator.offers.offer_round`) and places each job whose tasks were all accepted on exactly
the accepted nodes (``gpucluster.io/node-name``, checked by the ``NodeName`` plugin) through the scheduler.

Reclaim (a policy with ``reclaim``, e.g. ``drf``, and a ``QuotaTree`` service with guarantees): a queued job
that does not fit, of a queue that stays within its guaranteed GPUs once the job runs (at every level of the
hierarchy below what it shares with the victim), preempts running jobs of queues above their guarantee,
the queue most over it per over-quota weight first, latest started first, never taking a queue (or an
ancestor not shared with the claimant) below its guarantee. Limits still hold: the start goes through the
``Quota`` plugin like any other.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpucluster.model import ClusterState, NodeSpec, TopologyLevel
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.framework import Handle, PluginConfig, Profile
from gpucluster.scheduler.plugins.noderesources import NODE_NAME
from gpucluster.scheduler.plugins.quota import QuotaTree
from gpucluster.simulator.jobs import Job, JobSpec, JobState, task_pods
from gpucluster.simulator.kernel import Kernel
from gpucluster.simulator.network import NetworkModel
from gpucluster.simulator.offers import offer_round
from gpucluster.simulator.policies import Key, QueuePolicy, make_policy
from gpucluster.spec import Cluster

_NO_CACHE: dict[str, float] = {}
"""Sentinel: tenant shares are not cached (outside a dynamic re-sort)."""

PRIO_FINISH = 0
PRIO_FAULT = 1
PRIO_ARRIVE = 2
PRIO_REKEY = 3


# ------------------------------------------------------------------------------------------------ events
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


_Event = _Arrive | _Finish | _Rekey | _Call


@dataclass(frozen=True, slots=True)
class SimEvent:
    """A notification for listeners (service, monitoring): what happened, when, to whom."""

    kind: str
    """``arrive``, ``start``, ``finish``, ``preempt``, ``evict``, ``cancel``, ``reject``, ``node_down``,
    ``node_up``, ``device_down``, ``node_added``, ``node_removed``."""
    time: float
    job_id: str = ""
    node: str = ""
    detail: str = ""


@dataclass(slots=True)
class SeriesPoint:
    time: float
    busy_gpus: float
    queued_jobs: int
    running_jobs: int


def jobs_profile(topology: bool, seed: int = 0, extra: Iterable[PluginConfig] = ()) -> Profile:
    """The placement profile for jobs: fit, gang, binpack; plus topology scoring when asked."""
    plugins = [
        PluginConfig(name="NodeUnschedulable"),
        PluginConfig(name="NodeResourcesFit"),
        PluginConfig(name="DeviceFit"),
        PluginConfig(name="Gang"),
        PluginConfig(name="NodePolicy", args={"policy": "binpack"}),
        PluginConfig(name="DevicePolicy", args={"policy": "binpack"}),
    ]
    if topology:
        plugins.append(PluginConfig(name="Topology", weight=2.0))
    plugins.extend(extra)
    return Profile(plugins=plugins, seed=seed, tie_break="first")


@dataclass(slots=True)
class _TenantUse:
    gpus: float = 0.0
    cpu_milli: int = 0
    memory_mib: int = 0


@dataclass(slots=True)
class _Totals:
    gpus: int = 0
    cpu_milli: int = 0
    memory_mib: int = 0
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


class Simulation:
    """A cluster, a queue policy and the jobs given to it, driven by a :class:`Kernel`."""

    def __init__(
        self,
        cluster: Cluster | ClusterState,
        policy: str | QueuePolicy = "default",
        *,
        seed: int = 0,
        network: NetworkModel | None = None,
        record_series: bool = True,
        restart_overhead_s: float = 0.0,
        profile: Profile | None = None,
        services: dict[str, Any] | None = None,
        tenant_weights: dict[str, float] | None = None,
        locality_delay_s: float = 0.0,
    ) -> None:
        self.state = cluster.state() if isinstance(cluster, Cluster) else cluster
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.kernel: Kernel[_Event] = Kernel()
        self.network = network or NetworkModel(self.state.fabric)
        prof = profile or jobs_profile(self.policy.topology_aware, seed)
        if self.policy.via_offers and not any(p.name == "NodeName" for p in prof.plugins):
            # offers pin each task to the node whose offer was accepted
            prof = prof.model_copy(update={"plugins": [PluginConfig(name="NodeName"), *prof.plugins]})
        handle = Handle(rng=np.random.default_rng(seed), services=dict(services or {}))
        self.scheduler = Scheduler(self.state, prof, clock=lambda: self.kernel.now, handle=handle,
                                   assume_ttl=math.inf)
        quota = handle.services.get("quota")
        self._quota = quota
        self._tree = quota if isinstance(quota, QuotaTree) else None
        self._reclaim = bool(self.policy.reclaim and self._tree is not None
                             and any(q.guarantee > 0 for q in self._tree.queues.values()))
        self._refund: Callable[[str], None] | None = getattr(quota, "refund", None)
        self._catalog = handle.services.get("datasets")
        self.locality_delay_s = locality_delay_s
        """Delay scheduling: a job with a dataset waits up to this long for nodes holding a replica."""
        self._delay_wake: set[tuple[str, float]] = set()
        self.record_series = record_series
        self.restart_overhead_s = restart_overhead_s
        self.tenant_weights = dict(tenant_weights or {})
        self.jobs: dict[str, Job] = {}
        self.listeners: list[Callable[[SimEvent], None]] = []
        self.series: list[SeriesPoint] = []
        self.totals = _Totals()
        self._queue: list[tuple[Key, int, str]] = []
        self._entry: dict[str, tuple[Key, int, str]] = {}
        self._seq = itertools.count()
        self._running: dict[str, Key] = {}
        self._running_rank: dict[str, Key] = {}
        self._finish_seq: dict[str, int] = {}
        self._tenants: dict[str, _TenantUse] = {}
        self._down: set[str] = set()
        self._dirty = False
        self._busy = 0.0
        self._share_cache: dict[str, float] = _NO_CACHE
        self._free_gen = -1
        self._free_cache: np.ndarray[Any, np.dtype[np.int64]] = np.zeros(0, np.int64)
        self._slots_gen = -1
        self._slots: dict[int, int] = {}
        """Task size -> whole tasks of that size the free devices hold (cached per state generation)."""
        self._shapes: dict[str, tuple[float, int, tuple[int, str, str], bool, int]] = {}
        """Job id -> (GPU share, task GPUs, shape, whole, tasks): the pass reads these for every queued job."""
        self._recount()

    # ================================================================================ public API
    @property
    def now(self) -> float:
        return self.kernel.now

    def job(self, job_id: str) -> Job:
        return self.jobs[job_id]

    def submit(self, spec: JobSpec) -> Job:
        """Add a job; it arrives at ``max(spec.submit_s, now)``. Raises ``ValueError`` on a duplicate id."""
        if spec.job_id in self.jobs:
            raise ValueError(f"job {spec.job_id!r} submitted twice")
        job = Job(self._fit_spec(spec))
        self.jobs[spec.job_id] = job
        self.kernel.schedule(max(spec.submit_s, self.now), _Arrive(spec.job_id), PRIO_ARRIVE)
        return job

    def _fit_spec(self, spec: JobSpec) -> JobSpec:
        """Split a job whose default task size is larger than any node into tasks that fit one node."""
        per_node = int(self.state.dev_count.max()) if self.state.n_nodes else 0
        if spec.gpus_per_task or spec.task_gpus <= per_node:
            return spec
        size = next((g for g in (8, 4, 2, 1) if g <= per_node and spec.num_gpus % g == 0), 1)
        return replace(spec, gpus_per_task=size)

    def submit_many(self, specs: Iterable[JobSpec]) -> None:
        for spec in specs:
            self.submit(spec)

    def cancel(self, job_id: str) -> bool:
        """Cancel a job wherever it is; False if it had already ended."""
        job = self.jobs[job_id]
        if job.done:
            return False
        if job.state == JobState.RUNNING:
            self._stop(job, "cancel")
        elif job.state == JobState.QUEUED:
            self._dequeue(job)
        job.state = JobState.CANCELLED
        job.finish_s = self.now
        self._emit("cancel", job.job_id)
        self._dirty = True
        return True

    def run_until(self, t: float) -> None:
        """Run every event up to time ``t`` and leave the clock at ``t`` (or at the last event for inf).

        Changes made through the API since the last call (submit, cancel, faults) are scheduled first, at the
        current time."""
        if self._dirty:
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
            if self._dirty:
                self._pass()
        if t != math.inf and t > self.now:
            self._advance(t)
            self.kernel.advance(t)

    def run(self) -> None:
        """Run until no event is left."""
        self.run_until(math.inf)

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` at simulated time ``t`` (faults and scripted changes use this)."""
        self.kernel.schedule(max(t, self.now), _Call(fn), PRIO_FAULT)

    # ---------------------------------------------------------------------------- cluster changes
    def fail_node(self, name: str, repair_after_s: float | None = None) -> list[str]:
        """The node goes down now: its jobs are evicted (restart from their checkpoint) and it takes no
        work until :meth:`repair_node`. Returns the evicted job ids."""
        i = self.state.node_index[name]
        evicted = self._evict_on(i, lambda alloc: True, "node_down:" + name)
        if name not in self._down:
            self._down.add(name)
            self.state.set_schedulable(name, False)
            self._recount()
            self._emit("node_down", node=name)
        if repair_after_s is not None:
            self.at(self.now + repair_after_s, lambda: self.repair_node(name))
        self._dirty = True
        return evicted

    def repair_node(self, name: str) -> None:
        if name in self._down and self.state.present[self.state.node_index[name]]:
            self._down.discard(name)
            self.state.set_schedulable(name, True)
            for j in range(int(self.state.dev_count[self.state.node_index[name]])):
                self.state.set_device_health(name, j, True)
            self._recount()
            self._emit("node_up", node=name)
            self._dirty = True

    def fail_device(self, name: str, device_index: int, repair_after_s: float | None = None) -> list[str]:
        """One device goes bad (e.g. XID 79): jobs using it are evicted; the rest of the node keeps working."""
        i = self.state.node_index[name]
        evicted = self._evict_on(
            i, lambda alloc: any(g.device_index == device_index for g in alloc.grants), f"device_down:{name}"
        )
        self.state.set_device_health(name, device_index, False)
        self._recount()
        self._emit("device_down", node=name, detail=str(device_index))
        if repair_after_s is not None:
            def repair() -> None:
                self.state.set_device_health(name, device_index, True)
                self._recount()
                self._dirty = True
            self.at(self.now + repair_after_s, repair)
        self._dirty = True
        return evicted

    def add_node(self, node: NodeSpec) -> None:
        self.state.add_node(node)
        self._recount()
        self._emit("node_added", node=node.name)
        self._dirty = True

    def remove_node(self, name: str) -> list[str]:
        i = self.state.node_index[name]
        evicted = self._evict_on(i, lambda alloc: True, "node_removed:" + name)
        self.state.remove_node(name)
        self._down.discard(name)
        self._recount()
        self._emit("node_removed", node=name)
        self._dirty = True
        return evicted

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
        tree = self._tree
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

    def running(self) -> list[Job]:
        return [self.jobs[jid] for jid in self._running]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in JobState}
        for job in self.jobs.values():
            out[job.state.value] += 1
        return out

    def summary(self) -> dict[str, Any]:
        from gpucluster.simulator.metrics import summarize

        return summarize(self)

    # ================================================================================ internals
    def _emit(self, kind: str, job_id: str = "", node: str = "", detail: str = "") -> None:
        if self.listeners:
            ev = SimEvent(kind, self.now, job_id, node, detail)
            for fn in self.listeners:
                fn(ev)

    def _recount(self) -> None:
        s = self.state
        usable = s.dev_valid & s.dev_healthy & s.schedulable[:, None] & s.present[:, None]
        self.totals.gpus = int(usable.sum())
        live = s.present & s.schedulable
        self.totals.cpu_milli = int(s.cpu_cap[live].sum())
        self.totals.memory_mib = int(s.mem_cap[live].sum())

    def _advance(self, t: float) -> None:
        tot = self.totals
        if t > tot.last_t:
            tot.busy_gpu_s += self._busy * (t - tot.last_t)
            tot.last_t = t

    def _handle(self, event: _Event) -> None:
        if isinstance(event, _Finish):
            job = self.jobs[event.job_id]
            if job.state == JobState.RUNNING and job.attempt == event.attempt:
                self._complete(job)
        elif isinstance(event, _Arrive):
            job = self.jobs[event.job_id]
            if job.state == JobState.PENDING:
                self._emit("arrive", job.job_id)
                if not self._could_ever_fit(job.spec):
                    job.state = JobState.CANCELLED
                    job.finish_s = self.now
                    job.extra["rejected"] = 1.0
                    self._emit("reject", job.job_id, detail="can never fit the cluster or its quota")
                else:
                    self._enqueue(job)
        elif isinstance(event, _Rekey):
            self._rekey(event)
        else:
            event.fn()

    # ---------------------------------------------------------------------------- queue
    def _enqueue(self, job: Job) -> None:
        job.state = JobState.QUEUED
        job.queued_since_s = self.now
        entry = (self.policy.key(job, self), next(self._seq), job.job_id)
        bisect.insort(self._queue, entry)
        self._entry[job.job_id] = entry
        t = self.policy.queued_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(t, _Rekey(job.job_id, job.queued_since_s, False), PRIO_REKEY)
        self._dirty = True

    def _dequeue(self, job: Job) -> None:
        entry = self._entry.pop(job.job_id)
        i = bisect.bisect_left(self._queue, entry)
        assert self._queue[i] == entry
        del self._queue[i]

    def _rekey(self, ev: _Rekey) -> None:
        job = self.jobs[ev.job_id]
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
            self._dequeue(job)
            entry = (self.policy.key(job, self), next(self._seq), job.job_id)
            bisect.insort(self._queue, entry)
            self._entry[job.job_id] = entry
        self._dirty = True

    # ---------------------------------------------------------------------------- the pass
    def _pass(self) -> None:
        self._dirty = False
        tot = self.totals
        tot.passes += 1
        pol = self.policy
        if pol.via_offers:
            if self._queue and tot.gpus - self._busy > 0:
                self._offers_pass()
        elif self._queue and (pol.preemptive or self._reclaim or tot.gpus - self._busy > 0):
            if pol.dynamic:
                self._share_cache = {}
                self._queue = sorted(((pol.key(self.jobs[jid], self), s, jid) for _, s, jid in self._queue))
                self._entry = {jid: e for e in self._queue for jid in (e[2],)}
                self._share_cache = _NO_CACHE
            free = tot.gpus - self._busy
            failed: dict[tuple[int, str, str], float] = {}
            worst: Key | None = None
            stale_worst = True
            no_victims: dict[tuple[Key, int], float] = {}
            """(rank, task size) -> smallest need for which preemption found no victims in this pass."""
            jobs = self.jobs
            shapes = self._shapes
            queued = JobState.QUEUED
            for key, _, jid in list(self._queue):
                job = jobs[jid]
                if job.state != queued:
                    continue
                spec = job.spec
                info = shapes.get(jid)
                if info is None:
                    info = shapes[jid] = (spec.gpu_share, spec.task_gpus,
                                          (spec.task_gpus * spec.gpu_milli, spec.gpu_type, spec.tenant),
                                          spec.whole, spec.num_tasks)
                need, task_gpus, shape, whole, tasks = info
                if need <= free and need < failed.get(shape, math.inf) and (
                        not whole or self._slots_for(task_gpus) >= tasks):
                    if self._try_start(job, key):
                        free -= need
                        stale_worst = True
                        continue
                    failed[shape] = need
                if self._reclaim and self._reclaim_for(job, key, free):
                    free = tot.gpus - self._busy
                    failed.clear()
                    continue
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
                        break
                if not pol.backfill:
                    break
                if free <= 0 and not pol.preemptive and not self._reclaim:
                    break
        # what the pass itself changed (victims re-queued) waits for the next event, so stepping the clock
        # in small or large increments gives the same run
        self._dirty = False
        if self.record_series:
            point = SeriesPoint(self.now, self._busy, len(self._queue), len(self._running))
            last = self.series[-1] if self.series else None
            if last is None or (last.busy_gpus, last.queued_jobs, last.running_jobs) != (
                    point.busy_gpus, point.queued_jobs, point.running_jobs):
                self.series.append(point)

    def _preempt_for(self, job: Job, key: Key, free: float) -> bool:
        """Preempt the worst running jobs whose key is worse than ``key`` until ``job`` fits by count, and
        start it. If it still does not fit (fragmentation) the victims are started again at once (their
        preemption costs nothing) and False is returned."""
        need = job.spec.gpu_share
        rank = self.policy.rank(key)
        oldest = self.now - self.policy.min_run_s
        # lowest priority class first; inside it the smallest jobs (free no more than needed), latest first
        jobs = self.jobs
        ranks = self._running_rank
        victims = sorted(((ranks[jid], -jobs[jid].spec.num_gpus, k, jid) for jid, k in self._running.items()
                          if ranks[jid] > rank and jobs[jid].run_start_s <= oldest), reverse=True)
        if free + sum(self.jobs[v[-1]].spec.gpu_share for v in victims) < need:
            return False
        return self._evict_and_start(job, key, (v[-1] for v in victims), f"for {job.job_id}")

    def _reclaim_for(self, job: Job, key: Key, free: float) -> bool:
        """Give ``job``'s queue back its guarantee: preempt jobs of queues above theirs (see the module
        docstring) until ``job`` fits by count, and start it; False (nothing changed) if that cannot work."""
        tree = self._tree
        assert tree is not None
        spec = job.spec
        need = spec.gpu_share
        mine = tree.chain(spec.tenant)
        if not mine:
            return False  # a tenant without a queue has no guarantee to claim
        used = tree.used
        guarantee = {q: tree.queues[q].guarantee for q in tree.queues}
        if used[mine[0]]["gpu"] + need > guarantee[mine[0]] + 1e-9:
            return False
        oldest = self.now - self.policy.min_run_s
        by_tenant: dict[str, list[Job]] = {}
        for jid in self._running:
            victim = self.jobs[jid]
            if victim.spec.tenant != spec.tenant and victim.run_start_s <= oldest:
                by_tenant.setdefault(victim.spec.tenant, []).append(victim)
        # per victim tenant: the queues that must stay at or above their guarantee, and whether the claimant
        # stays within its own guarantee at every level below what the two share
        levels: dict[str, list[str]] = {}
        for tenant in list(by_tenant):
            theirs = tree.chain(tenant)
            common = set(theirs) & set(mine)
            if any(used[q]["gpu"] + need > guarantee[q] + 1e-9 for q in mine if q not in common):
                del by_tenant[tenant]
                continue
            levels[tenant] = [q for q in theirs if q not in common]
            by_tenant[tenant].sort(key=lambda j: (j.run_start_s, -j.spec.num_gpus))  # latest started last
        if not by_tenant:
            return False
        taken: dict[str, float] = {}

        def over(tenant: str) -> float:
            """GPUs the tenant's queue runs beyond its guarantee (after what is taken), per weight."""
            qs = levels[tenant]
            if not qs:
                return self._tenants[tenant].gpus - taken.get(tenant, 0.0)
            q = qs[0]
            return (used[q]["gpu"] - taken.get(q, 0.0) - guarantee[q]) / tree.queues[q].weight

        def victims() -> Iterable[str]:
            while by_tenant:
                tenant = max(by_tenant, key=lambda t: (over(t), t))
                pool = by_tenant[tenant]
                pick = None
                for k in range(len(pool) - 1, -1, -1):
                    share = pool[k].spec.gpu_share
                    if all(used[q]["gpu"] - taken.get(q, 0.0) - share >= guarantee[q] - 1e-9
                           for q in levels[tenant]):
                        pick = pool.pop(k)
                        break
                if pick is None or not pool:
                    del by_tenant[tenant]
                if pick is not None:
                    for q in levels[tenant] or (tenant,):
                        taken[q] = taken.get(q, 0.0) + pick.spec.gpu_share
                    yield pick.job_id

        before = self.totals.preemptions
        if not self._evict_and_start(job, key, victims(), f"reclaim for {job.job_id}"):
            return False
        self.totals.reclaims += self.totals.preemptions - before
        return True

    def _evict_and_start(self, job: Job, key: Key, victims: Iterable[str], why: str) -> bool:
        """Take victims in the given order until ``job`` fits by count, stop them and start ``job``; if it
        still does not fit (fragmentation) the victims are started again at once and False is returned."""
        node_free = self._node_free().copy()
        chosen: list[str] = []
        fits = False
        for jid in victims:
            victim = self.jobs[jid]
            chosen.append(jid)
            for name in victim.nodes:
                node_free[self.state.node_index[name]] += victim.spec.task_gpus
            if not job.spec.whole or int((node_free // job.spec.task_gpus).sum()) >= job.spec.num_tasks:
                fits = True
                break
        if not fits:
            return False
        for jid in chosen:
            self._stop(self.jobs[jid], "preempt")
            self._enqueue(self.jobs[jid])
        if self._try_start(job, key):
            for jid in chosen:
                self.jobs[jid].preemptions += 1
                self.totals.preemptions += 1
                self._emit("preempt", jid, detail=why)
            return True
        for jid in chosen:
            victim = self.jobs[jid]
            if not self._try_start(victim, self._entry[jid][0]):
                victim.preemptions += 1
                self.totals.preemptions += 1
                self._emit("preempt", jid, detail=why)
        return False

    def _offers_pass(self) -> None:
        """One Mesos-style offer round (:mod:`gpucluster.simulator.offers`); place what was accepted."""
        s = self.state
        usable = s.dev_valid & s.dev_healthy & (s.schedulable & s.present)[:, None]
        share = (np.where(usable, np.maximum(s.dev_core_cap - s.dev_core_used, 0), 0).sum(axis=1)
                 / 1000.0)
        whole = self._node_free()
        cpu = s.cpu_cap - s.cpu_used
        mem = s.mem_cap - s.mem_used
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
        if self._tree is not None:
            weights.update({q: spec.weight for q, spec in self._tree.queues.items()})
        delay = self.locality_delay_s or float(getattr(self.policy, "locality_delay_s", 0.0))
        result = offer_round(nodes, {"gpu": float(tot.gpus), "cpu": float(tot.cpu_milli),
                                     "mem": float(tot.memory_mib)},
                             queued, used, weights, self.now, delay, self._catalog)
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
    def _node_free(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """Free whole devices per node (cached per state generation)."""
        s = self.state
        if self._free_gen != s.generation:
            usable = s.dev_valid & s.dev_healthy & (s.schedulable & s.present)[:, None]
            self._free_cache = (usable & (s.dev_tasks == 0) & (s.dev_core_used == 0)).sum(axis=1)
            self._free_gen = s.generation
        return self._free_cache

    def _could_ever_fit(self, spec: JobSpec) -> bool:
        s = self.state
        per_node = (s.dev_valid & s.present[:, None]).sum(axis=1)
        if int((per_node // spec.task_gpus).sum()) < spec.num_tasks:
            return False
        ever = getattr(self._quota, "could_ever_fit", None)
        if ever is not None:
            from gpucluster.scheduler.plugins.quota import pod_charge

            total: dict[str, float] = {}
            for pod in task_pods(spec, 0):
                for r, v in pod_charge(pod, self.state.snapshot()).items():
                    total[r] = total.get(r, 0.0) + v
            return bool(ever(spec.tenant, total))
        return True

    def _fits_by_count(self, spec: JobSpec) -> bool:
        """Necessary condition for a start: enough nodes with room for whole tasks."""
        return self._slots_for(spec.task_gpus) >= spec.num_tasks

    def _slots_for(self, task_gpus: int) -> int:
        """Whole tasks of ``task_gpus`` devices the free devices can hold (cached per state generation)."""
        gen = self.state.generation
        if self._slots_gen != gen:
            self._slots.clear()
            self._slots_gen = gen
        n = self._slots.get(task_gpus)
        if n is None:
            n = self._slots[task_gpus] = int((self._node_free() // task_gpus).sum())
        return n

    def _try_start(self, job: Job, key: Key, pinned: tuple[str, ...] = ()) -> bool:
        """Place every task of ``job`` (on ``pinned``, one node per task, when given) or none; start it."""
        spec = job.spec
        attempt = job.attempt + 1
        pods = task_pods(spec, attempt)
        if pinned:
            assert len(pinned) == len(pods)
            pods = [replace(p, annotations={**p.annotations, NODE_NAME: n}) for p, n in zip(pods, pinned, strict=True)]
        waited = self.now - job.queued_since_s
        if self.locality_delay_s > 0 and spec.dataset and self._catalog is not None and not pinned \
                and waited < self.locality_delay_s:
            pods = [replace(p, annotations={**p.annotations, "gpucluster.io/data-locality": "required"})
                    for p in pods]
            stamp = (job.job_id, job.queued_since_s)
            if stamp not in self._delay_wake:
                self._delay_wake.add(stamp)
                self.at(job.queued_since_s + self.locality_delay_s, self._wake)
        group = self.scheduler.schedule_group(pods)
        self.totals.schedule_calls += group.cycles
        if not group.ok:
            return False
        nodes: list[int] = []
        devices: list[tuple[int, int]] = []
        for d in group.decisions:
            assert d.allocation is not None
            nodes.append(d.node_index)
            devices.extend((d.node_index, g.device_index) for g in d.allocation.grants)
        self._dequeue(job)
        job.attempt = attempt
        job.state = JobState.RUNNING
        job.run_start_s = self.now
        if job.first_start_s < 0:
            job.first_start_s = self.now
        job.queue_s += self.now - job.queued_since_s
        job.nodes = tuple(self.state.nodes[i].name for i in nodes)
        job.pod_keys = tuple(p.key for p in pods)
        if spec.dataset and self._catalog is not None:
            job.bytes_moved += sum(int(self._catalog.transfer_bytes(spec.dataset, n)) for n in job.nodes)
        level = self._level(devices)
        job.slowdown = self.network.slowdown(spec.model, spec.num_gpus, level, self._ideal_level(spec.num_gpus))
        job.extra["level"] = float(level)
        overhead = self.restart_overhead_s if attempt > 1 else 0.0
        end = self.now + overhead + job.remaining_s * job.slowdown
        job.run_start_s = self.now + overhead
        self._finish_seq[job.job_id] = self.kernel.schedule(end, _Finish(job.job_id, attempt), PRIO_FINISH)
        self._busy += spec.gpu_share
        use = self._tenants.setdefault(spec.tenant, _TenantUse())
        use.gpus += spec.gpu_share
        use.cpu_milli += spec.cpu_milli_per_gpu * spec.num_gpus
        use.memory_mib += spec.memory_mib_per_gpu * spec.num_gpus
        self._running[job.job_id] = self.policy.key(job, self)
        self._running_rank[job.job_id] = self.policy.rank(self._running[job.job_id])
        t = self.policy.running_change_at(job, self.now)
        if t != math.inf:
            self.kernel.schedule(max(t, job.run_start_s), _Rekey(job.job_id, job.run_start_s, True), PRIO_REKEY)
        self._emit("start", job.job_id, node=",".join(job.nodes))
        return True

    def _wake(self) -> None:
        self._dirty = True

    def _level(self, devices: list[tuple[int, int]]) -> TopologyLevel:
        s = self.state
        node_ids = {n for n, _ in devices}
        if len(node_ids) == 1:
            links = {int(s.dev_nvlink[n, j]) for n, j in devices}
            return TopologyLevel.NVLINK if len(links) == 1 and min(links) >= 0 else TopologyLevel.NODE
        if len({int(s.leaf_id[n]) for n in node_ids}) == 1:
            return TopologyLevel.LEAF
        if len({int(s.spine_id[n]) for n in node_ids}) == 1:
            return TopologyLevel.SPINE
        return TopologyLevel.CORE

    def _ideal_level(self, gpus: int) -> TopologyLevel:
        cache = self.totals.extra
        if "domain" not in cache:
            s = self.state
            dom = 1
            for i in range(s.n_nodes):
                links = s.dev_nvlink[i][s.dev_valid[i]]
                if links.size:
                    vals, counts = np.unique(links[links >= 0], return_counts=True)
                    if vals.size:
                        dom = max(dom, int(counts.max()))
            per_node = s.dev_valid.sum(axis=1)
            cache["domain"] = dom
            cache["leaf"] = float(np.bincount(s.leaf_id, weights=per_node).max())
            cache["spine"] = float(np.bincount(s.spine_id, weights=per_node).max())
        if gpus <= cache["domain"]:
            return TopologyLevel.NVLINK
        if gpus <= cache["leaf"]:
            return TopologyLevel.LEAF
        if gpus <= cache["spine"]:
            return TopologyLevel.SPINE
        return TopologyLevel.CORE

    def _release(self, job: Job) -> None:
        for key in job.pod_keys:
            self.scheduler.delete(key)
            if self._refund is not None:
                self._refund(key)
        seq = self._finish_seq.pop(job.job_id, None)
        if seq is not None:
            self.kernel.cancel(seq)
        spec = job.spec
        self._busy -= spec.gpu_share
        use = self._tenants[spec.tenant]
        use.gpus -= spec.gpu_share
        use.cpu_milli -= spec.cpu_milli_per_gpu * spec.num_gpus
        use.memory_mib -= spec.memory_mib_per_gpu * spec.num_gpus
        self._running.pop(job.job_id, None)
        self._running_rank.pop(job.job_id, None)
        job.pod_keys = ()
        self._dirty = True

    def _stop(self, job: Job, why: str) -> None:
        """Stop a running job: ``preempt``/``cancel`` save all progress, ``fail`` keeps only the last
        periodic checkpoint."""
        now = self.now
        ran = max(now - job.run_start_s, 0.0)
        progress = job.progress_at(now) if now >= job.run_start_s else job.work_done_s
        job.attained_gpu_s += ran * job.spec.gpu_share
        if why == "fail":
            interval = job.spec.checkpoint_interval_s
            saved = max(job.checkpoint_s, math.floor(progress / interval) * interval if interval > 0 else 0.0)
            saved = min(saved, progress)
            job.lost_work_s += progress - saved
            job.work_done_s = saved
        else:
            job.work_done_s = progress
        job.checkpoint_s = job.work_done_s
        job.run_start_s = -1.0
        self._release(job)

    def _complete(self, job: Job) -> None:
        now = self.now
        job.attained_gpu_s += max(now - job.run_start_s, 0.0) * job.spec.gpu_share
        job.work_done_s = job.spec.duration_s
        self._release(job)
        job.state = JobState.COMPLETED
        job.finish_s = now
        self._emit("finish", job.job_id)

    def _evict_on(self, node: int, hit: Callable[[Any], bool], why: str) -> list[str]:
        jobs: list[str] = []
        for key in sorted(self.state.pods_on_node[node]):
            alloc = self.state.allocations[key]
            if alloc.pod is None or not hit(alloc):
                continue
            jid = alloc.pod.labels.get("gpucluster.io/job", "")
            if jid in self.jobs and jid not in jobs:
                jobs.append(jid)
        for jid in jobs:
            job = self.jobs[jid]
            if job.state != JobState.RUNNING:
                continue
            self._stop(job, "fail")
            job.failures += 1
            self.totals.evictions += 1
            self._emit("evict", jid, detail=why)
            self._enqueue(job)
        return jobs
