"""Gang conventions users' workload controllers already write, on a real API server with gpucluster's secondary
scheduler: pods labelled ``scheduling.x-k8s.io/pod-group`` whose PodGroup (scheduler-plugins' coscheduling CRD,
created here) says ``minMember: 4`` bind all together or not at all."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import Process, bound, core_api, create_pods, gpu_pod, installed_crd, list_pods, registry, wait_until
from kubernetes import client

from gpucluster.kubernetes.gangs import POD_GROUP_LABEL
from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.model import DeviceSpec, NodeSpec

pytestmark = pytest.mark.integration

GROUP, VERSION, PLURAL = "scheduling.x-k8s.io", "v1alpha1", "podgroups"


@pytest.fixture
def pod_group_crd(kube_client: Any) -> Iterator[None]:
    """scheduler-plugins' PodGroup CRD (only what we read: spec.minMember), removed afterwards."""
    with installed_crd(kube_client, GROUP, VERSION,
                       {"plural": PLURAL, "singular": "podgroup", "kind": "PodGroup", "shortNames": ["pg"]},
                       {"type": "object", "properties": {"minMember": {"type": "integer", "minimum": 0}},
                        "x-kubernetes-preserve-unknown-fields": True}):
        yield


def _conditions(core: Any, namespace: str) -> dict[str, str]:
    out = {}
    for pod in list_pods(core, namespace):
        for c in pod["status"].get("conditions") or []:
            if c["type"] == "PodScheduled" and c["status"] == "False":
                out[pod["metadata"]["name"]] = c.get("message", "")
    return out


@pytest.mark.usefixtures("pod_group_crd")
def test_pod_group_label_with_min_member_4_binds_all_or_nothing(
    kube_control_plane: Any, kube_client: Any, namespace: str, tmp_path: Path,
) -> None:
    run = uuid.uuid4().hex[:6]
    core = core_api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    nodes = [NodeSpec(name=f"pg-{run}-{i}", cpu_milli=32000, memory_mib=65536, labels={"gpucluster.io/run": run},
                      devices=tuple(DeviceSpec(uuid=f"GPU-pg-{run}-{i}-{j}", index=j, vendor="nvidia",
                                               model="A100-80GB", memory_mib=81920) for j in range(2)))
             for i in range(2)]
    reg = NodeRegistrar(kube_client, nodes, registry())
    reg.register()
    name = f"pg-{run}"
    sched = Process(["k8s", "scheduler", "--kubeconfig", str(kube_control_plane.kubeconfig), "--scheduler-name",
                     name, "--namespace", namespace, "--lease-name", name, "--lease-duration", "3",
                     "--handshake-timeout", "600"], tmp_path / "sched.log").start()
    try:
        # 2 nodes x 2 GPUs; a whole-GPU pod takes one, leaving 3
        create_pods(core, namespace, [gpu_pod("blocker", name, cores=100, run=run)])
        wait_until(lambda: "blocker" in bound(list_pods(core, namespace)), 60, "the blocker to bind")

        def member(i: int) -> dict[str, Any]:
            pod = gpu_pod(f"w{i}", name, cores=100, run=run)
            pod["metadata"]["labels"][POD_GROUP_LABEL] = "train"
            return pod

        # members without their PodGroup wait and say so
        create_pods(core, namespace, [member(i) for i in range(3)])
        msgs = wait_until(lambda: (c := _conditions(core, namespace)) and len(c) == 3 and c, 60,
                          "the members to wait for their PodGroup")
        assert all(f"PodGroup {namespace}/train" in m and "not found" in m for m in msgs.values()), msgs
        # the PodGroup says 4: three members are not enough
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": "train"},
            "spec": {"minMember": 4}})
        msgs = wait_until(lambda: (c := _conditions(core, namespace)) and
                          all("not found" not in m for m in c.values()) and len(c) == 3 and c, 60,
                          "the members to read their PodGroup")
        assert all("has 3 of the 4" in m and "GangNotReady" in m for m in msgs.values()), msgs
        # four members, three free GPUs: none binds
        create_pods(core, namespace, [member(3)])
        msgs = wait_until(lambda: (c := _conditions(core, namespace)) and len(c) == 4 and
                          all("none of its 4 pods bind" in m for m in c.values()) and c, 60,
                          "the 4-member gang to be refused as a whole")
        assert set(bound(list_pods(core, namespace))) == {"blocker"}
        # room for all four: all bind, on four different GPUs
        core.delete_namespaced_pod("blocker", namespace, grace_period_seconds=0)
        placed = wait_until(lambda: (b := bound(list_pods(core, namespace))) and len(b) == 4 and b, 60,
                            "the whole pod group to bind")
        assert set(placed) == {f"w{i}" for i in range(4)}
        devices = [p["metadata"]["annotations"]["hami.io/vgpu-devices-to-allocate"]
                   for p in list_pods(core, namespace)]
        assert len({d.split(",")[0] for d in devices}) == 4
        assert "Traceback" not in sched.log()
    finally:
        sched.stop()
        reg.delete()


