"""Markdown report and the --out bundle (report, cable schedule, diagram, spec)."""

from __future__ import annotations

from pathlib import Path

from gpucluster.design.cabling import count_by, to_csv
from gpucluster.design.planner import Design


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{k.upper()} {v:,}" for k, v in counts.items()) or "-"


def _usd(x: float) -> str:
    return f"${x:,.0f}"


def markdown(d: Design) -> str:
    """A readable report of the design."""
    f, s, m, p, c = d.fabric, d.storage, d.management, d.power, d.cost
    lines = [
        f"# Cluster design: {d.req.name}",
        "",
        "## Summary",
        "",
        "| item | value |",
        "|---|---|",
        f"| GPU | {d.gpu.name} ({d.gpu.memory_gb} GB, {d.gpu.tdp_w} W, NVLink {d.gpu.nvlink_gbs} GB/s) |",
        f"| servers | {d.servers} x {d.gpus_per_server} GPUs ({d.platform.description}) |",
        f"| GPUs | {d.gpus:,} |",
        f"| NVLink domains | {d.nvlink_domains:,} of {d.nvlink_domain_size} GPUs |",
        f"| racks | {d.racks} ({d.compute_racks} compute at {d.servers_per_rack}/rack, limited by "
        f"{d.rack_limit}; {d.network_racks} network; {d.management_racks} management; "
        f"{d.storage_racks} storage) |",
        f"| facility power | {p.facility_kw:,.1f} kW (IT {p.it_kw:,.1f} kW x PUE {p.pue:g}) |",
        f"| capex | {_usd(c.capex_usd)} (estimate) |",
        "",
    ]
    if d.warnings:
        lines += ["## Warnings", ""] + [f"- **{w}**" for w in d.warnings] + [""]
    by_type = count_by(list(d.cables))
    lines += [
        "## Compute fabric",
        "",
        f"{d.req.fabric.type}, {f.link_gbps} Gb/s per port, {d.nics_per_server} ports per server, "
        f"{f.radix}-port switches ({d.fabric_switch}), "
        f"{'rail-optimised' if f.rail_optimized else 'not rail-optimised'}.",
        "",
        "| | count |",
        "|---|---|",
        f"| tiers | {f.tiers} |",
        f"| scalable units | {f.scalable_units} of {f.nodes_per_su} node slots |",
        f"| leaf switches | {f.leaves} ({f.leaf_down} down / {f.leaf_up} up) |",
        f"| spine switches | {f.spines} |",
        f"| core switches | {f.cores} |",
        f"| node-to-leaf cables | {f.node_to_leaf} ({_kinds(by_type.get('node_to_leaf', {}))}) |",
        f"| leaf-to-spine cables | {f.leaf_to_spine} ({_kinds(by_type.get('leaf_to_spine', {}))}) |",
        f"| spine-to-core cables | {f.spine_to_core} ({_kinds(by_type.get('spine_to_core', {}))}) |",
        f"| oversubscription | {f.oversubscription:g}:1 |",
        f"| bisection bandwidth | {f.bisection_tbps:,.1f} Tb/s |",
        "",
        "The port-to-port cable schedule is `cables.csv`; the diagram is `topology.svg` / `.png`.",
        "",
        "## Storage and management",
        "",
        (f"- Storage: {s.nodes} NVMe nodes, {s.capacity_tb:,.0f} TB usable, {s.read_gbs:,.0f} GB/s "
         f"read (needed {s.required_read_gbs:,.0f} GB/s); storage network {s.network.tiers}-tier, "
         f"{s.network.leaves} leaf + {s.network.spines} spine switches."
         if s.nodes else "- Storage: none requested (set storage.capacity_tb / read_gbs_per_gpu)."),
        f"- In-band management: {m.inband.leaves} leaf + {m.inband.spines} spine switches, "
        f"{m.servers} management servers, {m.ufm_appliances} UFM appliances.",
        f"- Out-of-band (BMC): {m.oob_switches} switches for {m.oob_ports} ports.",
        "",
        "## Power",
        "",
        f"- Server at full load: {p.server_max_w:,.0f} W = GPUs {d.server_power.gpus_w:,.0f} W + "
        f"platform {d.server_power.platform_w + d.server_power.nics_w:,.0f} W "
        f"(source: {d.server_power.overhead_source}).",
        f"- PSUs {d.psu.spec}: {d.psu.usable_w:,.0f} W with the redundant ones failed: "
        f"**{'sufficient' if d.psu.sufficient else 'NOT sufficient'}**"
        + (f"; would carry it: {', '.join(d.psu.suggestions)}" if d.psu.suggestions else "") + ".",
        f"- Rack: up to {p.rack_max_kw:g} kW ({d.servers_per_rack} servers) of "
        f"{d.req.power.rack_power_kw:g} kW allowed.",
        f"- IT load {p.it_kw:,.1f} kW (servers {p.servers_kw:,.1f}, network {p.network_kw:,.1f}, "
        f"storage {p.storage_kw:,.1f}, management {p.management_kw:,.1f}); facility "
        f"{p.facility_kw:,.1f} kW at PUE {p.pue:g}.",
        f"- Energy at {d.req.power.average_load:.0%} average load: {p.energy_mwh_per_year:,.0f} MWh "
        f"per year = {_usd(p.usd_per_year)} at ${d.req.power.electricity_usd_per_kwh:g}/kWh.",
        "",
        "## Cost (editable estimates, not quotes)",
        "",
        "| capex item | USD |",
        "|---|---|",
        *[f"| {k} | {_usd(v)} |" for k, v in c.capex_breakdown.items()],
        f"| **total** | **{_usd(c.capex_usd)}** |",
        "",
        f"Owning: {_usd(c.owned_usd_per_year)} per year (capex over {c.years:g} years + power).",
        "",
    ]
    if c.cloud:
        lines += [
            "| cloud region | instance | instances | on demand / year | spot / year |",
            "|---|---|---|---|---|",
            *[f"| {o.provider} {o.region} | {o.instance} | {o.instances} | "
              f"{_usd(o.on_demand_usd_per_year)} | {_usd(o.spot_usd_per_year)} "
              f"(-{o.spot_discount:.0%}) |" for o in c.cloud],
            "",
        ]
    return "\n".join(lines)


def write_bundle(d: Design, out: str | Path) -> list[Path]:
    """Write report.md, cables.csv, topology.png/.svg and cluster-spec.yaml into ``out``."""
    from gpucluster.design.diagram import draw
    from gpucluster.design.spec_export import write_cluster_spec

    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    paths = [o / "report.md", o / "cables.csv", o / "topology.png", o / "topology.svg",
             o / "cluster-spec.yaml"]
    paths[0].write_text(markdown(d), encoding="utf-8")
    paths[1].write_text(to_csv(list(d.cables)), encoding="utf-8")
    draw(d, paths[2], paths[3])
    write_cluster_spec(d, paths[4])
    return paths
