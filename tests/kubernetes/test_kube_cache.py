"""The Kubernetes backend's caches answer for the cluster as it is now.

* The candidate mask (kube-scheduler sends the same node list again and again, so the last mask is kept):
  after a relist rebuilds the state with the nodes in another order, the mask names the nodes asked for.
* Node labels: a node relabelled in place (``kubectl label node``: nothing else of it changes) is matched by
  node selectors at once, by the scheduler's Filter and by the "can this job ever fit" answer the control plane
  gives a submission; a label taken off stops matching.
* What the secondary scheduler notes of a pod it prepares goes when the pod goes (its delete event, or the
  next relist when that event was missed): nothing grows with every pod ever scheduled.
* The scheduler cache fed by the informer: a pod the informer sees bound stops being assumed at once (it never
  expires at the assumption's TTL); a relist (a full resync of pods) keeps assumed pods that are decided but
  not bound yet. ``tests/integration/test_k8s_cache.py`` checks both against a real API server.

Objects are fed the way the informer feeds them (``KubeCluster`` is pure); the clock is set by the test."""

from __future__ import annotations

import copy
import random
from typing import Any

import numpy as np

from gpucluster.jobs.admission import job_spec
from gpucluster.jobs.capacity import CapacityView
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import decision_annotations, parse_pod

from .helpers import node_obj, pod_obj, registry
from .test_cluster import Clock


def _named(cluster: KubeCluster, mask: np.ndarray) -> list[str]:
    return [cluster.state.nodes[i].name for i in np.flatnonzero(mask)]


def test_the_candidate_mask_follows_a_rebuild_that_reorders_the_nodes() -> None:
    cluster = KubeCluster(registry(), "binpack")
    objs = [node_obj(n) for n in ("a", "b", "c", "d")]
    cluster.set_nodes(objs)
    assert _named(cluster, cluster.candidates_mask(["a", "c"])) == ["a", "c"]
    cluster.set_nodes(list(reversed(objs)))  # a relist that returns the nodes in another order
    assert [n.name for n in cluster.state.nodes] == ["d", "c", "b", "a"]
    assert sorted(_named(cluster, cluster.candidates_mask(["a", "c"]))) == ["a", "c"]
    d = cluster.decide(parse_pod(pod_obj("p"), registry()), candidates=["a"])
    assert d.node == "a"
    # many rebuilds in random orders, the mask asked for after every other one: a key that names the state by
    # anything that a later state can share (e.g. its memory address, reused once it is freed) fails here
    rng = random.Random(7)
    for k in range(200):
        rng.shuffle(objs)
        cluster.set_nodes(objs)
        if k % 2:
            assert sorted(_named(cluster, cluster.candidates_mask(["a", "c"]))) == ["a", "c"], k


def _bound(obj: dict[str, Any], cluster: KubeCluster, now: float) -> dict[str, Any]:
    """The pod object as the API server shows it once bound with HAMi's decision annotations."""
    alloc = cluster.state.allocations[f"default/{obj['metadata']['name']}"]
    annotations = {**obj["metadata"]["annotations"], **decision_annotations(alloc, registry(), now)}
    return {**obj, "metadata": {**obj["metadata"], "annotations": annotations},
            "spec": {**obj["spec"], "nodeName": alloc.node}}


def test_a_pod_the_informer_sees_bound_is_no_longer_assumed() -> None:
    clock = Clock()
    cluster = KubeCluster(registry(), "binpack", clock=clock, assume_ttl=30.0)
    cluster.set_nodes([node_obj("n0", now=clock.now, gpus=1)])
    obj = pod_obj("p", count=1, mem=80000, cores=100)  # the whole device
    pod = parse_pod(obj, registry())
    d = cluster.decide(pod)
    assert d.ok and cluster.scheduler.cache.is_assumed(pod.key)
    cluster.apply_pod(_bound(obj, cluster, clock.now))  # bound (by us or by anyone) and seen
    assert not cluster.scheduler.cache.is_assumed(pod.key)
    assert cluster.state.allocations[pod.key].node == "n0"
    cluster.scheduler.cache.clock = lambda: clock.now + 3600.0  # long past the assumption's TTL
    cluster.scheduler.cache.expire()
    assert pod.key in cluster.state.allocations  # still held: a second pod gets no room on that device
    assert not cluster.decide(parse_pod(pod_obj("q", count=1, mem=80000, cores=100), registry())).ok


def test_a_pod_resync_keeps_assumed_pods_that_are_not_bound_yet() -> None:
    clock = Clock()
    cluster = KubeCluster(registry(), "binpack", clock=clock)
    cluster.set_nodes([node_obj("n0", now=clock.now, gpus=1)])
    decided = parse_pod(pod_obj("decided", count=1, mem=80000, cores=100), registry())
    assert cluster.decide(decided).ok  # decided and assumed; its pod object is not in the API server yet
    other = pod_obj("bystander", count=1, mem=1000, cores=0)  # an unbound pod the relist does return
    cluster.set_pods([other])
    assert decided.key in cluster.state.allocations and cluster.scheduler.cache.is_assumed(decided.key)
    assert not cluster.decide(parse_pod(pod_obj("q", count=1, mem=80000, cores=100), registry())).ok


