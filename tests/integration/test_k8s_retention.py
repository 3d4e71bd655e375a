"""The retention policy of finished jobs (``up --max-finished-jobs``, ``--finished-job-ttl``) on a real
kube-apiserver, with kube-controller-manager's Job controller and a test kubelet (``fake_kubelet``) running the pods:

* ``gpucluster up --max-finished-jobs 0``: a Job of the queue that completes leaves memory at once (not in the job
  list; ``pruned`` counts it), reads back by id from the store with ``pruned: true``, and while its Job object is
  still in the cluster it is not read as a new job, neither when the object changes nor after a restart of the
  control plane (its stored events and end are those it had);
* in process: the runtime's per-job records (``recs``, ``by_uid``) of a pruned job become a tombstone while its
  Job object exists and go with the object; a job cancelled while its Job was being created is prunable too and
  leaves nothing once its Job is deleted; a pod group's job (bare pods with our gang annotations) that succeeded
  is a tombstone while its ended pods stay (their changes do not make it a job again) and nothing once they are gone.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_k8s_workloads import _gc_jobs, _job, _kubectl, job_yaml
from up_process import ControlPlane, serving, ticking, wait_until

from gpucluster.kubernetes.workloads import QUEUE_LABEL

pytestmark = pytest.mark.integration

NS = "default"


@pytest.fixture
def cp_with_jobs(kube_control_plane: Any, kube_controller_manager: Any) -> Any:
    """The control plane with kube-controller-manager (the Job controller makes the pods)."""
    return kube_control_plane


def _listed(server: ControlPlane, tenant: str) -> dict[str, Any]:
    return server.get("/api/v1/jobs", params={"tenant": tenant})


def _pruned_by_id(server: ControlPlane, job_id: str) -> dict[str, Any] | None:
    job = server.get(f"/api/v1/jobs/{job_id}")
    return job if job["pruned"] and job["status"] == "succeeded" else None


def _touch(batch: Any, name: str, value: str) -> None:
    """Change the Job object (a label): the informer reports it again and the runtime reads it again."""
    batch.patch_namespaced_job(name, NS, {"metadata": {"labels": {"touched": value}}})


def _run_to_pruned(cp: Any, server: ControlPlane, tenant: str, run: str, name: str) -> str:
    """Apply a short Job, wait until it ran (its id) and until it reads back pruned; returns its id."""
    _kubectl(cp, "apply", "-f", "-", stdin=job_yaml(name, tenant, run, pods=1, gpus=1, env={"FAKE_RUN_S": "1"}))

    def seen() -> str | None:
        jobs = [j for j in _listed(server, tenant)["jobs"] if j["name"] == name]
        if jobs:
            return str(jobs[0]["id"])
        return None

    job_id = wait_until(seen, 60, f"{name} in the job list (queued or running)")
    wait_until(lambda: _pruned_by_id(server, job_id), 90, f"{name} to succeed and be pruned")
    return job_id


def test_a_completed_job_is_pruned_and_never_read_again_while_its_job_object_stays(
        cp_with_jobs: Any, kube_client: Any, run: str, fleet: list[Any], tmp_path: Path) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"k-{run}"
    name, marker, after = f"done-{run}", f"mark-{run}", f"after-{run}"
    args = ("--no-leader-elect", "--max-finished-jobs", "0")
    try:
        with serving(cp_with_jobs.kubeconfig, tmp_path, *args) as server:
            job_id = _run_to_pruned(cp_with_jobs, server, tenant, run, name)
            first = server.get(f"/api/v1/jobs/{job_id}")
            assert first["pruned"] is True and first["status"] == "succeeded"
            listed = _listed(server, tenant)
            assert [j["id"] for j in listed["jobs"]] == [] and listed["pruned"] >= 1
            job = _job(batch, name)  # its Job object is still in the cluster
            assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
            # the object changes: the informer shows it again; a second job, applied after, is pruned only once
            # the control plane has read every change before it, so the first one's view was read by then
            _touch(batch, name, "1")
            _run_to_pruned(cp_with_jobs, server, tenant, run, marker)
            again = server.get(f"/api/v1/jobs/{job_id}")
            assert again == first  # still pruned, as it ended: no new event, no new end
            assert [j["id"] for j in _listed(server, tenant)["jobs"]] == []
        # a restart: the store does not load it (past the policy) and the runtime, which reads its Job object
        # again, does not make it a job again: no new events, its end as stored
        with serving(cp_with_jobs.kubeconfig, tmp_path, *args) as server:
            _touch(batch, name, "2")
            _run_to_pruned(cp_with_jobs, server, tenant, run, after)
            restarted = server.get(f"/api/v1/jobs/{job_id}")
            assert restarted["events"] == first["events"]
            assert {k: restarted[k] for k in ("status", "pruned", "finished_t", "started_t", "message")} == {
                k: first[k] for k in ("status", "pruned", "finished_t", "started_t", "message")}
            assert [j["id"] for j in _listed(server, tenant)["jobs"]] == []
            assert _job(batch, name)["metadata"]["labels"]["touched"] == "2"  # the object is still there
    finally:
        _gc_jobs(kube_client, tenant)


def test_the_runtime_keeps_a_tombstone_of_a_pruned_job_only_while_its_object_exists(
        cp_with_jobs: Any, kube_client: Any, run: str, fleet: list[Any]) -> None:
    """In process: after :meth:`KubeRuntime.forget` a finished job holds no record (``recs``), one ``by_uid``
    entry and a tombstone while its Job object exists; the object changing does not bring it back; its deletion
    takes both. A job cancelled while its Job object was being created is held as cancelled, prunable, and
    leaves nothing once its Job is deleted."""
    from kubernetes import client

    from gpucluster.jobs import Job, job_spec
    from gpucluster.kubernetes import KubeRuntime

    batch = client.BatchV1Api(kube_client)
    tenant = f"m-{run}"
    name = f"tomb-{run}"
    rt = KubeRuntime(cp_with_jobs.kubeconfig, namespace=NS, identity=f"test-{run}")
    tick = ticking(rt)

    def mine() -> tuple[set[str], set[str]]:
        """(the job ids of this test in ``recs``, in ``by_uid``)."""
        ids = {j.id for j in rt.jobs() if j.tenant == tenant} | set(rt._pruned)
        return ({k for k in rt.recs if k in ids}, {j for j in rt.by_uid.values() if j in ids})

    def until(what: Callable[[], Any], why: str) -> Any:
        return wait_until(tick(what), 60, why)

    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(name, tenant, run, pods=1, gpus=1, env={"FAKE_RUN_S": "1"}))
        job = until(lambda: next((j for j in rt.jobs() if j.name == name and j.status == "succeeded"), None),
                    "the Job to complete")
        uid = _job(batch, name)["metadata"]["uid"]
        assert rt.recs[job.id].uid == uid and rt.by_uid[uid] == job.id
        rt.take_discovered()  # it was found in the cluster when it was first read
        assert rt.forget(job.id)
        assert rt.job(job.id) is None
        assert job.id not in rt.recs and rt.by_uid[uid] == job.id and job.id in rt._pruned
        _touch(batch, name, "1")
        until(lambda: (rt._job_objs.get(uid) or {}).get("metadata", {}).get("labels", {}).get("touched") == "1",
              "the informer to show the changed Job")
        rt.advance(rt.now + 0.25)  # read it
        assert rt.job(job.id) is None and job.id not in rt.recs  # not a new job
        assert all(j.id != job.id for j in rt.take_discovered())
        batch.delete_namespaced_job(name, NS, propagation_policy="Background")
        until(lambda: uid not in rt.by_uid, "the deletion to be read")
        assert job.id not in rt._pruned and mine() == (set(), set())

        # cancelled while its Job object is being created: held cancelled, prunable, nothing left after
        spec = job_spec(f"c-{run}", name=f"cancelled-{run}", tenant=tenant, replicas=1,
                        resources={"nvidia.com/gpu": 1}, duration_s=None, submit_s=rt.now,
                        node_selector={"gpucluster.io/run": run}, registry=rt.registry)
        cancelled = Job(spec)
        rt.validate(cancelled)
        rt.submit(cancelled)
        assert rt.cancel(cancelled.id) is cancelled and cancelled.status == "cancelled"
        assert rt.job(cancelled.id) is cancelled  # held as an ended job
        assert rt.forget(cancelled.id)
        assert rt.job(cancelled.id) is None

        def gone() -> bool:
            jobs = json.loads(batch.list_namespaced_job(NS, label_selector=f"{QUEUE_LABEL}={tenant}",
                                                        _preload_content=False).data)["items"]
            return not jobs and mine() == (set(), set()) and cancelled.id not in rt._pruned
        until(gone, "the cancelled job's Job object created, deleted and read")
        assert all(j.id != cancelled.id for j in rt.jobs())
    finally:
        rt.close()
        _gc_jobs(kube_client, tenant)


def test_a_pruned_pod_group_job_is_a_tombstone_until_its_pods_are_gone(
        cp_with_jobs: Any, kube_client: Any, run: str, fleet: list[Any]) -> None:
    """In process: a pod group (our gang annotations, 2 bare pods) that succeeds is prunable; while its ended pods
    are still there its pods changing does not make it a job again; deleting them takes the tombstone."""
    from kubernetes import client
    from test_k8s_pod_group_queue import _member

    from gpucluster.kubernetes import KubeRuntime
    from gpucluster.kubernetes.podgroups import group_uid
    from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION

    core = client.CoreV1Api(kube_client)
    tenant = f"g-{run}"
    gang = f"grp-{run}"
    rt = KubeRuntime(cp_with_jobs.kubeconfig, namespace=NS, identity=f"test-{run}")
    tick = ticking(rt)
    uid = group_uid(NS, gang)
    names = [f"{gang}-{i}" for i in range(2)]
    try:
        for name in names:
            core.create_namespaced_pod(NS, _member(name, run, gpus=1, run_s=1, labels={QUEUE_LABEL: tenant},
                                                   annotations={GANG_ANNOTATION: gang, GANG_MIN_ANNOTATION: "2"}))
        job = wait_until(tick(lambda: next((j for j in rt.jobs() if j.tenant == tenant and j.status == "succeeded"),
                                           None)), 90, "the pod group to succeed")
        assert job.id.startswith("g-") and rt.by_uid[uid] == job.id
        rt.take_discovered()
        assert rt.forget(job.id)
        assert rt.job(job.id) is None and job.id not in rt.recs and rt.by_uid[uid] == job.id
        assert job.id in rt._pruned
        for name in names:
            core.patch_namespaced_pod(name, NS, {"metadata": {"labels": {"touched": "1"}}})
        wait_until(tick(lambda: all((rt._pods.get(f"{NS}/{n}") is not None
                                     and ((rt._pods[f"{NS}/{n}"].obj.get("metadata") or {}).get("labels") or {})
                                     .get("touched") == "1") for n in names)), 30,
                   "the informer to show the changed pods")
        rt.advance(rt.now + 0.25)  # read them
        assert all(j.tenant != tenant for j in rt.jobs())  # not a job again
        assert all(j.tenant != tenant for j in rt.take_discovered())
        for name in names:
            core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
        wait_until(tick(lambda: uid not in rt.by_uid), 30, "the group's pods gone and read")
        assert job.id not in rt._pruned and job.id not in rt.recs
    finally:
        rt.close()
        for name in names:
            with contextlib.suppress(Exception):
                core.delete_namespaced_pod(name, NS, grace_period_seconds=0)
