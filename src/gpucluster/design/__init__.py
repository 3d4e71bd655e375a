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

__all__ = [
    "PRESETS",
    "ClosPlan",
    "Design",
    "DesignError",
    "PriceCatalog",
    "Requirements",
    "RequirementsError",
    "design",
    "load_price_catalog",
    "load_requirements",
    "max_hosts_three_tier",
    "max_hosts_two_tier",
    "parse_requirements",
    "plan_clos",
    "preset",
    "to_dict",
]
