"""`gpucluster design`: requirements (file, flags or preset) -> checked design, report, spec."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from gpucluster.cli.common import plain, staged_out
from gpucluster.cli.output import print_table
from gpucluster.cli.shown import DESIGN_PRESETS

if TYPE_CHECKING:  # rich and the engine are imported where the command runs, not to build its parameters
    from rich.console import Console

# requirement field -> the flag that sets it, so errors name what the user typed
_FLAG_FOR = {
    "servers": "--servers",
    "gpus_per_server": "--gpus-per-server",
    "gpus": "--gpus",
    "power_budget_kw": "--power-budget-kw",
    "gpu": "--gpu",
    "fabric.type": "--fabric",
    "fabric.switch_ports": "--switch-ports",
    "fabric.oversubscription": "--oversubscription",
    "power.psu": "--psu",
    "cost.price_catalog": "--prices",
}
_COUNTS = {"servers", "gpus", "power_budget_kw"}
_COUNT_FLAGS = {"servers": "--servers", "gpus": "--gpus", "power_budget_kw": "--power-budget-kw"}
_FABRICS = {"ib": "infiniband", "infiniband": "infiniband", "roce": "roce", "rocev2": "roce"}


def _fail(lines: list[str]) -> NoReturn:
    """Every problem found, one ``error:`` line each (as :func:`gpucluster.cli.common.fail` writes one), exit 2."""
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    raise typer.Exit(2)


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    node = data
    *parents, last = path.split(".")
    for p in parents:
        child = node.get(p)
        if not isinstance(child, dict):
            child = {}
            node[p] = child
        node = child
    node[last] = value


def _where(field: str, given_flags: set[str], source: str | None) -> str:
    flag = _FLAG_FOR.get(field)
    if flag and flag in given_flags:
        return f"{flag}: "
    return f"{source}: {field}: " if source else f"{field}: "


def _design_command(
    requirements: Annotated[
        Path | None, typer.Argument(help="Requirements YAML (see docs/design.md).", show_default=False)
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the design as JSON only.")] = False,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write report.md, cables.csv, topology.svg/png here.")
    ] = None,
    export_spec: Annotated[
        Path | None, typer.Option("--export-spec", help="Write a ClusterSpec YAML for schedule/simulate.")
    ] = None,
    preset: Annotated[
        str | None, typer.Option("--preset", help=f"Reference design: {' | '.join(DESIGN_PRESETS)}.")
    ] = None,
    scalable_units: Annotated[
        int, typer.Option("--scalable-units", help="Scalable units (32 node slots) for --preset.")
    ] = 1,
    servers: Annotated[int | None, typer.Option("--servers", help="GPU servers.")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", help="GPUs (rounded up to servers).")] = None,
    power_budget_kw: Annotated[
        float | None, typer.Option("--power-budget-kw", help="Fit the most servers this power allows.")
    ] = None,
    gpus_per_server: Annotated[
        int | None, typer.Option("--gpus-per-server", help="GPUs per server.")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="GPU model (H100, L40S, B200, ...).")] = None,
    fabric: Annotated[str | None, typer.Option("--fabric", help="ib | roce.")] = None,
    switch_ports: Annotated[int | None, typer.Option("--switch-ports", help="Switch radix.")] = None,
    oversubscription: Annotated[
        float | None, typer.Option("--oversubscription", help="Leaf down:up ratio.")
    ] = None,
    psu: Annotated[
        str | None, typer.Option("--psu", help="PSUs per server, e.g. 2x2200 or 6x3300:4+2.")
    ] = None,
    prices: Annotated[
        Path | None, typer.Option("--prices", help="Price catalog YAML (default: bundled estimates).")
    ] = None,
) -> None:
    """Turn requirements into a checked cluster design (compute, network, storage, power, cost)."""
    from rich.console import Console

    from gpucluster import inputfile
    from gpucluster.design import (
        DesignError,
        RequirementsError,
        design,
        load_price_catalog,
        parse_requirements,
        to_dict,
    )
    from gpucluster.design.presets import preset_data

    source: str | None = None
    given: set[str] = set()
    data: dict[str, Any]
    if requirements is not None and preset is not None:
        _fail(["--preset: give either a requirements file or a preset, not both"])
    if requirements is not None:
        source = str(requirements)
        try:
            loaded = inputfile.load_yaml(requirements)
        except inputfile.InputFileError as exc:
            _fail([str(exc)])
        if not isinstance(loaded, dict):
            _fail([f"{source}: requirements: must be a mapping"])
        data = loaded
    elif preset is not None:
        try:
            data = preset_data(preset, scalable_units)
        except DesignError as exc:
            _fail([f"{exc.field}: {exc.why}"])
    else:
        data = {}
        if gpu is None:
            _fail(["--gpu: required (or give a requirements file or --preset)"])
        if servers is None and gpus is None and power_budget_kw is None:
            _fail(["--servers: required (or --gpus, --power-budget-kw, a requirements file or --preset)"])

    overrides: list[tuple[str, str, Any]] = [
        ("--servers", "servers", servers),
        ("--gpus", "gpus", gpus),
        ("--power-budget-kw", "power_budget_kw", power_budget_kw),
        ("--gpus-per-server", "gpus_per_server", gpus_per_server),
        ("--gpu", "gpu", gpu),
        ("--switch-ports", "fabric.switch_ports", switch_ports),
        ("--oversubscription", "fabric.oversubscription", oversubscription),
        ("--psu", "power.psu", psu),
        ("--prices", "cost.price_catalog", str(prices) if prices else None),
    ]
    if fabric is not None:
        if fabric.lower() not in _FABRICS:
            _fail([f"--fabric: must be ib or roce (got {fabric!r})"])
        overrides.append(("--fabric", "fabric.type", _FABRICS[fabric.lower()]))
    for flag, path, value in overrides:
        if value is not None:
            given.add(flag)
            if path in _COUNTS:
                for other in _COUNTS - {path}:
                    if _COUNT_FLAGS[other] not in given:
                        data.pop(other, None)
            _set(data, path, value)

    try:
        req = parse_requirements(data)
        catalog = load_price_catalog(req.cost.price_catalog)
        d = design(req, catalog)
    except RequirementsError as exc:
        _fail([_where(f, given, source) + w for f, w in exc.problems])
    except DesignError as exc:
        _fail([_where(exc.field, given, source) + exc.why])

    info = Console(stderr=as_json)
    if as_json:
        sys.stdout.write(json.dumps(to_dict(d), indent=2) + "\n")
    else:
        _print_summary(d, Console())
    if out is not None:
        from gpucluster.design.report import write_bundle

        with staged_out(out) as stage:  # all of them or none
            names = [p.name for p in write_bundle(d, stage)]
        for name in names:
            info.print(f"wrote {out / name}", markup=False)
    if export_spec is not None:
        from gpucluster.design.spec_export import write_cluster_spec

        try:
            write_cluster_spec(d, export_spec)
        except OSError as exc:
            _fail([f"--export-spec {export_spec}: {exc.strerror or exc}"])
        info.print(f"wrote {export_spec}", markup=False)


def _print_summary(d: Any, console: Console) -> None:
    from gpucluster.design import to_dict

    x = to_dict(d)
    n, p, c = x["network"], x["power"], x["cost"]
    rows = [
        ("GPU", f"{x['gpu']['model']} x {x['gpus_per_server']} per server"),
        ("servers / GPUs", f"{x['servers']:,} / {x['gpus']:,}"),
        ("racks", f"{x['racks']} ({x['racks_detail']['compute']} compute, "
                  f"{x['racks_detail']['servers_per_rack']} servers each)"),
        ("NVLink domains", f"{x['nvlink']['domains']:,} x {x['nvlink']['domain_size']} GPUs"),
        ("fabric", f"{n['fabric']} {n['link_gbps']} Gb/s, {n['tiers']}-tier, {n['switch_ports']}-port "
                   f"{n['switch_model']}"),
        ("leaf / spine / core", f"{n['leaf_switches']} / {n['spine_switches']} / {n['core_switches']}"),
        ("cables node-leaf / leaf-spine / spine-core",
         f"{n['cables']['node_to_leaf']} / {n['cables']['leaf_to_spine']} / {n['cables']['spine_to_core']}"),
        ("oversubscription / bisection", f"{n['oversubscription']:g}:1 / {n['bisection_tbps']:,.1f} Tb/s"),
        ("server max power", f"{p['server_max_w']:,.0f} W; PSUs {p['psu']} "
                             f"{'OK' if p['psu_sufficient'] else 'NOT sufficient'}"),
        ("facility power", f"{p['facility_kw']:,.1f} kW (PUE {p['pue']:g})"),
        ("capex (estimate)", f"${c['capex_usd']:,.0f}"),
        ("power per year", f"${c['power_usd_per_year']:,.0f}"),
    ]
    print_table(["item", "value"], rows, title=f"Cluster design: {x['name']}", no_headers=True)
    for cloud in c["cloud"]:
        console.print(f"cloud {plain(cloud['provider'])} {plain(cloud['region'])}: "
                      f"${cloud['on_demand_usd_per_year']:,.0f}/yr on demand, "
                      f"${cloud['spot_usd_per_year']:,.0f}/yr spot")
    for w in x["warnings"]:
        console.print(f"[bold red]warning:[/] {plain(w)}", soft_wrap=True)


def register(app: typer.Typer) -> None:
    """Add the `design` command to the root app."""
    app.command("design")(_design_command)
