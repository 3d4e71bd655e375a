"""`gpucluster up` (the control plane and dashboard) and the client commands `submit`, `jobs`, `nodes`."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer
import yaml
from rich.table import Table

from gpucluster.cli.common import (
    PLACEMENT_HELP,
    QUEUE_HELP,
    check_placement_policy,
    check_queue_policies,
    console,
    fail,
    load_cluster_or_fail,
    print_json,
)

DEFAULT_SERVER = "http://127.0.0.1:8080"
SERVER_ENV = "GPUCLUSTER_SERVER"
TOKEN_ENV = "GPUCLUSTER_TOKEN"

ServerOpt = Annotated[str | None, typer.Option("--server", help=f"Control plane URL (env {SERVER_ENV}; "
                                                                f"default {DEFAULT_SERVER}).")]
TokenOpt = Annotated[str | None, typer.Option("--token", help=f"Bearer token (env {TOKEN_ENV}).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


def _default_data_dir() -> Path:
    env = os.environ.get("GPUCLUSTER_DATA_DIR")
    return Path(env) if env else Path.home() / ".gpucluster"


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def up(
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="Cluster spec YAML or Node manifests (default: the built-in reference cluster).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Show and schedule a real "
                                                                         "Kubernetes cluster instead.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on.")] = 8080,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Store directory (env GPUCLUSTER_DATA_DIR; "
                                                                     "default ~/.gpucluster).")] = None,
    speed: Annotated[float, typer.Option("--speed", min=0.01, max=10000.0,
                                         help="Clock seconds per real second.")] = 1.0,
    background: Annotated[float, typer.Option("--background", min=0.0, max=1.0,
                                              help="Target load of the synthetic background workload.")] = 0.6,
    faults_per_hour: Annotated[float, typer.Option("--faults-per-hour", min=0.0,
                                                   help="Injected GPU faults per clock hour.")] = 1.0,
    policy: Annotated[str, typer.Option("--placement-policy", "--policy",
                                        help=PLACEMENT_HELP + " (--policy: the same)")] = "default",
    queue_policy: Annotated[str, typer.Option("--queue-policy", help=QUEUE_HELP)] = "default",
    seed: Annotated[int, typer.Option("--seed", help="Random seed of the synthetic workload.")] = 0,
) -> None:
    """Run the control plane: REST API (OpenAPI at /docs) and the dashboard."""
    import uvicorn

    from gpucluster import web
    from gpucluster.service import (
        RuntimeOptions,
        RuntimeUnavailableError,
        ServiceConfig,
        build_runtime,
        create_app,
        open_service,
    )

    check_placement_policy(policy)
    [queue_policy] = check_queue_policies(queue_policy)
    if kubeconfig is not None and cluster is not None:
        fail("--cluster and --kubeconfig: give one of them")
    if kubeconfig is not None and not kubeconfig.is_file():
        fail(f"--kubeconfig: {kubeconfig}: no such file")
    if not _port_free(host, port):
        fail(f"--port: {host}:{port} is already in use (pick another with --port)")
    data = data_dir or _default_data_dir()
    try:
        data.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        fail(f"--data-dir: {data}: {exc.strerror}")
    spec = None if kubeconfig is not None else load_cluster_or_fail(cluster)
    try:
        runtime = build_runtime(RuntimeOptions(cluster=spec, kubeconfig=kubeconfig, policy=policy,
                                               queue_policy=queue_policy, background=background,
                                               fault_rate_per_hour=faults_per_hour, seed=seed))
    except RuntimeUnavailableError as exc:
        fail(str(exc))
    service, generated = open_service(runtime, ServiceConfig(data_dir=data, speed=speed))
    app = create_app(service, web.mount)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "") else host
    url = f"http://{shown_host}:{port}/"
    if os.environ.get("GPUCLUSTER_ADMIN_TOKEN", "").strip():
        how = "paste the admin token from $GPUCLUSTER_ADMIN_TOKEN"
    else:
        how = (f"paste the admin token {service.admin_token}"
               + (" (generated" if generated else " (saved") + f" in {data / 'admin-token'})")
    summary = runtime.overview()
    lines = [
        f"gpucluster control plane ({runtime.backend}: {summary['cluster']}, {summary['nodes']} nodes, "
        f"{summary['devices']} GPUs, speed x{speed:g}; placement {policy}, queue policy {queue_policy})",
        f"  dashboard: {url}",
        f"  log in:    {how}",
        f"  API docs:  {url}docs",
        f"  CLI:       gpucluster jobs --server {url.rstrip('/')} --token <token>",
        f"  data:      {data}",
    ]
    print("\n".join(lines), flush=True)
    import gc

    gc.collect()
    gc.freeze()  # the cluster and the warm-started workload live for the whole run: keep them out of GC passes
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    server.run()


# ---------------------------------------------------------------------------------------------- client
def _client(server: str | None, token: str | None) -> httpx.Client:
    base = (server or os.environ.get(SERVER_ENV) or DEFAULT_SERVER).rstrip("/")
    tok = token or os.environ.get(TOKEN_ENV)
    if not tok:
        fail(f"--token: missing (or set {TOKEN_ENV})")
    return httpx.Client(base_url=base, headers={"Authorization": f"Bearer {tok}"}, timeout=30.0)


def _call(client: httpx.Client, method: str, path: str, **kw: Any) -> Any:
    try:
        resp = client.request(method, path, **kw)
    except httpx.HTTPError as exc:
        fail(f"--server: cannot reach {client.base_url}: {exc}")
    try:
        body = resp.json()
    except ValueError:
        body = {"error": resp.text[:200]}
    if resp.status_code >= 400:
        where = body.get("where") if isinstance(body, dict) else None
        why = body.get("error") if isinstance(body, dict) else str(body)
        fail(f"{where}: {why} (HTTP {resp.status_code})" if where else f"{why} (HTTP {resp.status_code})",
             2 if resp.status_code < 500 else 1)
    return body


def submit(
    job_file: Annotated[Path, typer.Argument(
        help="Job YAML (the POST /api/v1/jobs body): name, tenant, replicas, resources, duration_s, priority, "
             "gpu_type (model substrings, a comma list or a list), node_selector, kind (train|infer), "
             "preemptible.")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Submit a job to a running control plane."""
    try:
        doc = yaml.safe_load(job_file.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"{job_file}: {exc.strerror}")
    except yaml.YAMLError as exc:
        fail(f"{job_file}: not valid YAML: {exc}")
    if not isinstance(doc, dict):
        fail(f"{job_file}: must be a mapping with name, resources, ...")
    with _client(server, token) as client:
        job = _call(client, "POST", "/api/v1/jobs", json=doc)
    if as_json:
        print_json(job)
    else:
        console.print(f"job [bold]{job['id']}[/] ({job['name']}, tenant {job['tenant']}): {job['status']}")


