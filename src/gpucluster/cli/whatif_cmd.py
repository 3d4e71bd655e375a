"""``gpucluster whatif``: simulate several cluster designs on one workload; cost against JCT and utilisation.

The evaluation is :mod:`gpucluster.whatif` (design -> simulated cluster -> simulation -> cost in buyer units ->
verdict); this module parses the flags (``--design`` files, ``--trace`` loaded once with
:func:`gpucluster.simulator.load_trace`; jobs that name no ``ref_gpu`` get ``--ref-gpu``, by default the first
design's GPU model), and prints the table, ``--json``, ``--out`` (``whatif.csv`` and ``whatif.png``) and
``--plot``. The verdict's rule and every figure are documented in :mod:`gpucluster.whatif.evaluate`.
"""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer

from gpucluster.cli.common import (
    PLACEMENT_HELP,
    QUEUE_HELP,
    check_out_dir,
    check_placement_policy,
    check_queue_policies,
    deprecated_option,
    plain,
    print_json,
    renamed,
    staged_out,
    training_share_rows,
)
from gpucluster.cli.output import print_table
from gpucluster.cli.shown import DEFAULT_QUEUE_POLICY, WHATIF_JCT_TOLERANCE_PCT, WHATIF_YEARS
from gpucluster.cli.simulate_cmd import REF_GPU_HELP


def _fail(lines: list[str]) -> NoReturn:
    """Every problem found, one ``error:`` line each (as :func:`gpucluster.cli.common.fail` writes one), exit 2."""
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    raise typer.Exit(2)


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.4f}" if v < 1 else f"${v:,.2f}" if v < 100 else f"${v:,.0f}"


_ROWS: tuple[tuple[str, str], ...] = (
    ("servers", "servers"), ("gpus", "GPUs"), ("capex_usd", "capex"), ("power_usd_per_year", "power / year"),
    ("owned_usd_per_year", "owned / year"), ("usd_per_gpu_hour", "$ / GPU-h delivered"),
    ("usd_per_gpu_hour_installed", "$ / GPU-h installed"), ("jobs", "jobs"), ("jobs_completed", "completed"),
    ("jobs_rejected", "rejected"), ("avg_jct_s", "avg JCT"), ("p99_jct_s", "p99 JCT"), ("avg_queue_s", "avg queue"),
    ("gpu_utilization", "GPU utilisation"), ("makespan_s", "makespan"),
    ("gpu_speed", "speed vs ref GPU"), ("work_ref_gpu_h", "work, ref-GPU-h"),
    ("gpu_utilization_window", "utilisation (window)"), ("offered_load_ref", "offered load, ref GPUs"),
    ("owned_utilization", "owned utilisation used"),
    ("usd_per_ref_gpu_hour", "$ / ref-GPU-h owned"), ("usd_per_job", "$ / job owned"),
    ("usd_per_million_tokens", "$ / M tokens owned"), ("on_demand_usd_per_ref_gpu_hour", "$ / ref-GPU-h on demand"),
    ("on_demand_region", "on-demand offer"), ("spot_usd_per_ref_gpu_hour", "$ / ref-GPU-h spot"),
    ("spot_region", "spot offer"), ("spot_lost_work_share", "spot work lost"), ("spot_avg_jct_s", "spot avg JCT"),
)


