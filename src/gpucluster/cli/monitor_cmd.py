"""``gpucluster agent``, ``gpucluster monitor ...`` and ``gpucluster analyze job``."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpucluster.cli import common
from gpucluster.cli.common import (
    cluster_option_help,
    deprecated_option,
    fail,
    load_cluster_or_fail,
    plain,
    print_json,
    renamed,
)
from gpucluster.cli.output import print_table, write

if TYPE_CHECKING:  # numpy, prometheus_client and the engine are imported where a command runs, never to build
    # its parameters (--help, Tab completion: cli/shown.py)
    from gpucluster.model import ClusterState, Pod
    from gpucluster.monitoring import DeviceSource, JobAnalysis, JobSample
    from gpucluster.scheduler import Decision, Scheduler


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT with a port 1..65535, e.g. 127.0.0.1:9400")
    return host, int(port)


def parse_fault(text: str, state: ClusterState) -> tuple[str, int, int, float]:
    """``NODE:GPU:XID@SECONDS`` -> (node, gpu, xid, seconds), checked against the cluster."""
    spec, _, at = text.partition("@")
    node, _, rest = spec.partition(":")
    gpu, _, xid = rest.partition(":")
    try:
        g, x, t = int(gpu), int(xid), float(at or "0")
    except ValueError:
        raise ValueError(f"--fault {text!r}: expected NODE:GPU:XID@SECONDS, e.g. a-0000:0:79@30") from None
    if node not in state.node_index:
        raise ValueError(f"--fault {text!r}: no node {node!r} in the cluster")
    if not 0 <= g < int(state.dev_count[state.node_index[node]]):
        raise ValueError(f"--fault {text!r}: node {node} has no GPU {g}")
    if not (0 < x <= 999 and t >= 0):
        raise ValueError(f"--fault {text!r}: the XID must be 1-999 and the time >= 0")
    return node, g, x, t


def _load_pods_or_fail(path: Path) -> list[Pod]:
    from gpucluster.spec import SpecError, load_pods

    try:
        return load_pods(path)
    except SpecError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"{path}: {exc.strerror}")


def _check_policy(policy: str) -> None:
    from gpucluster.scheduler import PROFILES

    if policy not in PROFILES:
        fail(f"--placement-policy {policy!r}: unknown; known: {', '.join(sorted(PROFILES))}")


def _place(state: ClusterState, pods: list[Pod], policy: str,
           on_decision: Callable[[Decision, float], None] | None = None) -> tuple[Scheduler, list[Pod]]:
    from gpucluster.scheduler import Outcome, Scheduler, profile_for

    sched = Scheduler(state, profile_for(policy))
    sched.on_decision = on_decision
    pending = [p for p in pods if sched.schedule_and_bind(p).outcome != Outcome.SCHEDULED]
    return sched, pending


def _sim_nodes(state: ClusterState, nodes: list[str]) -> list[str]:
    if not nodes:
        return [state.nodes[0].name]
    if nodes == ["all"]:
        return [n.name for n in state.nodes]
    for n in nodes:
        if n not in state.node_index:
            fail(f"--node {n!r}: no such node in the cluster (e.g. {state.nodes[0].name})")
    return nodes


def _emit(text: str, out: Path | None, what: str) -> None:
    """Write ``text`` to stdout, or to ``out`` with a line on stderr saying what was written where."""
    if out is None:
        typer.echo(text, nl=False)
        return
    try:
        out.write_text(text, encoding="utf-8")
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror}")
    typer.echo(f"wrote {what} to {out}", err=True)


def register(app: typer.Typer) -> None:
    monitor = typer.Typer(help="Monitoring: alert rules, fault drills.", no_args_is_help=True)
    analyze_app = typer.Typer(help="Analyse workloads from their metrics.", no_args_is_help=True)
    app.add_typer(monitor, name="monitor")
    app.add_typer(analyze_app, name="analyze")

    @app.command("agent")
    def agent(
        listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve /metrics on.")] = "127.0.0.1:9400",
        source: Annotated[str, typer.Option("--source", help="nvml (real GPUs), sim, or auto.")] = "auto",
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        node: Annotated[
            list[str] | None, typer.Option("--node", help="sim: node(s) this agent reports ('all' = every node).")
        ] = None,
        pods: Annotated[Path | None, typer.Option("--pods", help="sim: Pod manifests placed on the cluster.")] = None,
        policy: Annotated[str | None, typer.Option(
            "--placement-policy", help="sim: placement policy for --pods (default = speed-fgd; binpack, "
                                       "spread, ...).")] = None,
        old_policy: Annotated[str | None, deprecated_option("--policy", "--placement-policy")] = None,
        control_plane: Annotated[
            bool, typer.Option("--control-plane", help="sim: also export queue/latency/decision metrics.")
        ] = False,
        duration: Annotated[
            float | None, typer.Option("--duration", help="Stop after this many seconds (default: run until ^C).")
        ] = None,
        faults: Annotated[
            list[str] | None,
            typer.Option("--fault", help="sim: NODE:GPU:XID@SECONDS - the GPU reports the XID that long after start."),
        ] = None,
        legacy_metrics: Annotated[bool, typer.Option(
            "--legacy-metrics", help="Also export HAMi's legacy metric names (HostGPUMemoryUsage, "
                                     "GPUDeviceMemoryAllocated, ...) beside its current ones.")] = False,
    ) -> None:
        """Serve device metrics (dcgm-exporter's names, HAMi's host names) and allocation metrics (ours and
        HAMi's scheduler names) for Prometheus."""
        from prometheus_client import CollectorRegistry

        from gpucluster.monitoring import (
            ControlPlaneMetrics,
            MetricsServer,
            NvmlSource,
            NvmlUnavailableError,
            QueueStats,
            SimSource,
            build_registry,
        )
        from gpucluster.monitoring.collectors import nvml_device_count

        try:
            host, port = parse_listen(listen)
        except ValueError as exc:
            fail(str(exc))
        if duration is not None and not duration > 0:
            fail(f"--duration {duration:g}: must be a number > 0 (seconds)")
        if source not in ("auto", "nvml", "sim"):
            fail(f"--source {source!r}: expected nvml, sim or auto")
        if source == "auto":
            source = "nvml" if nvml_device_count() > 0 else "sim"
        lock = threading.RLock()
        src: DeviceSource
        state: ClusterState | None = None
        nodes: list[str] | None = None
        waiting: list[Pod] = []
        planned: list[tuple[str, int, int, float]] = []
        registry = CollectorRegistry(auto_describe=False)
        started = time.monotonic()
        control = ControlPlaneMetrics(
            registry, lambda: QueueStats(len(waiting), time.monotonic() - started if waiting else 0.0)
        ) if control_plane and source != "nvml" else None
        if source == "nvml":
            if faults:
                fail("--fault needs --source sim")
            try:
                src = NvmlSource()
            except NvmlUnavailableError as exc:
                fail(f"--source nvml: {exc} (use --source sim for a simulated node)")
        else:
            c = load_cluster_or_fail(cluster)
            state = c.state()
            nodes = _sim_nodes(state, list(node or []))
            policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
            _check_policy(policy)  # also without --pods: an unknown name is a mistake however it is used
            if pods is not None:
                _sched, waiting = _place(state, _load_pods_or_fail(pods), policy,
                                         control.observe_decision if control is not None else None)
            src = SimSource(state, nodes)
            try:
                planned = sorted((parse_fault(f, state) for f in faults or []), key=lambda f: f[3])
            except ValueError as exc:
                fail(str(exc))
        build_registry(src, state, nodes, lock, legacy_metrics=legacy_metrics, registry=registry)
        try:
            server = MetricsServer(registry, host, port)
        except OSError as exc:
            fail(f"--listen {listen}: cannot listen: {exc.strerror}")
        gpus = len(src.sample())
        typer.echo(f"serving {server.url} (source {source}, {gpus} GPUs)", err=True)
        # SIGINT/SIGTERM set an event the loop waits on, so a signal never interrupts the loop half-way (a
        # KeyboardInterrupt raised at an arbitrary point could leave a lock or the server in a bad state)
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            start = time.monotonic()
            deadline = None if duration is None else start + duration
            while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
                while planned and time.monotonic() - start >= planned[0][3] and isinstance(src, SimSource):
                    f_node, f_gpu, f_xid, _ = planned.pop(0)
                    with lock:
                        src.inject_xid(f_node, f_gpu, f_xid)
                    typer.echo(f"injected XID {f_xid} on {f_node} GPU {f_gpu}", err=True)
                stop.wait(0.2 if deadline is None else max(0.0, min(0.2, deadline - time.monotonic())))
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            server.stop()
            src.close()

    @monitor.command("rules")
    def rules(
        out: Annotated[Path | None, typer.Option("--out", help="Write the rule file here (default: stdout).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="List the rules as JSON instead.")] = False,
    ) -> None:
        """Write the Prometheus alert rule file (checked by promtool in the tests)."""
        from gpucluster.monitoring import default_rules, rule_file

        if json_out:
            print_json({"rules": [
                {"alert": r.name, "expr": r.expr.promql(), "for_s": r.for_s, "severity": str(r.severity),
                 "action": str(r.action), "summary": r.summary} for r in default_rules()
            ]})
            return
        _emit(rule_file(), out, f"{len(default_rules())} rules")

    @monitor.command("dashboard")
    def dashboard_cmd(
        out: Annotated[Path | None, typer.Option("--out", help="Write the JSON here (default: stdout).")] = None,
    ) -> None:
        """Write the Grafana dashboard (allocation vs utilisation, fragmentation, queue, tenants, per-GPU DCGM
        panels, HAMi's allocation view, latency); import it in Grafana or let the chart's ConfigMap load it."""
        from gpucluster.monitoring.dashboard import dashboard_json

        _emit(dashboard_json(), out, "the dashboard")

    @monitor.command("fault")
    def fault(
        pods: Annotated[Path, typer.Option("--pods", help="Pod manifests running on the cluster.")],
        node: Annotated[
            str | None, typer.Option("--node", help="Node whose GPU fails (default: the one with most pods).")
        ] = None,
        gpu: Annotated[int, typer.Option("--gpu", help="Device index on the node.")] = 0,
        xid: Annotated[int, typer.Option("--xid", min=1, max=999, help="XID the device reports (1-999).")] = 79,
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        policy: Annotated[str | None, typer.Option(
            "--placement-policy", help="Placement policy (default = speed-fgd; binpack, spread, ...).")]
        = None,
        old_policy: Annotated[str | None, deprecated_option("--policy", "--placement-policy")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Only log what would be done.")] = False,
        audit_log: Annotated[Path | None, typer.Option("--audit-log", help="Append JSON lines here.")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print the drill's result as JSON.")] = False,
    ) -> None:
        """Fault drill on the embedded cluster: a GPU reports an XID; watch alerts fire and remediation act."""
        import numpy as np

        from gpucluster.monitoring import (
            AuditLog,
            EmbeddedMonitor,
            Remediator,
            SimSource,
            SimTarget,
            build_registry,
            describe_record,
            lost_pods,
        )

        c = load_cluster_or_fail(cluster)
        state = c.state()
        if node is not None and node not in state.node_index:
            fail(f"--node {node!r}: no such node in the cluster")
        policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
        _check_policy(policy)
        pod_list = _load_pods_or_fail(pods)
        sched, pending = _place(state, pod_list, policy)
        if node is None:
            node = state.nodes[int(np.argmax(state.pod_count))].name
        if not 0 <= gpu < int(state.dev_count[state.node_index[node]]):
            fail(f"--gpu {gpu}: node {node} has {int(state.dev_count[state.node_index[node]])} devices")
        placed = sorted(state.allocations)
        t = [0.0]
        src = SimSource(state, clock=lambda: t[0])
        try:
            audit = AuditLog(audit_log)
        except OSError as exc:
            fail(f"--audit-log {audit_log}: {exc.strerror}")
        target = SimTarget(sched)
        rem = Remediator(target, audit=audit, dry_run=dry_run, node_count=lambda: len(c.nodes),
                         clock=lambda: t[0])
        mon = EmbeddedMonitor({"agent": build_registry(src, state)}, remediator=rem)
        mon.step(0.0)
        src.inject_xid(node, gpu, xid)
        t[0] = 15.0
        res = mon.step(t[0])
        audit.close()
        lost = sorted(lost_pods(placed, target))
        result = {
            "pods": len(pod_list), "placed_before": len(placed), "pending_before": len(pending),
            "firing": [a.to_json() for a in res.firing],
            "actions": [asdict(a) for a in res.actions],
            "pending_after": sorted(target.pending), "lost": lost,
            "node_schedulable": bool(state.schedulable[state.node_index[node]]),
        }
        if json_out:
            print_json(result)
        else:
            write(f"{len(placed)} pods placed; GPU {gpu} on {node} reports XID {xid}")
            print_table(["STATE", "ALERT", "TARGET", "SUMMARY"],
                        [("firing", a.name, a.node + (f"/gpu{a.labels['gpu']}" if a.labels.get("gpu") else ""),
                          a.annotations.get("summary", "")) for a in res.firing], title="alerts")
            print_table(["ACTION", "TARGET", "OUTCOME", "WHAT"],
                        [(rec.action, rec.target, rec.outcome, describe_record(rec)) for rec in res.actions],
                        title="remediation", wrap_last=True)
            write(f"pending after: {len(target.pending)}; lost: {len(lost)}")
        if lost:
            raise typer.Exit(1)

    @analyze_app.command("job")
    def analyze_job(
        job_id: Annotated[str, typer.Argument(metavar="ID", help="Job id (metrics 'job' field, or pod name / "
                                                                 "gang / job-name label in --pods).")],
        metrics: Annotated[
            Path | None, typer.Option("--metrics", help="JSON or CSV metrics file (fields in docs/monitoring.md).")
        ] = None,
        source: Annotated[str, typer.Option("--source", help="file (with --metrics) or sim (with --pods).")] = "",
        pods: Annotated[Path | None, typer.Option("--pods", help="sim: Pod manifests to place and watch.")] = None,
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        seconds: Annotated[float, typer.Option(
            "--seconds", help=f"sim: how long to watch (simulated; one sample per GPU every 10 s, at most "
                              f"{MAX_SIM_SECONDS:g} s = one day).")] = 120.0,
        json_out: Annotated[bool, typer.Option("--json", help="Print the analysis as JSON.")] = False,
    ) -> None:
        """Say what limits a job (compute, input, communication, memory, idle) and what would help."""
        from gpucluster.monitoring import MetricsInputError, analyze, load_metrics

        if not (math.isfinite(seconds) and seconds > 0):
            fail(f"--seconds {seconds:g}: must be a number > 0 and finite")
        if seconds > MAX_SIM_SECONDS:
            fail(f"--seconds {seconds:g}: at most {MAX_SIM_SECONDS:g} (one day of simulated samples)")
        source = source or ("sim" if pods is not None and metrics is None else "file")
        if source == "file":
            if metrics is None:
                fail("give --metrics FILE (JSON or CSV), or --source sim --pods FILE")
            unused = [flag for flag, value in (("--pods", pods), ("--cluster", cluster)) if value is not None]
            if unused:  # read by --source sim only: saying so beats answering from --metrics as if they counted
                fail(f"{' and '.join(unused)}: used with --source sim only (this analysis reads --metrics "
                     f"{metrics})")
            try:
                by_job = load_metrics(metrics)
            except MetricsInputError as exc:
                fail(str(exc))
            except OSError as exc:
                fail(f"--metrics {metrics}: {exc.strerror}")
            samples = by_job.get(job_id)
            if not samples:
                known = ", ".join(sorted(by_job)[:10]) or "none"
                fail(f"job {job_id!r}: not in {metrics} (jobs there: {known})")
        elif source == "sim":
            if pods is None:
                fail("--source sim needs --pods FILE")
            if metrics is not None:
                fail(f"--metrics {metrics}: not read with --source sim (it watches --pods on the simulated cluster)")
            samples = _sim_job_samples(job_id, load_cluster_or_fail(cluster).state(), _load_pods_or_fail(pods),
                                       seconds)
        else:
            fail(f"--source {source!r}: expected file or sim")
        result = analyze(job_id, samples)
        if json_out:
            print_json(result.to_json())
        else:
            _print_analysis(result)


def _job_of(pod: Pod) -> set[str]:
    from gpucluster.model.labels import JOB_LABEL

    return {pod.name, pod.gang, pod.labels.get("job-name", ""), pod.labels.get(JOB_LABEL, "")} - {""}


MAX_SIM_SECONDS = 86400.0
"""The longest span ``analyze job --source sim --seconds`` watches: one day is 8,641 samples per GPU (one every
10 s), about 2 s and 100 MB for an 8-GPU job on a 2-core machine; 1e12 made 1e11 steps and never ended."""


def _sim_job_samples(job_id: str, state: ClusterState, pods: list[Pod], seconds: float) -> list[JobSample]:
    from gpucluster.model.labels import JOB_LABEL
    from gpucluster.monitoring import JobSample, SimSource

    mine = {p.key for p in pods if job_id in _job_of(p)}
    if not mine:
        fail(f"job {job_id!r}: no pod named so or labelled job-name / {JOB_LABEL} / gang {job_id!r}")
    _place(state, pods, "binpack")
    placed = [k for k in mine if k in state.allocations]
    if not placed:
        fail(f"job {job_id!r}: none of its pods fit the cluster")
    nodes = sorted({state.allocations[k].node for k in placed})
    t = [0.0]
    src = SimSource(state, nodes, clock=lambda: t[0])
    out: list[JobSample] = []
    steps = max(2, int(seconds // 10) + 1)
    share: dict[tuple[str, int], float] = {}
    for key in placed:
        a = state.allocations[key]
        i = state.node_index[a.node]
        for g in a.grants:
            cap = int(state.dev_core_cap[i, g.device_index])
            share[(a.node, g.device_index)] = max(0.01, min(1.0, g.core_milli / cap))
    for k in range(steps):
        t[0] = k * seconds / (steps - 1)
        for s in src.sample():
            if (s.hostname, s.gpu) not in share:
                continue
            total = (s.fb_used_mib or 0.0) + (s.fb_free_mib or 0.0)
            out.append(JobSample(
                job=job_id, gpu_util=s.gpu_util_pct or 0.0, time=t[0], node=s.hostname, gpu=s.gpu,
                sm_active=s.gr_engine_active, tensor_active=s.tensor_active, dram_active=s.dram_active,
                pcie_rx_bytes=s.pcie_rx_bytes_per_s or 0.0, pcie_tx_bytes=s.pcie_tx_bytes_per_s or 0.0,
                nvlink_bytes=0.0, fb_used_mib=s.fb_used_mib, fb_total_mib=total or None,
                core_share=share[(s.hostname, s.gpu)],
            ))
    if not out:
        fail(f"job {job_id!r}: its pods hold no devices to watch")
    return out


def _print_analysis(r: JobAnalysis) -> None:
    console = common.console
    console.print(f"job [bold]{plain(r.job)}[/]: [bold]{plain(r.verdict)}[/] ({r.gpus} GPUs on {len(r.nodes)} node(s), "
                  f"{r.samples} samples)")
    console.print(f"why: {r.why}", markup=False)
    print_table(["metric", "value"], [(k, f"{v:g}") for k, v in r.evidence.items()], title="evidence (means)",
                right=(1,))
    for a in r.advice:
        console.print(f" - {a}", markup=False)
