"""Server power (GPUs + a documented platform overhead) and the PSU redundancy check."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucluster.design.catalog import GpuModel, Platform
from gpucluster.design.requirements import parse_psu


@dataclass(frozen=True, slots=True)
class ServerPower:
    """Maximum power one GPU server draws at full load, with its parts."""

    gpus_w: float
    platform_w: float
    nics_w: float
    max_w: float
    overhead_source: str


@dataclass(frozen=True, slots=True)
class PsuCheck:
    """Whether the PSUs carry the server at full load with the stated redundancy."""

    spec: str  # "2x2200 W (1+1)"
    count: int
    watts: float
    redundant: int
    usable_w: float  # what is left with the redundant PSUs failed
    sufficient: bool
    suggestions: tuple[str, ...]
    warnings: tuple[str, ...]


def server_power(
    gpu: GpuModel, platform: Platform, gpus_per_server: int, nic_ports: int,
    override_overhead_w: float | None = None,
) -> ServerPower:
    """GPUs x TDP + platform overhead (+ NICs on platforms that do not include them)."""
    gpus_w = float(gpus_per_server * gpu.tdp_w)
    if override_overhead_w is not None:
        return ServerPower(gpus_w, override_overhead_w, 0.0, gpus_w + override_overhead_w,
                           "power.server_overhead_w (user)")
    nics_w = nic_ports * platform.per_nic_w
    return ServerPower(gpus_w, platform.base_overhead_w, nics_w,
                       gpus_w + platform.base_overhead_w + nics_w, platform.source)


def psu_spec_text(count: int, watts: float, redundant: int) -> str:
    return f"{count}x{watts:g} W ({count - redundant}+{redundant})"


def check_psu(psu: str, load_w: float, platform: Platform, gpus_line: str) -> PsuCheck:
    """Check a PSU configuration ('2x2200', '6x3300:4+2') against the server's maximum load."""
    count, watts, redundant = parse_psu(psu)
    usable = (count - redundant) * watts
    ok = usable >= load_w
    suggestions: list[str] = []
    warnings: list[str] = []
    if not ok:
        n = math.ceil(load_w / watts)
        suggestions.append(f"{2 * n}x{watts:g} W ({n}+{n})")
        suggestions.append(f"{n + 1}x{watts:g} W ({n}+1)")
        pc, pw, pr = parse_psu(platform.default_psu)
        if (pc - pr) * pw >= load_w:
            suggestions.append(f"{psu_spec_text(pc, pw, pr)} as in the vendor platform")
        total_note = (
            f"; even with no redundancy {'both' if count == 2 else f'all {count}'} give only "
            f"{count * watts:,.0f} W"
            if count * watts < load_w else ""
        )
        warnings.append(
            f"PSUs {psu_spec_text(count, watts, redundant)} do not carry the server: with "
            f"{redundant} failed they deliver {usable:,.0f} W, the server draws up to "
            f"{load_w:,.0f} W at full load ({gpus_line}){total_note}. "
            f"Would carry it: {', or '.join(suggestions)}."
        )
    return PsuCheck(psu_spec_text(count, watts, redundant), count, watts, redundant, usable, ok,
                    tuple(suggestions), tuple(warnings))


def servers_per_rack(server_w: float, height_u: int, rack_power_kw: float,
                     rack_units: int, reserved_units: int) -> tuple[int, str]:
    """Servers per compute rack, limited by power and by space; and which limit bound."""
    by_power = int(rack_power_kw * 1000 // server_w) if server_w > 0 else 10**6
    by_space = max(0, (rack_units - reserved_units) // height_u)
    return (by_power, "power") if by_power < by_space else (by_space, "space")
