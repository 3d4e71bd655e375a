"""Objects for unit tests of the Kubernetes backend: Node and Pod JSON dicts like the API server sends."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.register import node_manifest
from gpucluster.model import DeviceSpec, NodeSpec


def registry() -> VendorRegistry:
    return VendorRegistry.from_settings(DeviceSettings())


def spec_node(name: str, gpus: int = 4, vendor: str = "nvidia", model: str = "A100-80GB", mem: int = 81920,
              max_tasks: int = 4) -> NodeSpec:
    devices = tuple(DeviceSpec(uuid=f"{name}-dev{j}", index=j, vendor=vendor, model=model, memory_mib=mem,
                               max_tasks=max_tasks) for j in range(gpus))
    return NodeSpec(name=name, cpu_milli=32000, memory_mib=65536, devices=devices, rack="r1", leaf="l1")


def node_obj(name: str, now: float | None = None, ready: bool = True, **kw: Any) -> dict[str, Any]:
    obj = node_manifest(spec_node(name, **kw), registry(), time.time() if now is None else now)
    obj["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
    return obj


def pod_obj(name: str, count: int = 1, mem: int = 4000, cores: int = 25, namespace: str = "default",
            node: str = "", annotations: Mapping[str, str] | None = None, phase: str = "Pending",
            containers: int = 1) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": str(count), "nvidia.com/gpumem": str(mem), "nvidia.com/gpucores": str(cores)}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "annotations": dict(annotations or {})},
        "spec": {"nodeName": node or None, "schedulerName": "gpucluster",
                 "containers": [{"name": f"c{i}", "resources": {"limits": limits,
                                                                "requests": {"cpu": "100m", "memory": "64Mi"}}}
                                for i in range(containers)]},
        "status": {"phase": phase},
    }
