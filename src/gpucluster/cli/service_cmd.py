"""`gpucluster up` (the control plane and dashboard) and the client commands `submit`, `jobs`, `nodes`."""

from __future__ import annotations

import enum
import errno
import ipaddress
import logging
import math
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli import common
from gpucluster.cli.client import ContextOpt, ServerOpt, TokenOpt, call, client, resolve
from gpucluster.cli.common import (
    PLACEMENT_HELP,
    QUEUE_HELP,
    DeviceConfigOpt,
    check_placement_policy,
    check_queue_policies,
    deprecated_option,
    device_settings_or_fail,
    fail,
    load_cluster_or_fail,
    print_json,
    renamed,
)
from gpucluster.cli.get_cmd import VIEWS, Resource
from gpucluster.cli.output import print_table

if TYPE_CHECKING:  # the engine is imported where a command runs, never to build its parameters (cli/shown.py)
    from gpucluster.monitoring import RemediationPolicy

PORT_ENV = "GPUCLUSTER_PORT"
REMEDIATE_NAMES = {"drain": "drain", "defragment": "defragment", "migrate": "defragment", "release": "release"}
"""``--remediate`` words -> the ``gpucluster.monitoring.Action`` each carries out (by its value)."""
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON.")]


class TenantMode(enum.StrEnum):
    """``up --tenants``: whether a job may create its tenant (``ServiceConfig.tenants_on_first_use``)."""

    EXPLICIT = "explicit"
    ON_FIRST_USE = "on-first-use"


class JobNameMode(enum.StrEnum):
    """``up --job-names``: whether a tenant's live jobs may share a name (``ServiceConfig.unique_job_names``)."""

    UNIQUE = "unique"
    SHARED = "shared"


class LogFormat(enum.StrEnum):
    """``up --log-format`` (``service.logs``)."""

    JSON = "json"
    LOGFMT = "logfmt"


def parse_remediate(text: str) -> RemediationPolicy:
    """``--remediate``: comma-separated disruptive actions to carry out (drain, defragment or its alias
    migrate, release; ``all``), or ``none`` to plan every action, cordons included. Unlisted ones are dry-run."""
    from gpucluster.monitoring import Action, RemediationPolicy

    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if words == ["none"]:
        return RemediationPolicy.opt_in([], observe_only=True)
    if words == ["all"]:
        return RemediationPolicy.opt_in({Action(a) for a in REMEDIATE_NAMES.values()})
    bad = [w for w in words if w not in REMEDIATE_NAMES]
    if bad:
        raise ValueError(f"--remediate: unknown action {bad[0]!r}; expected a comma-separated list of "
                         f"{', '.join(REMEDIATE_NAMES)}, or all, or none")
    return RemediationPolicy.opt_in({Action(REMEDIATE_NAMES[w]) for w in words})


def _remediation_line(policy: RemediationPolicy) -> str:
    modes = policy.modes()
    on = [a for a, m in modes.items() if m == "on"]
    dry = [a for a, m in modes.items() if m == "dry-run"]
    text = f"{', '.join(on) or 'nothing'} carried out"
    if dry:
        text += f"; {', '.join(dry)} planned only (dry run; --remediate {','.join(a for a in dry if a != 'cordon')}"
        text += " to carry out)" if any(a != "cordon" for a in dry) else ")"
    return text


def _default_data_dir() -> Path:
    env = os.environ.get("GPUCLUSTER_DATA_DIR")
    return Path(env) if env else Path.home() / ".gpucluster"


def _bind_error(host: str, port: int) -> str | None:
    """Why ``up`` could not listen on ``host:port`` (the flag at fault and the reason), or None when it can: only
    a port taken by another process is "already in use"; a host that is no address (``999.1.1.1``), or not one of
    this machine's, and a port that needs privileges say so."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except socket.gaierror as exc:
            return f"--host {host!r}: not an address or a name this machine resolves ({exc.strerror})"
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return f"--port: {host}:{port} is already in use (pick another with --port)"
            if exc.errno == errno.EADDRNOTAVAIL:
                return f"--host {host!r}: not an address of this machine ({exc.strerror})"
            if exc.errno == errno.EACCES:
                return f"--port {port}: not allowed to listen on it here ({exc.strerror}; ports below 1024 need " \
                       "privileges)"
            return f"--host/--port: cannot listen on {host}:{port}: {exc.strerror or exc}"
    return None


def _shown_host(host: str) -> tuple[str, bool]:
    """(host for the printed URL, listens beyond loopback?). A wildcard address prints this machine's name."""
    if host in ("0.0.0.0", "", "::"):
        return socket.gethostname() or "localhost", True
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    return (f"[{host}]" if ":" in host else host), not loopback


