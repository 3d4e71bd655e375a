"""Queued Jobs whose pods use ResourceClaims, run by the control plane (``KubeRuntime``, in process) on a real
v1.37 API server with kube-controller-manager (the Job controller makes the pods, the resourceclaim controller
makes each pod's claim from its ResourceClaimTemplate) and a kubelet stand-in:

* admission places the claims' devices (test DRA driver: NVIDIA-shaped whole GPUs on nodes that publish no HAMi
  GPU), each pod's claim is allocated by us (allocation on the pod's node, the pod in ``reservedFor``) before
  its Binding, no device twice, and a job that does not fit waits;
* quota and fair share charge the claimed GPUs to the tenant;
* a higher-priority job preempts a claim holder: the victim's pods go, its claims are released and deallocated,
  and the preemptor's claims get the devices.
"""

from __future__ import annotations

import contextlib
import subprocess
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kubelet import FakeKubelet
from kubernetes import client
from tests.kubernetes.dra_objects import NVIDIA_DRIVER, device_class, nvidia_device, resource_slice
from up_process import gpu_nodes, new_run, registered, wait_until

from gpucluster.kubernetes.client import raw_get, raw_list
from gpucluster.kubernetes.workloads import QUEUE_LABEL

pytestmark = pytest.mark.integration

NS = "default"
GPUS_PER_NODE = 2
HOLD = "gpucluster.io/test-hold"  # a test's finalizer: keeps a deleted pod (and its claim reservation) around


def _version(api: Any) -> tuple[int, int]:
    info = client.VersionApi(api).get_code()
    return int(info.major), int("".join(ch for ch in info.minor if ch.isdigit()))


class Fleet:
    """Nodes whose GPUs only a DRA driver publishes (a run-specific model, and a DeviceClass selecting it)."""

    def __init__(self, api: Any, run: str, nodes: list[str]) -> None:
        self.api, self.run, self.nodes = api, run, nodes
        self.res = client.ResourceV1Api(api)
        self.model = f"NVIDIA A100-SXM4-80GB {run}"
        self.device_class = f"gpu-{run}"
        self.template = f"one-gpu-{run}"

    def claims(self) -> list[dict[str, Any]]:
        items = raw_list(self.res.list_namespaced_resource_claim, namespace=NS)["items"]
        return [c for c in items if (c.get("status") or {}).get("allocation") and any(
            r["device"].startswith("gpu-") and r["pool"] in self.nodes
            for r in c["status"]["allocation"]["devices"]["results"])]

    def held(self) -> Counter[str]:
        """Device (pool/name) -> the number of claims that hold it now."""
        return Counter(f"{r['pool']}/{r['device']}" for c in self.claims()
                       for r in c["status"]["allocation"]["devices"]["results"])


@pytest.fixture
def fleet(kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any,
          tmp_path: Path) -> Iterator[Fleet]:
    if _version(kube_client) < (1, 36):
        pytest.skip("the test DRA driver's slices need resource.k8s.io/v1 with Kubernetes >= 1.36")
    run = new_run()
    specs = gpu_nodes(run, 2, 0)
    f = Fleet(kube_client, run, [n.name for n in specs])
    with registered(kube_client, specs), FakeKubelet(kube_client, f.nodes, tmp_path / "kubelet"):
        made: list[tuple[Callable[..., Any], str]] = []
        for node in f.nodes:
            body = resource_slice(node, NVIDIA_DRIVER, [nvidia_device(node, j, model=f.model)
                                                        for j in range(GPUS_PER_NODE)])
            f.res.create_resource_slice(body)
            made.append((f.res.delete_resource_slice, body["metadata"]["name"]))
        f.res.create_device_class(device_class(
            f.device_class, NVIDIA_DRIVER, selector=f'device.attributes["gpu.nvidia.com"].productName == "{f.model}"'))
        made.append((f.res.delete_device_class, f.device_class))
        f.res.create_namespaced_resource_claim_template(NS, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": f.template, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": f.device_class, "allocationMode": "ExactCount", "count": 1}}]}}}})
        try:
            yield f
        finally:
            client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                NS, label_selector=f"gpucluster.io/run={run}", propagation_policy="Background")
            core = client.CoreV1Api(kube_client)
            core.delete_collection_namespaced_pod(NS, label_selector=f"gpucluster.io/run={run}", grace_period_seconds=0)
            for node in f.nodes:  # whatever else a test left bound here (pods of the API's Jobs carry no run label)
                core.delete_collection_namespaced_pod(NS, field_selector=f"spec.nodeName={node}",
                                                      grace_period_seconds=0)
            f.res.delete_namespaced_resource_claim_template(f.template, NS)
            for delete, name in made:
                delete(name)


