"""HAMi v2.10 node and pod details in the Kubernetes conversions: capacity-built MLUs, device cordon, extended
resources, init containers in the decision annotations and back."""

from __future__ import annotations

from typing import Any

from gpucluster.kubernetes.convert import allocation_from_pod, decision_annotations, node_info, parse_pod
from gpucluster.model import ClusterState

from .helpers import node_obj, registry


def test_mlu_node_from_capacity_and_cordon_and_extended() -> None:
    obj: dict[str, Any] = {
        "metadata": {"name": "m1", "annotations": {"hami.io/device-cordon": " m1-cambricon-mlu-1 ,"}},
        "status": {"capacity": {"cpu": "8", "memory": "32Gi", "cambricon.com/mlu.smlu.vcore": "200",
                                "cambricon.com/mlu.smlu.vmemory": "300", "example.com/fpga": "2"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }
    info = node_info(obj, registry())
    assert [(d.uuid, d.memory_mib, d.max_tasks, d.cordoned) for d in info.spec.devices] == [
        ("m1-cambricon-mlu-0", 300 * 256 * 100 // 200, 100, False),
        ("m1-cambricon-mlu-1", 300 * 256 * 100 // 200, 100, True),
    ]
    assert info.spec.extended == {"example.com/fpga": 2}
    # cordoning changes the node's signature: the scheduler rebuilds its row
    obj["metadata"]["annotations"]["hami.io/device-cordon"] = ""
    assert node_info(obj, registry()).signature != info.signature


def test_init_containers_round_trip_through_the_annotations() -> None:
    reg = registry()
    node = node_info(node_obj("n1", gpus=2, mem=8000), reg).spec
    state = ClusterState([node])
    raw = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {
        "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1,
                                                                      "nvidia.com/gpumem": 6000}}}],
        "containers": [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 2000,
                                                              "nvidia.com/gpucores": 20}}},
                       {"name": "b", "resources": {"limits": {"cpu": "1"}}}]}}
    from gpucluster.scheduler import Scheduler, binpack_spread_profile

    d = Scheduler(state, binpack_spread_profile()).schedule_and_bind(parse_pod(raw, reg))
    assert d.allocation is not None
    ann = decision_annotations(d.allocation, reg, 0.0)
    text = ann["hami.io/vgpu-devices-to-allocate"]
    # the init container first, then one group per app container (the second has none)
    assert text == "n1-dev1,NVIDIA,6000,0:;n1-dev1,NVIDIA,2000,20:;;"
    # the device holds the init container's peak memory, the app's cores, one task
    assert (state.dev_mem_used[0, 1], state.dev_core_used[0, 1], state.dev_tasks[0, 1]) == (6000, 200, 1)
    bound = parse_pod({**raw, "metadata": {**raw["metadata"], "annotations": ann}}, reg)
    again = allocation_from_pod(bound, node, reg)
    assert again.init_devices == d.allocation.init_devices and again.devices == d.allocation.devices
    assert again.device_usage() == d.allocation.device_usage()
    state.release("ns/p")
    assert int(state.dev_mem_used.sum()) == 0 and int(state.dev_tasks.sum()) == 0
