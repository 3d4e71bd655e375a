"""kubectl-shaped verbs against a running control plane: ``get``, ``describe``, ``cancel``, ``events`` and a
Slurm-like ``sinfo``. All are clients of the REST API (``docs/control-plane.md``).

Output: ``-o table`` (default; plain, fitted to the terminal by truncating cells), ``-o wide`` (more columns,
never truncated), ``-o json`` / ``-o yaml`` (the API's answer, unwrapped); ``--no-headers``; ``-w`` re-reads
every ``--interval`` seconds and prints what changed (one JSON document per line with ``-o json``, YAML
documents separated by ``---`` with ``-o yaml``).
"""

from __future__ import annotations

import enum
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli.client import ContextOpt, ServerOpt, TokenOpt, call, client, resolve, send
from gpucluster.cli.common import fail
from gpucluster.cli.output import (
    OutputFormat,
    json_text,
    print_table,
    terminal_width,
    write,
    write_machine,
    yaml_text,
)

if TYPE_CHECKING:
    import httpx

OutputOpt = Annotated[OutputFormat, typer.Option(
    "--output", "-o", help="table, wide (more columns), json or yaml (the API's answer).", case_sensitive=False)]
NoHeadersOpt = Annotated[bool, typer.Option("--no-headers", help="Tables without the header line.")]
WatchOpt = Annotated[bool, typer.Option("--watch", "-w", help="Keep reading; print what changes.")]
IntervalOpt = Annotated[float, typer.Option("--interval", min=0.2, max=3600.0,
                                            help="Seconds between two reads with -w / --follow.")]
TimeoutOpt = Annotated[float | None, typer.Option(
    "--timeout", min=0.0, help="Stop -w / --follow after this many seconds (default: until Ctrl-C).")]


class Resource(enum.StrEnum):
    JOBS = "jobs"
    NODES = "nodes"
    TENANTS = "tenants"
    ALERTS = "alerts"
    REMEDIATIONS = "remediations"
    QUEUE = "queue"
    SILENCES = "silences"


ALIASES = {"job": "jobs", "node": "nodes", "no": "nodes", "tenant": "tenants", "alert": "alerts",
           "remediation": "remediations", "rem": "remediations", "silence": "silences"}


def _resource(text: str) -> Resource:
    name = ALIASES.get(text.lower(), text.lower())
    try:
        return Resource(name)
    except ValueError:
        fail(f"RESOURCE {text!r}: expected one of {', '.join(r.value for r in Resource)}")


def _complete_resource(incomplete: str) -> list[str]:
    return [r.value for r in Resource if r.value.startswith(incomplete)]


# ---------------------------------------------------------------------------------------------- formatting
def age(seconds: float | None) -> str:
    """kubectl's way: ``42s``, ``3m20s``, ``25m``, ``5h10m``, ``20h``, ``3d``."""
    if seconds is None:
        return "<unknown>"
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = m // 60
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    return f"{h // 24}d"


def clock(t: float | None) -> str:
    """Runtime clock time as the dashboard shows it: ``T+1h02m03s``."""
    if t is None:
        return "-"
    s = int(max(0.0, t))
    return f"T+{s // 3600}h{(s % 3600) // 60:02d}m{s % 60:02d}s"


def _num(x: Any, digits: int = 2, unit: str = "") -> str:
    """``12.5``, ``3``, ``-`` for None; ``unit`` appended to a number."""
    if x is None:
        return "-"
    text = f"{float(x):.{digits}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return (text if text != "-0" else "0") + unit


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.0f}%"


def node_status(n: dict[str, Any]) -> str:
    status = "Ready" if n.get("schedulable", True) else "Ready,SchedulingDisabled"
    bad = sum(1 for h in n.get("dev_healthy", []) if not h)
    return f"{status},GPUUnhealthy({bad})" if bad else status


def node_alloc(n: dict[str, Any]) -> tuple[float, float]:
    """(compute allocated, memory allocated), each 0..1 of the node's GPUs."""
    gpus = max(int(n.get("gpus", 0)), 1)
    core = sum(n.get("dev_core_used", [])) / (1000 * gpus)
    mem = sum(n.get("dev_mem_pct", [])) / (100 * gpus)
    return core, mem


def _job_nodes(j: dict[str, Any]) -> str:
    nodes = sorted({p["node"] for p in j.get("placements", [])})
    return ",".join(nodes[:3]) + (f",+{len(nodes) - 3}" if len(nodes) > 3 else "") if nodes else "<none>"