def claim_job(fleet: Fleet, name: str, tenant: str, *, pods: int, priority: int = 0,
              claim_name: str = "") -> dict[str, Any]:
    """A user's batch/v1 Job for the queue whose pods each get one GPU through a ResourceClaim (made from the
    fleet's template, or the named claim)."""
    entry = {"name": "gpu", **({"resourceClaimName": claim_name} if claim_name
                               else {"resourceClaimTemplateName": fleet.template})}
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: tenant, "gpucluster.io/run": fleet.run},
                     "annotations": {"gpucluster.io/priority": str(priority)}},
        "spec": {
            "suspend": True, "parallelism": pods, "completions": pods, "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {"metadata": {"labels": {"gpucluster.io/run": fleet.run}}, "spec": {
                "schedulerName": "gpucluster", "restartPolicy": "Never",
                "nodeSelector": {"gpucluster.io/run": fleet.run},
                "resourceClaims": [entry],
                "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                "env": [{"name": "FAKE_RUN_S", "value": "inf"}],
                                "resources": {"claims": [{"name": "gpu"}]}}]}},
        },
    }


def _pods_of(api: Any, job: str) -> list[dict[str, Any]]:
    return list(raw_list(client.CoreV1Api(api).list_namespaced_pod, namespace=NS,
                         label_selector=f"batch.kubernetes.io/job-name={job}")["items"])


def _claim_of(api: Any, pod: dict[str, Any]) -> dict[str, Any] | None:
    names = [s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()]
    names += [e.get("resourceClaimName") for e in pod["spec"].get("resourceClaims") or ()]  # a named claim
    names = [n for n in names if n]
    if not names:
        return None
    return raw_get(client.ResourceV1Api(api).read_namespaced_resource_claim, names[0], NS)


def _runtime(cp: Any, run: str, queue_policy: str = "fifo") -> Any:
    from gpucluster.kubernetes import KubeRuntime

    return KubeRuntime(cp.kubeconfig, queue_policy=queue_policy, namespace=NS, identity=f"test-{run}")


def _ticking(rt: Any, what: Callable[[], Any]) -> Callable[[], Any]:
    def step() -> Any:
        rt.advance(rt.now + 0.25)
        return what()
    return step


def _kubectl_claims_yaml(cp: Any) -> str:
    out = subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "get", "resourceclaim",
                          "-n", NS, "-o", "yaml"], capture_output=True, text=True, timeout=60, check=False)
    return out.stdout + out.stderr


def _bound_with_claims(api: Any, job: str, n: int) -> list[tuple[dict[str, Any], dict[str, Any]]] | None:
    """The Job's ``n`` pods, each bound, with its claim allocated and reserved for it."""
    out = []
    for pod in _pods_of(api, job):
        if not pod["spec"].get("nodeName") or pod["metadata"].get("deletionTimestamp"):
            continue
        c = _claim_of(api, pod)
        if c is None or not (c.get("status") or {}).get("allocation"):
            continue
        out.append((pod, c))
    return out if len(out) == n else None


