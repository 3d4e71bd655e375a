"""Issue 29: would the extender keep its latency on the project's FastAPI/uvicorn stack? An A/B of ``POST /filter``
through the extender's ``http.server`` (:class:`~gpucluster.kubernetes.extender.ExtenderServer`) and through the
same :class:`~gpucluster.kubernetes.extender.ExtenderLogic` served by FastAPI on uvicorn (a server written here
for the comparison: same routes, same JSON), in interleaved rounds on fresh clusters of ``--nodes`` nodes
(``bench/extender_latency.py``'s cluster and pods, NodeNames as kube-scheduler sends with nodeCacheCapable).

    .venv/bin/python bench/extender_stack_ab.py [--nodes 1000] [--requests 400] [--rounds 4] [--no-threadpool]

Prints p50/p99 per round and over all rounds. ``--no-threadpool`` runs the verb on uvicorn's event loop instead
of Starlette's thread pool (what a sync FastAPI endpoint does).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

sys.path.insert(0, str(Path(__file__).resolve().parent))
from extender_latency import _cluster, pct, pod

from gpucluster.kubernetes.extender import ExtenderError, ExtenderLogic, ExtenderMetrics, ExtenderServer


class UvicornExtender:
    """:class:`ExtenderLogic` on FastAPI + uvicorn, for this comparison only."""

    def __init__(self, logic: ExtenderLogic, threadpool: bool = True) -> None:
        self.metrics = ExtenderMetrics(logic.cluster)
        verbs = {"filter": logic.filter, "prioritize": logic.prioritize, "bind": logic.bind, "preempt": logic.preempt}
        app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

        def handle(verb: str, raw: bytes) -> tuple[int, bytes]:
            t0 = time.perf_counter()
            fn = verbs.get(verb)
            if fn is None:
                return 404, json.dumps({"error": f"no such verb {verb!r}"}).encode()
            try:
                code, body = 200, fn(json.loads(raw or b"null"))
            except (ExtenderError, json.JSONDecodeError) as exc:
                code, body = 400, {"error": str(exc)}
            self.metrics.requests.labels(verb, "ok").inc()
            self.metrics.latency.labels(verb).observe(time.perf_counter() - t0)
            return code, json.dumps(body).encode()

        @app.post("/{path:path}")
        async def post(path: str, request: Request) -> Response:
            raw = await request.body()
            verb = path.strip("/").split("/")[-1]
            code, data = (await run_in_threadpool(handle, verb, raw)) if threadpool else handle(verb, raw)
            return Response(data, status_code=code, media_type="application/json")

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def port(self) -> int:
        return int(self.sock.getsockname()[1])

    def start(self) -> None:
        self.thread.start()
        while not self.server.started:
            time.sleep(0.01)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def run(kind: str, nodes: int, requests: int, threadpool: bool) -> list[float]:
    cluster, _objs, names = _cluster(nodes, "default")
    logic = ExtenderLogic(cluster)
    server: Any = ExtenderServer(logic, "127.0.0.1", 0) if kind == "http.server" else UvicornExtender(logic, threadpool)
    server.start()
    lat: list[float] = []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
            for i in range(requests + 20):
                data = json.dumps({"Pod": pod(f"p-{i}", "gpucluster", vendor=i), "NodeNames": names}).encode()
                t = time.perf_counter()
                r = http.post("/filter", content=data, headers={"Content-Type": "application/json"})
                dt = time.perf_counter() - t
                r.json()
                if i >= 20:  # warm-up excluded
                    lat.append(dt * 1000)
    finally:
        server.stop()
    return lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=1000)
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-threadpool", action="store_true")
    a = ap.parse_args()
    kinds = ["http.server", "uvicorn"]
    all_lat: dict[str, list[float]] = {k: [] for k in kinds}
    for r in range(a.rounds):
        for kind in kinds if r % 2 == 0 else kinds[::-1]:
            lat = run(kind, a.nodes, a.requests, not a.no_threadpool)
            all_lat[kind] += lat
            print(f"round {r} {kind:11s}: p50={statistics.median(lat):.2f} ms p99={pct(lat, 99):.2f} ms "
                  f"(load average {os.getloadavg()[0]:.1f})", flush=True)
    for kind, lat in all_lat.items():
        print(f"all rounds {kind:11s}: n={len(lat)} p50={statistics.median(lat):.2f} ms p99={pct(lat, 99):.2f} ms "
              f"max={max(lat):.2f} ms")


if __name__ == "__main__":
    main()
