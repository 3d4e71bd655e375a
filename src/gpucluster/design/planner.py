"""Requirements -> a checked design: the one entry point that ties the calculators together."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gpucluster.design import catalog
from gpucluster.design.cabling import (
    SWITCHES_PER_NETWORK_RACK,
    Cable,
    Layout,
    build_schedule,
    count_by,
)
from gpucluster.design.catalog import GpuModel, Platform
from gpucluster.design.cost import HOURS_PER_YEAR, CostPlan, plan_cost
from gpucluster.design.network import ClosPlan, plan_clos
from gpucluster.design.power import PsuCheck, ServerPower, check_psu, server_power, servers_per_rack
from gpucluster.design.prices import PriceCatalog, load_price_catalog
from gpucluster.design.requirements import DesignError, Requirements
from gpucluster.design.storage import ManagementPlan, StoragePlan, plan_management, plan_storage


@dataclass(frozen=True, slots=True)
class PowerTotals:
    """Power per server, per rack and for the facility."""

    server_max_w: float
    rack_max_kw: float
    servers_kw: float
    network_kw: float
    storage_kw: float
    management_kw: float
    it_kw: float
    facility_kw: float
    pue: float
    energy_mwh_per_year: float
    usd_per_year: float


@dataclass(frozen=True, slots=True)
class Design:
    """A complete, checked cluster design."""

    req: Requirements
    gpu: GpuModel
    platform: Platform
    servers: int
    gpus_per_server: int
    gpus: int
    nics_per_server: int
    servers_per_rack: int
    rack_limit: str  # "power" or "space"
    compute_racks: int
    network_racks: int
    management_racks: int
    storage_racks: int
    nvlink_domain_size: int
    nvlink_domains: int
    fabric: ClosPlan
    fabric_switch: str
    storage: StoragePlan
    management: ManagementPlan
    server_power: ServerPower
    psu: PsuCheck
    power: PowerTotals
    cost: CostPlan
    cables: tuple[Cable, ...]
    layout: Layout | None
    warnings: tuple[str, ...]

    @property
    def racks(self) -> int:
        return self.compute_racks + self.network_racks + self.management_racks + self.storage_racks


def _switch_power_and_price(prices: PriceCatalog, model: str, ports: int, n: int) -> tuple[float, float]:
    sp = prices.switches.for_model(model, ports)
    return n * sp.power_w, n * sp.price_usd


def _evaluate(req: Requirements, prices: PriceCatalog, servers: int, with_cables: bool) -> Design:
    gpu = catalog.lookup_gpu(req.gpu)
    platform = catalog.PLATFORMS[gpu.platform]
    gps = req.gpus_per_server or min(8, gpu.max_per_server)
    fab = req.fabric
    nics = fab.nics_per_server or gps
    gpus = servers * gps
    pw = req.power
    sp = server_power(gpu, platform, gps, nics + req.storage.ports_per_server + 1, pw.server_overhead_w)
    psu_text = platform.default_psu if pw.psu == "auto" else pw.psu
    gpus_line = (f"{gps} x {gpu.name} at {gpu.tdp_w} W = {sp.gpus_w:,.0f} W "
                 f"+ {sp.platform_w + sp.nics_w:,.0f} W platform")
    psu = check_psu(psu_text, sp.max_w, platform, gpus_line)

    spr, limit = servers_per_rack(sp.max_w, platform.height_u, pw.rack_power_kw, pw.rack_units,
                                  pw.reserved_units)
    if spr < 1:
        if limit == "power":
            raise DesignError("power.rack_power_kw",
                              f"a {pw.rack_power_kw:g} kW rack cannot hold one {sp.max_w:,.0f} W server")
        raise DesignError("power.rack_units",
                          f"{pw.rack_units - pw.reserved_units} usable U cannot hold one "
                          f"{platform.height_u}U server")

    rail = fab.rail_optimized if fab.rail_optimized is not None else gpu.use == "training"
    fabric = plan_clos(servers=servers, ports_per_server=nics, radix=fab.switch_ports,
                       oversubscription=fab.oversubscription, rail_optimized=rail,
                       reserved_slots=fab.reserved_slots if rail else 0,
                       extra_ports=fab.ufm_ports, link_gbps=fab.link_gbps, field="fabric")
    fabric_switch = catalog.compute_switch_model(fab.type, fab.switch_ports)
    storage = plan_storage(req.storage, servers, gpus, gps, prices)
    storage_switch = catalog.compute_switch_model("roce", req.storage.switch_ports)

    compute_racks = math.ceil(servers / spr)
    racks_per_row = (max(1, math.ceil(fabric.nodes_per_su / spr)) if fabric.rail_optimized else 8)
    rows = math.ceil(compute_racks / racks_per_row)
    network_racks = (rows if fabric.leaves else 0) + math.ceil(fabric.spines / SWITCHES_PER_NETWORK_RACK) \
        + math.ceil(fabric.cores / SWITCHES_PER_NETWORK_RACK)
    usable_u = pw.rack_units - pw.reserved_units
    mg = req.management
    ufm = fab.ufm_ports
    mgmt_u = (mg.servers * prices.management_server.height_u + ufm * prices.ufm_appliance.height_u
              + 2 * (storage.network.spines + storage.network.cores))
    management_racks = math.ceil(mgmt_u / usable_u) if mgmt_u else 0
    sn = prices.storage_node
    per_storage_rack = max(1, min(usable_u // sn.height_u,
                                  int(pw.rack_power_kw * 1000 // max(sn.power_w, 1.0))))
    storage_racks = math.ceil(storage.nodes / per_storage_rack)
    all_racks = compute_racks + network_racks + management_racks + storage_racks
    management = plan_management(mg, servers=servers, storage_nodes=storage.nodes, ufm=ufm,
                                 switches=fabric.switches + storage.network.switches, racks=all_racks)

    # power
    net_w = 0.0
    sw_usd = 0.0
    for model, ports, n in (
        (fabric_switch, fab.switch_ports, fabric.switches),
        (storage_switch, req.storage.switch_ports, storage.network.switches),
        (catalog.compute_switch_model("eth-mgmt", mg.inband_switch_ports)
         if mg.inband_switch_ports != 64 else "SN4600C", mg.inband_switch_ports,
         management.inband.switches),
        ("SN2201" if mg.oob_switch_ports == 48 else f"generic-{mg.oob_switch_ports}p-oob",
         mg.oob_switch_ports, management.oob_switches),
    ):
        w, usd = _switch_power_and_price(prices, model, ports, n)
        net_w += w
        sw_usd += usd
    servers_w = servers * sp.max_w
    storage_w = storage.nodes * sn.power_w
    mgmt_w = mg.servers * prices.management_server.power_w + ufm * prices.ufm_appliance.power_w
    it_kw = (servers_w + net_w + storage_w + mgmt_w) / 1000.0
    facility_kw = it_kw * pw.pue
    energy_mwh = facility_kw * pw.average_load * HOURS_PER_YEAR / 1000.0
    power_usd = energy_mwh * 1000.0 * pw.electricity_usd_per_kwh
    totals = PowerTotals(
        server_max_w=round(sp.max_w, 1), rack_max_kw=round(spr * sp.max_w / 1000.0, 2),
        servers_kw=round(servers_w / 1000, 2), network_kw=round(net_w / 1000, 2),
        storage_kw=round(storage_w / 1000, 2), management_kw=round(mgmt_w / 1000, 2),
        it_kw=round(it_kw, 2), facility_kw=round(facility_kw, 2), pue=pw.pue,
        energy_mwh_per_year=round(energy_mwh, 1), usd_per_year=round(power_usd, 2),
    )

    cables: list[Cable] = []
    layout: Layout | None = None
    if with_cables:
        cables, layout = build_schedule(
            fabric, servers=servers, per_server=nics, servers_per_rack=spr,
            reserved_slots=fab.reserved_slots if rail else 0, extra_ports=ufm)
    # capex
    cab = prices.cables
    fabric_cable_usd = sum(cab.get(c.kind, 0.0) for c in cables) if cables else \
        (fabric.node_to_leaf + fabric.leaf_to_spine + fabric.spine_to_core) * cab.get("aoc", 0.0)
    other_cables = (storage.network.node_to_leaf + storage.network.leaf_to_spine
                    + storage.network.spine_to_core + management.inband.node_to_leaf
                    + management.inband.leaf_to_spine)
    breakdown = {
        "servers": servers * (prices.platforms.get(platform.name, 0.0)
                              + gps * prices.gpus.get(gpu.name, 0.0)),
        "switches": sw_usd,
        "cables": fabric_cable_usd + other_cables * cab.get("aoc", 0.0)
        + management.oob_ports * cab.get("cat6", 0.0),
        "storage": storage.nodes * sn.price_usd,
        "management": mg.servers * prices.management_server.price_usd
        + ufm * prices.ufm_appliance.price_usd,
        "racks": all_racks * prices.rack.price_usd,
    }
    cost = plan_cost(prices, breakdown=breakdown, power_usd_per_year=power_usd, years=req.cost.years,
                     gpu_name=gpu.name, gpus=gpus)

    warnings = list(psu.warnings) + list(storage.warnings)
    if gpu.name not in prices.gpus:
        warnings.append(f"cost: no price for {gpu.name} in the price catalog; counted as 0")
    if not cost.cloud:
        warnings.append(f"cost: no cloud offers for {gpu.name} in the price catalog")
    domain = min(gpu.nvlink_domain, gps)
    return Design(
        req=req, gpu=gpu, platform=platform, servers=servers, gpus_per_server=gps, gpus=gpus,
        nics_per_server=nics, servers_per_rack=spr, rack_limit=limit,
        compute_racks=compute_racks, network_racks=network_racks,
        management_racks=management_racks, storage_racks=storage_racks,
        nvlink_domain_size=domain, nvlink_domains=(gpus // domain) if domain else 0,
        fabric=fabric, fabric_switch=fabric_switch, storage=storage, management=management,
        server_power=sp, psu=psu, power=totals, cost=cost, cables=tuple(cables), layout=layout,
        warnings=tuple(warnings),
    )


def _servers_for_budget(req: Requirements, prices: PriceCatalog) -> int:
    assert req.power_budget_kw is not None
    budget = req.power_budget_kw

    def fits(n: int) -> bool:
        try:
            return _evaluate(req, prices, n, with_cables=False).power.facility_kw <= budget
        except DesignError as exc:
            if exc.field.startswith("fabric."):
                return False
            raise

    one = _evaluate(req, prices, 1, with_cables=False)
    if one.power.facility_kw > budget:
        raise DesignError("power_budget_kw",
                          f"{budget:g} kW does not power even one server with its network "
                          f"({one.power.facility_kw:g} kW at PUE {req.power.pue:g})")
    lo, hi = 1, max(1, int(budget * 1000 / (one.server_power.max_w * req.power.pue)) + 1)
    while lo < hi:  # largest n that fits
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def design(req: Requirements, prices: PriceCatalog | None = None, with_cables: bool = True) -> Design:
    """Turn requirements into a checked design. Raises DesignError naming the field at fault."""
    if prices is None:
        prices = load_price_catalog(req.cost.price_catalog)
    gpu = catalog.lookup_gpu(req.gpu)
    gps = req.gpus_per_server or min(8, gpu.max_per_server)
    if req.servers is not None:
        servers = req.servers
    elif req.gpus is not None:
        servers = math.ceil(req.gpus / gps)
    else:
        servers = _servers_for_budget(req, prices)
    return _evaluate(req, prices, servers, with_cables)


def to_dict(d: Design) -> dict[str, Any]:
    """The design as JSON-ready data (the ``--json`` output)."""
    f = d.fabric
    s = d.storage
    m = d.management
    by_type = count_by(list(d.cables))
    return {
        "name": d.req.name,
        "gpu": {"model": d.gpu.name, "memory_gb": d.gpu.memory_gb, "tdp_w": d.gpu.tdp_w,
                "nvlink_gbs": d.gpu.nvlink_gbs, "form_factor": str(d.gpu.form_factor)},
        "servers": d.servers,
        "gpus_per_server": d.gpus_per_server,
        "gpus": d.gpus,
        "racks": d.racks,
        "racks_detail": {"compute": d.compute_racks, "network": d.network_racks,
                         "management": d.management_racks, "storage": d.storage_racks,
                         "servers_per_rack": d.servers_per_rack, "limited_by": d.rack_limit},
        "nvlink": {"domain_size": d.nvlink_domain_size, "domains": d.nvlink_domains,
                   "gbs_per_gpu": d.gpu.nvlink_gbs},
        "network": {
            "fabric": d.req.fabric.type,
            "switch_model": d.fabric_switch,
            "switch_ports": f.radix,
            "link_gbps": f.link_gbps,
            "rail_optimized": f.rail_optimized,
            "nics_per_server": d.nics_per_server,
            "scalable_units": f.scalable_units,
            "nodes_per_su": f.nodes_per_su,
            "tiers": f.tiers,
            "leaf_switches": f.leaves,
            "spine_switches": f.spines,
            "core_switches": f.cores,
            "pods": f.pods,
            "leaf_ports": {"down": f.leaf_down, "up": f.leaf_up},
            "cables": {"node_to_leaf": f.node_to_leaf, "leaf_to_spine": f.leaf_to_spine,
                       "spine_to_core": f.spine_to_core, "by_type": by_type},
            "oversubscription": f.oversubscription,
            "bisection_tbps": f.bisection_tbps,
            "storage": {"leaf_switches": s.network.leaves, "spine_switches": s.network.spines,
                        "core_switches": s.network.cores, "tiers": s.network.tiers,
                        "cables": s.network.node_to_leaf + s.network.leaf_to_spine
                        + s.network.spine_to_core},
            "inband": {"leaf_switches": m.inband.leaves, "spine_switches": m.inband.spines,
                       "tiers": m.inband.tiers,
                       "cables": m.inband.node_to_leaf + m.inband.leaf_to_spine},
            "oob": {"switches": m.oob_switches, "ports": m.oob_ports},
        },
        "storage": {"nodes": s.nodes, "capacity_tb": s.capacity_tb, "read_gbs": s.read_gbs,
                    "required_read_gbs": s.required_read_gbs},
        "management": {"servers": m.servers, "ufm_appliances": m.ufm_appliances},
        "power": {
            "server_max_w": d.power.server_max_w,
            "server_gpus_w": d.server_power.gpus_w,
            "server_overhead_w": d.server_power.platform_w + d.server_power.nics_w,
            "overhead_source": d.server_power.overhead_source,
            "psu": d.psu.spec,
            "psu_usable_w": d.psu.usable_w,
            "psu_sufficient": d.psu.sufficient,
            "psu_suggestions": list(d.psu.suggestions),
            "warnings": [w for w in d.warnings if w.startswith("PSU")],
            "rack_max_kw": d.power.rack_max_kw,
            "it_kw": d.power.it_kw,
            "facility_kw": d.power.facility_kw,
            "pue": d.power.pue,
            "energy_mwh_per_year": d.power.energy_mwh_per_year,
            "usd_per_year": d.power.usd_per_year,
        },
        "cost": {
            "capex_usd": d.cost.capex_usd,
            "capex_breakdown": d.cost.capex_breakdown,
            "power_usd_per_year": d.cost.power_usd_per_year,
            "years": d.cost.years,
            "owned_usd_per_year": d.cost.owned_usd_per_year,
            "cloud": [
                {"provider": c.provider, "region": c.region, "instance": c.instance,
                 "instances": c.instances, "on_demand_usd_per_year": c.on_demand_usd_per_year,
                 "spot_usd_per_year": c.spot_usd_per_year, "spot_discount": c.spot_discount}
                for c in d.cost.cloud
            ],
            "note": d.cost.note,
        },
        "warnings": list(d.warnings),
    }