def up(
    cluster: Annotated[Path | None, typer.Option(
        "--cluster", help="Cluster spec YAML or Node manifests (default: the built-in reference cluster).")] = None,
    kubeconfig: Annotated[Path | None, typer.Option("--kubeconfig", help="Show and schedule a real "
                                                                         "Kubernetes cluster instead.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, envvar=PORT_ENV,
                                      help="Port to listen on.")] = 8080,
    data_dir: Annotated[Path | None, typer.Option("--data-dir", help="Store directory (env GPUCLUSTER_DATA_DIR; "
                                                                     "default ~/.gpucluster).")] = None,
    speed: Annotated[float, typer.Option("--speed", min=0.01, max=10000.0,
                                         help="Clock seconds per real second.")] = 1.0,
    background: Annotated[float, typer.Option("--background", min=0.0, max=1.0,
                                              help="Target load of the synthetic background workload.")] = 0.6,
    faults_per_hour: Annotated[float, typer.Option("--faults-per-hour", min=0.0, max=3600.0,
                                                   help="Injected GPU faults per clock hour (at most 3600: one a "
                                                        "clock second).")] = 1.0,
    old_policy: Annotated[str | None, deprecated_option("--policy", "--placement-policy")] = None,
    policy: Annotated[str | None, typer.Option("--placement-policy", help=PLACEMENT_HELP + "; default: default")]
    = None,
    queue_policy: Annotated[str, typer.Option("--queue-policy", help=QUEUE_HELP)] = "default",
    tenants: Annotated[TenantMode | None, typer.Option(
        "--tenants", help="explicit: a job naming a tenant that does not exist is refused (422, saying how to "
                          "create it: `gpucluster tenants create NAME`), as Kueue and Slurm do; on-first-use: it "
                          "creates the tenant, unlimited. Default: explicit (on-first-use with --kubeconfig, where "
                          "Jobs found in the cluster bring their tenant).", case_sensitive=False)] = None,
    job_names: Annotated[JobNameMode, typer.Option(
        "--job-names", help="unique: a job name is unique among a tenant's pending and running jobs (a second one "
                            "is refused, 409 naming the live job's id), as in a Kubernetes namespace; a finished "
                            "job's name may be used again. shared: names may repeat, as in Slurm (the id is "
                            "unique either way).", case_sensitive=False)] = JobNameMode.UNIQUE,
    seed: Annotated[int, typer.Option("--seed", min=0, help="Random seed of the synthetic workload (>= 0).")] = 0,
    device_config: DeviceConfigOpt = None,
    submit_rate: Annotated[float, typer.Option(
        "--submit-rate", min=0.0, max=100000.0,
        help="Job submissions (and task starts) per second each tenant may make; 0 = unlimited.")] = 20.0,
    submit_burst: Annotated[int, typer.Option(
        "--submit-burst", min=1, max=100000, help="Submissions a tenant may make at once.")] = 100,
    max_queued_jobs: Annotated[int, typer.Option(
        "--max-queued-jobs", min=0, max=1_000_000,
        help="Jobs each tenant may have pending at once (429 beyond), unless the tenant's own max_queued_jobs "
             "(POST /api/v1/tenants) says otherwise.")] = 1000,
    finished_job_ttl: Annotated[float, typer.Option(
        "--finished-job-ttl", min=0.0,
        help="Clock seconds a finished (succeeded, failed, cancelled) job stays in memory, in the job list and the "
             "overview (as Kubernetes' ttlSecondsAfterFinished); after that it reads back by id from the store "
             "(gpucluster describe job ID). inf: no age limit.")] = 86400.0,  # retention.DEFAULT_MAX_AGE_S
    max_finished_jobs: Annotated[int, typer.Option(
        "--max-finished-jobs", min=0, max=10_000_000,
        help="Finished jobs kept in memory at most; beyond it the longest finished leave first (they read back by "
             "id from the store). Pending and running jobs always stay.")] = 10_000,  # retention.DEFAULT_MAX_FINISHED
    legacy_metrics: Annotated[bool, typer.Option(
        "--legacy-metrics", help="/metrics also carries HAMi's legacy names (GPUDeviceMemoryAllocated, ...).")]
    = False,
    remediate: Annotated[str, typer.Option(
        "--remediate", help="Disruptive remediation to carry out, comma-separated: drain, defragment (alias "
                            "migrate), release, or all; the others are planned only (dry run) and shown in the "
                            "dashboard and `gpucluster get remediations`. Cordons always run; `none` plans "
                            "those too.")] = "",
    log_format: Annotated[LogFormat, typer.Option(
        "--log-format", help="Structured log lines on stderr: access log, scheduling decisions, remediation, "
                             "alerts.", case_sensitive=False)] = LogFormat.LOGFMT,
    log_level: Annotated[str, typer.Option("--log-level", help="debug, info, warning or error.")] = "info",
    namespace: Annotated[str, typer.Option(
        "--namespace", help="With --kubeconfig: namespace of the Jobs made for jobs of the API.")] = "default",
    admission: Annotated[str, typer.Option(
        "--admission", help="With --kubeconfig: devices (admit a job only when all its pods have a place on real "
                            "devices) or count (GPU count alone, as Kueue admits: for comparison, jobs may then "
                            "hang).")] = "devices",
    leader_elect: Annotated[bool, typer.Option(
        "--leader-elect/--no-leader-elect", help="With --kubeconfig: replicas elect a leader on a Lease; only the "
                                                 "leader admits, the others serve reads.")] = True,
    lease_name: Annotated[str, typer.Option("--lease-name", help="Name of the Lease.")] = "gpucluster-control-plane",
    lease_namespace: Annotated[str | None, typer.Option(
        "--lease-namespace", help="Namespace of the Lease (default: --namespace).")] = None,
    lease_duration: Annotated[float, typer.Option(
        "--lease-duration", min=1.0, max=600.0, help="Seconds without renewal after which another replica "
                                                     "takes over.")] = 15.0,
    identity: Annotated[str | None, typer.Option(
        "--identity", help="This replica's name in the Lease (default: host-pid).")] = None,
    pod_groups: Annotated[str, typer.Option(
        "--pod-groups", help="With --kubeconfig: which bare pods of a pod group (scheduling.x-k8s.io/pod-group, "
                             "gpucluster.io/gang) for schedulerName gpucluster are queued and bound here: all, "
                             "labelled (only those labelled gpucluster.io/queue: run a secondary scheduler of the "
                             "same name for the rest) or none.")] = "all",
) -> None:
    """Run the control plane: REST API (OpenAPI at /docs) and the dashboard."""
    import uvicorn

    from gpucluster import inputfile, web
    from gpucluster.model.labels import QUEUE_LABEL
    from gpucluster.service import (
        DataDirLock,
        DataDirLockedError,
        RuntimeOptions,
        RuntimeUnavailableError,
        ServiceConfig,
        TokenError,
        build_runtime,
        create_app,
        open_service,
    )
    from gpucluster.service.limits import RateLimits
    from gpucluster.service.retention import JobRetention
    from gpucluster.service.store import StoreWriteError, disk_full

    policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
    check_placement_policy(policy)
    [queue_policy] = check_queue_policies(queue_policy)
    try:
        remediation = parse_remediate(remediate)
    except ValueError as exc:
        fail(str(exc))
    if log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        fail(f"--log-level {log_level!r}: expected debug, info, warning or error")
    if kubeconfig is not None and cluster is not None:
        fail("--cluster and --kubeconfig: give one of them")
    if kubeconfig is not None:
        try:
            kube_doc = inputfile.load_yaml(kubeconfig)
        except inputfile.InputFileError as exc:
            fail(f"--kubeconfig: {exc}")
        if not isinstance(kube_doc, dict):
            fail(f"--kubeconfig: {kubeconfig}: not a kubeconfig: expected a mapping with clusters, users, contexts")
    if math.isnan(finished_job_ttl):
        fail("--finished-job-ttl: expected seconds >= 0 (inf: no age limit), got nan")
    if admission not in ("devices", "count"):
        fail(f"--admission {admission!r}: expected devices or count")
    if pod_groups not in ("all", "labelled", "none"):
        fail(f"--pod-groups {pod_groups!r}: expected all, labelled or none")
    from gpucluster.devices import VendorRegistry

    # bad input files are refused before anything is locked or created
    devices = device_settings_or_fail(device_config)
    spec = None if kubeconfig is not None else load_cluster_or_fail(cluster, VendorRegistry.from_settings(devices))
    data = data_dir or _default_data_dir()
    try:
        data.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = DataDirLock(data).acquire()  # held for the life of the process
    except OSError as exc:
        fail(f"--data-dir: {data}: {exc.strerror}")
    except DataDirLockedError as exc:
        fail(f"--data-dir: {exc}")
    bind_error = _bind_error(host, port)
    if bind_error is not None:
        fail(bind_error)
    try:
        runtime = build_runtime(RuntimeOptions(cluster=spec, kubeconfig=kubeconfig, placement_policy=policy,
                                               queue_policy=queue_policy, background=background,
                                               fault_rate_per_hour=faults_per_hour, seed=seed, devices=devices,
                                               remediation=remediation, namespace=namespace, admission=admission,
                                               leader_elect=leader_elect, lease_name=lease_name,
                                               lease_namespace=lease_namespace, lease_duration=lease_duration,
                                               identity=identity, pod_groups=pod_groups))
    except RuntimeUnavailableError as exc:
        fail(str(exc))
    first_use = (tenants or (TenantMode.ON_FIRST_USE if kubeconfig is not None else TenantMode.EXPLICIT)) \
        == TenantMode.ON_FIRST_USE
    config = ServiceConfig(data_dir=data, speed=speed, rates=RateLimits(submit_rate, submit_burst),
                           tenants_on_first_use=first_use,
                           unique_job_names=job_names == JobNameMode.UNIQUE,
                           max_queued_jobs=max_queued_jobs,
                           retention=JobRetention(max_age_s=finished_job_ttl, max_finished=max_finished_jobs),
                           legacy_metrics=legacy_metrics)
    try:
        service, generated = open_service(runtime, config, lock)
    except TokenError as exc:
        fail(str(exc))
    except RuntimeUnavailableError as exc:  # the tenants' shared settings cannot be read: one line
        stop = getattr(runtime, "close", None)
        if callable(stop):
            stop()
        fail(str(exc))
    except (StoreWriteError, OSError) as exc:  # a full disk, a read-only one: one line, not a traceback
        stop = getattr(runtime, "close", None)
        if callable(stop):
            stop()
        why = ("the disk is full" if disk_full(exc) else "it cannot be written") + f" ({_cause(exc)})"
        fail(f"--data-dir: {data}: cannot open the store: {why}")
    app = create_app(service, web.mount)
    shown_host, exposed = _shown_host(host)
    url = f"http://{shown_host}:{port}/"
    if service.admin_source == "env":
        how = "paste the admin token from $GPUCLUSTER_ADMIN_TOKEN"
    elif generated:  # the only time the token itself is printed
        how = f"paste the admin token {service.admin_token} (generated and saved in {data / 'admin-token'})"
    else:
        how = f"paste the admin token saved in {data / 'admin-token'}"
    summary = runtime.overview()
    lines = [
        f"gpucluster control plane ({runtime.backend}: {summary['cluster']}, {summary['nodes']} nodes, "
        f"{summary['devices']} GPUs, speed x{speed:g}; placement {summary.get('placement_in_use', policy)}, "
        f"queue policy {queue_policy})",
        f"  dashboard: {url}",
        f"  log in:    {how}",
        f"  API docs:  {url}docs",
        f"  CLI:       gpucluster get jobs --server {url.rstrip('/')} --token <token>",
        f"  data:      {data}",
    ]
    if kubeconfig is None:
        lines.append(f"  remediate: {_remediation_line(remediation)}")
    else:
        kube = summary.get("kubernetes") or {}
        lines.append(f"  queue:     Jobs labelled {QUEUE_LABEL}=TENANT; admission by {admission}; "
                     + (f"leader election on Lease {lease_namespace or namespace}/{lease_name} as "
                        f"{kube.get('identity')}" if leader_elect else "no leader election"))
    print("\n".join(lines), flush=True)
    if exposed:
        print(f"warning: --host {host}: the API and dashboard are reachable beyond this machine over plain HTTP, "
              "tokens included; put a TLS-terminating proxy in front (see docs/security.md)", file=sys.stderr,
              flush=True)
    import gc

    gc.collect()
    gc.freeze()  # the cluster and the warm-started workload live for the whole run: keep them out of GC passes
    from gpucluster.service import logs

    logs.configure(logs.LogFormat(log_format.value), log_level)
    logging.getLogger("uvicorn.error").setLevel(logging.WARNING)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                                           log_config=None))
    server.run()


