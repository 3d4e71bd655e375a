"""DRA (resource.k8s.io/v1) in the cluster view and in our own claim allocation, without a server: ResourceSlices
become device rows (a GPU published by HAMi's annotations and a DRA driver counted once), allocated claims hold
their devices, taints cordon, and a pod's claims are allocated by our placement."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes import KubeCluster
from gpucluster.kubernetes.cluster import DRA_CONTAINER_PREFIX, ClaimNotReadyError
from gpucluster.kubernetes.convert import decision_annotations, parse_pod
from gpucluster.kubernetes.dra import CLAIM_KEY_PREFIX, Selectors, parse_claim, parse_slice
from gpucluster.kubernetes.extender import DRA_NOTE_KEY, ExtenderLogic

from .dra_objects import (
    HAMI_DRIVER,
    NVIDIA_DRIVER,
    allocated,
    claim,
    claim_pod,
    device_class,
    hami_device,
    nvidia_device,
    resource_slice,
)
from .helpers import node_obj, pod_obj, registry


def cluster(nodes: int = 2, gpus: int = 4, dra: str = "nvidia", hami_gpus: int | None = None,
            policy: str = "binpack") -> KubeCluster:
    """``nodes`` nodes whose first ``hami_gpus`` GPUs (default all) HAMi's annotations publish; a DRA driver
    publishes all ``gpus`` (same UUIDs)."""
    c = KubeCluster(registry(), policy)
    c.set_nodes([node_obj(f"n{i}", gpus=gpus if hami_gpus is None else hami_gpus) for i in range(nodes)])
    make = nvidia_device if dra == "nvidia" else hami_device
    driver = NVIDIA_DRIVER if dra == "nvidia" else HAMI_DRIVER
    c.set_classes([device_class("gpu.nvidia.com", NVIDIA_DRIVER, extended="example.com/gpu"),
                   device_class("hami-gpu", HAMI_DRIVER)])
    c.set_slices([resource_slice(f"n{i}", driver, [make(f"n{i}", j) for j in range(gpus)]) for i in range(nodes)])
    return c


# ------------------------------------------------------------------------------------------------ reading
def test_slice_shapes_nvidia_and_hami() -> None:
    nv = parse_slice(resource_slice("n0", NVIDIA_DRIVER, [nvidia_device("n0", 0), {
        "name": "nic-0", "attributes": {"type": {"string": "nic"}}}]))
    assert [d.key for d in nv.devices] == ["gpu.nvidia.com/n0/gpu-0"]  # the NIC is no GPU of ours
    dev = nv.devices[0]
    assert (dev.uuid, dev.memory_mib, dev.shared, dev.vendor) == ("n0-dev0", 80 * 1024, False, "nvidia")
    assert dev.attributes[NVIDIA_DRIVER]["productName"] == "NVIDIA A100-SXM4-80GB"
    hs = parse_slice(resource_slice("n0", HAMI_DRIVER, [hami_device("n0", 1)]))
    h = hs.devices[0]
    assert h.shared and h.cores_pct == 100 and h.policies["memory"].minimum == 256 * 1024 * 1024


def test_gpu_published_both_ways_is_counted_once_and_dra_only_gpus_are_added() -> None:
    c = cluster(nodes=1, gpus=6, hami_gpus=4)
    devs = c.state.node_spec("n0").devices
    assert len(devs) == 6  # 4 HAMi-published (also DRA), 2 DRA-only
    assert [d.hami for d in devs] == [True] * 4 + [False] * 2
    assert all(d.dra for d in devs)
    assert c.summary()["devices"] == 6


def test_claim_allocated_by_someone_else_is_used_and_a_hami_pod_cannot_have_that_gpu() -> None:
    c = cluster(nodes=1, gpus=4)
    c.set_claims([allocated(claim("c1", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-2"}])])
    i = c.state.node_index["n0"]
    assert c.state.dev_core_used[i, 2] == 1000 and c.state.dev_tasks[i, 2] == 1
    assert CLAIM_KEY_PREFIX + "default/c1" in c.state.allocations
    whole = parse_pod(pod_obj("p4", count=4, mem=0, cores=100), c.registry)
    assert not c.decide(whole).ok  # one of the four GPUs is claimed
    three = c.decide(parse_pod(pod_obj("p3", count=3, mem=0, cores=100), c.registry))
    assert three.ok and three.allocation is not None
    assert sorted(g.device_index for g in three.allocation.grants) == [0, 1, 3]
    # the claim is deallocated: its GPU is free again
    c.apply_claim(claim("c1", "gpu.nvidia.com"))
    assert c.state.dev_core_used[i, 2] == 0


def test_tainted_device_takes_no_new_placement() -> None:
    c = KubeCluster(registry(), "binpack")
    c.set_nodes([node_obj("n0", gpus=2)])
    c.set_slices([resource_slice("n0", NVIDIA_DRIVER, [
        nvidia_device("n0", 0, taints=[{"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule"}]),
        nvidia_device("n0", 1, taints=[{"key": "info", "effect": "None"}])])])
    assert [d.cordoned for d in c.state.node_spec("n0").devices] == [True, False]
    assert not c.decide(parse_pod(pod_obj("p", count=2), c.registry)).ok


def test_claims_on_unknown_devices_hold_nothing_and_old_pool_generations_are_ignored() -> None:
    c = cluster(nodes=1, gpus=2)
    old = resource_slice("n0", NVIDIA_DRIVER, [nvidia_device("n0", j) for j in range(4)], generation=0)
    old["metadata"]["name"] = "old-generation"
    c.apply_slice(old)
    assert len(c.state.node_spec("n0").devices) == 2  # the pool's generation 1 wins: gpu-2 and gpu-3 are gone
    c.set_claims([allocated(claim("c", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": "net.example.com", "pool": "n0", "device": "nic-0"}])])
    assert CLAIM_KEY_PREFIX + "default/c" not in c.state.allocations


# ------------------------------------------------------------------------------------------------ allocating
def test_secondary_allocates_a_claim_with_our_placement() -> None:
    c = cluster(nodes=2, gpus=4, hami_gpus=0)
    # n0 already has two GPUs claimed: binpack puts the next whole-GPU claim there
    c.set_claims([allocated(claim("old", "gpu.nvidia.com", count=2), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": f"gpu-{j}"} for j in (0, 1)]),
        claim("mine", "gpu.nvidia.com", count=2)])
    obj = claim_pod("p", ["mine"])
    pod = c.prepare_pod(obj)
    assert pod.containers[-1].name == DRA_CONTAINER_PREFIX + "default/mine"
    d = c.decide(pod)
    assert d.ok and d.node == "n0"
    assert d.allocation is not None and not list(d.allocation.grants)  # the pod itself holds no device
    assert [c.name for c in d.pod.containers] == ["main"]
    plan = c.claim_plans["default/p"]
    assert sorted(r.device.name for r in plan.claims["default/mine"]) == ["gpu-2", "gpu-3"]
    held = c.state.allocations[CLAIM_KEY_PREFIX + "default/mine"]
    assert sorted(g.device_index for g in held.grants) == [2, 3]
    assert "hami.io/vgpu-devices-to-allocate" not in decision_annotations(d.allocation, c.registry, 0)
    # a failed bind gives the claim's devices back
    c.forget_plan("default/p")
    assert CLAIM_KEY_PREFIX + "default/mine" not in c.state.allocations


def test_claim_selectors_and_shared_capacity() -> None:
    c = cluster(nodes=1, gpus=2, dra="hami")
    c.set_claims([claim("small", "hami-gpu", capacity={"memory": "3Gi", "cores": "30"}),
                  claim("h100", "hami-gpu", selector='device.attributes["hami.dra.test"].productName == "H100"')])
    d = c.decide(c.prepare_pod(claim_pod("p", ["small"])))
    assert d.ok
    (result,) = c.claim_plans["default/p"].claims["default/small"]
    assert (result.memory_mib, result.core_milli) == (3 * 1024, 300)
    with pytest.raises(ClaimNotReadyError, match="no device matches"):
        c.prepare_pod(claim_pod("q", ["h100"]))
    c.set_claims([claim("odd", "hami-gpu", capacity={"memory": "1000Mi"})])
    c.decide(c.prepare_pod(claim_pod("r", ["odd"])))
    (result,) = c.claim_plans["default/r"].claims["default/odd"]
    assert result.memory_mib == 1024  # rounded up to the policy's 256 Mi steps
    assert result.core_milli == 100  # the policy's default: 10 %


def test_pod_waits_for_a_claim_that_does_not_exist_yet() -> None:
    c = cluster(nodes=1)
    with pytest.raises(ClaimNotReadyError, match="does not exist"):
        c.prepare_pod(claim_pod("p", ["later"]))


def test_dra_extended_resource_becomes_a_claim_request() -> None:
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    pod = c.prepare_pod(claim_pod("p", [], extended={"example.com/gpu": "2"}))
    assert pod.containers[0].extended == {}
    assert pod.containers[-1].name == DRA_CONTAINER_PREFIX
    d = c.decide(pod)
    assert d.ok
    plan = c.claim_plans["default/p"]
    assert [r["name"] for r in plan.extended_requests] == ["container-0-request-1"]
    assert plan.extended_mappings == [{"containerName": "main", "resourceName": "example.com/gpu",
                                       "requestName": "container-0-request-1"}]
    assert len(plan.claims[""]) == 2


def test_extender_leaves_claim_pods_to_kube_scheduler() -> None:
    c = cluster(nodes=2)
    logic = ExtenderLogic(c)
    out = logic.filter({"pod": claim_pod("p", ["x"], scheduler="default-scheduler"), "nodenames": ["n0", "n1"]})
    assert out["nodenames"] == ["n0", "n1"] and not out["error"]
    assert "ResourceClaims" in out[DRA_NOTE_KEY]
    out = logic.filter({"pod": pod_obj("hami"), "nodenames": ["n0", "n1"]})
    assert DRA_NOTE_KEY not in out


def test_cel_selector_errors_do_not_match() -> None:
    sel = Selectors()
    dev = parse_slice(resource_slice("n0", NVIDIA_DRIVER, [nvidia_device("n0", 0)])).devices[0]
    assert sel.match('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("40Gi")) >= 0', dev)
    assert not sel.match('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("100Gi"))', dev)
    assert not sel.match('device.attributes["other.com"].x == 1', dev)
    assert "other.com" in sel.errors['device.attributes["other.com"].x == 1']
    assert not sel.match("device.driver ==", dev)


def test_claim_parse_errors_name_the_field() -> None:
    bad = claim("c", "x")
    bad["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0
    with pytest.raises(ValueError, match=r"resourceclaim default/c: spec.devices.requests\[0\].exactly.count"):
        parse_claim(bad)


# ------------------------------------------------------------------------------------------------ property
@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["claim", "shared", "hami", "release"]), st.integers(1, 3)),
                min_size=1, max_size=25))
def test_no_device_is_ever_held_beyond_its_capacity(steps: list[tuple[str, int]]) -> None:
    """Claims allocated by us and HAMi pods placed on GPUs published both ways (whole claims from NVIDIA's
    driver, shares from HAMi's): no GPU ever holds more memory or cores than it has, nor is an exclusive claim's
    GPU shared."""
    c = KubeCluster(registry(), "spread")
    c.set_nodes([node_obj(f"n{i}", gpus=4) for i in range(2)])
    c.set_classes([device_class("gpu.nvidia.com", NVIDIA_DRIVER), device_class("hami-gpu", HAMI_DRIVER)])
    c.set_slices([resource_slice(f"n{i}", NVIDIA_DRIVER, [nvidia_device(f"n{i}", j) for j in range(2)])
                  for i in range(2)] + [resource_slice(f"n{i}", HAMI_DRIVER, [hami_device(f"n{i}", j)
                                                                               for j in range(2, 4)])
                                        for i in range(2)])
    live: list[str] = []
    for k, (kind, n) in enumerate(steps):
        if kind == "release" and live:
            key = live.pop(0)
            c.forget_plan(key)
            c.delete_pod(key)
            continue
        if kind == "hami":
            pod = parse_pod(pod_obj(f"h{k}", count=n, mem=8000, cores=20), c.registry)
        else:
            cls = "gpu.nvidia.com" if kind == "claim" else "hami-gpu"
            caps = {"memory": "8Gi", "cores": "20"} if kind == "shared" else None
            c.apply_claim(claim(f"c{k}", cls, count=n, capacity=caps))
            pod = c.prepare_pod(claim_pod(f"h{k}", [f"c{k}"]))
        if c.decide(pod).ok:
            live.append(pod.key)
        s = c.state
        assert (s.dev_mem_used <= s.dev_mem_cap).all() and (s.dev_core_used <= s.dev_core_cap).all()
        assert (s.dev_tasks <= s.dev_max_tasks).all()
        exclusive = s.dev_core_used >= 1000
        assert (s.dev_tasks[exclusive] <= 1).all()




def test_claim_conflicts_flag_our_claim_when_kube_scheduler_took_the_same_device() -> None:
    c = cluster(nodes=1, gpus=2, dra="nvidia")
    c.apply_slice(resource_slice("n0", HAMI_DRIVER, [hami_device("n0", 5)]))
    mine = allocated(claim("mine", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-1"}])
    theirs = allocated(claim("theirs", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-1"}])
    other = allocated(claim("other", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-0"}])
    assert c.claim_conflicts([mine, theirs, other], ["default/mine"]) == {
        "default/mine": "device gpu.nvidia.com/n0/gpu-1 is also allocated to claim default/theirs"}
    assert c.claim_conflicts([mine, other], ["default/mine"]) == {}

    def share(name: str, mem: str) -> dict[str, Any]:
        return allocated(claim(name, "hami-gpu"), "n0", [
            {"request": "gpu", "driver": HAMI_DRIVER, "pool": "n0", "device": "hami-gpu-5",
             "consumedCapacity": {"memory": mem, "cores": "10"}}])

    assert c.claim_conflicts([share("a", "40Gi"), share("b", "40Gi")], ["default/a"]) == {}  # 80 Gi fit
    assert set(c.claim_conflicts([share("a", "40Gi"), share("b", "41Gi")], ["default/a"])) == {"default/a"}


def test_a_claim_another_scheduler_allocated_onto_our_assumed_device_is_accounted_once_ours_is_given_back(
) -> None:
    """kube-scheduler allocates the device our claim was just given (assumed, being written): its claim cannot
    be accounted while ours holds the device. Once our plan is given back (the settle check found the conflict),
    theirs must hold the device, or the next pass gives the same device to our pod again, forever."""
    c = cluster(nodes=1, gpus=1, hami_gpus=0)
    c.set_claims([claim("mine", "gpu.nvidia.com")])
    d = c.decide(c.prepare_pod(claim_pod("p", ["mine"])))
    assert d.ok and [r.device.name for r in c.claim_plans["default/p"].claims["default/mine"]] == ["gpu-0"]
    c.apply_claim(allocated(claim("theirs", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-0"}]))
    assert CLAIM_KEY_PREFIX + "default/theirs" in c.unaccounted  # our assumption holds gpu-0
    c.forget_plan("default/p")
    c.scheduler.cache.forget("default/p")
    assert CLAIM_KEY_PREFIX + "default/theirs" not in c.unaccounted
    assert CLAIM_KEY_PREFIX + "default/theirs" in c.state.allocations
    again = c.decide(c.prepare_pod(claim_pod("p", ["mine"])))
    assert not again.ok  # the only GPU is theirs now


def test_pod_sharing_an_allocated_claim_goes_to_its_node_and_only_joins_reserved_for() -> None:
    c = cluster(nodes=2, gpus=2, hami_gpus=0)
    c.set_claims([allocated(claim("shared", "gpu.nvidia.com"), "n1", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n1", "device": "gpu-0"}], reserved_for=[("a", "uid-a")])])
    obj = claim_pod("b", ["shared"])
    pod = c.prepare_pod(obj)
    assert [x.name for x in pod.containers] == ["main"]  # nothing left to allocate
    assert c.claim_node(obj) == "n1"
    d = c.decide(pod, [c.claim_node(obj) or ""])
    assert d.ok and d.node == "n1"
    assert c.claim_plans["default/b"].claims == {"default/shared": []}
    # after a restart the pod is in reservedFor already: nothing to write
    c.apply_claim(allocated(claim("shared", "gpu.nvidia.com"), "n1", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n1", "device": "gpu-0"}],
        reserved_for=[("a", "uid-a"), ("b", "uid-b")]))
    c.claim_plans.clear()
    c.delete_pod("default/b")
    assert c.decide(c.prepare_pod(obj), ["n1"]).ok and "default/b" not in c.claim_plans


def test_secondary_honours_the_pods_node_selector() -> None:
    c = cluster(nodes=2, gpus=2, hami_gpus=0)
    c.set_claims([claim("x", "gpu.nvidia.com")])
    obj = claim_pod("p", ["x"])
    obj["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    for node in c.node_objs.values():
        node["metadata"].setdefault("labels", {})["kubernetes.io/hostname"] = node["metadata"]["name"]
    c.set_nodes(list(c.node_objs.values()))
    d = c.decide(c.prepare_pod(obj))
    assert d.ok and d.node == "n1"
