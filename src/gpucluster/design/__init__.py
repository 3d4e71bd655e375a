"""Cluster design: requirements -> compute, network, storage, power, cost, report.

Pure calculators; the only I/O is reading catalogs and writing the ``--out`` bundle.
"""

from gpucluster.design.network import (
    ClosPlan,
    max_hosts_three_tier,
    max_hosts_two_tier,
    plan_clos,
)
from gpucluster.design.planner import Design, design, to_dict
from gpucluster.design.presets import PRESETS, preset
from gpucluster.design.prices import PriceCatalog, load_price_catalog
from gpucluster.design.requirements import (
    DesignError,
    Requirements,
    RequirementsError,
    load_requirements,
    parse_requirements,
)
from gpucluster.design.work_cost import (
    GpuHourPrice,
    SpotRisk,
    cloud_prices,
    mix_speed,
    owned_price,
    usd_per_million_tokens,
)

__all__ = [
    "PRESETS",
    "ClosPlan",
    "Design",
    "DesignError",
    "GpuHourPrice",
    "PriceCatalog",
    "Requirements",
    "RequirementsError",
    "SpotRisk",
    "cloud_prices",
    "design",
    "load_price_catalog",
    "load_requirements",
    "max_hosts_three_tier",
    "max_hosts_two_tier",
    "mix_speed",
    "owned_price",
    "parse_requirements",
    "plan_clos",
    "preset",
    "to_dict",
    "usd_per_million_tokens",
]
