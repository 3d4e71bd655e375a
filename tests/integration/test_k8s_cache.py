"""The scheduler's cache of a real API server (``KubeCluster`` fed by the ``Informer``'s list and watch):

* a pod the informer sees bound stops being assumed at once (its devices stay held for good), never only when
  the assumption's TTL runs out: here the TTL is an hour, so waiting for it would fail the test;
* a relist of pods (a full resync, which the informer does after every watch that ends: here every second)
  keeps the pods that are decided and assumed but not created or bound yet (the control plane decides a job's
  pods before it creates them): their devices go to nobody else;
* a node relabelled through the API server (``kubectl label node``, nothing else of it changes) is matched by
  node selectors as soon as the watch delivers it, without waiting for a relist (here an hour away); a label
  taken off stops matching;
* a node whose object cannot be understood is counted in ``bad_nodes`` (the overview shows it) while it exists,
  and no longer once it is deleted.

One registered node with one GPU of a model unique to the run; pods ask for that model. The scheduler runs in
this process, its decisions taken by the test; the informer, the pods and the Binding are the API server's.
``tests/kubernetes/test_kube_cache.py`` states the same for objects fed by hand.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from k8s_helpers import core_api, gpu_pod, registry, wait_until

from gpucluster.kubernetes.convert import parse_pod
from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.model import DeviceSpec, NodeSpec

pytestmark = pytest.mark.integration

HOUR = 3600.0


class Rig:
    def __init__(self, kube_client: Any, namespace: str, run: str, watch_s: int = 300) -> None:
        self.core = core_api(kube_client)
        self.namespace = namespace
        self.run = run
        self.name = f"kc-{run}"
        node = NodeSpec(name=f"kc-{run}", cpu_milli=32000, memory_mib=65536, labels={"gpucluster.io/run": run},
                        devices=(DeviceSpec(f"GPU-{run}", 0, "nvidia", f"MODEL-{run}", 81920),))
        self.registrar = NodeRegistrar(kube_client, [node], registry())
        self.registrar.register()
        opts = RunOptions(scheduler_name=self.name, handshake_timeout=HOUR, assume_ttl=HOUR)
        self.cluster, self.binder, self.informer = build(kube_client, registry(), opts, identity=self.name)
        self.informer.watch_timeout = watch_s
        self.relists = 0
        self.informer.pod_resync_listeners.append(self._relisted)
        self.informer.start()
        assert self.informer.wait_synced(30), "the informer did not sync"
        wait_until(lambda: node.name in self.cluster.state.node_index, 30, "the node in the scheduler's state")

    def _relisted(self, keys: set[str]) -> None:
        self.relists += 1

    def whole_gpu_pod(self, name: str) -> dict[str, Any]:
        """A pod that takes the node's only GPU whole (its memory and cores)."""
        return gpu_pod(name, self.name, mem=81920, cores=100, run=self.run,
                       annotations={"nvidia.com/use-gputype": f"MODEL-{self.run}"})

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        created = self.core.create_namespaced_pod(self.namespace, obj, _preload_content=False)
        out: dict[str, Any] = json.loads(created.data)
        return out

    def assumed(self, key: str) -> bool:
        with self.cluster.lock:
            return self.cluster.scheduler.cache.is_assumed(key)

    def holds(self, key: str) -> bool:
        with self.cluster.lock:
            return key in self.cluster.state.allocations

    def close(self) -> None:
        self.informer.stop()
        self.registrar.delete()


@pytest.fixture
def rig(kube_client: Any, namespace: str) -> Iterator[Rig]:
    r = Rig(kube_client, namespace, uuid.uuid4().hex[:6])
    try:
        yield r
    finally:
        r.close()


@pytest.fixture
def relisting_rig(kube_client: Any, namespace: str) -> Iterator[Rig]:
    r = Rig(kube_client, namespace, uuid.uuid4().hex[:6], watch_s=1)
    try:
        yield r
    finally:
        r.close()


