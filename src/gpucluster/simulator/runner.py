"""The job simulator: the job engine (:class:`gpucluster.jobs.JobEngine`) on a simulated cluster, with the
network model (a spread-out job runs slower), faults (node and device failures, repairs, nodes added and
removed) and the run's metrics. What it measures is what the control plane runs: ``gpucluster up`` drives this
same class on the wall clock.

:class:`Simulation` is the API the CLI, the benchmarks and the control plane use::

    sim = Simulation(load_cluster(None), queue_policy="default")
    sim.submit(JobSpec("j1", submit_s=0, num_gpus=8, duration_s=3600))
    sim.run_until(600.0)          # step the clock; events up to t=600 have run
    sim.job("j1").state           # JobState.RUNNING
    sim.cancel("j1"); sim.fail_node("train-0003", repair_after_s=1800)
    sim.run()                     # until nothing is left to happen
    sim.summary()                 # the metrics dict (see :mod:`gpucluster.simulator.metrics`)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from gpucluster.jobs import (
    EngineOptions,
    GpuSpeeds,
    Job,
    JobEvent,
    JobSpec,
    Kernel,
    QueuePolicy,
    SchedulerPlacer,
    SeriesPoint,
    Timer,
    Totals,
    engine_recipe,
    jobs_profile,
    no_slowdown,
)
from gpucluster.model import ClusterState, NodeSpec, TopologyLevel
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.framework import Handle, Profile
from gpucluster.scheduler.plugins.quota import QuotaTree
from gpucluster.simulator.metrics import summarize
from gpucluster.simulator.network import NetworkModel
from gpucluster.spec import Cluster

__all__ = ["JobEvent", "SeriesPoint", "Simulation", "Totals", "jobs_profile"]


class Simulation:
    """A cluster, a queue policy and the jobs given to it, driven by the engine's event kernel.

    ``queue_policy`` orders the queue (``gpucluster.jobs.POLICIES``, or a ready :class:`QueuePolicy`);
    ``placement_policy`` names the placement policy (``gpucluster.scheduler.PROFILES``; None: the queue policy's own,
    see :func:`gpucluster.jobs.job_profile`); ``profile`` overrides it with a ready profile. ``services``: a
    ``QuotaTree`` as ``quota`` (limits through the ``Quota`` plugin, guarantees for DRF and reclaim) and a
    ``DataCatalog`` as ``datasets``. ``network=None`` is the fabric's :class:`NetworkModel`; ``slowdown=False``
    runs every job without the network model's slowdown (the control plane's jobs say how long they run). Either
