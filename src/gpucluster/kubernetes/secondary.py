"""A secondary scheduler for pods whose ``spec.schedulerName`` names it, with gang scheduling and leader
election.

Pending pods come from the informer. Each pass (on a change, or every ``retry_interval`` seconds) takes
them by priority, then age: a single pod is decided and bound; the pods of a gang (``gpucluster.io/gang``,
``gpucluster.io/gang-min-member``; or the label ``scheduling.x-k8s.io/pod-group`` with its PodGroup's
``minMember``; or ``spec.schedulingGroup`` with Kubernetes' PodGroup ``minCount``: :mod:`.gangs`) are decided
together under the cluster lock and bound only when every
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

import dataclasses
import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import KubeInputError, parse_pod, pod_key, pod_node, pod_phase
from gpucluster.kubernetes.gangs import COSCHEDULING_PREFIX, POD_GROUP_LABEL, GangRef, GroupSizes, gang_ref
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.model import Pod
from gpucluster.scheduler import Decision

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    pod: Pod
    created: str
    group: GangRef | None = None
    """The pod-group convention that made it a gang member (None: ours, or no gang)."""


class SecondaryScheduler:
    def __init__(self, cluster: KubeCluster, binder: KubeBinder, scheduler_name: str = "gpucluster",
                 elector: LeaderElector | None = None, retry_interval: float = 2.0,
                 group_sizes: GroupSizes | None = None) -> None:
        self.cluster = cluster
        self.group_sizes = group_sizes
        """Reads the size of a PodGroup (other tools' gang conventions); None: only our annotations count."""
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
            group = gang_ref(obj) if not pod.gang and self.group_sizes is not None else None
            if group is not None:
                pod = dataclasses.replace(pod, gang=group.gang)
            self.pending[key] = _Pending(pod, created, group)
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
        groups: dict[tuple[str, str], GangRef] = {}
        for p in items:
            if p.pod.gang:
                gangs.setdefault((p.pod.namespace, p.pod.gang), []).append(p.pod)
                if p.group is not None:
                    groups[(p.pod.namespace, p.pod.gang)] = p.group
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
            ref = groups.get((namespace, gang))
            if ref is not None:
                members = self._with_group_size(namespace, ref, members)
                if not members:
                    continue
            bound += self._schedule_gang(namespace, gang, members)
        return bound

    def _with_group_size(self, namespace: str, ref: GangRef, members: list[Pod]) -> list[Pod]:
        """Members carrying their PodGroup's size; none (each told why) while the PodGroup is missing. A size
        of 0 (Kubernetes' ``basic`` policy) makes each member a single pod (a gang of one)."""
        assert self.group_sizes is not None
        size = self.group_sizes.min_member(namespace, ref)
        if size is None:
            api = "/".join(ref.api[:2])
            msg = (f"0/{self.cluster.state.n_nodes} nodes are available: PodGroup {namespace}/{ref.name} "
                   f"({api}) not found (GangNotReady).")
            for pod in members:
                self._report(pod, msg)
            return []
        return [dataclasses.replace(p, gang_min_member=max(size, 1)) for p in members]

    def _bound_members(self, namespace: str, gang: str) -> int:
        # bound pods are read as parsed (our annotations only): a coscheduling member is known by its label
        label = gang.removeprefix(COSCHEDULING_PREFIX) if gang.startswith(COSCHEDULING_PREFIX) else None
        with self.cluster.lock:
            return sum(1 for pod, _node in self.cluster.bound.values()
                       if pod.namespace == namespace
                       and (pod.gang == gang or (label is not None and pod.labels.get(POD_GROUP_LABEL) == label)))

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
