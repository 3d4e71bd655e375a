"""``KubeBinder`` against a real API server: it writes HAMi's decision annotations and the Binding; a retried
bind to the same node succeeds (the API server answers 409, the pod is already there); a bind to another node,
or of a pod that is gone, is an error Status, never an exception."""

from __future__ import annotations

import json
from typing import Any

import pytest
from k8s_helpers import core_api, gpu_pod, registry

from gpucluster.kubernetes.binder import SCHEDULED_BY_ANNOTATION, KubeBinder
from gpucluster.kubernetes.convert import parse_pod
from gpucluster.model import Allocation, DeviceGrant

pytestmark = pytest.mark.integration


def test_bind_retry_and_refusals(kube_client: Any, namespace: str) -> None:
    core = core_api(kube_client)
    created = core.create_namespaced_pod(namespace, gpu_pod("p", "nobody", mem=4000, cores=25),
                                         _preload_content=False)
    pod = parse_pod(json.loads(created.data), registry())
    grant = DeviceGrant(0, "GPU-binder-0", "nvidia", 4000, 250)
    alloc = Allocation(pod.key, "binder-node-a", pod.cpu_milli, pod.memory_mib, ((grant,),), pod=pod)
    binder = KubeBinder(kube_client, registry(), identity="binder-test")

    assert binder.bind(pod, alloc).ok
    live = core.read_namespaced_pod("p", namespace)
    assert live.spec.node_name == "binder-node-a"
    ann = live.metadata.annotations
    assert ann["hami.io/vgpu-node"] == "binder-node-a" and ann[SCHEDULED_BY_ANNOTATION] == "binder-test"
    assert ann["hami.io/vgpu-devices-allocated"].startswith("GPU-binder-0,NVIDIA,4000,25:")

    again = binder.bind(pod, alloc)  # a retried bind: 409 from the API server, the pod is on that node
    assert again.ok, again.reasons
    elsewhere = binder.bind(pod, Allocation(pod.key, "binder-node-b", 0, 0, ((grant,),), pod=pod))
    assert not elsewhere.ok and "409" in elsewhere.reasons[0]
    assert core.read_namespaced_pod("p", namespace).spec.node_name == "binder-node-a"

    core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)
    gone = binder.bind(pod, alloc)
    assert not gone.ok and "404" in gone.reasons[0]
    assert (binder.binds, binder.failures) == (2, 2)
