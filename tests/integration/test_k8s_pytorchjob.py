"""A PyTorchJob (``kubeflow.org/v1``, the Kubeflow training operator's) through the queue (issue 26), on a real
kube-apiserver with kube-controller-manager and a test kubelet (``fake_kubelet``).

No training operator runs here: the test installs a minimal PyTorchJob CRD written for it (the fields the
training operator defines that the queue reads: ``spec.pytorchReplicaSpecs.{Master,Worker}.{replicas,
restartPolicy,template}``, ``spec.runPolicy.{suspend,schedulingPolicy.{minAvailable,queue}}``,
``spec.elasticPolicy``) and plays the operator itself (:func:`_play_training_operator`, test code only): once the
control plane released the PyTorchJob (``spec.runPolicy.suspend: false``) it creates the Master's and the Workers'
pods (labels ``training.kubeflow.org/*``, owned by the PyTorchJob, ``schedulerName: gpucluster``), and once they
succeeded it writes the ``Succeeded`` condition. The control plane reads the PyTorchJob as one gang (Master +
Workers), admits it, unsuspends it, binds the pods where the engine decided (the Master into slot 0) and ends
the job on the condition; preemption suspends it again and deletes its pods."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import installed_crd
from kubernetes import client
from up_process import ControlPlane, ticking, wait_until

from gpucluster.kubernetes.workloads import (
    ADMISSION_ANNOTATION,
    QUEUE_LABEL,
    REFUSED_ANNOTATION,
    TRAINING_JOB_NAME_LABEL,
    TRAINING_REPLICA_INDEX_LABEL,
    TRAINING_REPLICA_TYPE_LABEL,
    Admission,
)

pytestmark = pytest.mark.integration

NS = "default"
GROUP, VERSION, PLURAL = "kubeflow.org", "v1", "pytorchjobs"
_OBJECT = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
_REPLICA = {"type": "object", "properties": {"replicas": {"type": "integer", "format": "int32"},
                                             "restartPolicy": {"type": "string"}, "template": _OBJECT}}
PYTORCHJOB_SPEC_SCHEMA = {
    "type": "object",
    "properties": {
        "pytorchReplicaSpecs": {"type": "object", "properties": {"Master": _REPLICA, "Worker": _REPLICA}},
        "runPolicy": {"type": "object", "properties": {
            "suspend": {"type": "boolean"},
            "cleanPodPolicy": {"type": "string"},
            "backoffLimit": {"type": "integer", "format": "int32"},
            "schedulingPolicy": {"type": "object", "properties": {
                "minAvailable": {"type": "integer", "format": "int32"}, "queue": {"type": "string"},
                "priorityClass": {"type": "string"}}}}},
        "elasticPolicy": _OBJECT,
    },
}
"""The training operator's PyTorchJob spec, as far as the queue reads it (pod templates kept as they are)."""


@pytest.fixture
def pytorchjob_crd(kube_client: Any) -> Iterator[None]:
    with installed_crd(kube_client, GROUP, VERSION, {"plural": PLURAL, "singular": "pytorchjob", "kind": "PyTorchJob"},
                       PYTORCHJOB_SPEC_SCHEMA):
        yield


def _pod_template(run: str, gpus: int, run_s: str) -> dict[str, Any]:
    return {"spec": {"schedulerName": "gpucluster", "nodeSelector": {"gpucluster.io/run": run},
                     "containers": [{"name": "pytorch", "image": "registry.example/ml/bert:2.1",
                                     "command": ["torchrun", "train.py"],
                                     "env": [{"name": "FAKE_RUN_S", "value": run_s}],
                                     "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def pytorchjob(name: str, tenant: str, run: str, *, workers: int, gpus: int, master_gpus: int | None = None,
               run_s: str = "5", priority: int | None = None) -> dict[str, Any]:
    """A PyTorchJob for the queue (what docs/kubernetes.md shows): 1 Master and ``workers`` Workers."""
    def replica(n: int, g: int) -> dict[str, Any]:
        return {"replicas": n, "restartPolicy": "Never", "template": _pod_template(run, g, run_s)}

    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: tenant},
                     "annotations": {"gpucluster.io/priority": str(priority)} if priority is not None else {}},
        "spec": {"runPolicy": {"suspend": True, "cleanPodPolicy": "None"},
                 "pytorchReplicaSpecs": {"Master": replica(1, gpus if master_gpus is None else master_gpus),
                                         "Worker": replica(workers, gpus)}},
    }