def test_a_job_with_resource_claim_templates_is_placed_and_its_claims_allocated_by_us(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    """A Job of 2 pods, each with a claim from a ResourceClaimTemplate (1 GPU): admitted as a gang, each pod's
    claim allocated by the control plane on its node and reserved for it before the pod is bound; a second
    Job needing 3 more GPUs (only 2 are left) waits."""
    batch = client.BatchV1Api(kube_client)
    tenant = f"dra-{fleet.run}"
    rt = _runtime(kube_control_plane, fleet.run)
    try:
        batch.create_namespaced_job(NS, claim_job(fleet, f"a-{fleet.run}", tenant, pods=2))
        bound = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"a-{fleet.run}", 2)), 90,
                           "the Job's 2 pods bound, each with its claim allocated")
        devices = []
        for pod, c in bound:
            alloc = c["status"]["allocation"]
            results = alloc["devices"]["results"]
            assert len(results) == 1 and results[0]["driver"] == NVIDIA_DRIVER
            assert results[0]["pool"] == pod["spec"]["nodeName"]  # a device of the node the pod is bound to
            assert alloc["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [
                pod["spec"]["nodeName"]]
            assert [r["uid"] for r in c["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            assert "resource.kubernetes.io/delete-protection" in c["metadata"]["finalizers"]
            # HAMi's annotations hold no GPU: the pod's devices are its claim's
            assert not pod["metadata"]["annotations"].get("hami.io/vgpu-devices-allocated", "").strip(":;")
            devices.append(f"{results[0]['pool']}/{results[0]['device']}")
        assert len(set(devices)) == 2
        print(_kubectl_claims_yaml(kube_control_plane))
        job = next(j for j in rt.jobs() if j.name == f"a-{fleet.run}")
        assert job.status == "running" and job.spec.num_gpus == 2

        batch.create_namespaced_job(NS, claim_job(fleet, f"b-{fleet.run}", tenant, pods=3))
        waiting = wait_until(_ticking(rt, lambda: next(
            (j for j in rt.jobs() if j.name == f"b-{fleet.run}" and j.message), None)), 60, "the second job seen")
        for _ in range(8):
            rt.advance(rt.now + 0.25)
        assert waiting.status == "pending" and waiting.spec.num_gpus == 3
        assert not [p for p in _pods_of(kube_client, f"b-{fleet.run}") if p["spec"].get("nodeName")]
        assert max(fleet.held().values()) == 1 and sum(fleet.held().values()) == 2
    finally:
        rt.close()


def test_a_job_whose_claim_template_is_missing_waits_and_says_why(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    batch = client.BatchV1Api(kube_client)
    rt = _runtime(kube_control_plane, fleet.run)
    name = f"m-{fleet.run}"
    try:
        body = claim_job(fleet, name, f"dra-{fleet.run}", pods=1)
        body["spec"]["template"]["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = f"nope-{uuid.uuid4().hex[:4]}"
        batch.create_namespaced_job(NS, body)

        def said() -> str | None:
            job = raw_get(batch.read_namespaced_job, name, NS)
            return (job["metadata"].get("annotations") or {}).get("gpucluster.io/message")

        message = wait_until(_ticking(rt, said), 30, "the Job to say why it waits")
        assert "ResourceClaimTemplate" in message and "does not exist" in message
        assert not [p for p in _pods_of(kube_client, name) if p["spec"].get("nodeName")]
    finally:
        rt.close()


def test_quota_and_fair_share_charge_claimed_gpus_to_the_tenant(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    """Tenant quota 2 GPUs: a Job of 2 pods with one claimed GPU each uses it up (the tenant holds 2 GPUs, its
    dominant share is 2 of the fleet's 4), so its next Job waits over quota while 2 GPUs are free; it runs once
    the quota is 3."""
    batch = client.BatchV1Api(kube_client)
    tenant = f"q-{fleet.run}"
    rt = _runtime(kube_control_plane, fleet.run)
    rt.set_quotas({tenant: 2.0})
    try:
        batch.create_namespaced_job(NS, claim_job(fleet, f"a-{fleet.run}", tenant, pods=2))
        wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"a-{fleet.run}", 2)), 90,
                   "the first Job's pods bound with their claims")
        assert rt.usage_by_tenant()[tenant]["gpus"] == 2
        assert rt.engine.tenant_share(tenant) == pytest.approx(2 / (2 * GPUS_PER_NODE))
        batch.create_namespaced_job(NS, claim_job(fleet, f"b-{fleet.run}", tenant, pods=1))
        waiting = wait_until(_ticking(rt, lambda: next(
            (j for j in rt.jobs() if j.name == f"b-{fleet.run}" and "quota" in j.message), None)), 60,
            "the tenant's second Job to wait over its quota")
        assert waiting.status == "pending"
        assert sum(fleet.held().values()) == 2  # 2 GPUs free: only the quota holds it back
        rt.set_quotas({tenant: 3.0})
        wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"b-{fleet.run}", 1)), 90,
                   "the second Job admitted once the quota is 3 GPUs")
        assert rt.usage_by_tenant()[tenant]["gpus"] == 3
        assert max(fleet.held().values()) == 1 and sum(fleet.held().values()) == 3
    finally:
        rt.close()