# ---------------------------------------------------------------------------------------------- resources
@dataclass(frozen=True)
class View:
    """How one resource is read and shown."""

    path: str
    items: Callable[[dict[str, Any]], list[dict[str, Any]]]
    key: Callable[[dict[str, Any]], str]
    headers: Sequence[str]
    wide: Sequence[str]
    row: Callable[[dict[str, Any], dict[str, Any]], list[Any]]
    """(item, the whole answer) -> the table's cells, then the wide ones."""
    right: Sequence[int] = ()
    keep: Sequence[int] = ()
    """Columns never cut at any width (the id ``describe`` and ``cancel`` take)."""


def _job_row(j: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    now = time.time()
    ran = None
    if j.get("started_t") is not None:
        ran = (j["finished_t"] if j.get("finished_t") is not None else body.get("t", 0.0)) - j["started_t"]
    status = f"{j['status']} (pruned)" if j.get("pruned") else j["status"]
    return [j["id"], j["name"], j["tenant"], status, _num(j["gpus"]),
            age(now - j["submitted_at"]) if j.get("submitted_at") else "-", j.get("message", ""),
            j["replicas"], j.get("priority", 0), j.get("gpu_type") or "-", age(ran) if ran is not None else "-",
            _job_nodes(j)]


def _node_row(n: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    core, mem = node_alloc(n)
    util, fb = _mean_of(n.get("dev_util")), _mean_of(n.get("dev_fb_pct"))
    return [n["name"], node_status(n), n.get("model", ""), n["gpus"], _pct(core), _pct(mem), n["pods"],
            "-" if util is None else f"{util:.0f}%", "-" if fb is None else f"{fb:.0f}%",
            n.get("pool", ""), n.get("rack", ""), n.get("leaf", ""),
            f"{n.get('cpu_used_milli', 0) / 1000:g}/{n.get('cpu_milli', 0) / 1000:g}",
            f"{n.get('memory_used_mib', 0) / 1024:.0f}/{n.get('memory_mib', 0) / 1024:.0f}Gi"]


def quota_use(t: dict[str, Any]) -> str:
    """``8/4 GPUs, over quota``, ``2/4 GPUs`` or ``2 GPUs, no quota``."""
    if t.get("quota_gpus") is None:
        return f"{_num(t['gpus'])} GPUs, no quota"
    text = f"{_num(t['gpus'])}/{_num(t['quota_gpus'])} GPUs"
    return text + ", over quota" if t.get("over_quota") else text


def _mean_of(values: list[float | None] | None) -> float | None:
    """Mean of the known values (a node's per-GPU utilisation, in %); None when none is known."""
    known = [float(v) for v in values or [] if v is not None]
    return sum(known) / len(known) if known else None


def _tenant_row(t: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    return [t["name"], "-" if t.get("quota_gpus") is None else _num(t["quota_gpus"]), _num(t["weight"]),
            _num(t["fair_share_gpus"], 1), _num(t["gpus"]), t["running"], t["pending"], quota_use(t),
            _num(t["pending_gpus"]), t.get("max_priority", "-"), _pct(t.get("share_used"))]


def _alert_row(a: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    t = float(body.get("t", 0.0) or 0.0)
    state = a["state"] + (",silenced" if a.get("silenced") else "")
    end = a.get("resolved")
    return [state, a.get("severity", ""), a["name"], a["target"], age((end if end else t) - a["since"]) if t
            else clock(a["since"]), a.get("summary", ""), clock(a["since"]), clock(end) if end else "-",
            a.get("silence", "-")]


def _rem_row(r: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    planned = {(p["t"], p["action"], p["target"]): p.get("id", "") for p in body.get("planned", [])}
    rid = planned.get((r["t"], r["action"], r["target"]))
    outcome = "planned" if rid is not None else r["outcome"]
    return [rid or "-", clock(r["t"]), r["action"], r["target"], outcome, r.get("detail", ""),
            body.get("modes", {}).get(r["action"], "-"), r.get("alert", "")]


def _queue_row(q: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    est = q.get("est_wait_s")
    blocked = q.get("blocked")
    when = ("blocked by quota" if blocked == "quota" else "never" if blocked == "never" else "unknown"
            if est is None else "now" if est < 1 else f"~{age(est)}")
    return [q["position"], q["id"], q["name"], q["tenant"], _num(q["gpus"]), age(q["waiting_s"]), when,
            q.get("why", ""),
            q["priority"], q["replicas"]]


def _silence_row(s: dict[str, Any], body: dict[str, Any]) -> list[Any]:
    return [s["id"], s["alert"] or "*", s["target"] or "*", age(s["ends_t"] - float(body.get("t", 0.0))),
            s.get("comment", ""), s.get("created_by", ""), clock(s["starts_t"]), clock(s["ends_t"])]


def _alerts_with_t(body: dict[str, Any]) -> list[dict[str, Any]]:
    return list(body.get("alerts", []))


VIEWS: dict[Resource, View] = {
    Resource.JOBS: View("/api/v1/jobs", lambda b: b["jobs"], lambda j: j["id"],
                        ["ID", "NAME", "TENANT", "STATUS", "GPUS", "AGE", "MESSAGE"],
                        ["REPLICAS", "PRIORITY", "GPU-TYPE", "RAN", "NODES"], _job_row, right=(4,), keep=(0,)),
    Resource.NODES: View("/api/v1/nodes", lambda b: b["nodes"], lambda n: n["name"],
                         ["NAME", "STATUS", "MODEL", "GPUS", "ALLOC", "MEM", "PODS"],
                         ["UTIL", "FB-USED", "POOL", "RACK", "LEAF", "CPU-REQ", "MEM-REQ"], _node_row,
                         right=(3, 4, 5, 6, 7, 8), keep=(0,)),
    Resource.TENANTS: View("/api/v1/tenants", lambda b: b["tenants"], lambda t: t["name"],
                           ["NAME", "QUOTA", "WEIGHT", "FAIR", "GPUS", "RUNNING", "PENDING", "QUOTA-USE"],
                           ["PENDING-GPUS", "MAX-PRIORITY", "SHARE-USED"], _tenant_row, right=(1, 2, 3, 4, 5, 6),
                           keep=(0, 7)),
    Resource.ALERTS: View("/api/v1/alerts", _alerts_with_t, lambda a: f"{a['name']}|{a['target']}|{a['since']}",
                          ["STATE", "SEVERITY", "ALERT", "TARGET", "AGE", "SUMMARY"],
                          ["SINCE", "RESOLVED", "SILENCE"], _alert_row),
    Resource.REMEDIATIONS: View("/api/v1/remediations", lambda b: b["log"],
                                lambda r: f"{r['t']}|{r['action']}|{r['target']}",
                                ["ID", "TIME", "ACTION", "TARGET", "OUTCOME", "DETAIL"], ["MODE", "ALERT"],
                                _rem_row, keep=(0,)),
    Resource.QUEUE: View("/api/v1/queue", lambda b: b["jobs"], lambda q: q["id"],
                         ["POS", "ID", "NAME", "TENANT", "GPUS", "WAITING", "EST-START", "WHY"],
                         ["PRIORITY", "REPLICAS"], _queue_row, right=(0, 4), keep=(1, 6)),
    Resource.SILENCES: View("/api/v1/silences", lambda b: b["silences"], lambda s: s["id"],
                            ["ID", "ALERT", "TARGET", "ENDS-IN", "COMMENT"], ["BY", "STARTS", "ENDS"], _silence_row),
}


def _fetch(http: httpx.Client, res: Resource, params: dict[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = call(http, "GET", VIEWS[res].path, params=params)
    if res == Resource.ALERTS and "t" not in body:  # alert ages are on the runtime clock
        body["t"] = call(http, "GET", "/healthz").get("t", 0.0)
    return body


def _filter_items(res: Resource, body: dict[str, Any], name: str | None, state: str | None) -> list[dict[str, Any]]:
    items = VIEWS[res].items(body)
    if state is not None:
        items = [a for a in items if a.get("state") == state]
    if name is not None:
        items = [x for x in items if name in (x.get("id"), x.get("name"), x.get("target"))]
    return items


def _table(res: Resource, items: list[dict[str, Any]], body: dict[str, Any], fmt: OutputFormat,
           no_headers: bool) -> None:
    view = VIEWS[res]
    wide = fmt == OutputFormat.WIDE
    headers = [*view.headers, *(view.wide if wide else ())]
    rows = [view.row(x, body)[:len(headers)] for x in items]
    print_table(headers, rows, no_headers=no_headers, wide=wide, right=view.right, keep=view.keep)


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


def _ticks(interval: float, deadline: float | None) -> Iterator[None]:
    """Yield every ``interval`` seconds until the deadline (or Ctrl-C)."""
    try:
        while deadline is None or time.monotonic() < deadline:
            wait = interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic()))
            time.sleep(wait)
            if deadline is not None and time.monotonic() >= deadline:
                return
            yield None
    except KeyboardInterrupt:
        return


def _emit_changes(items: list[dict[str, Any]], fmt: OutputFormat) -> None:
    for x in items:
        if fmt == OutputFormat.JSON:
            write(json_text(x, compact=True))
        else:
            write("---\n" + yaml_text(x))


def get(
    resource: Annotated[str, typer.Argument(
        metavar="RESOURCE", help="jobs, nodes, tenants, alerts, remediations, queue or silences.",
        autocompletion=_complete_resource)],
    name: Annotated[str | None, typer.Argument(help="Only this one (id or name; for alerts the alert name "
                                                    "or target).")] = None,
    output: OutputOpt = OutputFormat.TABLE,
    no_headers: NoHeadersOpt = False,
    watch: WatchOpt = False,
    interval: IntervalOpt = 2.0,
    timeout: TimeoutOpt = None,
    status: Annotated[str | None, typer.Option("--status", help="jobs: pending, running, succeeded, failed or "
                                                                "cancelled.")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="jobs: only this tenant's.")] = None,
    state: Annotated[str | None, typer.Option("--state", help="alerts: firing, pending or resolved.")] = None,
    planned: Annotated[bool, typer.Option("--planned", help="remediations: only the planned (dry-run) actions "
                                                            "whose alert still fires.")] = False,
    all_jobs: Annotated[bool, typer.Option("--all", "-A", help="jobs, queue: include the background "
                                                               "workload.")] = False,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="jobs: at most this many.")] = 200,
    history: Annotated[bool, typer.Option("--history", help="jobs: the history from the store, the finished jobs "
                                                            "the retention policy pruned included.")] = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """List jobs, nodes, tenants, alerts, remediations, the queue or silences (kubectl get)."""
    res = _resource(resource)
    if state is not None and state not in ("firing", "pending", "resolved"):
        fail(f"--state {state!r}: expected firing, pending or resolved")
    params: dict[str, Any] = {}
    if res == Resource.JOBS:
        params["limit"] = limit
        if status:
            params["status"] = status
        if tenant:
            params["tenant"] = tenant
        if all_jobs:
            params["include_synthetic"] = "true"
        if history:
            params["include"] = "pruned"
    elif res == Resource.QUEUE and all_jobs:
        params["include_synthetic"] = "true"
    conn = resolve(server, token, context)
    with client(conn) as http:
        body = _fetch(http, res, params)
        if planned and res == Resource.REMEDIATIONS:
            body = {**body, "log": body.get("planned", [])}
        items = _filter_items(res, body, name, state)
        if output.machine:
            if watch:
                _emit_changes(items, output)
            else:
                shown = dict(body)
                if name is not None or state is not None or planned:
                    key = {Resource.REMEDIATIONS: "log", Resource.ALERTS: "alerts"}.get(res, res.value)
                    shown[key] = items
                if name is not None and len(items) == 1 and res != Resource.ALERTS:
                    write_machine(items[0], output)
                else:
                    write_machine(shown, output)
        else:
            if name is not None and not items:
                fail(f"{res.value} {name!r}: not found", 1)
            _table(res, items, body, output, no_headers)
        if not watch:
            return
        seen = {VIEWS[res].key(x): x for x in items}
        for _ in _ticks(interval, _deadline(timeout)):
            body = _fetch(http, res, params)
            if planned and res == Resource.REMEDIATIONS:
                body = {**body, "log": body.get("planned", [])}
            now = _filter_items(res, body, name, state)
            changed = [x for x in now if seen.get(VIEWS[res].key(x)) != x]
            seen = {VIEWS[res].key(x): x for x in now}
            if not changed:
                continue
            if output.machine:
                _emit_changes(changed, output)
            else:
                _table(res, changed, body, output, no_headers=True)


# ---------------------------------------------------------------------------------------------- describe
def find_job(http: httpx.Client, ref: str, prefer_active: bool = False) -> dict[str, Any]:
    """A job by id, else the one job with that name: exit 1 when none (kubectl's NotFound), exit 2 naming the ids
    when several jobs have that name (a name is unique among a tenant's live jobs only: a finished job's name may
    be used again, another tenant has its own, and ``up --job-names shared`` lets them repeat; an id is unique).
    ``prefer_active`` (cancel): only the jobs still pending or running are candidates, when there are any."""
    resp = send(http, "GET", f"/api/v1/jobs/{ref}")
    if resp.status_code == 200:
        found: dict[str, Any] = resp.json()
        return found
    if resp.status_code not in (404, 422):
        call(http, "GET", f"/api/v1/jobs/{ref}")
    listed = call(http, "GET", "/api/v1/jobs", params={"q": ref[:100], "limit": 5000})
    same = [j for j in listed["jobs"] if j["name"] == ref]
    if not same:
        fail(f"job {ref!r}: not found (no job with that id or name; a finished job that left the job list under "
             "the retention policy is found by its id only)", 1)
    active = [j for j in same if j["status"] in ("pending", "running")]
    if prefer_active and active:
        same = active
    if len(same) > 1:
        ids = ", ".join(f"{j['id']} ({j['status']})" for j in same[:10]) + (", ..." if len(same) > 10 else "")
        fail(f"job {ref!r}: {len(same)} jobs have that name: {ids}; give the id")
    job: dict[str, Any] = call(http, "GET", f"/api/v1/jobs/{same[0]['id']}")
    return job


def _kv(pairs: Sequence[tuple[str, Any]]) -> None:
    width = max(len(k) for k, _ in pairs) + 2
    cols = terminal_width()
    for k, v in pairs:
        text = f"{k + ':':<{width}}{'' if v is None else v}"
        write(text if cols is None or len(text) <= cols else text[:cols - 1] + "…")


def _section(title: str, headers: Sequence[str], rows: list[Sequence[Any]], empty: str = "<none>",
             wrap_last: bool = False) -> None:
    write(f"{title}:")
    if not rows:
        write(f"  {empty}")
        return
    from gpucluster.cli.output import render_table

    width = terminal_width()
    text = render_table(headers, rows, None if width is None else width - 2, wrap_last=wrap_last)
    write("\n".join("  " + line for line in text.rstrip("\n").splitlines()))


def describe_job(job: dict[str, Any]) -> None:
    res = ", ".join(f"{k}={v}" for k, v in job.get("resources", {}).items())
    pairs: list[tuple[str, Any]] = [
        ("Name", job["name"]), ("ID", job["id"]), ("Tenant", job["tenant"]), ("Status", job["status"]),
        ("Priority", job.get("priority", 0)),
        ("Replicas", f"{job['replicas']} (placed all or nothing)" if job["replicas"] > 1 else job["replicas"]),
        ("Resources", res or "<none>"),
        ("GPUs", f"{_num(job['gpus'])} GPU-equivalents"
                 + (" held" if job["status"] == "running" else " (at least, once placed)")),
    ]
    for key, label in (("gpu_type", "GPU type"), ("kind", "Kind"), ("preemptible", "Preemptible"),
                       ("node_selector", "Node selector"), ("ref_gpu", "Reference GPU"),
                       ("work_class", "Work class")):
        if job.get(key) not in (None, "", {}):
            pairs.append((label, job[key]))
    if job.get("speedup"):
        pairs.append(("Speedup", ", ".join(f"{k}={_num(v)}" for k, v in sorted(job["speedup"].items()))))
    if job.get("image"):
        pairs.append(("Image", job["image"]))
    if job.get("command") or job.get("args"):
        pairs.append(("Command", " ".join([*job.get("command", []), *job.get("args", [])])))
    if job.get("volumes"):
        pairs.append(("Volumes", ", ".join(
            f"{v['mount_path']} <- " + next(f"{k} {v[k]}" for k in ("pvc", "config_map", "secret") if v.get(k))
            for v in job["volumes"])))
    if job.get("tokens"):
        pairs.append(("Tokens", f"{job['tokens']:,.0f}"))
    if job.get("ref_gpu") and job.get("gpu_speed") is not None:
        pairs.append(("GPU speed", f"{_num(job['gpu_speed'])}x {job['ref_gpu']} (work of {job['duration_s']:g}s "
                                   f"on it takes {job['duration_s'] / job['gpu_speed']:g}s here)"
                      if job.get("duration_s") else f"{_num(job['gpu_speed'])}x {job['ref_gpu']}"))
    pairs += [
        ("Duration", f"{job['duration_s']:g}s" if job.get("duration_s") else "until cancelled"),
        ("Submitted", f"{time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(job['submitted_at']))} "
                      f"({age(time.time() - job['submitted_at'])} ago), clock {clock(job.get('submitted_t'))}"),
        ("Started", clock(job.get("started_t"))), ("Finished", clock(job.get("finished_t"))),
        ("Message", job.get("message") or "<none>"),
    ]
    if job.get("pruned"):
        pairs.append(("Retention", "finished and out of the control plane's memory (read from the store; no longer "
                                   "in `gpucluster jobs`)"))
    _kv(pairs)
    rows: list[Sequence[Any]] = []
    for p in job.get("placements", []):
        devs = ", ".join(f"gpu{d['index']} " + ("whole" if d.get("whole") or d.get("share", 0) >= 0.9999
                                               else f"{d['memory_mib']}MiB {d['cores']}%")
                         for d in p.get("devices", [])) or "-"
        rows.append((p["pod"] or "-", p["node"] or "-", p.get("phase", "-"), devs))
    _section("Placements", ["POD", "NODE", "PHASE", "DEVICES"], rows)
    events: list[Sequence[Any]] = [(clock(e.get("first_t", e.get("t"))), clock(e.get("t")), e["kind"],
                                    e.get("count", 1), e.get("message", "")) for e in job.get("events", [])]
    _section("Events", ["FIRST", "LAST", "KIND", "COUNT", "MESSAGE"], events, wrap_last=True)


def describe_node(node: dict[str, Any], usage: dict[str, Any], alerts: list[dict[str, Any]]) -> None:
    core, mem = node_alloc(node)
    _kv([
        ("Name", node["name"]), ("Status", node_status(node)), ("Model", f"{node.get('model', '')} x {node['gpus']}"),
        ("Pool", node.get("pool", "")), ("Rack", f"{node.get('rack', '')} (leaf {node.get('leaf', '')}, "
                                                 f"{node.get('spine', '')})"),
        ("CPU", f"{node.get('cpu_used_milli', 0) / 1000:g} of {node.get('cpu_milli', 0) / 1000:g} cores requested "
                "by its pods"),
        ("Memory", f"{node.get('memory_used_mib', 0) / 1024:.0f} of {node.get('memory_mib', 0) / 1024:.0f} GiB "
                   "requested by its pods"),
        ("GPU allocated", f"{_pct(core)} compute, {_pct(mem)} memory"), ("Pods", node["pods"]),
    ])
    use = {d["index"]: d for d in usage.get("devices", [])}
    rows: list[Sequence[Any]] = []
    pods: list[Sequence[Any]] = []
    gib = 1024.0
    for d in node.get("devices", []):
        u = use.get(d["index"], {})
        full = d["core_used"] >= d["core_cap"] or d["memory_used_mib"] >= d["memory_mib"]
        rows.append((d["index"], "ok" if d["healthy"] else "bad",
                     "full" if full else f"{100 * d['core_used'] / max(d['core_cap'], 1):.0f}%",
                     f"{d['memory_used_mib'] / gib:.0f}/{d['memory_mib'] / gib:.0f}G", f"{d['tasks']}/{d['max_tasks']}",
                     _num(u.get("util_pct"), 0, "%"),
                     _num(None if u.get("mem_used_mib") is None else u["mem_used_mib"] / gib, 1, "G"),
                     _num(u.get("temp_c"), 0, "C"), _num(u.get("power_w"), 0, "W"), u.get("xid") or "-"))
        for p in d.get("pods", []):
            share = "whole" if p.get("whole") else f"{p['cores']}% {p['memory_mib']}MiB"
            pods.append((p["pod"], p.get("job_name") or p.get("job") or "-", p.get("tenant", ""), d["index"], share))
    _section("GPUs (allocation | what the collector reports)",
             ["GPU", "HEALTH", "ALLOC", "MEM", "TASKS", "UTIL", "USED", "TEMP", "POWER", "XID"], rows)
    _section("Pods", ["POD", "JOB", "TENANT", "GPU", "SHARE"], pods)
    mine = [a for a in alerts if a["target"] == node["name"] or a["target"].startswith(node["name"] + "/")]
    _section("Alerts", ["STATE", "SEVERITY", "ALERT", "TARGET", "SUMMARY"],
             [(a["state"] + (",silenced" if a.get("silenced") else ""), a.get("severity", ""), a["name"],
               a["target"], a.get("summary", "")) for a in mine], wrap_last=True)


class Describable(enum.StrEnum):
    JOB = "job"
    NODE = "node"


def describe(
    kind: Annotated[str, typer.Argument(metavar="job|node", help="job or node.", autocompletion=lambda incomplete: [
        k.value for k in Describable if k.value.startswith(incomplete)])],
    name: Annotated[str, typer.Argument(help="Job id or name; node name.")],
    output: OutputOpt = OutputFormat.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Everything about one job or node (kubectl describe).

    A job: resources, placements with the device shares, events and the scheduler's reasons. A node: each GPU's
    allocation beside its utilisation, memory, temperature, power and XID, the pods, the alerts. Exit 1 for a job
    or node that does not exist (kubectl's NotFound), 2 for a name several jobs share (give the id)."""
    what = kind.lower().rstrip("s")
    if what not in (Describable.JOB, Describable.NODE):
        fail(f"{kind!r}: describe job NAME or describe node NAME")
    with client(resolve(server, token, context)) as http:
        if what == Describable.JOB:
            job = find_job(http, name)
            if output.machine:
                write_machine(job, output)
            else:
                describe_job(job)
            return
        if send(http, "GET", f"/api/v1/nodes/{name}").status_code == 404:
            fail(f"node {name!r}: not found", 1)
        node = call(http, "GET", f"/api/v1/nodes/{name}")
        usage = call(http, "GET", f"/api/v1/nodes/{name}/usage")
        alerts = call(http, "GET", "/api/v1/alerts")["alerts"]
    if output.machine:
        write_machine({**node, "usage": usage, "alerts": [a for a in alerts if a["target"].split("/")[0] == name]},
                      output)
    else:
        describe_node(node, usage, alerts)


def cancel(
    jobs: Annotated[list[str], typer.Argument(metavar="JOB...", help="Job ids or names.")],
    output: OutputOpt = OutputFormat.TABLE,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Cancel pending or running jobs (exit 2 for one that already finished).

    A name cancels the one pending or running job of that name (finished jobs of the name are no candidates);
    with several such (other tenants', or `up --job-names shared`), exit 2 naming their ids."""
    done = []
    with client(resolve(server, token, context)) as http:
        for ref in jobs:
            job = find_job(http, ref, prefer_active=True)
            out = call(http, "DELETE", f"/api/v1/jobs/{job['id']}")
            done.append(out)
            if not output.machine:
                write(f"job {out['id']} ({out['name']}) cancelled")
    if output.machine:
        write_machine(done[0] if len(done) == 1 else {"jobs": done}, output)


# ---------------------------------------------------------------------------------------------- events
def _event_rows(events: list[dict[str, Any]], wide: bool) -> list[list[Any]]:
    now = time.time()
    rows = []
    for e in events:
        row = [age(now - e["at"]), e["type"], e["kind"], e["object"], e.get("count", 1), e.get("message", "")]
        if wide:
            first = e.get("first_at") or e["at"]
            row += [age(now - first), clock(e.get("t")), e.get("tenant") or "-", e["id"]]
        rows.append(row)
    return rows


def events(
    follow: Annotated[bool, typer.Option("--follow", "-f", "--watch", "-w",
                                         help="Keep printing new events (a repeat comes again with its count).")]
    = False,
    job: Annotated[str | None, typer.Option("--job", help="Only this job's events (id or name).")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=1000, help="Newest events first shown.")] = 50,
    output: OutputOpt = OutputFormat.TABLE,
    no_headers: NoHeadersOpt = False,
    interval: IntervalOpt = 1.0,
    timeout: TimeoutOpt = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """What happened, oldest first (kubectl events).

    Job lifecycle and scheduling decisions (a tenant sees its own jobs'), remediation, alerts firing and
    resolving."""
    wide = output == OutputFormat.WIDE
    headers = ["AGE", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE",
               *(("FIRST-SEEN", "CLOCK", "TENANT", "ID") if wide else ())]
    with client(resolve(server, token, context)) as http:
        params: dict[str, Any] = {"limit": limit}
        if job:
            params["job"] = find_job(http, job)["id"]
        body = call(http, "GET", "/api/v1/events", params=params)
        if output.machine and not follow:
            write_machine(body, output)
            return
        if output.machine:
            _emit_changes(body["events"], output)
        else:
            print_table(headers, _event_rows(body["events"], wide), no_headers=no_headers, wide=wide,
                        right=(4,))
        if not follow:
            return
        cursor = body["cursor"]
        for _ in _ticks(interval, _deadline(timeout)):
            body = call(http, "GET", "/api/v1/events", params={**params, "cursor": cursor, "limit": 1000})
            cursor = body["cursor"]
            if not body["events"]:
                continue
            if output.machine:
                _emit_changes(body["events"], output)
            else:
                print_table(headers, _event_rows(body["events"], wide), no_headers=True, wide=wide, right=(4,))


# ---------------------------------------------------------------------------------------------- sinfo
_NUM = re.compile(r"^(.*?)(\d+)$")


def hostlist(names: Sequence[str]) -> str:
    """Slurm's compressed host list: ``train-[0000-0003,0007],infer-0001``."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for n in names:
        m = _NUM.match(n)
        if m is None:
            plain.append(n)
            continue
        groups.setdefault((m.group(1), len(m.group(2))), []).append(int(m.group(2)))
    parts = []
    for (prefix, width), nums in sorted(groups.items()):
        nums = sorted(set(nums))
        ranges = []
        start = prev = nums[0]
        for x in [*nums[1:], None]:
            if x is not None and x == prev + 1:
                prev = x
                continue
            ranges.append(f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}")
            if x is not None:
                start = prev = x
        parts.append(f"{prefix}{ranges[0]}" if len(ranges) == 1 and "-" not in ranges[0]
                     else f"{prefix}[{','.join(ranges)}]")
    return ",".join(parts + sorted(plain))


def slurm_state(n: dict[str, Any]) -> str:
    """idle, mix, alloc (every GPU full) or drain (cordoned), as Slurm names them."""
    if not n.get("schedulable", True):
        return "drain"
    gpus = int(n.get("gpus", 0))
    used = [max(c / 1000, m / 100) for c, m in zip(n.get("dev_core_used", []), n.get("dev_mem_pct", []),
                                                   strict=False)]
    busy = sum(1 for u in used if u > 0)
    if n.get("pods", 0) == 0 and busy == 0:
        return "idle"
    if gpus and all(u >= 0.9999 for u in used):
        return "alloc"
    return "mix"


def sinfo_rows(nodes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Nodes grouped by pool, GPU model and state with their GPUs allocated/idle/other/total."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for n in nodes:
        groups.setdefault((n.get("pool", ""), n.get("model", ""), slurm_state(n)), []).append(n)
    order = {"alloc": 0, "mix": 1, "idle": 2, "drain": 3}
    rows = []
    for (pool, model, state), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1],
                                                                                 order.get(kv[0][2], 9))):
        alloc = idle = other = total = 0
        for n in members:
            for c, m, h in zip(n.get("dev_core_used", []), n.get("dev_mem_pct", []), n.get("dev_healthy", []),
                               strict=False):
                total += 1
                if not h or state == "drain":
                    other += 1
                elif c > 0 or m > 0:
                    alloc += 1
                else:
                    idle += 1
        core = sum(sum(n.get("dev_core_used", [])) for n in members) / max(1000 * total, 1)
        rows.append({"pool": pool, "model": model, "state": state, "nodes": len(members),
                     "gpus": {"allocated": alloc, "idle": idle, "other": other, "total": total},
                     "gpu_alloc": round(core, 4), "nodelist": hostlist([n["name"] for n in members])})
    return rows


SINFO_HEADERS = ["POOL", "MODEL", "NODES", "STATE", "GPUS(A/I/O/T)", "ALLOC", "NODELIST"]


def sinfo_cells(rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The table's cells; the node list is last, folded at its commas when the terminal is narrow."""
    return [(r["pool"], r["model"], r["nodes"], r["state"],
             "/".join(str(r["gpus"][k]) for k in ("allocated", "idle", "other", "total")), _pct(r["gpu_alloc"]),
             r["nodelist"]) for r in rows]


def sinfo(
    output: OutputOpt = OutputFormat.TABLE,
    no_headers: NoHeadersOpt = False,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Slurm-like summary of nodes by pool, GPU model and state.

    States: idle, mix, alloc (every GPU full), drain (cordoned). GPUS(A/I/O/T): GPUs allocated, idle, other
    (unhealthy or drained), total; then the compressed node list."""
    with client(resolve(server, token, context)) as http:
        body = call(http, "GET", "/api/v1/nodes")
    rows = sinfo_rows(body["nodes"])
    if output.machine:
        write_machine({"t": body.get("t"), "partitions": rows}, output)
        return
    print_table(SINFO_HEADERS, sinfo_cells(rows), no_headers=no_headers, wide=output == OutputFormat.WIDE,
                right=(2, 5), wrap_last=True)


def register(app: typer.Typer) -> None:
    app.command("get")(get)
    app.command("describe")(describe)
    app.command("cancel")(cancel)
    app.command("events")(events)
    app.command("sinfo")(sinfo)
