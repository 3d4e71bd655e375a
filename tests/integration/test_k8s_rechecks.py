"""Re-checks users of the Kubernetes door rely on in multi-tenant clusters, on a real kube-apiserver (with
kube-controller-manager's Job controller and the kubelet stand-in; JobSets and PyTorchJobs through the CRDs and
controller stand-ins of ``test_k8s_jobset.py`` and ``test_k8s_pytorchjob.py``):

* a refused workload pruned by the retention policy (``up --max-finished-jobs 0``) whose object is still there is
  re-checked as one in memory is: a binding change lets a Job in, a new queue label lets a JobSet, a PyTorchJob
  and a pod group in (listed and stored under the new tenant), a bad label refuses it again (a second Refused
  Event, still pruned);
* a pod group's members relabelled (``gpucluster.io/queue``): a refused group is read again as a new one (refused
  again for a bad name, let in under a tenant its namespace may use), a running one keeps its tenant with a
  Normal ``Relabelled`` Event on its pods;
* JobSets and PyTorchJobs: relabelled while running they keep their tenant (``Relabelled``), refused and
  relabelled they are let in; finished and pruned, their object changing does not make them jobs again and the
  tombstone goes with the object;
* a running Job whose slot cannot be held when the control plane starts (another pod was bound on its devices
  while it was down: a real fault, made here with the API) is running from the start, never queued nor admitted
  a second time, and its slot is held once the other pod is gone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_k8s_jobset import GROUP as JS_GROUP
from test_k8s_jobset import PLURAL as JS_PLURAL
from test_k8s_jobset import VERSION as JS_VERSION
from test_k8s_jobset import _jobset, jobset_crd  # noqa: F401 (a fixture)
from test_k8s_pytorchjob import GROUP as PTJ_GROUP
from test_k8s_pytorchjob import PLURAL as PTJ_PLURAL
from test_k8s_pytorchjob import VERSION as PTJ_VERSION
from test_k8s_pytorchjob import pytorchjob, pytorchjob_crd  # noqa: F401 (a fixture)
from test_k8s_tenancy import _apply, _refused, _status, _stored, _usage
from up_process import ControlPlane, serving, ticking, wait_until

from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, QUEUE_LABEL, REFUSED_ANNOTATION
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION, RESERVATION_ANNOTATION

pytestmark = pytest.mark.integration



def _history(server: ControlPlane, name: str) -> dict[str, Any] | None:
    """The job of that name in the history (the store's, pruned jobs included)."""
    jobs = server.get("/api/v1/jobs", params={"include": "pruned", "q": name})["jobs"]
    same = [j for j in jobs if j["name"] == name]
    return same[0] if same else None


def _listed(server: ControlPlane, name: str) -> dict[str, Any] | None:
    same = [j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"] if j["name"] == name]
    return same[0] if same else None


def _pruned(server: ControlPlane, name: str, status: str = "failed") -> dict[str, Any] | None:
    job = _history(server, name)
    return job if job is not None and job["pruned"] and job["status"] == status else None


def _member(name: str, namespace: str, run: str, tenant: str, group: str, run_s: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"gpucluster.io/run": run, QUEUE_LABEL: tenant},
                     "annotations": {GANG_ANNOTATION: group, GANG_MIN_ANNOTATION: "2"}},
        "spec": {"schedulerName": "gpucluster", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "nodeSelector": {"gpucluster.io/run": run},
                 "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                 "env": [{"name": "FAKE_RUN_S", "value": str(run_s)}],
                                 "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def _group(core: Any, namespace: str, run: str, tenant: str, group: str, run_s: int = 2) -> None:
    for i in range(2):
        core.create_namespaced_pod(namespace, _member(f"{group}-{i}", namespace, run, tenant, group, run_s))


def _relabel_group(core: Any, namespace: str, group: str, tenant: str) -> None:
    for i in range(2):
        core.patch_namespaced_pod(f"{group}-{i}", namespace, {"metadata": {"labels": {QUEUE_LABEL: tenant}}})


@pytest.mark.usefixtures("jobset_crd", "pytorchjob_crd")
def test_refused_workloads_pruned_by_the_retention_policy_are_rechecked(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str], fleet: list[Any],
        tmp_path: Path) -> None:
    """``up --max-finished-jobs 0``, ns-a bound to A. In ns-b, naming A: Jobs ``k`` and ``j``, a JobSet, a
    PyTorchJob and a pod group, each refused and pruned at once. Relabelled to C (bound nowhere), the JobSet, the
    PyTorchJob and the group are let in (Accepted, released or bound, listed under C); ``j`` relabelled to a bad
    name is refused again (a second Refused Event) and stays pruned; unbinding ns-a lets ``k`` in (it runs,
    under A) but not ``j``, which is let in once relabelled to C."""
    from kubernetes import client

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    k, j, js_name, ptj_name, group = f"k-{run}", f"j-{run}", f"js-{run}", f"ptj-{run}", f"pg-{run}"
    why = f"namespace {ns_b} may not use tenant {tenant}"
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect", "--max-finished-jobs", "0") as server:
        _apply(kube_control_plane, k, ns_b, tenant, run)
        _apply(kube_control_plane, j, ns_b, tenant, run)
        js = _jobset(js_name, tenant, run, replicas=1, parallelism=1, gpus=1)
        js["metadata"]["namespace"] = ns_b
        ptj = pytorchjob(ptj_name, tenant, run, workers=1, gpus=1)
        ptj["metadata"]["namespace"] = ns_b
        custom.create_namespaced_custom_object(JS_GROUP, JS_VERSION, ns_b, JS_PLURAL, js)
        custom.create_namespaced_custom_object(PTJ_GROUP, PTJ_VERSION, ns_b, PTJ_PLURAL, ptj)
        _group(core, ns_b, run, tenant, group)
        for name, kind in ((k, "Job"), (j, "Job"), (js_name, "JobSet"), (ptj_name, "PyTorchJob"),
                           (f"{group}-0", "Pod")):
            [event] = wait_until(lambda n=name, kd=kind: _refused(kube_client, ns_b, n, kind=kd), 60,  # type: ignore[misc]
                                 f"a Refused event on {kind} {name}")
            assert why in event["message"]
        for name in (k, j, js_name, ptj_name, group):  # refused, then pruned at once: only in the history
            wait_until(lambda n=name: _pruned(server, n), 60, f"{name} pruned")  # type: ignore[misc]
            assert _listed(server, name) is None

        get_js: Callable[[], Any] = lambda: custom.get_namespaced_custom_object(  # noqa: E731
            JS_GROUP, JS_VERSION, ns_b, JS_PLURAL, js_name)
        get_ptj: Callable[[], Any] = lambda: custom.get_namespaced_custom_object(  # noqa: E731
            PTJ_GROUP, PTJ_VERSION, ns_b, PTJ_PLURAL, ptj_name)
        # a new label on each: the JobSet, the PyTorchJob and the group to C (let in), j to a bad name
        for plural, group_name, version, name in ((JS_PLURAL, JS_GROUP, JS_VERSION, js_name),
                                                  (PTJ_PLURAL, PTJ_GROUP, PTJ_VERSION, ptj_name)):
            custom.patch_namespaced_custom_object(group_name, version, ns_b, plural, name,
                                                  {"metadata": {"labels": {QUEUE_LABEL: other}}})
        _relabel_group(core, ns_b, group, other)
        batch.patch_namespaced_job(j, ns_b, {"metadata": {"labels": {QUEUE_LABEL: "Not_A_Tenant"}}})
        for name, kind, get in ((js_name, "JobSet", get_js), (ptj_name, "PyTorchJob", get_ptj)):
            [accepted] = wait_until(lambda n=name, kd=kind: _refused(kube_client, ns_b, n, kind=kd,  # type: ignore[misc]
                                                                      reason="Accepted"), 60, f"{kind} let in")
            assert f"accepted: queued for tenant {other}: its label {QUEUE_LABEL} now names tenant {other}" \
                in accepted["message"]
            wait_until(lambda g=get: REFUSED_ANNOTATION not in (g()["metadata"].get("annotations") or {}), 90,  # type: ignore[misc]
                       f"the refusal taken off the {kind}")
        wait_until(lambda: not get_js()["spec"].get("suspend"), 60, "the JobSet released")
        wait_until(lambda: not get_ptj()["spec"]["runPolicy"].get("suspend"), 60, "the PyTorchJob released")
        wait_until(lambda: _refused(kube_client, ns_b, f"{group}-0", kind="Pod", reason="Accepted"), 60,
                   "the pod group let in")
        done = wait_until(lambda: _pruned(server, group, "succeeded"), 90, "the pod group to run (and be pruned)")
        assert done["tenant"] == other
        for name in (js_name, ptj_name):
            shown = wait_until(lambda n=name: (h := _listed(server, n)) and h["status"] == "running" and h, 60,  # type: ignore[misc]
                               f"{name} listed running")
            assert shown["tenant"] == other
        wait_until(lambda: _stored(server.data, js_name, ptj_name) == {js_name: other, ptj_name: other}, 90,
                   "the store to file them under C")
        events = wait_until(lambda: (e := _refused(kube_client, ns_b, j)) and len(e) == 2 and e, 60,
                            "a second Refused event on j, for its bad name")
        assert any("'Not_A_Tenant' is not a tenant name" in e["message"] for e in events)
        assert _pruned(server, j) is not None and _listed(server, j) is None  # refused again: still pruned

        # a binding change: A bound nowhere lets k in (it runs under A); j names no tenant that exists: refused
        core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: None}}})
        [accepted] = wait_until(lambda: _refused(kube_client, ns_b, k, reason="Accepted"), 60, "k let in")
        assert f"tenant {tenant} is bound to no namespace" in accepted["message"]
        done = wait_until(lambda: _pruned(server, k, "succeeded"), 90, "k to run (and be pruned)")
        assert done["tenant"] == tenant
        assert not _refused(kube_client, ns_b, j, reason="Accepted")
        batch.patch_namespaced_job(j, ns_b, {"metadata": {"labels": {QUEUE_LABEL: other}}})
        wait_until(lambda: _refused(kube_client, ns_b, j, reason="Accepted"), 60, "j let in under C")
        done = wait_until(lambda: _pruned(server, j, "succeeded"), 90, "j to run (and be pruned)")
        assert done["tenant"] == other
        assert len(_refused(kube_client, ns_b, j) or []) == 2


