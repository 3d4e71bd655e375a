"""The embedded runtime: a simulated cluster (ClusterState + Scheduler) on a clock.

Jobs are gangs of identical pods: all replicas are placed in one pass or none is. Jobs with ``duration_s``
finish on the clock. A light synthetic workload (``service.workload``) and random device faults (XID 79) with
their remediation (cordon, drain, reset, uncordon) keep the dashboard alive. Single-threaded by contract.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from gpucluster.devices import DeviceInputError, VendorRegistry
from gpucluster.model import Pod
from gpucluster.scheduler import DEFAULT_POLICY, Scheduler, profile_for
from gpucluster.service.runtime import Job, JobEvent, JobStatus
from gpucluster.service.workload import SyntheticWorkload
from gpucluster.spec import Cluster

USER_PRIORITY = 10
"""User jobs are tried before the synthetic background workload."""
MAX_TRIES_PER_PASS = 400
HISTORY_POINTS = 240
HISTORY_EVERY_S = 5.0
KEEP_FINISHED_SYNTHETIC = 300
REPAIR_AFTER_S = 600.0


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
    ) -> None:
        self.cluster = cluster
        self.state = cluster.state()
        self.policy = policy
        self.scheduler = Scheduler(self.state, profile_for(policy, seed), clock=lambda: self._now)
        self.registry = VendorRegistry.from_settings()
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
        self._fault_rate = fault_rate_per_hour / 3600.0
        self._next_fault: float | None = None
        self._repairs: list[tuple[float, str, int]] = []
        self._alerts: dict[str, dict[str, Any]] = {}
        self._alert_history: deque[dict[str, Any]] = deque(maxlen=100)
        self._remediation: deque[dict[str, Any]] = deque(maxlen=200)
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

    def _gpus(self, pods: list[Pod]) -> float:
        total = 0.0
        for pod in pods:
            for _, req in pod.device_requests:
                total += req.count * (req.core_milli / 1000.0 if req.core_milli else 1.0)
        return total

    def _add(self, job: Job) -> Job:
        pods = self._pods_for(job)
        job.gpus = self._gpus(pods)
        job.status = JobStatus.PENDING
        job.placements = []
        job.started_t = None
        job.finished_t = None
        self._jobs[job.id] = job
        self._pods[job.id] = pods
        self._queue.add(job.id)
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
        self._faults(t0, t, events)
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
            placed: list[str] = []
            message = ""
            for pod in self._pods[jid]:
                decision = self.scheduler.schedule_and_bind(pod)
                if not decision.ok or decision.allocation is None:
                    message = decision.message()
                    break
                placed.append(pod.key)
            if message:
                for key in placed:
                    self.scheduler.delete(key)
                failed_shapes.add(shape)
                self._note(job, f"unschedulable: {message}", events)
                continue
            self._start(job, events)
            usage[job.tenant] = usage.get(job.tenant, 0.0) + job.gpus

    def _note(self, job: Job, message: str, events: list[JobEvent]) -> None:
        job.message = message
        if not job.synthetic and self._last_message.get(job.id) != message:
            self._last_message[job.id] = message
            events.append(JobEvent(job.id, self._now, "unschedulable", job.status, message))

    def _start(self, job: Job, events: list[JobEvent]) -> None:
        self._queue.discard(job.id)
        self._running.add(job.id)
        self._last_message.pop(job.id, None)
        job.status = JobStatus.RUNNING
        job.started_t = self._now
        job.attempts += 1
        job.placements = []
        for pod in self._pods[job.id]:
            alloc = self.state.allocations[pod.key]
            self._pod_job[pod.key] = job.id
            job.placements.append({
                "pod": pod.key,
                "node": alloc.node,
                "devices": [{"uuid": g.uuid, "index": g.device_index, "memory_mib": g.memory_mib,
                             "cores": g.core_milli // 10} for g in alloc.grants],
            })
        nodes = sorted({p["node"] for p in job.placements})
        job.message = f"running on {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}"
        events.append(JobEvent(job.id, self._now, "running", JobStatus.RUNNING, job.message))
        if job.duration_s is not None:
            heapq.heappush(self._ends, (self._now + job.duration_s, job.id))

    def _evict_node(self, node: str, reason: str, events: list[JobEvent]) -> int:
        jobs = {self._pod_job[k] for k in list(self.state.pods_on_node[self.state.node_index[node]])
                if k in self._pod_job}
        for jid in sorted(jobs):
            job = self._jobs[jid]
            self._release(job)
            job.status = JobStatus.PENDING
            job.placements = []
            job.started_t = None
            job.message = f"evicted: {reason}; re-queued"
            self._queue.add(jid)
            if not job.synthetic:
                events.append(JobEvent(jid, self._now, "evicted", JobStatus.PENDING, job.message))
        return len(jobs)

    # ------------------------------------------------------------------ faults and remediation
    def _remediate(self, action: str, target: str, detail: str) -> None:
        self._remediation.appendleft({"t": self._now, "action": action, "target": target, "detail": detail})

    def inject_fault(self, node: str, device: int, events: list[JobEvent] | None = None) -> None:
        """A device reports XID 79 (fallen off the bus): alert, cordon, drain; repaired later."""
        events = events if events is not None else []
        i = self.state.node_index[node]
        if not self.state.dev_healthy[i, device]:
            return
        self.state.set_device_health(node, device, False)
        key = f"GPUFallenOffBus/{node}/{device}"
        self._alerts[key] = {"name": "GPUFallenOffBus", "severity": "critical", "target": f"{node}/gpu{device}",
                             "summary": f"XID 79 on {node} GPU {device}", "since": self._now,
                             "state": "firing"}
        self._remediate("cordon", node, f"XID 79 on GPU {device}: no new pods")
        self.state.set_schedulable(node, False)
        moved = self._evict_node(node, f"GPU {device} on {node} failed (XID 79)", events)
        self._remediate("drain", node, f"evicted {moved} job(s); they are re-queued")
        heapq.heappush(self._repairs, (self._now + REPAIR_AFTER_S, node, device))

    def _faults(self, t0: float, t: float, events: list[JobEvent]) -> None:
        while self._repairs and self._repairs[0][0] <= t:
            _, node, device = heapq.heappop(self._repairs)
            self.state.set_device_health(node, device, True)
            self.state.set_schedulable(node, True)
            self._remediate("reset-and-uncordon", node, f"GPU {device} reset and passed checks; node back in service")
            alert = self._alerts.pop(f"GPUFallenOffBus/{node}/{device}", None)
            if alert is not None:
                self._alert_history.appendleft({**alert, "state": "resolved", "resolved": self._now})
        if self._fault_rate <= 0:
            return
        if self._next_fault is None:
            self._next_fault = t0 + self.rng.expovariate(self._fault_rate)
        while self._next_fault <= t:
            present = np.flatnonzero(self.state.present & self.state.schedulable & (self.state.dev_count > 0))
            if present.size:
                i = int(present[self.rng.randrange(present.size)])
                self.inject_fault(self.state.nodes[i].name, self.rng.randrange(int(self.state.dev_count[i])),
                                  events)
            self._next_fault += self.rng.expovariate(self._fault_rate)

    # ------------------------------------------------------------------ views
    def _fragmentation(self) -> float:
        """Share of free compute stranded on partly used devices (a whole-GPU job cannot use it)."""
        s = self.state
        usable = s.dev_valid & s.dev_healthy & s.schedulable[:, None]
        free = np.where(usable, s.dev_core_cap - s.dev_core_used, 0)
        partial = free[(s.dev_core_used > 0) | (s.dev_tasks > 0)].sum()
        total = free.sum()
        return float(partial / total) if total else 0.0

    def _sample(self) -> None:
        tot = self.state.totals()
        self._last_sample = self._now
        self._history.append({
            "t": self._now,
            "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
            "mem_alloc": tot["device_memory_used_mib"] / max(tot["device_memory_mib"], 1),
            "fragmentation": self._fragmentation(),
            "pending": float(len(self._queue)),
        })
        self._evaluate_rules(tot)

    def _evaluate_rules(self, tot: dict[str, int]) -> None:
        alloc = tot["core_used_milli"] / max(tot["core_milli"], 1)
        oldest = min((self._jobs[j].submitted_t for j in self._queue if not self._jobs[j].synthetic),
                     default=None)
        frag = self._fragmentation()
        rules = {
            "ClusterGPUAllocationHigh": (alloc > 0.9, "warning", "cluster", f"{alloc:.0%} of GPU compute allocated"),
            "QueueBacklog": (oldest is not None and self._now - oldest > 300, "warning", "queue",
                             "a user job has waited more than 5 minutes"),
            "GPUFragmentationHigh": (frag > 0.5, "info", "cluster",
                                     f"{frag:.0%} of free compute sits on partly used GPUs"),
        }
        for name, (firing, severity, target, summary) in rules.items():
            current = self._alerts.get(name)
            if firing and current is None:
                self._alerts[name] = {"name": name, "severity": severity, "target": target, "summary": summary,
                                      "since": self._now, "state": "firing"}
            elif firing and current is not None:
                current["summary"] = summary
            elif not firing and current is not None:
                del self._alerts[name]
                self._alert_history.appendleft({**current, "state": "resolved", "resolved": self._now})

    def alerts(self) -> list[dict[str, Any]]:
        order = {"critical": 0, "warning": 1, "info": 2}
        firing = sorted(self._alerts.values(), key=lambda a: (order.get(a["severity"], 3), -a["since"]))
        return [dict(a) for a in firing] + [dict(a) for a in self._alert_history]

    def remediations(self) -> list[dict[str, Any]]:
        return list(self._remediation)

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

    def _node_rows(self, indices: list[int]) -> list[dict[str, Any]]:
        """Node rows for the API, built from whole-array ``tolist()`` calls (no per-element numpy access)."""
        s = self.state
        mem_pct = np.round(np.divide(s.dev_mem_used * 100.0, s.dev_mem_cap, out=np.zeros(s.dev_mem_cap.shape),
                                     where=s.dev_mem_cap > 0), 1)
        core, pct, healthy = s.dev_core_used.tolist(), mem_pct.tolist(), s.dev_healthy.tolist()
        cpu_cap, cpu_used = s.cpu_cap.tolist(), s.cpu_used.tolist()
        mem_cap, mem_used = s.mem_cap.tolist(), s.mem_used.tolist()
        pods, present, sched, count = s.pod_count.tolist(), s.present.tolist(), s.schedulable.tolist(), \
            s.dev_count.tolist()
        rows = []
        for i in indices:
            node = s.nodes[i]
            d = count[i]
            rows.append({
                "name": node.name, "rack": node.rack, "leaf": node.leaf, "spine": node.spine, "pool": node.pool,
                "model": node.devices[0].model if node.devices else "",
                "present": present[i], "schedulable": sched[i],
                "cpu_milli": cpu_cap[i], "cpu_used_milli": cpu_used[i],
                "memory_mib": mem_cap[i], "memory_used_mib": mem_used[i],
                "pods": pods[i], "gpus": d,
                "dev_core_used": core[i][:d], "dev_mem_pct": pct[i][:d], "dev_healthy": healthy[i][:d],
            })
        return rows

    def nodes(self) -> list[dict[str, Any]]:
        return self._node_rows([i for i, p in enumerate(self.state.present.tolist()) if p])

    def node(self, name: str) -> dict[str, Any] | None:
        i = self.state.node_index.get(name)
        if i is None:
            return None
        s = self.state
        row = self._node_rows([i])[0]
        by_dev: dict[int, list[dict[str, Any]]] = {}
        for alloc in s.allocations_on(name):
            jid = self._pod_job.get(alloc.pod_key, "")
            job = self._jobs.get(jid)
            for g in alloc.grants:
                by_dev.setdefault(g.device_index, []).append({
                    "pod": alloc.pod_key, "job": jid, "job_name": job.name if job else "",
                    "tenant": alloc.tenant or (job.tenant if job else ""),
                    "cores": g.core_milli // 10, "memory_mib": g.memory_mib})
        row["devices"] = [
            {"index": dev.index, "uuid": dev.uuid, "model": dev.model, "numa": dev.numa,
             "nvlink_domain": dev.nvlink_domain, "healthy": bool(s.dev_healthy[i, dev.index]),
             "core_used": int(s.dev_core_used[i, dev.index]), "core_cap": int(s.dev_core_cap[i, dev.index]),
             "memory_used_mib": int(s.dev_mem_used[i, dev.index]),
             "memory_mib": int(s.dev_mem_cap[i, dev.index]), "tasks": int(s.dev_tasks[i, dev.index]),
             "max_tasks": int(s.dev_max_tasks[i, dev.index]), "pods": by_dev.get(dev.index, [])}
            for dev in s.nodes[i].devices
        ]
        return row

    def overview(self) -> dict[str, Any]:
        s = self.state
        tot = s.totals()
        valid = s.dev_valid & s.present[:, None]
        counts = {st.value: 0 for st in JobStatus}
        user_counts = {st.value: 0 for st in JobStatus}
        for job in self._jobs.values():
            counts[job.status.value] += 1
            if not job.synthetic:
                user_counts[job.status.value] += 1
        models: dict[str, dict[str, float]] = {}
        for mid, model in enumerate(s.models.names):
            mask = valid & (s.dev_model == mid)
            cap = int(s.dev_core_cap[mask].sum())
            models[model] = {"devices": int(mask.sum()), "alloc": float(s.dev_core_used[mask].sum() / cap)
                             if cap else 0.0}
        return {
            "backend": self.backend,
            "cluster": self.cluster.name,
            "policy": self.policy,
            "t": self._now,
            "nodes": tot["nodes"],
            "nodes_cordoned": int((s.present & ~s.schedulable).sum()),
            "devices": tot["devices"],
            "devices_in_use": int((valid & (s.dev_tasks > 0)).sum()),
            "devices_unhealthy": int((valid & ~s.dev_healthy).sum()),
            "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
            "gpu_mem_alloc": tot["device_memory_used_mib"] / max(tot["device_memory_mib"], 1),
            "cpu_alloc": tot["cpu_used_milli"] / max(tot["cpu_milli"], 1),
            "mem_alloc": tot["memory_used_mib"] / max(tot["memory_mib"], 1),
            "fragmentation": self._fragmentation(),
            "pods": tot["pods"],
            "queue": len(self._queue),
            "jobs": counts,
            "user_jobs": user_counts,
            "models": models,
            "alerts_firing": len(self._alerts),
            "history": list(self._history),
        }

    def topology(self) -> dict[str, Any]:
        s = self.state
        spines: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
        for i, node in enumerate(s.nodes):
            if not s.present[i]:
                continue
            domains: dict[int, int] = {}
            for dev in node.devices:
                domains[dev.nvlink_domain] = domains.get(dev.nvlink_domain, 0) + 1
            cap = int(s.dev_core_cap[i].sum())
            spines.setdefault(node.spine, {}).setdefault(node.leaf, {}).setdefault(node.rack, []).append({
                "name": node.name, "model": node.devices[0].model if node.devices else "",
                "gpus": len(node.devices), "nvlink_domains": [n for d, n in sorted(domains.items()) if d >= 0],
                "pcie_only": domains.get(-1, 0), "alloc": float(s.dev_core_used[i].sum() / cap) if cap else 0.0,
                "schedulable": bool(s.schedulable[i])})
        f = s.fabric
        return {
            "fabric": {"type": str(f.type), "link_gbps": f.link_gbps, "oversubscription": f.oversubscription,
                       "nvlink_gbps_per_gpu": f.nvlink_gbps_per_gpu},
            "spines": [
                {"name": sp, "leaves": [
                    {"name": lf, "racks": [{"name": rk, "nodes": nodes} for rk, nodes in sorted(racks.items())]}
                    for lf, racks in sorted(leaves.items())]}
                for sp, leaves in sorted(spines.items())
            ],
        }
