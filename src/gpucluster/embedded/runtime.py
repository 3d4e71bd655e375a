"""The embedded runtime: the job simulator (:class:`gpucluster.simulator.Simulation`, i.e. the one job engine)
driven by the wall clock, plus what only a live demo cluster has.

What it adds to the simulation: the clock comes from :meth:`advance` (the service calls it every tick); a light
synthetic background workload (``embedded.workload``, tenant ``synthetic``) keeps the cluster busy; random device
faults (XID 79) go into ``gpucluster.monitoring``'s simulated collector, its rules fire and its remediator acts
through :class:`EmbeddedTarget` (drain = evict the node's jobs back to the queue, release = cancel the job,
defragmentation = move a pod); the simulated technician repairs a faulted GPU :data:`REPAIR_AFTER_S` later.
Queue order, quota (a ``QuotaTree`` fed by :meth:`set_quotas`), gang placement and preemption are the engine's,
exactly as ``gpucluster simulate`` measures them, GPU speed included: a job with a ``ref_gpu`` runs its
``duration_s`` of work at the speed model's speed on the GPUs it got (``gpu_speed`` in its view), one without runs
``duration_s`` wherever it lands; no network slowdown. Single-threaded by contract.
"""

from __future__ import annotations

import contextlib
import math
import random
from collections import deque
from collections.abc import Generator
from dataclasses import replace
from typing import Any, TypeVar

import numpy as np

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.embedded.monitor import ClusterMonitor
from gpucluster.embedded.workload import Arrival, SyntheticWorkload
from gpucluster.jobs import (
    CONTROL_PLANE_PASS_BUDGET_S,
    DEFAULT_QUEUE_POLICY,
    EngineFront,
    Job,
    JobEvent,
    JobState,
    job_spec,
    restored_submission,
)
from gpucluster.model import ClusterState, views
from gpucluster.model.capacity import state_stamp
from gpucluster.model.labels import ACTIVITY_ANNOTATION, JOB_LABEL
from gpucluster.monitoring import AuditRecord, DrainResult, QueueStats, RemediationPolicy, SimTarget
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY
from gpucluster.scheduler.plugins.quota import QuotaTree
from gpucluster.simulator import Simulation
from gpucluster.spec import Cluster

KEEP_FINISHED_SYNTHETIC = 300
REPAIR_AFTER_S = 600.0
"""Clock seconds until a faulted GPU is reset (the simulated technician), its XID cleared and the node back."""
DRILL_XID = 79
SYNTHETIC_TENANT = "synthetic"


def embedded_simulation(cluster: Cluster, queue_policy: str = DEFAULT_QUEUE_POLICY,
                        placement_policy: str = DEFAULT_PLACEMENT_POLICY, seed: int = 0, start_t: float = 0.0,
                        describe: bool = True) -> Simulation:
    """The simulation an :class:`EmbeddedRuntime` drives: a quota tree (empty until tenants get quotas), no
    network slowdown, no series. ``gpucluster simulate`` builds the same with ``describe=False``."""
    return Simulation(cluster, queue_policy, seed=seed, placement_policy=placement_policy, slowdown=False,
                      describe=describe, record_series=False, services={"quota": QuotaTree([])}, start_t=start_t,
                      quota_waits=describe, pass_budget_s=CONTROL_PLANE_PASS_BUDGET_S if describe else math.inf)


T = TypeVar("T")