# ---------------------------------------------------------------------------------------------- client
def submit(
    job_file: Annotated[Path, typer.Argument(
        help="Job YAML (the POST /api/v1/jobs body): name, tenant, replicas, resources, claims (devices through "
             "DRA: a list of device_class, count, memory_mib), duration_s, priority, "
             "gpu_type (model substrings, a comma list or a list), node_selector, kind (train|infer), "
             "preemptible; what the containers run on Kubernetes: image, command, args, env (value, or "
             "secret/config_map + key), env_from (secret or config_map), working_dir, volumes (mount_path + "
             "pvc, config_map or secret), service_account, tolerations (docs/kubernetes.md).")],
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
    as_json: JsonOpt = False,
    idempotency_key: Annotated[str | None, typer.Option(
        "--idempotency-key", help="Send this Idempotency-Key: running the command again with the same key and file "
                                  "returns the job the first run created instead of a second one.")] = None,
    ref_gpu: Annotated[str | None, typer.Option(
        "--ref-gpu", help="GPU model duration_s was measured on (V100, A100, H100, L40S ...; overrides the file's "
                          "ref_gpu): on another model the job runs duration_s / its speed there.")] = None,
    work_class: Annotated[str | None, typer.Option(
        "--work-class", help="Speed-model work class (training/cnn, inference/llm-decode ...; overrides the "
                             "file's work_class).")] = None,
    tokens: Annotated[float | None, typer.Option(
        "--tokens", help="Tokens the job processes in all (inference cost per million tokens).")] = None,
    speedup: Annotated[list[str] | None, typer.Option(
        "--speedup", metavar="MODEL=X", help="Measured speed relative to --ref-gpu on MODEL (repeat for more "
                                             "models; added to the file's speedup).")] = None,
) -> None:
    """Submit a job to a running control plane."""
    from gpucluster import inputfile

    try:
        doc = inputfile.load_yaml(job_file)
    except inputfile.InputFileError as exc:
        fail(str(exc))
    if not isinstance(doc, dict):
        fail(f"{job_file}: must be a mapping with name, resources, ...")
    doc = with_speed_flags(doc, ref_gpu, work_class, tokens, speedup or [])
    with client(resolve(server, token, context)) as http:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        job = call(http, "POST", "/api/v1/jobs", json=doc, headers=headers)
    if as_json:
        print_json(job)
    else:
        common.console.print(f"job [bold]{common.plain(job['id'])}[/] ({common.plain(job['name'])}, tenant "
                             f"{common.plain(job['tenant'])}): {common.plain(job['status'])}",
                      soft_wrap=True)


