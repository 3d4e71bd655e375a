"""``schedule_one``: one pod through PreFilter, Filter, (PostFilter), Score, Reserve and Permit.

Pure with respect to the cluster: it reads a snapshot and returns a :class:`Decision`; the caller assumes the
allocation in its cache and runs the binding cycle.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucluster.model import Allocation, Pod, Snapshot
from gpucluster.scheduler.framework import Code, CycleState, Framework, Reason, ReasonArray, Status


class Outcome(enum.StrEnum):
    SCHEDULED = "scheduled"
    """A node and devices were chosen; bind it."""
    WAITING = "waiting"
    """Reserved, but a Permit plugin holds it (a gang that is not complete yet)."""
    UNSCHEDULABLE = "unschedulable"
    ERROR = "error"


@dataclass(slots=True)
class Decision:
    pod: Pod
    outcome: Outcome
    node: str | None = None
    node_index: int = -1
    allocation: Allocation | None = None
    reasons: dict[str, int] = field(default_factory=dict)
    """Rejection reason -> number of nodes rejected for it (kube-scheduler's "3/8 Insufficient...")."""
    status: Status = field(default_factory=Status.success)
    score: float = 0.0
    feasible_nodes: int = 0
    total_nodes: int = 0
    scored_nodes: int = 0
    """Feasible nodes the decision scored: all of them, or the profile's ``percentage_of_nodes_to_score`` share."""
    nominated_node: str | None = None
    victims: list[str] = field(default_factory=list)
    cycle: CycleState | None = field(default=None, repr=False, compare=False)
    """The scheduling cycle's state of a reserved pod (Unreserve needs it when its group is given up)."""

    @property
    def ok(self) -> bool:
        return self.outcome in (Outcome.SCHEDULED, Outcome.WAITING)

    def message(self) -> str:
        """``0/8 nodes are available: 3 InsufficientGPUMemory, 5 NodeUnschedulable.``"""
        if self.ok:
            return f"assigned to {self.node}"
        parts = ", ".join(f"{n} {r}" for r, n in sorted(self.reasons.items(), key=lambda kv: (-kv[1], kv[0])))
        extra = "; ".join(self.status.reasons) if not self.reasons and self.status.reasons else ""
        return f"0/{self.total_nodes} nodes are available: {parts or extra}."

    def devices_json(self, init: bool = False) -> list[list[dict[str, Any]]]:
        """Per app container (per init container with ``init``), the devices it got."""
        if self.allocation is None:
            return []
        return [
            [{"id": g.uuid, "memory_mib": g.memory_mib, "cores": g.core_milli // 10} for g in per_container]
            for per_container in (self.allocation.init_devices if init else self.allocation.devices)
        ]


def count_reasons(reasons: ReasonArray, present: np.ndarray[Any, Any] | None = None) -> dict[str, int]:
    r = reasons if present is None else reasons[present]
    counts = np.bincount(r[r > 0].astype(np.int64), minlength=len(Reason))
    return {Reason(i).name: int(c) for i, c in enumerate(counts) if c}


def _pick(scores: np.ndarray[Any, Any], fw: Framework) -> int:
    """Index of the best score; ties broken at random (or to the first) as the profile says."""
    best = scores.max()
    tied = np.flatnonzero(scores >= best - 1e-9)
    if tied.size == 1 or fw.profile.tie_break == "first":
        return int(tied[0])
    return int(tied[fw.rng.integers(tied.size)])


MIN_FEASIBLE_NODES_TO_FIND = 100
"""kube-scheduler's ``minFeasibleNodesToFind``: a decision scores at least this many feasible nodes (if there are)."""
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5
"""kube-scheduler's floor for its adaptive percentage (``percentageOfNodesToScore: 0``)."""


def nodes_to_score(percentage: int, num_all_nodes: int) -> int:
    """How many feasible nodes a decision looks for before it stops and scores them, as kube-scheduler's
    ``numFeasibleNodesToFind``: every node below 100 nodes; else ``num_all_nodes * percentage / 100`` (rounded
    down), at least 100; ``percentage`` 0 is adaptive: 50 minus one per 125 nodes, at least 5."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND or percentage >= 100:
        return num_all_nodes
    if percentage <= 0:
        percentage = max(50 - num_all_nodes // 125, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    return max(num_all_nodes * percentage // 100, MIN_FEASIBLE_NODES_TO_FIND)


def _share_to_score(fw: Framework, feasible: np.ndarray[Any, Any], num_all: int,
                    size: int) -> np.ndarray[Any, Any]:
    """The feasible nodes (sorted indices) this decision scores: the first ``nodes_to_score`` found walking the
    ``size`` node slots round-robin from ``fw.next_start_node``, which then moves past the last node looked at
    (kube-scheduler's ``nextStartNodeIndex``), so successive decisions spread over the whole cluster."""
    limit = nodes_to_score(fw.profile.percentage_of_nodes_to_score, num_all)
    if feasible.size <= limit:
        return feasible
    start = fw.next_start_node % size
    cut = int(np.searchsorted(feasible, start))
    walk = np.concatenate([feasible[cut:], feasible[:cut]])[:limit]
    fw.next_start_node = (int(walk[-1]) + 1) % size
    return np.sort(walk)


def schedule_one(fw: Framework, pod: Pod, snap: Snapshot) -> Decision:
    state = CycleState()
    present = np.asarray(snap.present)
    total = int(present.sum())
    st = fw.run_pre_filter(state, pod, snap)
    if not st.ok:
        outcome = Outcome.ERROR if st.code == Code.ERROR else Outcome.UNSCHEDULABLE
        reasons = dict.fromkeys(st.reasons, total) if st.code != Code.ERROR else {}
        return Decision(pod, outcome, status=st, reasons=reasons, total_nodes=total)

    reasons_arr = fw.run_filter(state, pod, snap)
    reasons_arr[~present] = Reason.NodeNotReady
    feasible = np.flatnonzero(reasons_arr == 0)
    if feasible.size == 0:
        fw.explain(state, pod, snap, reasons_arr)
        pf = fw.run_post_filter(state, pod, snap, reasons_arr)
        d = Decision(pod, Outcome.UNSCHEDULABLE, reasons=count_reasons(reasons_arr, present),
                     status=Status.unschedulable("Filter"), total_nodes=total)
        if pf.status.ok and pf.nominated_node >= 0:
            d.nominated_node = snap.nodes[pf.nominated_node].name
            d.victims = list(pf.victims)
        return d

    found = int(feasible.size)
    feasible = _share_to_score(fw, feasible, total, int(present.size))
    scores = fw.run_score(state, pod, snap, feasible)
    scored = int(feasible.size)
    attempts = 0
    last = Status.success()
    while attempts < fw.profile.max_reserve_attempts and feasible.size:
        attempts += 1
        k = _pick(scores, fw)
        node = int(feasible[k])
        last = fw.run_reserve(state, pod, snap, node)
        if last.ok:
            permit = fw.run_permit(state, pod, snap, node)
            if permit.code not in (Code.SUCCESS, Code.WAIT, Code.SKIP):
                fw.run_unreserve(state, pod, snap, node)
                return Decision(pod, Outcome.UNSCHEDULABLE, status=permit, total_nodes=total,
                                reasons=dict.fromkeys(permit.reasons, 1))
            spec = snap.nodes[node]
            alloc = Allocation(
                pod_key=pod.key, node=spec.name, cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib,
                devices=state.grants or tuple(() for _ in pod.containers), tenant=pod.charged_tenant, pod=pod,
                init_devices=state.init_grants or tuple(() for _ in pod.init_containers),
            )
            return Decision(
                pod, Outcome.WAITING if permit.code == Code.WAIT else Outcome.SCHEDULED, node=spec.name,
                node_index=node, allocation=alloc, status=permit, score=float(scores[k]),
                feasible_nodes=found, total_nodes=total, scored_nodes=scored, cycle=state,
            )
        # the node failed a joint check in Reserve: record why and try the next best
        first = last.reasons[0] if last.reasons else ""
        reasons_arr[node] = Reason[first] if first in Reason.__members__ else Reason.PolicyRejected
        keep = np.arange(feasible.size) != k
        feasible, scores = feasible[keep], scores[keep]
    if feasible.size == 0 or attempts >= fw.profile.max_reserve_attempts:
        fw.explain(state, pod, snap, reasons_arr)
        return Decision(pod, Outcome.UNSCHEDULABLE, reasons=count_reasons(reasons_arr, present),
                        status=last if not last.ok else Status.unschedulable("Reserve"), total_nodes=total)
    raise AssertionError("unreachable")