def run_steps(steps: Generator[None, None, T]) -> T:
    """Run a stepped operation (a generator that yields between its steps, such as
    :meth:`EmbeddedRuntime.advance_steps`) to its end, with no pause between the steps; returns its value."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            value: T = done.value
            return value


class EmbeddedRuntime(EngineFront):
    """A :class:`~gpucluster.service.runtime.Runtime` over a simulated cluster (see the module docstring)."""

    def __init__(
        self,
        cluster: Cluster,
        placement_policy: str = DEFAULT_PLACEMENT_POLICY,
        background: float = 0.6,
        fault_rate_per_hour: float = 1.0,
        seed: int = 0,
        start_t: float = 0.0,
        remediation: RemediationPolicy | None = None,
        queue_policy: str = DEFAULT_QUEUE_POLICY,
        devices: DeviceSettings | None = None,
    ) -> None:
        self.cluster = cluster
        self.registry = VendorRegistry.from_settings(devices)
        """How job requests are parsed (``--device-config``; HAMi's defaults without one)."""
        self.placement_policy = placement_policy
        """Placement policy (``gpucluster.scheduler.PROFILES``)."""
        self.queue_policy = queue_policy
        self.sim = embedded_simulation(cluster, queue_policy, placement_policy, seed, start_t)
        self.engine = self.sim.engine
        self.state = self.sim.state
        self.scheduler = self.sim.scheduler
        quota = self.engine.quota
        assert quota is not None
        self.quota = quota
        self.rng = random.Random(seed)
        self._use: dict[str, Any] = {}
        self._use_key: tuple[Any, ...] | None = None
        """:meth:`utilisation` as last computed, and for which (cluster change stamp, monitor scrapes)."""
        self._events: list[JobEvent] = []
        self.engine.listeners.append(self._on_event)
        self._synthetic_done: deque[str] = deque()
        self._synthetic_seq = 0
        self._fault_rate = fault_rate_per_hour / 3600.0
        self._next_fault: float | None = None
        self._repairs: list[tuple[float, str, int]] = []
        self._held: set[str] = set()
        """Nodes an operator cordoned or drained (:meth:`cordon`, :meth:`drain`): they stay out of service until the
        operator uncordons them, whatever repairs a GPU of theirs (remediation's cordons end with the repair)."""
        self.target = EmbeddedTarget(self)
        self.monitor = ClusterMonitor(self.state, self.target, self.queue_stats, clock=lambda: self.now,
                                      policy=remediation, start_t=start_t)
        self._start_history()
        self.workload = SyntheticWorkload(float(self.state.dev_valid.sum()), background, seed)
        for arrival in self.workload.warm_start():
            self._submit_synthetic(arrival, start_t)
        self.sim.run_until(start_t)
        self._events.clear()
        self._sample()

    # ------------------------------------------------------------------ protocol: properties
    @property
    def now(self) -> float:
        return self.sim.now

    @property
    def backend(self) -> str:
        return "embedded"

    @property
    def cluster_label(self) -> str:
        return self.cluster.name

    def reading(self) -> contextlib.AbstractContextManager[ClusterState]:
        return contextlib.nullcontext(self.state)

    # ------------------------------------------------------------------ events
    def _on_event(self, ev: JobEvent) -> None:
        job = self.engine.jobs.get(ev.job_id)
        if job is None or not job.synthetic:
            self._report(ev)
        elif ev.state is not None and ev.state.terminal:
            self._synthetic_done.append(ev.job_id)

    # ------------------------------------------------------------------ jobs
    def submit(self, job: Job) -> Job:
        """Queue a user's job now; its speed fields join the workload mix the ``gavel`` placement compares."""
        out = super().submit(job)
        self.sim.speeds.note(job.spec)
        return out

    def restore(self, job: Job, admitted: bool = False) -> None:
        """Queue a live job recovered from the store (a new record, as :func:`gpucluster.service.store` builds)
        and try it at once: jobs are placed in the order the service restores them (those that ran before the
        restart first, so they get their room back whatever the queue policy would prefer among them).
        ``admitted`` (it ran before the restart): its tenant's quota, lowered since, does not hold it back."""
        job.spec = restored_submission(job.spec, self.now)
        self.engine.submit(job, admitted=admitted)
        self.sim.speeds.note(job.spec)
        job.message = "re-queued after a control-plane restart"
        self.sim.run_until(self.now)

    def _submit_synthetic(self, arrival: Arrival, t: float) -> None:
        self._synthetic_seq += 1
        shape = arrival.shape
        spec = job_spec(f"s-{self._synthetic_seq:06d}", name=shape.name, tenant=SYNTHETIC_TENANT,
                        replicas=shape.replicas, resources=shape.resources, duration_s=arrival.duration_s,
                        submit_s=max(t, self.now), synthetic=True, registry=self.registry)
        if spec.template is not None:  # what it does with its GPUs, read by the simulated collector
            spec = replace(spec, template=replace(spec.template, annotations={
                **spec.template.annotations, ACTIVITY_ANNOTATION: arrival.activity}))
        self.engine.submit(spec)

    # ------------------------------------------------------------------ time
    def advance(self, t: float) -> list[JobEvent]:
        """Move the clock to ``t``: background arrivals, faults and repairs at their times, every job event up
        to ``t`` (finishes, starts, preemptions), then the alert rules and remediation at ``t``."""
        return run_steps(self.advance_steps(t))

    def advance_steps(self, t: float) -> Generator[None, None, list[JobEvent]]:
        """:meth:`advance` in steps: it yields between the scheduling passes and the monitor's evaluation, so a
        control plane gives its event loop back in between (each step leaves the engine idle, as between two
        ticks: a request may submit or cancel there); returns the events."""
        if t < self.now:
            return []
        t0 = self.now
        for arrival in self.workload.arrivals(t0, t):
            self._submit_synthetic(arrival, arrival.t)
        self._plan_faults(t0, t)
        self.sim.run_until(t)
        yield
        self.monitor.advance(t)
        yield
        self.sim.run_until(t)  # what remediation changed is scheduled now
        while len(self._synthetic_done) > KEEP_FINISHED_SYNTHETIC:
            self.engine.forget(self._synthetic_done.popleft())
        self._sample_due()
        return self._take_events()

    def queue_stats(self) -> QueueStats:
        """Pending pods and the wait of the oldest (read by the monitor's control-plane target)."""
        pods, wait = self.engine.views.queue_stats()
        return QueueStats(pending=pods, oldest_wait_s=wait)

    # ------------------------------------------------------------------ faults, alerts, remediation
    def inject_fault(self, node: str, device: int, events: list[JobEvent] | None = None,
                     xid: int = DRILL_XID) -> None:
        """Fault drill: the device reports XID ``xid`` through the simulated collector; its monitor shard is
        evaluated at once, so the alert fires and remediation acts (drains the node on a critical XID) before
        this returns. Events of jobs it touched go to ``events``. The GPU is repaired REPAIR_AFTER_S later."""
        with self._collect(events if events is not None else []):
            self._fault(node, device, xid)
            self.monitor.evaluate_node(node, self.now)

    def _fault(self, node: str, device: int, xid: int) -> None:
        self.monitor.inject_xid(node, device, xid)
        self._repairs.append((self.now + REPAIR_AFTER_S, node, device))
        self.sim.at(self.now + REPAIR_AFTER_S, lambda: self._repair(node, device))

    def _repair(self, node: str, device: int) -> None:
        """The simulated technician: reset the faulted GPU (its XID cleared, healthy again) and put the node back
        in service once none of its GPUs awaits repair."""
        self._repairs.remove(next(r for r in self._repairs if r[1:] == (node, device)))
        self.monitor.clear(node, device)
        self.state.set_device_health(node, device, True)
        waiting = any(n == node for _, n, _ in self._repairs)
        held = node in self._held
        if not waiting:
            if not held:
                self.state.set_schedulable(node, True)
            self.monitor.node_restored(node)  # remediation's reason to keep it out is over either way
        note = f"GPU {device} reset and passed checks; " + (
            "node stays cordoned: another GPU awaits repair" if waiting else
            "node stays cordoned: an operator cordoned it (uncordon puts it back in service)" if held else
            "node back in service")
        self.monitor.record(AuditRecord(self.now, "reset-and-uncordon", f"{node}/gpu{device}", "", note,
                                        dry_run=False, outcome="done", detail={"note": note}))

    def _plan_faults(self, t0: float, t: float) -> None:
        """Random device faults in ``(t0, t]``, each at its own time on the engine's clock."""
        if self._fault_rate <= 0:
            return
        if self._next_fault is None:
            self._next_fault = t0 + self.rng.expovariate(self._fault_rate)
        while self._next_fault <= t:
            self.sim.at(self._next_fault, self._random_fault)
            self._next_fault += self.rng.expovariate(self._fault_rate)

    def _random_fault(self) -> None:
        s = self.state
        present = np.flatnonzero(s.present & s.schedulable & (s.dev_count > 0))
        if present.size:
            i = int(present[self.rng.randrange(present.size)])
            self._fault(s.nodes[i].name, self.rng.randrange(int(s.dev_count[i])), DRILL_XID)

    # ------------------------------------------------------------------ node actions (an operator's)
    def _node_or_raise(self, node: str) -> int:
        i = self.state.node_index.get(node)
        if i is None or not self.state.present[i]:
            raise LookupError(f"no node {node!r}")
        return i

    def cordon(self, node: str) -> bool:
        """No new pods on ``node`` until an operator uncordons it (the repair of a faulted GPU does not put it back
        in service, as it does a node remediation cordoned); False if an operator already cordoned it.
        ``LookupError`` for an unknown node."""
        i = self._node_or_raise(node)
        if node in self._held:
            return False
        self._held.add(node)
        if self.state.schedulable[i]:  # (else remediation cordoned it: now it is the operator's)
            self.target.cordon(node)
        return True

    def held_nodes(self) -> list[str]:
        """The nodes an operator cordoned or drained and has not uncordoned since, sorted (the service stores
        them so a restart keeps them out of service)."""
        return sorted(self._held)

    def uncordon(self, node: str) -> bool:
        """Back in service (also for remediation's count of nodes out); False if it was not cordoned."""
        i = self._node_or_raise(node)
        if self.state.schedulable[i]:
            return False
        self._held.discard(node)
        self.target.uncordon(node)
        self.monitor.node_restored(node)
        return True

    def drain(self, node: str, why: str, events: list[JobEvent]) -> list[str]:
        """Cordon ``node`` and evict every job with a pod on it back to the queue (from its last checkpoint; a
        gang restarts whole, elsewhere), as remediation's drain does; returns the evicted job ids. The job
        events go to ``events``; the queue is tried at once."""
        i = self._node_or_raise(node)
        self._held.add(node)  # cordoned by an operator: it stays out of service until uncordoned
        with self._collect(events):
            self.target.cordon(node)
            jobs = self.engine.evict_on(i, lambda alloc: True, why)
            self.sim.run_until(self.now)
        return jobs

    def take_audit_records(self) -> list[AuditRecord]:
        """Remediation audit records not yet handed out (the service persists them in its audit table)."""
        return self.monitor.take_unsaved()

    # ------------------------------------------------------------------ views (the rest: EngineFront)
    def _sample(self) -> None:
        self._last_sample = self.now
        point = views.sample(self.state, self.now, self.engine.views.queue_length())
        use = self.utilisation()
        for key in ("gpu_utilisation", "gpu_memory_used_fraction", "allocated_idle_gpus"):
            if use[key] is not None:
                point[key] = float(use[key])
        self._history.append(point)

    def utilisation(self) -> dict[str, Any]:
        """The monitor's utilisation figures (:meth:`ClusterMonitor.utilisation`), each idle GPU with its job.
        Computed again only after a shard's scrape or a change of the cluster (its change stamp): a loop over
        every GPU that the overview, recomputed after every submission, paid each time (issue 28)."""
        key = (state_stamp(self.state), self.monitor.scrapes)
        if self._use_key != key:
            def describe(pod: str) -> dict[str, Any]:
                alloc = self.state.allocations.get(pod)
                return self._describe(alloc) if alloc is not None else {}

            self._use = self.monitor.utilisation(describe)
            self._use_key = key
        return dict(self._use)  # the caller may drop keys; the rows are shared, read-only

    def alerts(self) -> list[dict[str, Any]]:
        return self.monitor.alerts()

    def remediations(self) -> list[dict[str, Any]]:
        return self.monitor.remediations()

    def _alerts_firing(self) -> int:
        return self.monitor.firing

    def _placement_report(self) -> dict[str, Any]:
        # the jobs that ran (kept by the engine's tally): a flood of queued jobs costs the overview nothing
        return self.sim.placement_report(j for j in self.engine.jobs.tally.placed.values() if not j.synthetic)

    def _use_figures(self) -> dict[str, Any]:
        use = self.utilisation()
        del use["per_node"]
        return use

    def nodes(self) -> list[dict[str, Any]]:
        """Node rows with what each GPU does beside what it holds: ``dev_util`` (SM utilisation %),
        ``dev_fb_pct`` (framebuffer in use, % of physical) and ``dev_temp`` (°C) as of the last scrape (None
        where a device did not report)."""
        rows = super().nodes()
        per_node = self.utilisation()["per_node"]
        for row in rows:
            devs = per_node.get(row["name"], [])
            row["dev_util"] = [d[0] for d in devs]
            row["dev_fb_pct"] = [d[1] for d in devs]
            row["dev_temp"] = [d[2] for d in devs]
        return rows


class EmbeddedTarget(SimTarget):
    """``monitoring.RemediationTarget`` on the embedded runtime: ``SimTarget``'s cordon, device health,
    migration and fragmentation views on the same ClusterState and Scheduler, with drains and releases that
    keep jobs whole through the engine: a drain cordons the node and evicts every job with a pod on it back to
    the queue (a gang restarts together, elsewhere); a release cancels the pod's job; a migrated pod's job gets
    its new placement."""

    def __init__(self, runtime: EmbeddedRuntime) -> None:
        super().__init__(runtime.scheduler)
        self.runtime = runtime

    def drain(self, node: str) -> DrainResult:
        self.cordon(node)
        engine = self.runtime.engine
        i = self.state.node_index[node]
        jobs = {a.pod.labels.get(JOB_LABEL, "") for a in self.state.allocations_on(node) if a.pod}
        released = [k for j in sorted(jobs) if j in engine.jobs for k in engine.jobs[j].pod_keys]
        engine.evict_on(i, lambda alloc: True, f"{node} drained by automatic remediation")
        return DrainResult(evicted=released, pending=list(released))

    def release(self, pod_key: str) -> bool:
        alloc = self.state.allocations.get(pod_key)
        engine = self.runtime.engine
        jid = alloc.pod.labels.get(JOB_LABEL, "") if alloc is not None and alloc.pod else ""
        job = engine.jobs.get(jid)
        if job is None or job.state != JobState.RUNNING:
            return False
        return engine.cancel(jid, "released by automatic remediation: its GPU sat idle")

    def migrate(self, pod_key: str) -> str | None:
        alloc = self.state.allocations.get(pod_key)
        dest = super().migrate(pod_key)
        if alloc is not None and dest is not None:
            self.runtime.engine.move(pod_key, f"pod {pod_key} moved from {alloc.node} to {dest} (defragmentation)")
        return dest
