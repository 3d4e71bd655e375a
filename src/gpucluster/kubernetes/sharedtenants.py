"""The tenants' settings shared by the replicas of ``gpucluster up --kubeconfig``: one ConfigMap.

``<lease-name>-tenants`` in the lease's namespace holds one data key per tenant (its name) whose value is the JSON
of :class:`gpucluster.model.tenants.TenantSettings`: quota, weight, highest priority, limit of queued jobs. No
token is in it (tokens stay in each replica's store, as SHA-256 hashes).

* **Reads.** Every replica watches it (the informer) and keeps the newest read (:meth:`SharedTenants.on_event`);
  the service applies that read to its store before its next scheduling pass (``model.tenants.apply_shared``).
  A replica about to lead reads it again from the server (:meth:`SharedTenants.read_now`) and leads only once
  that read is applied (``KubeRuntime._leadership``).
* **Writes** (``POST``/``PATCH /api/v1/tenants`` on any replica, leader or not; :meth:`SharedTenants.publish`):
  read, change the one key, replace with the read's ``resourceVersion``; a 409 (another replica wrote meanwhile)
  reads again and retries. A ``PATCH`` changes only the fields it names, over the value just read (so two replicas
  changing different fields of one tenant at once keep both changes). A missing ConfigMap is created from the
  replica's own tenants plus the change.
* **Errors.** A key that cannot be read keeps its tenant's last good settings; it is logged (error) and reported
  once per key and reason while it lasts (again if it comes back; each deletion) as a Warning
  ``TenancyUnreadable`` Event on the ConfigMap and in the overview
  (``kubernetes.tenancy.errors``). A deleted ConfigMap keeps the last good state everywhere (reported the same
  way) until a replica writes it again.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Collection, Mapping
from typing import Any

from kubernetes.client import ApiException

from gpucluster.model.tenants import SharedTenancy, TenantSettings, encode_all, newer, patched, read_shared

log = logging.getLogger(__name__)

SUFFIX = "-tenants"
"""The ConfigMap is named after the Lease: ``<lease-name>-tenants``."""
MANAGED = {"app.kubernetes.io/managed-by": "gpucluster", "gpucluster.io/shared": "tenants"}
PUBLISH_TRIES = 8
DELETED = "(object)"
"""The error key of a deleted ConfigMap."""


class TenancyWriteError(RuntimeError):
    """The shared object could not be written (the API server refused or did not answer); nothing changed."""


class SharedTenants:
    """The shared ConfigMap of one control plane: its newest read, what was applied, and its writes. Thread-safe
    (the informer's thread reads, the event loop takes, a worker thread writes)."""

    def __init__(self, core: Any, namespace: str, name: str,
                 event: Callable[[str, str, str], None] | None = None) -> None:
        self.core = core
        self.namespace = namespace
        self.name = name
        self._event = event
        """(uid, reason, message): a Warning Event on the ConfigMap."""
        self._lock = threading.Lock()
        self.latest: SharedTenancy | None = None
        """The newest read (watch, list, our own write, a fresh read)."""
        self.applied: str | None = None
        """The resourceVersion the service applied last."""
        self.errors: dict[str, str] = {}
        """Key -> why it cannot be read, as of the newest read (or the object's deletion)."""
        self._reported: set[tuple[str, str]] = set()
        self._gone: set[str] = set()
        """Uids of objects deleted or replaced by a newer one: their reads are stale."""

    @property
    def where(self) -> str:
        return f"ConfigMap {self.namespace}/{self.name}"

    # ------------------------------------------------------------------ reads
    def _read(self, obj: Mapping[str, Any]) -> SharedTenancy:
        meta = obj.get("metadata") or {}
        return read_shared(obj.get("data") or {}, str(meta.get("resourceVersion") or ""), str(meta.get("uid") or ""))

    def _take(self, read: SharedTenancy) -> None:
        """Keep ``read`` when it is newer than the newest one (caller holds the lock). A read of another object
        (another uid) is newer, unless that object is gone: a ConfigMap's name holds one object at a time, so the
        object a newer one replaced, or one seen deleted, never comes back (a late answer to a write of the
        deleted object, or a watch event still in flight, would otherwise bring the old settings back)."""
        if read.uid and read.uid in self._gone:
            return
        if self.latest is None or read.uid != self.latest.uid or newer(read.version, self.latest.version):
            if self.latest is not None and self.latest.uid and read.uid != self.latest.uid:
                self._gone.add(self.latest.uid)
            self.latest = read
            self.errors = dict(read.bad)

    def on_event(self, kind: str, obj: Mapping[str, Any]) -> None:
        """A watch event of the ConfigMap (the informer's thread)."""
        if str((obj.get("metadata") or {}).get("name") or "") != self.name:
            return
        with self._lock:
            if kind == "DELETED":
                uid = str((obj.get("metadata") or {}).get("uid") or "") or (
                    self.latest.uid if self.latest is not None else "")
                if uid:
                    self._gone.add(uid)
                self.errors = {DELETED: f"{self.where} was deleted: every replica keeps the last good tenant "
                                        "settings until one writes them again (a tenant created or changed)"}
                return
            self._take(self._read(obj))

    def on_list(self, items: list[Mapping[str, Any]]) -> None:
        mine = [obj for obj in items if str((obj.get("metadata") or {}).get("name") or "") == self.name]
        for obj in mine:
            self.on_event("ADDED", obj)
        if not mine and self.latest is not None:  # deleted while the watch was down
            self.on_event("DELETED", {"metadata": {"name": self.name}})

    def read_now(self) -> SharedTenancy | None:
        """Read the ConfigMap from the server now (a quorum read), keep it when newer; None when it does not
        exist. Raises ApiException for any other answer."""
        try:
            obj = self.core.read_namespaced_config_map(self.name, self.namespace, _preload_content=False,
                                                       _request_timeout=(5.0, 10.0))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        read = self._read(json.loads(obj.data))
        with self._lock:
            self._take(read)
        return read

    def pending(self) -> SharedTenancy | None:
        """The newest read not applied yet (None: nothing new). Unreadable keys are reported here, once each
        while it lasts (a breakage mended, then back, is reported again; so is each deletion)."""
        with self._lock:
            read = self.latest
            self._reported &= set(self.errors.items())
            fresh = [(k, why) for k, why in self.errors.items() if (k, why) not in self._reported]
            self._reported.update(fresh)
        for key, why in fresh:
            message = (f"{self.where}: key {key!r} cannot be read: {why}; tenant {key} keeps its last good "
                       "settings" if key != DELETED else why)
            log.error("shared tenancy: %s", message)
            if self._event is not None:
                self._event(read.uid if read is not None else "", "TenancyUnreadable", message)
        if read is None or read.version == self.applied:
            return None
        return read

    def mark_applied(self, version: str) -> None:
        with self._lock:
            self.applied = version

    def needs_apply(self, read: SharedTenancy | None) -> bool:
        """Whether ``read`` (a fresh read) holds what was not applied yet."""
        with self._lock:
            return read is not None and read.version != self.applied

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {"object": f"{self.namespace}/{self.name}", "applied_version": self.applied,
                    "tenants": 0 if self.latest is None else len(self.latest.tenants), "errors": dict(self.errors)}

    # ------------------------------------------------------------------ writes
    def publish(self, changes: Mapping[str, TenantSettings], local: Mapping[str, TenantSettings],
                *, only_missing: bool = False, fields: Collection[str] | None = None) -> SharedTenancy:
        """Write ``changes`` (tenant -> settings) into the ConfigMap, optimistically (retried on 409); a missing
        one is created from ``local`` (the replica's own tenants, defaults left out) plus ``changes``.
        ``only_missing``: add only the tenants it does not name yet (a replica seeding its tenants), leaving the
        others as they are. ``fields``: change only these fields of each tenant, over the value the read just now
        holds (``model.tenants.patched``; each retry merges again). Returns the read of what was written. Raises
        :class:`TenancyWriteError`."""
        last = ""
        for _ in range(PUBLISH_TRIES):
            try:
                raw = self.core.read_namespaced_config_map(self.name, self.namespace, _preload_content=False,
                                                           _request_timeout=(5.0, 10.0))
                obj: dict[str, Any] | None = json.loads(raw.data)
            except ApiException as exc:
                if exc.status != 404:
                    raise TenancyWriteError(f"{self.where} could not be read: {exc.status} {exc.reason}") from None
                obj = None
            except Exception as exc:
                raise TenancyWriteError(f"{self.where} could not be read: {exc}") from None
            try:
                if obj is None:
                    body = {"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": self.name, "namespace": self.namespace, "labels": dict(MANAGED)},
                            "data": encode_all({**{n: s for n, s in local.items() if s != TenantSettings()},
                                                **changes})}
                    out = self.core.create_namespaced_config_map(self.namespace, body, _preload_content=False,
                                                                 _request_timeout=(5.0, 10.0))
                else:
                    data = dict(obj.get("data") or {})
                    if fields is not None:
                        new = encode_all({n: patched(data.get(n), s, fields) for n, s in changes.items()})
                    else:
                        new = encode_all(changes)
                    if only_missing:
                        new = {k: v for k, v in new.items() if k not in data}
                        if not new:
                            return self._kept(obj)
                    data.update(new)
                    obj["data"] = data
                    out = self.core.replace_namespaced_config_map(self.name, self.namespace, obj,
                                                                  _preload_content=False,
                                                                  _request_timeout=(5.0, 10.0))
            except ApiException as exc:
                if exc.status == 409:  # another replica wrote (or created) it meanwhile: read again
                    last = f"{exc.status} {exc.reason}"
                    continue
                raise TenancyWriteError(f"{self.where} could not be written: {exc.status} {exc.reason}") from None
            except Exception as exc:
                raise TenancyWriteError(f"{self.where} could not be written: {exc}") from None
            return self._kept(json.loads(out.data))
        raise TenancyWriteError(f"{self.where} could not be written: {PUBLISH_TRIES} conflicting writes in a row "
                                f"({last}); try again")

    def _kept(self, obj: Mapping[str, Any]) -> SharedTenancy:
        read = self._read(obj)
        with self._lock:
            self._take(read)
        return read


def configmap_name(lease_name: str) -> str:
    return f"{lease_name}{SUFFIX}"


__all__ = ["DELETED", "SharedTenants", "TenancyWriteError", "configmap_name"]
