"""What the job engine reads of the cluster's capacity, in one object.

:class:`CapacityView` owns no figure: :class:`~gpucluster.model.ClusterState` keeps every capacity fact itself
(:mod:`gpucluster.model.capacity`), and this view reads them for the engine's questions: usable GPUs, CPU and
memory (the free-GPU pre-check, fair-share denominators), whole tasks the idle devices hold, whether a job can
ever fit (cached per shape under the state's layout, its nodes' labels and the quota tree's revision), the
change stamp the engine compares to know that the cluster moved, what is free for the preemption planners and
what each node offers in a Mesos-style round. Its caches key on the state's change stamp; nobody tells it that
something changed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpucluster.jobs.admission import never_fits
from gpucluster.jobs.model import JobSpec
from gpucluster.jobs.preemption import Free
from gpucluster.model import ClusterState
from gpucluster.model.capacity import state_stamp
from gpucluster.scheduler.feasibility import Infeasible
from gpucluster.scheduler.plugins.quota import QuotaTree

MAX_NEVER_CACHED = 4096
"""The most job shapes :meth:`CapacityView.never_fits` keeps answers for (it starts again past it)."""


class CapacityView:
    """The cluster's capacity as the engine reads it, over the state ``state()`` returns (the placer's current
    one: a Kubernetes runtime rebuilds its state) and the quota tree (whose revision counts as a change)."""

    __slots__ = ("_never", "_never_stamp", "_slots", "_slots_stamp", "_state", "quota")

    def __init__(self, state: Callable[[], ClusterState], quota: QuotaTree | None = None) -> None:
        self._state = state
        self.quota = quota
        self._slots_stamp: tuple[Any, ...] = ()
        self._slots: dict[int, int] = {}
        """Task size -> whole tasks of that size the idle devices hold (cached per state stamp)."""
        self._never: dict[tuple[Any, ...], Infeasible | None] = {}
        """(shape, tasks, tenant, with the quota tree or not) -> why such a job can never fit (None = it can), for
        the state and quota tree of ``_never_stamp`` (emptied when that moves, so a long-running control plane
        whose nodes come and go keeps one generation of answers, not every one it ever gave)."""
        self._never_stamp: tuple[Any, ...] = ()

    @property
    def state(self) -> ClusterState:
        return self._state()

    @property
    def gpus(self) -> int:
        """Usable GPUs (healthy, on schedulable nodes)."""
        return self._state().capacity.devices

    @property
    def cpu_milli(self) -> int:
        """CPU of the schedulable nodes."""
        return self._state().capacity.cpu_milli

    @property
    def memory_mib(self) -> int:
        """Host memory of the schedulable nodes."""
        return self._state().capacity.memory_mib

    def stamp(self) -> tuple[Any, ...]:
        """The change stamp of the cluster and the quota tree: it moves whenever a node changes (a placement, a
        cordon, a failure, an informer update) or the tree gets new limits."""
        s = self._state()
        return s.layout, s.generation, self.quota.revision if self.quota is not None else 0

    def slots_for(self, task_gpus: int) -> int:
        """Whole tasks of ``task_gpus`` devices the idle devices can hold (cached per state stamp)."""
        s = self._state()
        stamp = state_stamp(s)
        if self._slots_stamp != stamp:
            self._slots.clear()
            self._slots_stamp = stamp
        n = self._slots.get(task_gpus)
        if n is None:
            n = self._slots[task_gpus] = int((s.node_idle // max(task_gpus, 1)).sum())
        return n

    def never_fits(self, spec: JobSpec, quota: bool = True) -> Infeasible | None:
        """Why ``spec`` could never run here, even on the empty cluster, or (with ``quota``) beyond its tenant's
        quota (None when it could). Cached per shape and tenant under the state's layout (which nodes exist), its
        nodes' labels (a node selector no node matched may match a relabelled one) and the quota tree's
        revision."""
        state = self._state()
        tree = self.quota if quota else None
        stamp = (state.layout, state.labels_generation, self.quota.revision if self.quota is not None else -1)
        if stamp != self._never_stamp or len(self._never) >= MAX_NEVER_CACHED:
            self._never.clear()
            self._never_stamp = stamp
        key = (spec.shape, spec.task_gpus, spec.cpu_milli, spec.memory_mib, spec.num_tasks, spec.tenant,
               tree is not None)
        if key in self._never:
            return self._never[key]
        found = self._never[key] = never_fits(spec, state, tree)
        return found

    def free(self, gpus: float) -> Free:
        """What the preemption planners see as free: ``gpus`` (the GPU share no running job holds) and the
        idle devices per node."""
        s = self._state()
        return Free(gpus, s.node_idle, s.node_index)

    def offers(self) -> dict[str, dict[str, float]]:
        """What each node with a free GPU share reports in a Mesos-style round: ``gpu`` (free compute of its
        usable devices, in GPUs), ``whole`` (idle devices), ``cpu`` and ``mem``."""
        s = self._state()
        share = np.where(s.dev_usable, np.maximum(s.dev_core_free, 0), 0).sum(axis=1) / 1000.0
        whole = s.node_idle
        cpu = s.cpu_free
        mem = s.mem_free
        return {s.nodes[i].name: {"gpu": float(share[i]), "whole": float(whole[i]), "cpu": float(cpu[i]),
                                  "mem": float(mem[i])}
                for i in np.flatnonzero(share > 0).tolist()}

    def totals(self) -> dict[str, float]:
        """The cluster's usable capacity in the offers' resource names (DRF divides by it)."""
        return {"gpu": float(self.gpus), "cpu": float(self.cpu_milli), "mem": float(self.memory_mib)}
