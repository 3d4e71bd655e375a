"""Cost per unit of work: what a buyer compares (pure functions; docs/gpu-speed.md, "Cost per unit of work").

A GPU-hour costs a price that depends on how it is obtained; it does an amount of work that depends on the GPU
model (the speed model, ``gpucluster.perf``). Every figure here is in **reference-GPU work**: a job's work is
seconds on its reference GPU, and a GPU running at ``speed`` does ``speed`` reference-GPU-hours per hour.

* **owned**: capex spread over the years plus power, per year, divided by the GPU-hours actually used
  (``gpus x 8,760 x utilisation``): idle owned GPUs still cost.
* **cloud on-demand**: the instance's hourly price / its GPUs, per provider and region of the price catalog; paid
  only while used.
* **cloud spot**: on-demand x (1 - spot discount), but interruptions cost work: everything since the last
  checkpoint is lost and the job waits a restart. With interruptions a Poisson process of rate ``r`` per hour,
  checkpoints every ``C`` hours of work (each taking ``d``) and a restart of ``R`` hours, a job needs
  ``exp(r R) (exp(r (C + d)) - 1) / (r C)`` hours of GPU per hour of work (Daly's expected-time formula for
  checkpoint/restart; it tends to 1 + r (C/2 + R) when interruptions are rare). A job shorter than ``C`` restarts
  from its beginning, so ``C`` is capped at its run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gpucluster.design.cost import HOURS_PER_YEAR
from gpucluster.design.prices import PriceCatalog

Option = Literal["owned", "on-demand", "spot"]


@dataclass(frozen=True, slots=True)
class SpotRisk:
    """How spot interruptions turn into lost work. Defaults are assumptions (docs/gpu-speed.md), not data."""

    interruptions_per_hour: float = 1.0 / 24.0
    """Mean interruptions per instance-hour (default one a day)."""
    checkpoint_interval_h: float = 1.0
    """Hours of work between checkpoints."""
    restart_h: float = 0.1
    """Hours from an interruption until the job runs again (new instance, load the checkpoint)."""
    checkpoint_cost_h: float = 0.0
    """Hours each checkpoint stalls the job."""

    def __post_init__(self) -> None:
        for name in ("interruptions_per_hour", "restart_h", "checkpoint_cost_h"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: must be >= 0, not {getattr(self, name)}")
        if not self.checkpoint_interval_h > 0:
            raise ValueError(f"checkpoint_interval_h: must be > 0, not {self.checkpoint_interval_h}")

    def overhead(self, run_h: float | None = None) -> float:
        """GPU-hours paid per hour of work done (>= 1) for a job that runs ``run_h`` hours uninterrupted."""
        c = self.checkpoint_interval_h if run_h is None else min(self.checkpoint_interval_h, max(run_h, 1e-9))
        r = self.interruptions_per_hour
        if r * c < 1e-12:  # no (or vanishingly rare) interruptions: the limit, without dividing by ~0
            return (c + self.checkpoint_cost_h) / c
        try:
            return math.exp(r * self.restart_h) * math.expm1(r * (c + self.checkpoint_cost_h)) / (r * c)
        except OverflowError:  # interrupted so often, or restarting so slowly, that the work never gets done
            return math.inf

    def lost_work_h(self, run_h: float) -> float:
        """Expected hours of GPU time lost (redone work, restarts, checkpoints) by a job of ``run_h`` hours."""
        return run_h * (self.overhead(run_h) - 1.0)


@dataclass(frozen=True, slots=True)
class GpuHourPrice:
    """One way to get GPU-hours of one model, and what an hour costs."""

    gpu: str
    option: Option
    provider: str
    region: str
    instance: str
    usd_per_gpu_hour: float
    """Price of one GPU-hour (owned: per GPU-hour used at the given utilisation)."""
    spot: SpotRisk | None = None
    """Set for spot offers: interruptions cost lost work."""

    def overhead(self, run_h: float | None = None) -> float:
        """GPU-hours paid per GPU-hour of progress (1.0 unless spot)."""
        return 1.0 if self.spot is None else self.spot.overhead(run_h)

    def usd_per_ref_gpu_hour(self, speed: float, run_h: float | None = None) -> float:
        """Cost of one reference-GPU-hour of work on this GPU running at ``speed`` (speed model factor)."""
        _positive("speed", speed)
        return self.usd_per_gpu_hour * self.overhead(run_h) / speed

    def job_usd(self, work_s: float, num_gpus: int, speed: float) -> float:
        """Cost of one job: ``work_s`` reference seconds on ``num_gpus`` GPUs running at ``speed``."""
        _positive("speed", speed)
        if work_s < 0 or num_gpus < 0:
            raise ValueError(f"work_s and num_gpus must be >= 0, not {work_s}, {num_gpus}")
        run_h = work_s / speed / 3600.0
        return run_h * num_gpus * self.usd_per_gpu_hour * self.overhead(run_h)


def _positive(name: str, value: float) -> None:
    if not value > 0:
        raise ValueError(f"{name}: must be > 0, not {value}")


def owned_price(gpu: str, owned_usd_per_year: float, gpus: int, utilization: float) -> GpuHourPrice:
    """Owned GPU-hours: the cluster's owned cost per year (capex / years + power) over the GPU-hours it works."""
    _positive("gpus", gpus)
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization: must be within (0, 1], not {utilization}")
    per_hour = owned_usd_per_year / (gpus * HOURS_PER_YEAR * utilization)
    return GpuHourPrice(gpu, "owned", "owned", "", "", per_hour)


def cloud_prices(prices: PriceCatalog, gpu: str, spot: SpotRisk | None = None) -> list[GpuHourPrice]:
    """On-demand and spot GPU-hours of ``gpu`` per provider and region of the price catalog, cheapest first.
    ``spot`` (default :class:`SpotRisk()`) prices the spot offers' lost work."""
    risk = spot if spot is not None else SpotRisk()
    out = []
    for o in prices.cloud.get(gpu, []):
        per_gpu = o.on_demand_usd_per_hour / o.gpus
        out.append(GpuHourPrice(gpu, "on-demand", o.provider, o.region, o.instance, per_gpu))
        if o.spot_discount > 0:
            out.append(GpuHourPrice(gpu, "spot", o.provider, o.region, o.instance, per_gpu * (1 - o.spot_discount),
                                    risk))
    return sorted(out, key=lambda p: (p.usd_per_gpu_hour * p.overhead(), p.option, p.provider, p.region))


def mix_speed(work_s: list[float] | tuple[float, ...], speeds: list[float] | tuple[float, ...]) -> float:
    """Speed of a workload on one GPU model: reference work done per GPU-hour spent, ``sum(work) /
    sum(work / speed)`` (a work-weighted harmonic mean). 1.0 for no work."""
    if len(work_s) != len(speeds):
        raise ValueError(f"{len(work_s)} work figures for {len(speeds)} speeds")
    for s in speeds:
        _positive("speed", s)
    total = sum(work_s)
    spent = sum(w / s for w, s in zip(work_s, speeds, strict=True))
    return total / spent if spent > 0 else 1.0


def usd_per_million_tokens(job_usd: float, tokens: float) -> float:
    """Cost per million tokens of an inference job that processed ``tokens`` tokens."""
    _positive("tokens", tokens)
    return job_usd / tokens * 1e6
