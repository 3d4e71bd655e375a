"""Jobs as Kubernetes sees them (issue 26), without a server: the batch/v1 Job made for a job of the API, what a
Job in the queue says (ours or a user's), the admission record on a Job, and the cluster view's reservations
(a placement held for an admitted Job whatever pods come and go, rebuilt after a restart)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import job_spec, task_pods
from gpucluster.kubernetes.cluster import RESERVATION_ANNOTATION, KubeCluster
from gpucluster.kubernetes.convert import decision_annotations
from gpucluster.kubernetes.workloads import (
    ADMISSION_ANNOTATION,
    QUEUE_LABEL,
    Admission,
    admission_of,
    job_manifest,
    parse_queue_job,
    pod_view,
    slot_allocation,
)
from gpucluster.model import AllocationError
from tests.kubernetes.helpers import node_obj, pod_obj, registry

FULL_WORKLOAD = {
    "image": "registry.example/ml/train:v1",
    "command": ["python", "-m", "train"],
    "args": ["--epochs", "3"],
    "env": [{"name": "MODE", "value": "fast"}, {"name": "TOKEN", "secret": "hf", "key": "token"},
            {"name": "LR", "config_map": "hp", "key": "lr", "optional": True}],
    "env_from": [{"config_map": "common", "prefix": "C_"}, {"secret": "creds"}],
    "working_dir": "/workspace",
    "volumes": [{"mount_path": "/data", "pvc": "datasets", "read_only": True},
                {"mount_path": "/cfg", "config_map": "cfg"}, {"mount_path": "/ssh", "secret": "key", "name": "ssh"}],
    "service_account": "trainer",
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "ml", "effect": "NoExecute", "toleration_seconds": 30}],
}


def _spec(workload: dict[str, Any] | None = None, replicas: int = 4, **kw: Any) -> Any:
    return job_spec("j-abc", name="train", tenant="ml", replicas=replicas,
                    resources={"nvidia.com/gpu": 2, "cpu": "4"}, duration_s=600, submit_s=0.0, priority=20,
                    workload=workload, registry=registry(), **kw)


def _as_server_sends(manifest: dict[str, Any], uid: str = "1234-5678-9abc-def0") -> dict[str, Any]:
    obj = copy.deepcopy(manifest)
    obj["metadata"].update(uid=uid, resourceVersion="7", creationTimestamp="2026-01-01T00:00:00Z")
    return obj


def test_the_job_of_an_api_job_is_indexed_suspended_and_runs_its_workload() -> None:
    spec = _spec(FULL_WORKLOAD, gpu_type="A100", node_selector={"pool": "train"})
    job = job_manifest(spec, "team", "gpucluster", registry=registry())
    assert (job["apiVersion"], job["kind"], job["metadata"]["name"], job["metadata"]["namespace"]) == (
        "batch/v1", "Job", "j-abc", "team")
    s = job["spec"]
    assert (s["suspend"], s["completionMode"], s["parallelism"], s["completions"], s["backoffLimit"]) == (
        True, "Indexed", 4, 4, 0)
    assert job["metadata"]["labels"][QUEUE_LABEL] == "ml"
    pod = s["template"]["spec"]
    assert pod["schedulerName"] == "gpucluster" and pod["restartPolicy"] == "Never"
    assert pod["serviceAccountName"] == "trainer" and pod["nodeSelector"] == {"pool": "train"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                  {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoExecute",
                                   "tolerationSeconds": 30}]
    assert s["template"]["metadata"]["annotations"]["nvidia.com/use-gputype"] == "A100"
    [c] = pod["containers"]
    assert (c["image"], c["command"], c["args"], c["workingDir"]) == (
        "registry.example/ml/train:v1", ["python", "-m", "train"], ["--epochs", "3"], "/workspace")
    assert c["resources"]["limits"] == {"nvidia.com/gpu": "2", "cpu": "4"}
    assert c["env"] == [{"name": "MODE", "value": "fast"},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
                        {"name": "LR", "valueFrom": {"configMapKeyRef": {"name": "hp", "key": "lr",
                                                                         "optional": True}}}]
    assert c["envFrom"] == [{"configMapRef": {"name": "common"}, "prefix": "C_"}, {"secretRef": {"name": "creds"}}]
    assert pod["volumes"] == [{"name": "vol-0", "persistentVolumeClaim": {"claimName": "datasets", "readOnly": True}},
                              {"name": "vol-1", "configMap": {"name": "cfg"}},
                              {"name": "ssh", "secret": {"secretName": "key"}}]
    assert c["volumeMounts"] == [{"name": "vol-0", "mountPath": "/data", "readOnly": True},
                                 {"name": "vol-1", "mountPath": "/cfg"}, {"name": "ssh", "mountPath": "/ssh"}]
    # any replica rebuilds the very job from the Job
    q = parse_queue_job(_as_server_sends(job), registry(), "gpucluster")
    assert q.ours and q.job_id == "j-abc" and q.error == "" and q.suspended and q.admission is None
    assert q.spec is not None
    assert q.spec.workload == spec.workload and q.spec.num_tasks == 4 and q.spec.priority == 20
    assert q.spec.shape == spec.shape and q.spec.gpu_type == "A100"


def test_without_an_image_the_pod_is_a_placeholder_sleeping_the_duration() -> None:
    [c] = job_manifest(_spec(), "default", "gpucluster")["spec"]["template"]["spec"]["containers"]
    assert c["image"] == "busybox:1.36" and c["command"] == ["sleep", "600"]


def _native(**over: Any) -> dict[str, Any]:
    job: dict[str, Any] = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "bert", "namespace": "research", "uid": "aaaa-bbbb-cccc-dddd-eeee",
                     "resourceVersion": "10", "creationTimestamp": "2026-01-01T00:00:00Z",
                     "labels": {QUEUE_LABEL: "nlp"}, "annotations": {"gpucluster.io/priority": "5"}},
        "spec": {"suspend": True, "parallelism": 4, "completions": 4, "completionMode": "Indexed",
                 "template": {"metadata": {"annotations": {"nvidia.com/use-gputype": "A100"}},
                              "spec": {"schedulerName": "gpucluster", "restartPolicy": "Never",
                                       "nodeSelector": {"pool": "a"},
                                       "containers": [{"name": "t", "image": "pytorch:2", "command": ["python"],
                                                       "resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}},
        "status": {},
    }
    for path, value in over.items():
        node = job
        *head, last = path.split(".")
        for part in head:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(last, None)
        else:
            node[last] = value
    return job


def test_a_kubectl_job_in_the_queue_is_a_gang_of_its_parallelism() -> None:
    q = parse_queue_job(_native(), registry(), "gpucluster")
    assert q.error == "" and not q.ours and q.job_id == "k-aaaabbbbcccc"
    assert (q.tenant, q.name, q.namespace, q.suspended) == ("nlp", "bert", "research", True)
    spec = q.spec
    assert spec is not None
    assert (spec.num_tasks, spec.task_gpus, spec.num_gpus, spec.priority, spec.gpu_type) == (4, 2, 8, 5, "A100")
    assert spec.node_selector == {"pool": "a"} and spec.workload.image == "pytorch:2"
    assert spec.duration_s == float("inf") and spec.preemptible
    pods = task_pods(spec, 1, "default")
    assert len(pods) == 4 and all(p.gang == pods[0].gang for p in pods) and pods[0].gang_min_member == 4
    assert all(p.constraints.per_vendor["nvidia"].use_types == ("A100",) for p in pods)
    # completions below parallelism: the gang is what can run at once
    assert parse_queue_job(_native(**{"spec.completions": 2}), registry(), "gpucluster").spec.num_tasks == 2  # type: ignore[union-attr]
    assert parse_queue_job(_native(**{"spec.parallelism": None}), registry(), "gpucluster").spec.num_tasks == 1  # type: ignore[union-attr]


@pytest.mark.parametrize(("over", "where"), [
    ({"spec.template.spec.schedulerName": None}, "spec.template.spec.schedulerName: must be 'gpucluster'"),
    ({"spec.template.spec.schedulerName": "volcano"}, "got 'volcano'"),
    ({"metadata.labels": {QUEUE_LABEL: "Bad_Tenant"}}, f"metadata.labels[{QUEUE_LABEL}]"),
    ({"spec.parallelism": 0}, "spec.parallelism"),
    ({"spec.parallelism": 100000, "spec.completions": None}, "spec.parallelism"),
    ({"metadata.annotations": {"gpucluster.io/priority": "high"}}, "gpucluster.io/priority]: not a number"),
    ({"metadata.annotations": {"gpucluster.io/priority": "5000"}}, "must be within 0..1000"),
    ({"metadata.annotations": {"gpucluster.io/duration-s": "-1"}}, "gpucluster.io/duration-s"),
    ({"spec.template.spec.containers": [{"name": "t", "resources": {"limits": {"nvidia.com/gpu": "lots"}}}]},
     "spec.template"),
    ({"metadata.annotations": {ADMISSION_ANNOTATION: "{not json"}}, "not an admission record"),
])
def test_a_job_that_cannot_be_queued_says_where_and_why(over: dict[str, Any], where: str) -> None:
    q = parse_queue_job(_native(**over), registry(), "gpucluster")
    assert q.spec is None and where in q.error and "Job research/bert" in q.error, q.error


def test_finished_and_deleting_jobs_are_read_from_their_status() -> None:
    done = parse_queue_job(_native(**{"status.conditions": [{"type": "Complete", "status": "True"}],
                                      "status.succeeded": 4}), registry(), "gpucluster")
    assert done.finished == "Complete" and done.succeeded == 4
    failed = parse_queue_job(_native(**{"status.conditions": [
        {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": "Job has reached the "
                                                                                          "specified backoff limit"}]}),
        registry(), "gpucluster")
    assert failed.finished == "Failed" and failed.finish_message.startswith("BackoffLimitExceeded: Job has")
    assert parse_queue_job(_native(**{"metadata.deletionTimestamp": "2026-01-01T00:00:01Z"}), registry(),
                           "gpucluster").deleting


def _cluster(nodes: int = 2, gpus: int = 4) -> KubeCluster:
    c = KubeCluster(registry())
    c.set_nodes([node_obj(f"n{i}", gpus=gpus) for i in range(nodes)])
    return c


def test_an_admission_written_on_a_job_rebuilds_the_same_reservations() -> None:
    c = _cluster()
    spec = _spec(replicas=3)
    pods = task_pods(spec, 1, "default")
    group = c.decide_group(pods)
    assert group.ok
    allocs = [d.allocation for d in group.decisions if d.allocation is not None]
    adm = admission_of(allocs, registry(), admission_id="x1", by="cp-a", attempt=1, at=100.0)
    back = Admission.parse(adm.to_json(), "here")
    assert back == adm
    other = _cluster()  # another replica (or this one after a restart) rebuilds the allocations
    rebuilt = [slot_allocation(p, s, other.nodes[s.node].spec, registry()) for p, s in zip(pods, back.slots, strict=True)]
    assert [(a.pod_key, a.node, tuple(a.grants)) for a in rebuilt] == [(a.pod_key, a.node, tuple(a.grants)) for a in allocs]
    other.reserve(rebuilt)
    assert other.state.totals() == c.state.totals()


def test_a_reservation_holds_through_pods_coming_and_going() -> None:
    c = _cluster(nodes=1, gpus=4)
    pods = task_pods(_spec(replicas=2), 1, "default")
    group = c.decide_group(pods)
    allocs = [d.allocation for d in group.decisions if d.allocation is not None]
    c.reserve(allocs)
    busy = int((c.state.dev_core_used > 0).sum())
    assert busy == 4 and c.scheduler.cache.is_assumed(allocs[0].pod_key) is False
    # the Job controller's pod is bound into slot 0: aliased, never accounted a second time
    ann = {**decision_annotations(allocs[0], registry(), 0.0), RESERVATION_ANNOTATION: allocs[0].pod_key}
    real = pod_obj("bert-0-abcde", count=2, mem=81920, cores=100, node="n0", annotations=ann, phase="Running")
    c.apply_pod(real)
    assert c.aliases == {"default/bert-0-abcde": allocs[0].pod_key}
    assert int((c.state.dev_core_used > 0).sum()) == 4 and "default/bert-0-abcde" not in c.state.allocations
    # it fails: the slot stays held for the pod that replaces it
    c.apply_pod({**real, "status": {"phase": "Failed"}})
    assert c.aliases == {} and int((c.state.dev_core_used > 0).sum()) == 4
    # a full resync (informer relist) keeps reservations, which are no pods
    c.set_pods([])
    assert set(c.reserved) == {a.pod_key for a in allocs} and int((c.state.dev_core_used > 0).sum()) == 4
    # a node update that rebuilds the state keeps them too
    c.apply_node(node_obj("n0", gpus=4, model="A100-SXM4-80GB"))
    assert int((c.state.dev_core_used > 0).sum()) == 4
    # unreserve frees at once; the pods still bound into it are ignored until they are gone
    c.apply_pod({**real, "status": {"phase": "Running"}, "metadata": {**real["metadata"], "name": "bert-1-xyz"}})
    c.unreserve([a.pod_key for a in allocs])
    assert int((c.state.dev_core_used > 0).sum()) == 0 and c.reserved == {}
    c.apply_pod({**real, "metadata": {**real["metadata"], "name": "bert-1-xyz"}})
    assert int((c.state.dev_core_used > 0).sum()) == 0


def test_after_a_restart_the_reservation_takes_over_its_bound_pods() -> None:
    """The informer lists the bound pods first (accounted from their annotations), the Jobs' admissions later:
    the reservation takes their devices over instead of holding them twice."""
    c = _cluster(nodes=1, gpus=4)
    pods = task_pods(_spec(replicas=2), 1, "default")
    allocs = [d.allocation for d in c.decide_group(pods).decisions if d.allocation is not None]
    c.scheduler.cache.forget(allocs[0].pod_key)
    c.scheduler.cache.forget(allocs[1].pod_key)
    ann = {**decision_annotations(allocs[0], registry(), 0.0), RESERVATION_ANNOTATION: allocs[0].pod_key}
    c.apply_pod(pod_obj("bert-0-abcde", count=2, mem=81920, cores=100, node="n0", annotations=ann,
                        phase="Running"))
    assert int((c.state.dev_core_used > 0).sum()) == 2 and "default/bert-0-abcde" in c.state.allocations
    c.reserve(allocs)
    assert int((c.state.dev_core_used > 0).sum()) == 4
    assert c.aliases == {"default/bert-0-abcde": allocs[0].pod_key}
    assert "default/bert-0-abcde" not in c.state.allocations


def test_a_reservation_that_does_not_fit_holds_nothing() -> None:
    c = _cluster(nodes=1, gpus=4)
    pods = task_pods(_spec(replicas=2), 1, "default")
    allocs = [d.allocation for d in c.decide_group(pods).decisions if d.allocation is not None]
    c.reserve(allocs)
    again = task_pods(_spec(replicas=2), 2, "default")
    clash = [a.__class__(**{**{f: getattr(a, f) for f in a.__dataclass_fields__}, "pod_key": p.key})
             for a, p in zip(allocs, again, strict=True)]
    with pytest.raises(AllocationError):
        c.reserve(clash)
    assert set(c.reserved) == {a.pod_key for a in allocs}


def test_a_reservation_that_does_not_fit_gives_back_the_bound_pods_it_took_over() -> None:
    """After a restart a pod bound into a slot is taken over by the slot's reservation; when the slot does not fit
    (another pod holds its devices now) the pod is a bound pod again, accounted or reported, not an alias of a
    reservation that was never made."""
    c = _cluster(nodes=1, gpus=2)
    [task] = task_pods(_spec(replicas=1), 1, "default")
    [alloc] = [d.allocation for d in c.decide_group([task]).decisions if d.allocation is not None]
    c.scheduler.cache.forget(task.key)
    ann = decision_annotations(alloc, registry(), 0.0)
    c.apply_pod(pod_obj("aaa-outside", count=2, mem=81920, cores=100, node="n0", annotations=ann, phase="Running"))
    mine = pod_obj("bert-0-abcde", count=2, mem=81920, cores=100, node="n0",
                   annotations={**ann, RESERVATION_ANNOTATION: task.key}, phase="Running")
    c.apply_pod(mine)
    assert "default/bert-0-abcde" in c.unaccounted  # its devices are held by the other pod
    with pytest.raises(AllocationError):
        c.reserve([alloc])
    assert c.reserved == {} and c.aliases == {}
    assert "default/bert-0-abcde" in c.bound and "default/bert-0-abcde" in c.unaccounted
    c.delete_pod("default/aaa-outside")
    c.reserve([alloc])  # the other pod is gone: the slot takes its pod over
    assert c.aliases == {"default/bert-0-abcde": task.key} and "default/bert-0-abcde" not in c.unaccounted


def test_pod_view_reads_exit_code_restarts_and_index() -> None:
    obj = pod_obj("bert-2-zz", node="n0", phase="Failed")
    obj["metadata"]["labels"] = {"batch.kubernetes.io/controller-uid": "u1"}
    obj["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] = "2"
    obj["status"]["containerStatuses"] = [{"name": "t", "restartCount": 1, "state": {"terminated": {
        "exitCode": 3, "reason": "Error", "message": "CUDA error"}}}]
    v = pod_view(obj, "default/bert-2-zz")
    assert (v.job_uid, v.index, v.restarts, v.exit_code) == ("u1", 2, 1, 3)
    assert v.reason == "container t: Error (exit code 3): CUDA error" and not v.live


@settings(max_examples=40, deadline=None)
@given(replicas=st.integers(1, 6), gpus=st.sampled_from([1, 2, 4]), nodes=st.integers(1, 4))
def test_property_an_admission_round_trips_through_the_job(replicas: int, gpus: int, nodes: int) -> None:
    """Whatever the engine decides, the admission written on the Job reads back to the same devices on any
    replica (what failover and restarts rely on)."""
    c = _cluster(nodes=nodes, gpus=4)
    spec = job_spec("j-p", name="p", tenant="t", replicas=replicas, resources={"nvidia.com/gpu": gpus},
                    duration_s=60, submit_s=0.0, registry=registry())
    pods = task_pods(spec, 3, "default")
    group = c.decide_group(pods)
    if not group.ok:
        assert replicas * gpus > nodes * 4 or (4 // gpus) * nodes < replicas
        return
    allocs = [d.allocation for d in group.decisions if d.allocation is not None]
    adm = admission_of(allocs, registry(), admission_id="a", by="x", attempt=3, at=1.0)
    job = json.loads(json.dumps({"metadata": {"annotations": {ADMISSION_ANNOTATION: adm.to_json()}}}))
    back = Admission.parse(job["metadata"]["annotations"][ADMISSION_ANNOTATION], "here")
    other = _cluster(nodes=nodes, gpus=4)
    rebuilt = [slot_allocation(p, s, other.nodes[s.node].spec, registry()) for p, s in zip(pods, back.slots, strict=True)]
    other.reserve(rebuilt)
    assert [tuple(a.grants) for a in rebuilt] == [tuple(a.grants) for a in allocs]
    assert (other.state.dev_core_used == c.state.dev_core_used).all()


def test_claim_tenant_is_the_queue_label_then_the_tenant_annotation_then_the_namespace() -> None:
    from gpucluster.kubernetes.workloads import QUEUE_LABEL, claim_tenant

    claims = {"resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]}
    meta = {"name": "p", "namespace": "research", "uid": "u1"}
    assert claim_tenant({"metadata": meta, "spec": claims}) == ("u1", "research")
    assert claim_tenant({"metadata": {**meta, "annotations": {"gpucluster.io/tenant": "cv"}},
                         "spec": claims}) == ("u1", "cv")
    assert claim_tenant({"metadata": {**meta, "labels": {QUEUE_LABEL: "nlp"},
                                      "annotations": {"gpucluster.io/tenant": "cv"}}, "spec": claims}) == ("u1", "nlp")
    # a pod whose extended resources kube-scheduler serves from DRA has its claim in its status
    assert claim_tenant({"metadata": meta, "spec": {}, "status": {"extendedResourceClaimStatus": {
        "resourceClaimName": "p-extended-resources-x"}}}) == ("u1", "research")
    assert claim_tenant({"metadata": meta, "spec": {"containers": [{"name": "c"}]}}) is None