def _labelled(obj: dict[str, Any], **labels: str | None) -> dict[str, Any]:
    """The Node object with ``labels`` set (None: removed), as the watch delivers it after ``kubectl label``."""
    out = copy.deepcopy(obj)
    have = out["metadata"].setdefault("labels", {})
    for k, v in labels.items():
        if v is None:
            have.pop(k, None)
        else:
            have[k] = v
    out["metadata"]["resourceVersion"] = str(int(out["metadata"].get("resourceVersion") or 0) + 1)
    return out


def _selecting(name: str, **selector: str) -> Any:
    obj = pod_obj(name)
    obj["spec"]["nodeSelector"] = dict(selector)
    return parse_pod(obj, registry())


def test_a_relabelled_node_is_matched_by_node_selectors_at_once() -> None:
    cluster = KubeCluster(registry(), "binpack")
    a, b = node_obj("a"), node_obj("b")
    cluster.set_nodes([a, b])
    rebuilds = cluster.rebuilds
    first = cluster.decide(_selecting("p0", pool="fast"))
    assert not first.ok  # no node carries it yet (and the selector's mask is cached now)
    b = _labelled(b, pool="fast")
    cluster.apply_node(b)
    d = cluster.decide(_selecting("p1", pool="fast"))
    assert d.ok and d.node == "b", d
    assert cluster.rebuilds == rebuilds  # a label is no reason to rebuild the whole state
    # moved to the other node: the old holder no longer matches, the new one does
    cluster.apply_node(_labelled(b, pool=None))
    cluster.apply_node(_labelled(a, pool="fast"))
    for i in range(3):  # every pod of that selector, not only the first one after the change
        d = cluster.decide(_selecting(f"q{i}", pool="fast"))
        assert d.ok and d.node == "a", d


def test_a_job_that_could_never_fit_fits_once_a_node_carries_its_labels() -> None:
    """The control plane answers 422 "can never fit" for a job whose node selector no node matches; the answer is
    cached per job shape, and a node relabelled to match must change it."""
    cluster = KubeCluster(registry(), "binpack")
    a = node_obj("a")
    cluster.set_nodes([a])
    view = CapacityView(lambda: cluster.state)
    spec = job_spec("j1", name="j", tenant="t", replicas=1, resources={"nvidia.com/gpu": 1}, duration_s=60.0,
                    submit_s=0.0, node_selector={"pool": "fast"})
    why = view.never_fits(spec)
    assert why is not None and why.where == "node_selector", why
    cluster.apply_node(_labelled(a, pool="fast"))
    assert view.never_fits(spec) is None
    cluster.apply_node(_labelled(a, pool="slow"))
    assert view.never_fits(spec) is not None


def test_what_the_scheduler_notes_of_a_pod_goes_when_the_pod_goes() -> None:
    """A long-running secondary scheduler prepares every pod it schedules (``prepare_pod``: the claims it shares,
    its DRA-backed extended resources). What it noted must go when the pod does, by its delete event or, when
    that event was missed, by the next relist: else memory grows with every pod ever scheduled."""
    cluster = KubeCluster(registry(), "binpack")
    cluster.set_nodes([node_obj("n0")])
    kept = pod_obj("kept")
    for i in range(50):
        obj = pod_obj(f"p{i}")
        cluster.apply_pod(obj)
        pod = cluster.prepare_pod(obj)
        assert cluster.decide(pod).ok
        cluster.delete_pod(pod.key)
    cluster.apply_pod(kept)
    cluster.prepare_pod(kept)
    for i in range(50):  # these are deleted while the watch is down: only the relist tells
        obj = pod_obj(f"q{i}")
        cluster.apply_pod(obj)
        cluster.prepare_pod(obj)
    cluster.set_pods([kept])
    noted = {**cluster._shared_claims, **cluster._extended_meta}
    assert set(noted) == {"default/kept"}, sorted(noted)[:5]


def _bad(name: str) -> dict[str, Any]:
    obj = node_obj(name)
    obj["metadata"]["annotations"]["hami.io/node-nvidia-register"] = "not,a,device"
    return obj


def test_a_bad_node_that_is_deleted_is_no_longer_counted() -> None:
    """``bad_nodes`` (the overview's ``kubernetes.bad_nodes``: nodes whose objects could not be understood)
    counts the bad nodes that exist: one deleted (its delete event, or a relist that no longer lists it) or
    fixed is not counted; DRA objects likewise."""
    cluster = KubeCluster(registry(), "binpack")
    cluster.set_nodes([node_obj("a"), _bad("b1"), _bad("b2")])
    assert cluster.summary()["bad_nodes"] == 2
    cluster.delete_node("b1")  # the watch's delete event
    assert cluster.summary()["bad_nodes"] == 1
    cluster.set_nodes([node_obj("a")])  # b2 deleted while the watch was down: the relist no longer lists it
    assert cluster.summary()["bad_nodes"] == 0
    cluster.apply_node(_bad("b3"))
    cluster.apply_node(node_obj("b3"))  # fixed
    assert cluster.summary()["bad_nodes"] == 0 and "b3" in cluster.state.node_index
    broken = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "broken"},
              "spec": {"selectors": [{"cel": {"expression": 7}}]}}
    cluster.set_classes([broken])
    cluster.apply_claim({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                         "metadata": {"name": "c", "namespace": "default"},
                         "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                             "deviceClassName": "gpu.nvidia.com", "allocationMode": "Sometimes"}}]}}})
    assert len(cluster.bad_dra) == 2, cluster.bad_dra
    cluster.delete_class("broken")
    cluster.set_claims([])
    assert cluster.bad_dra == {}
