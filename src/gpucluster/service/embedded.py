"""The embedded runtime: a simulated cluster (ClusterState + Scheduler) on a clock.

Jobs are gangs of identical pods: all replicas are placed in one pass or none is. Jobs with ``duration_s``
finish on the clock. A light synthetic workload (``service.workload``) and random device faults (XID 79) keep
the dashboard alive. Alerts and remediation are ``gpucluster.monitoring``'s (see ``service.monitor``): faults
are injected into its simulated collector, its rules fire, its remediator drains the node through
:class:`EmbeddedTarget`; the simulated hardware is repaired :data:`REPAIR_AFTER_S` later. Single-threaded by
contract.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.devices import DeviceInputError, DeviceSettings, VendorRegistry
from gpucluster.model import Allocation, Pod, views
from gpucluster.model.share import pods_gpus
from gpucluster.monitoring import AuditRecord, DrainResult, QueueStats, RemediationPolicy, SimTarget
from gpucluster.scheduler import DEFAULT_POLICY, Scheduler, profile_for
from gpucluster.scheduler.feasibility import never_fits
from gpucluster.service.monitor import ClusterMonitor
from gpucluster.service.runtime import Job, JobEvent, JobStatus
from gpucluster.service.workload import SyntheticWorkload
from gpucluster.spec import Cluster

log = logging.getLogger(__name__)

USER_PRIORITY = 10
"""User jobs are tried before the synthetic background workload."""
MAX_TRIES_PER_PASS = 400
HISTORY_POINTS = 240
HISTORY_EVERY_S = 5.0
KEEP_FINISHED_SYNTHETIC = 300
REPAIR_AFTER_S = 600.0
"""Clock seconds until a faulted GPU is reset (the simulated technician), its XID cleared and the node back."""
DRILL_XID = 79


def _job_pod_name(job_id: str, replica: int) -> str:
    return f"{job_id}-{replica}"


class EmbeddedRuntime:
    """A :class:`~gpucluster.service.runtime.Runtime` over an in-memory cluster."""

    def __init__(
        self,
        cluster: Cluster,
        policy: str = DEFAULT_POLICY,
        background: float = 0.6,
        fault_rate_per_hour: float = 1.0,
        seed: int = 0,
        start_t: float = 0.0,
        remediation: RemediationPolicy | None = None,
        devices: DeviceSettings | None = None,
    ) -> None:
        self.cluster = cluster
        self.state = cluster.state()
        self.policy = policy
        self.scheduler = Scheduler(self.state, profile_for(policy, seed), clock=lambda: self._now)
        self.registry = VendorRegistry.from_settings(devices)
        self.rng = random.Random(seed)
        self._now = start_t
        self._jobs: dict[str, Job] = {}
        self._pods: dict[str, list[Pod]] = {}
        self._queue: set[str] = set()
        self._running: set[str] = set()
        self._arrival: dict[str, int] = {}
        self._arrival_seq = 0
        """Job id -> arrival sequence number (FIFO order among equal priorities)."""
        self._ends: list[tuple[float, str]] = []
        self._pod_job: dict[str, str] = {}
        self._quotas: dict[str, float] = {}
        self._synthetic_done: deque[str] = deque()
        self._synthetic_seq = 0
        self._enqueued: dict[str, float] = {}
        """Queued job id -> when it (re-)entered the queue (the queue's oldest-pending gauge)."""
        self._fault_rate = fault_rate_per_hour / 3600.0
        self._next_fault: float | None = None
        self._repairs: list[tuple[float, str, int]] = []
        self.target = EmbeddedTarget(self)
        self.monitor = ClusterMonitor(self.state, self.target, self.queue_stats, clock=lambda: self._now,
                                      policy=remediation, start_t=start_t)
        self._history: deque[dict[str, float]] = deque(maxlen=HISTORY_POINTS)
        self._last_sample = -math.inf
        self._last_message: dict[str, str] = {}
        total_gpus = float(self.state.dev_valid.sum())
        self.workload = SyntheticWorkload(total_gpus, background, seed)
        events: list[JobEvent] = []
        for arrival in self.workload.warm_start():
            self._submit_synthetic(arrival.shape.name, arrival.shape.replicas, arrival.shape.resources,
                                   arrival.duration_s, start_t)
        self._schedule_pass(events)
        self._sample()

    # ------------------------------------------------------------------ protocol: properties
    @property
    def now(self) -> float:
        return self._now

    @property
    def backend(self) -> str:
        return "embedded"

    # ------------------------------------------------------------------ jobs
    def _pods_for(self, job: Job) -> list[Pod]:
        pods = []
        for r in range(job.replicas):
            manifest = {
                "kind": "Pod",
                "metadata": {
                    "name": _job_pod_name(job.id, r),
                    "namespace": job.tenant,
                    "annotations": {"gpucluster.io/tenant": job.tenant},
                },
                "spec": {"priority": job.priority,
                         "containers": [{"name": "main", "resources": {"limits": dict(job.resources)}}]},
            }
            pods.append(self.registry.parse_pod(manifest, "resources"))
        return pods

    def validate(self, job: Job) -> None:
        try:
            pods = self._pods_for(job)
        except DeviceInputError as exc:
            text = str(exc).replace("resources: spec.containers[0].resources.limits: ", "resources: ")
            raise ValueError(text) from None
        if pods and not pods[0].device_requests and pods[0].cpu_milli == 0 and pods[0].memory_mib == 0:
            raise ValueError("resources: asks for nothing (give nvidia.com/gpu, cpu or memory)")
        refused = never_fits(pods, self.state, self._quotas.get(job.tenant), job.tenant)
        if refused is not None:
            raise ValueError(f"{refused.where}: can never run on this cluster: {refused.why}")

    def _add(self, job: Job) -> Job:
        pods = self._pods_for(job)
        job.gpus = pods_gpus(self.state, pods)
        job.status = JobStatus.PENDING
        job.placements = []
        job.started_t = None
        job.finished_t = None
        self._jobs[job.id] = job
        self._pods[job.id] = pods
        self._queue.add(job.id)
        self._enqueued[job.id] = self._now
        if job.id not in self._arrival:
            self._arrival_seq += 1
            self._arrival[job.id] = self._arrival_seq
        return job

    def submit(self, job: Job) -> Job:
        job.submitted_t = self._now
        if not job.synthetic:
            job.priority = max(job.priority, USER_PRIORITY)
        job.message = "waiting to be scheduled"
        return self._add(job)

    def restore(self, job: Job) -> None:
        job.priority = max(job.priority, USER_PRIORITY)
        job.message = "re-queued after a control-plane restart"
        self._add(job)

    def _submit_synthetic(self, shape: str, replicas: int, resources: Mapping[str, Any], duration: float,
                          t: float) -> None:
        self._synthetic_seq += 1
        jid = f"s-{self._synthetic_seq:06d}"
        job = Job(id=jid, name=shape, tenant="synthetic", replicas=replicas, resources=resources,
                  duration_s=duration, submitted_at=0.0, synthetic=True, submitted_t=t)
        self._add(job)

    def _release(self, job: Job) -> None:
        self._running.discard(job.id)
        for pod in self._pods.get(job.id, []):
            if pod.key in self.state.allocations:
                self.scheduler.delete(pod.key)
            self._pod_job.pop(pod.key, None)

    def _finish(self, job: Job, status: JobStatus, t: float, message: str, events: list[JobEvent]) -> None:
        self._release(job)
        self._queue.discard(job.id)
        self._enqueued.pop(job.id, None)
        job.status = status
        job.finished_t = t
        job.message = message
        events.append(JobEvent(job.id, t, status.value, status, message))
        if job.synthetic:
            self._synthetic_done.append(job.id)
            while len(self._synthetic_done) > KEEP_FINISHED_SYNTHETIC:
                old = self._synthetic_done.popleft()
                self._jobs.pop(old, None)
                self._pods.pop(old, None)
                self._arrival.pop(old, None)

    def cancel(self, job_id: str) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        if not job.status.terminal:
            events: list[JobEvent] = []
            self._finish(job, JobStatus.CANCELLED, self._now, "cancelled by request", events)
        return job

    def job(self, job_id: str) -> Job | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[Job]:
        return list(self._jobs.values())

    def set_quotas(self, quotas: Mapping[str, float]) -> None:
        self._quotas = dict(quotas)

    # ------------------------------------------------------------------ time
    def advance(self, t: float) -> list[JobEvent]:
        events: list[JobEvent] = []
        if t < self._now:
            return events
        t0 = self._now
        # jobs finishing on the clock
        while self._ends and self._ends[0][0] <= t:
            end_t, jid = heapq.heappop(self._ends)
            job = self._jobs.get(jid)
            if job is None or job.status != JobStatus.RUNNING or job.started_t is None:
                continue
            if job.duration_s is None or abs(job.started_t + job.duration_s - end_t) > 1e-6:
                continue  # a stale entry (the job was evicted and restarted)
            self._now = max(self._now, end_t)
            self._finish(job, JobStatus.SUCCEEDED, end_t, f"completed after {job.duration_s:g} s", events)
        self._now = t
        for arrival in self.workload.arrivals(t0, t):
            self._submit_synthetic(arrival.shape.name, arrival.shape.replicas, arrival.shape.resources,
                                   arrival.duration_s, arrival.t)
        self._repair(t)
        self._random_faults(t0, t)
        self._run_monitor(events)
        self._schedule_pass(events)
        if t - self._last_sample >= HISTORY_EVERY_S:
            self._sample()
        return events

    def _schedule_pass(self, events: list[JobEvent]) -> None:
        if not self._queue:
            return
        order = sorted(self._queue, key=lambda j: (-self._jobs[j].priority, self._arrival[j]))
        usage = {k: v["gpus"] for k, v in self.usage_by_tenant().items()} if self._quotas else {}
        failed_shapes: set[tuple[int, str]] = set()
        tries = 0
        for jid in order:
            if tries >= MAX_TRIES_PER_PASS:
                break
            job = self._jobs[jid]
            quota = self._quotas.get(job.tenant)
            if quota is not None and usage.get(job.tenant, 0.0) + job.gpus > quota + 1e-9:
                self._note(job, f"waiting for quota: tenant {job.tenant} holds "
                                f"{usage.get(job.tenant, 0.0):g} of {quota:g} GPUs, the job needs {job.gpus:g}",
                           events)
                continue
            shape = (job.replicas, repr(sorted(job.resources.items())))
            if shape in failed_shapes:
                continue
            tries += 1
            try:  # one job's failure is its own: its partial placement is released and the pass goes on
                message = self._try_place(job, quota, usage.get(job.tenant, 0.0), events)
            except Exception as exc:
                log.exception("placing job %s failed", jid)
                self._finish(job, JobStatus.FAILED, self._now, f"placement failed: {type(exc).__name__}: {exc}",
                             events)
                continue
            if message:
                failed_shapes.add(shape)
                self._note(job, f"unschedulable: {message}", events)
            elif job.status == JobStatus.RUNNING:
                usage[job.tenant] = usage.get(job.tenant, 0.0) + job.gpus

    def _try_place(self, job: Job, quota: float | None, used: float, events: list[JobEvent]) -> str:
        """Place every pod of ``job`` and start it; "" when it started or waits for quota (noted), else why
        it does not fit now (nothing of it stays placed either way)."""
        placed: list[str] = []
        for pod in self._pods[job.id]:
            decision = self.scheduler.schedule_and_bind(pod)
            if not decision.ok or decision.allocation is None:
                for key in placed:
                    self.scheduler.delete(key)
                return decision.message()
            placed.append(pod.key)
        held = pods_gpus(self.state, self._pods[job.id])
        if quota is not None and used + held > quota + 1e-9:  # on the devices it got it holds more than estimated
            for key in placed:
                self.scheduler.delete(key)
            self._note(job, f"waiting for quota: tenant {job.tenant} holds {used:g} of {quota:g} GPUs, the job "
                            f"would hold {held:g} on the devices it got", events)
            return ""
        job.gpus = held
        self._start(job, events)
        return ""

    def _note(self, job: Job, message: str, events: list[JobEvent]) -> None:
        job.message = message
        if not job.synthetic and self._last_message.get(job.id) != message:
            self._last_message[job.id] = message
            events.append(JobEvent(job.id, self._now, "unschedulable", job.status, message))

    def _start(self, job: Job, events: list[JobEvent]) -> None:
        self._queue.discard(job.id)
        self._enqueued.pop(job.id, None)
        self._running.add(job.id)
        self._last_message.pop(job.id, None)
        job.status = JobStatus.RUNNING
        job.started_t = self._now
        job.attempts += 1
        job.placements = []
        for pod in self._pods[job.id]:
            self._pod_job[pod.key] = job.id
            job.placements.append(self._placement(pod.key))
        job.message = self._running_message(job)
        events.append(JobEvent(job.id, self._now, "running", JobStatus.RUNNING, job.message))
        if job.duration_s is not None:
            heapq.heappush(self._ends, (self._now + job.duration_s, job.id))

    def _placement(self, pod_key: str) -> dict[str, Any]:
        return views.placement(self.state, pod_key, self.state.allocations[pod_key].node)

    @staticmethod
    def _running_message(job: Job) -> str:
        nodes = sorted({p["node"] for p in job.placements})
        return f"running on {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}"

    def _evict_node(self, node: str, reason: str, events: list[JobEvent]) -> list[str]:
        """Stop every job with a pod on ``node`` and re-queue it whole (a gang restarts together); returns
        the pods released (on any node)."""
        jobs = {self._pod_job[k] for k in list(self.state.pods_on_node[self.state.node_index[node]])
                if k in self._pod_job}
        released: list[str] = []
        for jid in sorted(jobs):
            job = self._jobs[jid]
            released.extend(p.key for p in self._pods[jid] if p.key in self.state.allocations)
            self._release(job)
            job.status = JobStatus.PENDING
            job.placements = []
            job.started_t = None
            job.message = f"evicted: {reason}; re-queued"
            self._queue.add(jid)
            self._enqueued[jid] = self._now
            if not job.synthetic:
                events.append(JobEvent(jid, self._now, "evicted", JobStatus.PENDING, job.message))
        return released

    def _moved(self, pod_key: str, source: str, dest: str, events: list[JobEvent]) -> None:
        """A running pod was migrated (defragmentation): update its job's placement."""
        job = self._jobs.get(self._pod_job.get(pod_key, ""))
        if job is None:
            return
        job.placements = [self._placement(pod_key) if p["pod"] == pod_key else p for p in job.placements]
        job.message = self._running_message(job)
        if not job.synthetic:
            events.append(JobEvent(job.id, self._now, "migrated", job.status,
                                   f"pod {pod_key} moved from {source} to {dest} (defragmentation); {job.message}"))

    def queue_stats(self) -> QueueStats:
        """Pending pods and the wait of the oldest (read by the monitor's control-plane target)."""
        pods = sum(self._jobs[j].replicas for j in self._queue)
        oldest = min(self._enqueued.values(), default=self._now)
        return QueueStats(pending=pods, oldest_wait_s=max(0.0, self._now - oldest))

    # ------------------------------------------------------------------ faults, alerts, remediation
    def inject_fault(self, node: str, device: int, events: list[JobEvent] | None = None,
                     xid: int = DRILL_XID) -> None:
        """Fault drill: the device reports XID ``xid`` through the simulated collector; its monitor shard is
        evaluated at once, so the alert fires and remediation acts (drains the node on a critical XID) before
        this returns. Events of jobs it touched go to ``events``. The GPU is repaired REPAIR_AFTER_S later."""
        self._fault(node, device, xid)
        self._run_monitor(events if events is not None else [], node)

    def _fault(self, node: str, device: int, xid: int) -> None:
        self.monitor.inject_xid(node, device, xid)
        heapq.heappush(self._repairs, (self._now + REPAIR_AFTER_S, node, device))

    def _repair(self, t: float) -> None:
        """The simulated technician: reset each faulted GPU that is due (its XID cleared, healthy again) and put
        the node back in service once none of its GPUs awaits repair."""
        while self._repairs and self._repairs[0][0] <= t:
            _, node, device = heapq.heappop(self._repairs)
            self.monitor.clear(node, device)
            self.state.set_device_health(node, device, True)
            waiting = any(n == node for _, n, _ in self._repairs)
            if not waiting:
                self.state.set_schedulable(node, True)
                self.monitor.node_restored(node)
            note = (f"GPU {device} reset and passed checks; "
                    + ("node back in service" if not waiting else "node stays cordoned: another GPU awaits repair"))
            self.monitor.record(AuditRecord(self._now, "reset-and-uncordon", f"{node}/gpu{device}", "", note,
                                            dry_run=False, outcome="done", detail={"note": note}))

    def _random_faults(self, t0: float, t: float) -> None:
        if self._fault_rate <= 0:
            return
        if self._next_fault is None:
            self._next_fault = t0 + self.rng.expovariate(self._fault_rate)
        while self._next_fault <= t:
            present = np.flatnonzero(self.state.present & self.state.schedulable & (self.state.dev_count > 0))
            if present.size:
                i = int(present[self.rng.randrange(present.size)])
                self._fault(self.state.nodes[i].name, self.rng.randrange(int(self.state.dev_count[i])), DRILL_XID)
            self._next_fault += self.rng.expovariate(self._fault_rate)

    def _run_monitor(self, events: list[JobEvent], node: str | None = None) -> None:
        """Evaluate the alert rules (the shards due now, or ``node``'s) and collect the job events of what
        remediation did."""
        if node is None:
            self.monitor.advance(self._now)
        else:
            self.monitor.evaluate_node(node, self._now)
        events.extend(self.target.take_events())

    def take_audit_records(self) -> list[AuditRecord]:
        """Remediation audit records not yet handed out (the service persists them in its audit table)."""
        return self.monitor.take_unsaved()

    # ------------------------------------------------------------------ views
    def _sample(self) -> None:
        self._last_sample = self._now
        self._history.append(views.sample(self.state, self._now, len(self._queue)))

    def alerts(self) -> list[dict[str, Any]]:
        return self.monitor.alerts()

    def remediations(self) -> list[dict[str, Any]]:
        return self.monitor.remediations()

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for jid in (*self._running, *self._queue):
            job = self._jobs[jid]
            u = out.setdefault(job.tenant, {"gpus": 0.0, "pending_gpus": 0.0, "running": 0.0, "pending": 0.0})
            if job.status == JobStatus.RUNNING:
                u["gpus"] += job.gpus
                u["running"] += 1
            else:
                u["pending_gpus"] += job.gpus
                u["pending"] += 1
        return out

    def nodes(self) -> list[dict[str, Any]]:
        return views.present_rows(self.state)

    def _describe(self, alloc: Allocation) -> dict[str, Any]:
        jid = self._pod_job.get(alloc.pod_key, "")
        job = self._jobs.get(jid)
        return {"job": jid, "job_name": job.name if job else "", "tenant": alloc.tenant or (job.tenant if job else "")}

    def node(self, name: str) -> dict[str, Any] | None:
        return views.node_detail(self.state, name, self._describe)

    def overview(self) -> dict[str, Any]:
        counts = {st.value: 0 for st in JobStatus}
        user_counts = {st.value: 0 for st in JobStatus}
        for job in self._jobs.values():
            counts[job.status.value] += 1
            if not job.synthetic:
                user_counts[job.status.value] += 1
        return {
            "backend": self.backend,
            "cluster": self.cluster.name,
            "policy": self.policy,
            "t": self._now,
            **views.figures(self.state),
            "queue": len(self._queue),
            "jobs": counts,
            "user_jobs": user_counts,
            "alerts_firing": self.monitor.firing,
            "history": list(self._history),
        }

    def topology(self) -> dict[str, Any]:
        return views.topology(self.state)


class EmbeddedTarget(SimTarget):
    """``monitoring.RemediationTarget`` on the embedded runtime: ``SimTarget``'s cordon, device health,
    migration and fragmentation views on the same ClusterState and Scheduler, with drains and releases that
    keep the runtime's jobs whole. A drain cordons the node and evicts every job with a pod on it, re-queued
    as a gang (the next scheduling pass places it elsewhere); a release cancels the pod's job; a migrated pod's
    job gets its new placement. Job events are collected in :meth:`take_events`."""

    def __init__(self, runtime: EmbeddedRuntime) -> None:
        super().__init__(runtime.scheduler)
        self.runtime = runtime
        self.events: list[JobEvent] = []

    def take_events(self) -> list[JobEvent]:
        out, self.events = self.events, []
        return out

    def drain(self, node: str) -> DrainResult:
        self.cordon(node)
        released = self.runtime._evict_node(node, f"{node} drained by automatic remediation", self.events)
        return DrainResult(evicted=released, pending=list(released))

    def release(self, pod_key: str) -> bool:
        rt = self.runtime
        job = rt._jobs.get(rt._pod_job.get(pod_key, ""))
        if job is None or job.status != JobStatus.RUNNING:
            return False
        rt._finish(job, JobStatus.CANCELLED, rt.now, "released by automatic remediation: its GPU sat idle",
                   self.events)
        return True

    def migrate(self, pod_key: str) -> str | None:
        alloc = self.state.allocations.get(pod_key)
        dest = super().migrate(pod_key)
        if alloc is not None and dest is not None:
            self.runtime._moved(pod_key, alloc.node, dest, self.events)
        return dest
