"""Mesos-style two-level allocation: nodes report free resources, the allocator offers them to frameworks
in DRF order, and each framework accepts (launching tasks on the offered node) or declines (e.g. because
the node holds none of its data shards). Dominant Resource Fairness (Ghodsi et al., NSDI'11) arbitrates.

Resources are plain named quantities (``gpu``, ``cpu``, ``mem`` ...); the allocator is backend-agnostic.
The job simulator's ``offers`` queue policy builds one allocator per scheduling pass: every node with free
devices is offered, one framework per tenant (seeded with what the tenant already runs, so DRF sees the whole
cluster) accepts offers for its queued jobs, and the jobs whose tasks were all accepted are placed on exactly
those nodes through the shared scheduler.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

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
