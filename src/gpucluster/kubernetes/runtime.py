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
from kubernetes.client import ApiClient, ApiException
from prometheus_client.registry import Collector

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.client import raw_get
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.extender import ExtenderLogic, ExtenderServer, Readiness
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
    percentage_of_nodes_to_score: int | None = None
    """Secondary scheduler: kube-scheduler's ``percentageOfNodesToScore`` for our own decisions (the profile's
    ``percentage_of_nodes_to_score``); None: the profile's (100, every feasible node)."""
    collectors: Callable[[KubeCluster], Sequence[Collector]] | None = None
    """More metrics for ``/metrics`` over the cluster (the CLI passes the allocation collectors, ours and
    HAMi's, from ``gpucluster.monitoring``)."""


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {listen!r}: expected HOST:PORT, e.g. 127.0.0.1:8888")
    return host or "127.0.0.1", int(port)


def _wait_for_signal(done: threading.Event | None = None) -> None:
    done = done or threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    done.wait()


BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 30.0
"""Waiting for the API server: the first retry after 1 s, then twice as long each time, never more than 30 s."""


def _why(exc: BaseException) -> str:
    """The root cause of a failed request, in words (``connection refused``, ``401 Unauthorized`` ...)."""
    if isinstance(exc, ApiException):
        return f"answered {exc.status} {exc.reason}".strip()
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, OSError) and cur.strerror:
            return str(cur.strerror).lower()
        nxt = getattr(cur, "reason", None)
        cur = nxt if isinstance(nxt, BaseException) else (cur.__cause__ or cur.__context__)
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text[:200]


def wait_for_api(api: ApiClient, readiness: Readiness, stop: threading.Event,
                 first: float = BACKOFF_FIRST_S, cap: float = BACKOFF_CAP_S, timeout: float = 5.0) -> bool:
    """Ask the API server for its version until it answers, backing off ``first``, 2x, 4x ... up to ``cap``
    seconds; each failure sets ``readiness`` to the reason and is logged once. False when ``stop`` is set."""
    host = api.configuration.host
    version = client.VersionApi(api)
    delay = first
    while not stop.is_set():
        try:
            version.get_code(_request_timeout=timeout)
            return True
        except Exception as exc:
            reason = f"API server {host} unreachable: {_why(exc)}, retrying in {delay:g}s"
            readiness.waiting(reason)
            log.warning("%s", reason)
        if stop.wait(delay):
            return False
        delay = min(delay * 2, cap)
    return False


def _become_ready(api: ApiClient, informer: Informer, readiness: Readiness, stop: threading.Event,
                  opts: RunOptions, then: Callable[[], None] | None = None) -> None:
    """Wait for the API server, start the informer, wait for its first list, mark ready, run ``then``."""
    if not wait_for_api(api, readiness, stop):
        return
    informer.start()
    readiness.waiting(f"API server {api.configuration.host} reachable; listing nodes and pods")
    waited = 0.0
    while not informer.wait_synced(min(opts.sync_timeout, 5.0)):
        if stop.is_set():
            return
        waited += min(opts.sync_timeout, 5.0)
        if waited >= opts.sync_timeout:
            reason = f"the informer has not synced after {waited:g}s; still listing"
            readiness.waiting(reason)
            log.warning("%s", reason)
            waited = 0.0
    readiness.set_ready()
    log.info("ready: the informer is in sync with %s", api.configuration.host)
    if then is not None:
        then()


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
                          services=services, percentage_of_nodes_to_score=opts.percentage_of_nodes_to_score)
    binder.cluster = cluster
    informer = Informer(api, cluster)
    return cluster, binder, informer


@dataclass(slots=True)
class Running:
    """A started extender (or scheduler's HTTP side): stop it with :meth:`stop`."""

    server: ExtenderServer | None
    informer: Informer
    stopping: threading.Event
    waiter: threading.Thread

    def stop(self) -> None:
        self.stopping.set()
        self.waiter.join(10)
        if self.server is not None:
            self.server.stop()
        self.informer.stop()


def start_extender(api: ApiClient, registry: VendorRegistry, host: str, port: int,
                   opts: RunOptions) -> Running:
    """Serve at once (``/healthz``, ``/readyz`` say what it waits for) and, in a thread, wait for the API server
    (bounded exponential backoff), start the informer and turn ready once it has synced."""
    cluster, _binder, informer = build(api, registry, opts, identity=f"extender@{socket.gethostname()}")
    core = client.CoreV1Api(api)

    def read_pod(namespace: str, name: str) -> Mapping[str, Any]:
        return raw_get(core.read_namespaced_pod, name, namespace)

    readiness = Readiness(f"waiting for the API server {api.configuration.host}", ready=lambda: informer.synced)
    server = ExtenderServer(ExtenderLogic(cluster, read_pod), host, port, readiness=readiness,
                            collectors=_collectors(opts, cluster))
    server.start()
    log.info("extender listening on %s:%d", host, server.port)
    stopping = threading.Event()
    waiter = threading.Thread(target=_become_ready, args=(api, informer, readiness, stopping, opts),
                              name="extender-wait-api", daemon=True)
    waiter.start()
    return Running(server, informer, stopping, waiter)


def run_extender(api: ApiClient, registry: VendorRegistry, host: str, port: int, opts: RunOptions) -> None:
    running = start_extender(api, registry, host, port, opts)
    assert running.server is not None
    print(f"gpucluster extender listening on http://{host}:{running.server.port}", flush=True)
    _wait_for_signal()
    running.stop()


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
    readiness = Readiness(f"waiting for the API server {api.configuration.host}", ready=lambda: informer.synced)
    server = None
    if listen is not None:  # answers /healthz and /readyz while it waits for the API server
        server = ExtenderServer(ExtenderLogic(cluster), listen[0], listen[1], readiness=readiness,
                                collectors=_collectors(opts, cluster))
        server.start()
    started: list[str] = []

    def schedule() -> None:
        if elector is not None:
            elector.start()
        sched.start()
        started.append("yes")

    stopping = threading.Event()
    waiter = threading.Thread(target=_become_ready, args=(api, informer, readiness, stopping, opts, schedule),
                              name="scheduler-wait-api", daemon=True)
    waiter.start()
    print(f"gpucluster scheduler {opts.scheduler_name} running as {identity}", flush=True)
    _wait_for_signal()
    stopping.set()
    waiter.join(10)
    if started:
        sched.stop()
        if elector is not None:
            elector.stop()
    if server is not None:
        server.stop()
    informer.stop()
