"""A DRA object updated on the API server to something we cannot read is reported (``bad_dra``, the overview's
``kubernetes.bad_dra_objects``, a log line and one Warning Event ``Unreadable`` naming it and why) and never
makes a GPU free that a claim holds: an unreadable claim keeps holding what it allocates (read leniently, else
what its last readable version held) and is given to no pod; an unreadable DeviceClass allocates nothing."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from gpucluster.kubernetes.cluster import ClaimNotReadyError
from gpucluster.kubernetes.convert import parse_pod
from gpucluster.kubernetes.dra import CLAIM_KEY_PREFIX

from .dra_objects import NVIDIA_DRIVER, allocated, claim, claim_pod, device_class
from .helpers import pod_obj
from .test_dra import cluster

KEY = CLAIM_KEY_PREFIX + "default/c1"


class _Events:
    """A binder stand-in that records the Warning Events it is asked to write."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str]] = []

    def report_unreadable(self, obj: dict[str, Any], why: str, component: str) -> None:
        self.written.append((f"{obj['kind']} {obj['metadata']['name']}", why))


def _held(results: list[str]) -> list[dict[str, Any]]:
    return [{"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": d} for d in results]


def _broken_requests(obj: dict[str, Any]) -> dict[str, Any]:
    """The claim with a request we cannot read (an allocation mode that does not exist)."""
    out = copy.deepcopy(obj)
    out["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Sometimes"
    out["metadata"]["resourceVersion"] = "2"
    return out


@pytest.mark.parametrize("how", ["watch", "relist"])
def test_an_unreadable_update_of_an_allocated_claim_keeps_its_gpus_held(how: str,
                                                                       caplog: pytest.LogCaptureFixture) -> None:
    c = cluster(nodes=1, gpus=4)
    events = _Events()
    c.binder = events  # type: ignore[assignment]
    good = allocated(claim("c1", "gpu.nvidia.com", count=2), "n0", _held(["gpu-0", "gpu-1"]))
    c.set_claims([good])
    i = c.state.node_index["n0"]
    assert KEY in c.state.allocations
    bad = _broken_requests(good)
    with caplog.at_level(logging.WARNING):
        if how == "watch":
            c.apply_claim(bad)
        else:
            c.set_claims([bad])
    # the GPUs stay held: a pod asking for 3 whole GPUs does not fit the 2 left
    assert KEY in c.state.allocations
    assert list(c.state.dev_core_used[i, :2]) == [1000, 1000]
    assert not c.decide(parse_pod(pod_obj("p3", count=3, mem=0, cores=100), c.registry)).ok
    # and the claim is reported: counted, logged, one Warning Event naming it and why
    assert c.summary()["bad_dra_objects"] == 1
    assert "Sometimes" in c.bad_dra["resourceclaim default/c1"]
    assert any("resourceclaim default/c1 cannot be read" in r.getMessage() for r in caplog.records)
    assert len(events.written) == 1 and events.written[0][0] == "ResourceClaim c1"
    assert "allocationMode" in events.written[0][1]
    c.set_claims([bad])  # a relist says nothing new
    assert len(events.written) == 1
    # no pod is given the unreadable claim
    with pytest.raises(ClaimNotReadyError, match="cannot be read"):
        c.prepare_pod(claim_pod("user", ["c1"]))
    # fixed: no longer counted, still held; deleted: its GPUs are free
    c.apply_claim(good)
    assert c.summary()["bad_dra_objects"] == 0 and KEY in c.state.allocations
    c.delete_claim("default/c1")
    assert list(c.state.dev_core_used[i, :2]) == [0, 0]


def test_an_unreadable_allocation_holds_what_can_be_read_and_what_was_held_before() -> None:
    c = cluster(nodes=1, gpus=4)
    good = allocated(claim("c1", "gpu.nvidia.com", count=2), "n0", _held(["gpu-0", "gpu-1"]))
    c.apply_claim(good)
    i = c.state.node_index["n0"]
    # a result cannot be read: the one that can (gpu-2, new) and those held before (gpu-0, gpu-1) are held
    bad = copy.deepcopy(good)
    bad["status"]["allocation"]["devices"]["results"] = [*_held(["gpu-2"]), "gpu-9"]
    c.apply_claim(bad)
    assert list(c.state.dev_core_used[i]) == [1000, 1000, 1000, 0]
    assert c.summary()["bad_dra_objects"] == 1
    # a share that cannot be read is the whole device
    share = copy.deepcopy(good)
    share["metadata"]["name"] = "c2"
    share["status"]["allocation"]["devices"]["results"] = [{**_held(["gpu-3"])[0],
                                                            "consumedCapacity": {"memory": "lots"}}]
    c.apply_claim(share)
    assert c.state.dev_core_used[i, 3] == 1000
    # an unreadable claim whose allocation is gone (deallocated) holds nothing
    gone = _broken_requests(claim("c1", "gpu.nvidia.com", count=2))
    c.apply_claim(gone)
    assert list(c.state.dev_core_used[i, :3]) == [0, 0, 0]
    assert KEY not in c.state.allocations and c.summary()["bad_dra_objects"] == 2


def test_a_claim_first_seen_unreadable_holds_the_devices_it_allocates() -> None:
    """No readable version was ever seen (the informer started after the update): what its allocation names is
    held, and the bind-time check against the server's claims sees it too."""
    c = cluster(nodes=1, gpus=2)
    bad = _broken_requests(allocated(claim("c1", "gpu.nvidia.com"), "n0", _held(["gpu-1"])))
    bad["spec"] = "not a spec"  # not even a mapping: no exception escapes
    c.set_claims([bad])
    i = c.state.node_index["n0"]
    assert c.state.dev_core_used[i, 1] == 1000 and c.summary()["bad_dra_objects"] == 1
    mine = allocated(claim("mine", "gpu.nvidia.com"), "n0", _held(["gpu-1"]))
    assert c.claim_conflicts([mine, bad], ["default/mine"]) == {
        "default/mine": "device gpu.nvidia.com/n0/gpu-1 is also allocated to claim default/c1"}


def test_an_unreadable_device_class_allocates_nothing_but_keeps_its_extended_resource() -> None:
    c = cluster(nodes=1, gpus=4, hami_gpus=0)
    events = _Events()
    c.binder = events  # type: ignore[assignment]
    c.set_claims([claim("mine", "gpu.nvidia.com")])
    assert c.prepare_pod(claim_pod("p", ["mine"]))
    broken = device_class("gpu.nvidia.com", NVIDIA_DRIVER, extended="example.com/gpu")
    broken["spec"]["selectors"] = [{"cel": {"expression": 7}}]
    c.apply_class(broken)
    assert c.summary()["bad_dra_objects"] == 1 and len(events.written) == 1
    assert events.written[0][0] == "DeviceClass gpu.nvidia.com"
    with pytest.raises(ClaimNotReadyError, match=r"DeviceClass 'gpu.nvidia.com' cannot be read \(.*cel.expression"):
        c.prepare_pod(claim_pod("p", ["mine"]))
    # its extended resource still maps to DRA: the pod waits, it is not taken for a HAMi pod
    ext = claim_pod("e", [], extended={"example.com/gpu": "1"})
    assert c.uses_dra(ext)
    with pytest.raises(ClaimNotReadyError, match="cannot be read"):
        c.prepare_pod(ext)
    c.set_classes([broken])  # a relist: still unreadable, no second Event
    assert c.summary()["bad_dra_objects"] == 1 and len(events.written) == 1 and c.uses_dra(ext)
    c.apply_class(device_class("gpu.nvidia.com", NVIDIA_DRIVER, extended="example.com/gpu"))  # fixed
    assert c.summary()["bad_dra_objects"] == 0
    assert c.prepare_pod(claim_pod("p", ["mine"]))


def test_the_binder_writes_the_warning_event_on_the_object() -> None:
    """``KubeBinder.report_unreadable``: a Warning Event ``Unreadable`` whose involvedObject is the claim (in its
    namespace) or the cluster-scoped class (its Event in ``default``), written by the background writer."""
    import threading

    from kubernetes.client import ApiClient

    from gpucluster.kubernetes.binder import KubeBinder

    from .helpers import registry

    written: list[tuple[str, dict[str, Any]]] = []
    done = threading.Semaphore(0)

    class _Core:
        def create_namespaced_event(self, namespace: str, body: dict[str, Any], **_kw: Any) -> None:
            written.append((namespace, body))
            done.release()

    binder = KubeBinder(ApiClient(), registry())
    binder.core = _Core()
    binder.report_unreadable(claim("c1", "gpu.nvidia.com", namespace="team"), "spec: bad", "gpucluster")
    binder.report_unreadable(device_class("gpu.nvidia.com", NVIDIA_DRIVER), "selectors: bad", "gpucluster")
    assert done.acquire(timeout=30) and done.acquire(timeout=30)
    (ns1, e1), (ns2, e2) = sorted(written, key=lambda w: w[1]["involvedObject"]["kind"], reverse=True)
    assert ns1 == "team" and e1["type"] == "Warning" and e1["reason"] == "Unreadable"
    assert e1["involvedObject"] == {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "name": "c1",
                                    "namespace": "team", "uid": "uid-claim-c1"}
    assert e1["message"] == "gpucluster cannot read this object: spec: bad"
    assert ns2 == "default" and e2["involvedObject"]["kind"] == "DeviceClass"
    assert "namespace" not in e2["involvedObject"]
