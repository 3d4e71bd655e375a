"""The ``offers`` queue policy's scheduling pass: Mesos-style two-level scheduling over the simulator's queue.

Per pass, every node with free devices reports what it has free (``gpu`` share, ``whole`` free devices, ``cpu``
milli, ``mem`` MiB); one :class:`TenantFramework` per tenant with queued jobs registers with a
:class:`~gpucluster.scheduler.offers.OfferAllocator`, seeded with what the tenant already runs so that DRF
sees the whole cluster; the allocator offers nodes to the frameworks in DRF order and each framework accepts
(tasks of one of its queued jobs on that node) or declines:

* a job whose dataset has replicas (``DataCatalog``) is offered only replica nodes for its first
  ``delay_s`` in the queue (delay scheduling); after that any node will do;
* a gang (several tasks) is accepted only while the free offers could hold all of it, and its framework keeps
  the offer turn (``Framework.holding``) until the gang is complete, so that no other tenant takes the rest
  of its nodes in between; a gang still incomplete when the round ends is dropped (nothing was placed);
* inside a tenant, jobs go in the queue's order; a job that fits no offer does not block a later job of
  another shape (jobs of the same shape are interchangeable, so the first of each shape is the candidate).

:func:`offer_round` returns the jobs whose tasks were all accepted, with the node of each task; the runner
places exactly there through the shared scheduler (``gpucluster.io/node-name``), so fit, gang and quota are
checked as for every other policy and no device is ever over-committed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpucluster.scheduler.offers import Framework, Offer, OfferAllocator, Resources, max_tasks
from gpucluster.scheduler.plugins.datalocality import DataCatalog
from gpucluster.simulator.jobs import Job

Shape = tuple[int, int, int, str, int, int, str]
"""(task GPUs, tasks, GPU milli, GPU type, CPU milli per task, memory MiB per task, dataset held to)."""


def task_resources(job: Job) -> dict[str, float]:
    """What one task of ``job`` takes from an offer."""
    spec = job.spec
    g = spec.task_gpus
    out = {"gpu": g * spec.gpu_milli / 1000, "cpu": float(spec.cpu_milli_per_gpu * g),
           "mem": float(spec.memory_mib_per_gpu * g)}
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
            shape = (spec.task_gpus, spec.num_tasks, spec.gpu_milli, spec.gpu_type,
                     spec.cpu_milli_per_gpu * spec.task_gpus, spec.memory_mib_per_gpu * spec.task_gpus, held)
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
