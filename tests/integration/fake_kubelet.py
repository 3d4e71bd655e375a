"""A test stand-in for the kubelets of registered GPU nodes (test code only, never product code).

The test clusters have no kubelet: a pod bound to a registered node would stay ``Pending`` forever. The
:class:`FakeKubelet` watches the pods bound to its nodes and plays their kubelet through the API server:

* a bound ``Pending`` pod is marked ``Running`` (container ``running``), then after its run time ``Succeeded``
  (exit code 0) or ``Failed`` (its exit code, reason ``Error``), as the pod's first container says in its
  environment: ``FAKE_RUN_S`` (seconds, ``inf`` = until deleted; default: ``N`` of a ``sleep N`` command, else 1)
  and ``FAKE_EXIT_CODE`` (default 0), ``FAKE_LOG`` (lines it "prints"); a test that must not wait out a fixed run
  time runs its pods with ``FAKE_RUN_S=inf`` and ends each with :func:`finish` once it has seen what it checks
  while they run (the containers exit then, as the timer would have made them);
* a pod being deleted (a ``deletionTimestamp``) is removed at once, as a kubelet does once its containers stop;
* it serves the kubelet's ``/containerLogs`` endpoint over HTTPS on 127.0.0.1 (its port written into each
  node's ``status.daemonEndpoints``), so ``kubectl logs`` and the control plane's log reading go through the
  real API server.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import heapq
import http.server
import json
import math
import ssl
import subprocess
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubernetes import client, watch
from kubernetes.client import ApiException


def _stamp(when: float | None = None) -> str:
    return dt.datetime.fromtimestamp(time.time() if when is None else when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _env(pod: Mapping[str, Any]) -> dict[str, str]:
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    return {str(e.get("name")): str(e.get("value", "")) for e in containers[0].get("env") or [] if "value" in e}


def run_plan(pod: Mapping[str, Any]) -> tuple[float, int, list[str]]:
    """(seconds it runs, exit code, log lines) for a pod, from its first container (module docstring)."""
    env = _env(pod)
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    argv = [*(containers[0].get("command") or []), *(containers[0].get("args") or [])]
    run_s = 1.0
    if "FAKE_RUN_S" in env:
        run_s = float(env["FAKE_RUN_S"])
    elif len(argv) >= 2 and argv[0] == "sleep":
        with contextlib.suppress(ValueError):
            run_s = float(argv[1])
    code = int(env.get("FAKE_EXIT_CODE", "0"))
    name = (pod.get("metadata") or {}).get("name")
    lines = [f"fake kubelet: pod {name} runs {containers[0].get('image')} {' '.join(map(str, argv))}".rstrip()]
    lines += [x for x in env.get("FAKE_LOG", "").split("\\n") if x]
    return run_s, code, lines


def finish(core: Any, namespace: str, name: str, code: int = 0) -> bool:
    """The pod's containers exit now with ``code`` (``Succeeded`` for 0, else ``Failed``), as a kubelet reports
    it: what the stand-in does when a pod's run time is up, for a test to call on a pod started with
    ``FAKE_RUN_S=inf``. ``core``: a ``CoreV1Api`` (or an ``ApiClient``). False when the pod is gone or being
    deleted."""
    if not isinstance(core, client.CoreV1Api):
        core = client.CoreV1Api(core)
    try:
        pod = core.read_namespaced_pod(name, namespace)
    except ApiException:
        return False
    if pod.metadata.deletion_timestamp is not None:
        return False
    now = _stamp()
    statuses = [{"name": c.name, "image": c.image, "imageID": "", "ready": False, "restartCount": 0,
                 "started": False, "state": {"terminated": {
                     "exitCode": code, "reason": "Completed" if code == 0 else "Error",
                     "startedAt": now, "finishedAt": now}}} for c in pod.spec.containers]
    try:
        core.patch_namespaced_pod_status(name, namespace, {"status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": now}],
            "containerStatuses": statuses}})
    except ApiException:
        return False
    return True


class FakeKubelet:
    """Plays the kubelet of ``nodes`` (see the module docstring). ``start`` / ``stop``; a context manager."""

    def __init__(self, api: Any, nodes: Iterable[str], workdir: Path) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.nodes = set(nodes)
        self.workdir = workdir
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._timers: list[tuple[float, str, str, int]] = []
        """(when, namespace, name, exit code) of running pods' ends."""
        self._started: set[str] = set()
        self.logs: dict[str, list[str]] = {}
        """``namespace/name`` -> its log lines so far."""
        self.ran: list[str] = []
        """Pods it marked Running, in order."""
        self._threads: list[threading.Thread] = []
        self._watch: Any = None
        self._server: http.server.ThreadingHTTPServer | None = None
        self.port = 0

    # ------------------------------------------------------------------ lifecycle
    def __enter__(self) -> FakeKubelet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._serve_logs()
        for node in self.nodes:
            with contextlib.suppress(ApiException):
                self.core.patch_node_status(node, {"status": {"daemonEndpoints": {
                    "kubeletEndpoint": {"Port": self.port}}}})
        for target in (self._watch_pods, self._run_timers):
            t = threading.Thread(target=target, daemon=True, name=f"fake-kubelet-{target.__name__}")
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for t in self._threads:
            t.join(10)

    # ------------------------------------------------------------------ pods
    def _watch_pods(self) -> None:
        while not self._stop.is_set():
            try:
                resp = self.core.list_pod_for_all_namespaces(_preload_content=False)
                body = json.loads(resp.data)
                for pod in body.get("items") or []:
                    self._seen(pod)
                self._watch = watch.Watch()  # type: ignore[no-untyped-call]
                for event in self._watch.stream(self.core.list_pod_for_all_namespaces, deserialize=False,
                                                resource_version=body["metadata"]["resourceVersion"],
                                                timeout_seconds=60):
                    if self._stop.is_set():
                        return
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(event.get("raw_object") or event.get("object") or {})
            except Exception:
                if self._stop.wait(0.3):
                    return

    def _seen(self, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        if spec.get("nodeName") not in self.nodes:
            return
        namespace, name = str(meta.get("namespace")), str(meta.get("name"))
        key = f"{namespace}/{name}"
        if meta.get("deletionTimestamp"):
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            return
        phase = (pod.get("status") or {}).get("phase")
        with self._lock:
            if key in self._started or phase not in (None, "", "Pending"):
                return
            self._started.add(key)
        run_s, code, lines = run_plan(pod)
        containers = spec.get("containers") or [{}]
        now = time.time()
        statuses = [{"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": True,
                     "restartCount": 0, "started": True, "state": {"running": {"startedAt": _stamp(now)}}}
                    for c in containers]
        try:
            self.core.patch_namespaced_pod_status(name, namespace, {"status": {
                "phase": "Running", "startTime": _stamp(now), "hostIP": "127.0.0.1", "podIP": "127.0.0.1",
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": _stamp(now)}],
                "containerStatuses": statuses}})
        except ApiException:
            with self._lock:
                self._started.discard(key)
            return
        with self._lock:
            self.ran.append(key)
            self.logs[key] = list(lines)
            if math.isfinite(run_s):
                heapq.heappush(self._timers, (now + run_s, namespace, name, code))

    def _run_timers(self) -> None:
        while not self._stop.wait(0.1):
            due = []
            with self._lock:
                while self._timers and self._timers[0][0] <= time.time():
                    due.append(heapq.heappop(self._timers))
            for _, namespace, name, code in due:
                self._finish(namespace, name, code)

    def _finish(self, namespace: str, name: str, code: int) -> None:
        if finish(self.core, namespace, name, code):
            with self._lock:
                self.logs.setdefault(f"{namespace}/{name}", []).append(f"exit {code}")

    # ------------------------------------------------------------------ logs (the kubelet's endpoint)
    def _serve_logs(self) -> None:
        key, cert = self.workdir / "kubelet.key", self.workdir / "kubelet.crt"
        self.workdir.mkdir(parents=True, exist_ok=True)
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                        "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key),
                        "-out", str(cert)], check=True, capture_output=True)
        kubelet = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) < 3 or parts[0] != "containerLogs":
                    self.send_error(404)
                    return
                query = urllib.parse.parse_qs(url.query)
                follow = query.get("follow", ["false"])[0] == "true"
                tail = int(query["tailLines"][0]) if "tailLines" in query else None
                pod = f"{parts[1]}/{parts[2]}"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                sent = 0
                with kubelet._lock:
                    lines = list(kubelet.logs.get(pod, []))
                if tail is not None:
                    sent = max(len(lines) - tail, 0)
                while True:
                    with kubelet._lock:
                        lines = list(kubelet.logs.get(pod, []))
                    for line in lines[sent:]:
                        self.wfile.write((line + "\n").encode())
                    self.wfile.flush()
                    sent = len(lines)
                    if not follow or (lines and lines[-1].startswith("exit ")) or kubelet._stop.is_set():
                        return
                    time.sleep(0.1)

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        t = threading.Thread(target=server.serve_forever, daemon=True, name="fake-kubelet-logs")
        t.start()
        self._threads.append(t)

    def say(self, pod_key: str, line: str) -> None:
        """The pod prints ``line`` (followers of its log see it)."""
        with self._lock:
            self.logs.setdefault(pod_key, []).append(line)
