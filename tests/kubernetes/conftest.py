"""Fixtures that make threads race (fast thread switching, a rendezvous right before ``assume``), and a
``KubeRuntime`` on a stub informer (``new_runtime``: the test feeds the watch events)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster.kubernetes import backend
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.model import Allocation
from gpucluster.scheduler.cache import SchedulerCache

from .helpers import Rendezvous


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Let the interpreter switch threads every microsecond (the default is every 5 ms) during the test."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


@pytest.fixture
def rendezvous(monkeypatch: pytest.MonkeyPatch) -> Rendezvous:
    """A rendezvous between a decision (made from a snapshot) and its ``SchedulerCache.assume``: without the
    locks that serialise deciding and assuming, two concurrent decisions meet here, both made from the same
    snapshot."""
    meet = Rendezvous()
    original = SchedulerCache.assume

    def assume(self: SchedulerCache, allocation: Allocation) -> None:
        meet()
        original(self, allocation)

    monkeypatch.setattr(SchedulerCache, "assume", assume)
    return meet


class _Informer:
    """What KubeRuntime asks of its informer, doing nothing: the test feeds the events."""

    def __init__(self) -> None:
        self.pod_listeners: list[Any] = []
        self.pod_resync_listeners: list[Any] = []

    def watch_kind(self, *_a: Any, **_k: Any) -> None:
        return None

    def start(self) -> None:
        return None

    def wait_synced(self, _timeout: float) -> bool:
        return True

    def stop(self) -> None:
        return None


@pytest.fixture
def new_runtime(monkeypatch: pytest.MonkeyPatch) -> Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]:
    """Makes a KubeRuntime on the stub informer, following (no writes); closed after the block."""
    from kubernetes import client

    def build(_api: Any, reg: Any, opts: Any, **kw: Any) -> tuple[KubeCluster, None, _Informer]:
        cluster = KubeCluster(reg, opts.placement_policy, scheduler_name=opts.scheduler_name,
                              profile=kw.get("profile"), services=kw.get("services"))
        return cluster, None, _Informer()

    monkeypatch.setattr(backend, "api_client", lambda *_a, **_k: client.ApiClient(client.Configuration()))
    monkeypatch.setattr(backend.KubeRuntime, "_probe", lambda _self: "v1.37.2")
    monkeypatch.setattr(backend, "build", build)
    # no API server here: what the stub informer was given is all there is (a replica about to lead reads the
    # workloads and pods again from the API server, :meth:`KubeRuntime._relist`; nothing newer to read)
    monkeypatch.setattr(backend.KubeRuntime, "_relist", lambda _self: True)

    @contextlib.contextmanager
    def make() -> Iterator[backend.KubeRuntime]:
        rt = backend.KubeRuntime(Path("/nonexistent/kubeconfig"), identity="test")
        rt.elector = SimpleNamespace(is_leader=False, stop=lambda: None)  # type: ignore[assignment]
        rt._leading = False  # a follower: it mirrors the Jobs and writes nothing
        rt.engine.paused = True
        try:
            yield rt
        finally:
            rt.writer.shutdown(wait=False)
    return make
