"""A light synthetic background workload so the embedded cluster looks alive.

Job shapes and durations follow the broad shape of published GPU-cluster traces (Alibaba PAI 2020, Weng et al.,
NSDI'22: most tasks ask for one GPU or less and share devices; a minority of 8-GPU and multi-node training jobs
holds much of the capacity; run times are heavy-tailed, median about ten minutes). It is a stand-in: the
simulator's calibrated generator (``gpucluster.simulator``) replaces it when it lands.

What a job does with what it holds follows the same traces: allocation is not use. In PAI and in Microsoft's
Philly (Jeon et al., ATC'19) the median GPU utilisation of a job is well under half, a sizeable share of
allocated GPUs sits idle (notebooks, stalled or finished-but-not-released jobs) and much of the rest waits on
input pipelines or memory. :data:`ACTIVITY_MIX` gives each background job one of the simulated collector's
behaviours (``monitoring.collectors.sim.PROFILES``), drawn from its own seeded stream so the shapes, durations and
arrival times of a seed stay what they were.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Shape:
    name: str
    weight: float
    replicas: int
    resources: dict[str, Any]
    gpus: float
    """GPU-equivalents one job of this shape holds."""


CPU_MILLI_PER_GPU = 4000
"""Host CPU a background task asks per GPU-equivalent it holds, as a trace's job does (``JobSpec.cpu_milli_per_gpu``,
4 cores): allocated CPU on a node full of background work is then what its pods requested, not 0."""
MEMORY_MIB_PER_GPU = 16384
"""Host memory per GPU-equivalent (``JobSpec.memory_mib_per_gpu``, 16 GiB)."""


def _host(gpus: dict[str, Any], share: float) -> dict[str, Any]:
    """A task's limits: its GPU limits and the host CPU and memory of ``share`` GPU-equivalents."""
    return {**gpus, "cpu": f"{round(CPU_MILLI_PER_GPU * share)}m", "memory": f"{round(MEMORY_MIB_PER_GPU * share)}Mi"}


SHAPES: tuple[Shape, ...] = (
    Shape("infer-quarter", 0.22, 1, _host({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25,
                                           "nvidia.com/gpumem": 12000}, 0.25), 0.25),
    Shape("infer-half", 0.18, 1, _host({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50,
                                        "nvidia.com/gpumem": 24000}, 0.5), 0.5),
    Shape("dev-1gpu", 0.32, 1, _host({"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}, 1), 1.0),
    Shape("train-2gpu", 0.08, 1, _host({"nvidia.com/gpu": 2, "nvidia.com/gpucores": 100}, 2), 2.0),
    Shape("train-4gpu", 0.08, 1, _host({"nvidia.com/gpu": 4, "nvidia.com/gpucores": 100}, 4), 4.0),
    Shape("train-8gpu", 0.09, 1, _host({"nvidia.com/gpu": 8, "nvidia.com/gpucores": 100}, 8), 8.0),
    Shape("train-2x8gpu", 0.03, 2, _host({"nvidia.com/gpu": 8, "nvidia.com/gpucores": 100}, 8), 16.0),
)

ACTIVITY_MIX: tuple[tuple[str, float], ...] = (
    ("compute", 0.30),   # compute-bound: SMs kept busy
    ("training", 0.15),  # compute with a communication phase every minute
    ("input", 0.17),     # waits on its data loader (~30 % SM busy)
    ("memory", 0.13),    # memory-bound: DRAM busy, tensor pipes quiet
    ("idle", 0.20),      # holds its GPUs and does nothing (~1 %): "allocated but idle"
    ("communication", 0.05),  # waits on collectives
)
"""Behaviour of a background job (a ``PROFILES`` name) and its weight; the weights sum to 1."""
ACTIVITY_SEED_SALT = 0x5EED_AC71
"""Mixed into the seed for the activity stream (independent of the shape/duration/arrival stream)."""

MEDIAN_DURATION_S = 600.0
DURATION_SIGMA = 1.0
MAX_DURATION_S = 6 * 3600.0


@dataclass(frozen=True, slots=True)
class Arrival:
    t: float
    shape: Shape
    duration_s: float
    activity: str = "compute"
    """What the job does with its GPUs: a ``monitoring.collectors.sim.PROFILES`` name."""


class SyntheticWorkload:
    """Poisson arrivals sized so the expected load is ``target`` of ``total_gpus``."""

    def __init__(self, total_gpus: float, target: float, seed: int = 0) -> None:
        self.rng = random.Random(seed)
        self.activity_rng = random.Random(seed ^ ACTIVITY_SEED_SALT)
        """A second stream for :meth:`_activity`, so adding it changed no shape, duration or arrival time."""
        self.target = target
        total_w = sum(s.weight for s in SHAPES)
        self._weights = [s.weight / total_w for s in SHAPES]
        mean_gpus = sum(w * s.gpus for w, s in zip(self._weights, SHAPES, strict=True))
        mean_dur = MEDIAN_DURATION_S * math.exp(DURATION_SIGMA**2 / 2)
        self.rate = target * total_gpus / (mean_gpus * mean_dur) if target > 0 else 0.0
        """Arrivals per clock second."""
        self.mean_duration_s = mean_dur
        self._next_t: float | None = None

    def _shape(self) -> Shape:
        return self.rng.choices(SHAPES, self._weights)[0]

    def _activity(self) -> str:
        names = [name for name, _ in ACTIVITY_MIX]
        return str(self.activity_rng.choices(names, [w for _, w in ACTIVITY_MIX])[0])

    def _duration(self) -> float:
        d = self.rng.lognormvariate(math.log(MEDIAN_DURATION_S), DURATION_SIGMA)
        return min(max(d, 20.0), MAX_DURATION_S)

    def warm_start(self) -> list[Arrival]:
        """Jobs already running at t=0 (steady state): ``rate x mean duration`` of them, residual lives."""
        if self.rate <= 0:
            return []
        n = round(self.rate * self.mean_duration_s)
        return [Arrival(0.0, self._shape(), self._duration() * self.rng.random(), self._activity()) for _ in range(n)]

    def arrivals(self, t0: float, t1: float) -> list[Arrival]:
        """Arrivals in ``(t0, t1]``."""
        if self.rate <= 0:
            return []
        if self._next_t is None:
            self._next_t = t0 + self.rng.expovariate(self.rate)
        out: list[Arrival] = []
        while self._next_t <= t1:
            out.append(Arrival(self._next_t, self._shape(), self._duration(), self._activity()))
            self._next_t += self.rng.expovariate(self.rate)
        return out