way a job's GPU speed applies (:attr:`speeds`): its ``duration_s`` is work in seconds on its ``ref_gpu``, and a
job without one runs the same on every GPU model.
    """

    def __init__(
        self,
        cluster: Cluster | ClusterState,
        queue_policy: str | QueuePolicy = "default",
        *,
        seed: int = 0,
        network: NetworkModel | None = None,
        record_series: bool = True,
        restart_overhead_s: float = 0.0,
        profile: Profile | None = None,
        services: dict[str, Any] | None = None,
        tenant_weights: dict[str, float] | None = None,
        locality_delay_s: float = 0.0,
        placement_policy: str | None = None,
        slowdown: bool = True,
        describe: bool = False,
        start_t: float = 0.0,
        quota_waits: bool = False,
        pass_budget_s: float = math.inf,
    ) -> None:
        self.state = cluster.state() if isinstance(cluster, Cluster) else cluster
        self.network = network or NetworkModel(self.state.fabric)
        self.speeds = GpuSpeeds(self.state)
        """Job speeds on this cluster's GPU models (a job's work is seconds on its ``ref_gpu``)."""
        handle = Handle(rng=np.random.default_rng(seed), services={"gpu_speeds": self.speeds, **(services or {})})
        quota = handle.services.get("quota")
        if quota is not None and not isinstance(quota, QuotaTree):
            raise TypeError("services['quota'] must be a QuotaTree")
        self.recipe = engine_recipe(
            queue_policy, placement_policy, seed=seed, quota=quota, profile=profile,
            options=EngineOptions(restart_overhead_s=restart_overhead_s, tenant_weights=dict(tenant_weights or {}),
                                  locality_delay_s=locality_delay_s, record_series=record_series,
                                  describe=describe, quota_waits=quota_waits,
                                  pass_budget_s=pass_budget_s))
        """How the engine is made (:func:`gpucluster.jobs.engine_recipe`: the same for every backend)."""
        self.queue_policy = self.recipe.queue_policy
        self.placement_in_use = self.recipe.placement_in_use
        """The placement policy's name (``default`` resolved; ``custom`` for a given profile)."""
        kernel: Kernel[Timer] = Kernel(start_t)
        self.scheduler = Scheduler(self.state, self.recipe.profile, clock=lambda: kernel.now, handle=handle,
                                   assume_ttl=float("inf"))
        self._down: set[str] = set()
        self._levels: dict[str, Any] = {}
        self.engine = self.recipe.build(
            SchedulerPlacer(self.scheduler), kernel=kernel, catalog=handle.services.get("datasets"),
            slowdown=self.speeds.wrap(self._slowdown if slowdown else no_slowdown))
        self.speeds.jobs = self.engine.jobs
        self.speeds.waiting_gpus = self.engine.views.queued_gpus
        self.speeds.waiting_task = self.engine.views.largest_whole_task
        self.speeds.clock = lambda: kernel.now
        self.speeds.waiting_whole = self.engine.views.whole_jobs
        pol = self.engine.policy
        self.speeds.head_of_line = not (pol.backfill or pol.preemptive or pol.reclaim or pol.via_offers
                                        or quota is not None)

    # ================================================================================ the engine's API
    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def kernel(self) -> Kernel[Timer]:
        return self.engine.kernel

    @property
    def jobs(self) -> dict[str, Job]:
        return self.engine.jobs

    @property
    def listeners(self) -> list[Callable[[JobEvent], None]]:
        return self.engine.listeners

    @property
    def series(self) -> list[SeriesPoint]:
        return self.engine.series

    @property
    def totals(self) -> Totals:
        return self.engine.totals

    @property
    def tenant_weights(self) -> dict[str, float]:
        return self.engine.ledger.weights

    @property
    def busy_gpus(self) -> float:
        return self.engine.ledger.busy

    @property
    def usable_gpus(self) -> int:
        return self.engine.capacity.gpus

    def job(self, job_id: str) -> Job:
        return self.engine.job(job_id)

    def submit(self, spec: JobSpec | Job) -> Job:
        """Add a job; it arrives at ``max(spec.submit_s, now)``. Raises ``ValueError`` on a duplicate id or bad
        speed fields (``ref_gpu``, ``work_class``, ``speedup``)."""
        record = spec if isinstance(spec, JobSpec) else spec.spec
        self.speeds.check(record)
        job = self.engine.submit(spec)
        self.speeds.note(record)
        return job

    def submit_many(self, specs: Iterable[JobSpec]) -> None:
        for spec in specs:
            self.submit(spec)

    def cancel(self, job_id: str, why: str = "cancelled by request") -> bool:
        """Cancel a job wherever it is; False if it had already ended."""
        return self.engine.cancel(job_id, why)

    def run_until(self, t: float) -> None:
        """Run every event up to time ``t`` and leave the clock at ``t`` (or at the last event for inf)."""
        self.engine.run_until(t)

    def run(self) -> None:
        """Run until no event is left."""
        self.engine.run()

    def at(self, t: float, fn: Callable[[], None]) -> None:
        """Call ``fn`` at simulated time ``t`` (faults and scripted changes use this)."""
        self.engine.at(t, fn)

    def tenant_share(self, tenant: str) -> float:
        return self.engine.tenant_share(tenant)

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        return self.engine.tenant_standing(tenant)

    def tenant_usage(self) -> dict[str, dict[str, float]]:
        return self.engine.ledger.usage()

    def queued(self) -> list[Job]:
        """Queued jobs in the policy's order."""
        return self.engine.views.queued()

    def running(self) -> list[Job]:
        return self.engine.views.running()

    def counts(self) -> dict[str, int]:
        return self.engine.views.counts()

    def summary(self) -> dict[str, Any]:
        return summarize(self)

    def placement_report(self, jobs: Iterable[Job] | None = None) -> dict[str, Any]:
        """``placement_in_use`` (the placement policy's name) and, on a cluster of several GPU models,
        ``training_share_by_model``: the share of the training work (``jobs``; default all) that ran on each."""
        out: dict[str, Any] = {"placement_in_use": self.placement_in_use}
        share = self.speeds.training_share(self.engine.jobs.values() if jobs is None else jobs)
        if share:
            out["training_share_by_model"] = share
        return out

    # ================================================================================ faults
    def _node_event(self, kind: str, node: str, detail: str = "") -> None:
        self.engine.emit(JobEvent("", self.now, kind, None, detail, node))

    def fail_node(self, name: str, repair_after_s: float | None = None) -> list[str]:
        """The node goes down now: its jobs are evicted (restart from their checkpoint) and it takes no
        work until :meth:`repair_node`. Returns the evicted job ids."""
        i = self.state.node_index[name]
        evicted = self.engine.evict_on(i, lambda alloc: True, "node_down:" + name)
        if name not in self._down:
            self._down.add(name)
            self.state.set_schedulable(name, False)
            self._node_event("node_down", name)
        if repair_after_s is not None:
            self.at(self.now + repair_after_s, lambda: self.repair_node(name))
        return evicted

    def repair_node(self, name: str) -> None:
        if name in self._down and self.state.present[self.state.node_index[name]]:
            self._down.discard(name)
            self.state.set_schedulable(name, True)
            for j in range(int(self.state.dev_count[self.state.node_index[name]])):
                self.state.set_device_health(name, j, True)
            self._node_event("node_up", name)

    def fail_device(self, name: str, device_index: int, repair_after_s: float | None = None) -> list[str]:
        """One device goes bad (e.g. XID 79): jobs using it are evicted; the rest of the node keeps working."""
        i = self.state.node_index[name]
        evicted = self.engine.evict_on(
            i, lambda alloc: any(g.device_index == device_index for g in alloc.grants), f"device_down:{name}"
        )
        self.state.set_device_health(name, device_index, False)
        self._node_event("device_down", name, str(device_index))
        if repair_after_s is not None:
            def repair() -> None:
                self.state.set_device_health(name, device_index, True)
            self.at(self.now + repair_after_s, repair)
        return evicted

    def add_node(self, node: NodeSpec) -> None:
        self.state.add_node(node)
        self._node_event("node_added", node.name)

    def remove_node(self, name: str) -> list[str]:
        i = self.state.node_index[name]
        evicted = self.engine.evict_on(i, lambda alloc: True, "node_removed:" + name)
        self.state.remove_node(name)
        self._down.discard(name)
        self._node_event("node_removed", name)
        return evicted

    # ================================================================================ the network model
    def _slowdown(self, job: Job, devices: list[tuple[int, int]]) -> tuple[float, float | None]:
        """The network model's factor for a job on these devices, and the placement's topology level."""
        spec = job.spec
        level = self._level(devices)
        return self.network.slowdown(spec.model, spec.num_gpus, level, self._ideal_level(spec.num_gpus)), float(level)

    def _level(self, devices: list[tuple[int, int]]) -> TopologyLevel:
        s = self.state
        node_ids = {n for n, _ in devices}
        if len(node_ids) == 1:
            links = {int(s.dev_nvlink[n, j]) for n, j in devices}
            return TopologyLevel.NVLINK if len(links) == 1 and min(links) >= 0 else TopologyLevel.NODE
        if len({int(s.leaf_id[n]) for n in node_ids}) == 1:
            return TopologyLevel.LEAF
        if len({int(s.spine_id[n]) for n in node_ids}) == 1:
            return TopologyLevel.SPINE
        return TopologyLevel.CORE

    def _ideal_level(self, gpus: int) -> TopologyLevel:
        cache = self._levels
        if cache.get("layout") != self.state.layout:  # valid while the same nodes exist
            cache.clear()
            cache["layout"] = self.state.layout
            s = self.state
            dom = 1
            for i in range(s.n_nodes):
                links = s.dev_nvlink[i][s.dev_valid[i]]
                if links.size:
                    vals, counts = np.unique(links[links >= 0], return_counts=True)
                    if vals.size:
                        dom = max(dom, int(counts.max()))
            per_node = s.dev_valid.sum(axis=1)
            cache["domain"] = dom
            cache["leaf"] = float(np.bincount(s.leaf_id, weights=per_node).max())
            cache["spine"] = float(np.bincount(s.spine_id, weights=per_node).max())
        if gpus <= cache["domain"]:
            return TopologyLevel.NVLINK
        if gpus <= cache["leaf"]:
            return TopologyLevel.LEAF
        if gpus <= cache["spine"]:
            return TopologyLevel.SPINE
        return TopologyLevel.CORE
