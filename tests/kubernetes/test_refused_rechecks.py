"""Refused workloads are re-checked whether or not the retention policy pruned them, and a pod group's tenant label
is re-checked as a Job's is, without a server: the informer is a stub (``conftest.new_runtime``), the
test feeds the watch events, the runtime follows (no writes). The same on a real kube-apiserver:
``tests/integration/test_k8s_rechecks.py``.

* a Job refused for its namespace and pruned (:meth:`KubeRuntime.forget`: a tombstone) is read again as a new one
  when a binding change lets it in, and when its queue label changes (refused again for a bad name: a tombstone
  again at once, nothing listed or found; a tenant bound nowhere: queued under it);
* a pod group refused for its namespace whose members' queue label changes is read again as a new one (queued
  under the new tenant), in memory and pruned; a queued one relabelled keeps its tenant.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

from gpucluster.jobs import JobState
from gpucluster.kubernetes import backend
from gpucluster.kubernetes.podgroups import group_uid
from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import QUEUE_LABEL, native_id
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION
from tests.kubernetes.helpers import node_obj, pod_obj
from tests.kubernetes.test_retention_records import _job_obj

Runtime = Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]


def _ns(name: str, tenant: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {NAMESPACE_TENANT_LABEL: tenant} if tenant else {}}}


def _job(name: str, uid: str, rv: int, namespace: str, tenant: str) -> dict[str, Any]:
    obj = _job_obj(name, uid, rv)
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["labels"][QUEUE_LABEL] = tenant
    return obj


def _tick(rt: backend.KubeRuntime) -> None:
    rt.advance(rt.now + 1.0)


def test_a_pruned_job_refused_for_its_namespace_is_let_in_by_a_binding_change(new_runtime: Runtime) -> None:
    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1")])
        rt._on_namespace_list([_ns("ns-a", "team-a")])
        obj = _job("intruder", "u-1", 1, "ns-b", "team-a")
        rt._on_job("ADDED", obj)
        _tick(rt)
        job_id = native_id("u-1")
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.FAILED and job.tenant == "default"
        assert rt.forget(job_id) and job_id in rt._pruned and job_id in rt._refused_tombs
        rt.take_discovered()
        rt._on_job("MODIFIED", obj)  # seen again as it is: still a tombstone
        _tick(rt)
        assert rt.job(job_id) is None and not rt.take_discovered()

        rt._on_namespace("DELETED", _ns("ns-a", "team-a"))  # team-a bound nowhere now: let in
        _tick(rt)
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED and job.tenant == "team-a", job.message
        assert job_id not in rt._pruned and job_id not in rt._refused_tombs and rt.by_uid["u-1"] == job_id
        assert [j.id for j in rt.take_discovered()] == [job_id]


def test_a_pruned_refused_job_whose_label_changes_is_read_again_as_a_new_one(new_runtime: Runtime) -> None:
    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1")])
        rt._on_namespace_list([_ns("ns-a", "team-a")])
        rt._on_job("ADDED", _job("fixed", "u-2", 1, "ns-b", "team-a"))
        _tick(rt)
        job_id = native_id("u-2")
        assert rt.forget(job_id)
        rt.take_discovered()
        # a bad name: refused again, and a tombstone again at once (not listed, not found)
        rt._on_job("MODIFIED", _job("fixed", "u-2", 2, "ns-b", "Not_A_Tenant"))
        _tick(rt)
        _tick(rt)
        assert rt.job(job_id) is None and job_id in rt._pruned and rt._refused_tombs[job_id].label == "Not_A_Tenant"
        assert not rt.take_discovered() and not [e for e in rt._take_events() if e.job_id == job_id]
        # a binding change does not let in one refused for a bad name
        rt._on_namespace("DELETED", _ns("ns-a", "team-a"))
        _tick(rt)
        assert rt.job(job_id) is None
        # a tenant its namespace may use: queued under it
        rt._on_job("MODIFIED", _job("fixed", "u-2", 3, "ns-b", "team-c"))
        _tick(rt)
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED and job.tenant == "team-c"
        assert job_id not in rt._pruned and [j.id for j in rt.take_discovered()] == [job_id]


def _member(name: str, uid: str, tenant: str, namespace: str = "ns-b") -> dict[str, Any]:
    obj = pod_obj(name, count=1, mem=20000, cores=50, namespace=namespace,
                  annotations={GANG_ANNOTATION: "grp", GANG_MIN_ANNOTATION: "2"})
    obj["metadata"]["uid"] = uid
    obj["metadata"]["labels"] = {QUEUE_LABEL: tenant}
    obj["metadata"]["creationTimestamp"] = "2026-12-05T20:00:00Z"
    return obj


def _group(rt: backend.KubeRuntime, tenant: str, namespace: str = "ns-b") -> None:
    for i in range(2):
        rt._on_pod("MODIFIED", _member(f"grp-{i}", f"p-{i}", tenant, namespace))


def test_a_refused_pod_group_whose_label_changes_is_read_again_as_a_new_one(new_runtime: Runtime) -> None:
    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1")])
        rt._on_namespace_list([_ns("ns-a", "team-a")])
        _group(rt, "team-a")
        _tick(rt)
        uid = group_uid("ns-b", "grp")
        job_id = rt.by_uid[uid]
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.FAILED and "may not use tenant team-a" in job.message
        assert rt.recs[job_id].label == "team-a" and rt.recs[job_id].rejected
        _group(rt, "team-c")  # relabelled in memory: read again, queued under team-c
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED and job.tenant == "team-c", job


def test_a_pruned_refused_pod_group_whose_label_changes_is_read_again_as_a_new_one(new_runtime: Runtime) -> None:
    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1")])
        rt._on_namespace_list([_ns("ns-a", "team-a")])
        _group(rt, "team-a")
        _tick(rt)
        uid = group_uid("ns-b", "grp")
        job_id = rt.by_uid[uid]
        assert rt.forget(job_id) and job_id in rt._refused_tombs
        rt.take_discovered()
        _group(rt, "Not_A_Tenant")  # refused again: a tombstone again at once
        _tick(rt)
        assert rt.job(job_id) is None and job_id in rt._pruned and not rt.take_discovered()
        _group(rt, "team-c")
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED and job.tenant == "team-c"
        assert job_id not in rt._pruned and [j.id for j in rt.take_discovered()] == [job_id]


def test_a_queued_pod_group_relabelled_keeps_its_tenant(new_runtime: Runtime) -> None:
    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1")])
        _group(rt, "team-a")
        _tick(rt)
        job_id = rt.by_uid[group_uid("ns-b", "grp")]
        assert rt.job(job_id).state == JobState.QUEUED  # type: ignore[union-attr]
        rt._on_pod("MODIFIED", _member("grp-0", "p-0", "team-c"))  # one member relabelled: not settled yet
        _tick(rt)
        assert rt.recs[job_id].told is None
        _group(rt, "team-c")
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED and job.tenant == "team-a"
        assert rt.recs[job_id].told == "team-c"


def test_a_running_job_whose_slot_cannot_be_held_here_is_running_never_queued(new_runtime: Runtime) -> None:
    """A Job found admitted and released (a restart, a follower) whose admission names a node this replica does
    not know (yet): running at once, the slot left out and tried again at each pass; once the node is known the
    slot is held, among the job's pods, and charged to its tenant. Before the fix it was queued (and a leader's
    next pass could admit it a second time)."""
    from gpucluster.jobs import task_pods
    from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, admission_of

    with new_runtime() as rt:
        rt.cluster.set_nodes([node_obj("n1"), node_obj("n2")])
        obj = _job("held", "u-3", 1, "ns-a", "team-a")
        rt._on_job("ADDED", obj)
        _tick(rt)
        job_id = native_id("u-3")
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.QUEUED
        [task] = task_pods(job.spec, 1, rt.namespace)
        d = rt.cluster.decide(task, candidates=["n2"])
        assert d.ok and d.allocation is not None and d.allocation.node == "n2"
        adm = admission_of([d.allocation], rt.registry, admission_id="a1", by="leader", attempt=1, at=100.0)
        rt.cluster.unreserve([task.key])
        rt.cluster.delete_node("n2")  # not known here (yet)
        running = _job("held", "u-3", 2, "ns-a", "team-a")
        running["spec"]["suspend"] = False
        running["metadata"]["annotations"] = {ADMISSION_ANNOTATION: adm.to_json()}
        rt._on_job("MODIFIED", running)
        _tick(rt)
        job = rt.job(job_id)
        assert job is not None and job.state == JobState.RUNNING, job.message if job else None
        assert rt.recs[job_id].unmirrored == {0: "node n2 is unknown"} and "not held here yet" in job.message
        assert job.pod_keys == () and task.key not in rt.cluster.reserved
        assert rt.usage_by_tenant()["team-a"]["gpus"] == 1.0  # the slot it runs in, charged meanwhile
        rt.cluster.apply_node(node_obj("n2"))
        _tick(rt)
        assert rt.recs[job_id].unmirrored == {} and rt.recs[job_id].slots == [task.key]
        assert job.pod_keys == (task.key,) and task.key in rt.cluster.reserved
        assert rt.quota._charged[task.key][0] == "team-a" and rt.usage_by_tenant()["team-a"]["gpus"] == 1.0
        assert "not held here yet" not in job.message
