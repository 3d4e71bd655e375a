"""``gpucluster whatif``: simulate several cluster designs on one workload; cost against JCT and utilisation.

Each ``--design`` requirements file goes through the design calculator (:mod:`gpucluster.design`), becomes a
ClusterSpec (:mod:`gpucluster.design.spec_export`) and then a simulated cluster; the same job list (loaded once,
see :func:`gpucluster.cli.simulate_cmd.load_trace`) is replayed on each under one queue policy.  The layering
keeps ``design`` and ``simulator`` apart, so this module is where they meet.

Buyer units (:mod:`gpucluster.cli.whatif_cost`, prices from :mod:`gpucluster.design.work_cost`): a job's work is
its GPUs x ``duration_s`` seconds on its reference GPU (``ref_gpu``; jobs that name none get ``--ref-gpu``, by
default the first design's GPU model), and each design runs it at the speed model's speed for its GPU model. Per
design: cost per reference-GPU-hour of work, per job and per million tokens (inference jobs with a token count),
owned (capex / ``--years`` + power, over the GPU-hours worked at the steady-state utilisation
-- the trace's offered load in reference GPUs over its arrival window divided by the design's speed, capped at
1 -- or ``--owned-utilization``) and cloud (on-demand and spot per provider and region of the price catalog, spot
interruptions as lost work since the last checkpoint), with JCT and queueing.

Verdict: among the designs that complete the most jobs (a design too small for some jobs rejects them, which
would flatter its JCT), take the best average JCT; every design whose average JCT is within ``--jct-tolerance``
percent (default 10) of it qualifies; the one with the lowest owned cost per reference-GPU-hour of work wins (ties:
lower owned cost per year). So a slower GPU (an L40S for training) wins only when its cost per unit of work is
the lowest *and* its JCT is within the tolerance. The verdict's paragraph names the figures that decided it and
whether renting the winner's GPUs (on demand or spot) would cost less per unit of work.

Older per-GPU-hour figures stay: ``owned_usd_per_year`` = capex / years + power; ``usd_per_gpu_hour`` (delivered) =
owned per year / (GPUs x 8,760 h x simulated GPU utilisation); ``usd_per_gpu_hour_installed`` = the same at 100 %.
"""

from __future__ import annotations

import csv
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
import yaml
from rich.console import Console

from gpucluster.cli.common import PLACEMENT_HELP, QUEUE_HELP, check_placement_policy, check_queue_policies, print_json
from gpucluster.cli.output import print_table
from gpucluster.cli.simulate_cmd import REF_GPU_HELP, load_trace, main_gpu_model, with_ref_gpu
from gpucluster.cli.whatif_cost import WorkDone, design_costs
from gpucluster.design import (
    Design,
    DesignError,
    RequirementsError,
    design,
    load_price_catalog,
    parse_requirements,
)
from gpucluster.design.prices import PriceCatalog
from gpucluster.design.spec_export import cluster_spec
from gpucluster.design.work_cost import SpotRisk
from gpucluster.jobs import JOB_PLACEMENT
from gpucluster.jobs.model import JobSpec
from gpucluster.jobs.policies import DEFAULT_POLICY
from gpucluster.simulator.experiments.executor import ExecutorError, executor_for
from gpucluster.simulator.load import offered_load
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
    "gpu_speed", "work_ref_gpu_h", "gpu_utilization_window", "offered_load_ref", "demand_over_capacity",
    "owned_utilization",
    "usd_per_ref_gpu_hour", "usd_per_job", "usd_per_million_tokens", "on_demand_usd_per_ref_gpu_hour",
    "on_demand_region", "spot_usd_per_ref_gpu_hour", "spot_region", "spot_lost_work_share", "spot_avg_jct_s",
)


@dataclass(frozen=True, slots=True)
class Candidate:
    """One ``--design``: where it came from, the design, and the simulated cluster built from it."""

    name: str
    source: str
    design: Design
    cluster: Cluster
    prices: PriceCatalog


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
        prices = load_price_catalog(req.cost.price_catalog)
        d = design(req, prices)
        cluster = cluster_from_spec(ClusterSpecFile.model_validate(cluster_spec(d)), source)
    except RequirementsError as exc:
        _fail([f"{source}: {f}: {w}" for f, w in exc.problems])
    except DesignError as exc:
        _fail([f"{source}: {exc.field}: {exc.why}"])
    except (SpecError, ValueError) as exc:  # the exported spec is rejected: a bug, but say where
        _fail([f"{source}: cluster spec: {exc}"])
    return Candidate(req.name, source, d, cluster, prices)