def with_speed_flags(doc: dict[str, Any], ref_gpu: str | None, work_class: str | None, tokens: float | None,
                     speedup: list[str]) -> dict[str, Any]:
    """The job body with the speed flags of ``gpucluster submit`` applied (a flag wins over the file's field)."""
    from gpucluster.devices.quantity import finite_number

    out = dict(doc)
    for key, value in (("ref_gpu", ref_gpu), ("work_class", work_class), ("tokens", tokens)):
        if value is not None:
            out[key] = value
    if speedup:
        merged = dict(out.get("speedup") or {}) if isinstance(out.get("speedup"), dict) else {}
        for item in speedup:
            name, sep, raw = item.partition("=")
            if not sep or not name.strip():
                fail(f"--speedup {item!r}: expected MODEL=X (e.g. H100=3.1)")
            try:
                merged[name.strip()] = finite_number(raw, 0.0)
            except ValueError as exc:
                fail(f"--speedup {item!r}: {exc}")
        out["speedup"] = merged
    return out


def _list(res: Resource, params: dict[str, Any], server: str | None, token: str | None, context: str | None,
          as_json: bool) -> None:
    with client(resolve(server, token, context)) as http:
        body = call(http, "GET", VIEWS[res].path, params=params)
    if as_json:
        print_json(body)
        return
    view = VIEWS[res]
    items = view.items(body)
    print_table(view.headers, [view.row(x, body)[:len(view.headers)] for x in items],
                title=f"{body.get('total', len(items))} {res.value[:-1]}(s)", right=view.right)
    if body.get("next"):
        print(f"more: --before {body['next']}")


