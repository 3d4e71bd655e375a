"""``gpucluster top nodes|jobs``: what the GPUs do beside what they hold (kubectl top), allocated-but-idle first.

Both read the control plane's REST API: ``/api/v1/nodes`` (per GPU: allocation, and, where the backend has
device metrics, utilisation, framebuffer in use and temperature as of the last scrape) and, for jobs,
``/api/v1/jobs?status=running`` (where each job's pods sit). A job's utilisation is the mean over the GPUs it
holds; a shared GPU counts every pod's use of it. ``--json`` prints the rows as a JSON list. Tables keep to the
terminal's width (80 columns included): a job's name is the cell cut, never its id or a figure.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import typer

from gpucluster.cli.client import ContextOpt, ServerOpt, TokenOpt, call, client, resolve
from gpucluster.cli.common import fail
from gpucluster.cli.output import SEPARATOR, print_table, terminal_width, truncate, write_json

IDLE_UTIL_PCT = 5.0
"""An allocated GPU below this utilisation counts as idle (the ``GpuAllocatedIdle`` alert's threshold)."""


class What(enum.StrEnum):
    NODES = "nodes"
    JOBS = "jobs"


class SortBy(enum.StrEnum):
    IDLE = "idle"
    UTIL = "util"
    ALLOC = "alloc"
    MEM = "mem"
    TEMP = "temp"
    NAME = "name"


def _mean(xs: list[float | None]) -> float | None:
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0f}%"


def node_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per node: GPUs, compute allocated %, utilisation %, framebuffer used %, hottest GPU °C and its
    allocated-but-idle GPUs (allocated, below :data:`IDLE_UTIL_PCT`)."""
    out = []
    for n in nodes:
        gpus = int(n.get("gpus", 0))
        alloc = [c / 10.0 for c in n.get("dev_core_used", [])]
        util = list(n.get("dev_util") or [None] * gpus)
        fb = list(n.get("dev_fb_pct") or [None] * gpus)
        temp = [t for t in (n.get("dev_temp") or []) if t is not None]
        idle = sum(1 for a, u in zip(alloc, util, strict=False) if a > 0 and u is not None and u < IDLE_UTIL_PCT)
        out.append({"name": n["name"], "model": n.get("model", ""), "gpus": gpus,
                    "alloc_pct": round(sum(alloc) / gpus, 1) if gpus else 0.0,
                    "util_pct": None if _mean(util) is None else round(float(_mean(util) or 0.0), 1),
                    "fb_used_pct": None if _mean(fb) is None else round(float(_mean(fb) or 0.0), 1),
                    "max_temp_c": max(temp) if temp else None, "allocated_idle_gpus": idle,
                    "schedulable": bool(n.get("schedulable", True))})
    return out


def job_rows(jobs: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per running job: the GPUs it holds, their mean utilisation and framebuffer in use, how many of
    them are idle, and its nodes."""
    by_node = {n["name"]: n for n in nodes}
    out = []
    for j in jobs:
        util: list[float | None] = []
        fb: list[float | None] = []
        idle = 0
        nodes_of: list[str] = []
        for p in j.get("placements", []):
            n = by_node.get(p["node"], {})
            if p["node"] not in nodes_of:
                nodes_of.append(p["node"])
            for d in p.get("devices", []):
                k = int(d["index"])
                u = (n.get("dev_util") or [])[k] if k < len(n.get("dev_util") or []) else None
                util.append(u)
                fb.append((n.get("dev_fb_pct") or [])[k] if k < len(n.get("dev_fb_pct") or []) else None)
                idle += int(u is not None and u < IDLE_UTIL_PCT)
        mu, mf = _mean(util), _mean(fb)
        out.append({"id": j["id"], "name": j["name"], "tenant": j["tenant"], "gpus": float(j.get("gpus", 0.0)),
                    "devices": len(util), "util_pct": None if mu is None else round(mu, 1),
                    "fb_used_pct": None if mf is None else round(mf, 1), "idle_devices": idle,
                    "nodes": nodes_of})
    return out


