"""``gpucluster whatif``: simulate several cluster designs on one workload; cost against JCT and utilisation.

Each ``--design`` requirements file goes through the design calculator (:mod:`gpucluster.design`), becomes a
ClusterSpec (:mod:`gpucluster.design.spec_export`) and then a simulated cluster; the same job list (loaded once,
see :func:`gpucluster.cli.simulate_cmd.load_trace`) is replayed on each under one queue policy.  The layering
keeps ``design`` and ``simulator`` apart, so this module is where they meet.

Money (all from the design's price catalog, which holds estimates, not quotes):

* ``owned_usd_per_year`` = capex / ``--years`` (default 4, straight-line) + power per year;
* ``usd_per_gpu_hour`` (delivered) = owned per year / (GPUs x 8,760 h x simulated GPU utilisation): what one
  GPU-hour of work actually run costs if the cluster ran this workload around the clock;
* ``usd_per_gpu_hour_installed`` = the same at 100 % utilisation.

Verdict: among the designs that complete the most jobs (a design too small for some jobs rejects them, which
would flatter its JCT), take the best average JCT; every design whose average JCT is within
``--jct-tolerance`` percent (default 10) of it qualifies; the one with the lowest owned cost per year wins.
"""

from __future__ import annotations

import csv
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console

from gpucluster.cli.common import PLACEMENT_HELP, QUEUE_HELP, check_placement_policy, check_queue_policies, print_json
from gpucluster.cli.output import print_table
from gpucluster.cli.simulate_cmd import load_trace
from gpucluster.design import (
    Design,
    DesignError,
    RequirementsError,
    design,
    load_price_catalog,
    parse_requirements,
)
from gpucluster.design.spec_export import cluster_spec
from gpucluster.jobs import JOB_PLACEMENT
from gpucluster.jobs.model import JobSpec
from gpucluster.jobs.policies import DEFAULT_POLICY
from gpucluster.simulator.experiments.executor import ExecutorError, executor_for
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces import TraceError
from gpucluster.spec import Cluster, ClusterSpecFile, SpecError, cluster_from_spec

HOURS_PER_YEAR = 8760.0
DEFAULT_YEARS = 4.0
DEFAULT_TOLERANCE_PCT = 10.0

