"""NVIDIA DGX SuperPOD reference designs as requirements."""

from __future__ import annotations

from typing import Any

from gpucluster.design.requirements import DesignError, Requirements, parse_requirements

PRESETS = ("dgx-h100-superpod", "dgx-b200-superpod")


MAX_SCALABLE_UNITS = 1000
"""Most scalable units a preset is built with (32,000 servers, within the cluster's node limit)."""


def preset_data(name: str, scalable_units: int) -> dict[str, Any]:
    """Requirements mapping for a preset with N scalable units of 32 node slots.

    H100: one slot of the first SU holds the UFM appliances (4 fabric ports), so 32N - 1 DGX;
    4 DGX per rack (4 x 10.2 kW). B200: 32 DGX per SU; 4 DGX B200 per 48U rack at ~57 kW.
    """
    if not 1 <= scalable_units <= MAX_SCALABLE_UNITS:  # 10**20 was reported as "servers: must be <= 50000"
        raise DesignError("--scalable-units", f"must be within 1..{MAX_SCALABLE_UNITS}")
    if name == "dgx-h100-superpod":
        return {
            "name": f"dgx-h100-superpod-{scalable_units}su",
            "gpu": "H100-SXM5-80GB",
            "gpus_per_server": 8,
            "servers": 32 * scalable_units - 1,
            "fabric": {"type": "infiniband", "switch_ports": 64, "link_gbps": 400,
                       "rail_optimized": True, "oversubscription": 1.0,
                       "reserved_slots": 1, "ufm_ports": 4},
            "power": {"psu": "6x3300:4+2", "rack_power_kw": 42.0},
            "management": {"servers": 5},
        }
    if name == "dgx-b200-superpod":
        return {
            "name": f"dgx-b200-superpod-{scalable_units}su",
            "gpu": "B200-SXM-180GB",
            "gpus_per_server": 8,
            "servers": 32 * scalable_units,
            "fabric": {"type": "infiniband", "switch_ports": 64, "link_gbps": 400,
                       "rail_optimized": True, "oversubscription": 1.0},
            "power": {"psu": "auto", "rack_power_kw": 60.0, "rack_units": 48},
            "management": {"servers": 5},
        }
    raise DesignError("--preset", f"unknown preset {name!r}; known: {', '.join(PRESETS)}")


def preset(name: str, scalable_units: int) -> Requirements:
    return parse_requirements(preset_data(name, scalable_units))