def test_kubernetes_pod_group_min_count_on_1_37(kube_control_plane: Any, kube_client: Any, namespace: str,
                                               tmp_path: Path) -> None:
    """1.37's own gang API (PodGroup ``scheduling.k8s.io/v1alpha3``, served here with the GenericWorkload gate):
    pods naming a PodGroup with ``gang.minCount: 2`` in ``spec.schedulingGroup`` wait for each other; a PodGroup
    with the ``basic`` policy is no gang."""
    if kube_control_plane.minor != "1.37":
        pytest.skip(f"Kubernetes {kube_control_plane.minor} serves no scheduling.k8s.io/v1alpha3 PodGroup")
    run = uuid.uuid4().hex[:6]
    core = core_api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    nodes = [NodeSpec(name=f"kpg-{run}-0", cpu_milli=32000, memory_mib=65536, labels={"gpucluster.io/run": run},
                      devices=tuple(DeviceSpec(uuid=f"GPU-kpg-{run}-{j}", index=j, vendor="nvidia",
                                               model="A100-80GB", memory_mib=81920) for j in range(4)))]
    reg = NodeRegistrar(kube_client, nodes, registry())
    reg.register()
    name = f"kpg-{run}"
    for group, policy in (("pair", {"gang": {"minCount": 2}}), ("solo", {"basic": {}})):
        custom.create_namespaced_custom_object("scheduling.k8s.io", "v1alpha3", namespace, "podgroups", {
            "apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "PodGroup", "metadata": {"name": group},
            "spec": {"schedulingPolicy": policy}})
    sched = Process(["k8s", "scheduler", "--kubeconfig", str(kube_control_plane.kubeconfig), "--scheduler-name",
                     name, "--no-leader-elect", "--handshake-timeout", "600"], tmp_path / "sched.log").start()

    def member(pod_name: str, group: str) -> dict[str, Any]:
        pod = gpu_pod(pod_name, name, cores=100, run=run)
        pod["spec"]["schedulingGroup"] = {"podGroupName": group}
        return pod

    try:
        create_pods(core, namespace, [member("a0", "pair"), member("s0", "solo")])
        wait_until(lambda: "s0" in bound(list_pods(core, namespace)), 60, "the basic-policy pod to bind alone")
        msgs = wait_until(lambda: (c := _conditions(core, namespace)) and "a0" in c and c, 60,
                          "the first gang member to wait")
        assert "has 1 of the 2" in msgs["a0"] and "GangNotReady" in msgs["a0"], msgs
        assert set(bound(list_pods(core, namespace))) == {"s0"}
        create_pods(core, namespace, [member("a1", "pair")])
        wait_until(lambda: {"a0", "a1", "s0"} == set(bound(list_pods(core, namespace))), 60,
                   "both members of the pair to bind")
        assert "Traceback" not in sched.log()
    finally:
        sched.stop()
        reg.delete()