# CSV / JSON columns per design, in table order
FIELDS = (
    "name", "source", "gpu", "servers", "gpus", "capex_usd", "power_usd_per_year", "owned_usd_per_year",
    "usd_per_gpu_hour", "usd_per_gpu_hour_installed", "jobs", "jobs_completed", "jobs_rejected", "avg_jct_s",
    "p99_jct_s", "avg_queue_s", "gpu_utilization", "makespan_s",
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ``--design``: where it came from, the design, and the simulated cluster built from it."""

    name: str
    source: str
    design: Design
    cluster: Cluster


def _fail(lines: list[str]) -> NoReturn:
    for line in lines:
        print(line, file=sys.stderr)
    raise typer.Exit(2)


def load_candidate(path: Path) -> Candidate:
    """Requirements YAML -> design -> simulated cluster; exits 2 with ``where: why`` lines on bad input."""
    source = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        _fail([f"{source}: cannot read: {exc.strerror}"])
    except yaml.YAMLError as exc:
        _fail([f"{source}: not valid YAML: {exc}"])
    if not isinstance(data, dict):
        _fail([f"{source}: requirements: must be a mapping"])
    try:
        req = parse_requirements(data)
        d = design(req, load_price_catalog(req.cost.price_catalog))
        cluster = cluster_from_spec(ClusterSpecFile.model_validate(cluster_spec(d)), source)
    except RequirementsError as exc:
        _fail([f"{source}: {f}: {w}" for f, w in exc.problems])
    except DesignError as exc:
        _fail([f"{source}: {exc.field}: {exc.why}"])
    except (SpecError, ValueError) as exc:  # the exported spec is rejected: a bug, but say where
        _fail([f"{source}: cluster spec: {exc}"])
    return Candidate(req.name, source, d, cluster)


def _unique_names(cands: list[Candidate]) -> list[Candidate]:
    """Designs that share a ``name`` are told apart by their file name."""
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.name] = counts.get(c.name, 0) + 1
    out = []
    for i, c in enumerate(cands):
        name = c.name if counts[c.name] == 1 else f"{c.name} ({Path(c.source).name}#{i + 1})"
        out.append(Candidate(name, c.source, c.design, c.cluster))
    return out


def evaluate(cand: Candidate, jobs: list[JobSpec], policy: str, seed: int, years: float,
             placement: str | None = None) -> dict[str, Any]:
    """Simulate ``jobs`` on one design and put its cost next to what the simulation measured."""
    sim = Simulation(cand.cluster, policy, seed=seed, record_series=False, placement=placement)
    sim.submit_many(jobs)
    sim.run()
    s = sim.summary()
    d = cand.design
    owned = d.cost.capex_usd / years + d.cost.power_usd_per_year
    util = float(s["gpu_utilization"])
    installed_h = d.gpus * HOURS_PER_YEAR
    return {
        "name": cand.name,
        "source": cand.source,
        "gpu": d.gpu.name,
        "servers": d.servers,
        "gpus": d.gpus,
        "capex_usd": round(d.cost.capex_usd, 2),
        "power_usd_per_year": round(d.cost.power_usd_per_year, 2),
        "owned_usd_per_year": round(owned, 2),
        "usd_per_gpu_hour": round(owned / (installed_h * util), 4) if util > 0 and installed_h > 0 else None,
        "usd_per_gpu_hour_installed": round(owned / installed_h, 4) if installed_h > 0 else None,
        "jobs": s["jobs"],
        "jobs_completed": s["jobs_completed"],
        "jobs_rejected": s["jobs_rejected"],
        "avg_jct_s": round(float(s["avg_jct_s"]), 3),
        "p99_jct_s": round(float(s["p99_jct_s"]), 3),
        "avg_queue_s": round(float(s["avg_queue_s"]), 3),
        "gpu_utilization": round(util, 4),
        "makespan_s": round(float(s["makespan_s"]), 3),
        "warnings": list(d.warnings),
    }


def _evaluate_indexed(item: tuple[int, Candidate], jobs: list[JobSpec], policy: str, seed: int,
                      years: float, placement: str | None = None) -> tuple[int, dict[str, Any]]:
    return item[0], evaluate(item[1], jobs, policy, seed, years, placement)


def _evaluate_all(cands: list[Candidate], jobs: list[JobSpec], policy: str, seed: int, years: float,
                  ray_address: str | None, placement: str | None = None) -> list[dict[str, Any]]:
    """Every design's row, in ``cands`` order: here one after the other, or as parallel tasks on Ray."""
    if not ray_address:
        return [evaluate(c, jobs, policy, seed, years, placement) for c in cands]
    try:
        executor = executor_for(ray_address=ray_address)
    except ExecutorError as exc:
        _fail([f"--ray-address: {exc}"])
    info = Console(stderr=True)
    info.print(f"what if: {len(cands)} designs on {executor.description}", highlight=False)
    rows: dict[int, dict[str, Any]] = {}
    try:
        for k, row in executor.map_unordered(_evaluate_indexed, list(enumerate(cands)),
                                             (jobs, policy, seed, years, placement)):
            rows[k] = row
            info.print(f"  done: {row['name']} ({len(rows)}/{len(cands)})", highlight=False)
    finally:
        executor.close()
    return [rows[k] for k in range(len(cands))]


def verdict(rows: list[dict[str, Any]], tolerance_pct: float) -> dict[str, Any]:
    """The cheapest design (owned cost per year) whose average JCT is within ``tolerance_pct`` of the best,
    among the designs that complete the most jobs."""
    most = max(r["jobs_completed"] for r in rows)
    eligible = [r for r in rows if r["jobs_completed"] == most]
    best = min(eligible, key=lambda r: r["avg_jct_s"])
    limit = best["avg_jct_s"] * (1.0 + tolerance_pct / 100.0)
    within = [r for r in eligible if r["avg_jct_s"] <= limit + 1e-9]
    pick = min(within, key=lambda r: (r["owned_usd_per_year"], r["gpus"]))
    excluded = [r["name"] for r in rows if r["jobs_completed"] < most]
    if pick is best:
        text = (f"{pick['name']}: best avg JCT ({_hours(best['avg_jct_s'])}, ${pick['owned_usd_per_year']:,.0f}/yr "
                f"owned); no cheaper design comes within {tolerance_pct:g}% of it")
    else:
        text = (f"{pick['name']}: cheapest design (${pick['owned_usd_per_year']:,.0f}/yr owned) whose avg JCT "
                f"{_hours(pick['avg_jct_s'])} is within {tolerance_pct:g}% of the best, "
                f"{_hours(best['avg_jct_s'])} ({best['name']}, ${best['owned_usd_per_year']:,.0f}/yr)")
    if excluded:
        text += f"; not considered (completed fewer than {most} jobs): {', '.join(excluded)}"
    return {
        "design": pick["name"],
        "owned_usd_per_year": pick["owned_usd_per_year"],
        "avg_jct_s": pick["avg_jct_s"],
        "best_design": best["name"],
        "best_avg_jct_s": best["avg_jct_s"],
        "tolerance_pct": tolerance_pct,
        "within": [r["name"] for r in within],
        "excluded": excluded,
        "rule": ("lowest capex/years + power per year among designs that complete the most jobs and whose "
                 "avg JCT <= best avg JCT x (1 + tolerance)"),
        "text": text,
    }


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:,.2f} h"


