"""Agent scrape time for 16 GPUs (issue 8: <= 50 ms).

Measures a full scrape of the agent: sampling the device source, building every metric family (26 dcgm
fields + allocation families) and rendering the text format; once in-process (our ``TextRenderer``, and
prometheus_client's ``generate_latest`` for comparison) and once over HTTP (``GET /metrics`` on the agent's
server, as Prometheus does). Source: the simulated one by default,
``--source nvml`` on a machine with GPUs (then the node's real GPUs, however many).

    .venv/bin/python bench/agent_scrape.py [--gpus 16] [--pods 40] [--repeat 200] [--source sim|nvml]
"""

from __future__ import annotations

import argparse
import statistics
import time

import httpx
from prometheus_client import generate_latest

from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod
from gpucluster.monitoring import DeviceSource, MetricsServer, NvmlSource, SimSource, TextRenderer, build_registry
from gpucluster.scheduler import Scheduler, profile_for


def sim_cluster(gpus: int, pods: int) -> tuple[ClusterState, SimSource, list[str]]:
    per_node = min(gpus, 8)
    nodes = [
        NodeSpec(f"node-{i}", 224000, 2097152, tuple(
            DeviceSpec(f"GPU-{i}-{j}", j, "nvidia", "H100-SXM5-80GB", 81559, nvlink_domain=0)
            for j in range(per_node)))
        for i in range((gpus + per_node - 1) // per_node)
    ]
    state = ClusterState(nodes)
    sched = Scheduler(state, profile_for("spread"))
    for k in range(pods):
        req = DeviceRequest("nvidia", 1, memory_mib=4000, core_milli=200)
        sched.schedule_and_bind(Pod(f"p{k}", "bench", (ContainerRequest("c", 1000, 1024, (req,)),),
                                    annotations={"gpucluster.io/activity": "training"}))
    names = [n.name for n in nodes]
    return state, SimSource(state, names), names


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=16)
    ap.add_argument("--pods", type=int, default=40)
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--source", choices=["sim", "nvml"], default="sim")
    args = ap.parse_args()
    src: DeviceSource
    if args.source == "nvml":
        src = NvmlSource()
        reg = build_registry(src)
    else:
        state, src, names = sim_cluster(args.gpus, args.pods)
        reg = build_registry(src, state, names)
    gpus = len(src.sample())
    renderer = TextRenderer()
    body = renderer.render(reg)
    for _ in range(10):
        renderer.render(reg)
    inproc = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        renderer.render(reg)
        inproc.append((time.perf_counter() - t0) * 1000)
    stock = []
    for _ in range(max(10, args.repeat // 4)):
        t0 = time.perf_counter()
        generate_latest(reg)
        stock.append((time.perf_counter() - t0) * 1000)
    server = MetricsServer(reg, "127.0.0.1", 0)
    http = []
    with httpx.Client() as client:
        for _ in range(10):
            client.get(server.url)
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            r = client.get(server.url)
            http.append((time.perf_counter() - t0) * 1000)
            assert r.status_code == 200
    server.stop()
    src.close()
    print(f"source={args.source} gpus={gpus} series_bytes={len(body)} repeat={args.repeat}")
    for name, xs in (("in-process TextRenderer", inproc), ("(prometheus_client stock)", stock),
                     ("HTTP GET /metrics", http)):
        print(f"{name:28s} median {statistics.median(xs):6.2f} ms  p95 {pct(xs, 0.95):6.2f} ms  "
              f"max {max(xs):6.2f} ms")
    worst = pct(http, 0.95)
    print(f"budget 50 ms: {'OK' if worst <= 50 else 'OVER'} (HTTP p95 {worst:.2f} ms)")


if __name__ == "__main__":
    main()
