"""Leadership changes of a Kubernetes runtime (:meth:`KubeRuntime._leadership`). One that loses the lease
rebuilds every job from the cluster with a fresh engine: the tenants' quotas and fair-share weights carry over,
the old engine's quota charges do not (the new engine charges the jobs it finds running; one that ended meanwhile
holds nothing). One that comes to lead writes the verdicts it reached while following that the Jobs do not show
(a refusal, an acceptance). A replica restarted on its store does not make again a Job someone applied and
deleted since (:meth:`KubeRuntime.restore`). A follower shows the leader's reason a Job waits even when the Job
was first read with it.

No API server (the stub informer of ``test_retention_records``); the same on a real kube-apiserver, with two
replicas, is ``tests/integration/test_k8s_tenancy_ha.py``."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster.jobs import Job, job_spec
from gpucluster.kubernetes import backend
from gpucluster.kubernetes.client import ApiException
from gpucluster.kubernetes.sharedtenants import SharedTenants
from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import (
    ADMISSION_ANNOTATION,
    MESSAGE_ANNOTATION,
    QUEUE_LABEL,
    REFUSED_ANNOTATION,
    native_id,
)

from .helpers import node_obj
from .test_retention_records import _job_obj


def test_a_replica_that_lost_the_lease_keeps_quotas_and_weights_and_drops_the_old_charges(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:
    with new_runtime() as rt:
        rt.set_quotas({"team": 2.0}, {"team": 3.0})
        rt.quota.charge("default/ended-0", "team", {"gpu": 2.0})  # what the old engine charged for a job now ended
        rt._leading = True  # it led ...
        rt.elector = SimpleNamespace(is_leader=False, stop=lambda: None)  # type: ignore[assignment]
        old = rt.engine
        rt._leadership()  # ... and lost the lease
        assert rt.engine is not old and rt.engine.paused
        assert rt.quota.queues["team"].limit == {"gpu": 2.0}
        assert rt.quota.used["team"]["gpu"] == 0.0
        assert rt.quota.blocked_by("team", {"gpu": 2.0}) is None
        assert rt.engine.ledger.weights == {"team": 3.0}


def _job_in(namespace: str, name: str, tenant: str, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = _job_obj(name, str(uuid.uuid4()), 1)
    obj["metadata"]["namespace"] = namespace
    obj["metadata"]["labels"] = {QUEUE_LABEL: tenant}
    obj["metadata"]["annotations"] = dict(annotations or {})
    return obj


def _bound(namespace: str, tenant: str) -> dict[str, Any]:
    return {"metadata": {"name": namespace, "labels": {NAMESPACE_TENANT_LABEL: tenant}}}


def test_a_follower_that_comes_to_lead_writes_the_verdicts_it_reached_while_following(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:
    """While following it refused a Job for its namespace and let in one still carrying a refusal; the Jobs do not
    show either (the leader never wrote them). Leading, it writes both, once; a Job that shows its verdict
    already (a refusal written by the old leader) is left alone."""
    with new_runtime() as rt:
        written: list[tuple[str, str, str]] = []  # (write, Job, message)
        rt.submit_write = lambda _what, _job_id, fn, *args: written.append(  # type: ignore[method-assign]
            (fn.__name__, args[1], args[4] if fn.__name__ == "write_note" else args[2]))
        rt.cluster.apply_node(node_obj("n0"))
        rt._on_namespace_list([_bound("ns-a", "a")])
        refused = _job_in("ns-b", "refused", "a")  # ns-b may not use a: refused here, not written
        told = _job_in("ns-b", "told", "a", {REFUSED_ANNOTATION: "namespace ns-b may not use tenant a: ..."})
        let_in = _job_in("ns-b", "let-in", "c", {REFUSED_ANNOTATION: "namespace ns-b may not use tenant c: ..."})
        for obj in (refused, told, let_in):
            rt._on_job("ADDED", obj)
        rt.advance(rt.now + 1.0)
        assert written == []  # a follower writes nothing
        assert {j.name: j.status.value for j in rt.jobs()} == {"refused": "failed", "told": "failed",
                                                               "let-in": "pending"}
        # the old leader admitted one it refused here (it saw the binding change later): not refused on the Job
        admitted = _job_in("ns-b", "admitted", "a")
        rt._on_job("ADDED", admitted)
        rt.advance(rt.now + 1.0)
        assert rt.job(native_id(admitted["metadata"]["uid"])).status.value == "failed"  # type: ignore[union-attr]
        admitted["metadata"]["annotations"] = {ADMISSION_ANNOTATION: "{}"}
        admitted["spec"]["suspend"] = False
        rt._on_job("MODIFIED", admitted)  # seen, not read yet
        rt.elector = SimpleNamespace(is_leader=True, stop=lambda: None)  # type: ignore[assignment]
        rt._leadership()
        assert sorted(written) == [
            ("write_accepted", "let-in", "accepted: queued for tenant c: tenant c is bound to no namespace (any "
                                         "namespace may name it)"),
            ("write_note", "refused", "namespace ns-b may not use tenant a: the tenant is bound to namespace(s) ns-a "
                                      "(Namespace label gpucluster.io/tenant) and takes workloads from them only")]
        rt._leadership()  # already leading: nothing more
        assert len(written) == 2


def test_a_job_found_in_the_cluster_and_deleted_since_is_not_restored(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:
    """The store of a restarted replica knows a Job someone applied; its object is gone: it is not made again
    (``LookupError``, the service fails its record saying why). One whose object is there but not read yet (its
    claims are not ready) is left to be read."""
    with new_runtime() as rt:
        creates: list[str] = []
        rt.submit_write = lambda what, job_id, *_a: creates.append(job_id)  # type: ignore[method-assign]
        gone = native_id(str(uuid.uuid4()))
        with pytest.raises(LookupError, match="deleted from the cluster"):
            rt.restore(Job(job_spec(gone, name="gone", tenant="a", replicas=1, resources={"nvidia.com/gpu": 1}, duration_s=60.0, submit_s=0.0)))
        obj = _job_in("ns-a", "waits", "a")
        with rt._lock:
            rt._job_objs[obj["metadata"]["uid"]] = obj  # seen by the informer, not read into a job yet
        rt.restore(Job(job_spec(native_id(obj["metadata"]["uid"]), name="waits", tenant="a", replicas=1,
                                resources={"nvidia.com/gpu": 1}, duration_s=60.0, submit_s=0.0)))
        api = job_spec("j-0123456789ab", name="api", tenant="a", replicas=1, resources={"nvidia.com/gpu": 1}, duration_s=60.0, submit_s=0.0)
        rt.restore(Job(api))  # a job of the REST API whose Job is missing is made again, as before
        assert creates == ["j-0123456789ab"]


def test_a_follower_shows_the_leaders_reason_on_a_job_it_first_sees_with_it(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:
    """The leader wrote why the Job waits (``gpucluster.io/message``) before the follower first read the Job: the
    follower lists it with that reason (before the fix it kept none: the leader writes it once per kind)."""
    with new_runtime() as rt:
        rt.cluster.apply_node(node_obj("n0"))
        why = "waiting for quota: tenant c holds 2 of 2 GPUs, the job needs 1"
        rt._on_job("ADDED", _job_in("ns-b", "waits", "c", {MESSAGE_ANNOTATION: why}))
        rt.advance(rt.now + 1.0)
        rt.advance(rt.now + 1.0)
        [job] = rt.jobs()
        assert job.status.value == "pending" and job.message == why


class _ConfigMaps:
    """``read_namespaced_config_map`` of a stub CoreV1Api: the shared tenants' ConfigMap as the server has it."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {"metadata": {"name": "cp-tenants", "resourceVersion": "5", "uid": "u"},
                                    "data": {"team": '{"quota_gpus": 2}'}}
        self.fail: Exception | None = None

    def read_namespaced_config_map(self, _name: str, _namespace: str, **_kw: Any) -> Any:
        if self.fail is not None:
            raise self.fail
        return SimpleNamespace(data=json.dumps(self.obj))


def test_a_replica_that_wins_the_lease_leads_only_once_it_applied_the_newest_shared_tenancy(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:
    """Its watch had delivered nothing (or an older version): winning the lease, it reads the ConfigMap from the
    server and stays paused (no admission pass) until the service has applied that read; a read that fails keeps
    it paused too."""
    with new_runtime() as rt:
        server = _ConfigMaps()
        rt.tenancy = SharedTenants(server, "default", "cp-tenants")
        rt.elector = SimpleNamespace(is_leader=True, stop=lambda: None)  # type: ignore[assignment]
        rt._leadership()
        assert not rt._leading and rt.engine.paused
        shared = rt.shared_tenancy()  # what the service applies at its next tick, before the pass
        assert shared is not None and shared.version == "5" and shared.tenants["team"].quota_gpus == 2.0
        rt._leadership()
        assert not rt._leading  # not applied yet
        rt.tenancy_applied("5")
        server.fail = ApiException(status=503, reason="Service Unavailable")
        rt._leadership()
        assert not rt._leading and rt.engine.paused  # cannot tell whether 5 is the newest: it waits
        server.fail = None
        rt._leadership()
        assert rt._leading and not rt.engine.paused
        assert rt.shared_tenancy() is None
