"""Preemption and reclaim as pure planners: ``plan(running, claimant, free) -> victims``.

A planner reads the running jobs, the job that wants to start and what is free, and returns the jobs to stop
(in order), or an empty list when stopping jobs cannot make the claimant fit by count. It changes nothing:
the engine stops the victims, starts the claimant, and restarts the victims at once if the claimant still does
not fit (fragmentation the count could not see).

* :func:`plan_preemption` (preemptive queue policies): running jobs whose policy rank is strictly worse than
  the claimant's and that have run at least the policy's lease; lowest priority class first, inside it the
  smallest jobs (they free no more than needed), latest first; of those taken until the claimant fits, the
  ones it does not need after all are spared.
* :func:`plan_reclaim` (policies with ``reclaim`` and a :class:`QuotaTree` with guarantees): a claimant whose
  queue stays within its guaranteed GPUs once it runs (at every level of the hierarchy below what it shares
  with the victim) takes jobs of queues above their guarantee: the queue most over it per over-quota weight
  first, latest started first, never taking a queue (or an ancestor not shared with the claimant) below its
  guarantee.

Jobs submitted with ``preemptible: false`` are never victims.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpucluster.jobs.model import Job, JobSpec
from gpucluster.jobs.policies import Key
from gpucluster.scheduler.plugins.quota import QuotaTree


@dataclass(frozen=True, slots=True)
class Running:
    """The running jobs as a planner sees them."""

    jobs: Mapping[str, Job]
    keys: Mapping[str, Key]
    """Running job id -> its current policy key."""
    ranks: Mapping[str, Key]
    """Running job id -> the part of its key preemption compares."""
    oldest: float
    """Only jobs whose run started at or before this time may be stopped (the policy's lease)."""


@dataclass(frozen=True, slots=True)
class Free:
    """What is free now."""

    gpus: float
    """GPU share not held by running jobs."""
    per_node: np.ndarray[Any, np.dtype[np.int64]]
    """Whole free devices per node index."""
    node_index: Mapping[str, int]


def fits_after(claimant: JobSpec, free: Free, victims: Iterable[Job]) -> list[Job]:
    """Take ``victims`` in order until the claimant's tasks fit by count (whole free devices per node for
    whole-GPU tasks), then reprieve every one taken before the last that the claimant fits without (the later
    ones first, as kube-scheduler reprieves): the victims still needed, in order, or ``[]`` when even all of
    them are not enough. (A small job taken first whose node cannot hold a task is not stopped for nothing
    when a larger one had to go anyway.)"""
    node_free = free.per_node.copy()

    def fits() -> bool:
        return not claimant.whole or int((node_free // claimant.task_gpus).sum()) >= claimant.num_tasks

    def give(victim: Job, sign: int) -> None:
        for name in victim.nodes:
            node_free[free.node_index[name]] += sign * victim.spec.task_gpus

    chosen: list[Job] = []
    for victim in victims:
        chosen.append(victim)
        give(victim, 1)
        if fits():
            break
    else:
        return []
    spared: set[str] = set()
    for victim in reversed(chosen[:-1]):
        give(victim, -1)
        if fits():
            spared.add(victim.job_id)
        else:
            give(victim, 1)
    return [v for v in chosen if v.job_id not in spared]


def plan_preemption(running: Running, claimant: Job, rank: Key, free: Free) -> list[Job]:
    """Victims for ``claimant`` (policy rank ``rank``) among jobs of a worse rank (see the module docstring)."""
    jobs, ranks = running.jobs, running.ranks
    order = sorted(((ranks[jid], -jobs[jid].spec.num_gpus, k, jid) for jid, k in running.keys.items()
                    if ranks[jid] > rank and jobs[jid].run_start_s <= running.oldest
                    and jobs[jid].spec.preemptible), reverse=True)
    if free.gpus + sum(jobs[v[-1]].spec.gpu_share for v in order) < claimant.spec.gpu_share:
        return []
    return fits_after(claimant.spec, free, (jobs[v[-1]] for v in order))


def plan_reclaim(running: Running, claimant: Job, free: Free, tree: QuotaTree,
                 tenant_gpus: Mapping[str, float]) -> list[Job]:
    """Victims that give the claimant's queue back its guarantee (see the module docstring);
    ``tenant_gpus``: GPUs each tenant runs now (for tenants without a queue)."""
    spec = claimant.spec
    need = spec.gpu_share
    mine = tree.chain(spec.tenant)
    if not mine:
        return []  # a tenant without a queue has no guarantee to claim
    used = tree.used
    guarantee = {q: tree.queues[q].guarantee for q in tree.queues}
    if used[mine[0]]["gpu"] + need > guarantee[mine[0]] + 1e-9:
        return []
    by_tenant: dict[str, list[Job]] = {}
    for jid in running.keys:
        victim = running.jobs[jid]
        if victim.spec.tenant != spec.tenant and victim.run_start_s <= running.oldest and victim.spec.preemptible:
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
        return []
    taken: dict[str, float] = {}

    def over(tenant: str) -> float:
        """GPUs the tenant's queue runs beyond its guarantee (after what is taken), per weight."""
        qs = levels[tenant]
        if not qs:
            return tenant_gpus.get(tenant, 0.0) - taken.get(tenant, 0.0)
        q = qs[0]
        return (used[q]["gpu"] - taken.get(q, 0.0) - guarantee[q]) / tree.queues[q].weight

    def victims() -> Iterator[Job]:
        while by_tenant:
            tenant = max(by_tenant, key=lambda t: (over(t), t))
            pool = by_tenant[tenant]
            pick = None
            for k in range(len(pool) - 1, -1, -1):
                share = pool[k].spec.gpu_share
                if all(used[q]["gpu"] - taken.get(q, 0.0) - share >= guarantee[q] - 1e-9 for q in levels[tenant]):
                    pick = pool.pop(k)
                    break
            if pick is None or not pool:
                del by_tenant[tenant]
            if pick is not None:
                for q in levels[tenant] or (tenant,):
                    taken[q] = taken.get(q, 0.0) + pick.spec.gpu_share
                yield pick

    return fits_after(spec, free, victims())
