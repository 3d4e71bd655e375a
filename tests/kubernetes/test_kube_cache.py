"""The Kubernetes backend's caches answer for the cluster as it is now.

* The candidate mask (kube-scheduler sends the same node list again and again, so the last mask is kept):
  after a relist rebuilds the state with the nodes in another order, the mask names the nodes asked for.
* The scheduler cache fed by the informer: a pod the informer sees bound stops being assumed at once (it never
  expires at the assumption's TTL); a relist (a full resync of pods) keeps assumed pods that are decided but
  not bound yet. ``tests/integration/test_k8s_cache.py`` checks both against a real API server.

Objects are fed the way the informer feeds them (``KubeCluster`` is pure); the clock is set by the test."""

from __future__ import annotations

import random
from typing import Any

import numpy as np

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
