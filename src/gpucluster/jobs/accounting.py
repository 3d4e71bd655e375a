"""Tenant and fair-share accounting of the job engine.

:class:`TenantLedger` keeps what the running jobs hold (GPU share, CPU, memory) per tenant and in all (the busy
GPU count), and answers the fair-share questions the queue policies, reclaim and the offers round ask: a
tenant's dominant share of the usable cluster divided by its weight (DRF), its standing against a quota tree's
guarantee, and what each tenant uses and weighs in a Mesos-style round. The engine tells it when a job starts
(:meth:`hold`) and stops (:meth:`give_back`); the denominators come from the :class:`CapacityView`, so a
cordon or a failure moves every share at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from gpucluster.jobs.capacity import CapacityView
from gpucluster.jobs.model import JobSpec
from gpucluster.scheduler.plugins.quota import QuotaTree

_NO_CACHE: dict[str, float] = {}
"""Sentinel: tenant shares are not cached (outside ``fixed_shares``)."""


@dataclass(slots=True)
class TenantUse:
    """What one tenant's running jobs hold."""

    gpus: float = 0.0
    cpu_milli: int = 0
    memory_mib: int = 0


class TenantLedger:
    """Per-tenant usage of the running jobs and the fair shares computed from it (see the module docstring)."""

    __slots__ = ("_share_cache", "busy", "capacity", "outside", "quota", "tenants", "weights")

    def __init__(self, capacity: CapacityView, quota: QuotaTree | None = None,
                 weights: Mapping[str, float] | None = None) -> None:
        self.capacity = capacity
        self.quota = quota
        self.weights: dict[str, float] = dict(weights or {})
        """DRF weights of tenants without a queue in the quota tree (default 1)."""
        self.busy = 0.0
        """GPU share the running jobs hold."""
        self.tenants: dict[str, TenantUse] = {}
        self.outside: dict[str, float] = {}
        """Tenant -> GPU-equivalents it holds outside the engine's jobs (part of ``tenants``' use too)."""
        self._share_cache: dict[str, float] = _NO_CACHE

    # ------------------------------------------------------------------ bookkeeping
    def hold(self, spec: JobSpec) -> None:
        """A job of ``spec`` started: its tenant holds its resources."""
        self.busy += spec.gpu_share
        use = self.tenants.setdefault(spec.tenant, TenantUse())
        use.gpus += spec.gpu_share
        use.cpu_milli += spec.cpu_milli
        use.memory_mib += spec.memory_mib

    def hold_outside(self, tenant: str, gpus: float) -> None:
        """The tenant holds ``gpus`` (GPU-equivalents) outside the engine's jobs (devices another scheduler
        allocated for the tenant's pods; negative: gives them back): counted in its fair share, not in
        :attr:`busy` (the engine's own jobs)."""
        use = self.tenants.setdefault(tenant, TenantUse())
        use.gpus += gpus
        self.outside[tenant] = self.outside.get(tenant, 0.0) + gpus
        if abs(self.outside[tenant]) < 1e-9:
            del self.outside[tenant]

    def give_back(self, spec: JobSpec) -> None:
        """A running job of ``spec`` stopped: its tenant holds its resources no more."""
        self.busy -= spec.gpu_share
        use = self.tenants[spec.tenant]
        use.gpus -= spec.gpu_share
        use.cpu_milli -= spec.cpu_milli
        use.memory_mib -= spec.memory_mib

    # ------------------------------------------------------------------ fair shares
    @contextlib.contextmanager
    def fixed_shares(self) -> Iterator[None]:
        """Inside the block each tenant's share is computed once (a view of the queue order keys many jobs by the
        same shares; nothing starts or stops meanwhile)."""
        self._share_cache = {}
        try:
            yield
        finally:
            self._share_cache = _NO_CACHE

    def share(self, tenant: str) -> float:
        """The tenant's dominant share of the usable cluster (GPUs, CPU, memory), divided by its weight."""
        cached = self._share_cache.get(tenant)
        if cached is not None:
            return cached
        use = self.tenants.get(tenant)
        if use is None:
            return 0.0
        cap = self.capacity
        share = max(use.gpus / max(cap.gpus, 1), use.cpu_milli / max(cap.cpu_milli, 1),
                    use.memory_mib / max(cap.memory_mib, 1))
        share /= self.weights.get(tenant, 1.0)
        if self._share_cache is not _NO_CACHE:
            self._share_cache[tenant] = share
        return share

    def standing(self, tenant: str) -> tuple[float, float]:
        """(0 while the tenant's queue is below its guarantee, else 1; its GPUs beyond the guarantee as a share
        of the usable GPUs, divided by its over-quota weight). Without a queue: ``(1, share)``."""
        tree = self.quota
        if tree is not None and tenant in tree.queues:
            q = tree.queues[tenant]
            used = tree.used[tenant]["gpu"]
            return (0.0 if used < q.guarantee else 1.0,
                    max(used - q.guarantee, 0.0) / max(self.capacity.gpus, 1) / q.weight)
        return (1.0, self.share(tenant))

    # ------------------------------------------------------------------ reads
    def usage(self) -> dict[str, dict[str, float]]:
        """Tenant -> {"gpus", "cpu_milli", "memory_mib"} its running jobs hold."""
        return {k: {"gpus": v.gpus, "cpu_milli": v.cpu_milli, "memory_mib": v.memory_mib}
                for k, v in self.tenants.items()}

    def gpus_by_tenant(self) -> dict[str, float]:
        """Tenant -> GPU share its running jobs hold (what reclaim weighs)."""
        return {t: u.gpus for t, u in self.tenants.items()}

    def offer_usage(self) -> dict[str, dict[str, float]]:
        """Tenant -> what it runs in the offers' resource names (DRF counts it)."""
        return {t: {"gpu": u.gpus, "cpu": float(u.cpu_milli), "mem": float(u.memory_mib)}
                for t, u in self.tenants.items()}

    def offer_weights(self) -> dict[str, float]:
        """Tenant -> its DRF weight in an offers round (a quota tree's queue weight overrides ``weights``)."""
        weights = dict(self.weights)
        if self.quota is not None:
            weights.update({q: spec.weight for q, spec in self.quota.queues.items()})
        return weights
