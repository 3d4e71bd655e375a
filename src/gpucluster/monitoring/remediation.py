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
from gpucluster.model.labels import JOB_LABEL
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
        if d.allocation is not None:  # a gang member alone waits for its gang (Permit): give its reservation up
            self.scheduler.forget_group([d])
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
        cand = np.flatnonzero(st.dev_live[i] & (st.dev_tasks[i] > 0) & (st.dev_core_free[i] > 0))
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
        return alloc.pod.labels.get(JOB_LABEL, "")

    def release(self, pod_key: str) -> bool:
        job = self._job_of(pod_key)
        return bool(job) and self.sim.cancel(job)

    def migrate(self, pod_key: str) -> str | None:
        return None


KEEP_DECIDED = 1000
"""Approved or dismissed planned-action ids remembered (so a second approval says so instead of 'unknown')."""


class RemediationConflictError(Exception):
    """An operator's decision on a planned action that no longer applies (already approved or dismissed)."""


DISRUPTIVE = frozenset({Action.DRAIN, Action.DEFRAGMENT, Action.RELEASE})
"""Actions that stop or move running pods (a drain evicts, a defragmentation migrates, a release stops). An
operator opts in to each (``gpucluster up --remediate drain,defragment``); otherwise they are planned only."""


@dataclass(frozen=True, slots=True)
class RemediationPolicy:
    """Which actions run on their own, which are only planned, and the brakes on them."""

    allow: frozenset[Action] = frozenset({Action.CORDON, Action.DRAIN, Action.DEFRAGMENT})
    """Actions considered at all; others are only logged as ``skipped``. Releasing idle allocations stops users'
    pods, so it is off unless listed."""
    dry_run: frozenset[Action] = frozenset()
    """Allowed actions that are planned and logged (outcome ``dry-run``, with what they would do) but not
    carried out. A dry-run drain still does the part that moves nothing: the faulted device is marked
    unusable for new pods and the node is cordoned (when cordon is allowed and not itself dry-run), so nothing
    new lands on broken hardware while the running pods stay where they are."""
    max_unschedulable_fraction: float = 0.25
    """Never cordon or drain past this fraction of the nodes (a bad rule or a fabric-wide fault must not
    empty the cluster)."""
    cooldown_s: float = 600.0
    """The same action on the same target is not repeated within this many seconds."""
    defragment_max_moves: int = 8
    """Most pods moved per defragmentation of one node."""

    @classmethod
    def opt_in(cls, enabled: Iterable[Action], observe_only: bool = False) -> RemediationPolicy:
        """Every action allowed; of the :data:`DISRUPTIVE` ones only ``enabled`` carried out, the others
        planned (dry-run). Cordoning moves nothing and is carried out, unless ``observe_only`` (then every
        action is planned only)."""
        on = frozenset(enabled)
        unknown = on - set(Action)
        if unknown:
            raise ValueError(f"unknown remediation action(s): {sorted(map(str, unknown))}")
        everything = frozenset({Action.CORDON, *DISRUPTIVE})
        dry = everything if observe_only else DISRUPTIVE - on
        return cls(allow=everything, dry_run=dry)

    def mode(self, action: Action) -> str:
        """``on`` (carried out), ``dry-run`` (planned only) or ``off`` (skipped)."""
        if action not in self.allow:
            return "off"
        return "dry-run" if action in self.dry_run else "on"

    def modes(self) -> dict[str, str]:
        """Every action's :meth:`mode`, by name."""
        return {str(a): self.mode(a) for a in (Action.CORDON, Action.DRAIN, Action.DEFRAGMENT, Action.RELEASE)}


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
    """``done``, ``dry-run``, ``skipped``, ``failed`` or ``dismissed`` (an operator dropped a planned action)."""
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
        self._planned: dict[tuple[Action, str], AuditRecord] = {}
        """Dry-run records whose alert still fires: what the remediator would do now if allowed."""
        self._planned_action: dict[tuple[Action, str], PlannedAction] = {}
        self._ids: dict[tuple[Action, str], str] = {}
        """Planned action -> its id (``rem-N``), for an operator to approve or dismiss it."""
        self._decided: dict[str, str] = {}
        """Ids of planned actions an operator approved or dismissed -> which (most recent :data:`KEEP_DECIDED`)."""
        self._seq = 0

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
        self._planned = {k: r for k, r in self._planned.items() if k in current}
        self._planned_action = {k: p for k, p in self._planned_action.items() if k in current}
        self._ids = {k: i for k, i in self._ids.items() if k in current}
        records = []
        for p in plan:
            if _key(p) in self._handled:
                continue
            rec = self.execute(p)
            if rec.outcome != "failed":
                self._handled.add(_key(p))
            if rec.outcome == "dry-run":
                self._planned[_key(p)] = rec
                self._planned_action[_key(p)] = p
                if _key(p) not in self._ids:
                    self._seq += 1
                    self._ids[_key(p)] = f"rem-{self._seq}"
            records.append(rec)
        return records

    def planned_id(self, rec: AuditRecord) -> str:
        """The id of a planned record (from :meth:`planned`): what ``approve`` and ``dismiss`` take."""
        return next((self._ids[k] for k, r in self._planned.items() if r is rec), "")

    def _take_planned(self, rid: str) -> tuple[tuple[Action, str], PlannedAction]:
        key = next((k for k, i in self._ids.items() if i == rid and k in self._planned), None)
        if key is None:
            if rid in self._decided:
                raise RemediationConflictError(f"remediation {rid} was already {self._decided[rid]}")
            raise LookupError(f"no planned remediation {rid!r} (its alert resolved, or it never existed)")
        p = self._planned_action[key]
        del self._planned[key], self._planned_action[key], self._ids[key]
        self._handled.add(key)  # not planned again while its alert keeps firing
        self._decided[rid] = ""
        while len(self._decided) > KEEP_DECIDED:
            del self._decided[next(iter(self._decided))]
        return key, p

    def approve(self, rid: str, actor: str) -> AuditRecord:
        """Carry out the planned action ``rid`` now, as if it were switched on (an operator's approval passes
        the cooldown and the cluster-wide brake: a person decided). Raises ``LookupError`` for an id that is
        not planned, :class:`RemediationConflictError` for one already approved or dismissed. A failing backend call
        is recorded (outcome ``failed``) and returned, not raised."""
        key, p = self._take_planned(rid)
        self._decided[rid] = f"approved by {actor}"
        try:
            detail = self._run(p)
        except Exception as exc:  # a failing backend call is recorded, not swallowed
            return self._record(p, "failed", error=f"{type(exc).__name__}: {exc}", approved_by=actor, id=rid)
        self._last[key] = self.clock()
        return self._record(p, "done", **detail, approved_by=actor, id=rid)

    def dismiss(self, rid: str, actor: str) -> AuditRecord:
        """Drop the planned action ``rid``: it is not carried out and not planned again while its alert keeps
        firing (it is once the alert resolves and fires again). Errors as :meth:`approve`."""
        _, p = self._take_planned(rid)
        self._decided[rid] = f"dismissed by {actor}"
        return self._record(p, "dismissed", dismissed_by=actor, id=rid)

    def planned(self) -> list[AuditRecord]:
        """Actions planned but not carried out (dry-run) whose alert still fires, newest first: what would
        be done now if the action were switched on."""
        return sorted(self._planned.values(), key=lambda r: -r.time)

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
        if p.action in self.policy.dry_run:
            self._last[key] = now
            try:
                detail = self._plan_only(p)
            except Exception as exc:
                return self._record(p, "failed", error=f"{type(exc).__name__}: {exc}")
            return self._record(p, "dry-run", **detail)
        try:
            detail = self._run(p)
        except Exception as exc:  # a failing backend call is recorded, not swallowed
            return self._record(p, "failed", error=f"{type(exc).__name__}: {exc}")
        self._last[key] = now
        return self._record(p, "done", **detail)

    def _plan_only(self, p: PlannedAction) -> dict[str, object]:
        """What a dry-run action would do, and the non-disruptive part of a drain (see
        :attr:`RemediationPolicy.dry_run`)."""
        t = self.target
        if p.action == Action.DRAIN:
            detail: dict[str, object] = {"would_evict": t.pods_on(p.node)}
            if p.gpu is not None:
                t.set_device_health(p.node, p.gpu, False)
                detail["device_unhealthy"] = p.gpu
            if Action.CORDON in self.policy.allow and Action.CORDON not in self.policy.dry_run:
                t.cordon(p.node)
                self._unschedulable.add(p.node)
                detail["cordoned"] = True
            return detail
        if p.action == Action.RELEASE:
            return {"would_release": t.pods_on(p.node, p.gpu)}
        if p.action == Action.DEFRAGMENT and isinstance(t, SimTarget):
            return {"fragmentation": t.fragmentation(p.node), "partial_gpus": t.partial_devices(p.node)}
        return {}

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


