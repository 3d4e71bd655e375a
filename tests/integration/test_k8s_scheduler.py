"""gpucluster's own secondary scheduler on a real API server: gangs bind all together or not at all, and of
two replicas only the Lease holder binds; when it dies the other takes over."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import (
    Process,
    bound,
    core_api,
    create_pods,
    gpu_pod,
    list_pods,
    registry,
    wait_until,
)
from kubernetes import client

from gpucluster.kubernetes.binder import SCHEDULED_BY_ANNOTATION
from gpucluster.kubernetes.convert import format_handshake
from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.model import DeviceSpec, NodeSpec

pytestmark = pytest.mark.integration


def _nodes(run: str, count: int, gpus: int) -> list[NodeSpec]:
    return [
        NodeSpec(
            name=f"sec-{run}-{i}", cpu_milli=32000, memory_mib=65536,
            labels={"gpucluster.io/run": run},
            devices=tuple(DeviceSpec(uuid=f"GPU-{run}-{i}-{j}", index=j, vendor="nvidia", model="A100-80GB",
                                     memory_mib=81920) for j in range(gpus)),
        )
        for i in range(count)
    ]


@pytest.fixture
def small_fleet(kube_client: Any) -> Iterator[str]:
    run = uuid.uuid4().hex[:6]
    reg = NodeRegistrar(kube_client, _nodes(run, 2, 2), registry())
    reg.register()
    try:
        yield run
    finally:
        reg.delete()


def _scheduler(kubeconfig: Path, name: str, namespace: str, identity: str, log: Path) -> Process:
    return Process(["k8s", "scheduler", "--kubeconfig", str(kubeconfig), "--scheduler-name", name,
                    "--namespace", namespace, "--lease-name", name, "--identity", identity,
                    "--lease-duration", "3", "--handshake-timeout", "600"], log).start()


def _conditions(core: Any, namespace: str) -> dict[str, str]:
    out = {}
    for pod in list_pods(core, namespace):
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                out[pod["metadata"]["name"]] = c.get("message", "")
    return out


def test_gang_binds_all_or_nothing(kube_control_plane: Any, kube_client: Any, small_fleet: str, namespace: str,
                                   tmp_path: Path) -> None:
    run = small_fleet
    core = core_api(kube_client)
    name = f"sec-{run}"
    sched = _scheduler(kube_control_plane.kubeconfig, name, namespace, "only", tmp_path / "sched.log")
    try:
        # 2 nodes x 2 GPUs; a whole-GPU pod takes one, leaving 3 for a gang that needs 4
        create_pods(core, namespace, [gpu_pod("blocker", name, cores=100, run=run)])
        wait_until(lambda: "blocker" in bound(list_pods(core, namespace)), 60, "the blocker to bind")
        gang = {"gpucluster.io/gang": "train", "gpucluster.io/gang-min-member": "4"}
        create_pods(core, namespace, [gpu_pod(f"w{i}", name, cores=100, annotations=gang, run=run)
                                      for i in range(4)])
        msgs = wait_until(lambda: (c := _conditions(core, namespace)) and len(c) == 4 and c, 60,
                          "PodScheduled=False on all 4 gang members")
        assert all("gang train" in m and "nodes are available" in m for m in msgs.values()), msgs
        assert set(bound(list_pods(core, namespace))) == {"blocker"}  # none of the gang bound
        events = core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
        assert {e.involved_object.name for e in events} >= {f"w{i}" for i in range(4)}
        # room appears: every member binds
        core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
        placed = wait_until(lambda: (b := bound(list_pods(core, namespace))) and len(b) == 4 and b, 60,
                            "the whole gang to bind")
        assert set(placed) == {f"w{i}" for i in range(4)}
        devices = [p["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]
                   for p in list_pods(core, namespace)]
        assert len({d.split(",")[0] for d in devices}) == 4  # four different GPUs
    finally:
        sched.stop()


def test_two_replicas_only_the_leader_binds(kube_control_plane: Any, kube_client: Any, small_fleet: str,
                                            namespace: str, tmp_path: Path) -> None:
    run = small_fleet
    core = core_api(kube_client)
    coord = client.CoordinationV1Api(kube_client)
    name = f"ha-{run}"
    replicas = {ident: _scheduler(kube_control_plane.kubeconfig, name, namespace, ident, tmp_path / f"{ident}.log")
                for ident in ("replica-a", "replica-b")}
    try:
        leader = wait_until(lambda: coord.read_namespaced_lease(name, namespace).spec.holder_identity, 60,
                            "a replica to take the lease")
        create_pods(core, namespace, [gpu_pod(f"a{i}", name, mem=2000, cores=10, run=run) for i in range(6)])
        wait_until(lambda: len(bound(list_pods(core, namespace))) == 6, 60, "6 pods bound")
        by = {p["metadata"]["name"]: p["metadata"]["annotations"][SCHEDULED_BY_ANNOTATION]
              for p in list_pods(core, namespace)}
        assert set(by.values()) == {leader}

        replicas[leader].kill()  # a crash: the lease is not released
        other = next(i for i in replicas if i != leader)
        wait_until(lambda: coord.read_namespaced_lease(name, namespace).spec.holder_identity == other, 30,
                   "the other replica to take over")
        create_pods(core, namespace, [gpu_pod(f"b{i}", name, mem=2000, cores=10, run=run) for i in range(6)])
        wait_until(lambda: len(bound(list_pods(core, namespace))) == 12, 60, "6 more pods bound")
        by = {p["metadata"]["name"]: p["metadata"]["annotations"][SCHEDULED_BY_ANNOTATION]
              for p in list_pods(core, namespace)}
        assert {v for k, v in by.items() if k.startswith("b")} == {other}
        assert {v for k, v in by.items() if k.startswith("a")} == {leader}
    finally:
        for proc in replicas.values():
            proc.stop()


def test_node_with_stale_handshake_gets_no_new_pods(kube_control_plane: Any, kube_client: Any, small_fleet: str,
                                                    namespace: str, tmp_path: Path) -> None:
    run = small_fleet
    core = core_api(kube_client)
    stale, fresh = f"sec-{run}-0", f"sec-{run}-1"
    # the device plugin on `stale` stopped reporting long ago
    core.patch_node(stale, {"metadata": {"annotations": {"hami.io/node-handshake": "Reported_2020.01.01 00:00:00"}}})
    name = f"hs-{run}"
    sched = _scheduler(kube_control_plane.kubeconfig, name, namespace, "only", tmp_path / "sched.log")
    try:
        create_pods(core, namespace, [gpu_pod(f"p{i}", name, cores=100, run=run) for i in range(3)])
        # `fresh` has 2 GPUs: two pods bind there, the third waits with the reason counted
        placed = wait_until(lambda: (b := bound(list_pods(core, namespace))) and len(b) == 2 and b, 60,
                            "two pods bound")
        assert set(placed.values()) == {fresh}
        msgs = wait_until(lambda: _conditions(core, namespace), 60, "a PodScheduled=False condition")
        (msg,) = msgs.values()
        assert "1 NodeHandshakeTimeout" in msg
        # the plugin reports again: the waiting pod goes there
        core.patch_node(stale, {"metadata": {"annotations": {"hami.io/node-handshake": format_handshake(time.time())}}})
        placed = wait_until(lambda: (b := bound(list_pods(core, namespace))) and len(b) == 3 and b, 60,
                            "the third pod bound after the handshake")
        assert sorted(placed.values()) == sorted([fresh, fresh, stale])
    finally:
        sched.stop()
