"""Wiring for the long-running processes: the extender and the secondary scheduler (what the CLI runs)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient
from prometheus_client.registry import Collector

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.client import raw_get
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.extender import ExtenderLogic, ExtenderServer
from gpucluster.kubernetes.gangs import GroupSizes
from gpucluster.kubernetes.informer import Informer
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.kubernetes.secondary import SecondaryScheduler
from gpucluster.scheduler.framework import Profile

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunOptions:
    placement_policy: str = "default"
    """Placement profile name (``gpucluster.scheduler.profiles``)."""
    scheduler_name: str = "gpucluster"
    handshake_timeout: float = 60.0
    """Seconds without a device-plugin handshake after which a node gets no new pods."""
    assume_ttl: float = 30.0
    """Seconds an assumed (decided, not bound) allocation is held."""
    sync_timeout: float = 60.0
    claim_settle: float = 1.0
    """Secondary scheduler: seconds between writing claim allocations and checking them against every claim."""
    collectors: Callable[[KubeCluster], Sequence[Collector]] | None = None
    """More metrics for ``/metrics`` over the cluster (the CLI passes the allocation collectors, ours and
    HAMi's, from ``gpucluster.monitoring``)."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8888")
    return host or "127.0.0.1", int(port)


def _wait_for_signal() -> None:
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()


def _collectors(opts: RunOptions, cluster: KubeCluster) -> Sequence[Collector]:
    return () if opts.collectors is None else opts.collectors(cluster)


def build(api: ApiClient, registry: VendorRegistry, opts: RunOptions, identity: str = "",
          profile: Profile | None = None, services: Mapping[str, Any] | None = None, recreate_unbound: bool = True,
          ) -> tuple[KubeCluster, KubeBinder, Informer]:
    """The cluster view, its binder and its informer. ``recreate_unbound``: a rolled-back group's bound pods are
    created again unbound (users' pods); False: only deleted (the control plane's own)."""
    binder = KubeBinder(api, registry, identity=identity, recreate=recreate_unbound)
    cluster = KubeCluster(registry, opts.placement_policy, binder=binder, handshake_timeout=opts.handshake_timeout,
                          assume_ttl=opts.assume_ttl, scheduler_name=opts.scheduler_name, profile=profile,
                          services=services)
    binder.cluster = cluster
    informer = Informer(api, cluster)
    return cluster, binder, informer


def start_extender(api: ApiClient, registry: VendorRegistry, host: str, port: int,
                   opts: RunOptions) -> tuple[ExtenderServer, Informer]:
    cluster, _binder, informer = build(api, registry, opts, identity=f"extender@{socket.gethostname()}")
    core = client.CoreV1Api(api)

    def read_pod(namespace: str, name: str) -> Mapping[str, Any]:
        return raw_get(core.read_namespaced_pod, name, namespace)

    informer.start()
    if not informer.wait_synced(opts.sync_timeout):
        raise TimeoutError(f"informer did not sync within {opts.sync_timeout}s")
    server = ExtenderServer(ExtenderLogic(cluster, read_pod), host, port, ready=lambda: informer.synced,
                            collectors=_collectors(opts, cluster))
    server.start()
    log.info("extender listening on %s:%d (%d nodes)", host, server.port, cluster.state.n_nodes)
    return server, informer


def run_extender(api: ApiClient, registry: VendorRegistry, host: str, port: int, opts: RunOptions) -> None:
    server, informer = start_extender(api, registry, host, port, opts)
    print(f"gpucluster extender listening on http://{host}:{server.port}", flush=True)
    _wait_for_signal()
    server.stop()
    informer.stop()


def run_scheduler(api: ApiClient, registry: VendorRegistry, opts: RunOptions, *, namespace: str,
                  lease_name: str, identity: str | None, lease_duration: float, listen: tuple[str, int] | None,
                  leader_elect: bool = True) -> None:
    identity = identity or os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    cluster, binder, informer = build(api, registry, opts, identity=identity)
    elector = None
    if leader_elect:
        elector = LeaderElector(api, lease_name, namespace, identity, lease_duration=lease_duration,
                                renew_deadline=lease_duration * 2 / 3, retry_period=max(lease_duration / 7, 0.2))
    sched = SecondaryScheduler(cluster, binder, opts.scheduler_name, elector, group_sizes=GroupSizes.from_api(api),
                               claim_settle=opts.claim_settle)
    informer.pod_listeners.append(sched.on_pod)
    informer.node_listeners.append(sched.on_nodes)
    informer.claim_listeners.append(sched.on_claim)
    informer.start()
    if not informer.wait_synced(opts.sync_timeout):
        raise TimeoutError(f"informer did not sync within {opts.sync_timeout}s")
    server = None
    if listen is not None:
        server = ExtenderServer(ExtenderLogic(cluster), listen[0], listen[1], ready=lambda: informer.synced,
                                collectors=_collectors(opts, cluster))
        server.start()
    if elector is not None:
        elector.start()
    sched.start()
    print(f"gpucluster scheduler {opts.scheduler_name} running as {identity}", flush=True)
    _wait_for_signal()
    sched.stop()
    if elector is not None:
        elector.stop()
    if server is not None:
        server.stop()
    informer.stop()
