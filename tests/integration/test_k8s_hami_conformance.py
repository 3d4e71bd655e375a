"""Ported HAMi cases on a real API server: kube-scheduler (v1.37.2 and v1.35.4) with gpucluster's extender (``--policy
binpack``, HAMi's node binpack + GPU spread, and ``--device-config`` with the ``hami.io/*`` resource names of
HAMi's scheduler tests) must bind each pod to the node HAMi picks and write the same
``hami.io/vgpu-devices-to-allocate`` (and Cambricon/Hygon) annotation HAMi writes, so HAMi's device plugins would
mount the same devices. Cases: ``pkg/scheduler/scheduler_test.go`` Test_Filter, ``score_test.go`` Test_calcScore,
``cambricon/device_test.go`` and ``hygon/device_test.go`` Test_PatchAnnotations (HAMi v2.10.0)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import core_api, create_pods, free_port, list_pods, start_extender, wait_until

from gpucluster.devices import VendorRegistry, load_device_config
from gpucluster.kubernetes.manifests import scheduler_config

pytestmark = pytest.mark.integration

DEVICE_CONFIG = """
nvidia:
  resourceCountName: hami.io/gpu
  resourceMemoryName: hami.io/gpumem
  resourceMemoryPercentageName: hami.io/gpumem-percentage
  resourceCoreName: hami.io/gpucores
  defaultMemory: 0
  defaultCores: 0
  defaultGPUNum: 1
"""


def nvidia_register(*devices: str) -> str:
    return json.dumps([{"id": d, "index": i, "count": 10, "devmem": 8000, "devcore": 100, "type": "NVIDIA",
                        "numa": 0, "health": True} for i, d in enumerate(devices)])


def gpu(mem: int, cores: int) -> dict[str, str]:
    return {"hami.io/gpu": "1", "hami.io/gpumem": str(mem), "hami.io/gpucores": str(cores)}


def pod(name: str, group: str, scheduler: str, containers: list[Mapping[str, str]],
        init: list[Mapping[str, str]] | None = None, annotations: Mapping[str, str] | None = None,
        node: str = "", allocated: str = "") -> dict[str, Any]:
    """A pod of a case's group; with ``node`` it is already bound there, holding ``allocated``."""
    def ctr(prefix: str, k: int, limits: Mapping[str, str]) -> dict[str, Any]:
        return {"name": f"{prefix}{k}", "image": "busybox:1.36",
                "resources": {"limits": dict(limits), "requests": {"cpu": "10m", "memory": "16Mi"}}}

    ann = dict(annotations or {})
    if allocated:
        ann.update({"hami.io/vgpu-devices-allocated": allocated, "hami.io/vgpu-node": node})
    spec: dict[str, Any] = {
        "schedulerName": scheduler, "nodeSelector": {"hami-case": group}, "terminationGracePeriodSeconds": 0,
        "containers": [ctr("c", k, c) for k, c in enumerate(containers)],
    }
    if init:
        spec["initContainers"] = [ctr("init", k, c) for k, c in enumerate(init)]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "annotations": ann}, "spec": spec}


def policies(node: str, gpu_policy: str) -> dict[str, str]:
    return {"hami.io/node-scheduler-policy": node, "hami.io/gpu-scheduler-policy": gpu_policy}


