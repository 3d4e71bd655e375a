"""A fast Prometheus text-format (0.0.4) renderer and the HTTP server the agent uses.

prometheus_client's ``generate_latest`` validates and escapes every label of every sample on every scrape;
the agent's label sets barely change between scrapes (one set per device, shared by ~30 families), so this
renderer escapes each distinct label set once and reuses the text. Output is the same format (checked
against prometheus_client's parser in the tests).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


class TextRenderer:
    """Renders a registry; keeps the escaped text of label sets seen before (bounded)."""

    _TYPES: ClassVar[dict[str, str]] = {
        "counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary",
        "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped",
    }

    def __init__(self, max_cached: int = 200_000) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}
        self.max_cached = max_cached

    def _label_text(self, labels: Mapping[str, str]) -> str:
        if not labels:
            return ""
        key = tuple(labels.items())
        text = self._labels.get(key)
        if text is None:
            if len(self._labels) >= self.max_cached:
                self._labels.clear()
            inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in key)
            text = self._labels[key] = "{" + inner + "}"
        return text

    def render(self, registry: CollectorRegistry) -> bytes:
        out: list[str] = []
        for fam in registry.collect():
            name = fam.name
            typ = self._TYPES.get(fam.type, "untyped")
            if fam.type == "counter" and not any(s.name == name for s in fam.samples):
                name = f"{name}_total"  # prometheus_client's counters; dcgm-exporter's keep their bare name
            out.append(f"# HELP {name} {_escape_help(fam.documentation)}\n# TYPE {name} {typ}\n")
            if fam.type == "info":
                out.extend(f"{s.name}{self._label_text(s.labels)} {_value(s.value)}\n" for s in fam.samples)
                continue
            skip_created = fam.type in ("counter", "histogram", "summary")
            for s in fam.samples:
                if skip_created and s.name.endswith("_created"):
                    continue  # prometheus_client's creation timestamps: not needed in the 0.0.4 format
                out.append(f"{s.name}{self._label_text(s.labels)} {_value(s.value)}\n")
        return "".join(out).encode()


class MetricsServer:
    """``GET /metrics`` on ``host:port`` (``port=0`` picks a free one) in daemon threads."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0) -> None:
        renderer = TextRenderer()
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path not in ("/metrics", "/"):
                    self.send_error(404, "try /metrics")
                    return
                if path == "/":
                    body = b'<html><body><a href="/metrics">metrics</a></body></html>'
                    ctype = "text/html"
                else:
                    with lock:  # the renderer's cache is shared between request threads
                        body = renderer.render(registry)
                    ctype = CONTENT_TYPE
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-server", daemon=True)
        self._thread.start()
        self.host = host
        self.port = int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)