def test_a_higher_priority_job_preempts_a_claim_holder_whose_claim_is_released(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    """Every GPU is claimed: a one-pod Job holding a named claim of 2 GPUs (preemptible) and a Job of 2 pods
    that may not be preempted. A higher-priority Job of 2 pods (tiresias, preemptive) evicts the claim holder:
    its Job is suspended, its pod deleted, its claim released (nobody in ``reservedFor``, no allocation), and
    the preemptor's claims get the freed devices. A watcher reads every claim all along: no device is ever
    allocated to two claims at once. The victim's pod is held back from going away by a test finalizer (a
    kubelet still stopping its containers): kube-controller-manager then keeps the claim reserved and
    allocated, so the release this test sees can only be the control plane's own."""
    import threading

    batch = client.BatchV1Api(kube_client)
    res = client.ResourceV1Api(kube_client)
    core = client.CoreV1Api(kube_client)
    held_pods: list[str] = []
    tenant = f"p-{fleet.run}"
    named = f"low-{fleet.run}"
    res.create_namespaced_resource_claim(NS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": named, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": fleet.device_class, "allocationMode": "ExactCount", "count": 2}}]}}})
    rt = _runtime(kube_control_plane, fleet.run, queue_policy="tiresias")
    rt.engine.policy.min_run_s = 0.0
    twice: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            twice.extend(f"{dev} x{n}" for dev, n in fleet.held().items() if n > 1)
            stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        batch.create_namespaced_job(NS, claim_job(fleet, f"low-{fleet.run}", tenant, pods=1, priority=10,
                                                  claim_name=named))
        low_bound = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"low-{fleet.run}", 1)), 90,
                               "the claim holder bound")
        keep = claim_job(fleet, f"keep-{fleet.run}", tenant, pods=2, priority=10)
        keep["metadata"]["annotations"]["gpucluster.io/preemptible"] = "false"
        batch.create_namespaced_job(NS, keep)
        wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"keep-{fleet.run}", 2)), 90,
                   "the non-preemptible Job bound")
        low_pod, low_claim = low_bound[0]
        assert low_claim["metadata"]["name"] == named
        victim_node = low_pod["spec"]["nodeName"]
        # The victim's pod stays (bound, its containers "still stopping") after it is deleted: with it there,
        # kube-controller-manager's resourceclaim controller keeps the pod in the claim's reservedFor and the
        # claim allocated, so only the control plane's own release can free the devices for the preemptor.
        core.patch_namespaced_pod(low_pod["metadata"]["name"], NS, {"metadata": {"finalizers": [HOLD]}})
        held_pods.append(low_pod["metadata"]["name"])

        batch.create_namespaced_job(NS, claim_job(fleet, f"high-{fleet.run}", tenant, pods=2, priority=50))
        high = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"high-{fleet.run}", 2)), 90,
                          "the high-priority Job's pods bound with their claims")
        assert {p["spec"]["nodeName"] for p, _c in high} == {victim_node}  # on the devices the victim held
        victim = next(j for j in rt.jobs() if j.name == f"low-{fleet.run}")
        assert victim.status == "pending" and victim.preemptions == 1
        job = raw_get(batch.read_namespaced_job, f"low-{fleet.run}", NS)
        assert job["spec"]["suspend"] is True
        still = raw_get(core.read_namespaced_pod, low_pod["metadata"]["name"], NS)
        assert still["metadata"].get("deletionTimestamp") and still["spec"]["nodeName"] == victim_node
        released = raw_get(res.read_namespaced_resource_claim, named, NS)
        assert not (released.get("status") or {}).get("allocation")
        assert not (released.get("status") or {}).get("reservedFor")
        assert "resource.kubernetes.io/delete-protection" not in (released["metadata"].get("finalizers") or [])
        keep_job = next(j for j in rt.jobs() if j.name == f"keep-{fleet.run}")
        assert keep_job.status == "running" and keep_job.preemptions == 0
    finally:
        stop.set()
        watcher.join(5)
        rt.close()
        for pod_name in held_pods:
            with contextlib.suppress(client.ApiException):
                core.patch_namespaced_pod(pod_name, NS, {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}})
        res.delete_namespaced_resource_claim(named, NS)
    assert not twice, twice


