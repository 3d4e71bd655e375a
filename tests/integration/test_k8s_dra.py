"""DRA on a real API server (resource.k8s.io/v1, Kubernetes >= 1.36): kube-scheduler's DynamicResources plugin
allocates the claims of default-scheduler pods while our secondary scheduler (a separate process, killed and
restarted half way) allocates the claims of its own pods and places HAMi pods, on the same nodes.

The test driver (``tests/kubernetes/dra_objects.py``) publishes, per node, four whole GPUs the way NVIDIA's
``gpu.nvidia.com`` driver does and four shared GPUs the way HAMi's DRA driver does (consumable memory and cores);
the shared four are also in the node's HAMi register annotation (same UUIDs), so HAMi pods and shared claims
meet on them. kube-scheduler's pods only ask for the whole GPUs: it cannot see HAMi's annotation bookings
(``docs/kubernetes.md`` "DRA").

A checker then reads every claim and every pod from the server: per GPU, who holds it and how much; zero GPUs
may be held twice (an unshared GPU in two claims, a shared one over its memory or cores, a HAMi pod on a GPU
HAMi does not publish).
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import uuid
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import Process, create_pods, gpu_pod, list_pods
from kubernetes import client
from polling import wait_until
from tests.kubernetes.dra_objects import (
    HAMI_DRIVER,
    NVIDIA_DRIVER,
    claim,
    claim_pod,
    device_class,
    gpu_uuid,
    hami_device,
    nvidia_device,
    resource_slice,
)

from gpucluster.kubernetes.dra import parse_claim, parse_slice

pytestmark = pytest.mark.integration

NODES = 24
WHOLE, SHARED = 4, 4  # per node: GPUs 0-3 from NVIDIA's driver, 4-7 from HAMi's DRA driver and annotation
GPU_MIB = 80 * 1024


def _version(api: Any) -> tuple[int, int]:
    info = client.VersionApi(api).get_code()
    return int(info.major), int("".join(ch for ch in info.minor if ch.isdigit()))


def _hami_register(node: str) -> str:
    return json.dumps([{"id": gpu_uuid(node, j), "index": j - WHOLE, "count": 10, "devmem": GPU_MIB, "devcore": 100,
                        "type": "NVIDIA-A100-SXM4-80GB", "numa": 0, "health": True}
                       for j in range(WHOLE, WHOLE + SHARED)])


def _raw(resp: Any) -> dict[str, Any]:
    try:
        out: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return out


def check_devices(slices: list[dict[str, Any]], claims: list[dict[str, Any]], pods: list[dict[str, Any]],
                  hami_uuids: set[str]) -> tuple[list[str], dict[str, int]]:
    """Every GPU's holders from the API objects alone -> (violations, counts of holders by kind)."""
    devices = {d.key: d for s in slices for d in parse_slice(s).devices}
    by_uuid = {d.uuid: d for d in devices.values()}
    use: dict[str, list[tuple[str, int, int, bool]]] = defaultdict(list)  # uuid -> (holder, MiB, cores %, whole)
    counts = {"claims": 0, "hami_pods": 0}
    for obj in claims:
        info = parse_claim(obj)
        for r in info.allocated or ():
            dev = devices.get(r.key)
            if dev is None:
                continue
            counts["claims"] += 1
            if r.consumed:
                mem = math.ceil(r.consumed.get("memory", 0) / (1 << 20))
                use[dev.uuid].append((f"claim {info.key}", mem, int(r.consumed.get("cores", 0)), False))
            else:
                use[dev.uuid].append((f"claim {info.key}", dev.memory_mib, 100, True))
    for p in pods:
        text = (p["metadata"].get("annotations") or {}).get("hami.io/vgpu-devices-allocated")
        if not text or not p["spec"].get("nodeName"):
            continue
        for part in text.split(";"):
            for item in filter(None, part.split(":")):
                uid, _kind, mem, cores = item.split(",")[:4]
                counts["hami_pods"] += 1
                use[uid].append((f"pod {p['metadata']['name']}", int(mem), int(cores), False))
    bad = []
    for uid, holders in use.items():
        dev = by_uuid.get(uid)
        names = ", ".join(h[0] for h in holders)
        if dev is None:
            bad.append(f"{uid}: held by {names} but published by no driver")
            continue
        if any(h[0].startswith("pod") for h in holders) and uid not in hami_uuids:
            bad.append(f"{uid}: a HAMi pod holds a GPU only DRA publishes ({names})")
        if any(h[3] for h in holders) and len(holders) > 1:
            bad.append(f"{uid}: held whole by one and shared with others: {names}")
        if sum(h[1] for h in holders) > dev.memory_mib or sum(h[2] for h in holders) > dev.cores_pct:
            bad.append(f"{uid}: over capacity ({sum(h[1] for h in holders)} MiB, "
                       f"{sum(h[2] for h in holders)} % cores): {names}")
    return bad, counts


