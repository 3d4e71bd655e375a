"""GPU speed in the job engine: a job's work is seconds on its reference GPU, its run time on the GPUs it got is
that work over the speed model's factor (:mod:`gpucluster.perf`), times the placement's network slowdown.

:class:`GpuSpeeds` binds a :class:`~gpucluster.perf.SpeedModel` to a cluster's state: it reads the GPU model of
each device a job was given (``ClusterState.dev_model``) and answers the job's speed there (a gang spread over
several models runs at its slowest member's pace). A job with no ``ref_gpu`` and no ``speedup`` runs at 1.0
everywhere (the behaviour before the speed model); so does a job on a GPU model the catalog does not know
(listed in :attr:`GpuSpeeds.unknown`). :meth:`GpuSpeeds.wrap` turns an engine ``Slowdown`` (the network model's)
into one that also applies the speed: the engine then stretches (or shortens) the run by ``slowdown / speed``
and records the speed in ``job.extra["speed"]``.

Speeds are cached per (job speed description, GPU model), so starting a job costs a few dictionary look-ups.

It is also the ``gpu_speeds`` service of the ``GpuSpeed`` placement plugin (:meth:`GpuSpeeds.model_scores`:
Gavel's effective throughput, the ``gavel`` queue and placement policies) and of the ``GpuSpeedTier`` plugin
(:meth:`GpuSpeeds.model_speeds`: the default placement keeps a job on the models nearly as fast as its best).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from gpucluster.jobs.model import Job, JobKind, JobSpec, JobState
from gpucluster.model import ClusterState, Pod
from gpucluster.model.labels import JOB_LABEL
from gpucluster.perf import JobSpeed, SpeedModel

SPEED_KEY = "speed"
"""``Job.extra`` key of the speed factor of the job's current (or last) run."""
KINDS = {JobKind.TRAIN: "training", JobKind.INFER: "inference"}
"""Job kind -> the speed model's kind."""

Slowdown = Callable[[Job, list[tuple[int, int]]], tuple[float, float | None]]
SpeedKey = tuple[Any, ...]


@lru_cache(maxsize=1)
def default_speed_model() -> SpeedModel:
    """The speed model over the bundled catalog (loaded once per process)."""
    return SpeedModel()


def speed_key(spec: JobSpec) -> SpeedKey | None:
    """What a job's speed depends on; None when it runs the same on every GPU model."""
    if not spec.ref_gpu and not spec.speedup:
        return None
    return (spec.kind, spec.model, spec.ref_gpu, spec.work_class, tuple(sorted(spec.speedup.items())))


def describe(spec: JobSpec, model: SpeedModel | None = None) -> JobSpeed | None:
    """The job's speed description (None: the same on every model). Raises ValueError naming the field."""
    if speed_key(spec) is None:
        return None
    return (model or default_speed_model()).job(
        kind=KINDS[spec.kind], model=spec.model, ref_gpu=spec.ref_gpu or None, work_class=spec.work_class or None,
        measured=dict(spec.speedup))


_FIELDS = {"speed": "speedup", "kind": "kind", "ref_gpu": "ref_gpu", "work_class": "work_class"}


def check_speed_fields(spec: JobSpec, model: SpeedModel | None = None) -> None:
    """Raise ``ValueError("field: why")`` naming the job's request field (``ref_gpu``, ``work_class``,
    ``speedup.<MODEL>``) when its speed fields do not describe a speed (unknown GPU model or work class, a
    speed that is not > 0, speeds without a ``ref_gpu``)."""
    try:
        describe(spec, model)
    except ValueError as exc:
        where, _, why = str(exc).partition(": ")
        head, dot, rest = where.partition(".")
        raise ValueError(f"{_FIELDS.get(head, head)}{dot}{rest}: {why}") from None


