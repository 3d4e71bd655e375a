"""GPU speed: place a pod on the GPU model where its job's speed counts most (Gavel's effective throughput).

Gavel (Narayanan et al., OSDI'20) allocates heterogeneous GPUs by *effective throughput*: each job's throughput
on each model, normalised, so that a job which gains little from a fast model leaves it to one that gains much.
This plugin scores nodes by their GPU model with a score that a :class:`SpeedOracle` service
(``Handle.services["gpu_speeds"]``; the job engine's :class:`gpucluster.jobs.GpuSpeeds`) gives per model for the
pod's job, 0..1 (1 = the model where the job should run). Without the service, or for a pod whose job runs the
same everywhere, it skips. Score = 100 x the model's score for the node's GPU model (its first device's).

``GpuSpeedTier`` is the first stage of the default placement (``speed-fgd``): among the GPU models of the nodes a
pod can go to now (the candidates that passed Filter; for a gang's first member, the models that can hold the whole
gang), it keeps those where the pod's job runs within ``tolerance`` of its speed on the fastest of them (score 100)
and scores the others 0; with a weight above every other score's range the fragmentation score then chooses only
among the kept models. Under contention -- the queued jobs ask for more GPUs than those fastest models have idle --
it weighs the job's speed-up against the submitted job mix's (comparative advantage, as ``GpuSpeed``): it keeps
instead the models where the job's advantage is within ``tolerance`` of its best (the fastest of them), so a job
that gains little from the fast model leaves it to the queued jobs that gain much. It does the same, with nothing
waiting, when the fast models are scarce for the work that prefers them (``scarcity``): the submitted jobs whose
best comparative advantage lies on those models bring a larger share of the submitted reference work (GPUs x
``duration_s``) than those models' share of the cluster's GPUs -- a job that gains little would hold a fast GPU
that the later work gaining much will want (on a cluster of half H100 where 80 % of the work prefers H100, a
recommendation job goes to the L40S; on one of 87 % H100, the same job with the same mix still takes an idle
H100). **Whole nodes for a waiting gang** (``keep_whole``): while a queued job asks for tasks of more whole GPUs
than the pod (``TaskTable.queued_task``: a gang of 8-GPU tasks waiting for whole nodes), the kept models' nodes where
the pod would leave fewer idle GPUs than such a task needs -- the holes it could start in -- score 50 instead of
100, so stranding-FGD fills the kept models' other nodes first and breaks such a hole only when nothing else of
those models fits; the models kept stay the same. **Whole nodes ahead** (``whole_ahead``): under a queue that stops
at its head (``fifo``: once such a gang is the head nothing else is placed, so ``keep_whole`` never gets to act),
the same test runs with nothing waiting, for the whole nodes (every usable GPU idle) whose GPUs a task of a
submitted job asks for all of (``AheadTable.submitted_task``): a smaller pod fills the kept models' partly used
nodes before it breaks a whole one. **Short jobs together** (``group_short``, with ``keep_whole``):
while such a gang waits, a job among the shortest 10 % of the submitted jobs by reference duration
(``short_quantile``) goes first to the kept models' partly used nodes whose running jobs all end within that
duration from now, and any other job to partly used nodes that hold a longer job; each may start a whole node rather
than join the other class while more nodes are whole than gangs wait (:meth:`GpuSpeedTier._group`), so the GPUs the
short jobs free come back as whole nodes rather than as holes beside long jobs. **Under the other jobs' ends**
(``under_ends``): under a queue that lets jobs pass its head (not ``fifo``), when ``group_short`` does not act, a pod
goes first to the kept models' partly used nodes whose running jobs end no sooner than it would there, so it does not
keep a node busy after its jobs end (:meth:`GpuSpeedTier._under_ends`). **The longest jobs**
(``long_quantile``: among the longest 1 % of the submitted jobs by reference duration) keep their fastest models
whatever the comparative advantage, and (``reserve_long``) a job that is not long leaves a kept model's last idle
GPUs to the queued long jobs whose fastest model it is: when placing the pod there would leave fewer idle GPUs of
that model than those jobs ask for, and another model can take it, it keeps the fastest of the others instead (LPT:
the longest jobs set the makespan); counted in holes (``reserve_whole``): a long job of tasks of k whole GPUs needs
as many nodes' worth of k idle GPUs as it has tasks, and a node where the pod would leave fewer scores 0 while
another node of the kept models does not. **The head waits for its fast model** (``wait_fast``, PreFilter and
Filter): a long job at the head of a queue that stops at it (``fifo``), whose fast models lack the GPUs it needs now,
is kept off the slower models (``WaitsForFastModel``) while the fast ones' known expected ends free them soon enough
that it ends sooner than on the slower ones, by more GPU-seconds than the wait leaves idle, and while no more GPUs
than its own stand idle beside it (:meth:`GpuSpeedTier.pre_filter`). It skips -- and the profile is exactly the
speed-blind one -- on a cluster of one GPU model, for a pod whose job runs the same everywhere (no job, or no
``ref_gpu``/``speedup``: the Alibaba trace's pods), without a speed service, and when every candidate's model is
within the tolerance anyway and no hole is to be kept for a waiting task.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from pydantic import Field

from gpucluster.model import Pod, Snapshot
from gpucluster.scheduler.framework import (
    BoolArray,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    PluginRegistry,
    Reason,
    ReasonArray,
    Status,
)
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "GpuSpeed"
SERVICE = "gpu_speeds"


class SpeedOracle(Protocol):
    """Per GPU model, how well a pod's job uses it."""

    def model_scores(self, pod: Pod, models: Sequence[str]) -> Sequence[float] | None:
        """A score in 0..1 per model name of ``models`` (1 = where the job should run), or None when the job
        runs the same on every model."""
        ...


