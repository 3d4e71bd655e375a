"""Tenant quotas: hierarchical queues (guarantee, limit, over-quota weight) and HAMi namespace quotas.

A :class:`QuotaTree` (a shared service, ``Handle.services["quota"]``) holds the queues and what each one is
charged. The ``Quota`` plugin's PreFilter rejects a pod (``QuotaExceeded``) when charging it would take its
queue or any ancestor over a limit; Reserve charges it and Unreserve refunds it. Whoever deletes pods (the
simulator, the service) calls :meth:`QuotaTree.refund` with the pod key, which is idempotent.

Charged quantities: ``gpu`` (devices x core share, so a 50 % vGPU counts 0.5), ``gpumem`` (MiB,
HAMi ``limits.nvidia.com/gpumem``) and ``gpucores`` (percent of one device, HAMi ``limits.nvidia.com/gpucores``).
Guarantees and weights do not limit anything here: queue policies use them (:meth:`QuotaTree.fair_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.model import Pod, Snapshot
from gpucluster.scheduler.framework import CycleState, Handle, PluginRegistry, Reason, Status
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "Quota"
SERVICE = "quota"
RESOURCES = ("gpu", "gpumem", "gpucores")


@dataclass(slots=True)
class QueueSpec:
    name: str
    parent: str = ""
    """Parent queue ('' = top level)."""
    guarantee: float = 0.0
    """GPUs the queue is entitled to whenever it asks (used by fair ordering and reclaim)."""
    limit: dict[str, float] = field(default_factory=dict)
    """Hard caps per resource (``gpu``, ``gpumem`` MiB, ``gpucores`` %); missing = unlimited."""
    weight: float = 1.0
    """Share of capacity beyond guarantees, relative to sibling queues."""


def pod_charge(pod: Pod, snap: Snapshot | None = None) -> dict[str, float]:
    gpu = 0.0
    mem = 0.0
    cores = 0.0
    for _, r in pod.device_requests:
        gpu += r.count * r.core_milli / 1000 if r.core_milli else r.count * 0.0
        cores += r.count * r.core_milli / 10
        if r.memory_pct is not None:
            per = 0.0
            if snap is not None and snap.dev_valid.any():
                per = float(snap.dev_mem_cap[snap.dev_valid].max())
            mem += r.count * per * r.memory_pct / 100
        else:
            mem += r.count * r.memory_mib
    return {"gpu": gpu, "gpumem": mem, "gpucores": cores}


class QuotaTree:
    """Queues and their usage. Not thread-safe (one scheduling loop)."""

    def __init__(self, queues: list[QueueSpec]) -> None:
        self.queues: dict[str, QueueSpec] = {}
        for q in queues:
            if q.name in self.queues:
                raise ValueError(f"queue {q.name!r} defined twice")
            self.queues[q.name] = q
        for q in queues:
            if q.parent and q.parent not in self.queues:
                raise ValueError(f"queue {q.name!r}: unknown parent {q.parent!r}")
            seen = {q.name}
            p = q.parent
            while p:
                if p in seen:
                    raise ValueError(f"queue {q.name!r}: parent cycle")
                seen.add(p)
                p = self.queues[p].parent
        self.used: dict[str, dict[str, float]] = {n: dict.fromkeys(RESOURCES, 0.0) for n in self.queues}
        self._charged: dict[str, tuple[str, dict[str, float]]] = {}

    def chain(self, queue: str) -> list[str]:
        out = []
        q = queue if queue in self.queues else ""
        while q:
            out.append(q)
            q = self.queues[q].parent
        return out

    def blocked_by(self, queue: str, charge: Mapping[str, float]) -> str | None:
        """The first queue on the chain whose limit the charge would break, or None."""
        for q in self.chain(queue):
            lim = self.queues[q].limit
            for r, cap in lim.items():
                if self.used[q].get(r, 0.0) + charge.get(r, 0.0) > cap + 1e-9:
                    return f"{q}.{r}"
        return None

    def could_ever_fit(self, queue: str, charge: Mapping[str, float]) -> bool:
        """True when the charge is within every limit on the chain with nothing else running."""
        return all(charge.get(r, 0.0) <= cap + 1e-9
                   for q in self.chain(queue) for r, cap in self.queues[q].limit.items())

    def charge(self, pod_key: str, queue: str, charge: Mapping[str, float]) -> None:
        if pod_key in self._charged:
            return
        self._charged[pod_key] = (queue, dict(charge))
        for q in self.chain(queue):
            for r, v in charge.items():
                self.used[q][r] = self.used[q].get(r, 0.0) + v

    def refund(self, pod_key: str) -> None:
        found = self._charged.pop(pod_key, None)
        if found is None:
            return
        queue, charge = found
        for q in self.chain(queue):
            for r, v in charge.items():
                self.used[q][r] -= v

    def fair_key(self, queue: str) -> tuple[float, float]:
        """(0 under guarantee / 1 over it, GPUs beyond the guarantee / weight): lower deserves more now."""
        if queue not in self.queues:
            return (1.0, float("inf"))
        spec = self.queues[queue]
        used = self.used[queue]["gpu"]
        return (0.0 if used < spec.guarantee else 1.0, max(used - spec.guarantee, 0.0) / spec.weight)


class Quota:
    name = NAME

    def __init__(self, tree: QuotaTree) -> None:
        self.tree = tree

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        charge = pod_charge(pod, snap)
        blocked = self.tree.blocked_by(pod.charged_tenant, charge)
        if blocked is not None:
            return Status.unschedulable(NAME, Reason.QuotaExceeded.name, f"queue limit {blocked}")
        state.write(NAME, charge)
        return Status.success()

    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        charge = state.get(NAME)
        if charge is not None:
            if self.tree.blocked_by(pod.charged_tenant, charge) is not None:
                return Status.unschedulable(NAME, Reason.QuotaExceeded.name)
            self.tree.charge(pod.key, pod.charged_tenant, charge)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        self.tree.refund(pod.key)


class _Args(PluginArgs):
    pass


def new_quota(args: Mapping[str, Any], handle: Handle) -> Quota:
    parse_args(_Args, NAME, args)
    tree = handle.services.get(SERVICE)
    if tree is None:
        tree = QuotaTree([])
        handle.services[SERVICE] = tree
    if not isinstance(tree, QuotaTree):
        raise TypeError(f"service {SERVICE!r} must be a QuotaTree")
    return Quota(tree)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_quota)
