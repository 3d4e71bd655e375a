"""API load: 200 requests/s of mixed reads and job submissions for 30 s against `gpucluster up`.

Open loop (requests start on a fixed schedule whatever the server does; latency is measured from the scheduled
start, so a stalled server cannot hide its queue). Starts its own server on a free port unless --server is given.
Reads use the admin token; submissions use three tenants' own tokens, so every check a tenant meets (the guard,
token lookup, bounded parsing, never-fits, priority, the per-tenant rate limit) is on the measured path.

    .venv/bin/python bench/api_load.py [--rate 200] [--seconds 30] [--server URL --token T]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TENANTS = ("bench", "team-a", "team-b")
"""Submissions rotate over these tenants' own tokens (about 13/s each at the default rate: under the
control plane's default per-tenant limit of 20/s, so none is refused)."""
MIX = (("list_jobs", 0.35), ("get_job", 0.15), ("overview", 0.15), ("nodes", 0.05), ("alerts", 0.05),
       ("tenants", 0.05), ("submit", 0.20))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data: Path, token: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": token}
    log = (data.parent / "up.log").open("wb")  # its structured log (a line per request) stays on the measured path
    proc = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "up", "--port", str(port), "--data-dir",
                             str(data), "--speed", "10"], env=env, stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise SystemExit("server did not start")


class Conn:
    """A minimal HTTP/1.1 keep-alive connection (far cheaper per request than a general client, so the
    benchmark measures the server, not the load generator)."""

    def __init__(self, host: str, port: int, token: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Authorization: Bearer {token}\r\n"
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = (f"{method} {path} HTTP/1.1\r\nHost: {self.host}\r\n{self.auth}"
                f"Content-Length: {len(body)}\r\nContent-Type: application/json\r\n\r\n").encode() + body
        for _ in range(2):  # the server closes keep-alive connections idle for 5 s: reconnect once
            if self.writer is None:
                self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
            assert self.reader is not None
            self.writer.write(head)
            status_line = await self.reader.readline()
            if status_line:
                break
            self.writer.close()
            self.writer = None
        else:
            raise ConnectionError("server closed the connection twice")
        length = 0
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                break
            name, _, value = line.decode().partition(":")
            if name.lower() == "content-length":
                length = int(value)
        data = await self.reader.readexactly(length)
        return int(status_line.split()[1]), data


async def run(url: str, token: str, rate: float, seconds: float, seed: int) -> dict[str, list[float]]:
    rng = random.Random(seed)
    names = [n for n, _ in MIX]
    weights = [w for _, w in MIX]
    lat: dict[str, list[float]] = {n: [] for n in names}
    errors: list[str] = []
    ids: list[str] = []
    host, port = url.split("://")[1].split(":")
    idle: dict[str, list[Conn]] = {}
    timeline: list[tuple[float, float]] = []
    start = time.perf_counter() + 0.2

    async def call(method: str, path: str, payload: object = None, as_token: str = token) -> tuple[int, bytes]:
        pool = idle.setdefault(as_token, [])
        conn = pool.pop() if pool else Conn(host, int(port), as_token)
        status, data = await conn.request(method, path, json.dumps(payload).encode() if payload is not None else b"")
        pool.append(conn)
        return status, data

    tenants: dict[str, str] = {}  # submissions go through tenant tokens: auth, quota, priority and rate checks
    for name in TENANTS:
        _, data = await call("POST", "/api/v1/tenants", {"name": name})
        tenants[name] = json.loads(data)["token"]

    for i in range(5):  # a few jobs to read back
        _, data = await call("POST", "/api/v1/jobs", {"name": f"seed-{i}", "tenant": "bench",
                                                      "resources": {"nvidia.com/gpu": 1}, "duration_s": 60})
        ids.append(json.loads(data)["id"])

    async def one(kind: str, due: float, n: int) -> None:
        as_token = token
        if kind == "submit":
            tenant = rng.choice(TENANTS)
            as_token = tenants[tenant]
            req = ("POST", "/api/v1/jobs", {
                "name": f"load-{n}", "tenant": tenant,
                "resources": {"nvidia.com/gpu": rng.choice((1, 1, 1, 2)),
                              "nvidia.com/gpucores": rng.choice((10, 25, 50, 100))},
                "duration_s": rng.uniform(5, 60)})
        elif kind == "list_jobs":
            req = ("GET", "/api/v1/jobs?limit=50", None)
        elif kind == "get_job":
            req = ("GET", f"/api/v1/jobs/{rng.choice(ids)}", None)
        else:
            req = ("GET", f"/api/v1/{kind}", None)
        try:
            status, data = await asyncio.wait_for(call(*req, as_token=as_token), timeout=10.0)
        except (TimeoutError, OSError, asyncio.IncompleteReadError) as exc:
            errors.append(f"{kind}: {type(exc).__name__}")
            return
        lat[kind].append(time.perf_counter() - due)
        timeline.append((due - start, time.perf_counter() - due))
        if status >= 400:
            errors.append(f"{kind}: HTTP {status} {data[:100]!r}")
        elif kind == "submit":
            ids.append(json.loads(data)["id"])

    tasks = []
    start = time.perf_counter() + 0.2
    total = int(rate * seconds)
    for n in range(total):
        due = start + n / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(rng.choices(names, weights)[0], due, n)))
    await asyncio.gather(*tasks)
    for conn in (c for pool in idle.values() for c in pool):
        if conn.writer is not None:
            conn.writer.close()
    lat["_errors"] = [float(len(errors))]
    if os.environ.get("BENCH_TIMELINE"):
        for sec in range(int(seconds)):
            v = [x for t, x in timeline if sec <= t < sec + 1]
            print(f"t={sec:>3}s n={len(v):>4} p50 {pct(v, 0.5):8.1f} ms  p99 {pct(v, 0.99):8.1f} ms")
    for e in errors[:10]:
        print("error:", e)
    return lat


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--server")
    ap.add_argument("--token", default="bench-admin-token-0001")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    proc = None
    tmp = tempfile.TemporaryDirectory()
    url = args.server
    if url is None:
        proc, url = start_server(Path(tmp.name) / "data", args.token)
    try:
        lat = asyncio.run(run(url, args.token, args.rate, args.seconds, args.seed))
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
        tmp.cleanup()
    errors = int(lat.pop("_errors")[0])
    every = [x for v in lat.values() for x in v]
    print(f"requests: {len(every) + errors} in {args.seconds:g} s at {args.rate:g}/s target, errors: {errors}")
    print(f"{'kind':<10} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for kind, v in lat.items():
        print(f"{kind:<10} {len(v):>6} {pct(v, 0.5):>8.1f} {pct(v, 0.99):>8.1f} {pct(v, 1.0):>8.1f}")
    p99 = pct(every, 0.99)
    print(f"{'all':<10} {len(every):>6} {pct(every, 0.5):>8.1f} {p99:>8.1f} {pct(every, 1.0):>8.1f}")
    ok = errors == 0 and p99 <= 100.0
    print(f"target p99 <= 100 ms and no error: {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
