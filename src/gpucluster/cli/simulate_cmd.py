"""``gpucluster simulate``: replay a job trace on a cluster under one or more queue policies."""

from __future__ import annotations

import math
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli import common
from gpucluster.cli.common import (
    PLACEMENT_HELP,
    QUEUE_HELP,
    DeviceConfigOpt,
    check_placement_policy,
    check_queue_policies,
    cluster_option_help,
    deprecated_option,
    fail,
    load_cluster_or_fail,
    print_json,
    registry_or_fail,
    renamed,
    training_share_rows,
)
from gpucluster.cli.output import print_table
from gpucluster.cli.shown import DEFAULT_QUEUE_POLICY

if TYPE_CHECKING:  # rich and the engine are imported where the command runs, not to build its parameters
    from rich.progress import Progress

    from gpucluster.jobs import JobSpec
    from gpucluster.scheduler.plugins.quota import QueueSpec
    from gpucluster.simulator import Simulation
    from gpucluster.spec import Cluster

_KEYS = ("jobs", "jobs_completed", "avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s",
         "gpu_utilization", "gpu_utilization_window", "avg_queue_len_window", "idle_gpus_while_waiting",
         "idle_gpu_h_while_waiting_per_h", "gpu_speed", "jain_fairness",
         "bytes_moved", "preemptions", "jobs_lost")


REF_GPU_HELP = ("GPU model the work of jobs that name no ref_gpu is measured on (their duration_s is seconds on "
                "it; other models run it at the speed model's speed). Philly/Tiresias traces say V100, synthetic "
                "ones the cluster's main model; default for the rest: none (the same speed on every model)")


def _run_one(cluster: Cluster, jobs: list[JobSpec], policy: str, seed: int, progress: Progress | None,
             quota: list[QueueSpec] | None = None, placement: str | None = None) -> tuple[Simulation, dict[str, Any]]:
    from gpucluster.jobs import JOB_PLACEMENT
    from gpucluster.scheduler.plugins.quota import QuotaTree
    from gpucluster.simulator import Simulation

    # a fresh tree per run (it tracks usage); the Quota plugin enforces limits, the policy reads guarantees
    services = None if quota is None else {"quota": QuotaTree(quota)}
    sim = Simulation(cluster, policy, seed=seed, placement_policy=placement, services=services)
    sim.submit_many(jobs)
    end = max((j.submit_s for j in jobs), default=0.0)
    task = progress.add_task(policy, total=len(jobs)) if progress is not None else None
    started = time.perf_counter()
    step = max(end / 200.0, 1.0)
    t = 0.0
    while sim.kernel.peek() != float("inf"):
        t = max(t + step, sim.kernel.peek()) if t < end else float("inf")
        sim.run_until(t)
        if progress is not None and task is not None:
            progress.update(task, completed=sum(1 for j in sim.jobs.values() if j.done))
    summary = sim.summary()
    summary["placement_policy"] = placement or JOB_PLACEMENT
    summary.update(sim.placement_report())
    summary["wall_s"] = round(time.perf_counter() - started, 3)
    return sim, summary


