"""Tenant quotas: hierarchical queues (guarantee, limit, over-quota weight) and HAMi namespace quotas.

A :class:`QuotaTree` (a shared service, ``Handle.services["quota"]``) holds the queues and what each one is
charged. The ``Quota`` plugin's PreFilter rejects a pod (``QuotaExceeded``) when charging it would take its
queue or any ancestor over a limit; Reserve charges it and Unreserve refunds it. Whoever deletes pods (the
simulator, the service) calls :meth:`QuotaTree.refund` with the pod key, which is idempotent.

Charged quantities: ``gpu`` (GPU-equivalents: per device the larger of the compute share and the memory share
the pod holds, so a 50 % vGPU counts 0.5 and a pod holding a whole device's memory counts 1 whatever its cores),
``gpumem`` (MiB, HAMi ``limits.nvidia.com/gpumem``) and ``gpucores`` (percent of one device, HAMi
``limits.nvidia.com/gpucores``). PreFilter checks an estimate from the request (the memory share against the
largest device); Reserve charges what the chosen devices make of it, and refuses when that breaks a limit.
Guarantees and weights do not limit anything here: queue policies use them (:meth:`QuotaTree.fair_key`).

Limits apply to admission, never retroactively: a pod annotated ``gpucluster.io/quota-admitted: "true"`` (its
job was admitted under an earlier quota and is being put back, e.g. after a control-plane restart) is charged
but not held to the limits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.model import DeviceGrant, Pod, Snapshot
from gpucluster.model.labels import QUOTA_ADMITTED_ANNOTATION
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
    """What the pod's requests charge its queue (before devices are chosen: a memory request in MiB counts its
    share of the largest device)."""
    gpu = 0.0
    mem = 0.0
    cores = 0.0
    largest = 0.0
    if snap is not None and snap.dev_valid.any():
        largest = float(snap.dev_mem_cap[snap.dev_valid].max())
    for _, r in pod.device_requests:
        core_share = r.core_milli / 1000
        cores += r.count * r.core_milli / 10
        if r.memory_pct is not None:
            mem += r.count * largest * r.memory_pct / 100
            mem_share = r.memory_pct / 100
        else:
            mem += r.count * r.memory_mib
            mem_share = r.memory_mib / largest if largest else 0.0
        gpu += r.count * core_share if core_share >= mem_share else r.count * mem_share
    return {"gpu": gpu, "gpumem": mem, "gpucores": cores}


def grant_charge(grants: tuple[tuple[DeviceGrant, ...], ...], snap: Snapshot, node: int,
                 estimate: Mapping[str, float]) -> dict[str, float]:
    """The charge of the devices actually granted on ``node``: ``gpu`` per device the larger of its compute and
    memory share, ``gpumem`` the MiB granted; ``gpucores`` as requested."""
    gpu = 0.0
    mem = 0.0
    for per_container in grants:
        for g in per_container:
            core_cap = int(snap.dev_core_cap[node, g.device_index])
            mem_cap = int(snap.dev_mem_cap[node, g.device_index])
            core = g.core_milli / core_cap if core_cap else 0.0
            share = g.memory_mib / mem_cap if mem_cap else 0.0
            gpu += core if core >= share else share
            mem += g.memory_mib
    return {**estimate, "gpu": gpu, "gpumem": mem}


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
        self.revision = 0
        """Bumped when the queues are replaced (a job engine schedules again and re-checks admission)."""

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

    def replace_queues(self, queues: list[QueueSpec]) -> None:
        """New queue definitions (limits, guarantees, weights); what is charged stays charged and is counted
        again against the new queues."""
        charged = dict(self._charged)
        revision = self.revision
        self.__init__(queues)  # type: ignore[misc]
        self.revision = revision + 1
        for key, (queue, charge) in charged.items():
            self.charge(key, queue, charge)

    def charge(self, pod_key: str, queue: str, charge: Mapping[str, float]) -> None:
        if pod_key in self._charged:
            return
        self._charged[pod_key] = (queue, dict(charge))
        for q in self.chain(queue):
            for r, v in charge.items():
                self.used[q][r] = self.used[q].get(r, 0.0) + v

    def refund_all(self) -> None:
        """Give back every charge (the queues and their limits stay): whoever made them is gone, e.g. a
        control-plane replica that lost the lease rebuilds its jobs from the cluster and charges them again."""
        self._charged.clear()
        self.used = {n: dict.fromkeys(RESOURCES, 0.0) for n in self.queues}

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
        blocked = None if _admitted(pod) else self.tree.blocked_by(pod.charged_tenant, charge)
        if blocked is not None:
            return Status.unschedulable(NAME, Reason.QuotaExceeded.name, f"queue limit {blocked}")
        state.write(NAME, charge)
        return Status.success()

    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        charge = state.get(NAME)
        if charge is not None:
            if state.grants:
                charge = grant_charge(state.grants, snap, node, charge)
            if not _admitted(pod) and self.tree.blocked_by(pod.charged_tenant, charge) is not None:
                return Status.unschedulable(NAME, Reason.QuotaExceeded.name)
            self.tree.charge(pod.key, pod.charged_tenant, charge)
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        self.tree.refund(pod.key)


def _admitted(pod: Pod) -> bool:
    return pod.annotations.get(QUOTA_ADMITTED_ANNOTATION) == "true"


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