def _money(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}" if v < 100 else f"${v:,.0f}"


_ROWS: tuple[tuple[str, str], ...] = (
    ("servers", "servers"), ("gpus", "GPUs"), ("capex_usd", "capex"), ("power_usd_per_year", "power / year"),
    ("owned_usd_per_year", "owned / year"), ("usd_per_gpu_hour", "$ / GPU-h delivered"),
    ("usd_per_gpu_hour_installed", "$ / GPU-h installed"), ("jobs", "jobs"), ("jobs_completed", "completed"),
    ("jobs_rejected", "rejected"), ("avg_jct_s", "avg JCT"), ("p99_jct_s", "p99 JCT"), ("avg_queue_s", "avg queue"),
    ("gpu_utilization", "GPU utilisation"), ("makespan_s", "makespan"),
)


def _cell(key: str, v: Any) -> str:
    if key.endswith("_usd") or key.startswith("usd_") or "_usd_" in key:
        return _money(v)
    if key.endswith("_s"):
        return _hours(float(v))
    if key == "gpu_utilization":
        return f"{float(v):.1%}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _print_table(rows: list[dict[str, Any]], v: dict[str, Any], title: str, years: float) -> None:
    console = Console()
    table = [["GPU", *(str(r["gpu"]) for r in rows)]]
    table += [[label, *(_cell(key, r[key]) for r in rows)] for key, label in _ROWS]
    print_table(["metric", *(r["name"] + (" *" if r["name"] == v["design"] else "") for r in rows)], table,
                title=title, right=range(1, len(rows) + 1))
    console.print(f"owned / year = capex / {years:g} years + power per year; $ / GPU-h delivered = owned / "
                  "(GPUs x 8,760 h x GPU utilisation); prices are catalog estimates", soft_wrap=True)
    for r in rows:
        for w in r["warnings"]:
            console.print(f"[bold red]warning:[/] {r['name']}: {w}", soft_wrap=True)
    console.print(f"[bold]verdict:[/] {v['text']}", soft_wrap=True, highlight=False)


