"""Concurrent extender requests made to race, not hoped to.

Under the GIL two request threads almost never switch between the scheduler's snapshot and its assume, so a
test that merely starts threads passes with the locks gone. Here the interpreter switches threads every
microsecond (``sys.setswitchinterval``) and a rendezvous sits right before ``SchedulerCache.assume``: a thread
that reaches it waits (bounded) for a second one. With the locks, the second thread is blocked on them and never
arrives, so the first goes on alone after the wait; without them both have decided on the same snapshot and
assume the same device, which the ``check_fits`` safety net turns into an internal error, and without that
too into a device handed out twice. One free device and two pods that each need all of it make the collision
certain.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.extender import ExtenderLogic, ExtenderServer

from .helpers import RecordingBinder, Rendezvous, node_obj, pod_obj, registry


def one_gpu_cluster(binder: RecordingBinder | None = None) -> KubeCluster:
    cluster = KubeCluster(registry(), "binpack", binder=binder)
    cluster.set_nodes([node_obj("n0", gpus=1)])
    return cluster


def whole_gpu(name: str) -> dict[str, Any]:
    return pod_obj(name, cores=100, mem=1000)


def run_together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls on their own threads at once; their results in order (an exception is re-raised)."""
    out: list[Any] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(k: int) -> None:
        start.wait()
        try:
            out[k] = calls[k]()
        except Exception as exc:
            out[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "a request thread hung"
    for r in out:
        if isinstance(r, Exception):
            raise r
    return out


def device_holders(cluster: KubeCluster) -> list[str]:
    """Pods holding a share of the one device, one entry per grant (a device given twice shows twice)."""
    return [a.pod_key for a in cluster.state.allocations.values() for _ in a.grants]


def assert_one_device_one_holder(cluster: KubeCluster) -> None:
    holders = device_holders(cluster)
    assert len(holders) == 1, f"the device is held by {holders}"
    assert int(cluster.state.dev_core_used[0, 0]) == int(cluster.state.dev_core_cap[0, 0])
    assert int(cluster.state.dev_tasks[0, 0]) == 1


def test_two_filters_at_once_give_the_last_device_to_one_pod(fast_switching: None, rendezvous: Rendezvous) -> None:
    cluster = one_gpu_cluster()
    logic = ExtenderLogic(cluster)
    results = run_together(*(lambda n=n: logic.filter({"Pod": whole_gpu(n), "NodeNames": ["n0"]})
                             for n in ("a", "b")))
    chosen = [r for r in results if r["nodenames"] == ["n0"]]
    refused = [r for r in results if r["nodenames"] == []]
    assert len(chosen) == 1 and len(refused) == 1, results
    assert rendezvous.gave_up and not rendezvous.met  # the second decision waited for the first one
    assert refused[0]["error"] == "0/1 nodes are available: 1 InsufficientGPUCores."
    assert_one_device_one_holder(cluster)


@pytest.fixture
def served() -> Iterator[tuple[KubeCluster, RecordingBinder, str]]:
    """An extender over HTTP on 127.0.0.1 whose cluster has one node with one GPU; ``read_pod`` answers for
    pods it never filtered (a bind after a restart)."""
    binder = RecordingBinder()
    cluster = one_gpu_cluster(binder)
    logic = ExtenderLogic(cluster, read_pod=lambda ns, name: whole_gpu(name))
    server = ExtenderServer(logic, "127.0.0.1", 0)
    server.start()
    try:
        yield cluster, binder, f"http://127.0.0.1:{server.port}"
    finally:
        server.stop()


def test_filter_and_bind_over_http_at_once_never_share_the_device(
        fast_switching: None, rendezvous: Rendezvous, served: tuple[KubeCluster, RecordingBinder, str]) -> None:
    """A /bind for a pod the extender holds no decision for (it decides on the named node) races a /filter
    for another pod that needs the same device."""
    cluster, binder, url = served
    with httpx.Client(base_url=url, timeout=60) as a, httpx.Client(base_url=url, timeout=60) as b:
        bind, flt = run_together(
            lambda: a.post("/bind", json={"PodName": "late", "PodNamespace": "default", "Node": "n0"}),
            lambda: b.post("/filter", json={"Pod": whole_gpu("fresh"), "NodeNames": ["n0"]}),
        )
    assert (bind.status_code, flt.status_code) == (200, 200), (bind.text, flt.text)
    bound = bind.json()["error"] == ""
    filtered = flt.json()["nodenames"] == ["n0"]
    assert bound != filtered, (bind.json(), flt.json())  # exactly one of them got the device
    assert_one_device_one_holder(cluster)
    assert binder.bound == ([("default/late", "n0")] if bound else [])
    if not bound:
        assert "no longer fits node n0" in bind.json()["error"]


def test_many_filters_and_binds_over_http_hand_out_each_device_once(fast_switching: None) -> None:
    """4 nodes x 4 devices, 24 whole-device pods filtered and bound by 6 clients at once: 16 placed, each on
    its own device, every placed pod bound once, the rest refused with counted reasons."""
    binder = RecordingBinder()
    cluster = KubeCluster(registry(), "binpack", binder=binder)
    names = [f"n{i}" for i in range(4)]
    cluster.set_nodes([node_obj(n) for n in names])
    server = ExtenderServer(ExtenderLogic(cluster), "127.0.0.1", 0)
    server.start()
    url = f"http://127.0.0.1:{server.port}"

    def client(k: int) -> list[tuple[str, str | None, str]]:
        out = []
        with httpx.Client(base_url=url, timeout=60) as http:
            for i in range(4):
                name = f"p{k}-{i}"
                r = http.post("/filter", json={"Pod": whole_gpu(name), "NodeNames": names})
                assert r.status_code == 200, r.text
                got = r.json()["nodenames"]
                if not got:
                    out.append((name, None, r.json()["error"]))
                    continue
                b = http.post("/bind", json={"PodName": name, "PodNamespace": "default", "Node": got[0]})
                assert b.status_code == 200 and b.json() == {"error": ""}, b.text
                out.append((name, got[0], ""))
        return out

    try:
        results = [x for part in run_together(*(lambda k=k: client(k) for k in range(6))) for x in part]
    finally:
        server.stop()
    placed = [(n, node) for n, node, _ in results if node]
    assert len(placed) == 16
    assert {why for _, node, why in results if not node} == {"0/4 nodes are available: 4 InsufficientGPUCores."}
    grants = [g.uuid for a in cluster.state.allocations.values() for g in a.grants]
    assert len(grants) == len(set(grants)) == 16
    assert sorted(binder.bound) == sorted((f"default/{n}", node) for n, node in placed)
    assert cluster.summary()["assumed"] == 0
