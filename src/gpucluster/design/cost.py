"""Cost: capex, power per year, and the cloud equivalent per region (on demand vs spot)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucluster.design.prices import PriceCatalog

HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True, slots=True)
class CloudCost:
    """Running the same GPUs in one cloud region around the clock."""

    provider: str
    region: str
    instance: str
    instances: int
    on_demand_usd_per_year: float
    spot_usd_per_year: float
    spot_discount: float


@dataclass(frozen=True, slots=True)
class CostPlan:
    """What owning costs, and what renting would."""

    capex_usd: float
    capex_breakdown: dict[str, float]
    power_usd_per_year: float
    years: float
    owned_usd_per_year: float  # capex spread over ``years`` + power
    cloud: tuple[CloudCost, ...]
    note: str


def cloud_costs(prices: PriceCatalog, gpu_name: str, gpus: int) -> tuple[CloudCost, ...]:
    out = []
    for o in prices.cloud.get(gpu_name, []):
        n = math.ceil(gpus / o.gpus)
        od = n * o.on_demand_usd_per_hour * HOURS_PER_YEAR
        out.append(CloudCost(o.provider, o.region, o.instance, n, round(od, 2),
                             round(od * (1 - o.spot_discount), 2), o.spot_discount))
    return tuple(sorted(out, key=lambda c: c.on_demand_usd_per_year))


def plan_cost(prices: PriceCatalog, *, breakdown: dict[str, float], power_usd_per_year: float,
              years: float, gpu_name: str, gpus: int) -> CostPlan:
    capex = round(sum(breakdown.values()), 2)
    return CostPlan(
        capex_usd=capex,
        capex_breakdown={k: round(v, 2) for k, v in breakdown.items()},
        power_usd_per_year=round(power_usd_per_year, 2),
        years=years,
        owned_usd_per_year=round(capex / years + power_usd_per_year, 2),
        cloud=cloud_costs(prices, gpu_name, gpus),
        note="prices are editable estimates (price catalog), not quotes",
    )
