"""Tenant isolation on a real kube-apiserver (with kube-controller-manager's Job controller and the kubelet
stand-in): a Namespace labelled ``gpucluster.io/tenant: A`` binds it to tenant A, and A then takes Jobs only from
its bound namespaces.

* a Job in another namespace naming A (``gpucluster.io/queue: A``) is refused: a Warning ``Refused`` Event on the
  Job says why, it is never released, A's quota is untouched and A's job list does not show it;
* a Job in A's namespace naming A runs and is charged to A;
* removing the label (unbinding) takes effect without a restart: a Job in the other namespace naming A is then
  admitted, as for every tenant with no bound namespace;
* a binding change re-checks what is not admitted: moving ns-a's label from A to C lets in the Job of ns-b refused
  for naming A (its refusal taken off, a Normal ``Accepted`` Event; it runs), refuses the Job of ns-b that waited
  in C's queue, and leaves C's running Job of ns-b running;
* a JobSet, a PyTorchJob and a pod group in ns-b naming A are refused as a Job is (the Event on the object, or on
  each member pod), and let in once A is unbound;
* a change of a refused Job's own queue label re-checks it (refused again for a bad name, let in under a tenant
  bound nowhere, filed under it in the store); a running Job relabelled keeps its tenant;
* across a restart, with the bindings changed while the control plane was down: the running Job of a namespace
  now foreign runs on, charged as before; a queued one is refused; a refused one now allowed is let in; the store
  files each under the tenant it is listed under;
* across a restart with nothing changed: a tenant's running Job is adopted and its Job waiting for quota still
  waits (the stored quota is known from the restarted control plane's first admission pass on).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterator
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
from test_k8s_workloads import _api_job, _kubectl, job_yaml
from up_process import ControlPlane, serving, wait_until

from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, QUEUE_LABEL, REFUSED_ANNOTATION
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION

pytestmark = pytest.mark.integration



@pytest.fixture
def server(namespaces: tuple[str, str, str], kube_control_plane: Any, fleet: list[Any],
           tmp_path: Path) -> Iterator[ControlPlane]:
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as srv:
        yield srv


def _apply(cp: Any, name: str, namespace: str, tenant: str, run: str, *, gpus: int = 2, run_s: float = 2) -> None:
    """A one-pod Job for the queue in ``namespace``; its pod runs ``run_s`` seconds (``math.inf``: until the test
    ends it with ``fake_kubelet.finish``)."""
    doc = json.loads(job_yaml(name, tenant, run, pods=1, gpus=gpus, env={"FAKE_RUN_S": str(run_s)}))
    doc["metadata"]["namespace"] = namespace
    _kubectl(cp, "apply", "-f", "-", stdin=json.dumps(doc))



def _refused(kube: Any, namespace: str, name: str, kind: str = "Job",
             reason: str = "Refused") -> list[dict[str, Any]] | None:
    """The Events of that ``reason`` on the object (``Refused``, ``Accepted``), or None."""
    from kubernetes import client

    resp = client.CoreV1Api(kube).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}", _preload_content=False)
    return [e for e in json.loads(resp.data)["items"] if e["reason"] == reason] or None


def _status(server: ControlPlane, name: str, status: str) -> dict[str, Any] | None:
    job = _api_job(server, name)
    return job if job is not None and job["status"] == status else None


def _stored(data: Path, *names: str) -> dict[str, str]:
    """Job name -> the tenant the control plane's store files it under (read from its SQLite file, read-only)."""
    db = sqlite3.connect(f"file:{data / 'gpucluster.db'}?mode=ro", uri=True)
    try:
        marks = ",".join("?" * len(names))
        return dict(db.execute(f"SELECT name, tenant FROM jobs WHERE name IN ({marks})", names))
    finally:
        db.close()


def _usage(server: ControlPlane, tenant: str) -> dict[str, Any]:
    rows = [t for t in server.get("/api/v1/tenants")["tenants"] if t["name"] == tenant]
    return rows[0] if rows else {"gpus": 0.0, "running": 0, "pending": 0}