def test_a_pod_groups_queue_label_is_rechecked_as_a_jobs_is(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str], fleet: list[Any],
        tmp_path: Path) -> None:
    """ns-a bound to A. A pod group of ns-b naming A is refused; its members relabelled to a bad name, it is
    refused again for that (a second Refused Event on its pods); relabelled to C, it is let in (Accepted) and runs
    under C. A running group of ns-a naming A, relabelled to C, runs on charged to A with a Relabelled Event."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    refused, running = f"pr-{run}", f"pa-{run}"
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as server:
        _group(core, ns_b, run, tenant, refused)
        _group(core, ns_a, run, tenant, running, run_s=600)
        [event] = wait_until(lambda: _refused(kube_client, ns_b, f"{refused}-0", kind="Pod"), 60,
                             "a Refused event on the group's pods")
        assert f"namespace {ns_b} may not use tenant {tenant}" in event["message"]
        wait_until(lambda: _status(server, running, "running"), 60, "the group of ns-a to run")

        _relabel_group(core, ns_b, refused, "Not_A_Tenant")
        events = wait_until(lambda: (e := _refused(kube_client, ns_b, f"{refused}-0", kind="Pod")) and len(e) == 2
                            and e, 60, "a second Refused event, for the bad name")
        assert any("'Not_A_Tenant' is not a tenant name" in e["message"] for e in events)
        _relabel_group(core, ns_b, refused, other)
        [accepted] = wait_until(lambda: _refused(kube_client, ns_b, f"{refused}-0", kind="Pod", reason="Accepted"),
                                60, "an Accepted event on the relabelled group's pods")
        assert f"accepted: queued for tenant {other}: its members' label {QUEUE_LABEL} now names tenant {other}" \
            in accepted["message"]
        done = wait_until(lambda: _status(server, refused, "succeeded"), 90, "the relabelled group to run")
        assert done["tenant"] == other
        assert len(_refused(kube_client, ns_b, f"{refused}-0", kind="Pod") or []) == 2

        _relabel_group(core, ns_a, running, other)
        [told] = wait_until(lambda: _refused(kube_client, ns_a, f"{running}-0", kind="Pod", reason="Relabelled"), 60,
                            "a Relabelled event on the running group's pods")
        assert f"it stays running, charged to tenant {tenant} until it ends" in told["message"]
        still = _status(server, running, "running")
        assert still is not None and still["tenant"] == tenant
        assert _usage(server, tenant)["gpus"] == 2 and _usage(server, other)["gpus"] == 0


@pytest.mark.usefixtures("jobset_crd", "pytorchjob_crd")
def test_jobsets_and_pytorchjobs_relabelled_and_pruned(kube_control_plane: Any, kube_client: Any, run: str,
                                                       namespaces: tuple[str, str, str], fleet: list[Any]) -> None:
    """In process, ns-a bound to A. A JobSet and a PyTorchJob of ns-a naming A run; relabelled to C they keep A
    (a Relabelled Event each). A JobSet and a PyTorchJob of ns-b naming A are refused; relabelled to C they are let
    in under C. The running ones finish (their controllers' conditions) and are pruned: a tombstone each while
    the object exists (a change of it does not make a job again), none once it is deleted."""
    from kubernetes import client

    from gpucluster.kubernetes import KubeRuntime

    custom = client.CustomObjectsApi(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    kinds = {"JobSet": (JS_GROUP, JS_VERSION, JS_PLURAL), "PyTorchJob": (PTJ_GROUP, PTJ_VERSION, PTJ_PLURAL)}

    def make(kind: str, name: str, namespace: str) -> None:
        obj = (_jobset(name, tenant, run, replicas=1, parallelism=1, gpus=1) if kind == "JobSet"
               else pytorchjob(name, tenant, run, workers=1, gpus=1))
        obj["metadata"]["namespace"] = namespace
        g, v, p = kinds[kind]
        custom.create_namespaced_custom_object(g, v, namespace, p, obj)

    def patch(kind: str, name: str, namespace: str, body: dict[str, Any]) -> None:
        g, v, p = kinds[kind]
        custom.patch_namespaced_custom_object(g, v, namespace, p, name, body)

    rt = KubeRuntime(kube_control_plane.kubeconfig, namespace="default", identity=f"test-{run}")
    tick = ticking(rt)

    def job_named(name: str, status: str) -> Any:
        return next((x for x in rt.jobs() if x.name == name and x.status == status), None)

    try:
        wait_until(lambda: rt.jobsets and bool(rt.informer.served.get("pytorchjobs")), 90, "the CRDs served")
        runs = {"JobSet": f"js-a-{run}", "PyTorchJob": f"ptj-a-{run}"}
        fixes = {"JobSet": f"js-b-{run}", "PyTorchJob": f"ptj-b-{run}"}
        for kind in kinds:
            make(kind, runs[kind], ns_a)
            make(kind, fixes[kind], ns_b)
        for kind in kinds:
            wait_until(tick(lambda n=runs[kind]: job_named(n, "running")), 60, f"the {kind} of ns-a to run")  # type: ignore[misc]
            wait_until(tick(lambda n=fixes[kind]: job_named(n, "failed")), 60, f"the {kind} of ns-b refused")  # type: ignore[misc]
            wait_until(tick(lambda n=fixes[kind], kd=kind: _refused(kube_client, ns_b, n, kind=kd)), 90,  # type: ignore[misc]
                       f"a Refused event on the {kind} of ns-b")
        for kind in kinds:
            patch(kind, runs[kind], ns_a, {"metadata": {"labels": {QUEUE_LABEL: other}}})
            patch(kind, fixes[kind], ns_b, {"metadata": {"labels": {QUEUE_LABEL: other}}})
        for kind in kinds:
            [told] = wait_until(tick(lambda n=runs[kind], kd=kind: _refused(kube_client, ns_a, n, kind=kd,  # type: ignore[misc]
                                                                           reason="Relabelled")), 60,
                                f"a Relabelled event on the running {kind}")
            assert f"it stays running, charged to tenant {tenant} until it ends" in told["message"]
            assert job_named(runs[kind], "running").tenant == tenant
            wait_until(tick(lambda n=fixes[kind], kd=kind: _refused(kube_client, ns_b, n, kind=kd,  # type: ignore[misc]
                                                                   reason="Accepted")), 60, f"the {kind} let in")
            let_in = wait_until(tick(lambda n=fixes[kind]: job_named(n, "running")), 60, f"the {kind} let in to run")  # type: ignore[misc]
            assert let_in.tenant == other

        # their controllers say they finished: succeeded, then pruned; a tombstone while the object is there
        patch("JobSet", runs["JobSet"], ns_a, {"status": {"conditions": [
            {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": "jobset completed"}]}})
        patch("PyTorchJob", runs["PyTorchJob"], ns_a, {"status": {"conditions": [
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded", "message": "done"}]}})
        for kind in kinds:
            job = wait_until(tick(lambda n=runs[kind]: job_named(n, "succeeded")), 60, f"the {kind} to succeed")  # type: ignore[misc]
            uid = rt.recs[job.id].uid
            rt.take_discovered()
            assert rt.forget(job.id)
            assert rt.job(job.id) is None and job.id in rt._pruned and rt.by_uid[uid] == job.id
            patch(kind, runs[kind], ns_a, {"metadata": {"labels": {"touched": "1"}}})
            objs = rt._sets.objs if kind == "JobSet" else rt._ptjs.objs
            wait_until(tick(lambda u=uid, o=objs: (o.get(u) or {}).get("metadata", {}).get("labels", {})  # type: ignore[misc]
                            .get("touched") == "1"), 90, f"the informer to show the changed {kind}")
            rt.advance(rt.now + 0.25)
            assert rt.job(job.id) is None and all(x.id != job.id for x in rt.take_discovered())
            g, v, p = kinds[kind]
            custom.delete_namespaced_custom_object(g, v, ns_a, p, runs[kind])
            wait_until(tick(lambda u=uid: u not in rt.by_uid), 60, f"the {kind}'s deletion read")  # type: ignore[misc]
            assert job.id not in rt._pruned and rt.job(job.id) is None
    finally:
        rt.close()


def test_a_running_job_whose_devices_were_taken_while_the_control_plane_was_down_is_never_queued(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any]) -> None:
    """In process: a control plane admits a Job of A (1 pod x 2 GPUs) and it runs; the control plane stops; a pod
    of another scheduler is bound onto the same 2 GPUs (a real fault, made with the API: the node is
    over-committed). A new control plane cannot hold the Job's slot: the Job is running from its first view (its
    admission kept, never queued, never admitted a second time), charged to A, and the slot is held once the
    other pod is gone. Before the fix it was listed pending (queued in the engine, which a pass may admit again)."""
    from kubernetes import client

    from gpucluster.kubernetes import KubeRuntime

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, _ns_b = namespaces
    name = f"hold-{run}"
    first = KubeRuntime(kube_control_plane.kubeconfig, namespace="default", identity=f"first-{run}")
    try:
        _apply(kube_control_plane, name, ns_a, tenant, run, run_s=600)
        job = wait_until(ticking(first)(lambda: next((x for x in first.jobs() if x.name == name
                                                      and x.status == "running"), None)), 60, "the Job to run")
        job_id = job.id

        def pod_running() -> dict[str, Any] | None:
            pods = json.loads(core.list_namespaced_pod(ns_a, label_selector=f"batch.kubernetes.io/job-name={name}",
                                                       _preload_content=False).data)["items"]
            return next((p for p in pods if p["status"].get("phase") == "Running"), None)
        pod = wait_until(ticking(first)(pod_running), 60, "its pod running")
    finally:
        first.close()
    admission = batch.read_namespaced_job(name, ns_a).metadata.annotations[ADMISSION_ANNOTATION]
    # another scheduler's pod bound onto the same devices (named so that the informer lists it first)
    ann = {k: v for k, v in pod["metadata"]["annotations"].items() if k != RESERVATION_ANNOTATION}
    outside = f"aaa-{run}"
    core.create_namespaced_pod(ns_a, {
        "metadata": {"name": outside, "namespace": ns_a, "annotations": ann, "labels": {"gpucluster.io/run": run}},
        "spec": {"schedulerName": "someone-else", "nodeName": pod["spec"]["nodeName"], "restartPolicy": "Never",
                 "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "other", "image": "registry.example/other:v1",
                                 "env": [{"name": "FAKE_RUN_S", "value": "600"}],
                                 "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}})
    wait_until(lambda: core.read_namespaced_pod(outside, ns_a).status.phase == "Running", 90, "the other pod running")
    rt = KubeRuntime(kube_control_plane.kubeconfig, namespace="default", identity=f"second-{run}")
    tick = ticking(rt)
    try:
        seen = rt.job(job_id)
        assert seen is not None and seen.status == "running", seen.message if seen else None
        assert rt.recs[job_id].unmirrored, "the slot was held: the fault was not made"
        for _ in range(8):  # passes of the engine: it never admits the Job again
            rt.advance(rt.now + 0.5)
            assert rt.job(job_id).status == "running"  # type: ignore[union-attr]
        wait_until(lambda: not rt._writes, 90, "the writes done")
        assert batch.read_namespaced_job(name, ns_a).metadata.annotations[ADMISSION_ANNOTATION] == admission
        assert "not held here yet" in rt.job(job_id).message  # type: ignore[union-attr]
        assert rt.usage_by_tenant()[tenant]["gpus"] == 2
        core.delete_namespaced_pod(outside, ns_a, grace_period_seconds=0)
        wait_until(tick(lambda: not rt.recs[job_id].unmirrored), 60, "the slot held once the other pod is gone")
        assert rt.job(job_id).status == "running" and "not held" not in rt.job(job_id).message  # type: ignore[union-attr]
        assert rt.usage_by_tenant()[tenant]["gpus"] == 2
    finally:
        rt.close()
