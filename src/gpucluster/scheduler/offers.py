"""Mesos-style two-level allocation: nodes report free resources, the allocator offers them to frameworks
in DRF order, and each framework accepts (launching tasks on the offered node) or declines (e.g. because
the node holds none of its data shards). Dominant Resource Fairness (Ghodsi et al., NSDI'11) arbitrates.

Resources are plain named quantities (``gpu``, ``cpu``, ``mem`` ...); the allocator is backend-agnostic.
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
    """A job framework: ``decide(offer) -> number of tasks to launch there`` (0 = decline)."""

    name: str
    task: Resources
    """Resources of one task."""
    pending: int
    """Tasks still to launch."""
    decide: Callable[[Offer], int]
    weight: float = 1.0
    used: dict[str, float] = field(default_factory=dict)
    launched: list[str] = field(default_factory=list)
    """Node of each launched task."""


class OfferAllocator:
    """Offers every node's free resources, one framework at a time in DRF order, until no framework
    accepts anything more."""

    def __init__(self, nodes: Mapping[str, Resources]) -> None:
        self.free: dict[str, dict[str, float]] = {n: dict(r) for n, r in nodes.items()}
        self.capacity: dict[str, float] = {}
        for r in nodes.values():
            for k, q in r.items():
                self.capacity[k] = self.capacity.get(k, 0.0) + q
        self.frameworks: dict[str, Framework] = {}
        self.declined = 0

    def register(self, fw: Framework) -> None:
        if fw.name in self.frameworks:
            raise ValueError(f"framework {fw.name!r} registered twice")
        self.frameworks[fw.name] = fw

    def release(self, framework: str, node: str) -> None:
        """A task of ``framework`` on ``node`` ended: its resources go back to the node."""
        fw = self.frameworks[framework]
        fw.launched.remove(node)
        for r, q in fw.task.items():
            self.free[node][r] += q
            fw.used[r] -= q

    def round(self) -> int:
        """Offer until quiescent; returns tasks launched."""
        launched = 0
        progress = True
        while progress:
            progress = False
            order = sorted((fw for fw in self.frameworks.values() if fw.pending > 0),
                           key=lambda f: (dominant_share(f.used, self.capacity, f.weight), f.name))
            for fw in order:
                for node in sorted(self.free, key=lambda n: n):
                    free = self.free[node]
                    if not _fits(fw.task, free):
                        continue
                    n = min(fw.decide(Offer(node, dict(free))), fw.pending)
                    if n <= 0:
                        self.declined += 1
                        continue
                    n = min(n, _max_tasks(fw.task, free))
                    for _ in range(n):
                        for r, q in fw.task.items():
                            free[r] -= q
                            fw.used[r] = fw.used.get(r, 0.0) + q
                        fw.launched.append(node)
                    fw.pending -= n
                    launched += n
                    progress = n > 0
                    break  # re-rank frameworks after every accepted offer (DRF)
                if progress:
                    break
        return launched


def _max_tasks(task: Resources, free: Resources) -> int:
    return int(min((free.get(r, 0.0) + 1e-12) // q for r, q in task.items() if q > 0))
