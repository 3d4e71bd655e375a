"""Automatic remediation: firing alerts -> planned actions -> a backend carries them out, with an audit log.

The planner is pure (``plan(alerts, now) -> list[PlannedAction]``, house style: events in, instructions out);
a :class:`RemediationTarget` executes: :class:`SimTarget` on a ``ClusterState`` + ``Scheduler`` (the embedded
backend), :class:`JobSimulatorTarget` inside the discrete-event job simulator, and ``gpucluster.kubernetes``
implements the same protocol against the API server (cordon = ``spec.unschedulable``, drain = cordon +
Eviction of each pod, release = delete the pod,
migrate = evict it so its controller recreates it elsewhere).

Nothing is lost: a pod evicted by a drain is rescheduled at once or kept in the target's pending queue
(retried with :meth:`SimTarget.retry_pending`), and every decision, executed or dry-run, is written to the
audit log.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol, TextIO, runtime_checkable

import numpy as np

from gpucluster.model import Allocation, AllocationError, ClusterState, Pod
from gpucluster.model.actions import DrainResult
from gpucluster.model.views import node_fragmentation
from gpucluster.monitoring.rules import Action, Alert
from gpucluster.scheduler import Outcome, Scheduler


@runtime_checkable
class RemediationTarget(Protocol):
    """A backend remediation acts through. Each method is idempotent (cordoning a cordoned node, draining an
    empty node or releasing a pod that is gone does nothing and does not raise)."""

    def cordon(self, node: str) -> None:
        """Stop placing new pods on ``node``."""

    def uncordon(self, node: str) -> None: ...

    def set_device_health(self, node: str, gpu: int, healthy: bool) -> None:
        """Mark a device (un)usable for new placements (Kubernetes: the device plugin's report does this)."""

    def drain(self, node: str) -> DrainResult:
        """Cordon ``node``, evict its pods and have them placed elsewhere."""
        ...

    def release(self, pod_key: str) -> bool:
        """Free the pod's allocation (the pod is stopped). True if it held one."""
        ...

    def migrate(self, pod_key: str) -> str | None:
        """Move the pod off its node; returns the new node, or None when it stays where it was."""
        ...

    def pods_on(self, node: str, gpu: int | None = None) -> list[str]:
        """Pods on ``node`` (on device ``gpu`` only, when given)."""
        ...


class SimTarget:
    """Remediation on the embedded cluster: a :class:`ClusterState` through its :class:`Scheduler`."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.state = scheduler.state
        self.pending: dict[str, Pod] = {}
        """Evicted pods that found no room yet, by key (retried by :meth:`retry_pending`)."""
        self.released: list[Allocation] = []
        """Allocations freed by ``release`` (their pods were stopped on purpose)."""

    def cordon(self, node: str) -> None:
        self.state.set_schedulable(node, False)

    def uncordon(self, node: str) -> None:
        self.state.set_schedulable(node, True)

    def set_device_health(self, node: str, gpu: int, healthy: bool) -> None:
        self.state.set_device_health(node, gpu, healthy)

    def pods_on(self, node: str, gpu: int | None = None) -> list[str]:
        allocs = self.state.allocations_on(node)
        if gpu is None:
            return [a.pod_key for a in allocs]
        return [a.pod_key for a in allocs if any(g.device_index == gpu for g in a.grants)]

    def _pod(self, alloc: Allocation) -> Pod:
        if alloc.pod is None:
            raise ValueError(f"{alloc.pod_key}: the allocation does not carry its pod; it cannot be rescheduled")
        return alloc.pod

    def drain(self, node: str) -> DrainResult:
        self.cordon(node)
        result = DrainResult()
        allocs = self.state.allocations_on(node)
        pods = [self._pod(a) for a in allocs]  # check all first: never evict what cannot come back
        for a in allocs:
            self.scheduler.delete(a.pod_key)
            result.evicted.append(a.pod_key)
        for pod in sorted(pods, key=lambda p: (-p.priority, -p.device_count, p.key)):
            d = self.scheduler.schedule_and_bind(pod)
            if d.outcome == Outcome.SCHEDULED and d.node is not None:
                result.rescheduled[pod.key] = d.node
            else:
                self.pending[pod.key] = pod
                result.pending.append(pod.key)
        return result

    def retry_pending(self) -> dict[str, str]:
        """Try the parked pods again (call when capacity comes back); returns pod -> node for those placed."""
        placed: dict[str, str] = {}
        for pod in sorted(self.pending.values(), key=lambda p: (-p.priority, p.key)):
            d = self.scheduler.schedule_and_bind(pod)
            if d.outcome == Outcome.SCHEDULED and d.node is not None:
                placed[pod.key] = d.node
                del self.pending[pod.key]
        return placed

    def release(self, pod_key: str) -> bool:
        alloc = self.scheduler.delete(pod_key)
        if alloc is not None:
            self.released.append(alloc)
        return alloc is not None

    def migrate(self, pod_key: str) -> str | None:
        alloc = self.state.allocations.get(pod_key)
        if alloc is None:
            return None
        pod = self._pod(alloc)
        i = self.state.node_index[alloc.node]
        was = bool(self.state.schedulable[i])
        self.scheduler.delete(pod_key)
        self.state.set_schedulable(alloc.node, False)
        try:
            d = self.scheduler.schedule_and_bind(pod)
        finally:
            self.state.set_schedulable(alloc.node, was)
        if d.outcome == Outcome.SCHEDULED and d.node is not None:
            return d.node
        try:  # no room elsewhere: put it back exactly where it was
            self.state.assign(alloc)
        except AllocationError as exc:  # pragma: no cover - nothing else ran in between
            raise AssertionError(f"{pod_key}: could not restore its allocation: {exc}") from exc
        return None

    def fragmentation(self, node: str) -> float:
        return float(node_fragmentation(self.state)[self.state.node_index[node]])

    def partial_devices(self, node: str) -> list[int]:
        """Devices of ``node`` that are shared-but-not-full, least used first (the cheapest to empty)."""
        st = self.state
        i = st.node_index[node]
        used = st.dev_core_used[i]
        cand = np.flatnonzero(st.dev_valid[i] & st.dev_healthy[i] & (st.dev_tasks[i] > 0) & (used < st.dev_core_cap[i]))
        return [int(j) for j in sorted(cand, key=lambda j: (int(used[j]), int(j)))]


class JobSimulator(Protocol):
    """What :class:`JobSimulatorTarget` needs of the discrete-event job simulator
    (``gpucluster.simulator.Simulation`` has it; structural, so monitoring does not import the simulator)."""

    state: ClusterState

    def fail_node(self, name: str, repair_after_s: float | None = None) -> list[str]: ...

    def cancel(self, job_id: str) -> bool: ...


class JobSimulatorTarget:
    """Remediation inside the job simulator: a drain takes the node out (``fail_node``: its jobs stop, keep
    their last checkpoint and go back to the simulator's queue, which places them elsewhere); release cancels
    the pod's job. Migration is not offered (jobs restart from checkpoints instead)."""

    def __init__(self, sim: JobSimulator) -> None:
        self.sim = sim
        self.state = sim.state

    def cordon(self, node: str) -> None:
        self.state.set_schedulable(node, False)

    def uncordon(self, node: str) -> None:
        self.state.set_schedulable(node, True)

    def set_device_health(self, node: str, gpu: int, healthy: bool) -> None:
        self.state.set_device_health(node, gpu, healthy)

    def pods_on(self, node: str, gpu: int | None = None) -> list[str]:
        return [a.pod_key for a in self.state.allocations_on(node)
                if gpu is None or any(g.device_index == gpu for g in a.grants)]

    def drain(self, node: str) -> DrainResult:
        evicted = list(self.pods_on(node))
        jobs = self.sim.fail_node(node)
        return DrainResult(evicted=evicted, pending=list(jobs))

    def _job_of(self, pod_key: str) -> str:
        alloc = self.state.allocations.get(pod_key)
        if alloc is None or alloc.pod is None:
            return ""
        return alloc.pod.labels.get("gpucluster.io/job", "")

    def release(self, pod_key: str) -> bool:
        job = self._job_of(pod_key)
        return bool(job) and self.sim.cancel(job)

    def migrate(self, pod_key: str) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class RemediationPolicy:
    """Which actions run on their own, and the brakes on them."""

    allow: frozenset[Action] = frozenset({Action.CORDON, Action.DRAIN, Action.DEFRAGMENT})
    """Actions carried out automatically; others are only logged as ``skipped``. Releasing idle allocations
    stops users' pods, so it is off unless listed."""
    max_unschedulable_fraction: float = 0.25
    """Never cordon or drain past this fraction of the nodes (a bad rule or a fabric-wide fault must not
    empty the cluster)."""
    cooldown_s: float = 600.0
    """The same action on the same target is not repeated within this many seconds."""
    defragment_max_moves: int = 8
    """Most pods moved per defragmentation of one node."""


@dataclass(frozen=True, slots=True)
class PlannedAction:
    action: Action
    node: str
    alert: str
    reason: str
    gpu: int | None = None
    pod: str | None = None

    @property
    def target(self) -> str:
        return self.pod or (f"{self.node}/gpu{self.gpu}" if self.gpu is not None else self.node)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    time: float
    action: str
    target: str
    alert: str
    reason: str
    dry_run: bool
    outcome: str
    """``done``, ``dry-run``, ``skipped`` or ``failed``."""
    detail: dict[str, object] = field(default_factory=dict)


class AuditLog:
    """Append-only record of remediation decisions; JSON lines in ``path`` when given, always in memory."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.records: list[AuditRecord] = []
        self._fh: TextIO | None = path.open("a", encoding="utf-8") if path is not None else None

    def write(self, rec: AuditRecord) -> None:
        self.records.append(rec)
        if self._fh is not None:
            self._fh.write(json.dumps(asdict(rec), sort_keys=True) + "\n")
            self._fh.flush()

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def _key(p: PlannedAction) -> tuple[Action, str]:
    """What makes two planned actions the same: the action and its node (its device, for a release)."""
    return p.action, p.target if p.action == Action.RELEASE else p.node


def _gpu_of(alert: Alert) -> int | None:
    g = alert.labels.get("gpu", "")
    return int(g) if g.isdigit() else None


class Remediator:
    """Turns firing alerts into actions on a target, honouring the policy; ``dry_run`` only logs."""

    def __init__(
        self,
        target: RemediationTarget,
        policy: RemediationPolicy | None = None,
        audit: AuditLog | None = None,
        dry_run: bool = False,
        node_count: Callable[[], int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.target = target
        self.policy = policy or RemediationPolicy()
        self.audit = audit or AuditLog()
        self.dry_run = dry_run
        self.node_count = node_count
        self.clock = clock
        self._last: dict[tuple[Action, str], float] = {}
        self._handled: set[tuple[Action, str]] = set()
        """Targets already dealt with while their alert keeps firing (one action per alert episode)."""
        self._unschedulable: set[str] = set()
        """Nodes this remediator cordoned or drained."""

    def node_restored(self, node: str) -> None:
        """The backend put ``node`` back in service (repaired and uncordoned): it no longer counts against
        ``max_unschedulable_fraction``."""
        self._unschedulable.discard(node)

    def plan(self, alerts: Iterable[Alert]) -> list[PlannedAction]:
        """Pure: the actions the firing alerts call for, most severe first, one per (action, target)."""
        order = {Action.DRAIN: 0, Action.CORDON: 1, Action.RELEASE: 2, Action.DEFRAGMENT: 3}
        seen: set[tuple[Action, str]] = set()
        out: list[PlannedAction] = []
        for a in alerts:
            if a.state != "firing" or a.action == Action.NONE:
                continue
            node = a.node
            if not node:
                continue
            gpu = _gpu_of(a)
            if a.action == Action.RELEASE and gpu is None:
                continue
            pa = PlannedAction(a.action, node, a.name, a.annotations.get("summary", ""), gpu=gpu)
            key = _key(pa)
            if key in seen:
                continue
            seen.add(key)
            out.append(pa)
        out.sort(key=lambda p: (order.get(p.action, 9), p.node, p.gpu if p.gpu is not None else -1))
        # a node being drained needs no cordon and no defragmentation in the same round
        draining = {p.node for p in out if p.action == Action.DRAIN}
        return [p for p in out if p.action == Action.DRAIN or p.node not in draining]

    def handle(self, alerts: Iterable[Alert]) -> list[AuditRecord]:
        """Plan and execute what is new since the last call; returns the audit records written.

        An action is taken (or skipped, or dry-run) once per alert episode: while the alert keeps firing it
        is not repeated; once it resolves and fires again, it is considered again (subject to the cooldown).
        """
        plan = self.plan(alerts)
        current = {_key(p) for p in plan}
        self._handled &= current
        records = []
        for p in plan:
            if _key(p) in self._handled:
                continue
            rec = self.execute(p)
            if rec.outcome != "failed":
                self._handled.add(_key(p))
            records.append(rec)
        return records

    def _record(self, p: PlannedAction, outcome: str, **detail: object) -> AuditRecord:
        rec = AuditRecord(self.clock(), str(p.action), p.target, p.alert, p.reason, self.dry_run, outcome, detail)
        self.audit.write(rec)
        return rec

    def execute(self, p: PlannedAction) -> AuditRecord:
        now = self.clock()
        if p.action not in self.policy.allow:
            return self._record(p, "skipped", why=f"action {p.action} is not allowed by the policy")
        key = _key(p)
        last = self._last.get(key)
        if last is not None and now - last < self.policy.cooldown_s:
            return self._record(p, "skipped", why=f"done {now - last:.0f}s ago (cooldown)")
        if p.action in (Action.CORDON, Action.DRAIN) and p.node not in self._unschedulable and self.node_count:
            limit = max(1.0, self.policy.max_unschedulable_fraction * self.node_count())
            if len(self._unschedulable) + 1 > limit:
                return self._record(p, "skipped", why=f"would take more than {limit:.0f} nodes out of service")
        if self.dry_run:
            self._last[key] = now
            return self._record(p, "dry-run")
        try:
            detail = self._run(p)
        except Exception as exc:  # a failing backend call is recorded, not swallowed
            return self._record(p, "failed", error=f"{type(exc).__name__}: {exc}")
        self._last[key] = now
        return self._record(p, "done", **detail)

    def _run(self, p: PlannedAction) -> dict[str, object]:
        t = self.target
        if p.action == Action.CORDON:
            t.cordon(p.node)
            self._unschedulable.add(p.node)
            return {}
        if p.action == Action.DRAIN:
            if p.gpu is not None:
                t.set_device_health(p.node, p.gpu, False)
            res = t.drain(p.node)
            self._unschedulable.add(p.node)
            return {"evicted": res.evicted, "rescheduled": res.rescheduled, "pending": res.pending}
        if p.action == Action.RELEASE:
            assert p.gpu is not None
            pods = t.pods_on(p.node, p.gpu)
            return {"released": [k for k in pods if t.release(k)]}
        if p.action == Action.DEFRAGMENT:
            return self._defragment(p.node)
        raise ValueError(f"unknown action {p.action}")  # pragma: no cover

    def _defragment(self, node: str) -> dict[str, object]:
        t = self.target
        if not isinstance(t, SimTarget):
            raise NotImplementedError("defragmentation needs a target that reports device usage")
        before = t.fragmentation(node)
        moved: dict[str, str] = {}
        freed: list[int] = []
        for gpu in t.partial_devices(node):
            pods = t.pods_on(node, gpu)
            if len(moved) + len(pods) > self.policy.defragment_max_moves:
                break
            ok = True
            for key in pods:
                dest = t.migrate(key)
                if dest is None:
                    ok = False
                    break
                moved[key] = dest
            if ok:
                freed.append(gpu)
        return {"moved": moved, "freed_gpus": freed, "fragmentation_before": before,
                "fragmentation_after": t.fragmentation(node)}


def lost_pods(before: Iterable[str], target: SimTarget) -> set[str]:
    """Pods of ``before`` that are neither allocated, nor pending, nor released on purpose (should be none)."""
    alive = set(target.state.allocations) | set(target.pending) | {a.pod_key for a in target.released}
    return set(before) - alive