class SpeedTable(Protocol):
    """Per GPU model, how fast a pod's job runs there."""

    def model_speeds(self, pod: Pod, models: Sequence[str]) -> Sequence[float] | None:
        """The job's speed on each model of ``models`` (any common unit, > 0), or None when the job runs the
        same on every model."""
        ...


class MixTable(Protocol):
    """The job mix a job's speed-up is weighed against, and the demand waiting for GPUs."""

    def mix_speeds(self, models: Sequence[str]) -> Sequence[float] | None:
        """The mean over the jobs submitted so far of each job's speed on each model of ``models`` over its speed
        on the best of them (0..1), or None when no job with a speed is known."""
        ...

    def queued_gpus(self) -> float:
        """GPUs the queued jobs ask for, summed (the pod's own job included while it is being placed)."""
        ...


class TaskTable(Protocol):
    """The largest whole-GPU task the queued jobs wait with (``GpuSpeedTier``'s whole-node test)."""

    def queued_task(self) -> int:
        """The most whole GPUs one task of a queued job asks for on one node (0 when no queued job asks for whole
        GPUs)."""
        ...


class AheadTable(Protocol):
    """Whether the queue stops at its head, and the largest task submitted (``GpuSpeedTier``'s ``whole_ahead``)."""

    def holds_head(self) -> bool:
        """Whether a job being placed is the queue's head and the jobs behind it wait while it does (``fifo``)."""
        ...

    def submitted_task(self) -> int:
        """The most whole GPUs one task of the submitted jobs asks for on one node (0 when none asks for whole
        GPUs)."""
        ...


class EndTable(Protocol):
    """When the nodes' running jobs end, and which jobs are short (``GpuSpeedTier``'s finish-time grouping)."""

    def node_ends(self) -> Sequence[float] | None:
        """Per node, when the last of its running jobs is expected to end (-inf: none runs there); None when
        unknown."""
        ...

    def now(self) -> float:
        """The clock the ends are on."""
        ...

    def pod_duration(self, pod: Pod) -> float | None:
        """The pod's job's reference duration (None: no known job or no speed)."""
        ...

    def duration_quantile(self, quantile: float) -> float | None:
        """The ``quantile`` of the submitted jobs' reference durations (None before any)."""
        ...

    def queued_whole(self, size: int) -> int:
        """Queued jobs of whole GPUs whose tasks ask for at least ``size`` GPUs each."""
        ...


class LongTable(Protocol):
    """Whether a pod's job is among the longest submitted (``GpuSpeedTier``'s makespan test)."""

    def long_job(self, pod: Pod, quantile: float) -> bool:
        """Whether the job's reference duration is at least the ``quantile`` of the submitted jobs'."""
        ...


class ReserveTable(Protocol):
    """The GPUs the queued long jobs ask for, by the model where each runs fastest (``GpuSpeedTier``'s reserve)."""

    def queued_long(self, models: Sequence[str], quantile: float) -> Sequence[float] | None:
        """Per model of ``models``, the GPUs the queued jobs whose reference duration is at least the ``quantile``
        of the submitted jobs' ask for, each on its fastest model; None when no such job is queued."""
        ...


class HoleTable(Protocol):
    """What the queued long jobs ask for as holes, by the model where each runs fastest (``GpuSpeedTier``'s
    whole-node reserve)."""

    def queued_long_tasks(self, models: Sequence[str], quantile: float) -> Sequence[Mapping[int, float]] | None:
        """Per model of ``models``, task size in whole GPUs -> tasks that the queued long jobs (as
        :meth:`ReserveTable.queued_long`) ask for, each job on its fastest model (a job of GPU shares: size 1, its
        GPUs); None when no such job is queued."""
        ...


class WaitTable(Protocol):
    """When the fast models free GPUs, and what the queue's head has left to do (``GpuSpeedTier``'s
    ``wait_fast``)."""

    def holds_head(self) -> bool:
        """Whether a job being placed is the queue's head and the jobs behind it wait while it does (a queue
        without backfill, preemption or reclaim: ``fifo``)."""
        ...

    def pod_remaining(self, pod: Pod) -> tuple[float, int, int] | None:
        """The pod's job's remaining reference work (seconds), whole GPUs per task and tasks; None for a job of
        GPU shares or with no known work."""
        ...

    def free_at(self, idle: Sequence[int], nodes: Sequence[int], task_gpus: int, tasks: int) -> float | None:
        """When ``nodes`` (with ``idle`` idle GPUs each now) are expected to hold ``tasks`` holes of ``task_gpus``
        idle GPUs, from the known expected ends of their running jobs; None when never (or no clock)."""
        ...

    def now(self) -> float:
        """The clock :meth:`free_at` answers on."""
        ...