def kube_scheduler_pod(fleet: Fleet, name: str, tenant: str, scheduler: str) -> dict[str, Any]:
    """A bare pod for kube-scheduler (profile ``scheduler``), not for our queue, with one GPU through a claim made
    from the fleet's template, labelled ``gpucluster.io/queue: tenant``."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: tenant, "gpucluster.io/run": fleet.run}},
        "spec": {
            "schedulerName": scheduler, "restartPolicy": "Never",
            "nodeSelector": {"gpucluster.io/run": fleet.run},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": fleet.template}],
            "containers": [{"name": "infer", "image": "registry.example/ml/serve:v1",
                            "env": [{"name": "FAKE_RUN_S", "value": "inf"}],
                            "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


def test_claims_kube_scheduler_allocated_for_a_tenants_pods_count_in_its_quota_and_share(
        kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, fleet: Fleet) -> None:
    """Two pods of kube-scheduler (its own DynamicResources plugin allocates their claims, one GPU each),
    labelled ``gpucluster.io/queue`` with a tenant whose quota is 2 GPUs: the control plane charges the claimed
    GPUs to that tenant (usage, DRF share), so the tenant's next queued Job waits over its quota although 2 GPUs
    are free; it runs once the quota is 3. (Before, such claims were used capacity charged to nobody and the
    Job ran at once.)"""
    core = client.CoreV1Api(kube_client)
    tenant = f"k-{fleet.run}"
    scheduler = f"kube-{fleet.run}"
    kube_scheduler_factory("apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n"
                           f"profiles:\n- schedulerName: {scheduler}\n", f"dra-q-{fleet.run}")
    names = [f"serve-{i}-{fleet.run}" for i in range(2)]
    for name in names:
        core.create_namespaced_pod(NS, kube_scheduler_pod(fleet, name, tenant, scheduler))

    def theirs_bound() -> list[dict[str, Any]] | None:
        out = []
        for name in names:
            pod = raw_get(core.read_namespaced_pod, name, NS)
            c = _claim_of(kube_client, pod) if pod["spec"].get("nodeName") else None
            if c is None or not (c.get("status") or {}).get("allocation"):
                return None
            out.append(c)
        return out

    claims = wait_until(theirs_bound, 90, "kube-scheduler to allocate the claims of its 2 pods and bind them")
    assert sum(fleet.held().values()) == 2
    print(_kubectl_claims_yaml(kube_control_plane))

    rt = _runtime(kube_control_plane, fleet.run)
    rt.set_quotas({tenant: 2.0})
    try:
        used = wait_until(_ticking(rt, lambda: rt.usage_by_tenant().get(tenant, {}).get("gpus") or None), 30,
                          "the claimed GPUs charged to the tenant")
        assert used == pytest.approx(2.0)
        assert rt.engine.tenant_share(tenant) == pytest.approx(2 / (2 * GPUS_PER_NODE))
        assert all(c["metadata"]["name"] not in rt.cluster.claim_slots for c in claims)  # not ours

        batch = client.BatchV1Api(kube_client)
        batch.create_namespaced_job(NS, claim_job(fleet, f"a-{fleet.run}", tenant, pods=1))
        waiting = wait_until(_ticking(rt, lambda: next(
            (j for j in rt.jobs() if j.name == f"a-{fleet.run}" and j.message), None)), 60,
            "the tenant's Job seen, with why it waits")
        assert waiting.status == "pending"
        assert waiting.message.startswith(f"waiting for quota: tenant {tenant} holds 2 of 2 GPUs"), waiting.message
        assert sum(fleet.held().values()) == 2  # 2 GPUs free: only the quota holds it back
        rt.set_quotas({tenant: 3.0})
        wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, f"a-{fleet.run}", 1)), 90,
                   "the Job admitted once the quota is 3 GPUs")
        assert rt.usage_by_tenant()[tenant]["gpus"] == pytest.approx(3.0)
        assert max(fleet.held().values()) == 1 and sum(fleet.held().values()) == 3
    finally:
        rt.close()
        for name in names:
            with contextlib.suppress(client.ApiException):
                core.delete_namespaced_pod(name, NS, grace_period_seconds=0)


def _api_job(name: str, tenant: str, run: str, claims: list[dict[str, Any]], replicas: int = 1) -> Any:
    """A job as the REST API makes it (``gpucluster submit``): no GPUs in resources, devices through ``claims``."""
    import time

    from gpucluster.jobs import Job, job_spec

    return Job(job_spec(f"j-{name}", name=name, tenant=tenant, replicas=replicas, resources={"cpu": "1"},
                        duration_s=3600.0, submit_s=0.0, submitted_at=time.time(), claims=claims,
                        node_selector={"gpucluster.io/run": run}))


def test_a_job_of_the_api_with_claims_gets_claim_templates_and_its_claims_allocated_by_our_placement(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    """A job of the API asks for one GPU of the fleet's DeviceClass per pod (``claims``), 2 pods: the control
    plane makes its Job with a ResourceClaimTemplate per claim (owned by the Job), admits it on the DRA-only
    GPUs, and each pod's claim (made by the resourceclaim controller) is allocated by us on its node. A claim of
    a DeviceClass that does not exist, or asking for memory of devices allocated whole, is refused naming the
    field (the API's 422)."""
    res = client.ResourceV1Api(kube_client)
    tenant = f"api-{fleet.run}"
    rt = _runtime(kube_control_plane, fleet.run)
    try:
        with pytest.raises(ValueError, match=r"^claims\[0\]\.device_class: .*DeviceClass 'nope-"):
            rt.validate(_api_job(f"x-{fleet.run}", tenant, fleet.run, [{"device_class": f"nope-{fleet.run}"}]))
        with pytest.raises(ValueError, match=r"^claims\[0\]\.memory_mib: .*publish no consumable memory"):
            rt.validate(_api_job(f"y-{fleet.run}", tenant, fleet.run,
                                 [{"device_class": fleet.device_class, "memory_mib": 1024}]))

        job = _api_job(f"a-{fleet.run}", tenant, fleet.run, [{"device_class": fleet.device_class}], replicas=2)
        rt.validate(job)
        rt.submit(job)
        bound = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, job.id, 2)), 90,
                           "the API job's 2 pods bound, each with its claim allocated")
        job_obj = raw_get(client.BatchV1Api(kube_client).read_namespaced_job, job.id, NS)
        template = raw_get(res.read_namespaced_resource_claim_template, f"{job.id}-claim-0", NS)
        assert template["metadata"]["ownerReferences"][0]["uid"] == job_obj["metadata"]["uid"]
        devices = []
        for pod, c in bound:
            assert pod["spec"]["resourceClaims"] == [{"name": "claim-0",
                                                      "resourceClaimTemplateName": f"{job.id}-claim-0"}]
            assert "nvidia.com/gpu" not in pod["spec"]["containers"][0]["resources"].get("limits", {})
            results = c["status"]["allocation"]["devices"]["results"]
            assert len(results) == 1 and results[0]["driver"] == NVIDIA_DRIVER
            assert results[0]["pool"] == pod["spec"]["nodeName"]
            assert [r["uid"] for r in c["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            devices.append(f"{results[0]['pool']}/{results[0]['device']}")
        assert len(set(devices)) == 2 and max(fleet.held().values()) == 1
        assert rt.job(job.id).status == "running" and rt.job(job.id).spec.num_gpus == 2
        print(_kubectl_claims_yaml(kube_control_plane))
    finally:
        rt.close()
        # the API's Job and its pods carry the job's label, not the fleet's run label: removed here, or they would
        # stay bound to the fleet's nodes after those are gone (a later test's scheduler counts them unaccounted)
        client.BatchV1Api(kube_client).delete_collection_namespaced_job(
            NS, label_selector=f"gpucluster.io/job=j-a-{fleet.run}", propagation_policy="Background")
        client.CoreV1Api(kube_client).delete_collection_namespaced_pod(
            NS, label_selector=f"gpucluster.io/job=j-a-{fleet.run}", grace_period_seconds=0)


def test_a_job_of_the_api_asks_for_consumable_memory_of_hami_shaped_devices(
        kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any, tmp_path: Path) -> None:
    """HAMi-shaped devices (consumable memory and cores): a job of the API whose claim asks for 20 GiB of one
    GPU's memory, 2 pods: each pod's claim is allocated by us with a share of a GPU consuming 20 GiB of it."""
    from tests.kubernetes.dra_objects import HAMI_DRIVER, hami_device

    if _version(kube_client) < (1, 36):
        pytest.skip("consumable capacity needs resource.k8s.io/v1 with Kubernetes >= 1.36")
    run = new_run()
    specs = gpu_nodes(run, 1, 0)
    node = specs[0].name
    res = client.ResourceV1Api(kube_client)
    cls = f"hami-{run}"
    with registered(kube_client, specs), FakeKubelet(kube_client, [node], tmp_path / "kubelet"):
        body = resource_slice(node, HAMI_DRIVER, [hami_device(node, j) for j in range(2)])
        res.create_resource_slice(body)
        res.create_device_class(device_class(cls, HAMI_DRIVER, selector=f'device.attributes["{HAMI_DRIVER}"].'
                                                                          'type == "hami-gpu"'))
        rt = _runtime(kube_control_plane, run)
        try:
            job = _api_job(f"m-{run}", f"api-{run}", run, [{"device_class": cls, "memory_mib": 20480}],
                           replicas=2)
            rt.validate(job)
            rt.submit(job)
            bound = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, job.id, 2)), 90,
                               "the API job's 2 pods bound, each with a 20 GiB share")
            for pod, c in bound:
                results = c["status"]["allocation"]["devices"]["results"]
                assert len(results) == 1 and results[0]["driver"] == HAMI_DRIVER
                assert results[0]["pool"] == node == pod["spec"]["nodeName"]
                assert results[0]["consumedCapacity"]["memory"] in ("20Gi", "20480Mi"), results[0]
                assert results[0].get("shareID")
            assert rt.job(job.id).status == "running"
        finally:
            rt.close()
            client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                NS, label_selector=f"gpucluster.io/job=j-m-{run}", propagation_policy="Background")
            client.CoreV1Api(kube_client).delete_collection_namespaced_pod(
                NS, label_selector=f"gpucluster.io/job=j-m-{run}", grace_period_seconds=0)
            res.delete_device_class(cls)
            res.delete_resource_slice(body["metadata"]["name"])


