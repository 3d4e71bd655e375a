"""Three schedulers on one real API server, the same 5,000 fake GPU nodes and the same pods, in one run: pods bound
per second and the p99 time from creation to binding for

  (a) kube-scheduler alone (pods ask ``nvidia.com/gpu: 1``, whole GPUs, which it counts itself),
  (b) kube-scheduler with gpucluster's extender (the chart's KubeSchedulerConfiguration, same pods),
  (c) gpucluster's secondary scheduler (``gpucluster k8s scheduler``, same pods).

The nodes are registered as HAMi registers them (``k8s register-nodes``: register annotations, handshakes,
``nvidia.com/gpu`` allocatable = devices, one task per device so a pod's GPU is a whole GPU), no kubelet. Each
scheduler gets ``--pods`` pods created by 16 threads as fast as the API server takes them; a watch records when
each pod's ``spec.nodeName`` appears. bound/s = pods / (first create -> last bind); latency = the client's create
reply -> the watch event of the binding. Pods are deleted between schedulers, so each starts on empty nodes. The
extender and the secondary scheduler are started before their pods are created and waited for until ``/readyz``
answers 200 (their informers have read every node), so a figure measures scheduling, not reading 5,000 nodes.

    .venv/bin/python bench/k8s_schedulers.py [--nodes 5000] [--pods 2000] [--only a,b,c] [--json]

Needs the binaries of ``scripts/test-deps.sh install`` (``K8S_VERSION``, default v1.37.2).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.manifests import scheduler_config
from gpucluster.spec import ClusterSpecFile, cluster_from_spec

REPO = Path(__file__).resolve().parents[1]
CP = REPO / "scripts" / "k8s-control-plane.sh"
K8S_VERSION = os.environ.get("K8S_VERSION", "v1.37.2")
KUBE_MINOR = ".".join(K8S_VERSION.lstrip("v").split(".")[:2])


def fleet(nodes: int) -> Any:
    doc = {"name": "bench5k", "nodePools": [
        {"name": "a100", "count": nodes, "cpuMilli": 128000, "memoryMiB": 1048576,
         "labels": {"gpucluster.io/run": "bench5k"},
         "gpu": {"vendor": "nvidia", "model": "A100-SXM4-80GB", "count": 8, "memoryMiB": 81920, "maxTasks": 1}}]}
    return cluster_from_spec(ClusterSpecFile.model_validate(doc), "<bench>")


def pod(name: str, scheduler: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "c", "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": "1"},
                                                   "requests": {"cpu": "100m", "memory": "128Mi"}}}]}}


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(p / 100 * (len(s) - 1)))]


class BindWatch:
    """A watch on one namespace's pods: the monotonic time each pod's nodeName first appeared."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client, watch

        self.core = client.CoreV1Api(api)
        self.namespace = namespace
        self.bound: dict[str, float] = {}
        self._w = watch.Watch()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for ev in self._w.stream(self.core.list_namespaced_pod, self.namespace, _request_timeout=3600):
                obj = ev["object"]
                if obj.spec.node_name and obj.metadata.name not in self.bound:
                    self.bound[obj.metadata.name] = time.monotonic()
        except Exception as exc:  # the stream ends when stop() closes it
            if not self._stopped:
                print(f"watch of {self.namespace} ended: {exc!r}", flush=True)

    def stop(self) -> None:
        self._stopped = True
        self._w.stop()


def run_one(api: Any, label: str, scheduler: str, pods: int, timeout: float) -> dict[str, Any]:
    from kubernetes import client

    core = client.CoreV1Api(api)
    ns = f"bench-{label}"
    core.create_namespace({"metadata": {"name": ns}})
    watcher = BindWatch(api, ns)
    time.sleep(1)  # the watch is established before the first create
    created: dict[str, float] = {}

    def create(i: int) -> None:
        name = f"p{i:05d}"
        core.create_namespaced_pod(ns, pod(name, scheduler))
        created[name] = time.monotonic()

    t0 = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create, range(pods)))
    t_created = time.monotonic() - t0
    deadline = time.monotonic() + timeout
    while len(watcher.bound) < pods and time.monotonic() < deadline:
        time.sleep(0.2)
    watcher.stop()
    bound = dict(watcher.bound)
    lat = [(bound[k] - created[k]) * 1000 for k in bound if k in created]
    last = max(bound.values()) if bound else t0
    out = {"scheduler": label, "pods": pods, "bound": len(bound), "create_s": round(t_created, 1),
           "total_s": round(last - t0, 1), "bound_per_s": round(len(bound) / max(last - t0, 1e-9), 1),
           "p50_ms": round(pct(lat, 50), 0) if lat else None, "p99_ms": round(pct(lat, 99), 0) if lat else None}
    print(f"({label}) {scheduler}: {len(bound)}/{pods} bound in {out['total_s']} s (creation {t_created:.1f} s) -> "
          f"{out['bound_per_s']} pods/s, creation->binding p50 {out['p50_ms']} ms, p99 {out['p99_ms']} ms",
          flush=True)
    core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
    wait_gone(core, ns)
    return out