def _unique_names(cands: list[Candidate]) -> list[Candidate]:
    """Designs that share a ``name`` are told apart by their file name."""
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.name] = counts.get(c.name, 0) + 1
    out = []
    for i, c in enumerate(cands):
        name = c.name if counts[c.name] == 1 else f"{c.name} ({Path(c.source).name}#{i + 1})"
        out.append(Candidate(name, c.source, c.design, c.cluster, c.prices))
    return out


def evaluate(cand: Candidate, jobs: list[JobSpec], policy: str, seed: int, years: float,
             placement: str | None = None, owned_utilization: float | None = None, spot: SpotRisk | None = None,
             region: str | None = None) -> dict[str, Any]:
    """Simulate ``jobs`` on one design and put its cost next to what the simulation measured."""
    sim = Simulation(cand.cluster, policy, seed=seed, placement=placement)
    sim.submit_many(jobs)
    sim.run()
    s = sim.summary()
    d = cand.design
    owned = d.cost.capex_usd / years + d.cost.power_usd_per_year
    util = float(s["gpu_utilization"])
    installed_h = d.gpus * HOURS_PER_YEAR
    window_util = float(s.get("gpu_utilization_window", 0.0))
    # steady state: the GPUs work what the trace offers (in reference GPUs, over its arrival window) at the speed
    # they run it, or all the time when that is more than they can do
    offered = offered_load(jobs, d.gpus)
    use = owned_utilization or (min(offered / float(s["gpu_speed"]), 1.0) if offered > 0 else 1.0)
    costs = design_costs(d.gpu.name, owned, d.gpus, min(use, 1.0), cand.prices, WorkDone.of(list(sim.jobs.values())),
                         spot or SpotRisk(), region)
    od, sp = costs["on_demand"] or {}, costs["spot"] or {}
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
        "gpu_speed": round(float(s["gpu_speed"]), 4),
        "work_ref_gpu_h": round(float(s["work_ref_gpu_h"]), 3),
        "gpu_utilization_window": round(window_util, 4),
        "offered_load_ref": round(offered, 4),
        "demand_over_capacity": round(offered / float(s["gpu_speed"]), 4),
        "owned_utilization": costs["owned"]["utilization"],
        "usd_per_ref_gpu_hour": costs["owned"]["usd_per_ref_gpu_hour"],
        "usd_per_job": costs["owned"]["usd_per_job"],
        "usd_per_million_tokens": costs["owned"]["usd_per_million_tokens"],
        "on_demand_usd_per_ref_gpu_hour": od.get("usd_per_ref_gpu_hour"),
        "on_demand_region": f"{od['provider']} {od['region']}" if od else None,
        "spot_usd_per_ref_gpu_hour": sp.get("usd_per_ref_gpu_hour"),
        "spot_region": f"{sp['provider']} {sp['region']}" if sp else None,
        "spot_lost_work_share": sp.get("lost_work_share"),
        "spot_avg_jct_s": sp.get("avg_jct_s"),
        "costs": costs,
        "warnings": list(d.warnings),
    }


def _per_work(r: dict[str, Any]) -> float:
    v = r.get("usd_per_ref_gpu_hour")
    return math.inf if v is None else float(v)


def _evaluate_indexed(item: tuple[int, Candidate], jobs: list[JobSpec], policy: str, seed: int, years: float,
                      placement: str | None = None, owned_utilization: float | None = None,
                      spot: SpotRisk | None = None, region: str | None = None) -> tuple[int, dict[str, Any]]:
    return item[0], evaluate(item[1], jobs, policy, seed, years, placement, owned_utilization, spot, region)


def _evaluate_all(cands: list[Candidate], jobs: list[JobSpec], policy: str, seed: int, years: float,
                  ray_address: str | None, placement: str | None = None, owned_utilization: float | None = None,
                  spot: SpotRisk | None = None, region: str | None = None) -> list[dict[str, Any]]:
    """Every design's row, in ``cands`` order: here one after the other, or as parallel tasks on Ray."""
    if not ray_address:
        return [evaluate(c, jobs, policy, seed, years, placement, owned_utilization, spot, region) for c in cands]
    try:
        executor = executor_for(ray_address=ray_address)
    except ExecutorError as exc:
        _fail([f"--ray-address: {exc}"])
    info = Console(stderr=True)
    info.print(f"what if: {len(cands)} designs on {executor.description}", highlight=False)
    rows: dict[int, dict[str, Any]] = {}
    try:
        for k, row in executor.map_unordered(_evaluate_indexed, list(enumerate(cands)),
                                             (jobs, policy, seed, years, placement, owned_utilization, spot,
                                             region)):
            rows[k] = row
            info.print(f"  done: {row['name']} ({len(rows)}/{len(cands)})", highlight=False)
    finally:
        executor.close()
    return [rows[k] for k in range(len(cands))]


