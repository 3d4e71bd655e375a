"""Queue flood: one tenant queues 10,000 jobs, then another tenant submits one (issue 28).

Starts ``gpucluster up`` (embedded, no background workload, no faults) on a free port with a fresh data directory,
raises the flooding tenant's ``max_queued_jobs`` above the flood, and queues ``--jobs`` jobs for it (four shapes,
1 to 8 GPUs; its quota of 8 GPUs keeps all but a few waiting) from ``--clients`` concurrent clients. Meanwhile a
probe reads ``GET /api/v1/overview`` every 50 ms. Once the flood is queued, another tenant submits a 1-GPU job and
the bench polls it until it runs. Prints (and with ``--json`` writes) the time from that submission to
``running``, the overview latency (p50, p99, max) during the flood and with the flood queued, the submission
latency, and the machine's load average. Figures, not assertions: goals are another tenant's job running within
0.5 s and an overview p99 under 100 ms.

    .venv/bin/python bench/queue_flood.py [--jobs 10000] [--clients 8] [--queue-policy default] [--json out.json]
        [--profile up.prof]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ADMIN = "queue-flood-admin-token"
SHAPES = ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 8})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_server(data: Path, profile: Path | None = None,
                 queue_policy: str = "default") -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": ADMIN}
    log = (data.parent / "up.log").open("wb")
    profiler = ["-m", "cProfile", "-o", str(profile)] if profile is not None else []
    proc = subprocess.Popen([sys.executable, *profiler, "-m", "gpucluster.cli.main", "up", "--port", str(port),
                             "--data-dir", str(data), "--background", "0", "--faults-per-hour", "0",
                             "--queue-policy", queue_policy], env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"gpucluster up exited with {proc.returncode}")
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("gpucluster up did not answer within 120 s")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50_ms": round(pct(values, 0.50) * 1000, 1),
            "p99_ms": round(pct(values, 0.99) * 1000, 1), "max_ms": round(max(values, default=float("nan")) * 1000, 1),
            "mean_ms": round(statistics.fmean(values) * 1000, 1) if values else float("nan")}


async def probe(client: httpx.AsyncClient, out: list[float], stop: asyncio.Event) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        r = await client.get("/api/v1/overview")
        out.append(time.perf_counter() - t0)
        r.raise_for_status()
        await asyncio.sleep(0.05)


def probe_process(url: str, headers: dict[str, str], conn: Any) -> None:
    """The overview probe in a process of its own (``--probe process``): its latencies are the server's, not
    those of the flooding clients' event loop it would otherwise share. Reads until told to stop, then sends the
    latencies back."""

    async def go() -> list[float]:
        out: list[float] = []
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_reader(conn.fileno(), stop.set)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            await probe(client, out, stop)
        loop.remove_reader(conn.fileno())
        return out

    conn.send(asyncio.run(go()))


class ProbeProcess:
    """The probe started in its own process; ``stop()`` returns its latencies."""

    def __init__(self, url: str, headers: dict[str, str]) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=probe_process, args=(url, headers, child), daemon=True)
        self.proc.start()

    async def stop(self) -> list[float]:
        self.conn.send("stop")
        out: list[float] = await asyncio.to_thread(self.conn.recv)
        self.proc.join(timeout=30)
        return out


async def flood(client: httpx.AsyncClient, jobs: int, clients: int, latencies: list[float]) -> None:
    counter = iter(range(jobs))

    async def worker() -> None:
        for i in counter:
            body = {"name": f"flood-{i}", "tenant": "flood", "resources": SHAPES[i % len(SHAPES)]}
            t0 = time.perf_counter()
            r = await client.post("/api/v1/jobs", json=body)
            latencies.append(time.perf_counter() - t0)
            if r.status_code != 201:
                raise SystemExit(f"flood job {i}: {r.status_code} {r.text}")

    await asyncio.gather(*(worker() for _ in range(clients)))


async def run(url: str, jobs: int, clients: int, probe_in: str = "process") -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client, \
            httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as prober:
        for name, body in (("flood", {"quota_gpus": 8, "max_queued_jobs": jobs + 100}), ("other", {})):
            (await client.post("/api/v1/tenants", json={"name": name, **body})).raise_for_status()
        during: list[float] = []
        submits: list[float] = []
        stop = asyncio.Event()
        if probe_in == "process":
            separate = ProbeProcess(url, headers)
            await asyncio.sleep(1.0)  # the probe's interpreter starts
        else:
            probing = asyncio.create_task(probe(prober, during, stop))
        t0 = time.perf_counter()
        await flood(client, jobs, clients, submits)
        flood_s = time.perf_counter() - t0
        if probe_in == "process":
            during.extend(await separate.stop())
        else:
            stop.set()
            await probing
        # another tenant's job, with the flood queued
        after: list[float] = []
        stop = asyncio.Event()
        probing = asyncio.create_task(probe(prober, after, stop))
        t0 = time.perf_counter()
        r = await client.post("/api/v1/jobs", json={"name": "other", "tenant": "other",
                                                     "resources": {"nvidia.com/gpu": 1}})
        r.raise_for_status()
        jid = r.json()["id"]
        while True:
            status = (await client.get(f"/api/v1/jobs/{jid}")).json()["status"]
            if status == "running":
                break
            if time.perf_counter() - t0 > 60:
                raise SystemExit(f"the other tenant's job is still {status} after 60 s")
            await asyncio.sleep(0.01)
        to_running = time.perf_counter() - t0
        await asyncio.sleep(2.0)  # a few more probes with the flood queued
        stop.set()
        await probing
        overview = (await client.get("/api/v1/overview")).json()
        tenants = {t["name"]: t for t in (await client.get("/api/v1/tenants")).json()["tenants"]}
    return {"jobs": jobs, "clients": clients, "flood_s": round(flood_s, 1),
            "submit_latency": summary(submits), "overview_during_flood": summary(during),
            "overview_flood_queued": summary(after), "other_submit_to_running_s": round(to_running, 3),
            "flood_pending": tenants["flood"]["pending"], "overview_jobs": overview.get("jobs"),
            "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count(),
            "probe": probe_in}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10000)
    ap.add_argument("--queue-policy", default="default", help="the server's queue policy (up --queue-policy)")
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument("--profile", type=Path, default=None,
                    help="run the server under cProfile and write its profile here (read it with pstats)")
    ap.add_argument("--probe", choices=("process", "shared"), default="process",
                    help="where the overview probe runs during the flood: its own process (default: it measures "
                         "the server) or the flooding clients' event loop (shared: how this bench measured before "
                         "2026-12-04 21:15 UTC; its figures include that loop's own delays)")
    args = ap.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with tempfile.TemporaryDirectory(prefix="queue-flood-") as tmp:
        proc, url = start_server(Path(tmp) / "data", args.profile, args.queue_policy)
        try:
            result = asyncio.run(run(url, args.jobs, args.clients, args.probe))
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    result["load_average_before"] = load_before
    result["queue_policy"] = args.queue_policy
    print(json.dumps(result, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