def wait_gone(core: Any, ns: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not core.list_namespaced_pod(ns, limit=1).items:
            return
        time.sleep(0.5)


def start_process(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", *args], stdout=out,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2, verify=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer")


def start_kube_scheduler(d: Path, cfg: dict[str, Any], name: str, env: dict[str, str]) -> None:
    path = d / f"{name}.in.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    subprocess.run([str(CP), "scheduler", str(d), str(path), name], check=True, capture_output=True, env=env,
                   timeout=300)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--pods", type=int, default=2000)
    ap.add_argument("--only", default="a,b,c", help="which of a (kube-scheduler), b (+ extender), c (secondary)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds to wait for one scheduler's pods")
    ap.add_argument("--ext-percentage", type=int, default=None,
                    help="percentageOfNodesToScore for (b) (default: the chart's 100, so the extender sees every "
                         "node; 0: kube-scheduler's adaptive default, as (a) runs)")
    ap.add_argument("--json", action="store_true", help="print the results as JSON at the end")
    args = ap.parse_args()
    which = set(args.only.split(","))

    from gpucluster.kubernetes.client import api_client
    from gpucluster.kubernetes.register import NodeRegistrar

    reg = VendorRegistry.from_settings(DeviceSettings())
    d = Path(tempfile.mkdtemp(prefix="gpucluster-bench-5k-"))
    env = {**os.environ, "K8S_VERSION": K8S_VERSION}
    subprocess.run([str(CP), "up", str(d)], check=True, capture_output=True, env=env, timeout=300)
    procs: list[subprocess.Popen[bytes]] = []
    results: list[dict[str, Any]] = []
    try:
        api = api_client(d / "kubeconfig")
        t = time.monotonic()
        NodeRegistrar(api, fleet(args.nodes).nodes, reg).register()
        print(f"kube-apiserver {K8S_VERSION}: registered {args.nodes} nodes (8 x A100 80 GB, HAMi annotations) in "
              f"{time.monotonic() - t:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs "
              f"({platform.processor() or platform.machine()})", flush=True)
        if "a" in which:
            start_kube_scheduler(d, {"apiVersion": "kubescheduler.config.k8s.io/v1",
                                     "kind": "KubeSchedulerConfiguration",
                                     "profiles": [{"schedulerName": "plain"}]}, "plain", env)
            results.append(run_one(api, "a", "plain", args.pods, args.timeout))
        if "b" in which:
            port = free_port()
            procs.append(start_process(["k8s", "extender", "--kubeconfig", str(d / "kubeconfig"), "--listen",
                                        f"127.0.0.1:{port}", "--scheduler-name", "withext",
                                        "--handshake-timeout", "36000"], d / "extender.log"))
            wait_http(f"http://127.0.0.1:{port}/readyz")  # synced: 5,000 nodes read
            cfg = scheduler_config(f"http://127.0.0.1:{port}", reg, "withext", kube_version=KUBE_MINOR)
            if args.ext_percentage is not None:
                cfg["percentageOfNodesToScore"] = args.ext_percentage  # 0: kube-scheduler's adaptive default
            start_kube_scheduler(d, cfg, "withext", env)
            results.append(run_one(api, "b", "withext", args.pods, args.timeout))
        if "c" in which:
            port = free_port()
            procs.append(start_process(["k8s", "scheduler", "--kubeconfig", str(d / "kubeconfig"),
                                        "--scheduler-name", "secondary", "--no-leader-elect", "--listen",
                                        f"127.0.0.1:{port}", "--handshake-timeout", "36000"], d / "secondary.log"))
            wait_http(f"http://127.0.0.1:{port}/readyz")  # synced: 5,000 nodes read
            results.append(run_one(api, "c", "secondary", args.pods, args.timeout))
        print(f"load average after the run: {os.getloadavg()[0]:.1f}", flush=True)
        if args.json:
            print(json.dumps({"k8s": K8S_VERSION, "nodes": args.nodes, "results": results}, indent=2))
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        subprocess.run([str(CP), "down", str(d)], check=False, capture_output=True, env=env, timeout=120)
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