def test_a_tenant_bound_to_a_namespace_takes_jobs_from_it_only(kube_control_plane: Any, kube_client: Any,
                                                               run: str, namespaces: tuple[str, str, str],
                                                               server: ControlPlane) -> None:
    from kubernetes import client

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    assert server.overview()["kubernetes"]["bound_namespaces"] >= 1
    # a Job in ns-b naming A: refused, with the reason on the Job; never released, not charged, not A's
    intruder = f"intruder-{run}"
    _apply(kube_control_plane, intruder, ns_b, tenant, run)
    [event] = wait_until(lambda: _refused(kube_client, ns_b, intruder), 60, "a Refused event on the Job in ns-b")
    assert event["type"] == "Warning"
    assert f"namespace {ns_b} may not use tenant {tenant}" in event["message"] and ns_a in event["message"]
    shown = wait_until(lambda: (j := _api_job(server, intruder)) and j["status"] == "failed" and j, 90,
                       "the refused job in get jobs")
    assert shown["tenant"] != tenant and "may not use tenant" in shown["message"]
    job = batch.read_namespaced_job(intruder, ns_b)
    assert job.spec.suspend is True
    assert "may not use tenant" in (job.metadata.annotations or {}).get("gpucluster.io/refused", "")
    assert _usage(server, tenant)["gpus"] == 0
    # a Job in ns-a naming A runs, charged to A
    own = f"own-{run}"
    _apply(kube_control_plane, own, ns_a, tenant, run)
    done = wait_until(lambda: (j := _api_job(server, own)) and j["status"] == "succeeded" and j, 90,
                      "the Job in A's namespace to run")
    assert done["tenant"] == tenant
    assert not _refused(kube_client, ns_a, own)
    # unbinding (the label removed) takes effect without a restart: ns-b may name A again
    core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: None}}})
    wait_until(lambda: server.overview()["kubernetes"]["bound_namespaces"] == 0, 90, "the binding to be gone")
    later = f"later-{run}"
    _apply(kube_control_plane, later, ns_b, tenant, run)
    done = wait_until(lambda: (j := _api_job(server, later)) and j["status"] == "succeeded" and j, 90,
                      "the Job in ns-b to run once A is bound nowhere")
    assert done["tenant"] == tenant and not _refused(kube_client, ns_b, later)


def test_a_binding_change_rechecks_the_jobs_not_admitted(kube_control_plane: Any, kube_client: Any, run: str,
                                                         namespaces: tuple[str, str, str],
                                                         server: ControlPlane) -> None:
    """ns-a bound to A. In ns-b: a Job naming A (refused), and two Jobs naming C (quota 2 GPUs: one runs, one
    waits for quota). Moving ns-a's label from A to C: A is bound nowhere (its refused Job is let in and runs),
    C takes ns-a's workloads only (its waiting Job of ns-b is refused, its running one keeps running)."""
    from kubernetes import client

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    with server.client() as c:
        r = c.post("/api/v1/tenants", json={"name": other, "quota_gpus": 2})
        assert r.status_code == 201, r.text
    intruder, running, waiting = f"intruder-{run}", f"running-{run}", f"waiting-{run}"
    _apply(kube_control_plane, intruder, ns_b, tenant, run)
    wait_until(lambda: _refused(kube_client, ns_b, intruder), 60, "the Job naming A refused")
    _apply(kube_control_plane, running, ns_b, other, run, run_s=600)
    wait_until(lambda: _status(server, running, "running"), 60, "C's first Job to run")
    _apply(kube_control_plane, waiting, ns_b, other, run)
    wait_until(lambda: (j := _status(server, waiting, "pending")) and "quota" in j["message"], 60,
               "C's second Job to wait for quota")

    core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: other}}})
    # the refused Job naming A is let in: refusal taken off, a Normal event saying why, it runs, charged to A
    [accepted] = wait_until(lambda: _refused(kube_client, ns_b, intruder, reason="Accepted"), 60,
                            "an Accepted event on the Job refused before")
    assert accepted["type"] == "Normal" and f"tenant {tenant} is bound to no namespace" in accepted["message"]
    done = wait_until(lambda: _status(server, intruder, "succeeded"), 90, "the Job let in to run")
    assert done["tenant"] == tenant
    assert REFUSED_ANNOTATION not in (batch.read_namespaced_job(intruder, ns_b).metadata.annotations or {})
    # C's Job that waited in the queue is refused, shown as a refused one (not C's); the running one runs on
    [event] = wait_until(lambda: _refused(kube_client, ns_b, waiting), 60, "C's waiting Job refused")
    assert event["type"] == "Warning" and f"namespace {ns_b} may not use tenant {other}" in event["message"]
    shown = wait_until(lambda: _status(server, waiting, "failed"), 90, "the refused Job failed in get jobs")
    assert shown["tenant"] != other and "may not use tenant" in shown["message"]
    job = batch.read_namespaced_job(waiting, ns_b)
    assert job.spec.suspend is True and "may not use tenant" in job.metadata.annotations[REFUSED_ANNOTATION]
    still = _status(server, running, "running")
    assert still is not None and still["tenant"] == other
    assert not _refused(kube_client, ns_b, running) and batch.read_namespaced_job(running, ns_b).spec.suspend is False
    usage = _usage(server, other)
    assert usage["gpus"] == 2 and usage["pending"] == 0