def _play_training_operator(core: Any, ptj: dict[str, Any]) -> list[str]:
    """The training operator's part (test code): the pods ``<job>-master-0``, ``<job>-worker-<i>`` of a released
    PyTorchJob, owned by it, labelled as the operator labels them, with the torch.distributed environment."""
    meta = ptj["metadata"]
    names = []
    specs = ptj["spec"]["pytorchReplicaSpecs"]
    world = sum(int(rs["replicas"]) for rs in specs.values())
    rank = 0
    for rtype in ("Master", "Worker"):
        rs = specs[rtype]
        for i in range(int(rs["replicas"])):
            name = f"{meta['name']}-{rtype.lower()}-{i}"
            spec = json.loads(json.dumps(rs["template"]["spec"]))
            spec["restartPolicy"] = rs["restartPolicy"]
            for c in spec["containers"]:
                c["env"] = [*c.get("env", []), {"name": "MASTER_ADDR", "value": f"{meta['name']}-master-0"},
                            {"name": "WORLD_SIZE", "value": str(world)}, {"name": "RANK", "value": str(rank)}]
            core.create_namespaced_pod(NS, {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {
                    TRAINING_JOB_NAME_LABEL: meta["name"], TRAINING_REPLICA_TYPE_LABEL: rtype.lower(),
                    TRAINING_REPLICA_INDEX_LABEL: str(i), "training.kubeflow.org/operator-name": "pytorchjob-controller",
                    **({"training.kubeflow.org/job-role": "master"} if rtype == "Master" else {})},
                    "ownerReferences": [{"apiVersion": f"{GROUP}/{VERSION}", "kind": "PyTorchJob",
                                         "name": meta["name"], "uid": meta["uid"], "controller": True,
                                         "blockOwnerDeletion": True}]},
                "spec": spec})
            names.append(name)
            rank += 1
    return names


def _pods(core: Any, name: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(NS, label_selector=f"{TRAINING_JOB_NAME_LABEL}={name}", _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _events(core: Any, name: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name},involvedObject.kind=PyTorchJob",
                                      _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _cleanup(custom: Any, core: Any, *names: str) -> None:
    for name in names:
        with contextlib.suppress(client.ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        core.delete_collection_namespaced_pod(NS, label_selector=f"{TRAINING_JOB_NAME_LABEL}={name}",
                                              grace_period_seconds=0)


@pytest.mark.usefixtures("pytorchjob_crd")
def test_kubectl_apply_a_pytorchjob_admitted_as_one_gang_released_bound_and_succeeded(
        kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any, run: str, fleet: list[Any],
        tmp_path: Path) -> None:
    """1 Master + 3 Workers x 2 GPUs (all 8 GPUs of the fleet) applied with kubectl: one gang admitted, released,
    its pods bound where the engine decided (the Master into slot 0), succeeded on the PyTorchJob's condition. A
    PyTorchJob whose Master asks for other GPUs than its Workers is refused with a Warning Event that names
    the field."""
    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    tenant, name, mixed = f"t-{run}", f"bert-{run}", f"mixed-{run}"
    server = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    try:
        docs = [pytorchjob(name, tenant, run, workers=3, gpus=2),
                pytorchjob(mixed, tenant, run, workers=2, gpus=2, master_gpus=0)]
        out = subprocess.run([str(kube_control_plane.bin_dir / "kubectl"), "--kubeconfig",
                              str(kube_control_plane.kubeconfig), "apply", "-f", "-"],
                             input="---\n".join(json.dumps(d, indent=2) + "\n" for d in docs), capture_output=True,
                             text=True, timeout=60, check=False)
        assert out.returncode == 0, out.stderr

        def released() -> dict[str, Any] | None:
            ptj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
            return ptj if not ptj["spec"]["runPolicy"].get("suspend") else None

        ptj = wait_until(released, 60, "the PyTorchJob to be admitted (runPolicy.suspend: false)")
        adm = Admission.parse(ptj["metadata"]["annotations"][ADMISSION_ANNOTATION], "test")
        assert len(adm.slots) == 4 and all(s.node for s in adm.slots)
        shown = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"tenant": tenant})["jobs"]
                                         if j["name"] == name and j["status"] == "running"), None), 30,
                           "the PyTorchJob running under its tenant in get jobs")
        assert shown["tenant"] == tenant and shown["replicas"] == 4 and shown["gpus"] == 8
        wait_until(lambda: "Admitted" in [e["reason"] for e in _events(core, name)], 30,
                   "the Admitted event (written after the release)")

        # the other one can never be one gang: refused, with the field named, and never released
        refused = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": mixed})["jobs"]
                                           if j["name"] == mixed and j["status"] == "failed"), None), 30,
                             "the mixed-shape PyTorchJob to be refused")
        why = (f"PyTorchJob {NS}/{mixed}: spec.pytorchReplicaSpecs.Worker.template: asks for other resources (or "
               "scheduler, or nodes) than spec.pytorchReplicaSpecs.Master.template")
        assert why in refused["message"]
        wait_until(lambda: [e for e in _events(core, mixed) if e["reason"] == "Refused" and e["type"] == "Warning"
                            and why in e["message"]], 30, "a Refused Warning Event on the mixed PyTorchJob")
        other = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, mixed)
        assert other["spec"]["runPolicy"]["suspend"] is True
        assert why in other["metadata"]["annotations"][REFUSED_ANNOTATION]

        _play_training_operator(core, ptj)

        def bound() -> list[dict[str, Any]] | None:
            pods = [p for p in _pods(core, name) if p["spec"].get("nodeName")]
            return pods if len(pods) == 4 else None

        pods = wait_until(bound, 60, "the Master's and the 3 Workers' pods to be bound")
        assert sorted(p["spec"]["nodeName"] for p in pods) == sorted(s.node for s in adm.slots)
        assert {p["spec"]["nodeName"] for p in pods} == {n.name for n in fleet}
        for pod in pods:
            assert pod["metadata"]["annotations"]["gpucluster.io/reservation"].startswith(f"{NS}/{shown['id']}-")
        master = next(p for p in pods if p["metadata"]["name"] == f"{name}-master-0")
        assert master["metadata"]["annotations"]["gpucluster.io/reservation"].endswith("-0")  # slot 0
        assert master["spec"]["nodeName"] == adm.slots[0].node
        running = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"]
                                           if j["name"] == name and j["placements"]
                                           and all(p["pod"].startswith(f"{NS}/{name}-") for p in j["placements"])),
                                          None), 30, "the job's placements to name its pods")
        assert {p["pod"] for p in running["placements"]} == {f"{NS}/{p['metadata']['name']}" for p in pods}
        wait_until(lambda: all(p["status"].get("phase") == "Succeeded" for p in _pods(core, name)), 60,
                   "the pods to succeed")
        # the operator's part again: the PyTorchJob Succeeded
        custom.patch_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name, {"status": {"conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded",
             "message": f"PyTorchJob {name} is successfully completed."}]}})
        done = wait_until(lambda: next((j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"]
                                        if j["name"] == name and j["status"] == "succeeded"), None), 30,
                          "the job to succeed with its PyTorchJob")
        assert done["id"] == shown["id"]
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        server.stop()
        _cleanup(custom, core, name, mixed)


