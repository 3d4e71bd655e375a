"""Extender filter latency and secondary-scheduler decision latency at ``--nodes`` nodes, and pods bound per
second through the real kube-scheduler with our extender vs. the same kube-scheduler without it (issue 5: p99
filter latency <= 20 ms at 1,000 nodes; issue 17: the same at 5,000 nodes with nodeCacheCapable).

Part 1 (in-process server, real HTTP): ``--nodes`` nodes (default 1,000; 4 pools, 3 vendors, 8 devices each)
registered into a ``KubeCluster`` with ``--policy`` (default: the scheduler's default, as the extender runs);
``POST /filter`` from a keep-alive client with ``NodeNames`` (nodeCacheCapable) listing every node, one new pod
per request (each decision is assumed, so the cluster fills as it goes); then the same with full ``Nodes``
objects (not nodeCacheCapable, a tenth of the requests). Then the secondary scheduler's decision
(``KubeCluster.decide`` over every node, what it runs per pod before its Binding) on a fresh cluster.

Part 2 (real kube-apiserver + kube-scheduler, v1.37.2 or ``K8S_VERSION``, ``scripts/k8s-control-plane.sh``):
``--k8s-nodes`` simulated GPU nodes (default 100); two kube-schedulers in one run, ``plain`` (no extender; pods ask
``nvidia.com/gpu: 1``, which it counts itself) and ``gpucluster`` (our extender as a separate process, pods ask
gpu + gpumem + gpucores); ``--pods`` pods each, created with 16 threads; bound/s = pods / (time from the first
create to the last bind).

    .venv/bin/python bench/extender_latency.py [--requests 2000] [--nodes 5000] [--k8s-nodes 100] [--pods 1000]
                                               [--policy default] [--skip-k8s]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import parse_pod
from gpucluster.kubernetes.extender import ExtenderLogic, ExtenderServer
from gpucluster.kubernetes.manifests import scheduler_config
from gpucluster.kubernetes.register import node_manifest
from gpucluster.spec import ClusterSpecFile, cluster_from_spec

REPO = Path(__file__).resolve().parents[1]
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.37.2")
K8S_BIN = Path(os.environ.get("K8S_BIN_DIR", f"/var/cache/gpucluster/k8s-{K8S_VERSION}/bin"))
KUBE_MINOR = ".".join(K8S_VERSION.lstrip("v").split(".")[:2])


def spec(nodes: int, run: str) -> Any:
    q = nodes // 4
    pools = [
        (f"a100-{run}", q, "nvidia", "A100-SXM4-80GB", 81920),
        (f"l40s-{run}", q, "nvidia", "L40S-48GB", 46068),
        (f"mlu-{run}", q, "cambricon", "MLU370-X8", 49152),
        (f"dcu-{run}", nodes - 3 * q, "hygon", "Z100", 32768),
    ]
    doc = {"name": f"bench-{run}", "nodePools": [
        {"name": n, "count": c, "cpuMilli": 128000, "memoryMiB": 1048576, "labels": {"gpucluster.io/run": run},
         "gpu": {"vendor": v, "model": m, "count": 8, "memoryMiB": mem, "maxTasks": 10}}
        for n, c, v, m, mem in pools if c]}
    return cluster_from_spec(ClusterSpecFile.model_validate(doc), "<bench>")


def pod(name: str, scheduler: str, devices: bool = True, vendor: int = 0, run: str = "") -> dict[str, Any]:
    if devices:
        res = [("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
               ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
               ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores")][vendor % 3]
        # about 4 GiB of device memory each: Cambricon counts ``mlu.smlu.vmemory`` in 256 MiB units (HAMi)
        limits = {res[0]: "1", res[1]: ("4000", "16", "4000")[vendor % 3], res[2]: "10"}
    else:
        limits = {"nvidia.com/gpu": "1"}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"gpucluster.io/run": run} if run else None,
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"limits": limits, "requests": {"cpu": "10m"}}}]}}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


def _cluster(nodes: int, policy: str) -> tuple[KubeCluster, list[dict[str, Any]], list[str]]:
    reg = VendorRegistry.from_settings(DeviceSettings())
    cl = spec(nodes, "lat")
    now = time.time()
    objs = []
    for n in cl.nodes:
        o = node_manifest(n, reg, now)
        o["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
        objs.append(o)
    cluster = KubeCluster(reg, policy, handshake_timeout=3600)
    t0 = time.perf_counter()
    cluster.set_nodes(objs)
    print(f"state of {cluster.state.n_nodes} nodes / {int(cluster.state.dev_valid.sum())} devices built in "
          f"{time.perf_counter() - t0:.2f} s")
    return cluster, objs, [n.name for n in cl.nodes]


def _summary(what: str, lat: list[float], placed: int) -> str:
    return (f"{what}: n={len(lat)} p50={statistics.median(lat):.2f} ms p99={pct(lat, 99):.2f} ms "
            f"max={max(lat):.2f} ms (placed {placed})")


def filter_latency(requests: int, nodes: int, policy: str) -> None:
    cluster, objs, names = _cluster(nodes, policy)
    server = ExtenderServer(ExtenderLogic(cluster), "127.0.0.1", 0)
    server.start()
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=30) as http:
            for label, count, body_of in (
                ("NodeNames (nodeCacheCapable)", requests, lambda p: {"Pod": p, "NodeNames": names}),
                ("full Nodes (not nodeCacheCapable)", max(requests // 10, 50),
                 lambda p: {"Pod": p, "Nodes": {"items": objs}}),
            ):
                lat: list[float] = []
                scheduled = 0
                for i in range(count + 20):
                    data = json.dumps(body_of(pod(f"{label[:4]}-{i}", "gpucluster", vendor=i))).encode()
                    t = time.perf_counter()
                    r = http.post("/filter", content=data, headers={"Content-Type": "application/json"})
                    dt = time.perf_counter() - t
                    out = r.json()
                    if i >= 20:  # warm-up excluded
                        lat.append(dt * 1000)
                        scheduled += bool(out.get("nodenames") or (out.get("nodes") or {}).get("items"))
                print(_summary(f"filter, {nodes} nodes, {policy}, {label}", lat, scheduled), flush=True)
    finally:
        server.stop()


def decide_latency(requests: int, nodes: int, policy: str) -> None:
    """What the secondary scheduler runs per pod: parse the pod, decide over every node, assume."""
    cluster, _, _ = _cluster(nodes, policy)
    lat: list[float] = []
    placed = 0
    for i in range(requests + 20):
        raw = pod(f"sec-{i}", "gpucluster", vendor=i)
        t = time.perf_counter()
        d = cluster.decide(parse_pod(raw, cluster.registry))
        dt = time.perf_counter() - t
        if i >= 20:
            lat.append(dt * 1000)
            placed += d.ok
    print(_summary(f"secondary scheduler decision, {nodes} nodes, {policy}", lat, placed), flush=True)


# --------------------------------------------------------------------------------------- real kube-scheduler
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_scheduler(d: Path, cfg: dict[str, Any], name: str) -> None:
    path = d / f"{name}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    subprocess.run([str(REPO / "scripts/k8s-control-plane.sh"), "scheduler", str(d), str(path), name], check=True,
                   capture_output=True, env={**os.environ, "K8S_BIN_DIR": str(K8S_BIN)}, timeout=120)


def throughput(nodes: int, pods: int) -> None:
    from kubernetes import client

    from gpucluster.kubernetes.client import api_client
    from gpucluster.kubernetes.register import NodeRegistrar

    d = Path(tempfile.mkdtemp(prefix="gpucluster-bench-k8s-"))
    env = {**os.environ, "K8S_BIN_DIR": str(K8S_BIN)}
    subprocess.run([str(REPO / "scripts/k8s-control-plane.sh"), "up", str(d)], check=True, capture_output=True,
                   env=env, timeout=240)
    ext: subprocess.Popen[bytes] | None = None
    try:
        api = api_client(d / "kubeconfig")
        core: Any = client.CoreV1Api(api)
        reg = VendorRegistry.from_settings(DeviceSettings())
        t0 = time.perf_counter()
        NodeRegistrar(api, spec(nodes, "tp").nodes, reg).register()
        print(f"registered {nodes} nodes in {time.perf_counter() - t0:.1f} s")
        port = free_port()
        ext = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "k8s", "extender", "--kubeconfig",
                                str(d / "kubeconfig"), "--listen", f"127.0.0.1:{port}", "--handshake-timeout",
                                "3600"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("extender did not start")
            time.sleep(0.2)
        plain = {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
                 "percentageOfNodesToScore": 100, "profiles": [{"schedulerName": "plain"}]}
        start_scheduler(d, plain, "plain")
        start_scheduler(d, scheduler_config(f"http://127.0.0.1:{port}", reg, "gpucluster",
                                            kube_version=KUBE_MINOR), "withext")
        for ns, sched, devices in (("plain", "plain", False), ("ext", "gpucluster", True)):
            core.create_namespace({"metadata": {"name": ns}})
            items = [dict(pod(f"p{i:05d}", sched, devices, vendor=i, run="tp"), metadata={"name": f"p{i:05d}"})
                     for i in range(pods)]
            t0 = time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(lambda p, ns=ns: core.create_namespaced_pod(ns, p), items))
            created = time.perf_counter() - t0
            while True:
                resp = core.list_namespaced_pod(ns, _preload_content=False)
                bound = sum(1 for p in json.loads(resp.data)["items"] if p["spec"].get("nodeName"))
                if bound >= pods or time.perf_counter() - t0 > 300:
                    break
                time.sleep(0.2)
            total = time.perf_counter() - t0
            print(f"kube-scheduler {'with' if devices else 'without'} extender: {bound}/{pods} pods bound in "
                  f"{total:.1f} s (creation took {created:.1f} s) -> {bound / total:.0f} pods/s")
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    finally:
        if ext is not None:
            ext.terminate()
            ext.wait(15)
        subprocess.run([str(REPO / "scripts/k8s-control-plane.sh"), "down", str(d)], check=False,
                       capture_output=True, env=env, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--nodes", type=int, default=1000, help="nodes for the filter / decision latency (part 1)")
    ap.add_argument("--policy", default="default", help="placement policy of the extender and scheduler")
    ap.add_argument("--k8s-nodes", type=int, default=100, help="nodes for the kube-scheduler run (part 2)")
    ap.add_argument("--pods", type=int, default=1000)
    ap.add_argument("--skip-k8s", action="store_true")
    args = ap.parse_args()
    if args.nodes < 4:
        ap.error("--nodes: at least 4 (one per pool)")
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    filter_latency(args.requests, args.nodes, args.policy)
    decide_latency(args.requests, args.nodes, args.policy)
    if not args.skip_k8s:
        throughput(args.k8s_nodes, args.pods)


if __name__ == "__main__":
    main()
