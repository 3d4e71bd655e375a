"""Queued Jobs whose pods use ResourceClaims, in the control plane's cluster view, without a server: a task pod
asks for its claims' devices (``dra-entry:`` pseudo containers), its reservation holds them, the pod bound into
the reservation writes them to its own claim (made from a template), and the claim is never counted next to the
reservation: not while the reservation holds it, not after it is released (until deallocated), not after a
restart rebuilds the reservation."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from gpucluster.jobs import JobSpec
from gpucluster.kubernetes import KubeCluster
from gpucluster.kubernetes.cluster import DRA_ENTRY_PREFIX, ClaimNotReadyError
from gpucluster.kubernetes.convert import KubeInputError, parse_pod
from gpucluster.kubernetes.dra import CLAIM_KEY_PREFIX, DraInputError, parse_claim, parse_claim_template
from gpucluster.model import Pod
from gpucluster.model.labels import RESERVATION_ANNOTATION
from gpucluster.scheduler.plugins.quota import pod_charge

from .dra_objects import NVIDIA_DRIVER, allocated, claim, claim_pod
from .test_dra import cluster


def task(c: KubeCluster, name: str, count: int = 1) -> Pod:
    """A task pod of a queued Job: no GPU of its own, one template claim entry ``gpu`` of ``count`` GPUs."""
    pod = parse_pod(claim_pod(name, []), c.registry)
    entry = c.entry_container("gpu", parse_claim(claim("t", "gpu.nvidia.com", count=count)).requests, "Job x")
    return dataclasses.replace(pod, containers=(*pod.containers, entry))


def job_pod(name: str, claim_name: str | None, uid: str = "") -> dict[str, Any]:
    """A pod the Job controller made, its claim made from the template by the resourceclaim controller."""
    obj = claim_pod(name, [])
    obj["metadata"]["uid"] = uid or f"uid-{name}"
    obj["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    obj["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if claim_name is not None:
        obj["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim_name}]
    return obj


def reserve_one(c: KubeCluster, key: str = "t0", count: int = 1) -> Any:
    group = c.decide_group([task(c, key, count)])
    assert group.ok
    alloc = group.decisions[0].allocation
    c.reserve([alloc])
    return alloc


def used(c: KubeCluster) -> int:
    return int((c.state.dev_tasks > 0).sum())


def test_entry_container_asks_for_dra_devices_and_counts_as_gpus() -> None:
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    t = task(c, "t0", count=2)
    assert t.containers[-1].name == DRA_ENTRY_PREFIX + "gpu"
    assert t.device_count == 2 and all(r.dra for _, r in t.device_requests)  # quota and fair share see 2 GPUs
    with pytest.raises(ClaimNotReadyError, match="DeviceClass 'nope' does not exist"):
        c.entry_container("gpu", parse_claim(claim("t", "nope")).requests, "Job x")


def test_a_pod_bound_into_the_reservation_writes_its_devices_to_its_claim_counted_once() -> None:
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    alloc = reserve_one(c, count=2)
    assert used(c) == 2
    with pytest.raises(ClaimNotReadyError, match="resourceClaimStatuses"):
        c.slot_claim_plan(job_pod("p", None), alloc, "default/t0")  # its claim is not made yet
    with pytest.raises(ClaimNotReadyError, match="not seen yet"):
        c.slot_claim_plan(job_pod("p", "p-gpu-x"), alloc, "default/t0")
    c.apply_claim(claim("p-gpu-x", "gpu.nvidia.com", count=2))
    own, plan = c.slot_claim_plan(job_pod("p", "p-gpu-x"), alloc, "default/t0")
    assert own.pod_key == "default/p" and own.device_count == 0  # HAMi's annotations give the pod no GPU
    assert plan is not None and plan.node == alloc.node
    chosen = sorted(r.device.name for r in plan.claims["default/p-gpu-x"])
    assert chosen == sorted(f"gpu-{g.device_index}" for g in alloc.grants)  # the reservation's devices
    assert c.claim_slots == {"default/p-gpu-x": "default/t0"}
    # the claim as written (allocated, reserved for the pod): still held once, by the reservation
    written = allocated(claim("p-gpu-x", "gpu.nvidia.com", count=2), alloc.node, [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": alloc.node, "device": d} for d in chosen],
        reserved_for=[("p", "uid-p")])
    c.claim_written("default/p", "default/p-gpu-x", written)
    assert CLAIM_KEY_PREFIX + "default/p-gpu-x" not in c.state.allocations and used(c) == 2
    assert not c.unaccounted
    # a retried bind: the claim is reserved for the pod already, nothing more to allocate
    _own, again = c.slot_claim_plan(job_pod("p", "p-gpu-x"), alloc, "default/t0")
    assert again is not None and again.claims == {"default/p-gpu-x": []}
    # preempted: the reservation is freed at once and the claim ignored until it is deallocated
    c.unreserve(["default/t0"])
    assert used(c) == 0
    c.apply_claim(written)
    assert used(c) == 0
    c.apply_claim(claim("p-gpu-x", "gpu.nvidia.com", count=2))  # deallocated
    assert not c.claim_slots and used(c) == 0
    # allocated again later by someone else: it holds its devices like any claim
    c.apply_claim(written)
    assert used(c) == 2


def test_a_claim_allocated_by_someone_else_or_of_another_shape_is_not_written() -> None:
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    alloc = reserve_one(c)
    c.apply_claim(allocated(claim("other", "gpu.nvidia.com"), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-3"}], reserved_for=[("q", "uid-q")]))
    with pytest.raises(ClaimNotReadyError, match="allocated already"):
        c.slot_claim_plan(job_pod("p", "other"), alloc, "default/t0")
    c.apply_claim(claim("two", "gpu.nvidia.com", count=2))
    with pytest.raises(KubeInputError, match="other devices than its job was admitted with"):
        c.slot_claim_plan(job_pod("p", "two"), alloc, "default/t0")
    assert not c.claim_slots


def test_a_restart_rebuilds_the_reservation_over_the_claims_its_pods_hold() -> None:
    """After a restart the informer reports the claim (allocated, accounted) and the bound pod naming the
    reservation before the admission is mirrored: the reservation takes the claim's devices over."""
    c = cluster(nodes=1, gpus=2, hami_gpus=0)
    alloc = reserve_one(c, count=2)
    fresh = cluster(nodes=1, gpus=2, hami_gpus=0)
    fresh.set_claims([allocated(claim("p-gpu-x", "gpu.nvidia.com", count=2), "n0", [
        {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": f"gpu-{j}"} for j in (0, 1)],
        reserved_for=[("p", "uid-p")])])
    assert used(fresh) == 2
    pod = job_pod("p", "p-gpu-x")
    pod["spec"]["nodeName"] = "n0"
    pod["metadata"]["annotations"] = {RESERVATION_ANNOTATION: "default/t0"}
    fresh.apply_pod(pod)
    fresh.reserve([dataclasses.replace(alloc)])
    assert used(fresh) == 2 and not fresh.unaccounted
    assert fresh.claim_slots == {"default/p-gpu-x": "default/t0"}


def test_claim_template_parse_errors_name_the_field() -> None:
    good = {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "c", "count": 2}}]}}}}
    assert [(r.name, r.class_name, r.count) for r in parse_claim_template(good)] == [("gpu", "c", 2)]
    bad = {"metadata": {"name": "t", "namespace": "ns"}, "spec": {"spec": {"devices": {"requests": [
        {"name": "gpu", "exactly": {"deviceClassName": "c", "count": 0}}]}}}}
    with pytest.raises(DraInputError, match=r"resourceclaimtemplate ns/t: spec.spec.devices.requests\[0\]"):
        parse_claim_template(bad)


def test_a_job_whose_tasks_claim_gpus_is_charged_for_them() -> None:
    """Quota (the queue's ``gpu`` charge of each task) and fair share (the job's GPU share, DRF) count the GPUs
    the task's claims ask for, though the pod itself asks for none."""
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    t = task(c, "t0", count=2)
    spec = JobSpec("j", 0.0, t.device_count * 3, math.inf, tenant="a", template=t, replicas=3)
    assert spec.num_tasks == 3 and spec.gpu_share == 6 and spec.whole
    assert pod_charge(t)["gpu"] == 2
    assert pod_charge(parse_pod(claim_pod("bare", []), c.registry))["gpu"] == 0
