"""A secondary scheduler for pods whose ``spec.schedulerName`` names it, with gang scheduling and leader
election.

Pending pods come from the informer. Each pass (on a change, or every ``retry_interval`` seconds) takes
them by priority, then age: a single pod is decided and bound; the pods of a gang (``gpucluster.io/gang``,
``gpucluster.io/gang-min-member``) are decided together under the cluster lock and bound only when every
pending member fits and at least ``min-member`` are there (``Scheduler.schedule_group``: the framework's
Gang plugin and waiting-pods map), else every reservation is undone and nothing binds. Binding is
``Scheduler.bind_group`` (a single pod is a group of one): every member's bind is checked first (a dry-run
Binding), then each binds; a member that does not bind (deleted meanwhile, refused by admission, an API error)
or a leadership lost part way rolls the gang back (members already bound are deleted and created again
unbound), so a gang is never left partly bound, and it is placed again in a later pass. A pod that does not
fit gets a ``FailedScheduling`` Event and ``PodScheduled=False`` with the counted reasons (written again only
when the message changes). With an elector, only the leader runs passes, and it checks leadership again
before every bind.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import KubeInputError, parse_pod, pod_key, pod_node, pod_phase
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.model import Pod
from gpucluster.scheduler import Decision

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    pod: Pod
    created: str


class SecondaryScheduler:
    def __init__(self, cluster: KubeCluster, binder: KubeBinder, scheduler_name: str = "gpucluster",
                 elector: LeaderElector | None = None, retry_interval: float = 2.0) -> None:
        self.cluster = cluster
        self.binder = binder
        self.scheduler_name = scheduler_name
        self.elector = elector
        self.retry_interval = retry_interval
        self.pending: dict[str, _Pending] = {}
        self._reported: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.bound_count = 0
        self.rollbacks = 0
        """Groups whose bind failed part way and were rolled back."""

    # ------------------------------------------------------------------------------------------ events
    def on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Informer listener."""
        key = pod_key(obj)
        spec = obj.get("spec") or {}
        mine = spec.get("schedulerName") == self.scheduler_name
        waiting = mine and not pod_node(obj) and pod_phase(obj) not in ("Succeeded", "Failed")
        with self._lock:
            if kind == "DELETED" or not waiting:
                gone = self.pending.pop(key, None)
                self._reported.pop(key, None)
                if kind == "DELETED" or (gone is None and pod_node(obj) == ""):
                    self._wake.set()  # room may have appeared
                return
            try:
                pod = parse_pod(obj, self.cluster.registry)
            except KubeInputError as exc:
                log.warning("pod %s cannot be scheduled: %s", key, exc)
                self.pending.pop(key, None)
                return
            created = str((obj.get("metadata") or {}).get("creationTimestamp") or "")
            self.pending[key] = _Pending(pod, created)
        self._wake.set()

    def on_nodes(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------------------------------ passes
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def run_pass(self) -> int:
        """Try every pending pod once; returns how many were bound."""
        if not self.leading():
            return 0
        with self._lock:
            items = sorted(self.pending.values(), key=lambda p: (-p.pod.priority, p.created, p.pod.key))
        singles = [p.pod for p in items if not p.pod.gang]
        gangs: dict[tuple[str, str], list[Pod]] = {}
        for p in items:
            if p.pod.gang:
                gangs.setdefault((p.pod.namespace, p.pod.gang), []).append(p.pod)
        bound = 0
        for pod in singles:
            if not self.leading():
                break
            decision = self.cluster.decide(pod)
            if decision.ok:
                bound += self._bind([decision])
            else:
                self._report(pod, decision.message())
        for (namespace, gang), members in gangs.items():
            if not self.leading():
                break
            bound += self._schedule_gang(namespace, gang, members)
        return bound

    def _bound_members(self, namespace: str, gang: str) -> int:
        with self.cluster.lock:
            return sum(1 for pod, _node in self.cluster.bound.values()
                       if pod.namespace == namespace and pod.gang == gang)

    def _schedule_gang(self, namespace: str, gang: str, members: list[Pod]) -> int:
        need = max(*(p.gang_min_member for p in members), 1) - self._bound_members(namespace, gang)
        if len(members) < need:
            msg = (f"0/{self.cluster.state.n_nodes} nodes are available: gang {gang} has "
                   f"{len(members)} of the {need} pending members it needs (GangNotReady).")
            for pod in members:
                self._report(pod, msg)
            return 0
        group = self.cluster.decide_group(members)
        if not group.ok:
            msg = f"gang {gang}: none of its {len(members)} pods bind: {group.message()}"
            for member in members:
                self._report(member, msg)
            return 0
        return self._bind(group.decisions, f"gang {gang}")

    def _bind(self, decisions: list[Decision], what: str = "") -> int:
        """Bind the group whole or roll it back (``Scheduler.bind_group``); returns how many pods bound."""
        result = self.cluster.scheduler.bind_group(decisions, may_bind=self.leading)
        if not result.ok:
            self.rollbacks += 1
            msg = f"{what or 'pod'}: {result.message()}"
            log.warning("%s", msg)
            if self.leading():
                for d in decisions:
                    self._report(d.pod, msg)
            return 0
        for d in result.bound:
            self.bound_count += 1
            with self._lock:
                self.pending.pop(d.pod.key, None)
                self._reported.pop(d.pod.key, None)
            assert d.node is not None
            self.binder.report_scheduled(d.pod, d.node, self.scheduler_name)
        return len(result.bound)

    def _report(self, pod: Pod, message: str) -> None:
        with self._lock:
            if self._reported.get(pod.key) == message:
                return
            self._reported[pod.key] = message
        self.binder.report_unschedulable(pod, message, self.scheduler_name)

    # ------------------------------------------------------------------------------------------ thread
    def run(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(self.retry_interval)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                self.run_pass()
            except Exception:
                log.exception("scheduling pass failed")

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="secondary-scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
