"""Synthetic job traces calibrated on published production statistics (no trace needed at run time).

Calibration figures (Acme paper's summary of five production GPU traces, NSDI'24, ``cluster_summary.csv``;
copied here, the file is not read): GPU jobs' mean / median run time (s), mean / median GPUs per job,
largest job, mean / median queue time (s, for comparison with simulated results only).

| profile | mean run | median run | max run | mean GPUs | median GPUs | max GPUs | mean queue | median queue |
|---|---|---|---|---|---|---|---|---|
| philly | 18006 | 874 | 4240676 | 1.928 | 1 | 128 | 3761 | 189 |
| helios | 6652 | 206 | 4320009 | 3.716 | 1 | 2048 | 862 | 0 |
| seren | 1414 | 122 | 1209604 | 5.68 | 1 | 1024 | 446 | 1 |
| kalos | 1260 | 124 | 625740 | 26.77 | 1 | 1024 | 214 | 17 |
| pai | 4787 | 481 | 626371 | 0.683 | 0.5 | 8 | 402 | 9 |

Run time: lognormal with the profile's median; sigma from ``mean = median * exp(sigma^2 / 2)``, truncated at
the largest run time (and at least 60 s). GPUs per job: powers of two with probabilities chosen so the mean
matches (median 1; PAI's fractional GPUs are rounded up to 1). Tenants: ``tenants`` teams with Zipf-like shares.

Arrivals keep the cluster at ``load`` x its GPUs over the arrival window (default 0.7), measured as
:func:`gpucluster.simulator.load.offered_load` does: the mean over the window of the GPUs that arrived jobs would
hold if each started on arrival, a job counting until it would end or the window closes, whichever is first.
Two things make this differ from "arrival rate x mean work": with run times this heavy-tailed most of the mean
work sits in a few jobs that run for weeks on a few GPUs, far past any window a few thousand jobs span; and a
cluster that starts empty needs a long ramp before it holds its steady load. So the trace opens on a busy
cluster: the first jobs (as many as together ask for ``load`` x the GPUs) are submitted at time 0, the rest
follow as a Poisson stream, and the window's length is solved (bisection; the offered load falls as the window
grows) so that the offered load over it is exactly ``load`` for the drawn jobs. Fewer jobs mean a shorter window:
2,000 Philly jobs hold 1.5 x 1,920 GPUs for about three minutes, 20,000 hold 0.7 x 1,920 for about 2.7 days.
When the jobs together ask for fewer GPUs than ``load`` x the cluster's, no window can reach it:
:class:`TraceError` says so and how many jobs would.

GPU speed: the run times are what the jobs take on the cluster the trace is sized for, so ``ref_gpu`` names that
cluster's GPU model (``gpucluster simulate`` and ``whatif`` pass its most common model; the load is then
``load`` x its GPUs at that model's speed, and another design runs the same work faster or slower). Jobs are
training jobs (kind ``train``); their model names pick the speed model's work class.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucluster.jobs import JobSpec
from gpucluster.simulator.traces import TraceError


@dataclass(frozen=True, slots=True)
class WorkloadProfile:
    name: str
    mean_run_s: float
    median_run_s: float
    max_run_s: float
    mean_gpus: float
    """Target mean GPUs per job (whole GPUs)."""
    tail_sizes: tuple[int, ...]
    tail_shape: tuple[float, ...]
    """Relative weights of the multi-GPU sizes; mixed with 1-GPU jobs so the mean is ``mean_gpus``."""
    mean_queue_s: float
    median_queue_s: float

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean_run_s / self.median_run_s))

    def gpu_distribution(self) -> tuple[tuple[int, ...], tuple[float, ...]]:
        shape = np.asarray(self.tail_shape, np.float64) / sum(self.tail_shape)
        tail_mean = float(np.dot(self.tail_sizes, shape))
        w = (self.mean_gpus - 1.0) / (tail_mean - 1.0)
        return (1, *self.tail_sizes), (1.0 - w, *(float(x) for x in w * shape))


PROFILES: Mapping[str, WorkloadProfile] = {
    "philly": WorkloadProfile("philly", 18006.055, 874.0, 4240676.0, 1.928, (2, 4, 8, 16, 32, 64),
                              (12, 9, 5.5, 0.5, 0.2, 0.05), 3760.604, 189.0),
    "helios": WorkloadProfile("helios", 6651.681, 206.0, 4320009.0, 3.716, (2, 4, 8, 16, 32, 64, 128),
                              (8, 7, 10, 3, 1.5, 0.5, 0.1), 862.047, 0.0),
    "seren": WorkloadProfile("seren", 1414.335, 122.0, 1209604.0, 5.68, (2, 4, 8, 16, 32, 64, 128),
                             (8, 7, 12, 3.5, 2, 1, 0.5), 445.984, 1.0),
    "kalos": WorkloadProfile("kalos", 1259.689, 124.0, 625740.0, 26.77, (2, 4, 8, 16, 64, 256, 1024),
                             (5, 5, 17, 6, 4, 2.5, 0.5), 214.179, 17.0),
    # PAI's mean is 0.683 GPUs (fractional sharing); whole-GPU jobs here, so a mean of 1.1
    "pai": WorkloadProfile("pai", 4787.109, 480.667, 626371.0, 1.1, (2, 4, 8), (4, 2, 1), 401.742, 9.0),
}
DEFAULT_PROFILE = "philly"
MAX_SYNTHETIC_JOBS = 1_000_000
"""Most jobs a synthetic trace may hold (each is a JobSpec in memory; real traces here hold up to ~100,000)."""
_MODELS = ("ResNet-50", "ResNet-18", "Transformer", "LM", "Recommendation", "CycleGAN")


def generate(
    n: int,
    cluster_gpus: int,
    *,
    profile: str = DEFAULT_PROFILE,
    load: float = 0.7,
    tenants: int = 8,
    seed: int = 0,
    max_gpus: int | None = None,
    ref_gpu: str = "",
) -> list[JobSpec]:
    """``n`` jobs that offer ``load`` x ``cluster_gpus`` over their arrival window. Deterministic for a seed.
    ``ref_gpu``: the GPU model the run times are on (empty: the same on every model).

    Raises TraceError for a bad argument, or when the ``n`` jobs together ask for fewer GPUs than the load needs.
    """
    if not 0 < n <= MAX_SYNTHETIC_JOBS:  # 10**20 overflowed in numpy (OverflowError, no word of which flag)
        raise TraceError(f"synthetic:{n}: the job count must be within 1..{MAX_SYNTHETIC_JOBS:,}")
    if profile not in PROFILES:
        raise TraceError(f"synthetic: unknown profile {profile!r}; known: {', '.join(sorted(PROFILES))}")
    if not 0 < load <= 10:
        raise TraceError(f"synthetic: load must be within (0, 10], not {load}")
    if cluster_gpus <= 0:
        raise TraceError(f"synthetic: the cluster has no GPUs ({cluster_gpus}) to offer load to")
    p = PROFILES[profile]
    rng = np.random.default_rng(seed)
    cap = max_gpus or cluster_gpus
    dist = p.gpu_distribution()
    sizes = np.asarray(dist[0])
    probs = np.asarray(dist[1], np.float64)
    keep = sizes <= cap
    sizes, probs = sizes[keep], probs[keep] / probs[keep].sum()
    gpus = rng.choice(sizes, size=n, p=probs)
    runs = np.clip(rng.lognormal(math.log(p.median_run_s), p.sigma, size=n), 60.0, p.max_run_s)
    gaps = rng.exponential(1.0, size=n)
    arrivals = _arrivals(gpus.astype(np.float64), runs, gaps, load * cluster_gpus, n, profile, load, cluster_gpus)
    weights = 1.0 / np.arange(1, tenants + 1)
    tenant_of = rng.choice(tenants, size=n, p=weights / weights.sum())
    model_of = rng.integers(len(_MODELS), size=n)
    return [
        JobSpec(
            job_id=f"syn-{k:06d}", submit_s=round(float(arrivals[k]), 3), num_gpus=int(gpus[k]),
            duration_s=round(float(runs[k]), 3), tenant=f"team-{int(tenant_of[k])}",
            model=_MODELS[int(model_of[k])], ref_gpu=ref_gpu,
        )
        for k in range(n)
    ]


def _arrivals(gpus: npt.NDArray[np.float64], runs: npt.NDArray[np.float64], gaps: npt.NDArray[np.float64],
              target: float, n: int, profile: str, load: float, cluster_gpus: int) -> npt.NDArray[np.float64]:
    """Submit times: a backlog at 0 asking for ``target`` GPUs, then a Poisson stream over a window whose length
    makes the offered load exactly ``target`` GPUs (see the module docstring)."""
    backlog = int(np.searchsorted(np.cumsum(gpus), target)) + 1  # first jobs that together ask for >= target
    if backlog >= n:
        per_job = float(np.mean(gpus))
        raise TraceError(
            f"synthetic:{n}:{profile}:{load:g}: {n} jobs ask for {int(gpus.sum())} GPUs in all, too few to keep "
            f"{load:g} x {cluster_gpus} GPUs busy; use more jobs (at {per_job:.2f} GPUs per job it takes about "
            f"{math.ceil(target / per_job)} to ask for that many at once), a lower load or a smaller cluster")
    stream = np.cumsum(gaps[backlog:])
    position = np.zeros(n)  # fraction of the window at which each job arrives
    position[backlog:] = stream / stream[-1]
    left = 1.0 - position
    weight = gpus / target

    def excess(window: float) -> float:  # offered load over the window / target - 1; falls as the window grows
        return float(np.dot(weight, np.minimum(runs / window, left))) - 1.0

    lo, hi = 1e-3, 2.0 * float(runs.max()) * n
    for _ in range(200):  # bisection on a log scale
        mid = math.sqrt(lo * hi)
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
        if hi / lo < 1 + 1e-12:
            break
    return position * lo