def _sort(rows: list[dict[str, Any]], by: SortBy, idle_key: str) -> list[dict[str, Any]]:
    """Highest figure first (names ascending among equals; unknown figures last); ``idle``: the most
    allocated-but-idle GPUs first, then the least utilised."""
    def high(x: float | None) -> float:
        return -x if x is not None else float("inf")

    def low(x: float | None) -> float:
        return x if x is not None else float("inf")

    keys: dict[SortBy, Any] = {
        SortBy.IDLE: lambda r: (-r[idle_key], low(r["util_pct"]), r["name"]),
        SortBy.UTIL: lambda r: (high(r["util_pct"]), r["name"]),
        SortBy.ALLOC: lambda r: (high(r.get("alloc_pct", r.get("gpus"))), r["name"]),
        SortBy.MEM: lambda r: (high(r["fb_used_pct"]), r["name"]),
        SortBy.TEMP: lambda r: (high(r.get("max_temp_c")), r["name"]),
        SortBy.NAME: lambda r: (0.0, r["name"]),
    }
    return sorted(rows, key=keys[by])


def top(
    what: Annotated[What, typer.Argument(metavar="nodes|jobs", help="nodes or jobs.", case_sensitive=False)],
    sort_by: Annotated[SortBy, typer.Option("--sort-by", case_sensitive=False, help=(
        "idle (most allocated-but-idle GPUs first, then the widest allocation-use gap), util, alloc, mem, "
        "temp (nodes) or name."))] = SortBy.IDLE,
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Show at most this many rows.")] = None,
    all_jobs: Annotated[bool, typer.Option("--all", "-A", help="jobs: include the background workload.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="The rows as a JSON list.")] = False,
    no_headers: Annotated[bool, typer.Option("--no-headers", help="Tables without the header line.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Utilisation beside allocation per node or per running job, allocated-but-idle first (kubectl top)."""
    conn = resolve(server, token, context)
    with client(conn) as http:
        nodes = call(http, "GET", "/api/v1/nodes")["nodes"]
        if what == What.NODES:
            rows = _sort(node_rows(nodes), sort_by, "allocated_idle_gpus")
        else:
            if sort_by == SortBy.TEMP:
                fail("--sort-by temp: only for top nodes")
            params: dict[str, Any] = {"status": "running", "limit": 5000}
            if all_jobs:
                params["include_synthetic"] = "true"
            jobs = call(http, "GET", "/api/v1/jobs", params=params)["jobs"]
            rows = _sort(job_rows(jobs, nodes), sort_by, "idle_devices")
    if limit is not None:
        rows = rows[:limit]
    if as_json:
        write_json(rows)
        return
    if not any(n.get("dev_util") for n in nodes):
        typer.echo("(this backend reports no device metrics: utilisation shows as -)", err=True)
    if what == What.NODES:
        table = [[r["name"], r["gpus"], _pct(r["alloc_pct"]), _pct(r["util_pct"]), _pct(r["fb_used_pct"]),
                  "-" if r["max_temp_c"] is None else f"{r['max_temp_c']:.0f}C", r["allocated_idle_gpus"]]
                 for r in rows]
        print_table(["NAME", "GPUS", "ALLOC", "UTIL", "FB-USED", "TEMP", "IDLE-GPUS"], table, no_headers=no_headers,
                    right=(1, 2, 3, 4, 5, 6))
    else:
        table = [[r["id"], r["name"], r["tenant"], f"{r['gpus']:g}", _pct(r["util_pct"]),
                  f"{r['idle_devices']}/{r['devices']}", _nodes_cell(r["nodes"])] for r in rows]
        headers = ["ID", "NAME", "TENANT", "GPUS", "UTIL", "IDLE", "NODES"]
        _fit_names(headers, table, name_col=1)
        print_table(headers, table, no_headers=no_headers, right=(3, 4, 5))


def _nodes_cell(nodes: list[str]) -> str:
    """The first node and how many more (``train-0001+3``), so the cell stays short."""
    return (nodes[0] + (f"+{len(nodes) - 1}" if len(nodes) > 1 else "")) if nodes else "-"


def _fit_names(headers: list[str], table: list[list[Any]], name_col: int) -> None:
    """Cut the name column (only it) so the row fits the terminal: the job id, the figures and the node stay
    whole, as ``describe``/``cancel`` need the id."""
    width = terminal_width()
    if width is None or not table:
        return
    natural = [max(len(str(h)), *(len(str(row[k])) for row in table)) for k, h in enumerate(headers)]
    room = width - (sum(natural) - natural[name_col]) - len(SEPARATOR) * (len(headers) - 1)
    room = max(room, len(headers[name_col]), 6)
    for row in table:
        row[name_col] = truncate(str(row[name_col]), room)


def register(app: typer.Typer) -> None:
    app.command("top")(top)