@pytest.mark.usefixtures("jobset_crd", "pytorchjob_crd")
def test_a_jobset_a_pytorchjob_and_a_pod_group_naming_a_bound_tenant_are_refused_then_let_in(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        server: ControlPlane) -> None:
    from kubernetes import client

    custom, core = client.CustomObjectsApi(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    js_name, ptj_name, group = f"js-{run}", f"ptj-{run}", f"pg-{run}"
    js = _jobset(js_name, tenant, run, replicas=1, parallelism=1, gpus=1)
    js["metadata"]["namespace"] = ns_b
    ptj = pytorchjob(ptj_name, tenant, run, workers=1, gpus=1)
    ptj["metadata"]["namespace"] = ns_b
    custom.create_namespaced_custom_object(JS_GROUP, JS_VERSION, ns_b, JS_PLURAL, js)
    custom.create_namespaced_custom_object(PTJ_GROUP, PTJ_VERSION, ns_b, PTJ_PLURAL, ptj)
    for i in range(2):  # a pod group of 2 (our gang annotations), labelled with A's queue
        core.create_namespaced_pod(ns_b, {
            "metadata": {"name": f"{group}-{i}", "labels": {"gpucluster.io/run": run, QUEUE_LABEL: tenant},
                         "annotations": {GANG_ANNOTATION: group, GANG_MIN_ANNOTATION: "2"}},
            "spec": {"schedulerName": "gpucluster", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"gpucluster.io/run": run},
                     "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                     "env": [{"name": "FAKE_RUN_S", "value": "2"}],
                                     "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    why = f"namespace {ns_b} may not use tenant {tenant}"
    get_js: Callable[[], Any] = lambda: custom.get_namespaced_custom_object(  # noqa: E731
        JS_GROUP, JS_VERSION, ns_b, JS_PLURAL, js_name)
    get_ptj: Callable[[], Any] = lambda: custom.get_namespaced_custom_object(  # noqa: E731
        PTJ_GROUP, PTJ_VERSION, ns_b, PTJ_PLURAL, ptj_name)
    for name, kind, get in ((js_name, "JobSet", get_js), (ptj_name, "PyTorchJob", get_ptj)):
        [event] = wait_until(lambda n=name, k=kind: _refused(kube_client, ns_b, n, kind=k), 60,  # type: ignore[misc]
                             f"a Refused event on the {kind}")
        assert event["type"] == "Warning" and why in event["message"]
        assert why in (get()["metadata"].get("annotations") or {}).get(REFUSED_ANNOTATION, "")
    for i in range(2):
        [event] = wait_until(lambda i=i: _refused(kube_client, ns_b, f"{group}-{i}", kind="Pod"), 60,  # type: ignore[misc]
                             "a Refused event on each pod of the group")
        assert event["type"] == "Warning" and why in event["message"]
    for name in (js_name, ptj_name, group):
        shown = wait_until(lambda n=name: _status(server, n, "failed"), 90, f"{name} refused in get jobs")  # type: ignore[misc]
        assert shown["tenant"] != tenant and why in shown["message"]
    assert get_js()["spec"]["suspend"] is True and get_ptj()["spec"]["runPolicy"]["suspend"] is True
    assert not [p for p in core.list_namespaced_pod(ns_b).items if p.spec.node_name]
    assert _usage(server, tenant)["gpus"] == 0

    # A unbound: all three are let in (released, the group bound and run)
    core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: None}}})
    wait_until(lambda: not get_js()["spec"].get("suspend"), 60, "the JobSet released")
    wait_until(lambda: not get_ptj()["spec"]["runPolicy"].get("suspend"), 60, "the PyTorchJob released")
    for name, kind, get in ((js_name, "JobSet", get_js), (ptj_name, "PyTorchJob", get_ptj)):
        assert _refused(kube_client, ns_b, name, kind=kind, reason="Accepted")
        wait_until(lambda g=get: REFUSED_ANNOTATION not in (g()["metadata"].get("annotations") or {}), 90,  # type: ignore[misc]
                   f"the refusal taken off the {kind}")
    assert _refused(kube_client, ns_b, f"{group}-0", kind="Pod", reason="Accepted")
    done = wait_until(lambda: _status(server, group, "succeeded"), 90, "the pod group let in to run")
    assert done["tenant"] == tenant