def _count(value: object) -> int:
    return len(value) if isinstance(value, list | dict | tuple) else 0


def _num(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _planned_text(rec: AuditRecord) -> str:
    d = rec.detail
    if rec.action == "drain" and "would_evict" in d:
        done = [x for x in (("cordoned the node" if d.get("cordoned") else ""),
                            (f"marked GPU {d['device_unhealthy']} unusable" if "device_unhealthy" in d else "")) if x]
        return (f"planned (dry run): would evict {_count(d.get('would_evict'))} pod(s)"
                + (f"; {' and '.join(done)}" if done else ""))
    if rec.action == "release" and "would_release" in d:
        return f"planned (dry run): would release {_count(d.get('would_release'))} idle pod(s)"
    if rec.action == "defragment" and "fragmentation" in d:
        return (f"planned (dry run): would move pods off {_count(d.get('partial_gpus'))} partly used GPU(s); "
                f"fragmentation {_num(d.get('fragmentation')):.2f}")
    return f"planned (dry run): would {rec.action}"


def describe_record(rec: AuditRecord) -> str:
    """One line for people: what was done, planned (dry run) or why not, and the alert that asked for it."""
    d = rec.detail
    if "note" in d:
        text = str(d["note"])
    elif rec.outcome == "dismissed":
        text = f"planned action dismissed by {d.get('dismissed_by', 'an operator')}: not carried out"
    elif rec.outcome == "skipped":
        text = f"skipped: {d.get('why', '')}"
    elif rec.outcome == "failed":
        text = f"failed: {d.get('error', '')}"
    elif rec.outcome == "dry-run":
        text = _planned_text(rec)
    elif rec.action == "drain":
        text = (f"cordoned the node and evicted {_count(d.get('evicted'))} pod(s); "
                f"{_count(d.get('pending'))} re-queued, {_count(d.get('rescheduled'))} moved at once")
    elif rec.action == "cordon":
        text = "cordoned the node: no new pods"
    elif rec.action == "release":
        text = f"released {_count(d.get('released'))} idle pod(s)"
    elif rec.action == "defragment":
        text = (f"moved {_count(d.get('moved'))} pod(s), freed GPU(s) {d.get('freed_gpus', [])}; fragmentation "
                f"{_num(d.get('fragmentation_before')):.2f} -> {_num(d.get('fragmentation_after')):.2f}")
    else:
        text = rec.outcome
    if "approved_by" in d:
        text = f"approved by {d['approved_by']}: {text}"
    return f"{text} ({rec.alert}: {rec.reason})" if rec.alert else text


def lost_pods(before: Iterable[str], target: SimTarget) -> set[str]:
    """Pods of ``before`` that are neither allocated, nor pending, nor released on purpose (should be none)."""
    alive = set(target.state.allocations) | set(target.pending) | {a.pod_key for a in target.released}
    return set(before) - alive
