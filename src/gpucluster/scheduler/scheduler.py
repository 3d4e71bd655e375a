"""The scheduler as a component: a framework, a cache over the cluster state, and the binding cycle."""

from __future__ import annotations

import time
from collections.abc import Callable

from gpucluster.model import Allocation, AllocationError, ClusterState, Pod
from gpucluster.scheduler.cache import SchedulerCache
from gpucluster.scheduler.core import Decision, Outcome, schedule_one
from gpucluster.scheduler.framework import Framework, Handle, PluginRegistry, Profile, Status
from gpucluster.scheduler.plugins import builtin_registry


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
    ) -> None:
        self.state = state
        self.framework = Framework(profile, registry or builtin_registry(), handle)
        self.cache = SchedulerCache(state, clock, assume_ttl)
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

    def delete(self, pod_key: str) -> Allocation | None:
        return self.cache.remove(pod_key)
