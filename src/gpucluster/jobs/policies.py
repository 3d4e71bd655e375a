"""Queue policies: in which order queued jobs are offered to the scheduler, and whom to preempt.

A policy gives each job a sort ``key`` (lower runs first). Keys of queued jobs only change at times the policy
announces (``queued_change_at``: starvation promotion), and running jobs change priority at
``running_change_at`` (2D-LAS demotion), so the runner keeps the queue sorted and re-keys a job only then.
``dynamic`` policies (DRF) depend on the whole cluster, but only through a part of the key that is the same for
every job of a tenant (``tenant_key``: its standing): the queue keeps their jobs sorted by the rest
(``queue_key``, which does not move), and a scheduling pass composes the two (``compose``) for the few jobs it
looks at, with each tenant's part fixed when the pass begins, instead of re-keying and re-sorting every queued job.

Preemptive policies let a queued job evict running jobs whose key is strictly worse (larger); preempted jobs
save a checkpoint and return to the queue with their progress.

| name | order | backfill | preempts | placement |
|---|---|---|---|---|
| ``fifo`` | arrival | no (head of line blocks) | no | binpack |
| ``sjf`` | duration (oracle) | yes | no | binpack |
| ``tiresias`` | 2D-LAS: queue by attained GPU-s, FIFO inside, starvation promotion | yes | yes | binpack |
| ``drf`` | tenant under its guarantee first, dominant share beyond it, arrival | yes | reclaim only | binpack |
| ``offers`` | DRF offers to tenant frameworks, arrival inside one, delay scheduling | yes | no | accepted nodes |
| ``gavel`` | least work done (reference-GPU-seconds) first | yes | no | ``gavel``: GPU speed, then binpack |
| ``default`` | 3-queue 2D-LAS, small first on top, 2 h lease, starvation + age guards | yes | yes | gang + topology |

Reclaim (``reclaim``, on for ``drf``): with a ``QuotaTree`` of hierarchical queues (``services={"quota": tree}``),
a job of a queue that stays within its guarantee may preempt jobs of queues above their guarantee; see
:mod:`gpucluster.jobs.preemption` and ``docs/jobs-simulation.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from gpucluster.jobs.model import Job, JobState

Key = tuple[float, ...]
_TINY = 1e-9


class PolicyView(Protocol):
    """What a policy may read about the simulation."""

    @property
    def now(self) -> float: ...

    def tenant_share(self, tenant: str) -> float:
        """The tenant's dominant share of the cluster right now (0..1), divided by its weight."""
        ...

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        """(0 while the tenant's queue is below its guaranteed GPUs, else 1; its dominant share beyond the
        guarantee, divided by its over-quota weight). Without a quota tree: ``(1, tenant_share)``."""
        ...


class QueuePolicy(Protocol):
    name: str
    backfill: bool
    """Try jobs behind one that does not fit (otherwise the head of the queue blocks everyone)."""
    preemptive: bool
    dynamic: bool
    """Keys depend on cluster state, through each tenant's part of the key (:meth:`tenant_key`): a pass fixes the
    tenants' parts when it begins and merges the queue (kept in :meth:`queue_key` order) by the composed keys."""
    topology_aware: bool
    """Place through the gang + topology profile (else plain binpack with gangs)."""
    min_run_s: float
    """A running job cannot be preempted before it has run this long (a lease; damps preemption storms)."""
    via_offers: bool
    """Place through Mesos-style resource offers (:mod:`gpucluster.jobs.offers`) instead of walking the
    queue job by job."""
    reclaim: bool
    """With a quota tree: a job whose queue stays within its guarantee may preempt jobs of queues above
    theirs (never below), over-quota usage per weight first."""

    def key(self, job: Job, view: PolicyView) -> Key: ...

    def queue_key(self, job: Job, view: PolicyView) -> Key:
        """A ``dynamic`` policy's part of ``key`` that does not move while the job waits: the queue sorts by it
        (a policy that is not dynamic is queued by its whole ``key``)."""
        ...

    def tenant_key(self, tenant: str, view: PolicyView) -> Key:
        """A ``dynamic`` policy's part of the key that moves with the cluster: the same for every job of
        ``tenant`` (``()`` for a policy that is not dynamic)."""
        ...

    def compose(self, queue_key: Key, tenant_key: Key) -> Key:
        """The whole key from its parts: ``key(job, view) == compose(queue_key(job, view),
        tenant_key(job.spec.tenant, view))``; for one ``tenant_key`` it keeps the ``queue_key`` order (a tenant's
        jobs keep their order whatever its standing)."""
        ...

    def rank(self, key: Key) -> Key:
        """The part of a key preemption compares: a queued job may preempt a running one only when its rank
        is strictly smaller."""
        ...

    def running_change_at(self, job: Job, now: float) -> float:
        """When a running job's key next changes (``inf`` if never)."""
        ...

    def queued_change_at(self, job: Job, now: float) -> float:
        """When a queued job's key next changes (``inf`` if never)."""
        ...


