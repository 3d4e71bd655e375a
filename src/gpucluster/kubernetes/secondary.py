"""A secondary scheduler for pods whose ``spec.schedulerName`` names it, with gang scheduling and leader
election.

Pending pods come from the informer. Each pass (on a change, or every ``retry_interval`` seconds) takes
them by priority, then age (``creationTimestamp``, whole seconds), then namespace/name, the order in which a gang's
members are decided and bound too: a single pod is decided and bound (its Binding on a small pool of threads while the
next pod is decided, every bind of a pass finished before the pass ends); the pods of a gang (``gpucluster.io/gang``,
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

Pods labelled ``gpucluster.io/queue`` are never bound here: they belong to the control plane's queue (``gpucluster
up --kubeconfig``), which admits and binds them (``docs/kubernetes.md``, "Who binds what").

Pods with ResourceClaims (or DRA-backed extended resources) are ours to allocate too: the pod is prepared with
one device request per claim request (:meth:`KubeCluster.prepare_pod`), placed by the same profile, and its
claims are written (allocation, ``reservedFor``) before the Binding; a pod whose claims are allocated already
goes to their node. A group rolled back takes its claim writes back too. When one of our pods is deleted or
finishes, it is taken out of its claims' ``reservedFor`` and a claim nobody holds any more is deallocated (what
kube-controller-manager's claim controller does, for a cluster that does not run it).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import KubeInputError, parse_pod, pod_key, pod_node, pod_phase
from gpucluster.kubernetes.gangs import COSCHEDULING_PREFIX, POD_GROUP_LABEL, GangRef, GroupSizes, gang_ref
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.kubernetes.podgroups import is_labelled
from gpucluster.model import Pod
from gpucluster.scheduler import Decision

log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Pending:
    pod: Pod
    created: str
    obj: Mapping[str, Any] | None = None
    """The Pod object, for pods that use DRA (prepared again at each pass: their claims change)."""
    group: GangRef | None = None
    """The pod-group convention that made it a gang member (None: ours, or no gang)."""


class SecondaryScheduler:
    def __init__(self, cluster: KubeCluster, binder: KubeBinder, scheduler_name: str = "gpucluster",
                 elector: LeaderElector | None = None, retry_interval: float = 2.0,
                 group_sizes: GroupSizes | None = None, claim_settle: float = 1.0, bind_workers: int = 4,
                 claim_batch: int = 32) -> None:
        """``claim_settle``: seconds between writing a pass's claim allocations and checking them against every
        claim on the server before binding (0: no check; see :meth:`_check_claims`). ``bind_workers``: single
        pods bound at once while the next are decided (1: each binds before the next is decided).
        ``claim_batch``: single pods with claims decided (and held assumed) before their claims are written and
        checked together after one settle (1: each pod waits a settle of its own)."""
        self.claim_settle = claim_settle
        self.claim_batch = max(1, claim_batch)
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
        self._releases: list[tuple[str, str, str]] = []
        """Claims to release: (namespace, claim name, pod uid) of our pods that are gone."""
        self.rollbacks = 0
        """Groups whose bind failed part way and were rolled back."""
        self.bind_workers = bind_workers
        self._pool: ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------------------------------ events
    def on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Informer listener."""
        key = pod_key(obj)
        spec = obj.get("spec") or {}
        mine = spec.get("schedulerName") == self.scheduler_name
        # a pod of the queue (label gpucluster.io/queue) is the control plane's to admit and bind, never ours
        waiting = (mine and not pod_node(obj) and pod_phase(obj) not in ("Succeeded", "Failed")
                   and not is_labelled(obj))
        finished = kind == "DELETED" or pod_phase(obj) in ("Succeeded", "Failed")
        if mine and finished:
            self._release_claims(obj)
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
            self.pending[key] = _Pending(pod, created, obj if self.cluster.uses_dra(obj) else None, group)
        self._wake.set()

    def _release_claims(self, obj: Mapping[str, Any]) -> None:
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        with self.cluster.lock:
            held = [(c.namespace, c.name) for c in self.cluster.claims.values()
                    if any(ref[2] == uid for ref in c.reserved_for)]
        if held:
            with self._lock:
                self._releases.extend((ns, name, uid) for ns, name in held)
            self._wake.set()

    def on_claim(self, kind: str, obj: Mapping[str, Any]) -> None:
        """Informer listener: a claim appeared or changed (a pod waiting for it may fit now)."""
        if kind != "SYNC":
            self._wake.set()

    def _do_releases(self) -> None:
        with self._lock:
            todo, self._releases = self._releases, []
        for namespace, name, uid in todo:
            try:
                self.binder.claims.release(namespace, name, uid)
                log.info("claim %s/%s released (pod %s is gone)", namespace, name, uid)
            except Exception as exc:
                log.warning("claim %s/%s not released: %s", namespace, name, exc)
                with self._lock:
                    self._releases.append((namespace, name, uid))

    def on_nodes(self) -> None:
        self._wake.set()

    # ------------------------------------------------------------------------------------------ passes
    def leading(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def run_pass(self) -> int:
        """Try every pending pod once; returns how many were bound."""
        if not self.leading():
            return 0
        self._do_releases()
        with self._lock:
            items = sorted(self.pending.values(), key=lambda p: (-p.pod.priority, p.created, p.pod.key))
        ready: list[tuple[Pod, list[str] | None, GangRef | None]] = []
        for p in items:
            if p.obj is None:
                ready.append((p.pod, None, p.group))
                continue
            try:
                pod = self.cluster.prepare_pod(p.obj)
                node = self.cluster.claim_node(p.obj)
            except KubeInputError as exc:  # a claim not there yet (ClaimNotReadyError) included: wait for it
                self._report(p.pod, f"0/{self.cluster.state.n_nodes} nodes are available: {exc}.")
                continue
            if p.pod.gang and not pod.gang:
                pod = dataclasses.replace(pod, gang=p.pod.gang)
            ready.append((pod, None if node is None else [node], p.group))
        singles = [(pod, cand) for pod, cand, _g in ready if not pod.gang]
        gangs: dict[tuple[str, str], list[Pod]] = {}
        groups: dict[tuple[str, str], GangRef] = {}
        for pod, _cand, group in ready:
            if pod.gang:
                gangs.setdefault((pod.namespace, pod.gang), []).append(pod)
                if group is not None:
                    groups[(pod.namespace, pod.gang)] = group
        bound = self._place_singles(singles)
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

    def _place_singles(self, singles: list[tuple[Pod, list[str] | None]]) -> int:
        """Decide each single pod in turn; a decided pod binds on one of ``bind_workers`` threads while the next
        is decided (as kube-scheduler's binding cycle runs beside its scheduling cycle), so the scheduling loop
        does not wait for each Binding's round trip. At most ``bind_workers`` binds are in flight (an
        assumption is held for seconds, not for a backlog). A pod whose claims must be written first is held
        (decided and assumed) until ``claim_batch`` such pods are, or the pass's singles end: their claims are
        then written and checked together after one settle (:meth:`_check_claims`), and each pod that kept its
        devices binds on its own, so N claim pods cost one settle, not N. Every bind of the pass is finished
        when this returns; returns how many bound."""
        bound = 0
        inflight: deque[Future[int]] = deque()
        errors: list[BaseException] = []
        staged: list[Decision] = []

        def settle(f: Future[int]) -> None:
            nonlocal bound
            try:
                bound += f.result()
            except Exception as exc:  # the pass fails after every bind settled
                errors.append(exc)

        def submit(decision: Decision) -> None:
            nonlocal bound
            if self.bind_workers <= 1:
                bound += self._bind([decision])
                return
            if len(inflight) >= self.bind_workers:
                settle(inflight.popleft())
            inflight.append(self._bind_pool().submit(self._bind, [decision]))

        def flush() -> None:
            batch, staged[:] = list(staged), []
            for decision in self._check_claims(batch):  # one settle for the batch; each survivor binds alone
                submit(decision)

        try:
            for pod, cand in singles:
                if not self.leading():
                    break
                decision = self.cluster.decide(pod, cand)
                if not decision.ok:
                    self._report(pod, decision.message())
                elif pod.key in self.cluster.claim_plans:
                    staged.append(decision)
                    if len(staged) >= self.claim_batch:
                        flush()
                else:
                    submit(decision)
            if staged and self.leading():
                flush()
        finally:
            for decision in staged:  # decided, not written (leadership lost, an error): give the devices back
                self.cluster.forget_plan(decision.pod.key)
                self.cluster.scheduler.cache.forget(decision.pod.key)
            while inflight:
                settle(inflight.popleft())
        if errors:
            raise errors[0]
        return bound

    def _bind_pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.bind_workers, thread_name_prefix="secondary-bind")
        return self._pool

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

    def _check_claims(self, decisions: list[Decision]) -> list[Decision]:
        """Write the claims of the decisions that have some, wait ``claim_settle`` seconds, then read every claim
        from the server: a claim of ours that shares a device with a claim kube-scheduler's DRA plugin allocated
        in the meantime (it cannot see our allocation before its informer does) is taken back and its pod tried
        again later. A pod whose claims were checked already (a batch of single pods: :meth:`_place_singles`)
        is not written or waited for again. Returns the decisions to bind (none of a group when one member lost
        its devices)."""
        plans = self.cluster.claim_plans
        staged = [d for d in decisions if (plan := plans.get(d.pod.key)) is not None and not plan.checked]
        if not staged:
            return decisions
        failed: dict[str, str] = {}
        for d in staged:
            st = self.binder.write_claims(d.pod)
            if not st.ok:
                failed[d.pod.key] = "; ".join(st.reasons)
        mine = {k: d.pod.key for d in staged if d.pod.key not in failed
                for k in (self.cluster.claim_plans[d.pod.key].written or ())}
        if self.claim_settle > 0 and mine:
            self._stop.wait(self.claim_settle)
            try:
                objs = self.binder.claims.list_all()
            except Exception as exc:
                objs = None
                for key in mine.values():
                    failed[key] = f"claims could not be checked: {exc}"
            if objs is not None:
                for claim, conflict in self.cluster.claim_conflicts(objs, mine).items():
                    failed[mine[claim]] = conflict
                for d in staged:  # read back with every claim: the bind need not read them again
                    if d.pod.key not in failed:
                        self.cluster.claim_plans[d.pod.key].checked = True
        if not failed:
            return decisions
        group = len(decisions) > 1 and any(d.pod.gang for d in decisions)
        out: list[Decision] = []
        for d in decisions:
            first = next(iter(failed.values()))
            why = failed.get(d.pod.key) or (f"a member of its gang lost its devices: {first}" if group else None)
            if why is None:
                out.append(d)
                continue
            log.info("pod %s not bound: %s", d.pod.key, why)
            self.binder.undo_claims(d.pod.key)
            self.cluster.forget_plan(d.pod.key)
            self.cluster.scheduler.cache.forget(d.pod.key)
            self._report(d.pod, f"claims not allocated: {why}; retrying")
        return out

    def _bind(self, decisions: list[Decision], what: str = "") -> int:
        """Bind the group whole or roll it back (``Scheduler.bind_group``); returns how many pods bound. Claims
        are written (and checked) first; a rollback takes them back."""
        decisions = self._check_claims(decisions)
        if not decisions:
            return 0
        result = self.cluster.scheduler.bind_group(decisions, may_bind=self.leading)
        if not result.ok:
            for d in decisions:
                self.binder.undo_claims(d.pod.key)
                self.cluster.forget_plan(d.pod.key)
            with self._lock:
                self.rollbacks += 1
            msg = f"{what or 'pod'}: {result.message()}"
            log.warning("%s", msg)
            if self.leading():
                for d in decisions:
                    self._report(d.pod, msg)
            return 0
        for d in result.bound:
            self.cluster.claim_plans.pop(d.pod.key, None)
            with self._lock:
                self.bound_count += 1
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
        if self._pool is not None:
            self._pool.shutdown(wait=True)