def _take_device(fleet: Fleet, name: str, node: str, device: Any) -> None:
    """Another party allocates ``device`` on ``node`` to a claim of its own, through the API: a pod bound to the
    node by hand (``nodeName``) that names the claim, and the claim's status written with the device and the pod
    in ``reservedFor`` (what another scheduler, or a preempted pod's claim that was never released, leaves)."""
    core = client.CoreV1Api(fleet.api)
    fleet.res.create_namespaced_resource_claim(NS, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": fleet.device_class, "allocationMode": "ExactCount", "count": 1}}]}}})
    pod = core.create_namespaced_pod(NS, {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"gpucluster.io/run": fleet.run}},
        "spec": {"nodeName": node, "restartPolicy": "Never",
                 "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                 "containers": [{"name": "other", "image": "registry.example/other:v1",
                                 "env": [{"name": "FAKE_RUN_S", "value": "inf"}],
                                 "resources": {"claims": [{"name": "gpu"}]}}]}})
    claim = raw_get(fleet.res.read_namespaced_resource_claim, name, NS)
    claim["status"] = {
        "allocation": {"devices": {"results": [{"request": "gpu", "driver": device.driver, "pool": device.pool,
                                                "device": device.name}]},
                       "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                           {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": name, "uid": pod.metadata.uid}]}
    fleet.res.replace_namespaced_resource_claim_status(name, NS, claim)