@dataclass(slots=True)
class _Flags:
    """The :class:`QueuePolicy` flags with FIFO's values; policies override the ones that differ."""

    name: str = ""
    backfill: bool = False
    preemptive: bool = False
    dynamic: bool = False
    topology_aware: bool = False
    min_run_s: float = 0.0
    via_offers: bool = False
    reclaim: bool = False

    def key(self, job: Job, view: PolicyView) -> Key:
        raise NotImplementedError  # every policy says its order

    def queue_key(self, job: Job, view: PolicyView) -> Key:
        return self.key(job, view)

    def tenant_key(self, tenant: str, view: PolicyView) -> Key:
        return ()

    def compose(self, queue_key: Key, tenant_key: Key) -> Key:
        return queue_key


@dataclass(slots=True)
class _StaticKey(_Flags):
    """For policies whose keys never change on their own: the whole key ranks, nothing to re-evaluate."""

    def rank(self, key: Key) -> Key:
        return key

    def running_change_at(self, job: Job, now: float) -> float:
        return math.inf

    def queued_change_at(self, job: Job, now: float) -> float:
        return math.inf


@dataclass(slots=True)
class Fifo(_StaticKey):
    name: str = "fifo"

    def key(self, job: Job, view: PolicyView) -> Key:
        return (-job.spec.priority, job.spec.submit_s)


@dataclass(slots=True)
class ShortestJobFirst(_StaticKey):
    """Non-preemptive shortest job first with an oracle of each job's remaining run time."""

    name: str = "sjf"
    backfill: bool = True

    def key(self, job: Job, view: PolicyView) -> Key:
        return (-job.spec.priority, job.remaining_s, job.spec.submit_s)