def _cell(key: str, v: Any) -> str:
    from gpucluster.whatif import hours

    if key.endswith("_usd") or key.startswith("usd_") or "_usd_" in key:
        return _money(v)
    if v is None:
        return "n/a"
    if key.endswith("_s"):
        return hours(float(v))
    if key in ("gpu_utilization", "gpu_utilization_window", "owned_utilization", "spot_lost_work_share",
               "offered_load_ref"):
        return f"{float(v):.1%}"
    if key == "gpu_speed":
        return f"{float(v):.2f}x"
    if key == "work_ref_gpu_h":
        return f"{float(v):,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _print_table(rows: list[dict[str, Any]], v: dict[str, Any], title: str, years: float) -> None:
    from rich.console import Console

    console = Console()
    table = [["GPU", *(str(r["gpu"]) for r in rows)]]
    table += [[label, *(_cell(key, r[key]) for r in rows)] for key, label in _ROWS]
    table.append(["placement in use", *(str(r.get("placement_in_use", "")) for r in rows)])
    table += training_share_rows(rows)
    print_table(["metric", *(r["name"] + (" *" if r["name"] == v["design"] else "") for r in rows)], table,
                title=title, right=range(1, len(rows) + 1))
    console.print(f"owned / year = capex / {years:g} years + power per year; $ / GPU-h delivered = owned / "
                  "(GPUs x 8,760 h x GPU utilisation); $ / ref-GPU-h = cost of one hour of work on the jobs' "
                  "reference GPU (owned: at the utilisation used; spot: lost work included); prices are catalog "
                  "estimates", soft_wrap=True)
    for r in rows:
        for w in r["warnings"]:
            console.print(f"[bold red]warning:[/] {plain(r['name'])}: {plain(w)}", soft_wrap=True)
    console.print(f"[bold]verdict:[/] {plain(v['text'])}", soft_wrap=True, highlight=False)


