"""Where embarrassingly parallel runs execute: this process, a local process pool, or a Ray cluster.

Every executor maps one function over independent items and yields each result as it completes (the caller
advances its progress bar and keeps, e.g., each finished sweep run on disk, which is what makes a sweep
resumable). Runs are seeded, so where a run executes does not change what it returns: a sweep on Ray writes
byte-identical files to a local one.

Ray (``pip install 'gpucluster[ray]'``) is imported only by :class:`RayExecutor`, i.e. only when the user asks
for it (``--ray-address`` or ``RAY_ADDRESS``). Its workers must be able to import ``gpucluster`` (the same
image or virtual environment as the driver, as a KubeRay cluster built from the project's image has); inputs
travel through Ray's object store, so workers need no shared file system, and results come back to the driver,
which alone writes files.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import socket
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class ExecutorError(RuntimeError):
    """The executor cannot run (Ray missing, cluster unreachable); ``str(err)`` says why and what to do."""


class Executor(Protocol):
    """Maps a function over items; yields results as they complete (any order)."""

    description: str
    """Where runs execute, for logs (``this process``, ``4 local processes``, ``Ray cluster at ...``)."""

    def map_unordered(self, fn: Callable[..., R], items: Sequence[T],
                      shared: tuple[Any, ...] = ()) -> Iterator[R]:
        """``fn(item, *shared)`` for every item; ``shared`` arguments are the same for every call and are sent
        to each worker once."""
        ...

    def close(self) -> None:
        """Release what the executor holds (pools, the Ray connection it opened)."""
        ...


class SerialExecutor:
    """Runs everything in this process, in order."""

    description = "this process"

    def map_unordered(self, fn: Callable[..., R], items: Sequence[T],
                      shared: tuple[Any, ...] = ()) -> Iterator[R]:
        for item in items:
            yield fn(item, *shared)

    def close(self) -> None:
        return None


_SHARED: tuple[Any, ...] = ()
"""What a forked pool's workers were given once (they inherit it; nothing is pickled per task)."""


def _call(job: tuple[Callable[..., R], Any]) -> R:
    fn, item = job
    return fn(item, *_SHARED)


class ProcessExecutor:
    """A pool of ``jobs`` forked local processes."""

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.description = f"{jobs} local processes"
        self._pool: Any = None

    def map_unordered(self, fn: Callable[..., R], items: Sequence[T],
                      shared: tuple[Any, ...] = ()) -> Iterator[R]:
        global _SHARED  # noqa: PLW0603 - read by the forked workers only
        self.close()
        _SHARED = shared  # kept until close(): a worker the pool replaces forks again
        self._pool = mp.get_context("fork").Pool(self.jobs)
        yield from self._pool.imap_unordered(_call, [(fn, item) for item in items])

    def close(self) -> None:
        global _SHARED  # noqa: PLW0603
        if self._pool is not None:
            self._pool.close()
            self._pool.join()
            self._pool = None
        _SHARED = ()


class RayExecutor:
    """Tasks on a Ray cluster (one CPU each); ``address`` as ``ray.init`` takes it (``HOST:PORT`` of the head's
    GCS, ``ray://HOST:10001`` for Ray Client, or ``auto``)."""

    def __init__(self, address: str) -> None:
        try:
            import ray
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ExecutorError("Ray is not installed: pip install 'gpucluster[ray]'") from exc
        self._ray = ray
        self.address = address
        self._owns = not ray.is_initialized()
        if self._owns:
            _check_reachable(address)
            try:
                ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False,
                         include_dashboard=False, configure_logging=True)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise ExecutorError(f"cannot connect to the Ray cluster at {address!r}: {exc}") from exc
        cpus = int(ray.cluster_resources().get("CPU", 0))  # type: ignore[no-untyped-call]
        self.description = f"Ray cluster at {address} ({cpus} CPUs)"

    def map_unordered(self, fn: Callable[..., R], items: Sequence[T],
                      shared: tuple[Any, ...] = ()) -> Iterator[R]:
        ray = self._ray
        remote = ray.remote(num_cpus=1, max_retries=2)(fn)
        refs = tuple(ray.put(x) for x in shared)  # once to the object store, not once per task
        pending = [remote.remote(item, *refs) for item in items]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])

    def close(self) -> None:
        if self._owns and self._ray.is_initialized():
            self._ray.shutdown()


CONNECT_TIMEOUT_S = 10.0


def _check_reachable(address: str) -> None:
    """Fail fast when a ``HOST:PORT`` head does not answer (``ray.init`` would retry for minutes)."""
    if "://" in address or address == "auto" or ":" not in address:
        return
    host, _, port = address.rpartition(":")
    try:
        port_no = int(port)
    except ValueError:
        raise ExecutorError(f"{address!r}: expected HOST:PORT, ray://HOST:PORT or auto") from None
    try:
        socket.create_connection((host.strip("[]"), port_no), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        raise ExecutorError(f"no Ray head answers at {address}: {exc.strerror or exc}") from None


def executor_for(jobs: int = 0, ray_address: str | None = None, tasks: int = 2) -> Executor:
    """Ray when an address is given; else a local pool of ``jobs`` processes (0 = all cores), or this process
    when one job (or at most one task) makes a pool pointless; never more processes than tasks."""
    if ray_address:
        return RayExecutor(ray_address)
    n = min(jobs or os.cpu_count() or 1, tasks)
    if n <= 1 or tasks <= 1:
        return SerialExecutor()
    return ProcessExecutor(n)
