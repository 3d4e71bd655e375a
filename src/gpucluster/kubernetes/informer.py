"""Informer-style list + watch of nodes and pods, and of DRA's DeviceClasses, ResourceSlices and
ResourceClaims (``resource.k8s.io/v1``), feeding a :class:`KubeCluster` (and listeners).

Each kind runs in its own thread: list (a full resync), then watch from the list's resourceVersion; on any
watch error (410 Gone, a dropped connection) it lists again. ``synced`` is set after the first list of every
kind. A server without ``resource.k8s.io/v1`` (before Kubernetes 1.34) answers 404: DRA is then taken as absent
and its kinds count as synced.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiClient, ApiException

from gpucluster.kubernetes.client import raw_list
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import pod_key

log = logging.getLogger(__name__)

PodListener = Callable[[str, Mapping[str, Any]], None]
"""``(event type, pod)``: ``SYNC`` for each pod of a (re)list, then ``ADDED`` / ``MODIFIED`` / ``DELETED``."""
ResyncListener = Callable[[set[str]], None]
"""After each (re)list of pods and its ``SYNC`` events: the keys (``namespace/name``) of every pod that exists.
A pod deleted while the watch was down gets no ``DELETED`` event; this is how listeners learn it is gone."""


class Informer:
    def __init__(self, api: ApiClient, cluster: KubeCluster, watch_timeout: int = 300) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.resource: Any = client.ResourceV1Api(api)
        self.cluster = cluster
        self.watch_timeout = watch_timeout
        self.pod_listeners: list[PodListener] = []
        self.pod_resync_listeners: list[ResyncListener] = []
        self.node_listeners: list[Callable[[], None]] = []
        self.claim_listeners: list[Callable[[str, Mapping[str, Any]], None]] = []
        """``(event type, claim)`` after the cluster took a ResourceClaim change in (``SYNC`` on a relist)."""
        self.dra_available: bool | None = None
        """Whether the server serves ``resource.k8s.io/v1`` (None until the first list answered)."""
        self._dra_synced = {kind: threading.Event() for kind in ("deviceclasses", "resourceslices", "resourceclaims")}
        self._stop = threading.Event()
        self._nodes_synced = threading.Event()
        self._pods_synced = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watches: list[Any] = []
        self._kinds: list[tuple[str, Callable[[], None], threading.Event]] = []
        """More kinds to list and watch (:meth:`watch_kind`): (name, loop, synced)."""
        self.served: dict[str, bool] = {}
        """Kinds of :meth:`watch_kind` -> whether the server served them at the last list."""

    @property
    def synced(self) -> bool:
        return (self._nodes_synced.is_set() and self._pods_synced.is_set()
                and all(e.is_set() for e in self._dra_synced.values())
                and all(done.is_set() for _, _, done in self._kinds))

    def wait_synced(self, timeout: float) -> bool:
        return (self._nodes_synced.wait(timeout) and self._pods_synced.wait(timeout)
                and all(e.wait(timeout) for e in self._dra_synced.values())
                and all(done.wait(timeout) for _, _, done in self._kinds))

    def watch_kind(self, name: str, list_call: Any, on_event: Callable[[str, Mapping[str, Any]], None],
                   on_list: Callable[[list[Mapping[str, Any]]], None], label_selector: str | None = None,
                   optional: bool = False, recheck_s: float = 5.0, field_selector: str | None = None) -> None:
        """Also list and watch another kind (before :meth:`start`): ``on_list`` gets every object of each (re)list
        (a full resync), ``on_event`` each ``ADDED``/``MODIFIED``/``DELETED`` after it. ``list_call`` is a
        client ``list_*_for_all_namespaces`` (or cluster-scoped ``list_*``) method.

        ``optional``: a kind the server may not serve (a custom resource whose CRD is not installed, or not
        yet): a list answered 404 counts as an empty list (``on_list([])`` once, the kind counts as synced) and
        the list is tried again every ``recheck_s`` seconds, so a CRD installed later is read from then on
        (``served[name]`` says which it is now). ``field_selector``: e.g. ``metadata.name=X`` for one object (a
        namespaced ``list_namespaced_*`` bound to its namespace as ``list_call``)."""
        done = threading.Event()
        extra = {"label_selector": label_selector} if label_selector else {}
        if field_selector:
            extra["field_selector"] = field_selector

        def relist() -> str:
            while True:
                try:
                    body = raw_list(list_call, **extra)
                    break
                except ApiException as exc:
                    if not optional or exc.status != 404:
                        raise
                if self.served.get(name, True):
                    log.info("the API server does not serve %s: none are read until it does (looked for again "
                             "every %g s)", name, recheck_s)
                    on_list([])
                self.served[name] = False
                done.set()
                if self._stop.wait(recheck_s):
                    raise RuntimeError(f"{name}: stopped")
            if self.served.get(name) is False:
                log.info("the API server serves %s now: reading them", name)
            self.served[name] = True
            on_list(list(body.get("items") or []))
            done.set()
            return str(body["metadata"]["resourceVersion"])

        def loop() -> None:
            self._loop(relist, on_event, list_call, name, **extra)

        self._kinds.append((name, loop, done))

    def start(self) -> None:
        targets = [(self._run_nodes, "informer-nodes"), (self._run_pods, "informer-pods"),
                   (self._run_classes, "informer-deviceclasses"), (self._run_slices, "informer-resourceslices"),
                   (self._run_claims, "informer-resourceclaims"),
                   *((loop, f"informer-{name}") for name, loop, _ in self._kinds)]
        for target, name in targets:
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for w in list(self._watches):
            w.stop()

    # ------------------------------------------------------------------------------------------ loops
    def _loop(self, relist: Callable[[], str], on_event: Callable[[str, dict[str, Any]], None],
              list_call: Any, what: str, **extra: Any) -> None:
        while not self._stop.is_set():
            try:
                version = relist()
                # the events are not deserialised (dicts); naming a return type keeps the client from looking up a
                # model class by name, which it gets wrong for resource.k8s.io/v1 (ResourceV1ResourceClaim)
                w: Any = watch.Watch(return_type=dict)  # type: ignore[no-untyped-call]
                self._watches.append(w)
                for event in w.stream(list_call, resource_version=version, timeout_seconds=self.watch_timeout,
                                      deserialize=False, allow_watch_bookmarks=True, **extra):
                    if self._stop.is_set():
                        break
                    kind = event.get("type")
                    obj = event.get("raw_object") or event.get("object") or {}
                    if kind == "ERROR":
                        raise RuntimeError(f"watch {what}: {obj.get('message', obj)}")
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        on_event(str(kind), obj)
                self._watches.remove(w)
            except Exception as exc:
                if self._stop.is_set():
                    return
                log.info("watch of %s restarts after: %s", what, exc)
                self._stop.wait(0.5)

    def _run_nodes(self) -> None:
        def relist() -> str:
            body = raw_list(self.core.list_node)
            self.cluster.set_nodes(body.get("items") or [])
            self._nodes_synced.set()
            for cb in self.node_listeners:
                cb()
            return str(body["metadata"]["resourceVersion"])

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if kind == "DELETED":
                self.cluster.delete_node(str(obj["metadata"]["name"]))
            else:
                self.cluster.apply_node(obj)
            for cb in self.node_listeners:
                cb()

        self._loop(relist, on_event, self.core.list_node, "nodes")

    # ------------------------------------------------------------------------------------------ DRA
    def _dra_loop(self, kind: str, list_call: Any, put_all: Callable[[list[dict[str, Any]]], None],
                  put: Callable[[dict[str, Any]], None], delete: Callable[[dict[str, Any]], None],
                  listeners: list[Callable[[str, Mapping[str, Any]], None]] | None = None) -> None:
        synced = self._dra_synced[kind]

        def relist() -> str:
            if kind != "deviceclasses":
                self._dra_synced["deviceclasses"].wait()
            if kind == "resourceclaims":
                self._dra_synced["resourceslices"].wait()
                self._nodes_synced.wait()
            try:
                body = raw_list(list_call)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                if self.dra_available is not False:
                    log.info("the API server does not serve %s/%s: no DRA objects are read", "resource.k8s.io", "v1")
                self.dra_available = False
                synced.set()
                self._stop.wait(300)  # look again later (a server upgraded in place)
                raise RuntimeError(f"{kind}: resource.k8s.io/v1 is not served") from None
            self.dra_available = True
            items = body.get("items") or []
            put_all(items)
            for obj in items:
                for cb in listeners or ():
                    cb("SYNC", obj)
            synced.set()
            return str(body["metadata"]["resourceVersion"])

        def on_event(event: str, obj: dict[str, Any]) -> None:
            if event == "DELETED":
                delete(obj)
            else:
                put(obj)
            for cb in listeners or ():
                cb(event, obj)

        self._loop(relist, on_event, list_call, kind)

    def _run_classes(self) -> None:
        c = self.cluster
        self._dra_loop("deviceclasses", self.resource.list_device_class, c.set_classes, c.apply_class,
                       lambda o: c.delete_class(str(o["metadata"]["name"])))

    def _run_slices(self) -> None:
        c = self.cluster

        def put_all(items: list[dict[str, Any]]) -> None:
            self._nodes_synced.wait()
            c.set_slices(items)
            for cb in self.node_listeners:
                cb()

        def put(obj: dict[str, Any]) -> None:
            c.apply_slice(obj)
            for cb in self.node_listeners:
                cb()

        self._dra_loop("resourceslices", self.resource.list_resource_slice, put_all, put,
                       lambda o: c.delete_slice(str(o["metadata"]["name"])))

    def _run_claims(self) -> None:
        c = self.cluster
        self._dra_loop("resourceclaims", self.resource.list_resource_claim_for_all_namespaces, c.set_claims,
                       c.apply_claim, lambda o: c.delete_claim(pod_key(o)), self.claim_listeners)

    def _run_pods(self) -> None:
        def relist() -> str:
            self._nodes_synced.wait()
            body = raw_list(self.core.list_pod_for_all_namespaces)
            items = body.get("items") or []
            self.cluster.set_pods(items)
            for obj in items:
                for cb in self.pod_listeners:
                    cb("SYNC", obj)
            if self.pod_resync_listeners:
                keys = {pod_key(obj) for obj in items}
                for resync in self.pod_resync_listeners:
                    resync(keys)
            self._pods_synced.set()
            return str(body["metadata"]["resourceVersion"])

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if kind == "DELETED":
                self.cluster.delete_pod(pod_key(obj))
            else:
                self.cluster.apply_pod(obj)
            for cb in self.pod_listeners:
                cb(kind, obj)

        self._loop(relist, on_event, self.core.list_pod_for_all_namespaces, "pods")
