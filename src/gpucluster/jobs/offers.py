"""Mesos-style two-level scheduling, in one module: nodes report free resources, an allocator offers them to
frameworks in DRF order, each framework accepts (launching tasks on the offered node) or declines (e.g.
because the node holds none of its data shards); Dominant Resource Fairness (Ghodsi et al., NSDI'11)
arbitrates. Resources are plain named quantities (``gpu``, ``cpu``, ``mem`` ...).

The engine's ``offers`` queue policy runs one allocation round per scheduling pass (:func:`offer_round`):

* every node with free devices reports what it has free (``gpu`` share, ``whole`` free devices, ``cpu``
  milli, ``mem`` MiB); one :class:`TenantFramework` per tenant with queued jobs registers with an
  :class:`OfferAllocator`, seeded with what the tenant already runs so that DRF sees the whole cluster;
* a job whose dataset has replicas (``DataCatalog``) is offered only replica nodes for its first ``delay_s``
  in the queue (delay scheduling); after that any node will do;
* a gang (several tasks) is accepted only while the free offers could hold all of it, and its framework keeps
  the offer turn (``Framework.holding``) until the gang is complete, so that no other tenant takes the rest
  of its nodes in between; a gang still incomplete when the round ends is dropped (nothing was placed);
* inside a tenant, jobs go in the queue's order; a job that fits no offer does not block a later job of
  another shape (jobs of the same shape are interchangeable, so the first of each shape is the candidate).

:func:`offer_round` returns the jobs whose tasks were all accepted, with the node of each task; the engine
places exactly there through the scheduler (``gpucluster.io/node-name``), so fit, gang and quota are checked
as for every other policy and no device is ever over-committed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpucluster.jobs.accounting import TenantLedger
from gpucluster.jobs.capacity import CapacityView
from gpucluster.jobs.model import Job
from gpucluster.scheduler.plugins.datalocality import DataCatalog

Resources = Mapping[str, float]


def dominant_share(used: Resources, capacity: Resources, weight: float = 1.0) -> float:
    """max over resources of used / capacity, divided by the framework's weight."""
    share = max((used.get(r, 0.0) / c for r, c in capacity.items() if c > 0), default=0.0)
    return share / weight


def _fits(task: Resources, free: Resources) -> bool:
    return all(free.get(r, 0.0) + 1e-12 >= q for r, q in task.items())


def drf_allocate(capacity: Resources, demands: Mapping[str, Resources],
                 weights: Mapping[str, float] | None = None, limit: int = 1_000_000) -> dict[str, int]:
    """Progressive filling: repeatedly give one task to the user with the lowest dominant share whose next
    task still fits; returns tasks per user. (The paper's example: 9 CPU, 18 GB; A <1 CPU, 4 GB>,
    B <3 CPU, 1 GB> -> A 3 tasks, B 2 tasks.)"""
    w = dict(weights or {})
    free = dict(capacity)
    used: dict[str, dict[str, float]] = {u: {} for u in demands}
    count = dict.fromkeys(demands, 0)
    active = set(demands)
    for _ in range(limit):
        if not active:
            break
        user = min(active, key=lambda u: (dominant_share(used[u], capacity, w.get(u, 1.0)), u))
        task = demands[user]
        if not _fits(task, free):
            active.discard(user)
            continue
        for r, q in task.items():
            free[r] = free.get(r, 0.0) - q
            used[user][r] = used[user].get(r, 0.0) + q
        count[user] += 1
    return count


@dataclass(frozen=True, slots=True)
class Offer:
    node: str
    resources: Resources


