from __future__ import annotations

import math

import pytest

from gpucluster.kubernetes.convert import (
    KubeInputError,
    allocation_from_pod,
    decision_annotations,
    format_handshake,
    node_info,
    node_names,
    parse_handshake,
    parse_pod,
)
from gpucluster.model import Allocation, DeviceGrant

from .helpers import node_obj, pod_obj, registry, spec_node


def test_handshake_formats() -> None:
    t = parse_handshake("Reported_2024.05.16 09:12:13")
    assert parse_handshake("Requesting_2024-05-16 09:12:13") == t
    assert parse_handshake("Reported_2024-05-16T09:12:13Z") == t
    assert parse_handshake("Reported_2024.05.16 09:12:13.123456") == t
    assert parse_handshake(format_handshake(t)) == t
    assert parse_handshake(None) == math.inf
    assert parse_handshake("Deleted_2024.05.16 09:12:13") == -math.inf
    with pytest.raises(KubeInputError, match="unknown time format"):
        parse_handshake("Reported_yesterday")


def test_registered_node_round_trips() -> None:
    spec = spec_node("n1", gpus=3, model="A100-80GB")
    info = node_info(node_obj("n1", now=1000.0, gpus=3), registry())
    assert info.ready
    assert info.handshake == 1000.0
    assert [(d.uuid, d.model, d.memory_mib, d.max_tasks) for d in info.spec.devices] == [
        (d.uuid, d.model, d.memory_mib, d.max_tasks) for d in spec.devices
    ]
    assert info.spec.cpu_milli == 32000
    assert info.spec.rack == "r1"


def test_bad_register_annotation_names_node_and_field() -> None:
    obj = node_obj("n1")
    obj["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "[{not json"
    with pytest.raises(KubeInputError, match=r"node n1.*hami.io/node-nvidia-register.*not valid JSON"):
        node_info(obj, registry())


def test_decision_annotations_in_hami_format_and_back() -> None:
    reg = registry()
    node = spec_node("n1", gpus=4)
    pod = parse_pod(pod_obj("p", count=2, mem=4000, cores=30, containers=2), reg)
    alloc = Allocation(
        pod_key=pod.key, node="n1", cpu_milli=pod.cpu_milli, memory_mib=pod.memory_mib,
        devices=((DeviceGrant(0, "n1-dev0", "nvidia", 4000, 300), DeviceGrant(1, "n1-dev1", "nvidia", 4000, 300)),
                 (DeviceGrant(2, "n1-dev2", "nvidia", 4000, 300),)),
    )
    ann = decision_annotations(alloc, reg, now=1700000000.5)
    assert ann["hami.io/vgpu-devices-to-allocate"] == "n1-dev0,NVIDIA,4000,30:n1-dev1,NVIDIA,4000,30:;n1-dev2,NVIDIA,4000,30:;"
    assert ann["hami.io/vgpu-devices-allocated"] == ann["hami.io/vgpu-devices-to-allocate"]
    assert ann["hami.io/vgpu-node"] == "n1"
    assert ann["hami.io/vgpu-time"] == "1700000000"
    bound = parse_pod(pod_obj("p", count=2, containers=2, node="n1", annotations=ann), reg)
    back = allocation_from_pod(bound, node, reg)
    assert back.devices == alloc.devices
    assert back.cpu_milli == 200


def test_annotation_naming_a_foreign_device_is_an_error() -> None:
    reg = registry()
    ann = {"hami.io/vgpu-devices-allocated": "GPU-elsewhere,NVIDIA,1000,10:;"}
    pod = parse_pod(pod_obj("p", node="n1", annotations=ann), reg)
    with pytest.raises(KubeInputError, match=r"pod default/p.*device GPU-elsewhere is not on node n1"):
        allocation_from_pod(pod, spec_node("n1"), reg)


def test_canonical_quantities_from_the_api_server_are_accepted() -> None:
    obj = pod_obj("p")
    obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "4k"
    pod = parse_pod(obj, registry())
    assert pod.containers[0].devices[0].memory_mib == 4000
    obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = "1500m"
    with pytest.raises(KubeInputError, match=r"nvidia\.com/gpumem: must be an integer"):
        parse_pod(obj, registry())


def test_extender_args_with_names_or_nodes() -> None:
    assert node_names({"NodeNames": ["a", "b"]}) == (["a", "b"], None)
    names, items = node_names({"Nodes": {"items": [{"metadata": {"name": "a"}}]}})
    assert names == ["a"]
    assert items is not None
    with pytest.raises(KubeInputError, match=r"nodes.items\[0\].metadata.name: missing"):
        node_names({"nodes": {"items": [{"metadata": {}}]}})