class WorkTable(Protocol):
    """How the submitted work splits by the GPU model its jobs prefer (``GpuSpeedTier``'s scarcity test)."""

    def preferred_work(self, models: Sequence[str]) -> Sequence[float] | None:
        """Per model of ``models``, the submitted reference work (GPUs x duration) of the jobs whose comparative
        advantage against ``mix_speeds`` is highest there, or None when no job with a speed is known."""
        ...


class GpuSpeed:
    name = NAME

    def __init__(self, oracle: SpeedOracle | None) -> None:
        self.oracle = oracle

    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        if self.oracle is None or not pod.device_requests:
            return SKIP
        scores = self.oracle.model_scores(pod, snap.models)
        if scores is None:
            return SKIP
        state.write(NAME, np.append(np.asarray(scores, np.float64), 0.0))  # index -1 (no device) -> 0
        return Status.success()

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        per_model: np.ndarray[Any, np.dtype[np.float64]] = state.read(NAME)
        model = snap.dev_model[candidates, 0]
        return np.asarray(100.0 * per_model[model], np.float64)


class _Args(PluginArgs):
    pass


def new_gpu_speed(args: Mapping[str, Any], handle: Handle) -> GpuSpeed:
    parse_args(_Args, NAME, args)
    oracle = handle.services.get(SERVICE)
    if oracle is not None and not hasattr(oracle, "model_scores"):
        raise TypeError(f"service {SERVICE!r} must have model_scores(pod, models)")
    return GpuSpeed(oracle)


TIER_NAME = "GpuSpeedTier"
WAIT_NAME = "GpuSpeedTier/wait"
"""CycleState key of ``GpuSpeedTier``'s ``wait_fast``: per model (and -1, no device), whether it is a slower one."""
DEFAULT_TOLERANCE = 0.1
"""``GpuSpeedTier``'s default: a model at least 90 % as fast as the best available one is as good as it."""


DEFAULT_LONG = 0.99
"""``GpuSpeedTier``'s default ``long_quantile``: a job whose reference duration is in the longest 1 % of the
submitted jobs' keeps its fastest models (LPT: the longest jobs set the makespan)."""


BREAK_SCORE = 50.0
"""``GpuSpeedTier``'s score for a kept model's node where the pod would break a hole a waiting whole-GPU task
needs: below the kept models' other nodes (100) by 500 points at the tier's weight, more than every score but the
annotations, and above the other models' (0), so the speed choice stands and only the node inside it moves."""


DEFAULT_SHORT = 0.1
"""``GpuSpeedTier``'s default ``short_quantile``: a job whose reference duration is at most the 10 % quantile of the
submitted jobs' is short for the finish-time grouping (``group_short``)."""


GROUP_SCORE = 100.0
OPEN_SCORE = 67.0
MIX_SCORE = 34.0
"""``GpuSpeedTier``'s scores (``group_short``) for a kept model's nodes: partly used nodes of the pod's class
(short or not) 100, whole nodes 67 (instead of ``BREAK_SCORE``), partly used nodes of the other class 34; 33-34
points apart, 330-340 at the tier's weight, more than every other score but the annotations (StrandingFGD 0..100 and
Topology 0..200 at their weights), and above the other models' (0)."""


UNDER_SCORE = 75.0
"""``GpuSpeedTier``'s score (``under_ends``) for a kept model's partly used node whose running jobs end before the pod
would: 250 points below the nodes where it would not (100) at the tier's weight, above ``BREAK_SCORE`` (so a hole a
waiting task needs is still kept first) and the other models' (0)."""