def write_out(out: Path, rows: list[dict[str, Any]], v: dict[str, Any], title: str) -> list[Path]:
    """``whatif.csv`` (one row per design) and ``whatif.png`` (cost vs avg JCT, $ per delivered GPU-hour)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        _fail([f"--out {out}: {exc.strerror}"])
    csv_path, png_path = out / "whatif.csv", out / "whatif.png"
    with csv_path.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=[*FIELDS, "verdict"], extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "verdict": "yes" if r["name"] == v["design"] else ""})
    _plot(rows, v, title, png_path)
    return [csv_path, png_path]


def _plot(rows: list[dict[str, Any]], v: dict[str, Any], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    box = {"boxstyle": "round", "fc": "white", "alpha": 0.85}
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 5), gridspec_kw={"width_ratios": [3, 2]})
    xs = [r["owned_usd_per_year"] / 1e6 for r in rows]
    avg = [r["avg_jct_s"] / 3600.0 for r in rows]
    colours = ["tab:green" if r["name"] == v["design"] else "tab:blue" for r in rows]
    ax1.scatter(xs, avg, s=110, c=colours, zorder=3)
    for x, y, r in zip(xs, avg, rows, strict=True):
        ax1.annotate(f"{r['name']}: {r['gpus']:,} GPUs\navg {y:,.2f} h, p99 {r['p99_jct_s'] / 3600.0:,.1f} h\n"
                     f"util {r['gpu_utilization']:.0%}", (x, y), textcoords="offset points", xytext=(0, 12),
                     ha="center", va="bottom", fontsize=9, bbox=box)
    limit = v["best_avg_jct_s"] * (1.0 + v["tolerance_pct"] / 100.0) / 3600.0
    ax1.axhline(limit, color="tab:green", linestyle="--", linewidth=1,
                label=f"best avg JCT + {v['tolerance_pct']:g}% (verdict threshold)")
    span = (max(xs) - min(xs)) or max(xs) or 1.0
    ax1.set_xlim(min(xs) - 0.25 * span, max(xs) + 0.25 * span)
    ax1.set_ylim(0, max(*avg, limit) * 1.45)
    ax1.set_xlabel("owned cost per year, $M (capex amortised + power)")
    ax1.set_ylabel("average job completion time, hours")
    ax1.grid(True, alpha=0.3)
    ax1.legend(fontsize=8, loc="lower right")
    ax1.set_title("cost vs JCT (green: verdict)")
    names = [r["name"] for r in rows]
    per_h = [r["usd_per_gpu_hour"] or 0.0 for r in rows]
    bars = ax2.bar(names, per_h, color=colours)
    for b, r in zip(bars, rows, strict=True):
        ax2.annotate(_money(r["usd_per_gpu_hour"]), (b.get_x() + b.get_width() / 2, b.get_height()),
                     ha="center", va="bottom", fontsize=9)
    ax2.set_ylabel("$ per GPU-hour delivered")
    ax2.set_title("cost per GPU-hour of work run")
    ax2.tick_params(axis="x", labelrotation=20)
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
    policy: Annotated[str, typer.Option("--queue-policy", "--policy", help=QUEUE_HELP + " (--policy: the same)")]
    = DEFAULT_POLICY,
    placement: Annotated[str | None, typer.Option(
        "--placement-policy", help=PLACEMENT_HELP + "; default: the queue policy's own")] = None,
    years: Annotated[float, typer.Option("--years", help="Years to amortise capex over")] = DEFAULT_YEARS,
    tolerance: Annotated[float, typer.Option("--jct-tolerance", help="Verdict: percent above the best avg JCT "
                                                                     "a design may be")] = DEFAULT_TOLERANCE_PCT,
    seed: Annotated[int, typer.Option(help="Random seed (synthetic traces, tie-breaks)")] = 0,
    limit: Annotated[int | None, typer.Option(help="Only the first N jobs (by arrival)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print {designs, verdict} as JSON")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Folder for whatif.csv and whatif.png")] = None,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", envvar="RAY_ADDRESS",
        help="Simulate the designs in parallel on this Ray cluster (HOST:PORT of the head, ray://HOST:10001, or "
             "auto); needs pip install 'gpucluster[ray]' and gpucluster on the workers. Same results as "
             "without it.")] = None,
) -> None:
    """Simulate each design on the same workload; print cost against utilisation and JCT, and which to buy."""
    [policy] = check_queue_policies(policy)
    check_placement_policy(placement)
    if years <= 0:
        _fail(["--years: must be > 0"])
    if tolerance < 0:
        _fail(["--jct-tolerance: must be >= 0"])
    if limit is not None and limit <= 0:
        _fail(["--limit: must be > 0"])
    cands = _unique_names([load_candidate(p) for p in designs])
    try:
        # one job list for every design; synthetic arrival rates are sized on the first design
        jobs = load_trace(trace, cands[0].cluster, seed)
    except TraceError as exc:
        msg = str(exc)
        _fail([msg if msg.startswith("--trace") else f"--trace: {msg}"])
    jobs = sorted(jobs, key=lambda j: j.submit_s)[:limit] if limit else jobs
    if not jobs:
        _fail([f"--trace {trace}: no jobs in it"])
    rows = _evaluate_all(cands, jobs, policy, seed, years, ray_address, placement)
    v = verdict(rows, tolerance)
    title = f"what if: {len(jobs):,} jobs ({trace.split(':', 1)[0]}), policy {policy}"
    if as_json:
        print_json({
            "designs": rows,
            "verdict": v,
            "workload": {"trace": trace, "jobs": len(jobs), "policy": policy,
                         "placement_policy": placement or JOB_PLACEMENT, "seed": seed},
            "assumptions": {"years": years, "hours_per_year": HOURS_PER_YEAR},
        })
    else:
        _print_table(rows, v, title, years)
    if out is not None:
        info = Console(stderr=as_json)
        for p in write_out(out, rows, v, title):
            info.print(f"wrote {p}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``whatif`` command to the root app."""
    app.command("whatif")(whatif)
