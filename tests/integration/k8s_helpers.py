"""Helpers for the Kubernetes integration tests of gpucluster's extender and secondary scheduler."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import yaml
from kubernetes import client
from polling import wait_until

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.convert import allocated_annotation

REPO = Path(__file__).resolve().parents[2]
GPUCLUSTER = [sys.executable, "-m", "gpucluster.cli.main"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def registry() -> VendorRegistry:
    return VendorRegistry.from_settings(DeviceSettings())




def mixed_spec(run: str, a100: int = 30, l40s: int = 40, mlu: int = 25, dcu: int = 25, max_tasks: int = 4) -> str:
    """A cluster spec of four pools (two NVIDIA models, Cambricon, Hygon), pool names unique per run."""
    pools = [
        (f"a100-{run}", a100, "nvidia", "A100-SXM4-80GB", 8, 81920),
        (f"l40s-{run}", l40s, "nvidia", "L40S-48GB", 4, 46068),
        (f"mlu-{run}", mlu, "cambricon", "MLU370-X8", 8, 49152),
        (f"dcu-{run}", dcu, "hygon", "Z100", 8, 32768),
    ]
    doc = {
        "apiVersion": "gpucluster.io/v1alpha1", "kind": "ClusterSpec", "name": f"it-{run}",
        "nodePools": [
            {"name": name, "count": count, "cpuMilli": 64000, "memoryMiB": 262144,
             "labels": {"gpucluster.io/run": run},
             "gpu": {"vendor": vendor, "model": model, "count": gpus, "memoryMiB": mem, "maxTasks": max_tasks}}
            for name, count, vendor, model, gpus, mem in pools if count
        ],
    }
    return yaml.safe_dump(doc, sort_keys=False)


_VENDOR_RES = {
    "nvidia": ("nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpucores"),
    "cambricon": ("cambricon.com/vmlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"),
    "hygon": ("hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"),
}


def gpu_pod(name: str, scheduler_name: str, vendor: str = "nvidia", count: int = 1, mem: int = 4000,
            cores: int = 20, annotations: Mapping[str, str] | None = None, run: str = "") -> dict[str, Any]:
    res_count, res_mem, res_cores = _VENDOR_RES[vendor]
    # ``mem`` is MiB; Cambricon's vmemory counts 256 MiB units (HAMi's MemoryFactor)
    amount = -(-mem // 256) if vendor == "cambricon" else mem
    limits = {res_count: str(count), res_mem: str(amount), res_cores: str(cores)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "annotations": dict(annotations or {}), "labels": {"gpucluster.io/run": run}},
        "spec": {
            "schedulerName": scheduler_name,
            "nodeSelector": {"gpucluster.io/run": run} if run else None,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox:1.36",
                            "resources": {"limits": limits, "requests": {"cpu": "10m", "memory": "16Mi"}}}],
        },
    }


def create_pods(core: Any, namespace: str, pods: Iterable[Mapping[str, Any]], workers: int = 16) -> None:
    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(lambda p: core.create_namespaced_pod(namespace, p), pods))


def list_pods(core: Any, namespace: str, label_selector: str = "") -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(namespace, label_selector=label_selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def list_nodes(core: Any, label_selector: str) -> list[dict[str, Any]]:
    resp = core.list_node(label_selector=label_selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def bound(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


def device_usage_violations(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> list[str]:
    """Read back from API objects alone: per device, the sum of memory, cores and tasks that pods' decision
    annotations give it, against what the node's register annotation says it has. Returns violations."""
    reg = registry()
    caps: dict[str, tuple[str, int, int, int]] = {}
    for node in nodes:
        ann = node["metadata"].get("annotations") or {}
        for vendor in reg:
            raw = ann.get(vendor.names.register_annotation)
            if raw:
                for d in vendor.parse_register(raw, node["metadata"]["name"]):
                    caps[d.uuid] = (node["metadata"]["name"], d.memory_mib, d.cores_pct, d.split_count)
    mem: dict[str, int] = defaultdict(int)
    cores: dict[str, int] = defaultdict(int)
    tasks: dict[str, int] = defaultdict(int)
    problems: list[str] = []
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if not node:
            continue
        ann = pod["metadata"].get("annotations") or {}
        for vendor in reg:
            text = ann.get(allocated_annotation(vendor))
            if not text:
                continue
            for container in text.split(";"):
                for dev in (d for d in container.split(":") if d):
                    uuid, _kind, m, c = dev.split(",")
                    if uuid not in caps:
                        problems.append(f"{pod['metadata']['name']}: unknown device {uuid}")
                        continue
                    if caps[uuid][0] != node:
                        problems.append(f"{pod['metadata']['name']}: device {uuid} is not on {node}")
                    mem[uuid] += int(m)
                    cores[uuid] += int(c)
                    tasks[uuid] += 1
    for uuid, (node, cap_mem, cap_cores, cap_tasks) in caps.items():
        if mem[uuid] > cap_mem:
            problems.append(f"{node} {uuid}: memory {mem[uuid]} > {cap_mem}")
        if cores[uuid] > cap_cores:
            problems.append(f"{node} {uuid}: cores {cores[uuid]} > {cap_cores}")
        if tasks[uuid] > cap_tasks:
            problems.append(f"{node} {uuid}: tasks {tasks[uuid]} > {cap_tasks}")
    return problems


