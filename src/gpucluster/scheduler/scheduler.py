"""The scheduler as a component: a framework, a cache over the cluster state, and the binding cycle.

Group placement (:meth:`Scheduler.schedule_group`) places the pods of one job (a gang, or any list of pods that
must start together) all or none: each pod goes through the framework in turn and holds its reservation (the
Gang plugin's Permit keeps the members in the framework's waiting-pods map until the last one is reserved,
then allows them all); if any member does not fit, every member reserved so far is unreserved (Gang, Topology,
Quota ... undo their part) and its assumed allocation forgotten, so nothing is ever half-placed.

Group binding (:meth:`Scheduler.bind_group`) is the one way a placed group is bound, whoever binds it (the
framework's own ``schedule_group(bind=True)``, the control plane on Kubernetes, the secondary scheduler), with
one failure rule: **a group binds whole or is rolled back**. First every member's bind is checked without
effect (BindCheck plugins: on Kubernetes a dry-run Binding, so a deleted pod or an admission webhook that says
no is found before anything binds; a group of one skips the check, its own bind failing is the same answer);
then each member binds in turn (PreBind, Bind, PostBind), asking ``may_bind`` (leadership) before each. A
failed check or bind, an exception or a lost leadership rolls the group back: the members bound so far are
unbound (Unbind plugins, in reverse order; on Kubernetes the bound pod is deleted and, unless a controller owns
it, created again unbound), every member is unreserved and its
allocation given back. The group is then pending again and the caller retries it in a later pass.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpucluster.model import Allocation, AllocationError, ClusterState, Pod
from gpucluster.scheduler.cache import SchedulerCache
from gpucluster.scheduler.core import Decision, Outcome, schedule_one
from gpucluster.scheduler.framework import Framework, Handle, PluginRegistry, Profile, Reason, Status
from gpucluster.scheduler.plugins import builtin_registry


@dataclass(slots=True)
class GroupDecision:
    """What :meth:`Scheduler.schedule_group` decided for a group of pods."""

    decisions: list[Decision] = field(default_factory=list)
    """One SCHEDULED decision per pod, in order, when the group was placed (assumed; bound when asked)."""
    failed: Decision | None = None
    """The decision of the first pod that did not fit (the group was given up), else None."""
    cycles: int = 0
    """Pods that went through a scheduling cycle (all of them, or up to the first that did not fit)."""

    @property
    def ok(self) -> bool:
        return self.failed is None

    def message(self) -> str:
        """Why the group does not fit (the failing pod's counted reasons), or where it went."""
        if self.failed is not None:
            return self.failed.message()
        nodes = sorted({d.node for d in self.decisions if d.node})
        return f"assigned to {', '.join(nodes)}"


@dataclass(slots=True)
class GroupBind:
    """What :meth:`Scheduler.bind_group` did."""

    bound: list[Decision] = field(default_factory=list)
    """Every decision of the group, bound, when it bound whole; empty after a rollback."""
    failed: Decision | None = None
    """The member whose check or bind failed (or that was next when leadership was lost); None when bound."""
    status: Status = field(default_factory=Status.success)
    """Why the group was rolled back."""
    rolled_back: list[Decision] = field(default_factory=list)
    """Members that had bound and were unbound again."""
    unbind_errors: list[str] = field(default_factory=list)
    """Unbinds that failed (``pod: why``): those pods may still be bound."""

    @property
    def ok(self) -> bool:
        return self.failed is None

    def message(self) -> str:
        if self.failed is None:
            return f"bound {len(self.bound)} pod(s)"
        what = "; ".join(self.status.reasons) or self.status.code.name
        text = f"pod {self.failed.pod.key} did not bind ({what}); the group was rolled back"
        if self.rolled_back:
            text += f" ({len(self.rolled_back)} bound member(s) unbound)"
        if self.unbind_errors:
            text += f"; not unbound: {'; '.join(self.unbind_errors)}"
        return text


def _always() -> bool:
    return True


_LOST = Status.error("Leader", "leadership lost before the group was bound")


class Scheduler:
    """Schedule pods one at a time against a :class:`ClusterState`.

    ``schedule`` decides and assumes; ``bind`` runs the binding cycle (Bind plugins, e.g. a Kubernetes
    binder) and confirms or forgets; ``schedule_and_bind`` does both (the simulator's path).
    """

    def __init__(
        self,
        state: ClusterState,
        profile: Profile,
        registry: PluginRegistry | None = None,
        clock: Callable[[], float] = time.monotonic,
        handle: Handle | None = None,
        assume_ttl: float = 30.0,
        lock: threading.RLock | None = None,
    ) -> None:
        """``lock``: the lock that serialises decisions and every change of ``state`` the scheduler makes (its
        cache's); a runtime that changes the state elsewhere too passes its own (``KubeCluster.lock``)."""
        self.state = state
        self.framework = Framework(profile, registry or builtin_registry(), handle)
        self.cache = SchedulerCache(state, clock, assume_ttl, lock)
        self.on_decision: Callable[[Decision, float], None] | None = None
        """Called after every decision of :meth:`schedule` with the decision and the seconds it took (metrics:
        ``ControlPlaneMetrics.observe``)."""

    def schedule(self, pod: Pod) -> Decision:
        t0 = time.perf_counter()
        with self.cache.lock:
            decision = schedule_one(self.framework, pod, self.state.snapshot())
            if decision.allocation is not None:
                try:
                    self.cache.assume(decision.allocation)
                except AllocationError as exc:  # pragma: no cover - an internal invariant
                    raise AssertionError(f"scheduler chose an allocation that does not fit: {exc}") from exc
        if self.on_decision is not None:
            self.on_decision(decision, time.perf_counter() - t0)
        return decision

    def bind(self, decision: Decision) -> Status:
        assert decision.allocation is not None and decision.outcome == Outcome.SCHEDULED
        st = self.framework.run_bind_cycle(decision.pod, decision.allocation)
        if st.ok:
            self.cache.confirm(decision.pod.key)
        else:
            self.cache.forget(decision.pod.key)
        return st

    def schedule_and_bind(self, pod: Pod) -> Decision:
        decision = self.schedule(pod)
        if decision.outcome == Outcome.SCHEDULED:
            st = self.bind(decision)
            if not st.ok:
                decision.outcome = Outcome.ERROR
                decision.status = st
        return decision

    def schedule_group(self, pods: Sequence[Pod], bind: bool = True) -> GroupDecision:
        """Place every pod of ``pods`` or none (see the module docstring). With ``bind`` the binding cycle runs
        for each pod once all are placed (a bind that fails gives the whole group up); without it the caller
        binds the returned decisions (:meth:`bind`) or forgets them (:meth:`forget_group`)."""
        fw = self.framework
        done: list[Decision] = []
        with self.cache.lock:
            for pod in pods:
                try:
                    d = self.schedule(pod)
                except BaseException:  # a plugin failed: give up what the group holds, let the caller decide
                    self.forget_group(done)
                    raise
                if not d.ok:
                    self.forget_group(done)
                    return GroupDecision(failed=d, cycles=len(done) + 1)
                done.append(d)
            waiting = fw.waiting_pods
            stuck = [d for d in done if d.pod.key in waiting and not waiting[d.pod.key].allowed] if waiting else []
            if stuck:
                self.forget_group(done)
                pod = stuck[0].pod
                why = Status.unschedulable("Gang", Reason.GangNotReady.name,
                                           f"gang {pod.gang} needs {pod.gang_min_member} members, "
                                           f"{len(done)} were placed")
                return GroupDecision(failed=Decision(pod, Outcome.UNSCHEDULABLE, status=why,
                                                     total_nodes=int(self.state.present.sum())), cycles=len(done))
            for d in done:
                if waiting:
                    waiting.pop(d.pod.key, None)
                d.outcome = Outcome.SCHEDULED
        if bind:
            result = self.bind_group(done)
            if not result.ok:
                assert result.failed is not None
                return GroupDecision(failed=result.failed, cycles=len(done))
        return GroupDecision(decisions=done, cycles=len(done))

    def bind_group(self, decisions: Sequence[Decision], may_bind: Callable[[], bool] = _always) -> GroupBind:
        """Bind every decision of a placed group (``schedule_group(bind=False)``) or none: the one failure rule
        of the module docstring. ``may_bind`` is asked before each bind (a leader elector's ``is_leader``);
        False rolls the group back. An exception of a plugin rolls it back too, then propagates."""
        fw = self.framework
        bound: list[Decision] = []
        # a group of one is not checked first: its bind failing leaves nothing bound to roll back, so the dry run
        # would only double its calls to the API server
        checked = decisions if len(decisions) > 1 else ()
        try:
            for d in checked:
                assert d.allocation is not None
                st = fw.run_bind_check(d.pod, d.allocation) if may_bind() else _LOST
                if not st.ok:
                    return self._roll_back(decisions, bound, d, st)
            for d in decisions:
                st = self.bind(d) if may_bind() else _LOST
                if not st.ok:
                    return self._roll_back(decisions, bound, d, st)
                bound.append(d)
        except BaseException:
            self._roll_back(decisions, bound, d, Status.error("Bind", "a plugin raised"))
            raise
        for d in decisions:
            self.cache.confirm(d.pod.key)
        return GroupBind(bound=list(decisions))

    def _roll_back(self, decisions: Sequence[Decision], bound: Sequence[Decision], failed: Decision,
                   why: Status) -> GroupBind:
        """Unbind what bound (outside the cache lock: on Kubernetes these are API calls), then Unreserve every
        member and give back what it holds."""
        errors: list[str] = []
        for d in reversed(bound):
            assert d.allocation is not None
            st = self.framework.run_unbind(d.pod, d.allocation)
            if not st.ok:
                errors.append(f"{d.pod.key}: {'; '.join(st.reasons) or st.code.name}")
        self._give_up(decisions)
        failed.outcome, failed.status = Outcome.ERROR, why
        return GroupBind(failed=failed, status=why, rolled_back=list(bound), unbind_errors=errors)

    def _give_up(self, decisions: Sequence[Decision]) -> None:
        """Unreserve every pod of a group that did not bind (quota, gang and topology bookkeeping) and give back
        what each holds, bound or only assumed."""
        fw = self.framework
        with self.cache.lock:
            snap = self.state.snapshot()
            for d in reversed(decisions):
                if d.cycle is not None:
                    fw.run_unreserve(d.cycle, d.pod, snap, d.node_index)
                self.cache.remove(d.pod.key)

    def forget_group(self, decisions: Sequence[Decision]) -> None:
        """Give up reserved, not yet bound decisions: Unreserve them (waiting or not) and forget their
        assumed allocations."""
        fw = self.framework
        with self.cache.lock:
            snap = self.state.snapshot()
            for d in reversed(decisions):
                if not fw.reject_waiting(d.pod.key, snap) and d.cycle is not None:
                    fw.run_unreserve(d.cycle, d.pod, snap, d.node_index)
                self.cache.forget(d.pod.key)

    def delete(self, pod_key: str) -> Allocation | None:
        return self.cache.remove(pod_key)