@pytest.mark.usefixtures("pytorchjob_crd")
def test_preemption_suspends_a_pytorchjob_again_and_frees_its_gpus(kube_control_plane: Any,
                                                                   kube_controller_manager: Any, kube_client: Any,
                                                                   run: str, fleet: list[Any]) -> None:
    """In-process KubeRuntime with the preemptive tiresias queue policy (its 10-minute lease set to 0 for the
    test): a running low-priority PyTorchJob holding every GPU is suspended again (``runPolicy.suspend: true``,
    its admission dropped, its pods deleted, a ``Preempted`` Event) when a high-priority one arrives, which then
    runs."""
    from gpucluster.kubernetes import KubeRuntime

    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    tenant, low, high = f"p-{run}", f"low-{run}", f"high-{run}"
    rt = KubeRuntime(kube_control_plane.kubeconfig, queue_policy="tiresias", namespace=NS, identity=f"test-{run}")
    rt.engine.policy.min_run_s = 0.0  # type: ignore[misc]

    tick = ticking(rt)

    def released(name: str) -> dict[str, Any] | None:
        ptj = custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
        return ptj if not ptj["spec"]["runPolicy"].get("suspend") else None

    def job_of(name: str) -> Any:
        return next((j for j in rt.jobs() if j.spec.name == name), None)

    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, pytorchjob(
            low, tenant, run, workers=1, gpus=4, run_s="inf", priority=10))
        ptj = wait_until(tick(lambda: released(low)), 60, "the low-priority PyTorchJob released")
        _play_training_operator(core, ptj)
        wait_until(tick(lambda: len([p for p in _pods(core, low) if p["spec"].get("nodeName")]) == 2), 60,
                   "its Master and Worker bound (every GPU of the fleet)")
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, pytorchjob(
            high, tenant, run, workers=0, gpus=4, run_s="inf", priority=50))
        wait_until(tick(lambda: released(high)), 60, "the high-priority PyTorchJob released")
        victim = job_of(low)
        assert victim is not None and victim.status == "pending" and "preempted" in victim.message
        assert victim.preemptions == 1
        again = wait_until(tick(lambda: (o := custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, low))
                                ["spec"]["runPolicy"].get("suspend") and o), 30,
                           "the preempted PyTorchJob suspended again")
        assert ADMISSION_ANNOTATION not in (again["metadata"].get("annotations") or {})
        wait_until(tick(lambda: not [p for p in _pods(core, low) if not p["metadata"].get("deletionTimestamp")]), 30,
                   "its pods deleted")
        wait_until(lambda: "Preempted" in [e["reason"] for e in _events(core, low)], 30,
                   "the Preempted event (written after the suspend)")
        _play_training_operator(core, custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, high))
        wait_until(tick(lambda: [p for p in _pods(core, high) if p["spec"].get("nodeName")]), 30,
                   "the high-priority PyTorchJob's Master bound")
        busy = sum(1 for n in fleet for row in [rt.node(n.name)] if row for d in row["devices"] if d["pods"])
        assert busy == 4  # the victim's GPUs were freed at once: the fleet holds the high-priority job's 4
        assert job_of(high).status == "running" and job_of(high).tenant == tenant
    finally:
        rt.close()
        _cleanup(custom, core, low, high)