def jobs(
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
    as_json: JsonOpt = False,
    status: Annotated[str | None, typer.Option("--status", help="Filter by status.")] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Filter by tenant.")] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, max=5000, help="At most this many jobs.")] = 50,
    history: Annotated[bool, typer.Option("--history", help="The history from the store: every job, the finished "
                                                            "ones the retention policy pruned included.")] = False,
    before: Annotated[str | None, typer.Option("--before", help="--history: the page after this cursor (printed "
                                                                "under a page that has more).")] = None,
) -> None:
    """List jobs (newest first) on a running control plane (`gpucluster get jobs` does more)."""
    params: dict[str, Any] = {"limit": limit}
    if history:
        params["include"] = "pruned"
    if before is not None:
        if not history:
            fail("--before: pages the history; add --history")
        params["before"] = before
    if status:
        params["status"] = status
    if tenant:
        params["tenant"] = tenant
    _list(Resource.JOBS, params, server, token, context, as_json)


def nodes(
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """List nodes with their GPU allocation on a running control plane (`gpucluster get nodes` does more)."""
    _list(Resource.NODES, {}, server, token, context, as_json)


def logs(
    job: Annotated[str, typer.Argument(help="Job id or name.")],
    replica: Annotated[int, typer.Option("--replica", min=0, help="Which replica (pod index; default 0).")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing while the container runs.")] = False,
    tail: Annotated[int | None, typer.Option("--tail", min=1, help="Only the last N lines.")] = None,
    server: ServerOpt = None,
    token: TokenOpt = None,
    context: ContextOpt = None,
) -> None:
    """Print a job's container log (one replica's pod, through the Kubernetes API server)."""
    import httpx

    from gpucluster.cli.get_cmd import find_job

    params: dict[str, Any] = {"replica": replica, "follow": follow}
    if tail is not None:
        params["tail"] = tail
    with client(resolve(server, token, context)) as http:
        found = find_job(http, job)
        path = f"/api/v1/jobs/{found['id']}/logs"
        try:
            with http.stream("GET", path, params=params, timeout=httpx.Timeout(30.0, read=None)) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    call(http, "GET", path, params={**params, "follow": False})  # exits with where: why
                out = sys.stdout.buffer
                for chunk in resp.iter_raw():
                    out.write(chunk)
                    out.flush()
        except httpx.HTTPError as exc:
            fail(f"--server: reading the log from {http.base_url} failed: {exc}", 1)
        except KeyboardInterrupt:
            raise typer.Exit(130) from None


def register(app: typer.Typer) -> None:
    app.command("up")(up)
    app.command("submit")(submit)
    app.command("logs")(logs)
    app.command("jobs")(jobs)
    app.command("nodes")(nodes)


def _cause(exc: BaseException) -> str:
    """The first error under a store failure, in one line."""
    cause = getattr(exc, "cause", None) or exc
    text = getattr(cause, "strerror", None) or str(cause)
    return f"{type(cause).__name__}: {text}".splitlines()[0][:300]
