"""Objects for unit tests of the Kubernetes backend: Node and Pod JSON dicts like the API server sends."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.register import node_manifest
from gpucluster.model import Allocation, DeviceSpec, NodeSpec, Pod
from gpucluster.scheduler.framework import Status


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


class RecordingBinder:
    """A fake of the Bind plugin port (``KubeBinder`` in production, which writes the Binding): it records what
    it was asked to bind and answers a Status, nothing else. Confirming or forgetting the assumed allocation is
    the scheduler's work (``Scheduler.bind``), so a test through this fake breaks when that work goes.
    ``fail`` answers an error, as an API server that refuses the Binding would."""

    name = "KubeBinder"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail
        self.bound: list[tuple[str, str]] = []
        self.refused: list[str] = []
        self._lock = threading.Lock()

    def bind(self, pod: Pod, allocation: Allocation) -> Status:
        with self._lock:
            if self.fail:
                self.refused.append(pod.key)
                return Status.error(self.name, "API server said no")
            self.bound.append((pod.key, allocation.node))
        return Status.success()


RENDEZVOUS_S = 2.0
"""How long the first thread at the rendezvous waits for a second one (only correct code pays it, and once)."""


class Rendezvous:
    """Holds the first thread that reaches it until a second one does, at most ``timeout`` seconds. Once a wait
    has timed out (the locks kept every other thread out), later arrivals pass at once."""

    def __init__(self, timeout: float = RENDEZVOUS_S) -> None:
        self.timeout = timeout
        self.cond = threading.Condition()
        self.arrived = 0
        self.met = False
        self.gave_up = False

    def __call__(self) -> None:
        with self.cond:
            self.arrived += 1
            if self.arrived >= 2:
                self.met = True
                self.cond.notify_all()
                return
            if not self.gave_up and not self.cond.wait_for(lambda: self.arrived >= 2, self.timeout):
                self.gave_up = True