class Process:
    """A gpucluster command run as its own process (so tests can kill it like a crash)."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.args = args
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Process:
        logf = open(self.log_path, "ab")  # noqa: SIM115 - handed to the child
        env = {**os.environ, "GPUCLUSTER_LOG": os.environ.get("GPUCLUSTER_LOG", "INFO")}
        self.proc = subprocess.Popen([*GPUCLUSTER, *self.args], stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        logf.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def start_extender(kubeconfig: Path, port: int, log_path: Path, *extra: str) -> Process:
    proc = Process(["k8s", "extender", "--kubeconfig", str(kubeconfig), "--listen", f"127.0.0.1:{port}",
                    *extra], log_path).start()

    def healthy() -> bool:
        if not proc.alive():
            raise AssertionError(f"extender exited:\n{proc.log()[-3000:]}")
        # /healthz answers at once (liveness); /readyz once the informer has synced
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200

    wait_until(healthy, 60, "the extender to answer /readyz")
    return proc


def a100_twins(kube_client: Any, tmp_path: Path, pool: str, run: str, nodes: int) -> Any:
    """Register ``nodes`` twin nodes of one pool (A100 80 GB x2, 4 tasks a GPU, label gpucluster.io/run=run) as
    Node objects; returns the NodeRegistrar (``.delete()`` removes them)."""
    from gpucluster.kubernetes.register import NodeRegistrar
    from gpucluster.spec import load_cluster

    spec = tmp_path / f"{pool}.yaml"
    spec.write_text(yaml.safe_dump({
        "apiVersion": "gpucluster.io/v1alpha1", "kind": "ClusterSpec", "name": pool,
        "nodePools": [{"name": pool, "count": nodes, "cpuMilli": 64000, "memoryMiB": 262144,
                       "labels": {"gpucluster.io/run": run},
                       "gpu": {"vendor": "nvidia", "model": "A100-SXM4-80GB", "count": 2, "memoryMiB": 81920,
                               "maxTasks": 4}}],
    }))
    reg = NodeRegistrar(kube_client, load_cluster(spec).nodes, registry(), interval=10.0)
    reg.register()
    return reg


def extender_requests(port: int, verb: str, result: str = "ok") -> float:
    """The extender's ``gpucluster_extender_requests_total`` for ``verb`` and ``result`` (0 when absent)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    prefix = f'gpucluster_extender_requests_total{{result="{result}",verb="{verb}"}} '
    return next((float(ln[len(prefix):]) for ln in text.splitlines() if ln.startswith(prefix)), 0.0)


def core_api(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


@contextlib.contextmanager
def installed_crd(api_client: Any, group: str, version: str, names: Mapping[str, Any],
                  spec_schema: Mapping[str, Any]) -> Iterator[None]:
    """A namespaced CustomResourceDefinition written by a test (``names``: plural, singular, kind ...;
    ``spec_schema``: the openAPIV3Schema of ``spec``; ``status`` is kept as is), waited for until the API server
    says it is Established, and deleted afterwards (waited for until it is gone: its custom objects are removed
    first, and meanwhile a create of the same name is refused)."""
    ext = client.ApiextensionsV1Api(api_client)
    plural = names["plural"]
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": "Namespaced", "names": dict(names),
            "versions": [{"name": version, "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {
                    "spec": dict(spec_schema),
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}],
        },
    }
    ext.create_custom_resource_definition(crd)

    def established() -> bool:
        got = ext.read_custom_resource_definition(f"{plural}.{group}")
        return any(c.type == "Established" and c.status == "True" for c in got.status.conditions or [])

    wait_until(established, 60, f"the {names['kind']} CRD to be established")
    try:
        yield
    finally:
        with contextlib.suppress(client.ApiException):
            ext.delete_custom_resource_definition(f"{plural}.{group}")

        def gone() -> bool:  # the next test's install of the same CRD is refused while this one is being deleted
            try:
                ext.read_custom_resource_definition(f"{plural}.{group}")
            except client.ApiException as exc:
                return exc.status == 404
            return False

        wait_until(gone, 60, f"the {names['kind']} CRD to be deleted")