def test_a_queue_label_change_rechecks_a_refused_job_and_never_moves_a_running_one(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        server: ControlPlane) -> None:
    """ns-a bound to A. A Job of ns-b naming A is refused; its label changed to a bad tenant name, it is refused
    again for that (a second Refused event, the annotation rewritten); changed to C (bound nowhere), it is let in
    (the refusal taken off, an Accepted event), runs charged to C and the store files it under C. A running Job
    of ns-a naming A, relabelled to C, runs on charged to A (a Relabelled event says so)."""
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    fixed, running = f"fixed-{run}", f"running-{run}"
    _apply(kube_control_plane, fixed, ns_b, tenant, run)
    wait_until(lambda: _refused(kube_client, ns_b, fixed), 60, "the Job of ns-b naming A refused")
    _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
    wait_until(lambda: _status(server, running, "running"), 60, "the Job of ns-a to run")

    def relabel(name: str, namespace: str, label: str) -> None:
        batch.patch_namespaced_job(name, namespace, {"metadata": {"labels": {QUEUE_LABEL: label}}})

    relabel(fixed, ns_b, "Not_A_Tenant")
    events = wait_until(lambda: (e := _refused(kube_client, ns_b, fixed)) and len(e) == 2 and e, 60,
                        "a second Refused event, for the bad name")
    assert any("'Not_A_Tenant' is not a tenant name" in e["message"] for e in events)
    wait_until(lambda: "not a tenant name" in (batch.read_namespaced_job(fixed, ns_b).metadata.annotations or {})
               .get(REFUSED_ANNOTATION, ""), 90, "the refusal annotation rewritten")
    assert not _refused(kube_client, ns_b, fixed, reason="Accepted")

    relabel(fixed, ns_b, other)
    [accepted] = wait_until(lambda: _refused(kube_client, ns_b, fixed, reason="Accepted"), 60,
                            "an Accepted event on the relabelled Job")
    assert accepted["type"] == "Normal"
    assert f"accepted: queued for tenant {other}: its label {QUEUE_LABEL} now names tenant {other}" \
        in accepted["message"]
    done = wait_until(lambda: _status(server, fixed, "succeeded"), 90, "the relabelled Job to run")
    assert done["tenant"] == other
    assert REFUSED_ANNOTATION not in (batch.read_namespaced_job(fixed, ns_b).metadata.annotations or {})
    wait_until(lambda: _stored(server.data, fixed) == {fixed: other}, 90, "the store to file it under C")

    relabel(running, ns_a, other)
    [told] = wait_until(lambda: _refused(kube_client, ns_a, running, reason="Relabelled"), 60,
                        "a Relabelled event on the running Job")
    assert f"it stays running, charged to tenant {tenant} until it ends" in told["message"]
    still = _status(server, running, "running")
    assert still is not None and still["tenant"] == tenant
    assert _usage(server, tenant)["gpus"] == 2 and _usage(server, other)["gpus"] == 0
    assert not _refused(kube_client, ns_a, running)