def test_mixed_500_pods_two_schedulers_no_gpu_held_twice(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, gpu_node_factory: Any, namespace: str,
    tmp_path: Path,
) -> None:
    if _version(kube_client) < (1, 36):
        pytest.skip("DRA with consumable capacity and extended resources needs Kubernetes >= 1.36")
    core, res = client.CoreV1Api(kube_client), client.ResourceV1Api(kube_client)
    run = uuid.uuid4().hex[:6]
    ext = f"example.com/gpu-{run}"
    whole_class, shared_class = f"nvidia-{run}", f"hami-{run}"
    nodes = [f"dra-{run}-{i}" for i in range(NODES)]
    for name in nodes:
        gpu_node_factory(name, {"nvidia.com/gpu": str(SHARED * 10)},
                         annotations={"hami.io/node-nvidia-register": _hami_register(name)},
                         labels={"gpucluster.io/run": run})
    slices = []
    for name in nodes:
        slices.append(resource_slice(name, NVIDIA_DRIVER, [nvidia_device(name, j) for j in range(WHOLE)]))
        slices.append(resource_slice(name, HAMI_DRIVER, [hami_device(name, j) for j in range(WHOLE, WHOLE + SHARED)]))
    for s in slices:
        res.create_resource_slice(s)
    res.create_device_class(device_class(whole_class, NVIDIA_DRIVER, extended=ext))
    res.create_device_class(device_class(shared_class, HAMI_DRIVER))
    hami_uuids = {gpu_uuid(n, j) for n in nodes for j in range(WHOLE, WHOLE + SHARED)}

    def pod(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"].pop("uid", None)
        obj["metadata"]["namespace"] = namespace
        obj["spec"]["nodeSelector"] = {"gpucluster.io/run": run}
        obj["spec"]["terminationGracePeriodSeconds"] = 0
        obj.pop("status", None)
        return obj

    claims, pods = [], []
    for i in range(40):  # kube-scheduler: whole GPUs through claims and through the extended resource
        claims.append(claim(f"ks-{i}", whole_class, namespace=namespace))
        pods.append(pod(claim_pod(f"ks-{i}", [f"ks-{i}"], scheduler="default-scheduler")))
    for i in range(20):
        pods.append(pod(claim_pod(f"ks-ext-{i}", [], scheduler="default-scheduler", extended={ext: "1"})))
    for i in range(20):  # ours: whole GPUs, shared GPUs, the extended resource, HAMi pods
        claims.append(claim(f"gc-{i}", whole_class, namespace=namespace))
        pods.append(pod(claim_pod(f"gc-{i}", [f"gc-{i}"])))
    for i in range(200):
        claims.append(claim(f"gcs-{i}", shared_class, namespace=namespace, capacity={"memory": "8Gi", "cores": "20"}))
        pods.append(pod(claim_pod(f"gcs-{i}", [f"gcs-{i}"])))
    for i in range(10):
        pods.append(pod(claim_pod(f"gc-ext-{i}", [], extended={ext: "1"})))
    hami = [gpu_pod(f"hami-{i}", "gpucluster", mem=8000, cores=20, run=run) for i in range(210)]
    assert len(pods) + len(hami) == 500
    for c in claims:
        c["metadata"].pop("uid", None)
        c["metadata"].pop("resourceVersion", None)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: res.create_namespaced_resource_claim(namespace, c), claims))

    kube_scheduler_factory("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                           "profiles:\n- schedulerName: default-scheduler\n", f"dra-{run}")
    args = ["k8s", "scheduler", "--kubeconfig", str(kube_control_plane.kubeconfig), "--no-leader-elect",
            "--scheduler-name", "gpucluster", "--claim-settle", "1"]
    ours = Process(args, tmp_path / "scheduler-1.log").start()
    try:
        create_pods(core, namespace, [*pods, *hami])

        def ours_bound() -> int:
            return sum(1 for p in list_pods(core, namespace)
                       if p["spec"].get("nodeName") and p["spec"]["schedulerName"] == "gpucluster")

        wait_until(lambda: ours_bound() >= 150, 420, "half of our pods to be bound")
        ours.kill()  # a crash in the middle: claims written, pods half bound
        ours = Process(args, tmp_path / "scheduler-2.log").start()

        def all_bound() -> bool:
            if not ours.alive():
                raise AssertionError(f"our scheduler exited:\n{ours.log()[-3000:]}")
            return all(p["spec"].get("nodeName") for p in list_pods(core, namespace))

        wait_until(all_bound, 420, "all 500 pods to be bound")
    finally:
        ours.stop()
    all_claims = _raw(res.list_namespaced_resource_claim(namespace, _preload_content=False))["items"]
    all_pods = list_pods(core, namespace)
    bad, counts = check_devices(slices, all_claims, all_pods, hami_uuids)
    assert bad == [], "\n".join(bad[:20])
    assert counts["claims"] == 290 and counts["hami_pods"] == 210, counts  # 260 claims + 30 extended-resource ones
    # every claim pod sits on the node its claims were allocated for, reserved for it
    by_name = {p["metadata"]["name"]: p for p in all_pods}
    for obj in all_claims:
        info = parse_claim(obj)
        assert info.allocated, f"claim {info.key} is not allocated"
        [(_res, owner, uid)] = info.reserved_for
        node = obj["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"][0]
        assert by_name[owner]["spec"]["nodeName"] == node and by_name[owner]["metadata"]["uid"] == uid
    # a claim our scheduler allocated, as kubectl shows it
    kubectl = kube_control_plane.bin_dir / "kubectl" if hasattr(kube_control_plane, "bin_dir") else None
    exe = str(kubectl) if kubectl is not None and kubectl.exists() else shutil.which("kubectl")
    if exe:
        out = subprocess.run([exe, "--kubeconfig", str(kube_control_plane.kubeconfig), "-n", namespace, "get",
                              "resourceclaim", "gcs-0", "-o", "yaml"], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        print(f"--- kubectl get resourceclaim gcs-0 -o yaml (allocated by gpucluster) ---\n{out}")
        assert "consumedCapacity" in out and "reservedFor" in out
    log = ours.log()
    assert "Traceback" not in log, log[-3000:]


def test_claim_pods_of_one_pass_are_checked_after_one_settle_and_a_conflict_costs_only_its_pod(
    kube_control_plane: Any, kube_client: Any, gpu_node_factory: Any, namespace: str,
) -> None:
    """Six single pods with claims in one pass: their claims are written, then read back with every claim on the
    server once after one settle (one read, where each pod used to wait a settle and read of its own, so 220 claim
    pods took 220 settles), and a device another scheduler allocated during that settle costs only the pod that
    had it (its claim taken back, the pod placed again on a free GPU in the next pass); the other five bind. The
    scheduler runs in this process (passes called by the test); the conflicting allocation is written by the test
    from inside the settle's read, so the race happens every run."""
    if _version(kube_client) < (1, 36):
        pytest.skip("DRA with consumable capacity and extended resources needs Kubernetes >= 1.36")
    from k8s_helpers import registry

    from gpucluster.kubernetes.runtime import RunOptions, build
    from gpucluster.kubernetes.secondary import SecondaryScheduler

    core, res = client.CoreV1Api(kube_client), client.ResourceV1Api(kube_client)
    run = uuid.uuid4().hex[:6]
    name, whole_class = f"settle-{run}", f"nvidia-settle-{run}"
    nodes = [f"settle-{run}-{i}" for i in range(2)]
    for node in nodes:
        gpu_node_factory(node, {"nvidia.com/gpu": str(SHARED * 10)},
                         annotations={"hami.io/node-nvidia-register": _hami_register(node)},
                         labels={"gpucluster.io/run": run})
    slices = [resource_slice(n, NVIDIA_DRIVER, [nvidia_device(n, j) for j in range(WHOLE)]) for n in nodes]
    for s in slices:
        res.create_resource_slice(s)
    res.create_device_class(device_class(whole_class, NVIDIA_DRIVER))
    names = [f"p{i}" for i in range(6)]
    for n in [*names, "theirs"]:
        body = claim(n, whole_class, namespace=namespace)
        body["metadata"].pop("uid", None)
        body["metadata"].pop("resourceVersion", None)
        res.create_namespaced_resource_claim(namespace, body)
    opts = RunOptions(scheduler_name=name, handshake_timeout=3600, assume_ttl=3600, sync_timeout=30)
    cluster, binder, informer = build(kube_client, registry(), opts, identity=name)
    sched = SecondaryScheduler(cluster, binder, name, claim_settle=0.5)
    informer.pod_listeners.append(sched.on_pod)
    informer.claim_listeners.append(sched.on_claim)
    reads: list[int] = []
    stolen: list[str] = []
    list_all = binder.claims.list_all

    def read_every_claim() -> list[dict[str, Any]]:
        """The settle's read; on the first, "kube-scheduler" allocates the device our claim p0 was just given."""
        reads.append(1)
        if len(reads) == 1:
            ours = _raw(res.read_namespaced_resource_claim("p0", namespace, _preload_content=False))
            alloc = ours["status"]["allocation"]
            theirs = _raw(res.read_namespaced_resource_claim("theirs", namespace, _preload_content=False))
            theirs["status"] = {"allocation": {**alloc, "devices": {"results": [
                {k: r[k] for k in ("request", "driver", "pool", "device")} for r in alloc["devices"]["results"]]}}}
            res.replace_namespaced_resource_claim_status("theirs", namespace, theirs)
            stolen.extend(f"{r['pool']}/{r['device']}" for r in alloc["devices"]["results"])
        return list_all()

    binder.claims.list_all = read_every_claim  # type: ignore[method-assign]
    informer.start()
    try:
        assert informer.wait_synced(30), "the informer did not sync"
        wait_until(lambda: set(nodes) <= set(cluster.state.node_index), 30, "both nodes")
        pods = []
        for n in names:
            obj = claim_pod(n, [n], scheduler=name)
            obj["metadata"].pop("uid", None)
            obj["metadata"]["namespace"] = namespace
            obj["spec"]["nodeSelector"] = {"gpucluster.io/run": run}
            obj.pop("status", None)
            pods.append(obj)
        create_pods(core, namespace, pods)
        wait_until(lambda: len(sched.pending) == len(names) and all(
            f"{namespace}/{n}" in cluster.claims for n in names), 30, "six pending pods and their claims")
        assert sched.run_pass() == 5
        assert len(reads) == 1, f"{len(reads)} settle reads for one pass of six claim pods"
        assert list(sched.pending) == [f"{namespace}/p0"]  # the one whose device was taken waits

        def p0_placed() -> bool:
            sched.run_pass()
            return not sched.pending

        wait_until(p0_placed, 60, "p0 placed again on a free GPU")
    finally:
        informer.stop()
        sched.stop()
    all_claims = _raw(res.list_namespaced_resource_claim(namespace, _preload_content=False))["items"]
    bad, counts = check_devices(slices, all_claims, list_pods(core, namespace), set())
    assert bad == [], "\n".join(bad)
    assert counts["claims"] == 7, counts  # six of ours and theirs, each on its own GPU (p0 moved off the stolen one)
    assert stolen, "the settle's read never ran"
    assert all(p["spec"].get("nodeName") for p in list_pods(core, namespace))


def test_an_extended_resource_claim_left_unallocated_by_a_killed_scheduler_is_replaced_not_kept(
    kube_control_plane: Any, kube_client: Any, gpu_node_factory: Any, namespace: str,
) -> None:
    """A scheduler creates a pod's extended-resource claim, then allocates it: killed between the two writes (seen
    in the mixed 500-pod test, whose scheduler is killed half way), it leaves a claim owned by the pod that holds
    nothing. The scheduler that binds the pod later must not keep it beside the one it makes: the pod ends up
    with one extended-resource claim, allocated, named in its status. (The crash is stood in for by the test,
    which makes that claim as the killed scheduler had.)"""
    if _version(kube_client) < (1, 36):
        pytest.skip("DRA with consumable capacity and extended resources needs Kubernetes >= 1.36")
    from k8s_helpers import registry

    from gpucluster.kubernetes.dra import EXTENDED_CLAIM_ANNOTATION
    from gpucluster.kubernetes.runtime import RunOptions, build
    from gpucluster.kubernetes.secondary import SecondaryScheduler

    core, res = client.CoreV1Api(kube_client), client.ResourceV1Api(kube_client)
    run = uuid.uuid4().hex[:6]
    name, ext = f"orphan-{run}", f"example.com/gpu-{run}"
    node = f"orphan-{run}-0"
    gpu_node_factory(node, {"nvidia.com/gpu": str(SHARED * 10)},
                     annotations={"hami.io/node-nvidia-register": _hami_register(node)},
                     labels={"gpucluster.io/run": run})
    res.create_resource_slice(resource_slice(node, NVIDIA_DRIVER, [nvidia_device(node, j) for j in range(WHOLE)]))
    res.create_device_class(device_class(f"nvidia-orphan-{run}", NVIDIA_DRIVER, extended=ext))
    obj = claim_pod("p", [], scheduler=name, extended={ext: "1"})
    obj["metadata"].pop("uid", None)
    obj["metadata"]["namespace"] = namespace
    obj["spec"]["nodeSelector"] = {"gpucluster.io/run": run}
    obj.pop("status", None)
    pod = _raw(core.create_namespaced_pod(namespace, obj, _preload_content=False))
    res.create_namespaced_resource_claim(namespace, {  # what the killed scheduler had created, never allocated
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"generateName": "p-extended-resources-", "namespace": namespace,
                     "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p",
                                          "uid": pod["metadata"]["uid"], "controller": True}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0", "exactly": {
            "deviceClassName": f"nvidia-orphan-{run}", "allocationMode": "ExactCount", "count": 1}}]}}})
    opts = RunOptions(scheduler_name=name, handshake_timeout=3600, assume_ttl=3600, sync_timeout=30)
    cluster, binder, informer = build(kube_client, registry(), opts, identity=name)
    sched = SecondaryScheduler(cluster, binder, name, claim_settle=0.2)
    informer.pod_listeners.append(sched.on_pod)
    informer.claim_listeners.append(sched.on_claim)
    informer.start()
    try:
        assert informer.wait_synced(30), "the informer did not sync"
        wait_until(lambda: node in cluster.state.node_index and sched.pending, 30, "the node and the pending pod")

        def bound() -> bool:
            sched.run_pass()
            return not sched.pending

        wait_until(bound, 60, "the pod to be bound")
    finally:
        informer.stop()
        sched.stop()
    claims = _raw(res.list_namespaced_resource_claim(namespace, _preload_content=False))["items"]
    assert len(claims) == 1, [(c["metadata"]["name"], c.get("status")) for c in claims]
    [only] = claims
    assert parse_claim(only).allocated
    now = _raw(core.read_namespaced_pod("p", namespace, _preload_content=False))
    assert now["spec"]["nodeName"] == node
    assert now["status"]["extendedResourceClaimStatus"]["resourceClaimName"] == only["metadata"]["name"]