@dataclass(slots=True)
class TwoDimensionalLAS(_Flags):
    """Tiresias' discretized 2D least-attained-service (NSDI'19).

    A job sits in queue ``k`` while its attained service (GPUs x seconds run) is below ``thresholds[k]``;
    lower queues run first and may preempt higher ones; inside a queue jobs keep arrival order (or, with
    ``small_first``, fewer GPUs first). A queued job that has waited ``starve_factor`` x its run time (and at
    least ``starve_min_s``) is promoted to queue 0 (Tiresias' STARVELIMIT).

    ``protect_age_s``: a running job that has been in the system (since it was submitted) at least this long
    is not preempted any more (its rank drops below every queue's), so it runs to completion: this bounds
    the completion time of the long and the large jobs that LAS keeps sending back (the p99 tail) without
    knowing any duration.
    """

    name: str = "tiresias"
    thresholds: Sequence[float] = (3600.0 * 10,)
    starve_factor: float = 8.0
    starve_min_s: float = 3600.0 * 4
    small_first: bool = False
    sticky_promotion: bool = False
    """A starved job, once promoted, stays in the top queue until it finishes (bounds long jobs' JCT)."""
    protect_age_s: float = math.inf
    """A running job this old (now - submit) is no longer preempted."""
    backfill: bool = True
    preemptive: bool = True
    min_run_s: float = 600.0

    def queue_of(self, attained: float) -> int:
        for k, t in enumerate(self.thresholds):
            if attained < t:
                return k
        return len(self.thresholds)

    def _starved(self, job: Job, now: float) -> bool:
        return now >= self._starve_time(job)

    def _starve_time(self, job: Job) -> float:
        if job.extra.get("promoted"):
            return math.inf
        ran = max(job.attained_gpu_s / max(job.spec.gpu_share, _TINY), 0.0)
        if ran <= 0:
            return math.inf
        return job.queued_since_s + max(self.starve_factor * ran, self.starve_min_s)

    def key(self, job: Job, view: PolicyView) -> Key:
        now = view.now
        if job.state == JobState.QUEUED and self._starved(job, now):
            # promotion: back to the top queue, attained service counted afresh from here
            job.extra["las_base"] = job.attained_gpu_s
            if self.sticky_promotion:
                job.extra["promoted"] = 1.0
        attained = job.attained_at(now) - job.extra.get("las_base", 0.0)
        q = 0 if job.extra.get("promoted") else self.queue_of(attained)
        job.priority_queue = q
        if job.state == JobState.RUNNING and now - job.spec.submit_s >= self.protect_age_s:
            return (-job.spec.priority, -1.0, 0.0, job.spec.submit_s)  # protected: no queue outranks it
        # small jobs first among the short (top-queue) jobs; demoted jobs keep arrival order
        second = float(job.spec.num_gpus) if self.small_first and q == 0 else 0.0
        return (-job.spec.priority, float(q), second, job.spec.submit_s)

    def rank(self, key: Key) -> Key:
        return key[:2]

    def running_change_at(self, job: Job, now: float) -> float:
        protect = job.spec.submit_s + self.protect_age_s
        if now >= protect:
            return math.inf
        attained = job.attained_at(now) - job.extra.get("las_base", 0.0)
        q = self.queue_of(attained)
        if q >= len(self.thresholds) or job.extra.get("promoted"):
            return protect + 1e-3 if protect != math.inf else math.inf
        # a millisecond late, so float rounding can never leave the job just below the threshold
        rate = max(job.spec.gpu_share, _TINY)  # a job holding no GPU attains no service: it never changes queue
        return min(now + max((self.thresholds[q] - attained) / rate, 0.0) + 1e-3, protect + 1e-3)

    def queued_change_at(self, job: Job, now: float) -> float:
        t = self._starve_time(job)
        return t if t > now else math.inf


@dataclass(slots=True)
class DominantResourceFairness(_StaticKey):
    """Serve the tenant with the lowest (weighted) dominant share first; arrival order inside a tenant.

    With a quota tree, tenants below their guarantee come first, and the share compared is the one beyond the
    guarantee divided by the queue's over-quota weight; ``reclaim`` lets them take back their guarantee from
    tenants running above theirs."""

    name: str = "drf"
    backfill: bool = True
    dynamic: bool = True
    reclaim: bool = True

    def key(self, job: Job, view: PolicyView) -> Key:
        return self.compose(self.queue_key(job, view), self.tenant_key(job.spec.tenant, view))

    def queue_key(self, job: Job, view: PolicyView) -> Key:
        return (-job.spec.priority, job.spec.submit_s)

    def tenant_key(self, tenant: str, view: PolicyView) -> Key:
        return view.tenant_standing(tenant)

    def compose(self, queue_key: Key, tenant_key: Key) -> Key:
        return (queue_key[0], tenant_key[0], tenant_key[1], queue_key[1])