def verdict(rows: list[dict[str, Any]], tolerance_pct: float) -> dict[str, Any]:
    """The design with the lowest owned cost per reference-GPU-hour of work whose average JCT is within
    ``tolerance_pct`` of the best, among the designs that complete the most jobs; a paragraph says why."""
    most = max(r["jobs_completed"] for r in rows)
    eligible = [r for r in rows if r["jobs_completed"] == most]
    best = min(eligible, key=lambda r: r["avg_jct_s"])
    limit = best["avg_jct_s"] * (1.0 + tolerance_pct / 100.0)
    within = [r for r in eligible if r["avg_jct_s"] <= limit + 1e-9]
    pick = min(within, key=lambda r: (_per_work(r), r["owned_usd_per_year"], r["gpus"]))
    cheapest = min(eligible, key=lambda r: (_per_work(r), r["owned_usd_per_year"], r["gpus"]))
    excluded = [r["name"] for r in rows if r["jobs_completed"] < most]
    return {
        "design": pick["name"],
        "gpu": pick.get("gpu"),
        "owned_usd_per_year": pick["owned_usd_per_year"],
        "usd_per_ref_gpu_hour": pick.get("usd_per_ref_gpu_hour"),
        "avg_jct_s": pick["avg_jct_s"],
        "best_design": best["name"],
        "best_avg_jct_s": best["avg_jct_s"],
        "cheapest_design": cheapest["name"],
        "cheapest_usd_per_ref_gpu_hour": cheapest.get("usd_per_ref_gpu_hour"),
        "tolerance_pct": tolerance_pct,
        "within": [r["name"] for r in within],
        "excluded": excluded,
        "rent_instead": _rent(pick),
        "rule": ("lowest owned cost per reference-GPU-hour of work among designs that complete the most jobs and "
                 "whose avg JCT <= best avg JCT x (1 + tolerance); ties: lower owned cost per year"),
        "text": _paragraph(pick, best, cheapest, within, rows, excluded, most, tolerance_pct),
    }


def _rent(pick: dict[str, Any]) -> str | None:
    """The cloud option that costs less per unit of work than owning the winner, if any."""
    own = pick.get("usd_per_ref_gpu_hour")
    options = [(pick.get(f"{k}_usd_per_ref_gpu_hour"), k) for k in ("on_demand", "spot")]
    cheaper = [(v, k) for v, k in options if v is not None and own is not None and v < own]
    return min(cheaper)[1].replace("_", "-") if cheaper else None


def _usd(v: float | None) -> str:
    return "n/a" if v is None else f"${v:,.2f}"


