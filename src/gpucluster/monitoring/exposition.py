"""The one Prometheus exposition path: every ``/metrics`` we serve renders a ``prometheus_client`` registry here.

* :class:`TextRenderer`: the text format (0.0.4). prometheus_client's ``generate_latest`` validates and escapes
  every label of every sample on every scrape; the agent's label sets barely change between scrapes (one set per
  device, shared by ~30 families), so this renderer escapes each distinct label set once and reuses the text.
  Output is the same format (checked against prometheus_client's parser in the tests).
* :class:`Exposition`: a registry and its renderer, safe to call from several request threads; what the control
  plane's ``GET /metrics`` (``service.api.meta``) and the agent serve.
* :func:`metrics_app`: ``GET /metrics`` (and a link at ``/``) as a FastAPI application, the server stack of the
  rest of the project; :class:`MetricsServer` runs it under uvicorn in a thread (the monitoring agent,
  ``gpucluster monitor agent``, and tests).
"""

from __future__ import annotations

import math
import socket
import threading
import time
from collections.abc import Mapping
from typing import ClassVar

import uvicorn
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
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


class Exposition:
    """A registry and the renderer of its text: :meth:`render` is the body of ``GET /metrics`` (the renderer's
    label cache is shared, so calls are serialised)."""

    content_type = CONTENT_TYPE

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._renderer = TextRenderer()
        self._lock = threading.Lock()

    def render(self) -> bytes:
        with self._lock:
            return self._renderer.render(self.registry)


def metrics_app(exposition: Exposition) -> FastAPI:
    """``GET /metrics``: the registry's text exposition; ``GET /``: a link to it."""
    app = FastAPI(title="gpucluster metrics", openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/metrics")
    def metrics() -> Response:  # a plain def: FastAPI runs it in its thread pool, so a slow collector blocks no one
        return Response(exposition.render(), media_type=exposition.content_type)

    @app.get("/")
    def index() -> HTMLResponse:
        return HTMLResponse('<html><body><a href="/metrics">metrics</a></body></html>')

    return app


class MetricsServer:
    """:func:`metrics_app` over ``registry`` under uvicorn on ``host:port`` (``port=0`` picks a free one), in a
    daemon thread; ``OSError`` when the address cannot be bound."""

    def __init__(self, registry: CollectorRegistry, host: str = "127.0.0.1", port: int = 0,
                 start_timeout: float = 10.0) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError:
            sock.close()
            raise
        self._sock = sock
        self.host = host
        self.port = int(sock.getsockname()[1])
        self.exposition = Exposition(registry)
        config = uvicorn.Config(metrics_app(self.exposition), log_level="warning", access_log=False,
                                log_config=None, lifespan="off")
        self._server = uvicorn.Server(config)  # off the main thread it leaves the process's signals alone
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="metrics-server",
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise OSError(f"metrics server on {host}:{self.port} did not start")
            time.sleep(0.01)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(5)
        self._sock.close()
