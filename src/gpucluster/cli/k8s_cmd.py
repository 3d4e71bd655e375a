"""``gpucluster k8s``: the Kubernetes backend (extender, secondary scheduler, node registration, manifests)."""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpucluster.cli.common import (
    DeviceConfigOpt,
    cluster_option_help,
    deprecated_option,
    device_config_or_fail,
    fail,
    load_cluster_or_fail,
    registry_or_fail,
    renamed,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from prometheus_client.registry import Collector

    from gpucluster.kubernetes.client import ApiClient
    from gpucluster.kubernetes.cluster import KubeCluster

KubeconfigOpt = Annotated[
    Path | None,
    typer.Option("--kubeconfig", help="kubeconfig file (default: the pod's service account, in-cluster)."),
]
PolicyOpt = Annotated[str | None, typer.Option(
    "--placement-policy", help="Placement policy: default (speed-fgd), stranding-fgd, binpack, spread, fgd, "
                               "bestfit, ... (default: default)")]
OldPolicyOpt = Annotated[str | None, deprecated_option("--policy", "--placement-policy")]
NameOpt = Annotated[str, typer.Option("--scheduler-name", help="Scheduler name pods ask for.")]
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def _check_object_names(namespace: str, release: str, scheduler_name: str) -> None:
    """The names ``k8s manifests`` writes into its objects, checked as the API server will check them (exit 2
    now, not a rejected ``kubectl apply`` later)."""
    if not (len(namespace) <= 63 and _DNS_LABEL.fullmatch(namespace)):
        fail(f"--namespace {namespace!r}: not a namespace name (lower-case letters, digits and '-', starting and "
             "ending with a letter or digit, at most 63 characters)")
    if not (len(release) <= 53 and _DNS_LABEL.fullmatch(release) and release[0].isalpha()):
        fail(f"--release {release!r}: it prefixes the objects' names (a Service's among them), so: a lower-case "
             "letter, then lower-case letters, digits and '-', ending with a letter or digit, at most 53 characters")
    if not (len(scheduler_name) <= 253 and _DNS_SUBDOMAIN.fullmatch(scheduler_name)):
        fail(f"--scheduler-name {scheduler_name!r}: a pod's spec.schedulerName must be a DNS subdomain (lower-case "
             "letters, digits, '-' and '.', at most 253 characters)")
LegacyOpt = Annotated[bool, typer.Option(
    "--legacy-metrics", help="Also export HAMi's legacy metric names (GPUDeviceMemoryAllocated, ...) beside "
                             "its current ones (hami_gpu_memory_allocated_bytes, ...), as HAMi's flag does.")]


def _metrics(legacy: bool) -> Callable[[KubeCluster], Sequence[Collector]]:
    """/metrics families over the cluster: our allocation families and HAMi's (docs/monitoring.md)."""

    def make(cluster: KubeCluster) -> Sequence[Collector]:
        from prometheus_client import CollectorRegistry

        from gpucluster.monitoring.exporter import register_allocation

        reg = CollectorRegistry(auto_describe=False)
        register_allocation(reg, lambda: cluster.state, None, cluster.lock, legacy)
        return [reg]

    return make


def _api(kubeconfig: Path | None) -> ApiClient:
    from gpucluster.kubernetes.client import KubeConfigError, api_client

    try:
        return api_client(kubeconfig)
    except KubeConfigError as exc:
        fail(f"--kubeconfig: {exc}")


def _check_policy(policy: str) -> None:
    from gpucluster.scheduler import PROFILES

    if policy not in PROFILES:
        fail(f"--placement-policy: unknown placement policy {policy!r}; known: {', '.join(sorted(PROFILES))}")


def _listen(value: str) -> tuple[str, int]:
    from gpucluster.kubernetes.runtime import parse_listen

    try:
        return parse_listen(value)
    except ValueError as exc:
        fail(str(exc))


def _check_seconds(flag: str, value: float, *, most: float = math.inf) -> None:
    """``value`` (seconds) must be > 0 and at most ``most`` (inf: "never" where that is allowed); NaN fails every
    comparison, so it is refused too (a NaN timeout made every node stale, or none, without a word)."""
    if not 0 < value <= most:
        limit = "" if most == math.inf else f" and at most {most:g}"
        fail(f"{flag}: must be > 0{limit} seconds, got {value:g}")


def register(app: typer.Typer) -> None:
    k8s = typer.Typer(help="Run gpucluster's scheduler on a real Kubernetes cluster.", no_args_is_help=True)
    app.add_typer(k8s, name="k8s")

    @k8s.command("extender")
    def extender(
        kubeconfig: KubeconfigOpt = None,
        listen: Annotated[str, typer.Option("--listen", help="HOST:PORT to serve the extender API on.")]
        = "127.0.0.1:8888",
        policy: PolicyOpt = None,
        old_policy: OldPolicyOpt = None,
        scheduler_name: NameOpt = "gpucluster",
        handshake_timeout: Annotated[float, typer.Option(help="Seconds without a device handshake before a "
                                                           "node gets no new pods.")] = 60.0,
        assume_ttl: Annotated[float, typer.Option(help="Seconds a decision waits for its bind.")] = 30.0,
        device_config: DeviceConfigOpt = None,
        legacy_metrics: LegacyOpt = False,
    ) -> None:
        """Serve the kube-scheduler extender API (/filter, /prioritize, /preempt, /bind, /healthz, /metrics)."""
        from gpucluster.kubernetes.runtime import RunOptions, run_extender

        host, port = _listen(listen)
        policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
        _check_policy(policy)
        _check_seconds("--handshake-timeout", handshake_timeout)
        _check_seconds("--assume-ttl", assume_ttl)
        registry = registry_or_fail(device_config)
        opts = RunOptions(placement_policy=policy, scheduler_name=scheduler_name, handshake_timeout=handshake_timeout,
                          assume_ttl=assume_ttl, collectors=_metrics(legacy_metrics))
        try:
            run_extender(_api(kubeconfig), registry, host, port, opts)
        except OSError as exc:
            fail(f"--listen {listen}: {exc.strerror or exc}", code=1)
        except TimeoutError as exc:
            fail(str(exc), code=1)

    @k8s.command("scheduler")
    def scheduler(
        kubeconfig: KubeconfigOpt = None,
        scheduler_name: NameOpt = "gpucluster",
        policy: PolicyOpt = None,
        old_policy: OldPolicyOpt = None,
        namespace: Annotated[str, typer.Option("--namespace", help="Namespace of the leader-election Lease.")]
        = "kube-system",
        lease_name: Annotated[str, typer.Option("--lease-name", help="Lease name (default: <scheduler-name>).")]
        = "",
        identity: Annotated[str, typer.Option("--identity", help="This replica's id (default: POD_NAME or "
                                                                   "host-pid).")] = "",
        lease_duration: Annotated[float, typer.Option(help="Lease duration in seconds.")] = 15.0,
        leader_elect: Annotated[bool, typer.Option(help="Elect a leader among replicas.")] = True,
        listen: Annotated[str, typer.Option("--listen", help="HOST:PORT for /healthz and /metrics "
                                                             "(empty: none).")] = "",
        handshake_timeout: Annotated[float, typer.Option(help="Seconds without a device handshake.")] = 60.0,
        device_config: DeviceConfigOpt = None,
        legacy_metrics: LegacyOpt = False,
        claim_settle: Annotated[float, typer.Option(
            "--claim-settle", help="Seconds between writing ResourceClaim allocations and checking them against "
                                   "every claim (kube-scheduler's DRA plugin may allocate the same device at the "
                                   "same time); 0 skips the check.")] = 1.0,
        percentage_of_nodes_to_score: Annotated[int, typer.Option(
            "--percentage-of-nodes-to-score", min=0, max=100,
            help="kube-scheduler's percentageOfNodesToScore, with its meaning, for our decisions: a pod's "
                 "decision scores the first feasible nodes found (round-robin from where the previous one "
                 "stopped) until it has that share of all nodes, at least 100 (every node on a smaller "
                 "cluster). 100: every feasible node; 0: adaptive (50 % minus 1 % per 125 nodes, at least "
                 "5 %).")] = 100,
    ) -> None:
        """Run a secondary scheduler for pods with spec.schedulerName = --scheduler-name (gangs, leader
        election, ResourceClaims allocated with our placement)."""
        from gpucluster.kubernetes.runtime import RunOptions, run_scheduler

        policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
        _check_policy(policy)
        registry = registry_or_fail(device_config)
        if not 1 <= lease_duration <= 3600:  # NaN and inf made the elector's own check raise (a traceback)
            fail(f"--lease-duration: must be within 1..3600 seconds, got {lease_duration:g}")
        _check_seconds("--handshake-timeout", handshake_timeout)
        if not 0 <= claim_settle <= 60:
            fail(f"--claim-settle: must be within 0..60 seconds, got {claim_settle:g}")
        where = _listen(listen) if listen else None
        opts = RunOptions(placement_policy=policy, scheduler_name=scheduler_name, handshake_timeout=handshake_timeout,
                          collectors=_metrics(legacy_metrics), claim_settle=claim_settle,
                          percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        try:
            run_scheduler(_api(kubeconfig), registry, opts, namespace=namespace,
                          lease_name=lease_name or scheduler_name, identity=identity or None,
                          lease_duration=lease_duration, listen=where, leader_elect=leader_elect)
        except TimeoutError as exc:
            fail(str(exc), code=1)

    @k8s.command("register-nodes")
    def register_nodes(
        kubeconfig: KubeconfigOpt = None,
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        interval: Annotated[float, typer.Option(help="Seconds between handshake refreshes.")] = 30.0,
        once: Annotated[bool, typer.Option("--once", help="Register and exit (no handshake refreshes).")]
        = False,
        delete: Annotated[bool, typer.Option("--delete", help="Delete the spec's nodes instead.")] = False,
    ) -> None:
        """Create Node objects (capacity, labels, HAMi device annotations, Ready) for a simulated cluster
        and keep their device handshakes fresh."""
        from gpucluster.kubernetes.client import ApiException
        from gpucluster.kubernetes.register import NodeRegistrar

        _check_seconds("--interval", interval, most=86400.0)
        spec = load_cluster_or_fail(cluster)
        reg = NodeRegistrar(_api(kubeconfig), spec.nodes, registry_or_fail(None), interval=interval)
        try:
            if delete:
                reg.delete()
                typer.echo(f"deleted {len(spec.nodes)} nodes of {spec.name}")
                return
            t0 = time.monotonic()
            n = reg.register()
            typer.echo(f"registered {n} nodes of {spec.name} in {time.monotonic() - t0:.1f} s", err=True)
            if once:
                return
            import signal
            import threading

            done = threading.Event()
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, lambda *_: done.set())
            while not done.wait(interval):
                reg.refresh()
        except ApiException as exc:
            fail(f"API server refused: {exc.status} {exc.reason}: {(exc.body or '')[:300]}", code=1)

    @k8s.command("manifests")
    def manifests_cmd(
        mode: Annotated[str, typer.Option("--mode", help="extender (kube-scheduler + our extender) or "
                                                         "scheduler (our secondary scheduler).")] = "extender",
        kube_version: Annotated[str, typer.Option(
            "--kube-version", help="Target Kubernetes version X.Y[.Z], 1.35 or newer (1.35-1.37 are tested; "
                                   "older ones are refused): picks the registry.k8s.io/kube-scheduler image; the "
                                   "KubeSchedulerConfiguration is kubescheduler.config.k8s.io/v1.")] = "1.37",
        namespace: Annotated[str, typer.Option("--namespace", help="Namespace of the namespaced objects (the "
                                                                    "scheduler, its Lease, the agent).")]
        = "kube-system",
        release: Annotated[str, typer.Option("--release", help="Prefix of the objects' names (as a Helm "
                                                               "release name).")] = "gpucluster",
        image: Annotated[str, typer.Option("--image", help="gpucluster container image (see Containerfile).")]
        = "ghcr.io/gpucluster/gpucluster:0.1.0",
        kube_scheduler_image: Annotated[str, typer.Option(
            "--kube-scheduler-image", help="kube-scheduler image (default: registry.k8s.io/kube-scheduler at "
                                           "--kube-version).")] = "",
        scheduler_name: NameOpt = "gpucluster",
        policy: PolicyOpt = None,
        old_policy: OldPolicyOpt = None,
        device_config: DeviceConfigOpt = None,
        replicas: Annotated[int, typer.Option("--replicas", help="Scheduler pods (leader-elected).")] = 2,
        legacy_metrics: LegacyOpt = False,
        agent: Annotated[bool, typer.Option("--agent/--no-agent", help="The agent DaemonSet on GPU nodes.")]
        = True,
        up: Annotated[bool, typer.Option("--up", help="Also run `gpucluster up` against the cluster.")] = False,
        twins: Annotated[Path | None, typer.Option(
            "--twins", help="Cluster spec whose nodes `k8s register-nodes` keeps registered (a twin).")] = None,
        monitoring: Annotated[bool, typer.Option(
            "--monitoring", help="ServiceMonitor, PrometheusRule (`monitor rules`) and the Grafana dashboard "
                                 "ConfigMap (Prometheus Operator, Grafana sidecar).")] = False,
        percentage_of_nodes_to_score: Annotated[int, typer.Option(
            "--percentage-of-nodes-to-score", min=0, max=100,
            help="kube-scheduler's percentageOfNodesToScore (the chart's kubeScheduler.percentageOfNodesToScore): "
                 "in extender mode kube-scheduler's, in scheduler mode ours (`k8s scheduler "
                 "--percentage-of-nodes-to-score`). 100: every feasible node is scored; lower: a decision stops "
                 "once that share of the nodes (at least 100) is feasible (faster on large clusters, fewer "
                 "candidates); 0: kube-scheduler's adaptive default.")] = 100,
    ) -> None:
        """Print the YAML to deploy gpucluster: ServiceAccounts, least-privilege RBAC, the scheduler
        (ConfigMap, Deployment, Service), the agent DaemonSet and, on request, `up`, a twin's registration and
        the monitoring objects. The Helm chart charts/gpucluster renders the same objects."""
        from gpucluster import inputfile
        from gpucluster.devices import VendorRegistry
        from gpucluster.kubernetes.manifests import DeployOptions, KubeVersionError, build, to_yaml

        if mode not in ("extender", "scheduler"):
            fail(f"--mode {mode!r}: must be extender or scheduler")
        _check_object_names(namespace, release, scheduler_name)
        policy = renamed(policy, old_policy, "--placement-policy", "--policy") or "default"
        _check_policy(policy)
        if replicas < 1:
            fail("--replicas: must be >= 1")
        twin_text = ""
        if twins is not None:
            load_cluster_or_fail(twins)  # a clear error now, not a crash-looping pod later
            try:
                twin_text = inputfile.read_text(twins)
            except inputfile.InputFileError as exc:
                fail(f"--twins: {exc}")
        rules = dashboard = ""
        if monitoring:
            from gpucluster.monitoring import rule_file
            from gpucluster.monitoring.dashboard import dashboard_json

            rules, dashboard = rule_file(), dashboard_json()
        opts = DeployOptions(
            mode="extender" if mode == "extender" else "scheduler", kube_version=kube_version, release=release,
            namespace=namespace, image=image, kube_scheduler_image=kube_scheduler_image,
            scheduler_name=scheduler_name, policy=policy, replicas=replicas, legacy_metrics=legacy_metrics,
            agent=agent, up=up, twins=twin_text, service_monitor=monitoring, prometheus_rules=rules,
            dashboard=dashboard, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        registry = VendorRegistry.from_settings()
        if device_config is not None:  # shipped to the scheduler pods as its ConfigMap, and read here too
            loaded = device_config_or_fail(device_config)
            registry = VendorRegistry.from_settings(loaded.settings)
            opts = dataclasses.replace(opts, device_config=loaded.document)
        try:
            objs = build(opts, registry)
        except KubeVersionError as exc:
            fail(str(exc))
        sys.stdout.write(to_yaml(objs))
