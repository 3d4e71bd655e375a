"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go does it.

A candidate acquires the Lease when it is free or its holder has not renewed it for ``lease_duration``
seconds *as observed locally* (no clock comparison between machines), renews it every ``retry_period``,
and gives it up (holder cleared) when stopped. Updates carry the resourceVersion, so two candidates can
never both win the same term: the loser gets 409 Conflict. ``is_leader`` turns False as soon as a renewal
has failed for ``renew_deadline`` seconds, before anyone else may take over.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

log = logging.getLogger(__name__)


def _now_micro() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        api: ApiClient,
        name: str,
        namespace: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("leader election: need retry_period < renew_deadline < lease_duration")
        self.coord = client.CoordinationV1Api(api)
        self.name = name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self._observed: tuple[str, str] | None = None
        """(holder, renewTime) last seen, and when it was first seen (below)."""
        self._observed_at = 0.0
        self._renewed_at = -1e18
        self._leader = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.changes: list[tuple[float, bool]] = []

    @property
    def is_leader(self) -> bool:
        return self._leader and self.clock() - self._renewed_at < self.renew_deadline

    def _set(self, leader: bool) -> None:
        if leader != self._leader:
            log.info("%s %s leadership of lease %s/%s", self.identity, "acquired" if leader else "lost",
                     self.namespace, self.name)
            self.changes.append((time.time(), leader))
        self._leader = leader

    def _spec(self) -> client.V1LeaseSpec:
        return client.V1LeaseSpec(holder_identity=self.identity, lease_duration_seconds=int(self.lease_duration),
                                  renew_time=_now_micro(), acquire_time=_now_micro())

    def try_acquire_or_renew(self) -> bool:
        """One round; returns whether this candidate holds the lease afterwards."""
        now = self.clock()
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace),
                                  spec=self._spec())
            try:
                self.coord.create_namespaced_lease(self.namespace, body)
            except ApiException as exc2:
                if exc2.status == 409:
                    return False
                raise
            self._renewed_at = now
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity or ""
        record = (holder, str(spec.renew_time))
        if record != self._observed:
            self._observed, self._observed_at = record, now
        duration = float(spec.lease_duration_seconds or self.lease_duration)
        if holder and holder != self.identity and now - self._observed_at < duration:
            return False  # someone else holds a live lease
        new = self._spec()
        if holder == self.identity and spec.acquire_time:
            new.acquire_time = spec.acquire_time
        lease.spec = new
        try:
            self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            if exc.status == 409:
                return False
            raise
        self._renewed_at = now
        return True

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self._set(self.try_acquire_or_renew())
            except Exception as exc:
                log.warning("leader election round failed: %s", exc)
                if self.clock() - self._renewed_at >= self.renew_deadline:
                    self._set(False)
            self._stop.wait(self.retry_period)
        self._release()

    def _release(self) -> None:
        if not self._leader:
            return
        try:
            lease = self.coord.read_namespaced_lease(self.name, self.namespace)
            if lease.spec and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = ""
                lease.spec.lease_duration_seconds = 1
                self.coord.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as exc:
            log.warning("lease not released: %s %s", exc.status, exc.reason)
        self._set(False)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="leader-election", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