def test_a_restart_after_the_bindings_changed_keeps_running_jobs_and_files_each_under_its_tenant(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str], fleet: list[Any],
        tmp_path: Path) -> None:
    """ns-a bound to A (quota 2 GPUs). A Job of ns-a naming A runs, another waits for quota, a Job of ns-b naming
    A is refused (stored under ``default``). The control plane stops; meanwhile ns-a is bound to C and ns-b to A.
    Restarted, it adopts the running Job (still running, charged to A, never refused), refuses the waiting one
    (ns-a may not use A now; listed and stored under C) and lets the refused one in (the refusal taken off, an
    Accepted event; listed and stored under A)."""
    from kubernetes import client

    batch, core = client.BatchV1Api(kube_client), client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    running, waiting, intruder = f"running-{run}", f"waiting-{run}", f"intruder-{run}"
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as first:
        with first.client() as c:
            r = c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
            assert r.status_code == 201, r.text
        _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(first, running, "running"), 60, "A's first Job to run")
        _apply(kube_control_plane, waiting, ns_a, tenant, run)
        wait_until(lambda: (j := _status(first, waiting, "pending")) and "quota" in j["message"], 60,
                   "A's second Job to wait for quota")
        _apply(kube_control_plane, intruder, ns_b, tenant, run)
        wait_until(lambda: _refused(kube_client, ns_b, intruder), 60, "the Job of ns-b naming A refused")
        wait_until(lambda: _stored(first.data, intruder) == {intruder: "default"}, 90,
                   "the refused Job stored under default")
    assert _stored(first.data, running, waiting) == {running: tenant, waiting: tenant}

    core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: other}}})
    core.patch_namespace(ns_b, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: tenant}}})
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as second:
        # the running Job is adopted as it runs: ns-a's new binding never stops it
        again = wait_until(lambda: _status(second, running, "running"), 60, "the running Job adopted")
        assert again["tenant"] == tenant
        assert batch.read_namespaced_job(running, ns_a).spec.suspend is False
        assert not _refused(kube_client, ns_a, running)
        # the waiting one is refused, listed under ns-a's tenant now
        [event] = wait_until(lambda: _refused(kube_client, ns_a, waiting), 60, "the waiting Job refused")
        assert f"namespace {ns_a} may not use tenant {tenant}" in event["message"]
        shown = wait_until(lambda: _status(second, waiting, "failed"), 90, "the refused Job failed in get jobs")
        assert shown["tenant"] == other
        # the refused one is let in, listed under A
        wait_until(lambda: _refused(kube_client, ns_b, intruder, reason="Accepted"), 60, "the refused Job let in")
        let_in = wait_until(lambda: (j := _api_job(second, intruder)) and j["status"] != "failed" and j, 90,
                            "the Job let in listed as queued or run")
        assert let_in["tenant"] == tenant
        assert REFUSED_ANNOTATION not in (batch.read_namespaced_job(intruder, ns_b).metadata.annotations or {})
        wait_until(lambda: _stored(second.data, running, waiting, intruder)
                   == {running: tenant, waiting: other, intruder: tenant}, 90, "the store to file each anew")
    assert _stored(second.data, running, waiting, intruder) == {running: tenant, waiting: other, intruder: tenant}


def test_a_restart_keeps_the_job_waiting_for_quota_waiting(kube_control_plane: Any, kube_client: Any, run: str,
                                                          namespaces: tuple[str, str, str], fleet: list[Any],
                                                          tmp_path: Path) -> None:
    """A (quota 2 GPUs, set through the API) runs a 2-GPU Job and has a second one waiting for quota. Restarted,
    the control plane adopts the running Job and the second still waits, saying so, through its first ticks: A
    holds 2 GPUs, never 4. Before the fix the first admission pass after a restart ran before the stored quotas
    were given to the runtime, and admitted the waiting Job."""
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant, ns_a, _ns_b = namespaces
    running, waiting = f"running-{run}", f"waiting-{run}"
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as first:
        with first.client() as c:
            assert c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2}).status_code == 201
        _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(first, running, "running"), 60, "A's first Job to run")
        _apply(kube_control_plane, waiting, ns_a, tenant, run)
        wait_until(lambda: (j := _status(first, waiting, "pending")) and "quota" in j["message"], 60,
                   "A's second Job to wait for quota")
    with serving(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect") as second:
        wait_until(lambda: _status(second, running, "running"), 60, "the running Job adopted")
        ticks = second.get("/healthz")["ticks"]
        wait_until(lambda: second.get("/healthz")["ticks"] >= ticks + 5, 60, "five more ticks")
        shown = _status(second, waiting, "pending")
        assert shown is not None and "quota" in shown["message"], _api_job(second, waiting)
        assert ADMISSION_ANNOTATION not in (batch.read_namespaced_job(waiting, ns_a).metadata.annotations or {})
        assert batch.read_namespaced_job(waiting, ns_a).spec.suspend is True
        tenants = {t["name"]: t for t in second.get("/api/v1/tenants")["tenants"]}
        assert tenants[tenant]["gpus"] == 2 and tenants[tenant]["quota_gpus"] == 2, tenants[tenant]
