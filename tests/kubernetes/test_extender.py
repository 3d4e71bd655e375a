from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.extender import ExtenderError, ExtenderLogic, ExtenderServer

from .helpers import RecordingBinder, node_obj, pod_obj, registry


@pytest.fixture
def binder() -> RecordingBinder:
    return RecordingBinder()


@pytest.fixture
def cluster(binder: RecordingBinder) -> KubeCluster:
    """4 nodes x 4 GPUs; binds go through the scheduler's binding cycle to the recording Bind plugin."""
    c = KubeCluster(registry(), "binpack", binder=binder)
    c.set_nodes([node_obj(f"n{i}") for i in range(4)])
    return c


def test_filter_chooses_one_node_and_bind_binds_it(cluster: KubeCluster, binder: RecordingBinder) -> None:
    logic = ExtenderLogic(cluster)
    names = ["n0", "n1", "n2", "n3"]
    out = logic.filter({"Pod": pod_obj("p"), "NodeNames": names})
    assert len(out["nodenames"]) == 1
    chosen = out["nodenames"][0]
    assert out["failedNodes"] == {}  # the nodes not chosen are left out
    prio = logic.prioritize({"Pod": pod_obj("p"), "NodeNames": names})
    assert {h["host"]: h["score"] for h in prio}[chosen] == 10
    assert logic.bind({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": chosen}) == {
        "error": ""}
    assert binder.bound == [("default/p", chosen)]
    assert not cluster.scheduler.cache.is_assumed("default/p")
    # kube-scheduler retries a bind it did not hear back from: answered, not bound twice
    assert logic.bind({"PodName": "p", "PodNamespace": "default", "PodUID": "uid-p", "Node": chosen}) == {
        "error": ""}
    assert binder.bound == [("default/p", chosen)]


def test_filter_without_node_cache_returns_node_objects(cluster: KubeCluster) -> None:
    logic = ExtenderLogic(cluster)
    items = [node_obj(f"n{i}") for i in range(4)]
    out = logic.filter({"pod": pod_obj("p"), "nodes": {"items": items}})
    assert len(out["nodes"]["items"]) == 1
    assert out["nodes"]["items"][0]["metadata"]["name"] in {f"n{i}" for i in range(4)}


def test_unschedulable_pod_gets_counted_reasons(cluster: KubeCluster) -> None:
    logic = ExtenderLogic(cluster)
    out = logic.filter({"Pod": pod_obj("big", mem=10**6), "NodeNames": ["n0", "n1", "n2", "n3"]})
    assert out["nodenames"] == []
    assert set(out["failedNodes"].values()) == {"InsufficientGPUMemory"}
    assert out["error"] == "0/4 nodes are available: 4 InsufficientGPUMemory."
    typed = pod_obj("h100", annotations={"nvidia.com/use-gputype": "H100"})
    out = logic.filter({"Pod": typed, "NodeNames": ["n0", "n1"]})
    assert set(out["failedAndUnresolvableNodes"].values()) == {"GPUTypeMismatch"}


def test_failed_bind_gives_the_devices_back() -> None:
    """The API server refuses the Binding: the scheduler forgets the assumed allocation, so the device is free
    for the next pod at once (not after the assume TTL), and the refused pod can be filtered again."""
    binder = RecordingBinder(fail=True)
    cluster = KubeCluster(registry(), "binpack", binder=binder, assume_ttl=3600)
    cluster.set_nodes([node_obj("n0", gpus=1)])
    logic = ExtenderLogic(cluster)
    whole = {"cores": 100, "mem": 1000}
    assert logic.filter({"Pod": pod_obj("p", **whole), "NodeNames": ["n0"]})["nodenames"] == ["n0"]
    res = logic.bind({"PodName": "p", "PodNamespace": "default", "Node": "n0"})
    assert res["error"] == "API server said no"
    assert binder.refused == ["default/p"]
    assert "default/p" not in cluster.state.allocations and not cluster.scheduler.cache.is_assumed("default/p")
    assert cluster.summary()["core_used_milli"] == 0 and cluster.summary()["assumed"] == 0
    binder.fail = False
    assert logic.filter({"Pod": pod_obj("q", **whole), "NodeNames": ["n0"]})["nodenames"] == ["n0"]
    assert logic.bind({"PodName": "q", "PodNamespace": "default", "Node": "n0"}) == {"error": ""}
    assert binder.bound == [("default/q", "n0")]
    refused = logic.filter({"Pod": pod_obj("p", **whole), "NodeNames": ["n0"]})
    assert refused["error"] == "0/1 nodes are available: 1 InsufficientGPUCores."


def test_a_bound_pod_is_confirmed_and_never_expires() -> None:
    """After a successful bind the allocation is confirmed: the assume TTL (0 here: every unbound assumption
    expires at the next decision) no longer applies to it, while an unbound one does expire."""
    binder = RecordingBinder()
    cluster = KubeCluster(registry(), "binpack", binder=binder, assume_ttl=0.0)
    cluster.set_nodes([node_obj("n0", gpus=2)])
    logic = ExtenderLogic(cluster)
    whole = {"cores": 100, "mem": 1000}
    assert logic.filter({"Pod": pod_obj("bound", **whole), "NodeNames": ["n0"]})["nodenames"] == ["n0"]
    assert logic.bind({"PodName": "bound", "PodNamespace": "default", "Node": "n0"}) == {"error": ""}
    assert not cluster.scheduler.cache.is_assumed("default/bound")
    assert logic.filter({"Pod": pod_obj("unbound", **whole), "NodeNames": ["n0"]})["nodenames"] == ["n0"]
    # the next decision expires "unbound" (never bound) but keeps "bound"
    assert logic.filter({"Pod": pod_obj("third", **whole), "NodeNames": ["n0"]})["nodenames"] == ["n0"]
    assert set(cluster.state.allocations) == {"default/bound", "default/third"}
    full = logic.filter({"Pod": pod_obj("fourth", **whole), "NodeNames": ["n0"]})
    assert full["nodenames"] == ["n0"]  # "third" expired in turn
    assert set(cluster.state.allocations) == {"default/bound", "default/fourth"}


def test_bind_after_restart_redecides_on_the_given_node(cluster: KubeCluster, binder: RecordingBinder) -> None:
    logic = ExtenderLogic(cluster, read_pod=lambda ns, name: pod_obj(name, namespace=ns))
    assert logic.bind({"PodName": "q", "PodNamespace": "default", "Node": "n2"})["error"] == ""
    assert binder.bound == [("default/q", "n2")]
    assert cluster.state.allocations["default/q"].node == "n2"


def test_pods_without_devices_pass_through(cluster: KubeCluster) -> None:
    obj = pod_obj("cpu")
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    out = ExtenderLogic(cluster).filter({"Pod": obj, "NodeNames": ["n0", "n1"]})
    assert out["nodenames"] == ["n0", "n1"]


def test_bad_requests_name_the_field(cluster: KubeCluster) -> None:
    logic = ExtenderLogic(cluster)
    with pytest.raises(ExtenderError, match="pod: missing"):
        logic.filter({"NodeNames": ["n0"]})
    bad = pod_obj("p", mem=-1)
    with pytest.raises(ExtenderError, match=r"pod default/p: spec.containers\[0\].*gpumem"):
        logic.filter({"Pod": bad, "NodeNames": ["n0"]})
    with pytest.raises(ExtenderError, match="podName and node"):
        logic.bind({"PodNamespace": "x"})


def test_concurrent_filters_never_share_a_device(cluster: KubeCluster, fast_switching: None) -> None:
    logic = ExtenderLogic(cluster)
    names = [f"n{i}" for i in range(4)]
    # 4 nodes x 4 devices, each pod takes a whole device (100 % cores): 16 fit
    results: list[dict[str, Any]] = []
    lock = threading.Lock()

    def worker(k: int) -> None:
        for i in range(5):
            out = logic.filter({"Pod": pod_obj(f"p{k}-{i}", cores=100, mem=1000), "NodeNames": names})
            with lock:
                results.append(out)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(1 for r in results if r["nodenames"]) == 16
    grants = [g.uuid for a in cluster.state.allocations.values() for g in a.grants]
    assert len(grants) == len(set(grants)) == 16


@pytest.fixture
def server(cluster: KubeCluster) -> Iterator[ExtenderServer]:
    srv = ExtenderServer(ExtenderLogic(cluster), "127.0.0.1", 0)
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


def test_http_api(server: ExtenderServer) -> None:
    base = f"http://127.0.0.1:{server.port}"
    with httpx.Client(base_url=base, timeout=5) as http:
        assert http.get("/healthz").text == "ok"
        r = http.post("/filter", json={"Pod": pod_obj("p"), "NodeNames": ["n0", "n1"]})
        assert r.status_code == 200
        node = r.json()["nodenames"][0]
        r = http.post("/bind", json={"PodName": "p", "PodNamespace": "default", "Node": node})
        assert r.json() == {"error": ""}
        r = http.post("/filter", content=b"{nope")
        assert r.status_code == 400
        assert "not valid JSON" in r.json()["error"]
        r = http.post("/filter", json=[1])
        assert r.status_code == 400
        assert http.post("/preempt", json={}).status_code == 400  # a verb now: the pod is missing
        assert http.post("/evict", json={}).status_code == 404
        r = http.get("/metrics")
        assert r.content == server.metrics.exposition.render()  # the one exposition path (gpucluster.exposition)
        assert r.headers["content-type"] == server.metrics.exposition.content_type
        metrics = r.text
        assert 'gpucluster_extender_requests_total{result="ok",verb="filter"} 1.0' in metrics
        assert 'gpucluster_extender_requests_total{result="bad_request",verb="filter"} 2.0' in metrics
        assert "gpucluster_scheduler_pods 1.0" in metrics
        r = http.post("/filter", json={"Pod": pod_obj("huge", mem=10**6), "NodeNames": ["n0"]})
        assert r.status_code == 200
        assert r.json()["error"] == "0/1 nodes are available: 1 InsufficientGPUMemory."
        metrics = http.get("/metrics").text
        assert 'gpucluster_extender_requests_total{result="unschedulable",verb="filter"} 1.0' in metrics
        assert json.loads(http.post("/prioritize", json={"Pod": pod_obj("p"), "NodeNames": [node]}).text) == [
            {"host": node, "score": 10}]


# ---------------------------------------------------------------------------------------------- preempt
def _prio(obj: dict[str, Any], priority: int) -> dict[str, Any]:
    obj["spec"]["priority"] = priority
    return obj


@pytest.fixture
def full_node() -> tuple[KubeCluster, ExtenderLogic]:
    """One node, four 80 GB GPUs, each held by one 60 GB pod of priority 0..3."""
    c = KubeCluster(registry(), "binpack", binder=RecordingBinder())
    c.set_nodes([node_obj("n0")])
    logic = ExtenderLogic(c)
    for i in range(4):
        out = logic.filter({"Pod": _prio(pod_obj(f"low-{i}", mem=60000), i), "NodeNames": ["n0"]})
        assert out["nodenames"] == ["n0"]
        assert logic.bind({"PodName": f"low-{i}", "PodNamespace": "default", "Node": "n0"}) == {"error": ""}
    return c, logic


def test_preempt_frees_the_fewest_lowest_priority_devices(full_node: tuple[KubeCluster, ExtenderLogic]) -> None:
    c, logic = full_node
    before = dict(c.state.allocations)
    high = _prio(pod_obj("high", mem=70000), 100)
    out = logic.filter({"Pod": high, "NodeNames": ["n0"]})
    assert out["failedNodes"] == {"n0": "InsufficientGPUMemory"}
    assert out["error"] == ""  # no error: kube-scheduler must run its preemption and call /preempt
    res = logic.preempt({"Pod": high, "NodeNameToMetaVictims": {"n0": {"Pods": [], "NumPDBViolations": 0}}})
    assert res == {"NodeNameToMetaVictims": {"n0": {"Pods": [{"UID": "uid-low-0"}], "NumPDBViolations": 0}}}
    # kube-scheduler's own victims are kept; when they free a device, nobody else is evicted
    res = logic.preempt({"Pod": high, "NodeNameToVictims": {"n0": {"Pods": [pod_obj("low-2")],
                                                                   "NumPDBViolations": 1}}})
    assert res["NodeNameToMetaVictims"]["n0"] == {"Pods": [{"UID": "uid-low-2"}], "NumPDBViolations": 1}
    # only lower priorities may go
    mid = _prio(pod_obj("mid", mem=70000), 1)
    res = logic.preempt({"Pod": mid, "NodeNameToMetaVictims": {"n0": {"Pods": []}}})
    assert res["NodeNameToMetaVictims"]["n0"]["Pods"] == [{"UID": "uid-low-0"}]
    # a preemptor that fits no device even on an empty node: the node is dropped
    huge = _prio(pod_obj("huge", mem=90000), 100)
    assert logic.preempt({"Pod": huge, "NodeNameToMetaVictims": {"n0": {"Pods": []}}}) == {
        "NodeNameToMetaVictims": {}}
    assert c.state.allocations == before  # nothing was released for real
    assert int(c.state.dev_mem_used[0].sum()) == 4 * 60000


def test_preempt_keeps_a_node_where_the_preemptor_fits_already(
        full_node: tuple[KubeCluster, ExtenderLogic]) -> None:
    """A victim's deletion reached the informer between /filter and /preempt: the node stays a candidate with
    no victims (kube-scheduler nominates it and retries the pod) instead of being dropped."""
    c, logic = full_node
    high = _prio(pod_obj("high", mem=70000), 100)
    assert logic.filter({"Pod": high, "NodeNames": ["n0"]})["failedNodes"] == {"n0": "InsufficientGPUMemory"}
    c.delete_pod("default/low-1")
    res = logic.preempt({"Pod": high, "NodeNameToMetaVictims": {"n0": {"Pods": None, "NumPDBViolations": 0}}})
    assert res == {"NodeNameToMetaVictims": {"n0": {"Pods": [], "NumPDBViolations": 0}}}
    assert logic.filter({"Pod": high, "NodeNames": ["n0"]})["nodenames"] == ["n0"]


def test_preempt_leaves_out_nodes_where_the_preemptor_cannot_evict(
        full_node: tuple[KubeCluster, ExtenderLogic]) -> None:
    _c, logic = full_node
    low = _prio(pod_obj("lowest", mem=70000), 0)  # priority 0: nobody below it
    out = logic.filter({"Pod": low, "NodeNames": ["n0"]})
    assert out["error"].startswith("0/1 nodes are available")
    assert logic.preempt({"Pod": low, "NodeNameToMetaVictims": {"n0": {"Pods": []}}}) == {
        "NodeNameToMetaVictims": {}}
    with pytest.raises(ExtenderError):
        logic.preempt({"Pod": low, "NodeNameToMetaVictims": ["n0"]})


def test_preempt_over_http(full_node: tuple[KubeCluster, ExtenderLogic]) -> None:
    _c, logic = full_node
    server = ExtenderServer(logic, "127.0.0.1", 0)
    server.start()
    try:
        r = httpx.post(f"http://127.0.0.1:{server.port}/preempt", timeout=5, json={
            "Pod": _prio(pod_obj("high", mem=70000), 100), "NodeNameToMetaVictims": {"n0": {"Pods": []}}})
        assert r.status_code == 200
        assert r.json()["NodeNameToMetaVictims"]["n0"]["Pods"] == [{"UID": "uid-low-0"}]
        metrics = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
        assert 'gpucluster_extender_requests_total{result="ok",verb="preempt"} 1.0' in metrics
    finally:
        server.stop()


def test_configz_shows_the_share_of_nodes_the_secondary_scheduler_scores() -> None:
    """Issue 25: what ``k8s scheduler --percentage-of-nodes-to-score`` (the chart's value in scheduler mode) gave
    the running process, served at ``/configz`` as kube-scheduler serves its own (the Helm test reads it after an
    upgrade)."""
    from gpucluster.kubernetes.runtime import RunOptions

    for opts, expected in ((RunOptions(), 100), (RunOptions(percentage_of_nodes_to_score=30), 30)):
        cluster = KubeCluster(registry(), opts.placement_policy, scheduler_name="gpu",
                              percentage_of_nodes_to_score=opts.percentage_of_nodes_to_score)
        assert cluster.scheduler.framework.profile.percentage_of_nodes_to_score == expected
        srv = ExtenderServer(ExtenderLogic(cluster), "127.0.0.1", 0)
        srv.start()
        try:
            body = httpx.get(f"http://127.0.0.1:{srv.port}/configz", timeout=5).json()
        finally:
            srv.stop()
        assert body["profile"]["percentageOfNodesToScore"] == expected
        assert body["profile"]["schedulerName"] == "gpu"