def jobs(
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
    status: Annotated[str | None, typer.Option("--status", help="Filter by status.")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Filter by tenant.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000)] = 50,
) -> None:
    """List jobs (newest first) on a running control plane."""
    params: dict[str, Any] = {"limit": limit}
    if status:
        params["status"] = status
    if tenant:
        params["tenant"] = tenant
    with _client(server, token) as client:
        body = _call(client, "GET", "/api/v1/jobs", params=params)
    if as_json:
        print_json(body)
        return
    table = Table(title=f"{body['total']} job(s)")
    for col in ("ID", "NAME", "TENANT", "REPLICAS", "GPUS", "STATUS"):
        table.add_column(col, no_wrap=True)
    table.add_column("MESSAGE", overflow="fold")
    for j in body["jobs"]:
        table.add_row(j["id"], j["name"], j["tenant"], str(j["replicas"]), f"{j['gpus']:g}", j["status"],
                      j["message"][:60])
    console.print(table)


def nodes(
    server: ServerOpt = None,
    token: TokenOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List nodes with their GPU allocation on a running control plane."""
    with _client(server, token) as client:
        body = _call(client, "GET", "/api/v1/nodes")
    if as_json:
        print_json(body)
        return
    table = Table(title=f"{body['total']} node(s)")
    for col in ("NAME", "RACK", "LEAF", "MODEL", "GPUS", "GPU ALLOC", "PODS"):
        table.add_column(col, no_wrap=True)
    table.add_column("STATE", overflow="fold")
    for n in body["nodes"]:
        cap = 1000 * max(n["gpus"], 1)
        alloc = sum(n["dev_core_used"]) / cap
        state = "ready" if n["schedulable"] else "cordoned"
        if not all(n["dev_healthy"]):
            state += ", unhealthy GPU"
        table.add_row(n["name"], n["rack"], n["leaf"], n["model"], str(n["gpus"]), f"{alloc:.0%}",
                      str(n["pods"]), state)
    console.print(table)
    sys.stdout.flush()


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("submit")(submit)
    app.command("jobs")(jobs)
    app.command("nodes")(nodes)