def test_extender_writes_hamis_annotations(kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any,
                                           gpu_node_factory: Any, namespace: str, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:6]
    core = core_api(kube_client)
    scheduler = f"hami-{run}"
    config_path = tmp_path / "device-config.yaml"
    config_path.write_text(DEVICE_CONFIG)
    registry = VendorRegistry.from_settings(load_device_config(config_path).settings)

    # Test_Filter's cluster, once per case (a case's pods only see its own nodes): node1 holds pod1 on device1
    # (2000 MiB, 25 %), node2 holds pod2 on device4 (6000 MiB, 75 %)
    filter_cases = {
        "bb": (policies("binpack", "binpack"), [gpu(1000, 20)], None, "node2", "device4,NVIDIA,1000,20:;"),
        "init": (policies("binpack", "binpack"), [gpu(4000, 20)], [gpu(5000, 20)], "node2",
                 "device3,NVIDIA,5000,20:;device3,NVIDIA,4000,20:;"),
        "sb": (policies("spread", "binpack"), [gpu(1000, 20)], None, "node1", "device1,NVIDIA,1000,20:;"),
        "ss": (policies("spread", "spread"), [gpu(1000, 20)], None, "node1", "device2,NVIDIA,1000,20:;"),
    }
    held: list[dict[str, Any]] = []
    wanted: list[dict[str, Any]] = []
    expect: dict[str, tuple[str, dict[str, str]]] = {}
    for group, (pod_annotations, containers, init, node, text) in filter_cases.items():
        g = f"{group}-{run}"
        n1, n2 = f"{g}-node1", f"{g}-node2"
        gpu_node_factory(n1, {"hami.io/gpu": 20}, {"hami.io/node-nvidia-register": nvidia_register("device1", "device2")},
                         {"hami-case": g})
        gpu_node_factory(n2, {"hami.io/gpu": 20}, {"hami.io/node-nvidia-register": nvidia_register("device3", "device4")},
                         {"hami-case": g})
        held.append(pod(f"pod1-{group}", g, scheduler, [gpu(2000, 25)], node=n1, allocated="device1,NVIDIA,2000,25:;"))
        held.append(pod(f"pod2-{group}", g, scheduler, [gpu(6000, 75)], node=n2, allocated="device4,NVIDIA,6000,75:;"))
        wanted.append(pod(f"filter-{group}", g, scheduler, containers, init, pod_annotations))
        expect[f"filter-{group}"] = (f"{g}-{node}", {"hami.io/vgpu-devices-to-allocate": text})

    # Test_calcScore "one node two device one pod two containers use two device with spread"
    g = f"calc-{run}"
    gpu_node_factory(f"{g}-node1", {"hami.io/gpu": 20}, {"hami.io/node-nvidia-register": nvidia_register("uuid1", "uuid2")},
                     {"hami-case": g})
    wanted.append(pod("calc-two-containers", g, scheduler, [gpu(8000, 30), gpu(1000, 30)]))
    expect["calc-two-containers"] = (f"{g}-node1", {
        "hami.io/vgpu-devices-to-allocate": "uuid2,NVIDIA,8000,30:;uuid1,NVIDIA,1000,30:;"})

    # Cambricon Test_PatchAnnotations "exist device": an MLU node as HAMi v2.10 sees it, from its capacity
    g = f"mlu-{run}"
    mlu_node = f"{g}-node1"
    gpu_node_factory(mlu_node, {"cambricon.com/mlu.smlu.vcore": 100, "cambricon.com/mlu.smlu.vmemory": 2000},
                     None, {"hami-case": g})
    wanted.append(pod("mlu-exist-device", g, scheduler, [{"cambricon.com/vmlu": "1",
                                                          "cambricon.com/mlu.smlu.vmemory": "1000",
                                                          "cambricon.com/mlu.smlu.vcore": "1"}]))
    expect["mlu-exist-device"] = (mlu_node, {
        "hami.io/cambricon-mlu-devices-to-allocate": f"{mlu_node}-cambricon-mlu-0,MLU,256000,1:;",
        "CAMBRICON_DSMLU_PROFILE": "0_1_1000", "CAMBRICON_DSMLU_ASSIGNED": "false"})

    # Hygon Test_PatchAnnotations "exist device": a DCU registered in HAMi's colon-separated format
    g = f"dcu-{run}"
    gpu_node_factory(f"{g}-node1", {"hygon.com/dcunum": 10},
                     {"hami.io/node-dcu-register": "test1,10,4096,100,DCU,0,true,0,hami-core:"}, {"hami-case": g})
    wanted.append(pod("dcu-exist-device", g, scheduler, [{"hygon.com/dcunum": "1", "hygon.com/dcumem": "2048",
                                                          "hygon.com/dcucores": "1"}]))
    expect["dcu-exist-device"] = (f"{g}-node1", {"hami.io/dcu-devices-to-allocate": "test1,DCU,2048,1:;"})

    create_pods(core, namespace, held)
    port = free_port()
    ext = start_extender(kube_control_plane.kubeconfig, port, tmp_path / "extender.log", "--scheduler-name",
                         scheduler, "--policy", "binpack", "--device-config", str(config_path))
    try:
        cfg = scheduler_config(f"http://127.0.0.1:{port}", registry, scheduler,
                               kube_version=kube_control_plane.minor)
        cfg["podInitialBackoffSeconds"] = 1
        cfg["podMaxBackoffSeconds"] = 2
        kube_scheduler_factory(yaml.safe_dump(cfg, sort_keys=False), name=f"hami-{run}")
        # the extender must have accounted the pods already running before the cases' pods arrive
        wait_until(lambda: "gpucluster_scheduler_unaccounted 0.0" in _metrics(port) and _pods_held(port) >= len(held),
                   60, "the running pods to be accounted")
        create_pods(core, namespace, wanted)

        def all_bound() -> dict[str, dict[str, Any]] | None:
            got = {p["metadata"]["name"]: p for p in list_pods(core, namespace) if p["metadata"]["name"] in expect}
            return got if all(p["spec"].get("nodeName") for p in got.values()) and len(got) == len(expect) else None

        got = wait_until(all_bound, 120, "every case's pod to be bound")
        for name, (node, want) in expect.items():
            p = got[name]
            assert p["spec"]["nodeName"] == node, name
            ann = p["metadata"]["annotations"]
            for key, value in want.items():
                assert ann.get(key) == value, f"{name}: {key}"
            assert ann["hami.io/vgpu-node"] == node
    finally:
        ext.stop()


def _metrics(port: int) -> str:
    import httpx

    return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text


def _pods_held(port: int) -> float:
    for line in _metrics(port).splitlines():
        if line.startswith("gpucluster_scheduler_pods "):
            return float(line.split()[1])
    return 0.0