class GpuSpeedTier:
    """Two-stage speed-aware placement, stage one (see the module docstring)."""

    name = TIER_NAME

    def __init__(self, table: SpeedTable | None, tolerance: float, comparative: bool = True,
                 scarcity: bool = True, keep_whole: bool = True, long_quantile: float | None = DEFAULT_LONG,
                 reserve_long: bool = True, group_short: bool = True,
                 short_quantile: float = DEFAULT_SHORT, reserve_whole: bool = True,
                 wait_fast: bool = True, whole_ahead: bool = True, under_ends: bool = True) -> None:
        self.table = table
        self.under: EndTable | None = None
        if under_ends and all(hasattr(table, m) for m in ("node_ends", "now", "pod_duration")):
            self.under = table  # type: ignore[assignment]
        self.ends: EndTable | None = None
        if group_short and keep_whole and all(hasattr(table, m) for m in (
                "node_ends", "now", "pod_duration", "duration_quantile", "queued_whole")):
            self.ends = table  # type: ignore[assignment]
        self.short_quantile = short_quantile
        self.tolerance = tolerance
        self.mix: MixTable | None = None
        if comparative and hasattr(table, "mix_speeds") and hasattr(table, "queued_gpus"):
            self.mix = table  # type: ignore[assignment]
        self.tasks: TaskTable | None = None
        if keep_whole and hasattr(table, "queued_task"):
            self.tasks = table  # type: ignore[assignment]
        self.work: WorkTable | None = None
        if self.mix is not None and scarcity and hasattr(table, "preferred_work"):
            self.work = table  # type: ignore[assignment]
        self.long: LongTable | None = None
        self.long_quantile = long_quantile
        if self.mix is not None and long_quantile is not None and hasattr(table, "long_job"):
            self.long = table  # type: ignore[assignment]
        self.reserve: ReserveTable | None = None
        if self.long is not None and reserve_long and hasattr(table, "queued_long"):
            self.reserve = table  # type: ignore[assignment]
        self.holes: HoleTable | None = None
        if self.reserve is not None and reserve_whole and hasattr(table, "queued_long_tasks"):
            self.holes = table  # type: ignore[assignment]
        self.ahead: AheadTable | None = None
        if whole_ahead and all(hasattr(table, m) for m in ("holds_head", "submitted_task")):
            self.ahead = table  # type: ignore[assignment]
        self.wait: WaitTable | None = None
        if self.long is not None and wait_fast and all(hasattr(table, m) for m in (
                "holds_head", "pod_remaining", "free_at", "now")):
            self.wait = table  # type: ignore[assignment]

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        """``wait_fast``: a long job (``long_quantile``) at the head of a queue that stops at it (``fifo``) waits
        for its fast models -- the models within ``tolerance`` of its best speed on the cluster -- when they lack
        the holes it needs now and waiting is expected to end it sooner than running on the slower ones, by more
        than the GPUs it leaves idle: with ``W`` the time until the fast models' idle GPUs plus those of their
        running jobs' known expected ends (:meth:`WaitTable.free_at`) give it its tasks, ``t_fast`` and ``t_slow``
        its remaining work over its best speed on the fast and on the slower models, ``k`` its GPUs and ``b`` the
        idle GPUs beyond its own ``k`` (those the wait leaves idle, which under ``fifo`` the jobs behind it cannot
        take either), it waits while ``b <= k`` and ``k x (t_slow - t_fast - W) > b x W``: only on a nearly full
        cluster (a head-of-line block never leaves more than twice the job's own GPUs idle), and only while it
        pays in GPU-seconds. Filter then rejects the slower models' nodes (``WaitsForFastModel``), so the job
        starts on a fast model or waits; the test runs again at every pass, so the wait ends when the fast GPUs
        free, or as soon as more GPUs stand idle. SKIP (no filter) otherwise: a queue that backfills or preempts,
        no clock (the Kubernetes backend), a job that is not long, of GPU shares or without known work, one model,
        fast models with the holes now, no known end that gives them."""
        w = self.wait
        if w is None or len(snap.models) <= 1 or not pod.device_requests or not snap.dev_model.shape[1]:
            return SKIP
        if not w.holds_head() or not self._long(pod):
            return SKIP
        assert self.table is not None
        found = w.pod_remaining(pod)
        speeds = self.table.model_speeds(pod, snap.models)
        if found is None or speeds is None:
            return SKIP
        left, task, tasks = found
        node_model = snap.dev_model[:, 0]
        per_model = np.asarray(speeds, np.float64)
        present = np.zeros(per_model.shape, np.bool_)
        present[np.unique(node_model[node_model >= 0])] = True
        if not bool(present.any()):
            return SKIP
        best = float(per_model[present].max())
        fast = present & (per_model >= (1.0 - self.tolerance) * best)
        slow = present & ~fast
        if best <= 0.0 or not bool(slow.any()) or left <= 0.0:
            return SKIP
        nodes = np.flatnonzero((node_model >= 0) & fast[np.maximum(node_model, 0)])
        at = w.free_at(snap.node_idle[nodes].tolist(), nodes.tolist(), task, tasks)
        now = w.now()
        if at is None or at <= now:
            return SKIP
        wait = at - now
        k = float(task * tasks)
        gain = left / float(per_model[slow].max()) - left / best - wait
        others = max(0.0, float(snap.node_idle.sum()) - k)  # idle GPUs beyond its own, left idle while it waits
        if others > k or k * gain <= others * wait:
            return SKIP
        state.write(WAIT_NAME, np.append(slow, True))  # index -1 (no device): not a fast model either
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        """``wait_fast``: the slower models' nodes rejected (``WaitsForFastModel``) while the job waits for its fast
        models (:meth:`pre_filter`)."""
        slow: BoolArray = state.read(WAIT_NAME)
        out = np.zeros(snap.n_nodes, np.int16)
        out[slow[snap.dev_model[:, 0]]] = Reason.WaitsForFastModel
        return out

    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        if self.table is None or len(snap.models) <= 1 or not pod.device_requests or not snap.dev_model.shape[1]:
            return SKIP
        speeds = self.table.model_speeds(pod, snap.models)
        if speeds is None:
            return SKIP
        per_model = np.append(np.asarray(speeds, np.float64), 0.0)  # index -1 (no device) -> 0
        present = np.zeros(per_model.shape, np.bool_)
        present[np.unique(snap.dev_model[candidates, 0])] = True
        best = float(per_model[present].max()) if present.any() else 0.0
        if best <= 0.0:
            return SKIP
        keep = present & (per_model >= (1.0 - self.tolerance) * best)
        hit: BoolArray | None = None
        if self.mix is not None and not self._long(pod):
            keep = self._by_advantage(snap, per_model, present, keep)
            if self.holes is not None:
                keep, hit = self._reserved_holes(pod, snap, candidates, per_model, present, keep)
            else:
                keep = self._reserved(pod, snap, per_model, present, keep)
        breaks = self._breaks(pod, snap, candidates)
        ahead = self._ahead(pod, snap, candidates)
        if ahead is not None:
            breaks = ahead if breaks is None else breaks | ahead
        # every model the pod can go to is as good, and no whole node to keep or reserve: nothing to choose
        same = bool(keep[present].all()) and breaks is None and hit is None
        if same and self.ends is None and self.under is None:
            return SKIP
        score = np.where(keep[snap.dev_model[candidates, 0]], 100.0, 0.0)
        if hit is not None:
            score[hit] = 0.0
        if breaks is not None:
            score[breaks & (score > 0.0)] = BREAK_SCORE
        if not self._group(pod, snap, candidates, score) and not self._under_ends(
                pod, snap, candidates, score, per_model) and same:
            return SKIP  # the finish-time grouping did not choose either
        state.write(TIER_NAME, score)
        return Status.success()

    def _long(self, pod: Pod) -> bool:
        """Whether the pod's job is long enough to set the makespan (among the longest ``long_quantile`` of the
        submitted jobs by reference duration): it keeps its fastest models whatever the comparative advantage."""
        return self.long is not None and self.long.long_job(pod, float(self.long_quantile or 0.0))

    def _reserved(self, pod: Pod, snap: Snapshot, per_model: FloatArray, present: BoolArray,
                  keep: BoolArray) -> BoolArray:
        """A job that is not long leaves a kept model's last idle GPUs to the queued long jobs whose fastest model
        it is (LPT: the longest jobs set the makespan): when placing the pod there would leave fewer idle GPUs of
        that model than those jobs ask for, and another model can take the pod, it keeps instead the fastest of
        the others (within the tolerance). Otherwise ``keep`` stands."""
        if self.reserve is None:
            return keep
        want = self.reserve.queued_long(snap.models, float(self.long_quantile or 0.0))
        if want is None:
            return keep
        need = np.append(np.asarray(want, np.float64), 0.0)
        if not bool((need[keep] > 0.0).any()):
            return keep
        idle = np.append(np.bincount(snap.dev_model[snap.dev_idle & (snap.dev_model >= 0)],
                                     minlength=len(snap.models)), 0).astype(np.float64)
        size = float(sum(r.count for _, r in pod.device_requests))
        short = keep & (need > 0.0) & (idle - size < need)
        rest = present & ~short
        if not bool(short.any()) or not bool(rest.any()):
            return keep
        best = float(per_model[rest].max())
        return rest & (per_model >= (1.0 - self.tolerance) * best)

    def _reserved_holes(self, pod: Pod, snap: Snapshot, candidates: IntArray, per_model: FloatArray,
                        present: BoolArray, keep: BoolArray) -> tuple[BoolArray, BoolArray | None]:
        """:meth:`_reserved` counted in the holes the queued long jobs need (``reserve_whole``): a long job of
        tasks of ``k`` whole GPUs needs, on its fastest model, as many nodes' worth of ``k`` idle GPUs (a model's
        holes: the sum over its nodes of ``idle // k``) as it has tasks; a long job of GPU shares counts idle GPUs
        (``k`` = 1, as :meth:`_reserved`). A kept model's candidate *breaks* the reserve when placing the pod there
        would leave fewer such holes than those jobs need (a node whose holes the pod does not lessen -- fewer than
        ``k`` idle GPUs, or enough left after it -- never does). Those candidates score 0 when another candidate
        of a kept model does not break it; when every candidate of a kept model breaks it and another model can
        take the pod, the tier keeps the fastest of the others instead (within the tolerance). Otherwise ``keep``
        stands: a GPU a pod could take is never left idle for the reserve when nothing else can take the pod.
        Returns the models kept and, per candidate, whether it breaks the reserve (None: no candidate to move
        away from)."""
        assert self.holes is not None
        want = self.holes.queued_long_tasks(snap.models, float(self.long_quantile or 0.0))
        if want is None:
            return keep, None
        size = float(sum(r.count for _, r in pod.device_requests))
        node_model = snap.dev_model[:, 0]
        cand_model = node_model[candidates]
        idle_all = snap.node_idle.astype(np.float64)
        hit = np.zeros(candidates.shape[0], np.bool_)
        short = np.zeros(per_model.shape, np.bool_)
        for m, tasks in enumerate(want):
            if not tasks or not bool(keep[m]):
                continue
            on = cand_model == m
            if not bool(on.any()):
                continue
            idle_m = idle_all[node_model == m]
            cidle = idle_all[candidates[on]]
            h = np.zeros(cidle.shape[0], np.bool_)
            for k in sorted(tasks):
                need = sum(t * (k2 // k) for k2, t in tasks.items() if k2 >= k)  # larger tasks' holes hold k's
                if need <= 0.0:
                    continue
                if k <= 1:
                    after = float(idle_m.sum()) - size + np.zeros(cidle.shape[0])
                else:
                    held = float(np.floor_divide(idle_m, k).sum())
                    after = held - np.floor_divide(cidle, k) + np.floor_divide(np.maximum(cidle - size, 0.0), k)
                h |= after < need
            hit[on] = h
            short[m] = bool(h.all())
        if not bool(hit.any()):
            return keep, None
        rest = present & ~short
        if not bool(rest.any()):
            return keep, None  # nothing else can take the pod: it keeps the fast one
        if bool(short.any()):
            best = float(per_model[rest].max())
            keep = rest & (per_model >= (1.0 - self.tolerance) * best)
        hit &= keep[cand_model]
        return keep, (hit if bool(hit.any()) else None)

    def _breaks(self, pod: Pod, snap: Snapshot, candidates: IntArray) -> BoolArray | None:
        """Per candidate, whether the pod would break a hole a waiting whole-GPU task needs: while a queued job
        asks for tasks of ``need`` whole GPUs on one node, more than the pod asks for, the candidates with at
        least ``need`` idle GPUs that would keep fewer once the pod is there. None when there is no such
        candidate (or no queued such job, or the test is off)."""
        if self.tasks is None:
            return None
        need = self.tasks.queued_task()
        size = sum(r.count for _, r in pod.device_requests)
        if need <= size:
            return None
        idle = snap.node_idle[candidates]
        out = (idle >= need) & (idle - size < need)
        return out if bool(out.any()) else None

    def _ahead(self, pod: Pod, snap: Snapshot, candidates: IntArray) -> BoolArray | None:
        """``whole_ahead``: per candidate, whether the pod would break a whole node (every usable GPU idle) that a
        task of a submitted job asks for all of, under a queue that stops at its head (``fifo``). There, once a
        gang of whole-node tasks is the head, nothing is placed until it fits (``keep_whole`` never gets to act),
        so the whole nodes are kept before it comes. None when there is no such candidate (another queue, no
        submitted whole-node task, a pod as large as the node, the rule off)."""
        if self.ahead is None or not self.ahead.holds_head():
            return None
        task = self.ahead.submitted_task()
        size = sum(r.count for _, r in pod.device_requests)
        usable = snap.node_usable[candidates]
        out = (snap.node_idle[candidates] >= usable) & (usable <= task) & (usable > size)
        return out if bool(out.any()) else None

    def _group(self, pod: Pod, snap: Snapshot, candidates: IntArray, score: FloatArray) -> bool:
        """Finish-time grouping (``group_short``), while a queued job asks for tasks of more whole GPUs than the
        pod: short jobs (reference duration at most the ``short_quantile`` of the submitted jobs') share nodes
        with short jobs, the others with the others, so that the GPUs the short jobs free come back as whole nodes
        a waiting gang can use rather than as holes in nodes of longer jobs. Among the kept models' nodes (score
        > 0), a partly used node is *short* when the last of its running jobs is expected to end within that
        duration from now; the pod's class's partly used nodes keep 100, whole nodes score ``OPEN_SCORE`` (those
        the pod would break, ``BREAK_SCORE`` before) and the other class's partly used nodes ``MIX_SCORE`` -- when
        there is such a node to move away from, and either a node of the pod's class or a whole node the pod may
        start (:meth:`_may_open`). In place; whether it changed a score."""
        if self.ends is None or self.tasks is None:
            return False
        size = sum(r.count for _, r in pod.device_requests)
        if self.tasks.queued_task() <= size:
            return False
        kept = score > 0.0
        if not bool(kept.any()):
            return False
        mine = self.ends.pod_duration(pod)
        cut = self.ends.duration_quantile(self.short_quantile)
        ends = self.ends.node_ends()
        if mine is None or cut is None or ends is None or not np.isfinite(mine):
            return False
        nodes = candidates[kept]
        e = np.asarray(ends, np.float64)
        if nodes.max() >= e.shape[0]:
            return False
        left = e[nodes] - self.ends.now()
        busy = left > 0.0
        short = busy & (left <= cut)
        same = short if mine <= cut else busy & ~short
        off = busy & ~same & (score[kept] >= GROUP_SCORE)
        if not bool(off.any()):
            return False
        if not bool((same & (score[kept] >= GROUP_SCORE)).any()) and not self._may_open(snap, nodes, busy):
            return False
        score[score == BREAK_SCORE] = OPEN_SCORE
        score[np.flatnonzero(kept)[off]] = MIX_SCORE
        return True

    def _under_ends(self, pod: Pod, snap: Snapshot, candidates: IntArray, score: FloatArray,
                    per_model: FloatArray) -> bool:
        """``under_ends``, under a queue that lets jobs pass its head (not ``fifo``), when ``group_short`` did not
        act: among the kept models' candidates that score 100, the partly used nodes whose last running job is
        expected to end no sooner than the pod would there (now + its reference duration over its speed on the
        node's model) keep 100 -- placed there, the pod does not delay the time the node comes free whole -- and
        the other partly used nodes score ``UNDER_SCORE``, when there are both. So a short job fills a hole
        beside a longer one rather than keeping a node of ending jobs busy after them, and the GPUs that jobs free
        come back together, as whole nodes and large holes for the queued tasks of 4 and 8 GPUs, rather than as
        one- to three-GPU holes. In place; whether it changed a score."""
        u = self.under
        if u is None:
            return False
        holds = getattr(self.table, "holds_head", None)
        if holds is not None and holds():
            return False  # fifo: whole_ahead's queue; measured worse there
        kept = score >= GROUP_SCORE
        if not bool(kept.any()):
            return False
        mine = u.pod_duration(pod)
        ends = u.node_ends()
        if mine is None or ends is None or not np.isfinite(mine):
            return False
        idx = np.flatnonzero(kept)
        nodes = candidates[idx]
        e = np.asarray(ends, np.float64)
        if nodes.max() >= e.shape[0]:
            return False
        busy = snap.node_idle[nodes] < snap.node_usable[nodes]
        speed = per_model[snap.dev_model[nodes, 0]]
        end = u.now() + mine / np.where(speed > 0.0, speed, np.inf)
        under = busy & (end <= e[nodes])
        over = busy & ~under
        if not bool(under.any()) or not bool(over.any()):
            return False
        score[idx[over]] = UNDER_SCORE
        return True

    def _may_open(self, snap: Snapshot, nodes: IntArray, busy: BoolArray) -> bool:
        """Whether the pod may start a whole node of the kept models (``nodes``): there are more of them than
        queued jobs of whole-node tasks (each of which needs at least one)."""
        assert self.ends is not None and self.tasks is not None
        n = int(((snap.node_idle[nodes] >= snap.node_usable[nodes]) & ~busy).sum())
        return n > 0 and n > self.ends.queued_whole(self.tasks.queued_task())

    def _by_advantage(self, snap: Snapshot, per_model: FloatArray, present: BoolArray, fastest: BoolArray) -> BoolArray:
        """Stage one under contention: when the queued jobs ask for more GPUs than the pod's fastest models have
        idle, or those models are scarce for the work that prefers them (:meth:`_scarce`), keep the models where
        the job's comparative advantage (its speed there over its best, against the job mix's mean of the same:
        Gavel's) is within the tolerance of its best, and among those the fastest. Otherwise (or when the fastest
        models are also the best by advantage) ``fastest`` stands."""
        assert self.mix is not None
        mix = self.mix.mix_speeds(snap.models)
        if mix is None:
            return fastest
        top = float(per_model[:-1].max())
        share = np.append(np.asarray(mix, np.float64), 1.0)
        adv = (per_model / top) / np.where(share > 0.0, share, 1.0)
        by_adv = present & (adv >= (1.0 - self.tolerance) * float(adv[present].max()))
        if bool((by_adv & fastest).any()):
            return fastest  # the fastest models are also where the job's advantage is: nothing to leave to others
        idle = np.bincount(snap.dev_model[snap.dev_idle & (snap.dev_model >= 0)], minlength=len(snap.models))
        if self.mix.queued_gpus() <= float(idle[fastest[:-1]].sum()) and not self._scarce(snap, fastest):
            return fastest  # nothing waits beyond the idle fast GPUs, nor is the work preferring them too much for them
        best = float(per_model[by_adv].max())
        return by_adv & (per_model >= (1.0 - self.tolerance) * best)

    def _scarce(self, snap: Snapshot, fastest: BoolArray) -> bool:
        """Whether the submitted jobs whose best comparative advantage lies on the ``fastest`` models bring a
        larger share of the submitted reference work than those models' share of the cluster's GPUs (the work
        table keeps the sums as jobs are submitted; here only a few per-model figures are added)."""
        if self.work is None:
            return False
        found = self.work.preferred_work(snap.models)
        if found is None:
            return False
        work = np.asarray(found, np.float64)
        total = float(work.sum())
        if total <= 0.0:
            return False
        gpus = np.bincount(snap.dev_model[snap.dev_model >= 0], minlength=len(snap.models))
        fast = fastest[:-1]
        return float(work[fast].sum()) / total > float(gpus[fast].sum()) / float(gpus.sum())

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        per_node: FloatArray = state.read(TIER_NAME)
        return per_node


class _TierArgs(PluginArgs):
    tolerance: float = Field(DEFAULT_TOLERANCE, ge=0.0, lt=1.0)
    """A model counts as fast enough when the job's speed there is at least (1 - tolerance) x its best (and, under
    ``comparative``, its comparative advantage there at least (1 - tolerance) x its best advantage)."""
    comparative: bool = True
    """While the queued jobs ask for more GPUs than the job's fastest models have idle, weigh the job's speed-up
    against the job mix's (comparative advantage; needs a service with ``mix_speeds`` and ``queued_gpus``).
    False: absolute speed only."""
    scarcity: bool = True
    """Also weigh it (with nothing waiting) when the submitted jobs whose comparative advantage is highest on the
    job's fastest models bring a larger share of the submitted reference work than those models' share of the
    cluster's GPUs (needs ``preferred_work`` as well). False: only while jobs wait (the rule before)."""
    keep_whole: bool = True
    """While a queued job asks for tasks of more whole GPUs than the pod, score the kept models' nodes where the pod
    would leave fewer idle GPUs than such a task needs (breaking a hole it could start in) below the kept models'
    other nodes, still above the other models' (needs a service with ``queued_task``). False: the rule before."""
    long_quantile: float | None = Field(DEFAULT_LONG, gt=0.0, le=1.0)
    """A job whose reference duration is at least this quantile of the submitted jobs' keeps its fastest models
    even where the comparative advantage would move it (it may set the makespan; needs ``long_job``). None: the
    rule before."""
    reserve_long: bool = True
    """A job that is not long leaves a model's last idle GPUs to the queued long jobs (``long_quantile``) whose
    fastest model it is, when another model can take it (needs ``queued_long``). False: the rule before."""
    group_short: bool = True
    """While a queued job asks for tasks of more whole GPUs than the pod (with ``keep_whole``), short jobs (reference
    duration at most the ``short_quantile`` of the submitted jobs') share the kept models' nodes with short jobs and
    the others with the others, starting a whole node for it while more are whole than queued jobs of whole-node
    tasks (needs ``node_ends``, ``now``, ``pod_duration``, ``duration_quantile`` and ``queued_whole``). False: the
    rule before."""
    short_quantile: float = Field(DEFAULT_SHORT, gt=0.0, lt=1.0)
    """``group_short``'s quantile of the submitted jobs' reference durations at or below which a job is short."""
    reserve_whole: bool = True
    """``reserve_long`` counted in the holes the queued long jobs need: a long job of tasks of k whole GPUs keeps,
    on its fastest model, as many nodes' worth of k idle GPUs as it has tasks, and a pod that would break the last
    of them goes to another node of the model that does not, or to another model (needs ``queued_long_tasks``).
    False: idle GPUs counted (the rule before)."""
    whole_ahead: bool = True
    """Under a queue that stops at its head (``fifo``), while the submitted jobs include tasks of a whole node's
    GPUs, a smaller pod keeps whole nodes whole before any such gang waits: the kept models' whole nodes score
    ``BREAK_SCORE`` while a partly used node of theirs fits the pod (``keep_whole``'s test with the whole node as
    the hole; the models kept stay the same; needs ``holds_head`` and ``submitted_task``). False: the rule
    before."""
    under_ends: bool = True
    """Under a queue that lets jobs pass its head (not ``fifo``), a pod goes first to the kept models' partly used
    nodes whose running jobs are expected to end no sooner than it would there, before those it would keep busy
    after them (needs ``node_ends``, ``now`` and ``pod_duration``; the engine's clock). False: the rule before."""
    wait_fast: bool = True
    """A long job (``long_quantile``) at the head of a queue that stops at it (``fifo``) waits for its fast models
    while the known expected ends say they free the GPUs it needs soon enough that waiting ends it sooner than a
    start on a slower model, by more GPU-seconds than the wait leaves idle, and while at most as many GPUs as its own
    stand idle beside it (needs ``holds_head``, ``pod_remaining``, ``free_at`` and ``now``; the engine's clock).
    False: the rule before (it starts on whatever model can hold it)."""


def new_gpu_speed_tier(args: Mapping[str, Any], handle: Handle) -> GpuSpeedTier:
    parsed = parse_args(_TierArgs, TIER_NAME, args)
    table = handle.services.get(SERVICE)
    if table is not None and not hasattr(table, "model_speeds"):
        table = None  # a service without speeds (e.g. a scores-only oracle): speed cannot choose
    return GpuSpeedTier(table, parsed.tolerance, parsed.comparative, parsed.scarcity, parsed.keep_whole,
                        parsed.long_quantile, parsed.reserve_long, parsed.group_short, parsed.short_quantile,
                        parsed.reserve_whole, parsed.wait_fast, parsed.whole_ahead, parsed.under_ends)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_gpu_speed)
    reg.register(TIER_NAME, new_gpu_speed_tier)
