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
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from typing import Any

from gpucluster.jobs.model import Job, JobKind, JobSpec
from gpucluster.model import ClusterState
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


class GpuSpeeds:
    """Job speeds on the GPU models of one cluster state (see the module docstring)."""

    def __init__(self, state: ClusterState, model: SpeedModel | None = None) -> None:
        self.state = state
        self.model = model if model is not None else default_speed_model()
        self._jobs: dict[SpeedKey, JobSpeed] = {}
        self._factors: dict[tuple[SpeedKey, str], float] = {}

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

    def wrap(self, slowdown: Slowdown) -> Slowdown:
        """``slowdown`` (the network model's) with the job's speed applied: ``(network / speed, level)``."""

        def with_speed(job: Job, devices: list[tuple[int, int]]) -> tuple[float, float | None]:
            factor, level = slowdown(job, devices)
            speed = self.on_devices(job.spec, devices)
            job.extra[SPEED_KEY] = speed
            return (factor / speed if speed != 1.0 else factor), level

        return with_speed