def _paragraph(pick: dict[str, Any], best: dict[str, Any], cheapest: dict[str, Any], within: list[dict[str, Any]],
               rows: list[dict[str, Any]], excluded: list[str], most: int, tol: float) -> str:
    """One paragraph: what to buy, and the figures that decided it."""
    gpu = pick.get("gpu", "")
    text = (f"{pick['name']}: buy {pick['gpus']:,} x {gpu}, owned at {_usd(pick.get('usd_per_ref_gpu_hour'))} per "
            f"reference-GPU-hour of work (${pick['owned_usd_per_year']:,.0f}/yr, "
            f"{pick.get('owned_utilization', 0.0):.0%} utilised, {pick.get('gpu_speed', 1.0):.2f}x the reference "
            f"GPU's speed), avg JCT {_hours(pick['avg_jct_s'])}, avg queue {_hours(pick.get('avg_queue_s', 0.0))}")
    if pick is best:
        text += "; the best avg JCT of all designs"
    else:
        text += (f"; within {tol:g}% of the best avg JCT, {_hours(best['avg_jct_s'])} ({best['name']}, "
                 f"{_usd(best.get('usd_per_ref_gpu_hour'))} per reference-GPU-hour)")
    if cheapest is not pick:
        ratio = cheapest["avg_jct_s"] / pick["avg_jct_s"] if pick["avg_jct_s"] > 0 else math.inf
        text += (f". {cheapest['name']} costs less per unit of work ({_usd(cheapest.get('usd_per_ref_gpu_hour'))}) "
                 f"but its avg JCT {_hours(cheapest['avg_jct_s'])} is {ratio:.1f}x as long, beyond the "
                 f"{tol:g}% tolerance (--jct-tolerance)")
        over = cheapest.get("demand_over_capacity")
        if over is not None and over > 1:
            text += f"; the trace asks {over:.2f}x what its GPUs can do, so it queues"
    others = [r["name"] for r in within if r is not pick]
    if others:
        text += f". Also within the tolerance but dearer per unit of work: {', '.join(others)}"
    od, sp = pick.get("on_demand_usd_per_ref_gpu_hour"), pick.get("spot_usd_per_ref_gpu_hour")
    if od is not None or sp is not None:
        text += (f". Renting the same GPUs costs {_usd(od)} on demand ({pick.get('on_demand_region')}) and "
                 f"{_usd(sp)} on spot ({pick.get('spot_region')}, "
                 f"{(pick.get('spot_lost_work_share') or 0.0):.1%} of the work lost to interruptions) per "
                 "reference-GPU-hour")
        rent = _rent(pick)
        text += (f": renting {rent} is cheaper at this utilisation" if rent else ": owning is cheaper")
    elif gpu:
        text += f". The price catalog has no cloud offer for {gpu}"
    if excluded:
        text += f". Not considered (completed fewer than {most} jobs): {', '.join(excluded)}"
    return text + "."


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:,.2f} h"


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
    if key.endswith("_usd") or key.startswith("usd_") or "_usd_" in key:
        return _money(v)
    if v is None:
        return "n/a"
    if key.endswith("_s"):
        return _hours(float(v))
    if key in ("gpu_utilization", "gpu_utilization_window", "owned_utilization", "spot_lost_work_share",
               "offered_load_ref"):
        return f"{float(v):.1%}"
    if key == "gpu_speed":
        return f"{float(v):.2f}x"
    if key == "work_ref_gpu_h":
        return f"{float(v):,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _print_table(rows: list[dict[str, Any]], v: dict[str, Any], title: str, years: float) -> None:
    console = Console()
    table = [["GPU", *(str(r["gpu"]) for r in rows)]]
    table += [[label, *(_cell(key, r[key]) for r in rows)] for key, label in _ROWS]
    print_table(["metric", *(r["name"] + (" *" if r["name"] == v["design"] else "") for r in rows)], table,
                title=title, right=range(1, len(rows) + 1))
    console.print(f"owned / year = capex / {years:g} years + power per year; $ / GPU-h delivered = owned / "
                  "(GPUs x 8,760 h x GPU utilisation); $ / ref-GPU-h = cost of one hour of work on the jobs' "
                  "reference GPU (owned: at the utilisation used; spot: lost work included); prices are catalog "
                  "estimates", soft_wrap=True)
    for r in rows:
        for w in r["warnings"]:
            console.print(f"[bold red]warning:[/] {r['name']}: {w}", soft_wrap=True)
    console.print(f"[bold]verdict:[/] {v['text']}", soft_wrap=True, highlight=False)


def write_out(out: Path, rows: list[dict[str, Any]], v: dict[str, Any], title: str) -> list[Path]:
    """``whatif.csv`` (one row per design) and ``whatif.png`` (cost per unit of work vs avg JCT)."""
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
    plot(rows, v, title, png_path)
    return [csv_path, png_path]


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
    [policy] = check_queue_policies(policy)
    check_placement_policy(placement)
    if years <= 0:
        _fail(["--years: must be > 0"])
    if tolerance < 0:
        _fail(["--jct-tolerance: must be >= 0"])
    if limit is not None and limit <= 0:
        _fail(["--limit: must be > 0"])
    if owned_utilization is not None and not 0 < owned_utilization <= 1:
        _fail(["--owned-utilization: must be within (0, 1]"])
    if spot_per_day < 0 or spot_restart_h < 0:
        _fail(["--spot-interruptions-per-day and --spot-restart-h: must be >= 0"])
    if plot_path is not None and plot_path.suffix.lower() not in (".png", ".svg"):
        _fail([f"--plot {plot_path}: must end in .png or .svg"])
    spot = SpotRisk(interruptions_per_hour=spot_per_day / 24.0, restart_h=spot_restart_h)
    cands = _unique_names([load_candidate(p) for p in designs])
    try:
        # one job list for every design; synthetic arrival rates are sized on the first design, whose GPU model
        # is also the reference GPU of jobs that name none
        jobs = with_ref_gpu(load_trace(trace, cands[0].cluster, seed), ref_gpu or main_gpu_model(cands[0].cluster))
    except TraceError as exc:
        msg = str(exc)
        _fail([msg if msg.startswith("--trace") else f"--trace: {msg}"])
    jobs = sorted(jobs, key=lambda j: j.submit_s)[:limit] if limit else jobs
    if not jobs:
        _fail([f"--trace {trace}: no jobs in it"])
    rows = _evaluate_all(cands, jobs, policy, seed, years, ray_address, placement, owned_utilization, spot, region)
    v = verdict(rows, tolerance)
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
            info.print(f"wrote {p}", highlight=False)
    if plot_path is not None:
        try:
            plot_path.parent.mkdir(parents=True, exist_ok=True)
            plot(rows, v, title, plot_path)
        except OSError as exc:
            _fail([f"--plot {plot_path}: {exc.strerror}"])
        info.print(f"wrote {plot_path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add the ``whatif`` command to the root app."""
    app.command("whatif")(whatif)