def write_out(out: Path, rows: list[dict[str, Any]], v: dict[str, Any], title: str) -> list[Path]:
    """``whatif.csv`` (one row per design) and ``whatif.png`` (cost per unit of work vs avg JCT)."""
    from gpucluster.whatif import FIELDS

    with staged_out(out) as stage:  # both or neither
        with (stage / "whatif.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.DictWriter(fh, fieldnames=[*FIELDS, "verdict"], extrasaction="ignore")
            w.writeheader()
            for r in rows:
                w.writerow({**r, "verdict": "yes" if r["name"] == v["design"] else ""})
        plot(rows, v, title, stage / "whatif.png")
    return [out / "whatif.csv", out / "whatif.png"]


_MARKERS = (("owned", "usd_per_ref_gpu_hour", "avg_jct_s", "o"),
            ("on demand", "on_demand_usd_per_ref_gpu_hour", "avg_jct_s", "s"),
            ("spot", "spot_usd_per_ref_gpu_hour", "spot_avg_jct_s", "^"))


def plot(rows: list[dict[str, Any]], v: dict[str, Any], title: str, path: Path) -> None:
    """Cost per reference-GPU-hour of work against avg JCT, one colour per design and one marker per way of
    getting the GPUs (owned, on demand, spot); PNG or SVG by the file's suffix."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.5), gridspec_kw={"width_ratios": [3, 2]})
    colours = plt.get_cmap("tab10")
    for i, r in enumerate(rows):
        colour = colours(i % 10)
        for label, cost_key, jct_key, marker in _MARKERS:
            x, y = r.get(cost_key), r.get(jct_key)
            if x is None or y is None:
                continue
            ax1.scatter([x], [y / 3600.0], s=140 if r["name"] == v["design"] and label == "owned" else 70,
                        marker=marker, color=colour, edgecolors="black" if r["name"] == v["design"] else "none",
                        zorder=3, label=f"{r['name']} ({r.get('gpu', '')}) {label}")
        if r.get("usd_per_ref_gpu_hour") is not None:
            ax1.annotate(f"{r['name']}\n{r.get('gpu_speed', 1.0):.2f}x ref", (r["usd_per_ref_gpu_hour"],
                         r["avg_jct_s"] / 3600.0), textcoords="offset points", xytext=(8, 6), fontsize=8)
    limit = v["best_avg_jct_s"] * (1.0 + v["tolerance_pct"] / 100.0) / 3600.0
    ax1.axhline(limit, color="tab:green", linestyle="--", linewidth=1,
                label=f"best avg JCT + {v['tolerance_pct']:g}% (verdict threshold)")
    ax1.set_xlabel("$ per reference-GPU-hour of work")
    ax1.set_ylabel("average job completion time, hours")
    ax1.set_ylim(bottom=0)
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=7, loc="best")
    ax1.set_title(f"cost vs JCT per design (verdict: {v['design']}, black edge)")
    names = [r["name"] for r in rows]
    width = 0.27
    for k, (label, cost_key, _, _) in enumerate(_MARKERS):
        vals = [r.get(cost_key) or 0.0 for r in rows]
        ax2.bar([i + (k - 1) * width for i in range(len(rows))], vals, width, label=label)
    ax2.set_xticks(range(len(rows)), names, rotation=20)
    ax2.set_ylabel("$ per reference-GPU-hour of work")
    ax2.set_title("owned vs on demand vs spot")
    ax2.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def whatif(
    designs: Annotated[list[Path], typer.Option("--design", help="Requirements YAML (as for `gpucluster design`); "
                                                                "give two or more", show_default=False)],
    trace: Annotated[str, typer.Option("--trace", help="FORMAT:PATH; formats philly-gavel, alibaba-openb, tiresias, "
                                                       "jobs, or synthetic:N[:PROFILE[:LOAD]] (load sized on the "
                                                       "first --design)")],
    policy: Annotated[str | None, typer.Option(
        "--queue-policy", help=QUEUE_HELP + f" (default: {DEFAULT_QUEUE_POLICY})")] = None,
    old_policy: Annotated[str | None, deprecated_option("--policy", "--queue-policy")] = None,
    placement: Annotated[str | None, typer.Option(
        "--placement-policy", help=PLACEMENT_HELP + "; default: the queue policy's own")] = None,
    years: Annotated[float, typer.Option("--years", help="Years to amortise capex over")] = WHATIF_YEARS,
    tolerance: Annotated[float, typer.Option("--jct-tolerance", help="Verdict: percent above the best avg JCT "
                                                                     "a design may be")] = WHATIF_JCT_TOLERANCE_PCT,
    seed: Annotated[int, typer.Option(min=0, help="Random seed (synthetic traces, tie-breaks); >= 0")] = 0,
    limit: Annotated[int | None, typer.Option(help="Only the first N jobs (by arrival)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print {designs, verdict} as JSON")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for whatif.csv and whatif.png")] = None,
    plot_path: Annotated[Path | None, typer.Option(
        "--plot", help="Write the cost-vs-JCT plot here (PNG or SVG by the suffix)")] = None,
    ref_gpu: Annotated[str | None, typer.Option("--ref-gpu", help=REF_GPU_HELP.replace(
        "default for the rest: none (the same speed on every model)",
        "default for the rest: the first design's GPU model"))] = None,
    owned_utilization: Annotated[float | None, typer.Option(
        "--owned-utilization", help="Utilisation (0-1] the owned GPUs' yearly cost is spread over; default: "
                                    "the trace's offered load (reference GPUs over its arrival window) / the "
                                    "design's speed, at most 1 (the steady state if the workload goes on)")] = None,
    region: Annotated[str | None, typer.Option(
        "--region", help="Only cloud offers whose region or provider contains this (e.g. us-east-1, aliyun)")]
    = None,
    spot_per_day: Annotated[float, typer.Option(
        "--spot-interruptions-per-day", help="Mean spot interruptions per instance-day (lost work since the "
                                             "job's last checkpoint)")] = 1.0,
    spot_restart_h: Annotated[float, typer.Option(
        "--spot-restart-h", help="Hours from a spot interruption until the job runs again")] = 0.1,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", envvar="RAY_ADDRESS",
        help="Simulate the designs in parallel on this Ray cluster (HOST:PORT of the head, ray://HOST:10001, or "
             "auto); needs pip install 'gpucluster[ray]' and gpucluster on the workers. Same results as "
             "without it.")] = None,
) -> None:
    """Simulate each design on the same workload; print cost against utilisation and JCT, and which to buy."""
    from rich.console import Console

    from gpucluster.design.work_cost import SpotRisk
    from gpucluster.jobs import JOB_PLACEMENT
    from gpucluster.simulator import TraceError, load_trace, main_gpu_model, with_ref_gpu
    from gpucluster.simulator.experiments.executor import ExecutorError
    from gpucluster.whatif import HOURS_PER_YEAR, DesignInputError, evaluate_all, load_candidate, unique_names, verdict

    policy = renamed(policy, old_policy, "--queue-policy", "--policy") or DEFAULT_QUEUE_POLICY
    [policy] = check_queue_policies(policy)
    check_placement_policy(placement)
    # NaN passes every comparison false (and inf is no number of years): both are refused here, not met later
    # as a $nan verdict or a traceback
    if not 0 < years < math.inf:
        _fail([f"--years {years}: must be > 0 (and finite)"])
    if not tolerance >= 0:  # inf: any JCT will do (the cheapest design wins)
        _fail([f"--jct-tolerance {tolerance}: must be >= 0"])
    if limit is not None and limit <= 0:
        _fail(["--limit: must be > 0"])
    if owned_utilization is not None and not 0 < owned_utilization <= 1:
        _fail(["--owned-utilization: must be within (0, 1]"])
    for flag, value in (("--spot-interruptions-per-day", spot_per_day), ("--spot-restart-h", spot_restart_h)):
        if not 0 <= value < math.inf:
            _fail([f"{flag} {value}: must be >= 0 (and finite)"])
    if plot_path is not None and plot_path.suffix.lower() not in (".png", ".svg"):
        _fail([f"--plot {plot_path}: must end in .png or .svg"])
    if out is not None:  # before the simulations, which may be long
        check_out_dir(out)
    spot = SpotRisk(interruptions_per_hour=spot_per_day / 24.0, restart_h=spot_restart_h)
    try:
        cands = unique_names([load_candidate(p) for p in designs])
    except DesignInputError as exc:
        _fail(exc.lines)
    notes: list[str] = []
    try:
        # one job list for every design; synthetic arrival rates are sized on the first design, whose GPU model
        # is also the reference GPU of jobs that name none
        jobs = with_ref_gpu(load_trace(trace, cands[0].cluster, seed, notes),
                            ref_gpu or main_gpu_model(cands[0].cluster))
    except TraceError as exc:
        msg = str(exc)
        _fail([msg if msg.startswith("--trace") else f"--trace: {msg}"])
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    jobs = sorted(jobs, key=lambda j: j.submit_s)[:limit] if limit else jobs
    if not jobs:
        _fail([f"--trace {trace}: no jobs in it"])
    info = Console(stderr=True)
    try:
        rows = evaluate_all(cands, jobs, policy, seed, years, ray_address, placement, owned_utilization, spot, region,
                            progress=lambda line: info.print(line, highlight=False, markup=False))
    except ExecutorError as exc:
        _fail([f"--ray-address: {exc}"])
    v = verdict(rows, tolerance, region)
    title = f"what if: {len(jobs):,} jobs ({trace.split(':', 1)[0]}), policy {policy}"
    if as_json:
        print_json({
            "designs": rows,
            "verdict": v,
            "workload": {"trace": trace, "jobs": len(jobs), "policy": policy,
                         "placement_policy": placement or JOB_PLACEMENT, "seed": seed},
            "assumptions": {
                "years": years, "hours_per_year": HOURS_PER_YEAR,
                "ref_gpu_default": ref_gpu or main_gpu_model(cands[0].cluster),
                "owned_utilization": owned_utilization if owned_utilization is not None else
                "offered load in reference GPUs over the arrival window / the design's speed, at most 1",
                "spot_interruptions_per_day": spot_per_day, "spot_restart_h": spot_restart_h,
                "spot_checkpoint": "each job's checkpoint_interval_s", "region": region,
                "cloud_jct": "the simulated JCT (same GPU count rented); spot adds the expected lost time",
            },
        })
    else:
        _print_table(rows, v, title, years)
    info = Console(stderr=as_json)
    if out is not None:
        for p in write_out(out, rows, v, title):
            info.print(f"wrote {p}", highlight=False, markup=False)
    if plot_path is not None:
        try:
            plot_path.parent.mkdir(parents=True, exist_ok=True)
            plot(rows, v, title, plot_path)
        except OSError as exc:
            _fail([f"--plot {plot_path}: {exc.strerror}"])
        info.print(f"wrote {plot_path}", highlight=False, markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``whatif`` command to the root app."""
    app.command("whatif")(whatif)
