"""A JobSet (``jobset.x-k8s.io/v1alpha2``) through the queue (issue 26), on a real kube-apiserver with
kube-controller-manager's Job controller and a test kubelet (``fake_kubelet``).

No JobSet controller runs here: the test installs a minimal JobSet CRD of its own (apiextensions v1,
``x-kubernetes-preserve-unknown-fields``) and plays the JobSet controller itself (:func:`_play_jobset_controller`,
test code only): once the control plane released the JobSet it creates the child Jobs, and once they completed
it writes the JobSet's ``Completed`` condition. The control plane reads the JobSet as one gang (the sum of its
replicated Jobs' ``replicas`` x ``parallelism``), admits it, unsuspends it, binds the child Jobs' pods where the
engine decided and ends the job on the JobSet's condition."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import installed_crd
from kubernetes import client
from up_process import ControlPlane, gpu_nodes, kubelet_fleet, new_run, wait_until

from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, JOBSET_NAME_LABEL, QUEUE_LABEL, Admission

pytestmark = pytest.mark.integration

NS = "default"
GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"


@pytest.fixture
def jobset_crd(kube_client: Any) -> Iterator[None]:
    """A minimal JobSet CRD written for this test (what the control plane reads is kept as is)."""
    with installed_crd(kube_client, GROUP, VERSION, {"plural": PLURAL, "singular": "jobset", "kind": "JobSet"},
                       {"type": "object", "x-kubernetes-preserve-unknown-fields": True}):
        yield


def _jobset(name: str, tenant: str, run: str, *, replicas: int, parallelism: int, gpus: int) -> dict[str, Any]:
    pod = {"spec": {"schedulerName": "gpucluster", "restartPolicy": "Never",
                    "nodeSelector": {"gpucluster.io/run": run},
                    "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                    "env": [{"name": "FAKE_RUN_S", "value": "5"}],
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: tenant}},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "workers", "replicas": replicas, "template": {
            "spec": {"parallelism": parallelism, "completions": parallelism, "completionMode": "Indexed",
                     "backoffLimit": 0, "template": pod}}}]},
    }


def _play_jobset_controller_create(batch: Any, js: dict[str, Any]) -> list[str]:
    """The JobSet controller's part (test code): the child Jobs ``<jobset>-<replicatedJob>-<i>``, owned by the
    JobSet, their pods labelled with its name."""
    meta = js["metadata"]
    names = []
    for rj in js["spec"]["replicatedJobs"]:
        for i in range(int(rj["replicas"])):
            labels = {JOBSET_NAME_LABEL: meta["name"], "jobset.sigs.k8s.io/replicatedjob-name": rj["name"],
                      "jobset.sigs.k8s.io/job-index": str(i)}
            spec = json.loads(json.dumps(rj["template"]["spec"]))
            tmeta = spec["template"].setdefault("metadata", {})
            tmeta["labels"] = {**(tmeta.get("labels") or {}), **labels}
            name = f"{meta['name']}-{rj['name']}-{i}"
            batch.create_namespaced_job(NS, {
                "apiVersion": "batch/v1", "kind": "Job",
                "metadata": {"name": name, "namespace": NS, "labels": labels, "ownerReferences": [{
                    "apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet", "name": meta["name"], "uid": meta["uid"],
                    "controller": True, "blockOwnerDeletion": True}]},
                "spec": spec})
            names.append(name)
    return names


def _complete(batch: Any, name: str) -> bool:
    job = json.loads(batch.read_namespaced_job(name, NS, _preload_content=False).data)
    return any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"].get("conditions") or [])


@pytest.fixture
def fleet(kube_client: Any, tmp_path: Path) -> Iterator[tuple[str, list[Any]]]:
    run = new_run()
    with kubelet_fleet(kube_client, gpu_nodes(run, 2, 4), tmp_path) as nodes:
        yield run, nodes


@pytest.mark.usefixtures("jobset_crd")
def test_a_jobset_is_admitted_as_one_gang_and_released(kube_control_plane: Any, kube_controller_manager: Any,
                                                       kube_client: Any, fleet: tuple[str, list[Any]],
                                                       tmp_path: Path) -> None:
    run, nodes = fleet
    custom = client.CustomObjectsApi(kube_client)
    batch = client.BatchV1Api(kube_client)
    core = client.CoreV1Api(kube_client)
    tenant, name = f"t-{run}", f"llm-{run}"
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    try:
        # 2 replicated Jobs x 2 pods x 2 GPUs: one gang of 4 pods, 8 GPUs (all of the fleet)
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                               _jobset(name, tenant, run, replicas=2, parallelism=2, gpus=2))

        def released() -> dict[str, Any] | None:
            js = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
            return js if not js["spec"].get("suspend") else None

        js = wait_until(released, 60, "the JobSet to be admitted (unsuspended)")
        adm = Admission.parse(js["metadata"]["annotations"][ADMISSION_ANNOTATION], "test")
        assert len(adm.slots) == 4 and all(s.node for s in adm.slots)
        shown = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"]
                                         if j["name"] == name and j["status"] == "running"), None), 30,
                           "the JobSet running in get jobs")
        assert shown["tenant"] == tenant and shown["replicas"] == 4 and shown["gpus"] == 8

        children = _play_jobset_controller_create(batch, js)
        selector = f"{JOBSET_NAME_LABEL}={name}"

        def bound() -> list[dict[str, Any]] | None:
            resp = core.list_namespaced_pod(NS, label_selector=selector, _preload_content=False)
            pods = [p for p in json.loads(resp.data)["items"] if p["spec"].get("nodeName")]
            return pods if len(pods) == 4 else None

        pods = wait_until(bound, 60, "the child Jobs' 4 pods to be bound")
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(s.node for s in adm.slots)
        assert {p["spec"]["nodeName"] for p in pods} == {n.name for n in nodes}
        for pod in pods:
            assert pod["metadata"]["annotations"]["gpucluster.io/reservation"].startswith(f"{NS}/{shown['id']}-")
        wait_until(lambda: all(_complete(batch, c) for c in children), 90, "the child Jobs to complete")
        # the JobSet controller's part again: the JobSet is Completed
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, {"status": {"conditions": [
            {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]}})
        done = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"]
                                        if j["name"] == name and j["status"] == "succeeded"), None), 30,
                          "the job to succeed with its JobSet")
        assert done["id"] == shown["id"]
        # the child Jobs are the JobSet's, never jobs of the queue by themselves
        assert [j["name"] for j in server.get("/api/v1/jobs", params={"q": run})["jobs"]] == [name]
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        server.stop()
        with contextlib.suppress(client.ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        batch.delete_collection_namespaced_job(NS, label_selector=f"{JOBSET_NAME_LABEL}={name}",
                                               propagation_policy="Background")


def test_a_jobset_crd_installed_after_the_start_is_read_live(kube_control_plane: Any, kube_controller_manager: Any,
                                                           kube_client: Any, fleet: tuple[str, list[Any]],
                                                           tmp_path: Path) -> None:
    """The control plane starts while the API server serves no JobSets; the CRD is installed afterwards: a JobSet
    created then is admitted and released, without a restart (before, the JobSet kind was looked for once, at
    the start, and never read)."""
    run, _nodes = fleet
    custom = client.CustomObjectsApi(kube_client)
    tenant, name = f"t-{run}", f"late-{run}"
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    try:
        with pytest.raises(client.ApiException) as absent:
            custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        assert absent.value.status == 404  # no JobSet CRD when the control plane started
        with installed_crd(kube_client, GROUP, VERSION, {"plural": PLURAL, "singular": "jobset", "kind": "JobSet"},
                           {"type": "object", "x-kubernetes-preserve-unknown-fields": True}):
            try:
                custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL,
                                                       _jobset(name, tenant, run, replicas=1, parallelism=2, gpus=1))

                def released() -> dict[str, Any] | None:
                    js = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
                    return js if not js["spec"].get("suspend") else None

                js = wait_until(released, 60, "the JobSet created after its CRD was installed to be admitted")
                adm = Admission.parse(js["metadata"]["annotations"][ADMISSION_ANNOTATION], "test")
                assert len(adm.slots) == 2 and all(s.node for s in adm.slots)
                shown = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"]
                                                 if j["name"] == name and j["status"] == "running"), None), 30,
                                   "the JobSet running in get jobs")
                assert shown["tenant"] == tenant and shown["replicas"] == 2
            finally:
                with contextlib.suppress(client.ApiException):
                    custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        server.stop()