@dataclass(slots=True)
class Framework:
    """A job framework: ``decide(offer) -> number of tasks to launch there`` (0 = decline).

    A framework whose tasks differ (a queue of jobs) sets ``on_launch``: the allocator calls it after every
    accepted offer, and the framework may then change ``task`` and ``pending`` for its next task."""

    name: str
    task: Resources
    """Resources of one task: offers that cannot hold it are not made. A framework with several kinds of task
    keeps its smallest here and, in ``decide``, sets the one it accepts the offer for."""
    pending: int
    """Tasks still to launch."""
    decide: Callable[[Offer], int]
    weight: float = 1.0
    used: dict[str, float] = field(default_factory=dict)
    """Resources the framework holds; may be seeded with what it already runs elsewhere (DRF counts it)."""
    launched: list[str] = field(default_factory=list)
    """Node of each launched task."""
    launched_tasks: list[Resources] = field(default_factory=list)
    """Resources of each launched task (same order as ``launched``)."""
    on_launch: Callable[[str, int], None] | None = None
    """Called with (node, tasks) after the allocator launched tasks of ``task`` there."""
    holding: bool = False
    """The framework holds part of a gang: it is offered first (before DRF order) until it accepts nothing
    more, so that other frameworks cannot take the rest of the gang's nodes in between."""


class OfferAllocator:
    """Offers every node's free resources, one framework at a time in DRF order, until no framework
    accepts anything more."""

    def __init__(self, nodes: Mapping[str, Resources], capacity: Resources | None = None) -> None:
        """``nodes``: what each node reports free. ``capacity``: the cluster's total (DRF divides by it);
        default the sum of the reports."""
        self.free: dict[str, dict[str, float]] = {n: dict(r) for n, r in nodes.items()}
        self.capacity: dict[str, float] = {}
        if capacity is not None:
            self.capacity = dict(capacity)
        else:
            for r in nodes.values():
                for k, q in r.items():
                    self.capacity[k] = self.capacity.get(k, 0.0) + q
        self.frameworks: dict[str, Framework] = {}
        self.declined = 0
        self.accepted = 0
        """Offers accepted (each may launch several tasks)."""

    def register(self, fw: Framework) -> None:
        if fw.name in self.frameworks:
            raise ValueError(f"framework {fw.name!r} registered twice")
        self.frameworks[fw.name] = fw

    def release(self, framework: str, node: str) -> None:
        """A task of ``framework`` on ``node`` ended: its resources go back to the node."""
        fw = self.frameworks[framework]
        i = fw.launched.index(node)
        del fw.launched[i]
        task = fw.launched_tasks.pop(i)
        for r, q in task.items():
            self.free[node][r] += q
            fw.used[r] -= q

    def round(self) -> int:
        """Offer until quiescent; returns tasks launched.

        Frameworks are offered in DRF order (lowest dominant share first; a ``holding`` framework before
        all), every node in name order, and ranked again after every accepted offer. A framework that
        declines every offer is not offered again in this round (free resources only shrink while a round
        runs)."""
        launched = 0
        nodes = sorted(self.free)
        done: set[str] = set()
        progress = True
        while progress:
            progress = False
            order = sorted((fw for fw in self.frameworks.values() if fw.pending > 0 and fw.name not in done),
                           key=lambda f: (not f.holding, dominant_share(f.used, self.capacity, f.weight), f.name))
            for fw in order:
                for node in nodes:
                    free = self.free[node]
                    if not _fits(fw.task, free):
                        continue
                    n = fw.decide(Offer(node, dict(free)))
                    task = fw.task
                    n = min(n, fw.pending, max_tasks(task, free))
                    if n <= 0:
                        self.declined += 1
                        continue
                    for _ in range(n):
                        for r, q in task.items():
                            free[r] -= q
                            fw.used[r] = fw.used.get(r, 0.0) + q
                        fw.launched.append(node)
                        fw.launched_tasks.append(task)
                    fw.pending -= n
                    launched += n
                    self.accepted += 1
                    progress = True
                    if fw.on_launch is not None:
                        fw.on_launch(node, n)
                    break  # re-rank frameworks after every accepted offer (DRF)
                if progress:
                    break
                done.add(fw.name)
        return launched


