"""The kube-scheduler extender (API v1, JSON over HTTP): ``/filter``, ``/prioritize``, ``/preempt``,
``/bind``, plus ``/healthz``, ``/readyz``, ``/metrics`` and ``/configz`` (the settings it decides with).

Like HAMi, the extender decides: ``/filter`` runs the scheduler core over the nodes kube-scheduler offers,
*assumes* the chosen node and devices, and answers with that one node (every other node is reported failed
with its reason, so an unschedulable pod's message counts our reasons: ``0/120 nodes are available: 120
InsufficientGPUMemory``). ``/bind`` writes the HAMi annotations and the Binding for the assumed decision.
Requests may arrive concurrently: deciding and assuming happen under the cluster's lock; an assumption that
is never bound expires after the TTL. Works with and without ``nodeCacheCapable``.

:class:`ExtenderLogic` is the pure part (dicts in, dicts out); :class:`ExtenderServer` serves it over HTTP.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpucluster.exposition import Exposition
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import KubeInputError, node_names, parse_pod
from gpucluster.model import Pod
from gpucluster.scheduler import Decision, Outcome
from gpucluster.scheduler.framework import Reason, Status

log = logging.getLogger(__name__)

MAX_EXTENDER_PRIORITY = 10
DRA_NOTE_KEY = "gpucluster"
"""Extra key of a filter answer (kube-scheduler ignores unknown keys) saying why every offered node passed."""
DRA_NOTE = ("the pod's devices come from ResourceClaims (DRA): kube-scheduler's DynamicResources plugin "
            "allocates them; gpucluster passes every offered node")

PodReader = Callable[[str, str], Mapping[str, Any]]
"""``(namespace, name) -> Pod JSON``: reads a pod the extender has not seen in /filter (after a restart)."""
Binder = Callable[[Decision], Status]


class ExtenderError(ValueError):
    """A request the extender cannot serve (HTTP 400)."""


class ExtenderLogic:
    def __init__(self, cluster: KubeCluster, read_pod: PodReader | None = None,
                 bind: Binder | None = None) -> None:
        self.cluster = cluster
        self.read_pod = read_pod
        self._bind = bind or (lambda d: self.cluster.scheduler.bind(d))  # noqa: PLW0108 - scheduler is rebuilt

    def _pod(self, args: Mapping[str, Any]) -> Pod:
        raw = args.get("pod") or args.get("Pod")
        if not isinstance(raw, Mapping):
            raise ExtenderError("pod: missing (ExtenderArgs.pod)")
        try:
            return parse_pod(raw, self.cluster.registry)
        except KubeInputError as exc:
            raise ExtenderError(str(exc)) from None

    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(args, Mapping):
            raise ExtenderError("body: must be ExtenderArgs (a JSON object)")
        pod = self._pod(args)
        try:
            names, items = node_names(args)
        except KubeInputError as exc:
            raise ExtenderError(str(exc)) from None
        raw = args.get("pod") or args.get("Pod")
        dra = isinstance(raw, Mapping) and self.cluster.uses_dra(raw)
        if dra:
            pod = self.cluster.without_dra_extended(pod)
        if not pod.device_requests and not pod.init_device_requests:
            out = self._filter_result(names, items, None, {}, {})
            if dra:
                out[DRA_NOTE_KEY] = DRA_NOTE
                log.info("pod %s: %s", pod.key, DRA_NOTE)
            return out
        decision = self.cluster.decide(pod, names)
        if decision.ok and decision.node is not None:
            keep = {decision.node}
            # the other offered nodes are simply left out (listing 999 "not chosen" reasons costs 50 KB a call)
            return self._filter_result(names, items, keep, {}, {})
        reasons = self.cluster.node_reasons(pod, names)
        index = self.cluster.state.node_index
        top = next(iter(sorted(decision.reasons.items(), key=lambda kv: -kv[1])), ("PolicyRejected", 0))[0]
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name in names:
            i = index.get(name)
            if i is None:
                failed[name] = "NodeUnknownToGPUCluster"
                continue
            code = int(reasons[i])
            reason = Reason(code) if code else Reason[top] if top in Reason.__members__ else Reason.PolicyRejected
            (unresolvable if reason.unresolvable else failed)[name] = reason.name
        out = self._filter_result(names, items, set(), failed, unresolvable)
        counts: dict[str, int] = {}
        for why in (*failed.values(), *unresolvable.values()):
            counts[why] = counts.get(why, 0) + 1
        parts = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        message = f"0/{len(names)} nodes are available: {parts}." if parts else decision.message()
        # kube-scheduler 1.20 drops failedNodes messages from its FitError ("0/120 nodes are available: .");
        # an error carries our counted reasons verbatim into its FailedScheduling event and PodScheduled
        # condition (the pod is retried with backoff, as for an unschedulable pod). Counted over the nodes
        # kube-scheduler offered; it has its own reasons for the others. An error skips kube-scheduler's
        # preemption, though: when evicting lower-priority pods could make room, answer with failed nodes
        # only, so kube-scheduler runs its PostFilter and calls /preempt.
        if not self._preemption_may_help(pod, failed):
            out["error"] = message
        return out

    def _preemption_may_help(self, pod: Pod, failed: Mapping[str, str]) -> bool:
        if pod.priority <= 0 or not failed:
            return False
        cluster = self.cluster
        with cluster.lock:
            for key, a in cluster.state.allocations.items():
                held = a.pod or (cluster.bound.get(key) or (None, ""))[0]  # bound pods: as the informer saw them
                if a.node in failed and held is not None and held.priority < pod.priority:
                    return True
            return False

    @staticmethod
    def _filter_result(names: list[str], items: list[Mapping[str, Any]] | None, keep: set[str] | None,
                       failed: dict[str, str], unresolvable: dict[str, str]) -> dict[str, Any]:
        """``keep``: the offered nodes that pass (None: all of them)."""
        out: dict[str, Any] = {"failedNodes": failed, "failedAndUnresolvableNodes": unresolvable, "error": ""}
        if keep is None and items is None:
            out["nodenames"] = names
        elif keep is None:
            out["nodes"] = {"apiVersion": "v1", "kind": "NodeList", "items": items}
        elif items is None:
            # one chosen node (or none) out of thousands offered: no pass over the offered names
            out["nodenames"] = [n for n in names if n in keep] if len(keep) > 1 else sorted(keep)
        else:
            out["nodes"] = {"apiVersion": "v1", "kind": "NodeList",
                            "items": [it for it, n in zip(items, names, strict=True) if n in keep]}
        return out

    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        pod = self._pod(args)
        try:
            names, _ = node_names(args)
        except KubeInputError as exc:
            raise ExtenderError(str(exc)) from None
        held = self.cluster.state.allocations.get(pod.key)
        chosen = held.node if held is not None else None
        return [{"host": n, "score": MAX_EXTENDER_PRIORITY if n == chosen else 0} for n in names]

    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        if not isinstance(args, Mapping):
            raise ExtenderError("body: must be ExtenderBindingArgs (a JSON object)")
        name = args.get("podName") or args.get("PodName")
        namespace = args.get("podNamespace") or args.get("PodNamespace") or "default"
        node = args.get("node") or args.get("Node")
        if not name or not node:
            raise ExtenderError("podName and node: required (ExtenderBindingArgs)")
        key = f"{namespace}/{name}"
        cluster = self.cluster
        with cluster.lock:
            held = cluster.state.allocations.get(key)
            if held is not None and held.node == str(node) and held.pod is not None:
                decision = Decision(held.pod, Outcome.SCHEDULED, node=held.node, allocation=held)
            else:
                decision = self._redecide(str(namespace), str(name), str(node))
                if not decision.ok:
                    return {"error": f"pod {key} no longer fits node {node}: {decision.message()}"}
                if decision.node != node:
                    return {"error": f"pod {key} is already bound to {decision.node}"}
        if not cluster.scheduler.cache.is_assumed(key):
            return {"error": ""}  # bound already (a retried bind)
        st = self._bind(decision)
        return {"error": "" if st.ok else "; ".join(st.reasons) or "bind failed"}

    def preempt(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """kube-scheduler's ``ExtenderPreemptionArgs`` -> ``ExtenderPreemptionResult``.

        For each candidate node, the victims kube-scheduler proposes (its own resources' view; our device
        resources are ``ignoredByScheduler`` to it) plus the fewest lower-priority pods whose devices must be
        freed so the preemptor fits by our accounting: every lower-priority pod is taken off, then each is
        given back, highest priority first, while the preemptor still fits (kube-scheduler's reprieve). A
        node where the preemptor would not fit even then is left out. Nothing changes in the state: the
        victims' devices are freed when their deletion reaches the informer. A node where the preemptor fits
        already (a victim's deletion reached us between /filter and /preempt) is kept with no victims, so
        kube-scheduler nominates it and retries the pod instead of parking it as unschedulable."""
        if not isinstance(args, Mapping):
            raise ExtenderError("body: must be ExtenderPreemptionArgs (a JSON object)")
        pod = self._pod(args)
        meta = args.get("NodeNameToMetaVictims") or args.get("nodeNameToMetaVictims")
        full = args.get("NodeNameToVictims") or args.get("nodeNameToVictims")
        proposed: dict[str, tuple[list[str], int]] = {}
        for source, uid_of in ((meta, _meta_uid), (full, _pod_uid)):
            if source is None:
                continue
            if not isinstance(source, Mapping):
                raise ExtenderError("NodeNameToVictims / NodeNameToMetaVictims: must be an object by node name")
            for node, victims in source.items():
                victims = victims or {}
                pods = victims.get("Pods") or victims.get("pods") or []
                if not isinstance(pods, list):
                    raise ExtenderError(f"victims of node {node}: Pods must be a list")
                uids = [str(uid_of(p)) for p in pods if isinstance(p, Mapping) and uid_of(p)]
                pdb = int(victims.get("NumPDBViolations") or victims.get("numPDBViolations") or 0)
                proposed[str(node)] = (uids, pdb)
        result: dict[str, Any] = {}
        for node, (uids, pdb) in proposed.items():
            chosen = self._victims(pod, node, uids)
            if chosen is not None:
                result[node] = {"Pods": [{"UID": uid} for uid in chosen], "NumPDBViolations": pdb}
        return {"NodeNameToMetaVictims": result}

    def _victims(self, pod: Pod, node: str, proposed_uids: list[str]) -> list[str] | None:
        """UIDs to evict on ``node`` so ``pod`` fits by our accounting: kube-scheduler's proposal plus the fewest
        lower-priority pods ([] when it fits already); None when it cannot fit there even so."""
        cluster = self.cluster
        with cluster.lock:
            state = cluster.state
            i = state.node_index.get(node)
            if i is None:
                return None
            holders: dict[str, tuple[str, Pod]] = {}  # uid -> (pod key, pod) of pods holding resources here
            for key in sorted(state.pods_on_node[i]):
                alloc = state.allocations[key]
                held = alloc.pod or (cluster.bound.get(key) or (None, ""))[0]
                if held is not None and held.uid:
                    holders[held.uid] = (key, held)
            proposed = [u for u in proposed_uids if u in holders]
            lower = sorted((u for u, (_, p) in holders.items() if p.priority < pod.priority and u not in proposed),
                           key=lambda u: (holders[u][1].priority, holders[u][0]))
            released = {}
            try:
                for u in (*proposed, *lower):
                    released[u] = state.release(holders[u][0])
                if not self._fits(pod, node):
                    return None
                extra = list(lower)
                for u in sorted(lower, key=lambda u: -holders[u][1].priority):  # reprieve, highest first
                    state.assign(released.pop(u))
                    if self._fits(pod, node):
                        extra.remove(u)
                    else:
                        released[u] = state.release(holders[u][0])
                return [*proposed_uids, *extra]
            finally:
                for alloc in released.values():
                    state.assign(alloc)

    def _fits(self, pod: Pod, node: str) -> bool:
        i = self.cluster.state.node_index[node]
        return int(self.cluster.node_reasons(pod, [node])[i]) == 0

    def _redecide(self, namespace: str, name: str, node: str) -> Decision:
        """A bind for a pod we hold no decision for (we restarted since /filter): decide on that node."""
        if self.read_pod is None:
            raise ExtenderError(f"no decision for pod {namespace}/{name} and no API access to read it")
        try:
            raw = self.read_pod(namespace, name)
            pod = parse_pod(raw, self.cluster.registry)
        except KubeInputError as exc:
            raise ExtenderError(str(exc)) from None
        return self.cluster.decide(pod, [node])


def _meta_uid(p: Mapping[str, Any]) -> Any:
    return p.get("UID") or p.get("uid")


def _pod_uid(p: Mapping[str, Any]) -> Any:
    return (p.get("metadata") or {}).get("uid")


# ---------------------------------------------------------------------------------------------- metrics
class _StateCollector(Collector):
    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster

    def collect(self) -> Any:
        s = self.cluster.summary()
        for key, doc in (
            ("nodes", "Nodes the scheduler knows"), ("devices", "Devices on known nodes"),
            ("pods", "Pods holding resources (bound or assumed)"), ("assumed", "Decisions assumed, not bound"),
            ("unaccounted", "Bound pods whose usage could not be read back"),
            ("stale_nodes", "Nodes whose device handshake is older than the timeout"),
        ):
            yield GaugeMetricFamily(f"gpucluster_scheduler_{key}", doc, value=s[key])
        yield GaugeMetricFamily("gpucluster_device_memory_used_mib", "Device memory allocated, MiB",
                                value=s["device_memory_used_mib"])
        yield GaugeMetricFamily("gpucluster_device_core_used_milli", "Device compute allocated, core milli",
                                value=s["core_used_milli"])


class ExtenderMetrics:
    """The extender's own families plus ``collectors`` (the caller's: allocation metrics, ours and HAMi's,
    come from ``gpucluster.monitoring``, a package this one does not import)."""

    def __init__(self, cluster: KubeCluster, collectors: Sequence[Collector] = ()) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter("gpucluster_extender_requests_total", "Extender requests by verb and result",
                                ["verb", "result"], registry=self.registry)
        self.latency = Histogram(
            "gpucluster_extender_request_duration_seconds", "Extender request handling time", ["verb"],
            buckets=(0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1, 5), registry=self.registry,
        )
        self.registry.register(_StateCollector(cluster))
        for c in collectors:
            self.registry.register(c)
        self.exposition = Exposition(self.registry)
        """What ``GET /metrics`` serves (:mod:`gpucluster.exposition`, the one exposition path)."""


# ---------------------------------------------------------------------------------------------- http
class Readiness:
    """What the process says on ``/healthz`` (liveness) and ``/readyz`` (readiness): ready, or waiting with the
    reason (e.g. the API server unreachable). Written by the thread that waits, read by the HTTP threads."""

    def __init__(self, reason: str = "starting", ready: Callable[[], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._reason = reason
        self._ready = False
        self._also = ready

    def waiting(self, reason: str) -> None:
        with self._lock:
            self._ready, self._reason = False, reason

    def set_ready(self) -> None:
        with self._lock:
            self._ready, self._reason = True, ""

    def check(self) -> tuple[bool, str]:
        """``(ready, reason)``; the reason is empty when ready."""
        with self._lock:
            ready, reason = self._ready, self._reason
        if ready and self._also is not None and not self._also():
            return False, "the informer is not in sync with the API server (relisting)"
        return ready, reason


def _always_ready() -> Readiness:
    r = Readiness()
    r.set_ready()
    return r


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        exc = sys.exc_info()[1]
        if isinstance(exc, ConnectionError):  # the client went away (kube-scheduler closes idle conns)
            log.debug("connection from %s closed: %s", client_address, exc)
            return
        log.exception("request from %s failed", client_address)


class ExtenderServer:
    """Serves :class:`ExtenderLogic` on ``host:port`` (threads; one per connection).

    ``/healthz`` is liveness: 200 while the process serves, its body ``ok`` or ``waiting: REASON``. ``/readyz`` is
    readiness: 200 ``ok``, or 503 ``not ready: REASON`` while :attr:`readiness` waits (for the API server, for the
    informer's first list); the extender verbs answer 503 with the same reason then, so kube-scheduler retries."""

    def __init__(self, logic: ExtenderLogic, host: str = "127.0.0.1", port: int = 0,
                 ready: Callable[[], bool] | None = None, collectors: Sequence[Collector] = (),
                 readiness: Readiness | None = None) -> None:
        self.logic = logic
        self.metrics = ExtenderMetrics(logic.cluster, collectors)
        if readiness is None:
            readiness = _always_ready() if ready is None else Readiness("the informer has not synced", ready)
            if ready is not None:
                readiness.set_ready()
        self.readiness = readiness
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in separate writes: no 40 ms ACK waits

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s " + format, self.address_string(), *args)

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/healthz":
                    ok, why = server.readiness.check()
                    self._send(200, b"ok" if ok else f"waiting: {why}".encode(), "text/plain; charset=utf-8")
                elif path == "/readyz":
                    ok, why = server.readiness.check()
                    self._send(200 if ok else 503, b"ok" if ok else f"not ready: {why}".encode(),
                               "text/plain; charset=utf-8")
                elif path == "/metrics":
                    exposition = server.metrics.exposition
                    self._send(200, exposition.render(), exposition.content_type)
                elif path == "/configz":
                    self._send(200, json.dumps(server.configz()).encode())
                else:
                    self._send(404, json.dumps({"error": f"no such path {path}"}).encode())

            def do_POST(self) -> None:
                server._post(self)

        self.httpd = _Server((host, port), Handler)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def configz(self) -> dict[str, Any]:
        """What ``GET /configz`` serves (as kube-scheduler's ``/configz`` does): the settings the running process
        decides with, so a deployment's configuration can be checked against what its pods really use."""
        profile = self.logic.cluster.profile
        return {"profile": {"schedulerName": profile.scheduler_name,
                            "percentageOfNodesToScore": profile.percentage_of_nodes_to_score,
                            "plugins": [p.name for p in profile.plugins]}}

    def _post(self, h: BaseHTTPRequestHandler) -> None:
        verb = h.path.split("?")[0].strip("/").split("/")[-1]
        handlers: dict[str, Callable[[Any], Any]] = {
            "filter": self.logic.filter, "prioritize": self.logic.prioritize, "bind": self.logic.bind,
            "preempt": self.logic.preempt,
        }
        t0 = time.perf_counter()
        code, result = 200, "ok"
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length > 0 else b""
        ready, why = self.readiness.check()
        body: Any
        try:
            fn = handlers.get(verb)
            if fn is not None and not ready:
                code, result, body = 503, "not_ready", {"error": f"not ready: {why}"}
            elif fn is None:
                code, result = 404, "not_found"
                body = {"error": f"no such verb {verb!r}; use filter, prioritize, preempt or bind"}
            else:
                try:
                    args = json.loads(raw or b"null")
                except json.JSONDecodeError as exc:
                    raise ExtenderError(f"body: not valid JSON: {exc.msg} at position {exc.pos}") from None
                if not isinstance(args, dict):
                    raise ExtenderError("body: must be a JSON object")
                body = fn(args)
                if isinstance(body, dict) and body.get("error"):
                    placed = body.get("nodenames") or (body.get("nodes") or {}).get("items")
                    result = "unschedulable" if verb == "filter" and not placed else "error"
        except ExtenderError as exc:
            log.warning("extender %s: bad request: %s", verb, exc)
            code, result, body = 400, "bad_request", {"error": str(exc)}
        except Exception as exc:
            log.exception("extender %s failed", verb)
            code, result, body = 500, "error", {"error": f"internal error: {exc}"}
        data = json.dumps(body).encode()
        h._send(code, data)  # type: ignore[attr-defined]
        self.metrics.requests.labels(verb if verb in handlers else "unknown", result).inc()
        if verb in handlers:
            self.metrics.latency.labels(verb).observe(time.perf_counter() - t0)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="extender-http", daemon=True)
        self._thread.start()

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
