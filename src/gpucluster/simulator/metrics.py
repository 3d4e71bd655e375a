"""What a simulation run measured: the summary dict (the CLI's ``--json``), per-job CSV rows and plots.

Definitions:

* JCT = finish - submit; queue time = time spent queued (first wait plus waits after preemption/failure).
* ``makespan_s`` = last finish - first submit.
* ``gpu_utilization`` = GPU-seconds held by running jobs / (usable GPUs x makespan), 0..1.
* ``jain_fairness`` = Jain's index over tenants of each tenant's mean job speed (ideal duration / JCT):
  1.0 when every tenant's jobs are slowed equally by queueing, 1/n when one tenant gets everything.
* ``reclaims`` = preemptions made to give a queue back its guarantee (also counted in ``preemptions``);
  ``offers_accepted`` / ``offers_declined`` = the ``offers`` policy's framework decisions.
* ``jobs_lost`` = submitted jobs that neither completed, were cancelled nor rejected, nor are still queued
  or running when the run ended early (``run_until``); a complete run must report 0.
* ``arrival_window_s``, ``offered_load``, ``gpu_utilization_window``, ``avg_queue_len_window``: over the arrival
  window (first to last submission; :mod:`gpucluster.simulator.load`), when the run recorded its series.
* ``idle_gpus_while_waiting``, ``idle_gpu_h_while_waiting_per_h``, ``waiting_share_window``: over the same
  window, the usable GPUs no job holds while at least one queued job waits for GPUs (a job held back only by
  its tenant's quota does not count: :meth:`gpucluster.jobs.JobEngine.waiting_for_gpus`), as a time average over
  the periods when one waits, as GPU-hours per hour of the window, and the share of the window with one
  waiting (:func:`gpucluster.simulator.load.idle_while_waiting`). Unlike ``gpus x (1 -
  gpu_utilization_window)``, a placement that finishes work sooner does not raise them; stranding and admission
  order do.
* ``avg_placement_slowdown`` = mean over completed jobs of the network model's factor (>= 1) of their last run.
* ``work_ref_gpu_h`` = work of the completed jobs in reference-GPU-hours (GPUs x ``duration_s``, which is seconds
  on the job's ``ref_gpu``); ``gpu_speed`` = that work over the GPU-hours it took at the speeds the jobs ran
  at (a work-weighted harmonic mean of their last runs' speeds; 1.0 when no job names a ``ref_gpu``).
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpucluster.jobs import SPEED_KEY, Job, JobState, Kernel, QueuePolicy, SeriesPoint, Totals


class Run(Protocol):
    """What the metrics read of a finished (or stopped) run: :class:`gpucluster.simulator.Simulation` is one.
    (A protocol, so that this module does not import the runner that imports it.)"""

    @property
    def jobs(self) -> Mapping[str, Job]: ...

    @property
    def kernel(self) -> Kernel[Any]: ...

    @property
    def totals(self) -> Totals: ...

    @property
    def series(self) -> list[SeriesPoint]: ...

    @property
    def queue_policy(self) -> QueuePolicy: ...

    @property
    def now(self) -> float: ...


def jain_index(values: Sequence[float]) -> float:
    xs = np.asarray([v for v in values if v > 0], np.float64)
    if xs.size == 0:
        return 1.0
    return float(xs.sum() ** 2 / (xs.size * (xs**2).sum()))


def _pct(xs: np.ndarray[Any, np.dtype[np.float64]], q: float) -> float:
    return float(np.percentile(xs, q)) if xs.size else 0.0


def summarize(sim: Run) -> dict[str, Any]:
    jobs = list(sim.jobs.values())
    done = [j for j in jobs if j.state == JobState.SUCCEEDED]
    jct = np.asarray([j.jct_s for j in done], np.float64)
    queue = np.asarray([j.queue_s for j in done], np.float64)
    rejected = sum(1 for j in jobs if j.rejected)
    cancelled = sum(1 for j in jobs if j.state == JobState.CANCELLED)
    unfinished = sum(1 for j in jobs if j.state in (JobState.QUEUED, JobState.RUNNING))
    finished_all = sim.kernel.peek() == float("inf")
    lost = sum(1 for j in jobs if j.state in (JobState.QUEUED, JobState.RUNNING, JobState.NEW)) \
        if finished_all else 0
    first = min((j.spec.submit_s for j in jobs), default=0.0)
    last = max((j.finish_s for j in done), default=first)
    makespan = max(last - first, 0.0)
    tot = sim.totals
    util = tot.busy_gpu_s / (tot.gpus * makespan) if tot.gpus and makespan > 0 else 0.0
    by_tenant: dict[str, list[float]] = {}
    for j in done:
        by_tenant.setdefault(j.spec.tenant, []).append(j.spec.duration_s / max(j.jct_s, 1e-9))
    speed = np.asarray([j.extra.get(SPEED_KEY, 1.0) for j in done], np.float64)
    slow = np.asarray([j.slowdown for j in done], np.float64) * speed  # the placement's (network) part
    work = np.asarray([j.spec.gpu_share * j.spec.duration_s for j in done], np.float64)
    spent = float(np.sum(work / speed)) if work.size else 0.0
    return {
        "policy": sim.queue_policy.name,
        "jobs": len(jobs),
        "jobs_completed": len(done),
        "jobs_cancelled": cancelled,
        "jobs_rejected": rejected,
        "jobs_unfinished": unfinished,
        "avg_jct_s": float(jct.mean()) if jct.size else 0.0,
        "p50_jct_s": _pct(jct, 50),
        "p99_jct_s": _pct(jct, 99),
        "avg_queue_s": float(queue.mean()) if queue.size else 0.0,
        "makespan_s": makespan,
        "gpu_utilization": min(util, 1.0),
        "jain_fairness": jain_index([float(np.mean(v)) for v in by_tenant.values()]),
        "bytes_moved": int(sum(j.bytes_moved for j in jobs)),
        "preemptions": tot.preemptions,
        "reclaims": tot.reclaims,
        "evictions": tot.evictions,
        "lost_work_s": float(sum(j.lost_work_s for j in jobs)),
        "avg_placement_slowdown": float(slow.mean()) if slow.size else 1.0,
        "work_ref_gpu_h": float(work.sum()) / 3600.0,
        "gpu_speed": float(work.sum()) / spent if spent > 0 else 1.0,
        "jobs_lost": lost,
        "scheduling_passes": tot.passes,
        "schedule_calls": tot.schedule_calls,
        "offers_accepted": tot.offers_accepted,
        "offers_declined": tot.offers_declined,
        "sim_time_s": sim.now,
        **_window(sim, jobs),
    }


def _window(sim: Run, jobs: list[Job]) -> dict[str, float]:
    """Figures over the arrival window (:func:`gpucluster.simulator.load.window_figures`; needs the series)."""
    if not sim.series or not jobs:
        return {}
    from gpucluster.simulator.load import window_figures

    series = sim.series
    return window_figures([j.spec for j in jobs], sim.totals.gpus, [p.time for p in series],
                          [p.busy_gpus for p in series], [p.queued_jobs for p in series],
                          [p.waiting_jobs for p in series], [p.gpus for p in series])


CSV_FIELDS = (
    "job_id", "tenant", "model", "num_gpus", "submit_s", "first_start_s", "finish_s", "duration_s", "jct_s",
    "queue_s", "state", "preemptions", "failures", "lost_work_s", "slowdown", "nodes", "speed",
)


def job_row(j: Job) -> dict[str, Any]:
    return {
        "job_id": j.job_id, "tenant": j.spec.tenant, "model": j.spec.model, "num_gpus": j.spec.num_gpus,
        "submit_s": j.spec.submit_s, "first_start_s": j.first_start_s, "finish_s": j.finish_s,
        "duration_s": j.spec.duration_s, "jct_s": j.jct_s, "queue_s": round(j.queue_s, 3),
        "state": j.state.value, "preemptions": j.preemptions, "failures": j.failures,
        "lost_work_s": round(j.lost_work_s, 3), "slowdown": round(j.slowdown, 4), "nodes": " ".join(j.nodes),
        "speed": round(j.extra.get(SPEED_KEY, 1.0), 4),
    }


def write_jobs_csv(sim: Run, path: Path) -> None:
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=CSV_FIELDS)
        w.writeheader()
        for j in sim.jobs.values():
            w.writerow(job_row(j))


def plot_jct_cdf(jcts: Mapping[str, Sequence[float]], path: Path) -> None:
    """One CDF curve of JCT per policy (log x axis)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in jcts.items():
        xs = np.sort(np.asarray(values, np.float64))
        if xs.size:
            ax.plot(np.maximum(xs, 1.0), np.arange(1, xs.size + 1) / xs.size, label=name)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_title("JCT CDF per policy")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_series(sim: Run, path: Path) -> None:
    """GPU utilisation and queue length over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = sim.series
    t = np.asarray([p.time for p in pts], np.float64) / 3600.0
    busy = np.asarray([p.busy_gpus for p in pts], np.float64) / max(sim.totals.gpus, 1)
    queued = np.asarray([p.queued_jobs for p in pts], np.float64)
    fig, (a1, a2) = plt.subplots(2, 1, figsize=(8, 5.5), sharex=True)
    a1.step(t, busy, where="post")
    a1.set_ylabel("GPU utilisation")
    a1.set_ylim(0, 1.05)
    a1.grid(True, alpha=0.3)
    a2.step(t, queued, where="post", color="tab:orange")
    a2.set_ylabel("queued jobs")
    a2.set_xlabel("time (h)")
    a2.grid(True, alpha=0.3)
    a1.set_title(f"policy {sim.queue_policy.name}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
