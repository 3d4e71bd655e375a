"""What if: several cluster designs simulated on one workload, each priced in buyer units, and a verdict.

Each design is a requirements file that goes through the design calculator (:mod:`gpucluster.design`), becomes
a ClusterSpec (:mod:`gpucluster.design.spec_export`) and then a simulated cluster; the same job list is replayed
on each under one queue policy (:class:`gpucluster.simulator.Simulation`). The layering keeps ``design`` and
``simulator`` apart, so this package, above both, is where they meet; ``gpucluster whatif``
(:mod:`gpucluster.cli.whatif_cmd`) parses the flags and prints what :func:`evaluate` and :func:`verdict` return.

Buyer units (:mod:`gpucluster.whatif.cost`, prices from :mod:`gpucluster.design.work_cost`): a job's work is
its GPUs x ``duration_s`` seconds on its reference GPU (``ref_gpu``), and each design runs it at the speed
model's speed for its GPU model. Per design: cost per reference-GPU-hour of work, per job and per million tokens
(inference jobs with a token count), owned (capex / ``years`` + power, over the GPU-hours worked at the
steady-state utilisation -- the trace's offered load in reference GPUs over its arrival window divided by the
design's speed, capped at 1 -- or ``owned_utilization``) and cloud (on-demand and spot per provider and region of
the price catalog, spot interruptions as lost work since the last checkpoint), with JCT and queueing.

Verdict: among the designs that complete the most jobs (a design too small for some jobs rejects them, which
would flatter its JCT), take the best average JCT; every design whose average JCT is within ``tolerance_pct``
percent of it qualifies; the one with the lowest owned cost per reference-GPU-hour of work wins (ties: lower owned
cost per year). So a slower GPU (an L40S for training) wins only when its cost per unit of work is the lowest
*and* its JCT is within the tolerance. The verdict's paragraph names the figures that decided it and whether
renting the winner's GPUs (on demand or spot) would cost less per unit of work.

Older per-GPU-hour figures stay: ``owned_usd_per_year`` = capex / years + power; ``usd_per_gpu_hour`` (delivered) =
owned per year / (GPUs x 8,760 h x simulated GPU utilisation); ``usd_per_gpu_hour_installed`` = the same at 100 %.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from gpucluster import inputfile
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
from gpucluster.jobs import JobSpec
from gpucluster.simulator import Simulation
from gpucluster.simulator.experiments.executor import executor_for
from gpucluster.simulator.load import offered_load
from gpucluster.spec import Cluster, ClusterSpecFile, SpecError, cluster_from_spec, load_cluster
from gpucluster.whatif.cost import WorkDone, design_costs

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


class DesignInputError(ValueError):
    """A design file that cannot be read or designed: ``lines`` say where and why (``FILE: field: why``)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def _fail(lines: list[str]) -> NoReturn:
    raise DesignInputError(lines)


#: What ``gpucluster design --out DIR`` names the cluster spec it writes there.
DESIGN_OUT_SPEC = "cluster-spec.yaml"


def _spec_requirements(spec: ClusterSpecFile, source: str) -> dict[str, Any]:
    """The requirements ``design`` would turn into this spec's GPU servers: its one GPU model and per-server
    count, its server count and its fabric; the rest (PSU, storage, management, prices) are ``design``'s
    defaults. A spec of several GPU models or counts is refused: one design prices one server type."""
    pools = [p for p in spec.node_pools if p.gpu is not None]
    if not pools:
        _fail([f"{source}: nodePools: no pool has GPUs; whatif prices GPU servers"])
    shapes = sorted({(p.gpu.model, p.gpu.count) for p in pools if p.gpu is not None})
    if len(shapes) > 1:
        kinds = ", ".join(f"{m} x {c}" for m, c in shapes)
        _fail([f"{source}: nodePools: GPU servers of {len(shapes)} kinds ({kinds}); a design prices one kind: "
               "give a requirements file (see docs/design.md) per design"])
    [(model, count)] = shapes
    return {"name": spec.name, "gpu": model, "gpus_per_server": count, "servers": sum(p.count for p in pools),
            "fabric": {"type": str(spec.fabric.type), "link_gbps": int(spec.fabric.link_gbps),
                       "oversubscription": spec.fabric.oversubscription}}


def _candidate_from_spec(path: Path, data: dict[str, Any]) -> Candidate:
    """A cluster spec (what ``design --export-spec`` / ``design --out`` wrote, or any ClusterSpec): the cluster
    simulated is the spec as written, priced as the design of the same GPU servers and fabric."""
    source = str(path)
    try:
        cluster = load_cluster(path)
        spec = ClusterSpecFile.model_validate(data)
    except (SpecError, ValueError) as exc:
        _fail([str(exc) if str(exc).startswith(source) else f"{source}: {exc}"])
    try:
        req = parse_requirements(_spec_requirements(spec, source))
        prices = load_price_catalog(req.cost.price_catalog)
        d = design(req, prices)
    except RequirementsError as exc:
        _fail([f"{source}: cannot price it as a design: {f}: {w}" for f, w in exc.problems])
    except DesignError as exc:
        _fail([f"{source}: cannot price it as a design: {exc.field}: {exc.why}"])
    return Candidate(req.name, source, d, cluster, prices)


