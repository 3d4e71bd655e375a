"""Offered load and utilisation over a trace's arrival window (pure functions over job specs and time series).

Over the whole run (the makespan) a heavy-tailed trace always looks idle: its last jobs run alone for weeks after
the others are done. These figures look at the **arrival window** instead, from the first submission to the last,
while the trace is still offering work:

* :func:`offered_load`: the mean over the window of the GPUs the jobs would hold if each started on arrival, a
  job counting until it would end or the window closes (no queueing), as a fraction of the cluster's GPUs. This
  is what ``synthetic:N:PROFILE:LOAD`` keeps at ``LOAD``.
* :func:`step_mean`: the time average of a step series (e.g. busy GPUs recorded at each change) over a window;
  divided by the GPUs it is the utilisation over the window.
* :func:`idle_while_waiting`: the GPUs no job holds while at least one job waits for GPUs, over the window:
  their time average over the periods when one waits, and the GPU-hours they come to per hour of the window.
* :func:`window_figures`: these, plus the window, for a run's summary.

Idle GPUs over the window (``gpus x (1 - gpu_utilization_window)``) count every GPU no job holds: a placement
that finishes the same work sooner leaves more of them, which is not waste. Idle GPUs **while work waits** count
them only while a queued job waits for GPUs (the engine's ``waiting_jobs``: a job held back only by its
tenant's quota does not count), so what they measure is capacity that queued work could not get: stranded by
fragmentation or the wrong models, or left by the admission order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from gpucluster.jobs import JobSpec


def arrival_window(jobs: Sequence[JobSpec]) -> tuple[float, float]:
    """(first, last) submission time; (0, 0) without jobs."""
    if not jobs:
        return 0.0, 0.0
    submits = [j.submit_s for j in jobs]
    return min(submits), max(submits)


def offered_load(jobs: Sequence[JobSpec], gpus: int, window: tuple[float, float] | None = None) -> float:
    """Mean GPU demand over ``window`` (default: the arrival window) / ``gpus``, each job demanding its GPUs from
    submission for its duration. 0.0 for an empty window or a cluster without GPUs."""
    start, end = window if window is not None else arrival_window(jobs)
    if end <= start or gpus <= 0 or not jobs:
        return 0.0
    submit = np.asarray([j.submit_s for j in jobs], np.float64)
    finish = submit + np.asarray([j.duration_s for j in jobs], np.float64)
    held = np.clip(np.minimum(finish, end) - np.maximum(submit, start), 0.0, None)
    demand = np.asarray([j.num_gpus for j in jobs], np.float64)
    return float(np.dot(demand, held) / (gpus * (end - start)))


def step_mean(times: Sequence[float], values: Sequence[float] | npt.NDArray[np.float64], start: float,
              end: float) -> float:
    """Time average over [start, end] of a step function that takes ``values[i]`` from ``times[i]`` on (0 before
    the first point). ``times`` must be sorted."""
    if end <= start or not len(times):
        return 0.0
    t = np.asarray(times, np.float64)
    v = np.asarray(values, np.float64)
    edges = np.clip(np.append(t, np.inf), start, end)
    return float(np.dot(v, np.diff(edges)) / (end - start))


def idle_while_waiting(times: Sequence[float], busy: Sequence[float], capacity: Sequence[float],
                       waiting: Sequence[float], start: float, end: float) -> dict[str, float]:
    """Idle GPUs while work waits, over [start, end], from step series (each value holds from its time on; 0
    before the first point; ``times`` sorted): at each time the idle GPUs are ``max(capacity - busy, 0)``, and
    they count while ``waiting > 0``.

    * ``idle_gpus_while_waiting``: their time average over the periods when a job waits (0.0 when none does);
    * ``idle_gpu_h_while_waiting_per_h``: the GPU-hours they come to, per hour of the window (the same average
      over the whole window, so never above the window's mean idle GPUs, nor above the first figure);
    * ``waiting_share_window``: the share of the window during which a job waits."""
    idle = np.maximum(np.asarray(capacity, np.float64) - np.asarray(busy, np.float64), 0.0)
    waits = (np.asarray(waiting, np.float64) > 0).astype(np.float64)
    share = step_mean(times, waits, start, end)
    per_h = step_mean(times, idle * waits, start, end)
    return {
        "idle_gpus_while_waiting": per_h / share if share > 0 else 0.0,
        "idle_gpu_h_while_waiting_per_h": per_h,
        "waiting_share_window": share,
    }


def window_figures(jobs: Sequence[JobSpec], gpus: int, times: Sequence[float], busy: Sequence[float],
                   queued: Sequence[float], waiting: Sequence[float] | None = None,
                   capacity: Sequence[float] | None = None) -> dict[str, float]:
    """``arrival_window_s``, ``offered_load`` and, from a run's series of busy GPUs and queued jobs,
    ``gpu_utilization_window`` and ``avg_queue_len_window`` over the arrival window; with the series of jobs
    waiting for GPUs (and of usable GPUs; default ``gpus`` throughout) also the idle GPUs while work waits
    (:func:`idle_while_waiting`)."""
    start, end = arrival_window(jobs)
    util = step_mean(times, busy, start, end) / gpus if gpus > 0 else 0.0
    out = {
        "arrival_window_s": end - start,
        "offered_load": offered_load(jobs, gpus, (start, end)),
        "gpu_utilization_window": min(util, 1.0),
        "avg_queue_len_window": step_mean(times, queued, start, end),
    }
    if waiting is not None:
        cap = capacity if capacity is not None else [float(gpus)] * len(times)
        out.update(idle_while_waiting(times, busy, cap, waiting, start, end))
    return out
