"""A PyTorchJob (``kubeflow.org/v1``, the Kubeflow training operator's) read as one gang of the queue (issue 26),
without a server."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes.workloads import (
    QUEUE_LABEL,
    TRAINING_REPLICA_INDEX_LABEL,
    TRAINING_REPLICA_TYPE_LABEL,
    native_id,
    parse_queue_job,
    pytorchjob_as_job,
    pytorchjob_owner,
    replica_slot,
)
from tests.kubernetes.helpers import registry

UID = "1a2b3c4d-4e5f-6789-abcd-ef0123456789"


def template(gpus: int, scheduler: str = "gpucluster") -> dict[str, Any]:
    return {"spec": {"schedulerName": scheduler, "containers": [
        {"name": "pytorch", "image": "x:1", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}


def pytorchjob(master: int | None = 1, workers: int | None = 3, *, gpus: int = 2, worker_gpus: int | None = None,
               suspend: bool = True, tenant: str = "nlp") -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if master is not None:
        specs["Master"] = {"replicas": master, "restartPolicy": "OnFailure", "template": template(gpus)}
    if workers is not None:
        specs["Worker"] = {"replicas": workers, "restartPolicy": "OnFailure",
                           "template": template(gpus if worker_gpus is None else worker_gpus)}
    return {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "bert", "namespace": "research", "uid": UID, "labels": {QUEUE_LABEL: tenant},
                     "creationTimestamp": "2026-12-04T10:00:00Z"},
        "spec": {"runPolicy": {"suspend": suspend}, "pytorchReplicaSpecs": specs},
    }


def parsed(obj: dict[str, Any]) -> Any:
    return parse_queue_job(pytorchjob_as_job(obj), registry(), "gpucluster")


def test_master_and_workers_are_one_gang() -> None:
    q = parsed(pytorchjob(1, 3, gpus=2))
    assert q.error == "" and q.spec is not None
    assert (q.kind, q.tenant, q.job_id, q.suspended, q.key) == ("PyTorchJob", "nlp", native_id(UID), True,
                                                               "research/bert")
    assert q.spec.num_tasks == 4 and q.spec.num_gpus == 8
    assert not parsed(pytorchjob(suspend=False)).suspended


def test_its_succeeded_and_failed_conditions_end_it() -> None:
    obj = pytorchjob(suspend=False)
    obj["status"] = {"conditions": [{"type": "Running", "status": "True"}]}
    assert parsed(obj).finished == ""
    obj["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "PyTorchJobSucceeded"}]}
    assert parsed(obj).finished == "Complete"
    obj["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "worker 2 exited 1"}]}
    q = parsed(obj)
    assert q.finished == "Failed" and "worker 2 exited 1" in q.finish_message


@pytest.mark.parametrize(("change", "where", "why"), [
    (lambda o: o["spec"].pop("pytorchReplicaSpecs"), "spec.pytorchReplicaSpecs", "a Master or Worker"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"].update(Launcher={"replicas": 1}), "spec.pytorchReplicaSpecs.Launcher",
     "not a replica type"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2), "spec.pytorchReplicaSpecs.Master.replicas",
     "one Master"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas="many"),
     "spec.pytorchReplicaSpecs.Worker.replicas", "must be an integer"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=-1),
     "spec.pytorchReplicaSpecs.Worker.replicas", "must not be negative"),
    (lambda o: o["spec"]["runPolicy"].update(schedulingPolicy={"minAvailable": 5}),
     "spec.runPolicy.schedulingPolicy.minAvailable", "within 1..4"),
    (lambda o: o["spec"]["runPolicy"].update(schedulingPolicy={"queue": "other"}),
     "spec.runPolicy.schedulingPolicy.queue", "is not its gpucluster.io/queue label"),
    (lambda o: o["spec"].update(elasticPolicy={"minReplicas": 1}), "spec.elasticPolicy", "elastic"),
    (lambda o: o["spec"]["pytorchReplicaSpecs"]["Worker"].update(template=template(2, "volcano")),
     "spec.pytorchReplicaSpecs.Worker.template", "asks for other resources (or scheduler, or nodes)"),
])
def test_what_cannot_be_one_gang_is_refused_naming_the_field(change: Any, where: str, why: str) -> None:
    obj = pytorchjob()
    change(obj)
    q = parsed(obj)
    assert q.spec is None
    assert q.error.startswith(f"PyTorchJob research/bert: {where}: ") and why in q.error


def test_a_master_and_workers_of_different_gpus_are_refused_naming_both() -> None:
    q = parsed(pytorchjob(1, 2, gpus=0, worker_gpus=2))
    assert q.spec is None
    assert q.error == ("PyTorchJob research/bert: spec.pytorchReplicaSpecs.Worker.template: asks for other "
                       "resources (or scheduler, or nodes) than spec.pytorchReplicaSpecs.Master.template; the queue "
                       "admits a PyTorchJob whose Master and Workers are alike")


def test_another_scheduler_is_refused_naming_the_replica_template() -> None:
    obj = pytorchjob(None, 2)
    obj["spec"]["pytorchReplicaSpecs"]["Worker"]["template"] = template(1, "default-scheduler")
    q = parsed(obj)
    assert q.spec is None and q.error.startswith(
        "PyTorchJob research/bert: spec.pytorchReplicaSpecs.Worker.template.spec.schedulerName: must be 'gpucluster'")


def test_the_queue_may_repeat_the_label_and_min_available_may_be_less() -> None:
    obj = pytorchjob(1, 3)
    obj["spec"]["runPolicy"]["schedulingPolicy"] = {"queue": "nlp", "minAvailable": 2}
    q = parsed(obj)
    assert q.error == "" and q.spec is not None and q.spec.num_tasks == 4  # all replicas are admitted together


@settings(max_examples=50, deadline=None)
@given(master=st.sampled_from([None, 0, 1]), workers=st.one_of(st.none(), st.integers(0, 12)),
       gpus=st.integers(1, 8))
def test_the_gang_is_master_plus_workers_and_each_pod_has_its_own_slot(master: int | None, workers: int | None,
                                                                       gpus: int) -> None:
    obj = pytorchjob(master, workers, gpus=gpus)
    job = pytorchjob_as_job(obj)
    q = parse_queue_job(copy.deepcopy(job), registry(), "gpucluster")
    total = (master or 0) + (0 if workers is None else workers)
    if master is None and workers is None:
        assert q.spec is None
        return
    if total == 0:
        assert q.spec is None and "no replicas" in q.error
        return
    assert q.spec is not None and q.spec.num_tasks == total and q.spec.num_gpus == total * gpus
    slots = []
    for rtype, n in (("master", master or 0), ("worker", workers or 0)):
        for i in range(n):
            pod = {"metadata": {"labels": {TRAINING_REPLICA_TYPE_LABEL: rtype, TRAINING_REPLICA_INDEX_LABEL: str(i)}}}
            slots.append(replica_slot(pod, job["offsets"]))
    assert sorted(slots) == list(range(total))  # every pod its own slot, the Master's first
    if master:
        assert slots[0] == 0


def test_a_pod_is_the_pytorchjobs_by_its_controller_owner_reference() -> None:
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "bert", "uid": UID, "controller": True}
    assert pytorchjob_owner({"metadata": {"ownerReferences": [ref]}}) == UID
    assert pytorchjob_owner({"metadata": {"ownerReferences": [{**ref, "controller": False}]}}) == ""
    assert pytorchjob_owner({"metadata": {"ownerReferences": [{**ref, "kind": "JobSet"}]}}) == ""
    assert pytorchjob_owner({"metadata": {}}) == ""
    bad = {"metadata": {"labels": {TRAINING_REPLICA_TYPE_LABEL: "worker", TRAINING_REPLICA_INDEX_LABEL: "x"}}}
    assert replica_slot(bad, {"worker": 1}) is None