def load_candidate(path: Path) -> Candidate:
    """Requirements YAML -> design -> simulated cluster; raises :class:`DesignInputError` on bad input.

    Also takes a cluster spec (``kind: ClusterSpec``, as ``design --export-spec`` writes it) or the folder
    ``design --out`` wrote (its ``cluster-spec.yaml``): see :func:`_candidate_from_spec`."""
    if path.is_dir():
        if not (path / DESIGN_OUT_SPEC).is_file():
            _fail([f"{path}: a folder without {DESIGN_OUT_SPEC} (give a requirements file, a cluster spec or "
                   "the folder `gpucluster design --out` wrote)"])
        path = path / DESIGN_OUT_SPEC
    source = str(path)
    try:
        data = inputfile.load_yaml(path)
    except inputfile.InputFileError as exc:
        _fail([str(exc)])
    if isinstance(data, dict) and data.get("kind") == "ClusterSpec":
        return _candidate_from_spec(path, data)
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


def unique_names(cands: list[Candidate]) -> list[Candidate]:
    """Designs that share a ``name`` are told apart by their file name."""
    counts: dict[str, int] = {}
    for c in cands:
        counts[c.name] = counts.get(c.name, 0) + 1
    out = []
    for i, c in enumerate(cands):
        name = c.name if counts[c.name] == 1 else f"{c.name} ({Path(c.source).name}#{i + 1})"
        out.append(Candidate(name, c.source, c.design, c.cluster, c.prices))
    return out


def evaluate(cand: Candidate, jobs: list[JobSpec], queue_policy: str, seed: int, years: float,
             placement_policy: str | None = None, owned_utilization: float | None = None, spot: SpotRisk | None = None,
             region: str | None = None) -> dict[str, Any]:
    """Simulate ``jobs`` on one design and put its cost next to what the simulation measured."""
    sim = Simulation(cand.cluster, queue_policy, seed=seed, placement_policy=placement_policy)
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
        **sim.placement_report(),
    }


def _per_work(r: dict[str, Any]) -> float:
    v = r.get("usd_per_ref_gpu_hour")
    return math.inf if v is None else float(v)


def _evaluate_indexed(item: tuple[int, Candidate], jobs: list[JobSpec], queue_policy: str, seed: int, years: float,
                      placement_policy: str | None = None, owned_utilization: float | None = None,
                      spot: SpotRisk | None = None, region: str | None = None) -> tuple[int, dict[str, Any]]:
    return item[0], evaluate(item[1], jobs, queue_policy, seed, years, placement_policy, owned_utilization, spot,
                             region)


def evaluate_all(cands: list[Candidate], jobs: list[JobSpec], queue_policy: str, seed: int, years: float,
                 ray_address: str | None, placement_policy: str | None = None, owned_utilization: float | None = None,
                 spot: SpotRisk | None = None, region: str | None = None,
                 progress: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Every design's row, in ``cands`` order: here one after the other, or as parallel tasks on Ray (then
    ``progress`` hears a line per design done). Raises ``ExecutorError`` when Ray cannot be used."""
    if not ray_address:
        return [evaluate(c, jobs, queue_policy, seed, years, placement_policy, owned_utilization, spot, region)
                for c in cands]
    executor = executor_for(ray_address=ray_address)
    say = progress or (lambda _line: None)
    say(f"what if: {len(cands)} designs on {executor.description}")
    rows: dict[int, dict[str, Any]] = {}
    try:
        for k, row in executor.map_unordered(_evaluate_indexed, list(enumerate(cands)),
                                             (jobs, queue_policy, seed, years, placement_policy,
                                              owned_utilization, spot, region)):
            rows[k] = row
            say(f"  done: {row['name']} ({len(rows)}/{len(cands)})")
    finally:
        executor.close()
    return [rows[k] for k in range(len(cands))]


def verdict(rows: list[dict[str, Any]], tolerance_pct: float, region: str | None = None) -> dict[str, Any]:
    """The design with the lowest owned cost per reference-GPU-hour of work whose average JCT is within
    ``tolerance_pct`` of the best, among the designs that complete the most jobs; a paragraph says why.
    ``region``: the filter the cloud offers were chosen with (``--region``), named when none matched."""
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
        "text": _paragraph(pick, best, cheapest, within, rows, excluded, most, tolerance_pct, region),
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
               rows: list[dict[str, Any]], excluded: list[str], most: int, tol: float,
               region: str | None = None) -> str:
    """One paragraph: what to buy, and the figures that decided it."""
    gpu = pick.get("gpu", "")
    text = (f"{pick['name']}: buy {pick['gpus']:,} x {gpu}, owned at {_usd(pick.get('usd_per_ref_gpu_hour'))} per "
            f"reference-GPU-hour of work (${pick['owned_usd_per_year']:,.0f}/yr, "
            f"{pick.get('owned_utilization', 0.0):.0%} utilised, {pick.get('gpu_speed', 1.0):.2f}x the reference "
            f"GPU's speed), avg JCT {hours(pick['avg_jct_s'])}, avg queue {hours(pick.get('avg_queue_s', 0.0))}")
    if pick is best:
        text += "; the best avg JCT of all designs"
    else:
        text += (f"; within {tol:g}% of the best avg JCT, {hours(best['avg_jct_s'])} ({best['name']}, "
                 f"{_usd(best.get('usd_per_ref_gpu_hour'))} per reference-GPU-hour)")
    if cheapest is not pick:
        ratio = cheapest["avg_jct_s"] / pick["avg_jct_s"] if pick["avg_jct_s"] > 0 else math.inf
        text += (f". {cheapest['name']} costs less per unit of work ({_usd(cheapest.get('usd_per_ref_gpu_hour'))}) "
                 f"but its avg JCT {hours(cheapest['avg_jct_s'])} is {ratio:.1f}x as long, beyond the "
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
        text += f". The price catalog has no cloud offer for {gpu}" + (
            f" in a region or provider matching {region!r} (--region)" if region else "")
    if excluded:
        text += f". Not considered (completed fewer than {most} jobs): {', '.join(excluded)}"
    return text + "."


def hours(seconds: float) -> str:
    return f"{seconds / 3600.0:,.2f} h"