def test_a_bind_whose_device_another_claim_took_meanwhile_writes_nothing_and_binds_nothing(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet) -> None:
    """Between the control plane's decision and its bind, another claim gets the very device chosen for the
    pod's claim (a hook in this test allocates it through the API just before the bind writes its claims). The
    bind reads every claim back from the server after its write, sees the device held twice, takes its write
    back and does not bind: the pod stays unbound, its claim unallocated and unreserved, the device held once
    (tried again, the bind is refused before writing anything while the other claim holds it). Once the other
    claim is gone the pod binds with the device. Without the bind's check the pod is bound and the device is in
    two claims."""
    core = client.CoreV1Api(kube_client)
    name = f"race-{fleet.run}"
    other = f"other-{fleet.run}"
    rt = _runtime(kube_control_plane, fleet.run)
    taken: list[str] = []
    write_claims = rt.binder.write_claims

    def hook(pod: Any) -> Any:  # runs in the control plane's write thread, just before the claim write
        plan = rt.cluster.claim_plans.get(pod.key)
        if plan is not None and plan.written is None and not taken:
            device = next(r.device for results in plan.claims.values() for r in results)
            taken.append(f"{device.pool}/{device.name}")
            _take_device(fleet, other, plan.node, device)
        return write_claims(pod)

    rt.binder.write_claims = hook
    try:
        client.BatchV1Api(kube_client).create_namespaced_job(NS, claim_job(fleet, name, f"r-{fleet.run}", pods=1))

        def outcome() -> str | None:
            pods = _pods_of(kube_client, name)
            if any(p["spec"].get("nodeName") for p in pods):
                return "bound"
            claim = _claim_of(kube_client, pods[0]) if pods else None
            status = (claim or {}).get("status") or {}
            if rt.binder.conflicts and claim is not None and not status.get("allocation"):
                return "refused"
            return None

        assert wait_until(_ticking(rt, outcome), 90, "the pod's bind to happen or be refused") == "refused", (
            f"the pod was bound while {taken} is allocated to claim {other}: {dict(fleet.held())}")
        for _ in range(8):  # the bind is tried again and again: refused each time, before any write
            rt.advance(rt.now + 0.25)
            assert outcome() == "refused"
            assert fleet.held()[taken[0]] == 1
        (pod,) = _pods_of(kube_client, name)
        claim = _claim_of(kube_client, pod)
        assert claim is not None and not (claim.get("status") or {}).get("reservedFor")
        assert "resource.kubernetes.io/delete-protection" not in (claim["metadata"].get("finalizers") or [])
        print(f"device {taken[0]} taken by claim {other}; binds refused: {rt.binder.conflicts}")

        core.delete_namespaced_pod(other, NS, grace_period_seconds=0)
        fleet.res.delete_namespaced_resource_claim(other, NS)
        ((pod, claim),) = wait_until(_ticking(rt, lambda: _bound_with_claims(kube_client, name, 1)), 90,
                                     "the pod bound once the other claim is gone")
        result = claim["status"]["allocation"]["devices"]["results"][0]
        assert max(fleet.held().values()) == 1
        assert result["pool"] == pod["spec"]["nodeName"]
    finally:
        rt.close()
        with contextlib.suppress(client.ApiException):
            core.delete_namespaced_pod(other, NS, grace_period_seconds=0)
        with contextlib.suppress(client.ApiException):
            fleet.res.delete_namespaced_resource_claim(other, NS)