def test_a_pod_the_informer_sees_bound_stops_being_assumed_at_once(rig: Rig) -> None:
    obj = rig.create(rig.whole_gpu_pod("seen-bound"))
    pod = parse_pod(obj, registry())
    decision = rig.cluster.decide(pod)
    assert decision.ok and decision.allocation is not None and rig.assumed(pod.key)
    # the Binding (with HAMi's annotations) lands, but no bind verb confirms it here (a reply that was lost,
    # or another replica that bound it): only the informer can tell
    assert rig.binder.bind(pod, decision.allocation).ok
    wait_until(lambda: not rig.assumed(pod.key), 30, "the bound pod to stop being assumed (TTL: an hour)")
    assert rig.holds(pod.key)
    assert rig.core.read_namespaced_pod(pod.name, rig.namespace).spec.node_name == decision.node
    rival = parse_pod(rig.create(rig.whole_gpu_pod("rival")), registry())
    assert not rig.cluster.decide(rival).ok  # the GPU stays taken for good


def test_a_pod_relist_keeps_pods_decided_but_not_bound(relisting_rig: Rig) -> None:
    rig = relisting_rig
    obj = rig.whole_gpu_pod("decided")
    obj["metadata"]["namespace"] = rig.namespace
    decided = parse_pod(obj, registry())
    decision = rig.cluster.decide(decided)  # decided before its pod object exists (as the control plane does)
    assert decision.ok and rig.assumed(decided.key)
    seen = rig.relists
    wait_until(lambda: rig.relists >= seen + 2, 60, "two relists of the pods")
    assert rig.assumed(decided.key) and rig.holds(decided.key)
    rival = parse_pod(rig.create(rig.whole_gpu_pod("rival")), registry())
    assert not rig.cluster.decide(rival).ok  # the decided pod's GPU goes to nobody else
    # and once it is created and bound, the relists keep it as bound
    created = rig.create(rig.whole_gpu_pod("decided"))
    assert rig.binder.bind(parse_pod(created, registry()), decision.allocation).ok  # type: ignore[arg-type]
    wait_until(lambda: not rig.assumed(decided.key), 30, "the decided pod, now bound, to be confirmed")
    seen = rig.relists
    wait_until(lambda: rig.relists >= seen + 2, 60, "two more relists")
    assert rig.holds(decided.key)


def test_a_relabelled_node_is_matched_by_node_selectors_once_the_watch_delivers_it(rig: Rig) -> None:
    label = f"gpucluster.io/cache-{rig.run}"

    def selecting(name: str, value: str) -> Any:
        obj = rig.whole_gpu_pod(name)
        obj["spec"]["nodeSelector"] = {label: value}
        return parse_pod(obj, registry())

    def label_node(value: str | None) -> None:
        rig.core.patch_node(rig.name, {"metadata": {"labels": {label: value}}})

    def decides(name: str, value: str) -> bool:
        d = rig.cluster.decide(selecting(name, value))
        if d.ok:
            rig.cluster.scheduler.cache.forget(d.pod.key)  # asked only whether it fits: nothing stays assumed
        return d.ok

    assert not decides("before", "yes")  # no node carries the label: its mask is cached now
    label_node("yes")
    tries = iter(range(1_000_000))
    wait_until(lambda: decides(f"after-{next(tries)}", "yes"), 30, "the relabelled node to match the selector")
    label_node(None)
    wait_until(lambda: not decides(f"removed-{next(tries)}", "yes"), 30, "the label taken off to stop matching")


def test_a_bad_node_is_counted_while_it_exists(rig: Rig) -> None:
    name = f"kc-bad-{rig.run}"
    rig.core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
        "name": name, "labels": {"gpucluster.io/run": rig.run},
        "annotations": {"hami.io/node-nvidia-register": "not,a,device"}}})
    try:
        wait_until(lambda: name in rig.cluster.bad_nodes, 30, "the bad node to be counted")
    finally:
        rig.core.delete_node(name)
    wait_until(lambda: name not in rig.cluster.bad_nodes, 30, "the deleted bad node to be no longer counted")
    assert name not in rig.cluster.state.node_index