def max_tasks(task: Resources, free: Resources) -> int:
    """How many tasks of ``task`` the resources ``free`` hold."""
    return int(min(((free.get(r, 0.0) + 1e-12) // q for r, q in task.items() if q > 0), default=0))


Shape = tuple[int, int, int, int, int, str, Any]
"""(task GPUs, tasks, GPU milli, CPU milli per task, memory MiB per task, dataset held to, the spec's task
shape)."""


def task_resources(job: Job) -> dict[str, float]:
    """What one task of ``job`` takes from an offer."""
    spec = job.spec
    g = spec.task_gpus
    share = g * spec.gpu_milli / 1000 if spec.template is None else spec.gpu_share / spec.num_tasks
    out = {"gpu": share, "cpu": float(spec.cpu_milli // spec.num_tasks),
           "mem": float(spec.memory_mib // spec.num_tasks)}
    if spec.whole:
        out["whole"] = float(g)
    return out


@dataclass(slots=True)
class _Group:
    """Queued jobs of one shape, in queue order; ``pos`` is the next candidate."""

    shape: Shape
    task: dict[str, float]
    replicas: frozenset[str] | None
    """Nodes the group's jobs may use (None = any)."""
    jobs: list[Job] = field(default_factory=list)
    order: list[int] = field(default_factory=list)
    """Queue position of each job (the group whose next job comes first is tried first)."""
    pos: int = 0
    feasible_at: int = -1
    """``OfferAllocator.accepted`` when the gang check last passed (it holds until something is launched)."""
    infeasible_at: int = -1


@dataclass(slots=True)
class OfferResult:
    placed: list[tuple[Job, tuple[str, ...]]]
    """Jobs whose tasks were all accepted, in acceptance order, with the node of each task."""
    declined: int
    accepted: int
    wake_at: list[float]
    """Times at which a job's locality delay ends (the runner schedules a pass then)."""


class TenantFramework:
    """One tenant's framework: accepts offers for its queued jobs (see the module docstring)."""

    def __init__(self, tenant: str, jobs: Sequence[Job], now: float, delay_s: float,
                 catalog: DataCatalog | None, used: Mapping[str, float], weight: float = 1.0,
                 placed: list[tuple[Job, tuple[str, ...]]] | None = None) -> None:
        """``jobs``: the tenant's queued jobs in queue order; ``used``: what it runs now (DRF counts it);
        ``placed``: where completed gangs are appended (shared by the frameworks of one round)."""
        self.wake_at: list[float] = []
        groups: dict[Shape, _Group] = {}
        for i, job in enumerate(jobs):
            spec = job.spec
            held = ""
            replicas: frozenset[str] | None = None
            if spec.dataset and catalog is not None and delay_s > 0 and now - job.queued_since_s < delay_s:
                ds = catalog.datasets.get(spec.dataset)
                if ds is not None and ds.replicas:
                    held, replicas = spec.dataset, frozenset(ds.replicas)
                    self.wake_at.append(job.queued_since_s + delay_s)
            shape = (spec.task_gpus, spec.num_tasks, spec.gpu_milli, spec.cpu_milli // spec.num_tasks,
                     spec.memory_mib // spec.num_tasks, held, spec.shape)
            grp = groups.get(shape)
            if grp is None:
                grp = groups[shape] = _Group(shape, task_resources(job), replicas)
            grp.jobs.append(job)
            grp.order.append(i)
        self.groups = list(groups.values())
        self.open: _Group | None = None
        """The group whose next job's gang is being assembled."""
        self.open_nodes: list[str] = []
        self.placed: list[tuple[Job, tuple[str, ...]]] = placed if placed is not None else []
        self.allocator: OfferAllocator | None = None
        self.fw = Framework(tenant, {}, pending=0, decide=self.decide, weight=weight, used=dict(used),
                            on_launch=self.launched)
        self._refresh()

    # ------------------------------------------------------------------------------------------ helpers
    def _live(self) -> list[_Group]:
        return [g for g in self.groups if g.pos < len(g.jobs)]

    def _smallest(self) -> dict[str, float]:
        live = self._live()
        if not live:
            return {}
        keys = {k for g in live for k in g.task}
        # an offer that cannot hold even the smallest amount any task needs is not worth making
        return {k: min(g.task.get(k, 0.0) for g in live) for k in keys}

    def _refresh(self) -> None:
        live = self._live()
        self.groups = sorted(live, key=lambda g: g.order[g.pos])
        self.fw.pending = sum(g.shape[1] for g in live) if live else 0
        self.fw.task = self._smallest()

    def _gang_fits(self, grp: _Group) -> bool:
        """Could the free offers (replica nodes only, while the job waits for them) hold the whole gang?"""
        alloc = self.allocator
        assert alloc is not None
        if grp.feasible_at == alloc.accepted:
            return True
        if grp.infeasible_at == alloc.accepted:
            return False
        need = grp.shape[1]
        have = 0
        for node, free in alloc.free.items():
            if grp.replicas is None or node in grp.replicas:
                have += max_tasks(grp.task, free)
                if have >= need:
                    grp.feasible_at = alloc.accepted
                    return True
        grp.infeasible_at = alloc.accepted
        return False

    # ------------------------------------------------------------------------------------------ Framework
    def decide(self, offer: Offer) -> int:
        if self.open is not None:
            grp = self.open
            if grp.replicas is not None and offer.node not in grp.replicas:
                return 0
            self.fw.task = grp.task
            return grp.shape[1] - len(self.open_nodes)
        for grp in self.groups:
            if grp.replicas is not None and offer.node not in grp.replicas:
                continue  # delay scheduling: decline non-local offers for this job while it may wait
            fits = max_tasks(grp.task, offer.resources)
            if fits <= 0:
                continue
            if grp.shape[1] > fits and not self._gang_fits(grp):
                continue
            self.open = grp
            self.open_nodes = []
            self.fw.task = grp.task
            return min(fits, grp.shape[1])
        return 0

    def launched(self, node: str, n: int) -> None:
        grp = self.open
        assert grp is not None
        self.open_nodes.extend([node] * n)
        if len(self.open_nodes) >= grp.shape[1]:
            self.placed.append((grp.jobs[grp.pos], tuple(self.open_nodes)))
            grp.pos += 1
            self.open = None
            self.open_nodes = []
            self.fw.holding = False
            self._refresh()
        else:
            self.fw.holding = True
            self.fw.pending = grp.shape[1] - len(self.open_nodes)
            self.fw.task = grp.task


def offer_round(nodes: Mapping[str, Resources], capacity: Resources, queued: Mapping[str, Sequence[Job]],
                used: Mapping[str, Mapping[str, float]], weights: Mapping[str, float], now: float,
                delay_s: float = 0.0, catalog: DataCatalog | None = None) -> OfferResult:
    """One allocation round (see the module docstring). ``queued``: tenant -> its queued jobs in queue order;
    ``used``: tenant -> resources it runs now; ``nodes``: node -> what it reports free."""
    alloc = OfferAllocator(nodes, capacity=capacity)
    placed: list[tuple[Job, tuple[str, ...]]] = []
    wake: list[float] = []
    for tenant, jobs in queued.items():
        if not jobs:
            continue
        tf = TenantFramework(tenant, jobs, now, delay_s, catalog, used.get(tenant, {}), weights.get(tenant, 1.0),
                             placed)
        tf.allocator = alloc
        alloc.register(tf.fw)
        wake.extend(tf.wake_at)
    alloc.round()
    return OfferResult(placed, alloc.declined, alloc.accepted, wake)


class OffersAdaptor:
    """The job engine's side of a round: what each node offers and the cluster's total from the
    :class:`CapacityView`, each tenant's usage and weight from the :class:`TenantLedger`, the queued jobs by
    tenant in queue order; the engine places what was accepted."""

    __slots__ = ("capacity", "catalog", "ledger")

    def __init__(self, capacity: CapacityView, ledger: TenantLedger, catalog: DataCatalog | None = None) -> None:
        self.capacity = capacity
        self.ledger = ledger
        self.catalog = catalog

    def round(self, queued: Iterable[Job], now: float, delay_s: float) -> OfferResult | None:
        """One round over ``queued`` (in queue order); None when no node has a free GPU share to offer."""
        nodes = self.capacity.offers()
        if not nodes:
            return None
        by_tenant: dict[str, list[Job]] = {}
        for job in queued:
            by_tenant.setdefault(job.spec.tenant, []).append(job)
        return offer_round(nodes, self.capacity.totals(), by_tenant, self.ledger.offer_usage(),
                           self.ledger.offer_weights(), now, delay_s, self.catalog)
