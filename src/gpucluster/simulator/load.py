"""Offered load and utilisation over a trace's arrival window (pure functions over job specs and time series).

Over the whole run (the makespan) a heavy-tailed trace always looks idle: its last jobs run alone for weeks after
the others are done. These figures look at the **arrival window** instead, from the first submission to the last,
while the trace is still offering work:

* :func:`offered_load`: the mean over the window of the GPUs the jobs would hold if each started on arrival, a
  job counting until it would end or the window closes (no queueing), as a fraction of the cluster's GPUs. This
  is what ``synthetic:N:PROFILE:LOAD`` keeps at ``LOAD``.
* :func:`step_mean`: the time average of a step series (e.g. busy GPUs recorded at each change) over a window;
  divided by the GPUs it is the utilisation over the window.
* :func:`window_figures`: both, plus the window, for a run's summary.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

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


def step_mean(times: Sequence[float], values: Sequence[float], start: float, end: float) -> float:
    """Time average over [start, end] of a step function that takes ``values[i]`` from ``times[i]`` on (0 before
    the first point). ``times`` must be sorted."""
    if end <= start or not len(times):
        return 0.0
    t = np.asarray(times, np.float64)
    v = np.asarray(values, np.float64)
    edges = np.clip(np.append(t, np.inf), start, end)
    return float(np.dot(v, np.diff(edges)) / (end - start))


def window_figures(jobs: Sequence[JobSpec], gpus: int, times: Sequence[float], busy: Sequence[float],
                   queued: Sequence[float]) -> dict[str, float]:
    """``arrival_window_s``, ``offered_load`` and, from a run's series of busy GPUs and queued jobs,
    ``gpu_utilization_window`` and ``avg_queue_len_window`` over the arrival window."""
    start, end = arrival_window(jobs)
    util = step_mean(times, busy, start, end) / gpus if gpus > 0 else 0.0
    return {
        "arrival_window_s": end - start,
        "offered_load": offered_load(jobs, gpus, (start, end)),
        "gpu_utilization_window": min(util, 1.0),
        "avg_queue_len_window": step_mean(times, queued, start, end),
    }