class GpuSpeeds:
    """Job speeds on the GPU models of one cluster state (see the module docstring)."""

    def __init__(self, state: ClusterState, model: SpeedModel | None = None) -> None:
        self.state = state
        self.model = model if model is not None else default_speed_model()
        self._jobs: dict[SpeedKey, JobSpeed] = {}
        self._factors: dict[tuple[SpeedKey, str], float] = {}
        self.jobs: Mapping[str, Job] | None = None
        """The engine's jobs (set by the driver), for :meth:`model_scores` to find a pod's job."""
        self._mix: dict[SpeedKey, int] = {}
        self.waiting_gpus: Callable[[], float] | None = None
        """GPUs the engine's queued jobs ask for (set by the driver), for :meth:`queued_gpus`."""
        self.waiting_task: Callable[[], int] | None = None
        """The most whole GPUs one task of a queued job asks for (set by the driver), for :meth:`queued_task`."""
        self._mix_specs: dict[SpeedKey, JobSpec] = {}
        self._scores: dict[tuple[SpeedKey, tuple[str, ...]], list[float]] = {}
        self._mixes: dict[tuple[str, ...], list[float]] = {}
        self._work: dict[SpeedKey, float] = {}
        """Submitted reference work (GPUs x ``duration_s``) per speed key, summed on :meth:`note`."""
        self._preferred: dict[tuple[str, ...], list[float]] = {}
        self._longest: list[tuple[float, str]] = []
        """The submitted jobs' ``(duration_s, job_id)`` (those with a speed and a finite duration), sorted, for
        :meth:`long_job` and :meth:`queued_long`."""
        self._task = 0
        """The most whole GPUs one task of a submitted job (with a speed) asks for, for :meth:`submitted_task`."""
        self.waiting_whole: Callable[[int], int] | None = None
        """Queued jobs of whole GPUs with tasks of at least so many GPUs (set by the driver), for
        :meth:`queued_whole`."""
        self.clock: Callable[[], float] | None = None
        """The engine's clock (set by the driver), for :meth:`node_ends` and :meth:`now`."""
        self._ends: dict[str, tuple[float, tuple[int, ...], tuple[int, ...]]] = {}
        """Per started job (with a speed and a finite duration): when its run is expected to end (start + remaining
        work x slowdown / speed), the nodes it runs on and the whole GPUs it holds on each (0 for a job of GPU
        shares); noted by :meth:`wrap`'s slowdown."""
        self.head_of_line = False
        """The engine's queue stops at the first job that waits (no backfill, no preemption, no reclaim, no
        offers: ``fifo``), so a job being placed is the queue's head and the jobs behind it wait while it does
        (set by the driver), for :meth:`holds_head`."""
        self._node_end: np.ndarray[Any, np.dtype[np.float64]] | None = None
        self._node_end_t = -math.inf

    @property
    def unknown(self) -> set[str]:
        """GPU models of the cluster the catalog does not know (jobs ran there at their reference speed)."""
        return self.model.unknown

    def job_speed(self, spec: JobSpec) -> JobSpeed | None:
        """The job's speed description (None: the same on every model). Raises ValueError naming the field."""
        key = speed_key(spec)
        if key is None:
            return None
        found = self._jobs.get(key)
        if found is None:
            made = describe(spec, self.model)
            assert made is not None
            found = self._jobs[key] = made
        return found

    def check(self, spec: JobSpec) -> None:
        """Raise ValueError (``job ID: field: why``) if the job's speed fields are wrong."""
        try:
            self.job_speed(spec)
        except ValueError as exc:
            raise ValueError(f"job {spec.job_id}: {exc}") from None

    def factor(self, spec: JobSpec, gpu_model: str) -> float:
        """Speed of ``spec`` on ``gpu_model`` relative to its reference GPU (1.0 without one)."""
        key = speed_key(spec)
        if key is None:
            return 1.0
        cached = self._factors.get((key, gpu_model))
        if cached is None:
            job = self.job_speed(spec)
            assert job is not None
            cached = self._factors[(key, gpu_model)] = self.model.factor(job, gpu_model)
        return cached

    def gang_factor(self, spec: JobSpec, gpu_models: Iterable[str]) -> float:
        """Pace of a job over these models: its slowest member's speed (1.0 for none)."""
        return min((self.factor(spec, m) for m in gpu_models), default=1.0)

    def models_of(self, devices: Sequence[tuple[int, int]]) -> set[str]:
        """GPU model names of ``(node index, device index)`` pairs."""
        names = self.state.models.names
        ids = {int(self.state.dev_model[n, d]) for n, d in devices}
        return {names[i] for i in ids if i >= 0}

    def on_devices(self, spec: JobSpec, devices: Sequence[tuple[int, int]]) -> float:
        """Speed of ``spec`` on the devices of its placement."""
        if speed_key(spec) is None:
            return 1.0
        return self.gang_factor(spec, self.models_of(devices))

    # ------------------------------------------------------------------ heterogeneity-aware placement
    def note(self, spec: JobSpec) -> None:
        """Count a submitted job in the workload mix :meth:`model_scores` compares against."""
        key = speed_key(spec)
        if key is not None:
            self._mix[key] = self._mix.get(key, 0) + 1
            self._mix_specs.setdefault(key, spec)
            work = spec.gpu_share * spec.duration_s
            if math.isfinite(work):  # an open-ended job (no duration) brings no known work
                self._work[key] = self._work.get(key, 0.0) + work
            if math.isfinite(spec.duration_s):
                bisect.insort(self._longest, (float(spec.duration_s), spec.job_id))
            if spec.whole:
                self._task = max(self._task, int(spec.task_gpus))
            self._scores.clear()
            self._mixes.clear()
            self._preferred.clear()

    def normalized(self, spec: JobSpec, models: Sequence[str]) -> list[float]:
        """The job's speed on each model over its speed on the best of them (1.0 = its best option)."""
        speeds = [self.factor(spec, m) for m in models]
        best = max(speeds, default=1.0)
        return [s / best for s in speeds]

    def model_scores(self, pod: Pod, models: Sequence[str]) -> list[float] | None:
        """Gavel's effective throughput for the pod's job, per model, 0..1 (the ``GpuSpeed`` plugin's oracle).

        The job's normalised speed on each model (over its best) divided by the mean normalised speed of the
        submitted jobs on that model (its *comparative* advantage there), scaled so that the best model scores 1:
        a job that loses little on a slower model goes there and leaves the fast one to jobs that lose much.
        None for a job that runs the same everywhere."""
        job = self.jobs.get(pod.labels.get(JOB_LABEL, "")) if self.jobs is not None else None
        if job is None:
            return None
        key = speed_key(job.spec)
        if key is None:
            return None
        names = tuple(models)
        found = self._scores.get((key, names))
        if found is None:
            mine = self.normalized(job.spec, names)
            mix = self._mix_mean(names)
            adv = [n / m if m > 0 else n for n, m in zip(mine, mix, strict=True)]
            top = max(adv, default=1.0) or 1.0
            found = self._scores[(key, names)] = [a / top for a in adv]
        return found

    def model_speeds(self, pod: Pod, models: Sequence[str]) -> list[float] | None:
        """The pod's job's speed on each model (relative to its reference GPU): the ``GpuSpeedTier`` plugin's
        table (the default placement's first stage). None for a pod of no known job or a job that runs the same
        everywhere."""
        job = self.jobs.get(pod.labels.get(JOB_LABEL, "")) if self.jobs is not None else None
        if job is None or speed_key(job.spec) is None:
            return None
        return [self.factor(job.spec, m) for m in models]

    def long_job(self, pod: Pod, quantile: float) -> bool:
        """Whether the pod's job is among the longest of the submitted jobs (those with a speed and a duration,
        its own included once noted): no more than ``(1 - quantile)`` of them, and at least one (itself), have a
        ``duration_s`` at least as long. The ``GpuSpeedTier`` plugin's test of a job that may set the makespan;
        jobs of one length tie, and none of them is long. False for a pod of no known job, an open-ended job, or
        before any job was noted."""
        job = self.jobs.get(pod.labels.get(JOB_LABEL, "")) if self.jobs is not None else None
        if job is None or not self._longest or not math.isfinite(job.spec.duration_s):
            return False
        as_long = len(self._longest) - bisect.bisect_left(self._longest, (float(job.spec.duration_s), ""))
        return 0 < as_long <= self._long_count(quantile)

    def _long_count(self, quantile: float) -> int:
        """How many of the submitted jobs may count as long at ``quantile``: ``(1 - quantile)`` of them, at least
        one."""
        return max(1, math.floor((1.0 - quantile) * len(self._longest)))

    def queued_long(self, models: Sequence[str], quantile: float) -> list[float] | None:
        """Per model of ``models``, the GPUs that the queued long jobs (those :meth:`long_job` calls long at
        ``quantile``) ask for, each counted on the model where it runs fastest (the first on a tie): the
        ``GpuSpeedTier`` plugin's reserve of fast GPUs for the jobs that may set the makespan. Only the longest
        ``(1 - quantile)`` of the submitted jobs are looked at. None when no such job is queued (or no engine is
        attached)."""
        found = self._queued_long(models, quantile)
        if found is None:
            return None
        out = [0.0] * len(models)
        for m, job in found:
            out[m] += float(job.spec.gpu_share)
        return out

    def queued_long_tasks(self, models: Sequence[str], quantile: float) -> list[dict[int, float]] | None:
        """Per model of ``models``, what the queued long jobs of :meth:`queued_long` ask for as holes: task size
        in whole GPUs -> tasks (a job of whole GPUs: ``task_gpus`` -> ``num_tasks``, each task needing that many
        idle GPUs on one node; a job of GPU shares: 1 -> its GPUs, as :meth:`queued_long` counts them), each job
        on the model where it runs fastest. The ``GpuSpeedTier`` plugin's whole-node reserve. None when no such
        job is queued (or no engine is attached)."""
        found = self._queued_long(models, quantile)
        if found is None:
            return None
        out: list[dict[int, float]] = [{} for _ in models]
        for m, job in found:
            spec = job.spec
            size, tasks = (int(spec.task_gpus), float(spec.num_tasks)) if spec.whole else (1, float(spec.gpu_share))
            out[m][size] = out[m].get(size, 0.0) + tasks
        return out

    def _queued_long(self, models: Sequence[str], quantile: float) -> list[tuple[int, Job]] | None:
        """The queued long jobs (at ``quantile``, looking only at the longest ``(1 - quantile)`` of the submitted
        jobs), each with the index in ``models`` of the model where it runs fastest (the first on a tie); None
        when there is none (or no engine is attached)."""
        if self.jobs is None or not self._longest:
            return None
        k = self._long_count(quantile)
        out: list[tuple[int, Job]] = []
        i = len(self._longest)
        while i > 0:
            d = self._longest[i - 1][0]
            j = bisect.bisect_left(self._longest, (d, ""))  # the first of the jobs of this length (ties go together)
            if len(self._longest) - j > k:
                break
            for _, jid in self._longest[j:i]:
                job = self.jobs.get(jid)
                if job is None or job.state != JobState.QUEUED:
                    continue
                speeds = [self.factor(job.spec, m) for m in models]
                out.append((speeds.index(max(speeds)), job))
            i = j
        return out or None

    def _note_end(self, job: Job, devices: Sequence[tuple[int, int]], end: float) -> None:
        per: dict[int, int] = {}
        for n, _ in devices:
            per[int(n)] = per.get(int(n), 0) + 1
        nodes = tuple(sorted(per))
        whole = job.spec.whole
        self._ends[job.spec.job_id] = (end, nodes, tuple(per[n] if whole else 0 for n in nodes))
        cached = self._node_end
        if cached is not None and nodes:
            idx = np.asarray(nodes, np.int64)
            if idx.max() < cached.shape[0]:
                cached[idx] = np.maximum(cached[idx], end)
            else:
                self._node_end = None

    def node_ends(self) -> np.ndarray[Any, np.dtype[np.float64]] | None:
        """Per node of the state, when the last of its running jobs with a speed is expected to end (-inf: none
        runs there): the ``GpuSpeedTier`` plugin's finish-time alignment. Rebuilt when the clock moves (jobs
        that stopped, or whose expected end has passed, are dropped); a job started since is added at once. None
        without a clock."""
        if self.clock is None or self.jobs is None:
            return None
        now = self.clock()
        n = int(self.state.node_idle.shape[0])
        cached = self._node_end
        if cached is not None and self._node_end_t == now and cached.shape[0] == n:
            return cached
        out = np.full(n, -math.inf, np.float64)
        jobs = self.jobs
        for jid in list(self._ends):
            end, nodes, _ = self._ends[jid]
            job = jobs.get(jid)
            if job is None or job.state != JobState.RUNNING or end <= now:
                del self._ends[jid]
                continue
            for i in nodes:
                if i < n and end > out[i]:
                    out[i] = end
        self._node_end, self._node_end_t = out, now
        return out

    def free_at(self, idle: Sequence[int], nodes: Sequence[int], task_gpus: int, tasks: int) -> float | None:
        """When ``nodes`` (node indices of the state, with ``idle`` whole idle GPUs each now) are expected to hold
        ``tasks`` holes of ``task_gpus`` idle GPUs (the sum over them of ``idle // task_gpus``), counting the whole
        GPUs of their running jobs as free from each job's expected end: the ``GpuSpeedTier`` plugin's wait for a
        fast model (``wait_fast``). The clock's time when they hold them now; None when the known ends never give
        them (a job with no speed or no duration, a job of GPU shares, or one past its expected end never frees
        its GPUs here), and without a clock."""
        if self.clock is None or self.jobs is None or task_gpus <= 0 or tasks <= 0:
            return None
        now = self.clock()
        have = {int(n): int(i) for n, i in zip(nodes, idle, strict=True)}
        holes = sum(i // task_gpus for i in have.values())
        if holes >= tasks:
            return now
        frees: list[tuple[float, int, int]] = []
        jobs = self.jobs
        for jid, (end, on, gpus) in self._ends.items():
            job = jobs.get(jid)
            if job is None or job.state != JobState.RUNNING or end <= now:
                continue
            for n, g in zip(on, gpus, strict=True):
                if g > 0 and n in have:
                    frees.append((end, n, g))
        frees.sort()
        for end, n, g in frees:
            before = have[n]
            have[n] = before + g
            holes += have[n] // task_gpus - before // task_gpus
            if holes >= tasks:
                return end
        return None

    def holds_head(self) -> bool:
        """Whether a job being placed is the queue's head and the jobs behind it wait while it does
        (:attr:`head_of_line`)."""
        return self.head_of_line

    def pod_remaining(self, pod: Pod) -> tuple[float, int, int] | None:
        """The pod's job's remaining work (reference seconds), the whole GPUs each of its tasks asks for and its
        tasks; None for no known job, a job without a speed or a finite duration, or one of GPU shares."""
        job = self.jobs.get(pod.labels.get(JOB_LABEL, "")) if self.jobs is not None else None
        if job is None or speed_key(job.spec) is None or not job.spec.whole:
            return None
        left = job.remaining_s
        if not math.isfinite(left):
            return None
        return float(left), int(job.spec.task_gpus), int(job.spec.num_tasks)

    def duration_quantile(self, quantile: float) -> float | None:
        """The ``quantile`` of the submitted jobs' ``duration_s`` (those with a speed and a finite duration; None
        before any)."""
        if not self._longest:
            return None
        k = min(len(self._longest) - 1, max(0, math.ceil(quantile * len(self._longest)) - 1))
        return self._longest[k][0]

    def pod_duration(self, pod: Pod) -> float | None:
        """The pod's job's ``duration_s`` (None: no known job or no speed)."""
        job = self.jobs.get(pod.labels.get(JOB_LABEL, "")) if self.jobs is not None else None
        if job is None or speed_key(job.spec) is None:
            return None
        return float(job.spec.duration_s)

    def queued_whole(self, size: int) -> int:
        """Queued jobs of whole GPUs whose tasks ask for at least ``size`` GPUs each (0 without an engine)."""
        return self.waiting_whole(size) if self.waiting_whole is not None else 0

    def now(self) -> float:
        """The engine's clock (0.0 without one)."""
        return self.clock() if self.clock is not None else 0.0

    def queued_gpus(self) -> float:
        """GPUs the engine's queued jobs ask for now, summed (0 when no engine is attached): the ``GpuSpeedTier``
        plugin's measure of contention."""
        return self.waiting_gpus() if self.waiting_gpus is not None else 0.0

    def submitted_task(self) -> int:
        """The most whole GPUs one task of the submitted jobs (those with a speed) asks for on one node (0 before
        any asks for whole GPUs): the ``GpuSpeedTier`` plugin's test of whether whole nodes are worth keeping."""
        return self._task

    def queued_task(self) -> int:
        """The most whole GPUs one task of the engine's queued jobs asks for on one node (0 when none does, or
        no engine is attached): the ``GpuSpeedTier`` plugin's measure of the whole nodes waiting work needs."""
        return self.waiting_task() if self.waiting_task is not None else 0

    def mix_speeds(self, models: Sequence[str]) -> list[float] | None:
        """The submitted jobs' mean normalised speed on each model (each job's speed there over its speed on the
        best of ``models``, averaged over the jobs noted so far, counted per job): the ``GpuSpeedTier`` plugin's
        measure of the job mix a job's comparative advantage is weighed against. None before any job with a speed
        was noted."""
        if not self._mix:
            return None
        names = tuple(models)
        found = self._mixes.get(names)
        if found is None:
            found = self._mixes[names] = self._mix_mean(names)
        return found

    def preferred_work(self, models: Sequence[str]) -> list[float] | None:
        """The submitted reference work (GPUs x ``duration_s`` per job, open-ended jobs left out) summed by the
        model of ``models`` where each job's comparative advantage against :meth:`mix_speeds` is highest (its
        normalised speed there over the mix's; the first such model on a tie): the ``GpuSpeedTier`` plugin's
        measure of how much of the work prefers each model. The work is kept per job description as jobs are
        noted; only its split by preferred model is recomputed, once per set of models after each note. None
        before any job with a speed was noted."""
        mix = self.mix_speeds(models)
        if mix is None:
            return None
        names = tuple(models)
        found = self._preferred.get(names)
        if found is None:
            found = [0.0] * len(names)
            for key, work in self._work.items() if names else ():
                adv = [n / m if m > 0 else n for n, m in zip(self.normalized(self._mix_specs[key], names), mix,
                                                             strict=True)]
                found[adv.index(max(adv))] += work
            self._preferred[names] = found
        return found

    def _mix_mean(self, models: tuple[str, ...]) -> list[float]:
        total = sum(self._mix.values())
        if not total:
            return [1.0] * len(models)
        acc = [0.0] * len(models)
        for key, count in self._mix.items():
            for i, n in enumerate(self.normalized(self._mix_specs[key], models)):
                acc[i] += count * n
        return [a / total for a in acc]

    def gpu_models(self) -> list[str]:
        """The GPU models the cluster has (on nodes with devices), in the state's order."""
        ids = np.unique(self.state.dev_model[self.state.dev_valid]) if self.state.dev_model.size else ()
        return [self.state.models.names[int(i)] for i in ids if int(i) >= 0]

    def training_share(self, jobs: Iterable[Job]) -> dict[str, float]:
        """Share of the training work (reference GPU-seconds: GPUs x ``duration_s``) of the jobs that ran or run
        on each GPU model, by the model of their (last) placement's first node; {} on a cluster of one model.
        Jobs that never started are left out; one with no duration counts the GPU-seconds it has run so far; a
        share is rounded to 4 digits."""
        models = self.gpu_models()
        if len(models) <= 1:
            return {}
        work = dict.fromkeys(models, 0.0)
        names = self.state.models.names
        for job in jobs:
            if job.spec.kind != JobKind.TRAIN or not job.nodes:
                continue
            n = self.state.node_index.get(job.nodes[0])
            if n is None or not self.state.dev_model.shape[1]:
                continue
            m = int(self.state.dev_model[n, 0])
            if m >= 0:  # an open-ended job (no duration) counts the GPU-seconds it has run so far
                w = job.spec.gpu_share * job.spec.duration_s
                work[names[m]] = work.get(names[m], 0.0) + (w if math.isfinite(w) else job.attained_gpu_s)
        total = sum(work.values())
        return {m: round(w / total, 4) if total > 0 else 0.0 for m, w in work.items()}

    def wrap(self, slowdown: Slowdown) -> Slowdown:
        """``slowdown`` (the network model's) with the job's speed applied: ``(network / speed, level)``."""

        def with_speed(job: Job, devices: list[tuple[int, int]]) -> tuple[float, float | None]:
            factor, level = slowdown(job, devices)
            speed = self.on_devices(job.spec, devices)
            job.extra[SPEED_KEY] = speed
            if self.clock is not None and speed_key(job.spec) is not None and math.isfinite(job.spec.duration_s):
                self._note_end(job, devices, self.clock() + job.remaining_s * factor / speed)
            return (factor / speed if speed != 1.0 else factor), level

        return with_speed