def test_gpucluster_submit_of_a_job_with_claims_on_kubernetes(
        kube_control_plane: Any, kube_client: Any, fleet: Fleet, tmp_path: Path) -> None:
    """``gpucluster submit`` (the CLI, against ``gpucluster up --kubeconfig`` as a real process) of a job file
    with ``claims``: 2 pods with one GPU of the fleet's DeviceClass each; the pods are bound with their claims
    allocated by the control plane on their nodes. A claim of a DeviceClass that does not exist exits 2 naming
    ``claims[0].device_class``, and nothing is made."""
    import json

    import yaml
    from typer.testing import CliRunner
    from up_process import ADMIN, ControlPlane

    from gpucluster.cli.main import app

    runner = CliRunner()
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    ids: list[str] = []

    def submit(name: str, claims: list[dict[str, Any]]) -> Any:
        job = tmp_path / f"{name}.yaml"
        job.write_text(yaml.safe_dump({"name": name, "tenant": f"cli-{fleet.run}", "replicas": 2,
                                       "resources": {"cpu": "1"}, "duration_s": 3600, "claims": claims,
                                       "node_selector": {"gpucluster.io/run": fleet.run}}))
        return runner.invoke(app, ["submit", str(job), "--json", "--server", server.url, "--token", ADMIN])

    try:
        bad = submit(f"bad-{fleet.run}", [{"device_class": f"nope-{fleet.run}"}])
        assert bad.exit_code == 2, (bad.stdout, bad.stderr)
        assert "claims[0].device_class: " in bad.stderr and "HTTP 422" in bad.stderr, bad.stderr
        assert not [j for j in server.get("/api/v1/jobs")["jobs"] if j["name"] == f"bad-{fleet.run}"]

        r = submit(f"cli-{fleet.run}", [{"device_class": fleet.device_class, "count": 1}])
        assert r.exit_code == 0, r.stderr
        job = json.loads(r.stdout)
        ids.append(job["id"])
        assert job["claims"] == [{"device_class": fleet.device_class, "count": 1}]
        bound = wait_until(lambda: _bound_with_claims(kube_client, job["id"], 2), 120,
                           "the submitted job's 2 pods bound, each with its claim allocated")
        devices = []
        for pod, c in bound:
            results = c["status"]["allocation"]["devices"]["results"]
            assert len(results) == 1 and results[0]["driver"] == NVIDIA_DRIVER
            assert results[0]["pool"] == pod["spec"]["nodeName"]
            assert [r["uid"] for r in c["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
            devices.append(f"{results[0]['pool']}/{results[0]['device']}")
        assert len(set(devices)) == 2 and max(fleet.held().values()) == 1
        shown = wait_until(lambda: next((j for j in server.get("/api/v1/jobs")["jobs"]
                                         if j["id"] == job["id"] and j["status"] == "running"), None), 60,
                           "the job running in get jobs")
        assert shown["gpus"] == 2
    finally:
        server.stop()
        for jid in ids:
            client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                NS, label_selector=f"gpucluster.io/job={jid}", propagation_policy="Background")
            client.CoreV1Api(kube_client).delete_collection_namespaced_pod(
                NS, label_selector=f"gpucluster.io/job={jid}", grace_period_seconds=0)
