"""The framework runtime: instantiate a profile's plugins and run the phases over them.

Permit and the waiting-pods map (kube-scheduler's ``waitingPodsMap``): a Permit plugin that answers WAIT holds
the pod's reservation; the pod goes into :attr:`Framework.waiting_pods` until every plugin that made it wait
calls :meth:`WaitingPod.allow` (the Gang plugin does, for all members, when the last one is reserved) or the
pod is rejected (:meth:`Framework.reject_waiting`: its Reserve plugins are unreserved). Group placement
(:meth:`gpucluster.scheduler.Scheduler.schedule_group`) is built on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpucluster.model import Allocation, DeviceRequest, Pod, Snapshot
from gpucluster.scheduler.framework.cycle_state import CycleState
from gpucluster.scheduler.framework.interface import (
    BindCheckPlugin,
    BindPlugin,
    BoolArray,
    DeviceScorePlugin,
    FilterExplainer,
    FilterPlugin,
    FloatArray,
    IntArray,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReasonArray,
    ReservePlugin,
    ScorePlugin,
    UnbindPlugin,
)
from gpucluster.scheduler.framework.profile import Profile
from gpucluster.scheduler.framework.registry import Handle, PluginRegistry
from gpucluster.scheduler.framework.status import Code, Reason, Status


@dataclass(slots=True)
class WaitingPod:
    """A reserved pod whose Permit said WAIT: it holds its reservation until allowed or rejected."""

    pod: Pod
    node: int
    state: CycleState
    pending: set[str] = field(default_factory=set)
    """Plugins that made it wait and have not allowed it yet."""

    def allow(self, plugin: str) -> None:
        """``plugin`` lets the pod go on (kube-scheduler's ``WaitingPod.Allow``)."""
        self.pending.discard(plugin)

    @property
    def allowed(self) -> bool:
        return not self.pending


class Framework:
    """A profile made runnable. Phases run plugins in profile order."""

    def __init__(self, profile: Profile, registry: PluginRegistry, handle: Handle | None = None) -> None:
        self.profile = profile
        self.handle = handle or Handle(rng=np.random.default_rng(profile.seed))
        self.handle.framework = self
        self.plugins: list[Plugin] = []
        self.weights: dict[str, float] = {}
        names: set[str] = set()
        for cfg in profile.plugins:
            if cfg.name in names:
                raise ValueError(f"profile {profile.scheduler_name!r}: plugin {cfg.name!r} listed twice")
            names.add(cfg.name)
            plugin = registry.create(cfg.name, cfg.args, self.handle)
            self.plugins.append(plugin)
            self.weights[plugin.name] = cfg.weight

        def of(kind: type) -> list:  # type: ignore[type-arg]
            return [p for p in self.plugins if isinstance(p, kind)]

        self.pre_filters: list[PreFilterPlugin] = of(PreFilterPlugin)
        self.filters: list[FilterPlugin] = of(FilterPlugin)
        self.explainers: list[FilterExplainer] = of(FilterExplainer)
        self.post_filters: list[PostFilterPlugin] = of(PostFilterPlugin)
        self.pre_scores: list[PreScorePlugin] = of(PreScorePlugin)
        self.scores: list[ScorePlugin] = [p for p in of(ScorePlugin) if self.weights[p.name] > 0]
        self.device_scores: list[DeviceScorePlugin] = [
            p for p in of(DeviceScorePlugin) if self.weights[p.name] > 0
        ]
        self.reserves: list[ReservePlugin] = of(ReservePlugin)
        self.permits: list[PermitPlugin] = of(PermitPlugin)
        self.pre_binds: list[PreBindPlugin] = of(PreBindPlugin)
        self.binds: list[BindPlugin] = of(BindPlugin)
        self.bind_checks: list[BindCheckPlugin] = of(BindCheckPlugin)
        self.unbinds: list[UnbindPlugin] = of(UnbindPlugin)
        self.post_binds: list[PostBindPlugin] = of(PostBindPlugin)
        self.waiting_pods: dict[str, WaitingPod] = {}
        """Pod key -> the reserved pod a Permit plugin holds (see the module docstring)."""
        self.next_start_node = 0
        """Where the next decision starts looking for feasible nodes when the profile scores only a share of them
        (kube-scheduler's ``nextStartNodeIndex``; ``scheduler.core.schedule_one``)."""

    @property
    def rng(self) -> np.random.Generator:
        return self.handle.rng

    def plugin(self, name: str) -> Plugin:
        for p in self.plugins:
            if p.name == name:
                return p
        raise KeyError(name)

    # -------------------------------------------------------------------------------- filter
    def run_pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        for p in self.pre_filters:
            st = p.pre_filter(state, pod, snap)
            if st.code == Code.SKIP:
                state.skip_filter.add(p.name)
            elif not st.ok:
                return Status(st.code, st.reasons, st.plugin or p.name)
        return Status.success()

    def run_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        reasons: ReasonArray | None = None
        for p in self.filters:
            if p.name in state.skip_filter:
                continue
            verdict = p.filter(state, pod, snap)
            if reasons is None:  # a copy: the plugin may keep the array it returned
                reasons = np.array(verdict, np.int16)
            else:  # keep the first rejecting plugin's reason per node
                np.copyto(reasons, verdict, where=reasons == 0)
        return reasons if reasons is not None else np.zeros(snap.n_nodes, np.int16)

    def explain(self, state: CycleState, pod: Pod, snap: Snapshot, reasons: ReasonArray) -> None:
        """Replace generic ``DeviceDoesNotFit`` codes by the explaining plugins' precise reasons (in place)."""
        generic = np.flatnonzero(reasons == Reason.DeviceDoesNotFit)
        if generic.size == 0:
            return
        for p in self.explainers:
            if p.name in state.skip_filter:
                continue
            precise = p.explain(state, pod, snap, generic)
            keep = precise != 0
            reasons[generic[keep]] = precise[keep]
            generic = generic[~keep]
            if generic.size == 0:
                return

    def run_post_filter(self, state: CycleState, pod: Pod, snap: Snapshot, reasons: ReasonArray) -> PostFilterResult:
        for p in self.post_filters:
            result = p.post_filter(state, pod, snap, reasons)
            if result.status.ok:
                return result
        return PostFilterResult(Status.unschedulable("PostFilter"))

    # -------------------------------------------------------------------------------- score
    def run_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        for p in self.pre_scores:
            st = p.pre_score(state, pod, snap, candidates)
            if st.code == Code.SKIP:
                state.skip_score.add(p.name)
        total = np.zeros(candidates.size, np.float64)
        for sp in self.scores:
            if sp.name in state.skip_score:
                continue
            total += self.weights[sp.name] * sp.score(state, pod, snap, candidates)
        return total

    def score_devices(
        self, state: CycleState, pod: Pod, snap: Snapshot, node: int, request: DeviceRequest,
        feasible: BoolArray, taken: IntArray,
    ) -> FloatArray:
        total = np.zeros(snap.device_slots, np.float64)
        for p in self.device_scores:
            total += self.weights[p.name] * p.score_devices(state, pod, snap, node, request, feasible, taken)
        return total

    # -------------------------------------------------------------------------------- reserve / permit
    def run_reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        for p in self.reserves:
            st = p.reserve(state, pod, snap, node)
            if not st.ok:
                self.run_unreserve(state, pod, snap, node)
                return Status(st.code, st.reasons, st.plugin or p.name)
        return Status.success()

    def run_unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        for p in reversed(self.reserves):
            p.unreserve(state, pod, snap, node)

    def run_permit(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        """SUCCESS, a rejection, or WAIT: then the pod is in :attr:`waiting_pods` until the plugins that made it
        wait allow it (``WaitingPod.allow``) or it is rejected (:meth:`reject_waiting`)."""
        waiting: Status | None = None
        held: set[str] | None = None
        for p in self.permits:
            st = p.permit(state, pod, snap, node)
            if st.code == Code.WAIT:
                waiting = Status(Code.WAIT, st.reasons, st.plugin or p.name)
                held = {p.name} if held is None else held | {p.name}
            elif not st.ok:
                return Status(st.code, st.reasons, st.plugin or p.name)
        if waiting is not None and held is not None:
            self.waiting_pods[pod.key] = WaitingPod(pod, node, state, held)
            return waiting
        return Status.success()

    def waiting(self) -> Iterator[WaitingPod]:
        """The waiting pods (kube-scheduler's ``IterateOverWaitingPods``); a Permit plugin may allow them."""
        return iter(list(self.waiting_pods.values()))

    def reject_waiting(self, pod_key: str, snap: Snapshot) -> bool:
        """Drop a waiting pod and undo its reservation (Unreserve, in reverse order); False if not waiting."""
        wp = self.waiting_pods.pop(pod_key, None)
        if wp is None:
            return False
        self.run_unreserve(wp.state, wp.pod, snap, wp.node)
        return True

    # -------------------------------------------------------------------------------- bind
    def run_bind_cycle(self, pod: Pod, allocation: Allocation) -> Status:
        """PreBind, then the first Bind plugin that does not SKIP, then PostBind."""
        for p in self.pre_binds:
            st = p.pre_bind(pod, allocation)
            if not st.ok:
                return Status(st.code, st.reasons, st.plugin or p.name)
        bound = False
        for b in self.binds:
            st = b.bind(pod, allocation)
            if st.code == Code.SKIP:
                continue
            if not st.ok:
                return Status(st.code, st.reasons, st.plugin or b.name)
            bound = True
            break
        if not bound and self.binds:
            return Status.error("Bind", "no bind plugin bound the pod")
        for pb in self.post_binds:
            pb.post_bind(pod, allocation)
        return Status.success()


    def run_bind_check(self, pod: Pod, allocation: Allocation) -> Status:
        """Every BindCheck plugin: would the pod bind now (no effect)?"""
        for p in self.bind_checks:
            st = p.check_bind(pod, allocation)
            if not st.ok:
                return Status(st.code, st.reasons, st.plugin or p.name)
        return Status.success()

    def run_unbind(self, pod: Pod, allocation: Allocation) -> Status:
        """Every Unbind plugin, in reverse order: undo a bind (the group is rolled back). The first failure is
        returned; the other plugins still run."""
        first = Status.success()
        for p in reversed(self.unbinds):
            st = p.unbind(pod, allocation)
            if not st.ok and first.ok:
                first = Status(st.code, st.reasons, st.plugin or p.name)
        return first


def plugin_names(plugins: Sequence[Plugin]) -> list[str]:
    return [p.name for p in plugins]
