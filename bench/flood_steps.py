"""CPU time of each step of the control plane's tick with thousands of jobs queued by one tenant (issue 28).

In process, no HTTP server (``tests.service.inproc``: the same ``Service`` and ``EmbeddedRuntime`` that ``gpucluster
up`` runs): tenant ``flood`` (quota 8 GPUs) submits ``--jobs`` jobs of four shapes (1, 2, 4, 8 GPUs) through the
API's test client, with a tick (0.25 s of clock) every 250 submissions; then 40 more ticks with the flood queued.
Each step of ``Service.tick_steps`` (0: the scheduling passes up to the clock, 1: the monitor's shard, 2: the pass
after remediation, 3: storing the events, one step per ``RECORD_CHUNK``, then the tick hooks) is timed in CPU
seconds of this process (``time.process_time``), which other work on a shared machine inflates far less than wall
time. A step is what holds the event loop of ``up`` in one piece. Prints figures, asserts nothing.

    PYTHONPATH=. .venv/bin/python bench/flood_steps.py [--jobs 10000] [--queue-policy default]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tests.service.inproc import InProc, in_process

SHAPES = ({"nvidia.com/gpu": 1}, {"nvidia.com/gpu": 2}, {"nvidia.com/gpu": 4}, {"nvidia.com/gpu": 8})


def tick(ip: InProc, dt: float, holds: dict[int, list[float]]) -> None:
    ip.service.clock_origin += dt
    steps = ip.service.tick_steps()
    i = 0
    while True:
        t0 = time.process_time()
        try:
            next(steps)
        except StopIteration:
            holds.setdefault(i, []).append(time.process_time() - t0)
            return
        holds.setdefault(i, []).append(time.process_time() - t0)
        i += 1


def show(name: str, holds: dict[int, list[float]]) -> None:
    print(name)
    for step, v in sorted(holds.items()):
        print(f"  step {step}: n {len(v)}, p50 {1000 * statistics.median(v):.1f} ms, max {1000 * max(v):.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000, help="jobs the flooding tenant queues")
    ap.add_argument("--queue-policy", default="default", help="the runtime's queue policy (up --queue-policy)")
    args = ap.parse_args()
    flood: dict[int, list[float]] = {}
    queued: dict[int, list[float]] = {}
    with in_process(Path(tempfile.mkdtemp()) / "d", queue_policy=args.queue_policy) as ip:
        r = ip.client.post("/api/v1/tenants", json={"name": "flood", "quota_gpus": 8,
                                                      "max_queued_jobs": args.jobs + 10})
        r.raise_for_status()
        t0 = time.monotonic()
        for i in range(args.jobs):
            r = ip.client.post("/api/v1/jobs", json={"name": f"f{i}", "tenant": "flood",
                                                      "resources": SHAPES[i % len(SHAPES)]})
            r.raise_for_status()
            if i % 250 == 249:
                tick(ip, 0.25, flood)
        print(f"{args.jobs} jobs submitted in {time.monotonic() - t0:.1f} s wall")
        for _ in range(40):
            tick(ip, 0.25, queued)
        overview = []
        for _ in range(20):
            t = time.process_time()
            ip.client.get("/api/v1/overview").raise_for_status()
            overview.append(time.process_time() - t)
    show("CPU ms per tick step during the flood", flood)
    show("CPU ms per tick step with the flood queued (40 ticks)", queued)
    print(f"overview (through the test client) p50 {1000 * statistics.median(overview):.1f} ms, "
          f"max {1000 * max(overview):.1f} ms")


if __name__ == "__main__":
    main()
