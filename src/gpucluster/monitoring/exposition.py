"""Serving the one exposition path (:mod:`gpucluster.exposition`) over HTTP on the project's server stack.

* :func:`metrics_app`: ``GET /metrics`` (and a link at ``/``) as a FastAPI application; :class:`MetricsServer`
  runs it under uvicorn in a thread (the monitoring agent, ``gpucluster monitor agent``, and tests).
* :class:`~gpucluster.exposition.Exposition`, :class:`~gpucluster.exposition.TextRenderer` and ``CONTENT_TYPE``
  are re-exported from :mod:`gpucluster.exposition`.
"""

from __future__ import annotations

import socket
import threading
import time

import uvicorn
from fastapi import FastAPI
from fastapi.responses import HTMLResponse, Response
from prometheus_client import CollectorRegistry

from gpucluster.exposition import CONTENT_TYPE, Exposition, TextRenderer

__all__ = ["CONTENT_TYPE", "Exposition", "MetricsServer", "TextRenderer", "metrics_app"]


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