@dataclass(slots=True)
class Offers(Fifo):
    """Mesos-style two-level scheduling: per pass the nodes' free resources are offered to one framework per
    tenant in DRF order; a framework accepts offers for its queued jobs in arrival order (FIFO's key) and
    declines nodes without a replica of a job's dataset for the job's first ``locality_delay_s`` in the queue
    (delay scheduling). The accepted nodes are then checked and bound by the shared scheduler."""

    name: str = "offers"
    backfill: bool = True
    via_offers: bool = True
    locality_delay_s: float = 300.0
    """How long a job with a dataset declines offers of nodes without a replica (the simulation's
    ``locality_delay_s``, when set, wins)."""


@dataclass(slots=True)
class HeterogeneityAware(_StaticKey):
    """Gavel's idea (OSDI'20) on the engine: fair in *normalised* throughput, placed by effective throughput.

    Order: the job that has done the least work so far, counted in reference-GPU-seconds (GPUs x seconds of work
    on its ``ref_gpu``, :mod:`gpucluster.jobs.speed`), first; a job that ran on slow GPUs got less done for
    the same time, so it comes back first (least attained *work*, not time). Placement: the ``gavel`` profile
    (the ``GpuSpeed`` plugin: the model where the job's speed relative to its best option, compared with the
    other jobs', is highest; binpack inside it). Backfills; does not preempt. ``gpu_type`` lists the models a
    job accepts.
    """

    name: str = "gavel"
    backfill: bool = True
    speed_aware: bool = True
    """Place through the ``gavel`` profile (GPU speed decides the model)."""

    def key(self, job: Job, view: PolicyView) -> Key:
        return (-job.spec.priority, job.work_done_s * job.spec.gpu_share, job.spec.submit_s)


def default_policy() -> TwoDimensionalLAS:
    """The project's default: 2D-LAS with three queues (thresholds at 10 and 800 GPU-hours) and the smallest
    jobs first among the short ones, a two-hour lease before a job may be preempted, a starvation guard
    (promoted after waiting 2x its run time, at least 2 h), protection from preemption once a job has been in
    the system 2.5 M s (about 29 days; bounds the p99 tail), and gang + topology-aware placement (the network
    model rewards it). The ablation behind these numbers is in ``docs/jobs-simulation.md``."""
    return TwoDimensionalLAS(
        name="default",
        thresholds=(36000.0, 2880000.0),
        starve_factor=2.0,
        starve_min_s=7200.0,
        small_first=True,
        protect_age_s=2.5e6,
        topology_aware=True,
        min_run_s=7200.0,
    )


@dataclass(frozen=True, slots=True)
class PolicyInfo:
    build: Callable[[], QueuePolicy]
    summary: str = ""
    extra: Mapping[str, str] = field(default_factory=dict)


POLICIES: Mapping[str, PolicyInfo] = {
    "fifo": PolicyInfo(Fifo, "first come first served, head of line blocks"),
    "sjf": PolicyInfo(ShortestJobFirst, "shortest job first (oracle durations), non-preemptive"),
    "tiresias": PolicyInfo(TwoDimensionalLAS, "Tiresias 2D-LAS, two queues, preemptive"),
    "drf": PolicyInfo(DominantResourceFairness, "DRF fair share across tenants, reclaim by guarantee"),
    "offers": PolicyInfo(Offers, "Mesos-style offers to tenant frameworks, DRF arbitration, delay scheduling"),
    "gavel": PolicyInfo(HeterogeneityAware, "heterogeneity-aware (Gavel): least work done first, placed on the GPU "
                                            "model where the job's relative speed is highest"),
    "default": PolicyInfo(default_policy, "the project's default: 3-queue 2D-LAS, small first, lease, age guard, "
                                          "gang/topology"),
}
"""Policy name -> builder."""

DEFAULT_QUEUE_POLICY = "default"


def make_policy(name: str) -> QueuePolicy:
    try:
        return POLICIES[name].build()
    except KeyError:
        raise ValueError(f"unknown queue policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