def simulate(
    trace: Annotated[str, typer.Option("--trace", help="FORMAT:PATH; formats philly-gavel, alibaba-openb, "
                                                        "tiresias, jobs, or synthetic:N[:PROFILE[:LOAD]]")],
    cluster_path: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
    policy: Annotated[str | None, typer.Option(
        "--queue-policy", help=QUEUE_HELP + f"; a comma list, or 'all' (default: {DEFAULT_QUEUE_POLICY})")] = None,
    old_policy: Annotated[str | None, deprecated_option("--policy", "--queue-policy")] = None,
    placement: Annotated[str | None, typer.Option(
        "--placement-policy", help=PLACEMENT_HELP + "; default: the queue policy's own")] = None,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for per-job CSV and PNG plots")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Random seed (synthetic traces, tie-breaks); >= 0")] = 0,
    limit: Annotated[int | None, typer.Option(help="Only the first N jobs (by arrival)")] = None,
    quota: Annotated[Path | None, typer.Option(
        "--quota", help="Hierarchical tenant queues (YAML: queues with name, parent, guarantee, limit, weight); "
                        "limits are enforced for every policy, drf reclaims guarantees")] = None,
    speedup: Annotated[float, typer.Option(
        "--arrival-speedup", help="Divide every arrival time by this (a load this many times higher, same jobs)")]
    = 1.0,
    ref_gpu: Annotated[str | None, typer.Option("--ref-gpu", help=REF_GPU_HELP)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the results as JSON")] = False,
    device_config: DeviceConfigOpt = None,
) -> None:
    """Replay a job trace: queueing, gang + topology placement, preemption; print JCT, utilisation, fairness."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from gpucluster.cli.quota_file import load_quota
    from gpucluster.jobs import JOB_PLACEMENT
    from gpucluster.simulator import TraceError, load_trace, with_ref_gpu

    console = common.console
    policy = renamed(policy, old_policy, "--queue-policy", "--policy") or DEFAULT_QUEUE_POLICY
    names = check_queue_policies(policy, allow_all=True)
    check_placement_policy(placement)
    if limit is not None and limit <= 0:
        fail("--limit: must be > 0")
    if not (math.isfinite(speedup) and speedup > 0):
        fail(f"--arrival-speedup {speedup:g}: must be a finite number > 0")
    if out is not None:  # before the run, which may be long
        common.check_out_dir(out)
    cluster = load_cluster_or_fail(cluster_path, registry_or_fail(device_config))
    notes: list[str] = []
    try:
        jobs = with_ref_gpu(load_trace(trace, cluster, seed, notes), ref_gpu)
    except TraceError as exc:
        fail(str(exc))
    for note in notes:
        typer.echo(f"note: {note}", err=True)
    queues: list[QueueSpec] | None = None
    if quota is not None:
        try:
            queues = load_quota(quota)
        except TraceError as exc:
            fail(str(exc))
    jobs = sorted(jobs, key=lambda j: j.submit_s)[:limit] if limit else jobs
    if speedup != 1.0:
        jobs = [replace(j, submit_s=j.submit_s / speedup) for j in jobs]
    if not jobs:
        fail(f"--trace {trace}: no jobs in it")
    results: dict[str, dict[str, Any]] = {}
    sims: dict[str, Simulation] = {}
    # the bar goes to stderr (shown where stderr is a terminal, --json or not): stdout carries the result only
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} jobs"),
                  TimeElapsedColumn(), console=common.err_console, transient=True) as progress:
        for name in names:
            sims[name], results[name] = _run_one(cluster, jobs, name, seed, progress, queues, placement)
    if out is not None:
        _write_out(out, sims)
    if as_json:
        print_json(results[names[0]] if len(names) == 1 else {"cluster": cluster.name, "policies": results})
        return
    rows = []
    for key in (*_KEYS, "wall_s"):
        row = [key]
        for name in names:
            v = results[name].get(key, "")
            row.append(f"{v:.3f}" if isinstance(v, float) and v < 10 else
                       f"{v:,.0f}" if isinstance(v, float) else str(v))
        rows.append(row)
    rows.append(["placement in use", *(str(results[n]["placement_in_use"]) for n in names)])
    rows.extend(training_share_rows([results[n] for n in names]))
    print_table(["metric", *names], rows,
                title=f"{len(jobs)} jobs on {cluster.name}, placement {placement or JOB_PLACEMENT}",
                right=range(1, len(names) + 1))
    if out is not None:
        console.print(f"wrote {out}/", markup=False)


def _write_out(out: Path, sims: dict[str, Simulation]) -> None:
    from gpucluster.simulator.metrics import plot_jct_cdf, plot_series, write_jobs_csv

    with common.staged_out(out) as stage:  # all of them or none
        for name, sim in sims.items():
            write_jobs_csv(sim, stage / f"jobs-{name}.csv")
            plot_series(sim, stage / f"series-{name}.png")
        plot_jct_cdf({name: [j.jct_s for j in sim.jobs.values() if j.finish_s >= 0 and not j.rejected]
                      for name, sim in sims.items()}, stage / "jct-cdf.png")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate)
