"""``whatif`` in buyer units: what a simulated design's work costs owned, on demand and on spot.

Every figure is per unit of **work**, not per GPU-hour: a job's work is its GPUs x ``duration_s`` seconds on its
reference GPU (``ref_gpu``), and a design's GPUs do it at the speeds the simulation ran each job at
(:mod:`gpucluster.jobs.speed`). The prices come from :mod:`gpucluster.design.work_cost`:

* **owned**: capex / years + power per year, over the GPU-hours the design works in a year at ``utilization``
  (the trace's offered load in reference GPUs over its arrival window / the design's speed, at most 1, unless
  ``--owned-utilization`` says otherwise);
* **on-demand** and **spot** per provider and region of the price catalog for the design's GPU model; spot
  prices the work lost to interruptions (everything since the job's last checkpoint, Daly's formula with the
  job's own ``checkpoint_interval_s``), and its JCT grows by that lost time.

Cloud figures assume the same GPU count rented for the same jobs (the simulated JCT and queueing carry over).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpucluster.design.prices import PriceCatalog
from gpucluster.design.work_cost import GpuHourPrice, SpotRisk, cloud_prices, owned_price
from gpucluster.jobs import SPEED_KEY, Job, JobKind, JobState


@dataclass(frozen=True, slots=True)
class WorkDone:
    """The completed jobs of one simulated design, as cost needs them."""

    work_s: tuple[float, ...]
    """Reference seconds of each job (``duration_s``)."""
    gpus: tuple[float, ...]
    speed: tuple[float, ...]
    """Speed each job ran at (its last run) relative to its reference GPU."""
    checkpoint_h: tuple[float, ...]
    tokens: tuple[float, ...]
    """Tokens of inference jobs that give a count (0 otherwise)."""
    jct_s: tuple[float, ...]

    @classmethod
    def of(cls, jobs: Sequence[Job]) -> WorkDone:
        done = [j for j in jobs if j.state == JobState.SUCCEEDED]
        return cls(
            tuple(j.spec.duration_s for j in done), tuple(j.spec.gpu_share for j in done),
            tuple(float(j.extra.get(SPEED_KEY, 1.0)) for j in done),
            tuple(j.spec.checkpoint_interval_s / 3600.0 for j in done),
            tuple(j.spec.tokens if j.spec.kind == JobKind.INFER else 0.0 for j in done),
            tuple(j.jct_s for j in done))

    @property
    def jobs(self) -> int:
        return len(self.work_s)

    @property
    def ref_gpu_h(self) -> float:
        """Work done in reference-GPU-hours."""
        return sum(w * g for w, g in zip(self.work_s, self.gpus, strict=True)) / 3600.0

    @property
    def gpu_h(self) -> float:
        """GPU-hours the work took at the speeds it ran at (no network slowdown)."""
        return sum(w * g / s for w, g, s in zip(self.work_s, self.gpus, self.speed, strict=True)) / 3600.0


def _job_cost(price: GpuHourPrice, work_s: float, gpus: float, speed: float,
              checkpoint_h: float) -> tuple[float, float]:
    """(USD, hours of GPU time lost to interruptions per GPU) of one job under ``price``."""
    run_h = work_s / speed / 3600.0
    if price.spot is not None and checkpoint_h > 0:
        price = replace(price, spot=replace(price.spot, checkpoint_interval_h=checkpoint_h))
    over = price.overhead(run_h)
    return run_h * gpus * price.usd_per_gpu_hour * over, run_h * (over - 1.0)


def option_figures(price: GpuHourPrice, work: WorkDone) -> dict[str, Any]:
    """Cost per reference-GPU-hour, per job and per million tokens of ``work`` under one price."""
    total = 0.0
    token_usd = 0.0
    lost_ref_gpu_h = 0.0
    jct_extra = 0.0
    for w, g, s, c, t in zip(work.work_s, work.gpus, work.speed, work.checkpoint_h, work.tokens, strict=True):
        usd, lost_h = _job_cost(price, w, g, s, c)
        total += usd
        lost_ref_gpu_h += lost_h * g * s
        jct_extra += lost_h * 3600.0
        if t > 0:
            token_usd += usd
    tokens = sum(work.tokens)
    ref_h = work.ref_gpu_h
    n = work.jobs
    out: dict[str, Any] = {
        "option": price.option,
        "provider": price.provider,
        "region": price.region,
        "instance": price.instance,
        "usd_per_gpu_hour": round(price.usd_per_gpu_hour, 4),
        "usd_per_ref_gpu_hour": round(total / ref_h, 4) if ref_h > 0 else None,
        "usd_per_job": round(total / n, 2) if n else None,
        "usd_per_million_tokens": round(token_usd / tokens * 1e6, 4) if tokens > 0 else None,
        "usd_total": round(total, 2),
    }
    if price.spot is not None:
        out["lost_work_ref_gpu_h"] = round(lost_ref_gpu_h, 3)
        out["lost_work_share"] = round(lost_ref_gpu_h / ref_h, 4) if ref_h > 0 else 0.0
        out["avg_jct_s"] = round(sum(work.jct_s) / n + jct_extra / n, 3) if n else 0.0
    return out


def design_costs(gpu: str, owned_usd_per_year: float, gpus: int, utilization: float, prices: PriceCatalog,
                 work: WorkDone, spot: SpotRisk, region: str | None = None) -> dict[str, Any]:
    """Owned, cheapest on-demand, cheapest spot (per reference-GPU-hour) and every cloud offer for one design.

    ``utilization`` (0, 1] is what the owned GPUs work; ``region`` keeps only cloud offers whose region or
    provider contains it."""
    owned = option_figures(owned_price(gpu, owned_usd_per_year, gpus, utilization), work)
    owned["utilization"] = round(utilization, 4)
    owned["usd_per_ref_gpu_hour_at_full_use"] = (
        round(owned_usd_per_year / (gpus * 8760.0) * work.gpu_h / work.ref_gpu_h, 4) if work.ref_gpu_h > 0 else None)
    offers = [o for o in cloud_prices(prices, gpu, spot)
              if region is None or region in o.region or region in o.provider]
    cloud = [option_figures(o, work) for o in offers]
    out: dict[str, Any] = {"owned": owned, "on_demand": None, "spot": None, "cloud": cloud}
    for key, option in (("on_demand", "on-demand"), ("spot", "spot")):
        rows = [c for c in cloud if c["option"] == option and c["usd_per_ref_gpu_hour"] is not None]
        if rows:
            best = min(rows, key=lambda c: c["usd_per_ref_gpu_hour"])
            out[key] = best
            # utilisation above which owning costs less per unit of work than this cloud option
            per_gpu_h_full = owned_usd_per_year / (gpus * 8760.0)
            ratio = per_gpu_h_full / best["usd_per_gpu_hour"] if best["usd_per_gpu_hour"] > 0 else math.inf
            if option == "spot" and best.get("lost_work_share") is not None:
                ratio /= 1.0 + best["lost_work_share"]
            best["break_even_owned_utilization"] = round(ratio, 4) if math.isfinite(ratio) else None
    return out
