"""Tenant isolation and quota with two replicas (a leader and a follower, leader election on a Lease) on a real
kube-apiserver, with kube-controller-manager's Job controller and the kubelet stand-in. Each replica has its own
store; the tenants' settings are shared through the ConfigMap ``lease-<run>-tenants`` (the older tests still tell
each replica the tenants: the same settings written twice).

* a binding change seen by the follower alone (the leader frozen with ``SIGSTOP``, then ``kill -9``): the follower
  re-checks as a follower (nothing written), and once it leads it writes what it decided: the refused Job now
  allowed gets its ``Accepted`` Event and loses its refusal, and is admitted once; the queued Job now foreign gets
  its ``Refused`` Event and annotation and is never admitted; the running one runs on; the tenants' use it reports
  is what the Jobs on the server hold;
* a binding change the leader carries out while the follower mirrors it, then ``kill -9`` of the leader: the new
  leader admits nothing again and refuses nothing again, and reports the same use;
* quota across a failover: a tenant at its quota with a Job waiting; ``kill -9`` of the leader; the new leader
  keeps the Job waiting (the quota is known before its first admission pass), and admits it once the running
  one is deleted;
* quota across a lost lease: a leader frozen past its lease follows when it wakes up and rebuilds its jobs from
  the cluster; a Job that ended meanwhile no longer counts against its tenant's quota there, so once it leads
  again it admits the tenant's next Job;
* a replica restarted on its store after a Job it knew was deleted does not make that Job again;
* a tenant with a quota created through the leader's API only: after ``kill -9`` of the leader the follower leads
  with that quota (its second Job keeps waiting, admitted once when the first is deleted); fails on a main where
  each replica kept its own tenants (the follower admitted the second Job at once);
* a quota raised through the follower's API is applied by the leader (which admits the waiting Job), a quota
  removed through the leader's is removed on the follower; no token in the ConfigMap;
* a hand-broken key in the ConfigMap: both replicas keep the tenant's last good quota, report the key (overview,
  a Warning ``TenancyUnreadable`` Event) and apply the key once it is mended;
* Events across a failover: the pod-group verdicts and the ``Relabelled`` Events only the follower saw (the
  leader frozen, then ``kill -9``) are written by it once it leads, and no Event the old leader wrote (a waiting
  group's ``Waiting``) is written twice;
* a follower whose Job watch lags (in process, its Job events held) reads the workloads from the API server
  before its first pass as the leader: the old leader's last admission is adopted and charged, and the tenant's
  next group waits for quota instead of being admitted past it.
"""

from __future__ import annotations

import contextlib
import json
import math
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kubelet import finish
from test_k8s_rechecks import _group, _relabel_group
from test_k8s_tenancy import _apply, _refused, _status
from test_k8s_workloads import _api_job
from up_process import ControlPlane, leader_of, wait_until

from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, QUEUE_LABEL, REFUSED_ANNOTATION, Admission

pytestmark = pytest.mark.integration

LEASE_S = 3


@contextlib.contextmanager
def replicas(cp: Any, workdir: Path, run: str, tenants: dict[str, float | None]) -> Iterator[list[ControlPlane]]:
    """Two replicas of ``gpucluster up`` sharing a Lease, each told ``tenants`` (name -> quota in GPUs, None: no
    quota) through its API; the leader first. Their logs are printed when the block fails; stopped afterwards
    (and the Lease deleted)."""
    args = ("--lease-name", f"lease-{run}", "--lease-duration", str(LEASE_S))
    both = [ControlPlane(cp.kubeconfig, workdir, *args, "--identity", f"r{i}-{run}", data=f"r{i}") for i in range(2)]
    try:
        for r in both:
            with r.client() as c:
                for name, quota in tenants.items():
                    resp = c.post("/api/v1/tenants", json={"name": name, "quota_gpus": quota})
                    assert resp.status_code == 201, resp.text
        leader = wait_until(lambda: leader_of(both), 120, "one replica to lead")
        yield [leader, next(r for r in both if r is not leader)]
    except BaseException:
        for r in both:
            print(f"---- {r.log.name}\n{r.output()[-5000:]}")
        raise
    finally:
        for r in both:
            if r.proc.poll() is None:
                r.proc.send_signal(signal.SIGCONT)
            r.stop()
        subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "delete", "lease",
                        f"lease-{run}", "--ignore-not-found"], capture_output=True, check=False, timeout=60)



def _three_jobs(cp: Any, kube: Any, leader: ControlPlane, run: str, ns_b: str, tenant: str, other: str) -> None:
    """In ns-b: ``intruder-<run>`` naming A (waited for until refused), ``running-<run>`` naming C (waited for until
    the leader runs it) and ``waiting-<run>`` naming C (applied; C's quota leaves it waiting)."""
    intruder, running, waiting = f"intruder-{run}", f"running-{run}", f"waiting-{run}"
    _apply(cp, intruder, ns_b, tenant, run, run_s=600)
    wait_until(lambda: _refused(kube, ns_b, intruder), 120, "the Job naming A refused")
    _apply(cp, running, ns_b, other, run, run_s=600)
    wait_until(lambda: _status(leader, running, "running"), 120, "C's first Job to run")
    _apply(cp, waiting, ns_b, other, run)


def _leads(r: ControlPlane) -> bool:
    """``r`` leads and has run five ticks since it said so (it admits, writes and reports as the leader)."""
    if not r.leading():
        return False
    ticks = r.get("/healthz")["ticks"]
    wait_until(lambda: r.get("/healthz")["ticks"] >= ticks + 5, 120, "five ticks of the new leader")
    return r.leading()


def _job(kube: Any, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    resp = client.BatchV1Api(kube).read_namespaced_job(name, namespace, _preload_content=False)
    return dict(json.loads(resp.data))


def _annotations(kube: Any, namespace: str, name: str) -> dict[str, str]:
    return dict(_job(kube, namespace, name)["metadata"].get("annotations") or {})


def _admission_id(kube: Any, namespace: str, name: str) -> str | None:
    raw = _annotations(kube, namespace, name).get(ADMISSION_ANNOTATION)
    return Admission.parse(raw, name).id if raw else None


def _held_on_server(kube: Any, spaces: tuple[str, ...]) -> dict[str, float]:
    """Tenant -> GPUs its admitted, released, unfinished Jobs hold, read from the Jobs on the server (every pod of
    the test's Jobs asks for whole GPUs)."""
    from kubernetes import client

    held: dict[str, float] = {}
    for ns in spaces:
        resp = client.BatchV1Api(kube).list_namespaced_job(ns, label_selector=QUEUE_LABEL, _preload_content=False)
        for job in json.loads(resp.data)["items"]:
            ended = any(c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
                        for c in (job.get("status") or {}).get("conditions") or [])
            if ended or job["spec"].get("suspend") or ADMISSION_ANNOTATION not in (
                    job["metadata"].get("annotations") or {}):
                continue
            per_pod = float(job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
            tenant = job["metadata"]["labels"][QUEUE_LABEL]
            held[tenant] = held.get(tenant, 0.0) + per_pod * int(job["spec"]["parallelism"])
    return held


def _reported(server: ControlPlane) -> dict[str, float]:
    """Tenant -> GPUs held, as ``server`` reports them (``GET /api/v1/tenants``); tenants holding none left out."""
    return {t["name"]: float(t["gpus"]) for t in server.get("/api/v1/tenants")["tenants"] if float(t["gpus"])}


def _events(kube: Any, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    return _refused(kube, namespace, name, reason=reason) or []


def test_a_binding_change_the_follower_alone_saw_is_carried_out_once_it_leads(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """ns-a bound to A. In ns-b: a Job naming A (refused), two naming C (quota 2 GPUs: one runs, one waits for
    quota). The leader is frozen (``SIGSTOP``), ns-a's label moved from A to C, the follower re-checks (lists the
    refused Job queued, the waiting one refused), then the leader is killed (``kill -9``): it never wrote a thing
    about the change. The follower, leading, writes the acceptance (Accepted Event, refusal taken off) and admits
    the Job once, writes the refusal of C's waiting Job (Refused Event, annotation; never admitted), leaves C's
    running Job as it was admitted, and reports the use the Jobs on the server hold (A 2, C 2 GPUs)."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    intruder, running, waiting = f"intruder-{run}", f"running-{run}", f"waiting-{run}"
    with replicas(kube_control_plane, tmp_path, run, {tenant: None, other: 2}) as (leader, follower):
        _three_jobs(kube_control_plane, kube_client, leader, run, ns_b, tenant, other)
        for r in (leader, follower):
            wait_until(lambda r=r: (j := _status(r, waiting, "pending")) and "quota" in j["message"], 120,
                       "C's second Job to wait for quota")
            wait_until(lambda r=r: _status(r, running, "running") and _status(r, intruder, "failed"), 120,
                       "each replica to list the running Job running and the intruder refused")
        admitted = _admission_id(kube_client, ns_b, running)

        leader.proc.send_signal(signal.SIGSTOP)  # it writes nothing from now on
        core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: other}}})
        wait_until(lambda: _status(follower, waiting, "failed") and _status(follower, intruder, "pending"), 120,
                   "the follower to refuse the waiting Job and let the refused one in")
        assert not _events(kube_client, ns_b, intruder, "Accepted") and not _events(kube_client, ns_b, waiting,
                                                                                    "Refused")
        assert REFUSED_ANNOTATION in _annotations(kube_client, ns_b, intruder)  # a follower writes nothing
        leader.kill()
        wait_until(lambda: _leads(follower), 120, "the follower to take over")

        # the Job refused for naming A is let in by the new leader: accepted once, admitted once, runs
        [accepted] = wait_until(lambda: _events(kube_client, ns_b, intruder, "Accepted"), 120,
                                "an Accepted Event on the Job refused before")
        assert accepted["type"] == "Normal" and f"tenant {tenant} is bound to no namespace" in accepted["message"]
        wait_until(lambda: _status(follower, intruder, "running"), 120, "the Job let in to run")
        assert REFUSED_ANNOTATION not in _annotations(kube_client, ns_b, intruder)
        assert [e["reason"] for e in _events(kube_client, ns_b, intruder, "Admitted")] == ["Admitted"]
        assert Admission.parse(_annotations(kube_client, ns_b, intruder)[ADMISSION_ANNOTATION], intruder).by == \
            follower.overview()["kubernetes"]["identity"]
        # C's waiting Job is refused for its namespace: the Event and the annotation, never released nor admitted
        [event] = wait_until(lambda: _events(kube_client, ns_b, waiting, "Refused"), 120, "C's waiting Job refused")
        assert event["type"] == "Warning" and f"namespace {ns_b} may not use tenant {other}" in event["message"]
        job = _job(kube_client, ns_b, waiting)
        assert job["spec"]["suspend"] is True and ADMISSION_ANNOTATION not in job["metadata"]["annotations"]
        assert "may not use tenant" in job["metadata"]["annotations"][REFUSED_ANNOTATION]
        shown = _status(follower, waiting, "failed")
        assert shown is not None and shown["tenant"] != other
        # C's running Job runs on under its first admission
        assert _status(follower, running, "running") and _admission_id(kube_client, ns_b, running) == admitted
        assert not _events(kube_client, ns_b, running, "Refused")
        # what the new leader reports is what the Jobs on the server hold, and no tenant is over its quota
        held = wait_until(lambda: (h := _held_on_server(kube_client, (ns_a, ns_b))) == _reported(follower) and h,
                          120, "the new leader's use per tenant to match the Jobs on the server")
        assert held == {tenant: 2.0, other: 2.0}, held
        usage = {t["name"]: t for t in follower.get("/api/v1/tenants")["tenants"]}
        assert usage[other]["pending"] == 0 and usage[other]["running"] == 1 and usage[tenant]["running"] == 1


def test_a_binding_change_then_kill_9_of_the_leader_admits_and_refuses_nothing_twice(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """As above, but the leader carries the change out (accepts and admits the refused Job, refuses C's waiting
    one) and the follower mirrors it before the leader is killed: the new leader admits nothing again (one
    admission, one Admitted and one Accepted Event), refuses nothing again (one Refused Event), and reports the
    use the Jobs on the server hold."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    other = f"tc-{run}"
    intruder, running, waiting = f"intruder-{run}", f"running-{run}", f"waiting-{run}"
    with replicas(kube_control_plane, tmp_path, run, {tenant: None, other: 2}) as (leader, follower):
        _three_jobs(kube_control_plane, kube_client, leader, run, ns_b, tenant, other)
        wait_until(lambda: (j := _status(leader, waiting, "pending")) and "quota" in j["message"], 120,
                   "C's second Job to wait for quota")

        core.patch_namespace(ns_a, {"metadata": {"labels": {NAMESPACE_TENANT_LABEL: other}}})
        wait_until(lambda: _events(kube_client, ns_b, intruder, "Accepted"), 120, "the leader to accept the Job")
        wait_until(lambda: _events(kube_client, ns_b, waiting, "Refused"), 120, "the leader to refuse the waiting Job")
        for r in (leader, follower):
            wait_until(lambda r=r: _status(r, intruder, "running") and _status(r, waiting, "failed")
                       and _status(r, running, "running"), 120, "each replica to list the outcome")
        admissions = {n: _admission_id(kube_client, ns_b, n) for n in (intruder, running)}
        leader.kill()
        wait_until(lambda: _leads(follower), 120, "the follower to take over")
        held = wait_until(lambda: (h := _held_on_server(kube_client, (ns_a, ns_b))) == _reported(follower) and h,
                          120, "the new leader's use per tenant to match the Jobs on the server")
        assert held == {tenant: 2.0, other: 2.0}, held
        assert {n: _admission_id(kube_client, ns_b, n) for n in (intruder, running)} == admissions
        assert len(_events(kube_client, ns_b, intruder, "Admitted")) == 1
        assert len(_events(kube_client, ns_b, intruder, "Accepted")) == 1
        assert len(_events(kube_client, ns_b, waiting, "Refused")) == 1
        job = _job(kube_client, ns_b, waiting)
        assert job["spec"]["suspend"] is True and ADMISSION_ANNOTATION not in job["metadata"]["annotations"]
        assert _status(follower, waiting, "failed") and _status(follower, intruder, "running")


def _quota_holds_across_kill_9(kube_control_plane: Any, kube_client: Any, run: str,
                                namespaces: tuple[str, str, str], tmp_path: Path, *, leader_only: bool) -> None:
    """Tenant A (quota 2 GPUs: on both replicas' command line, or ``leader_only``: created through the leader's
    API alone) runs a 2-GPU Job and has a second waiting for quota; ``kill -9`` of the leader; the new leader keeps
    the second waiting (A holds 2 GPUs, never 4; no admission on the Job) and admits it, once, when the running
    Job is deleted."""
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant, ns_a, ns_b = namespaces
    running, waiting = f"running-{run}", f"waiting-{run}"
    with replicas(kube_control_plane, tmp_path, run, {} if leader_only else {tenant: 2}) as (leader, follower):
        if leader_only:
            with leader.client() as c:
                resp = c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
                assert resp.status_code == 201, resp.text
        _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(leader, running, "running"), 120, "A's first Job to run")
        _apply(kube_control_plane, waiting, ns_a, tenant, run, run_s=600)
        for r in (leader, follower):
            wait_until(lambda r=r: (j := _status(r, waiting, "pending")) and "quota" in j["message"]
                       and _status(r, running, "running"), 120, "A's second Job to wait for quota")
        leader.kill()
        wait_until(lambda: _leads(follower), 120, "the follower to take over")
        shown = _status(follower, waiting, "pending")
        assert shown is not None and "quota" in shown["message"], _api_job(follower, waiting)
        job = _job(kube_client, ns_a, waiting)
        assert job["spec"]["suspend"] is True and ADMISSION_ANNOTATION not in job["metadata"]["annotations"]
        assert _reported(follower) == {tenant: 2.0} == _held_on_server(kube_client, (ns_a, ns_b))
        assert _quota(follower, tenant) == 2
        batch.delete_namespaced_job(running, ns_a, propagation_policy="Background")
        wait_until(lambda: _status(follower, waiting, "running"), 120, "the waiting Job admitted by the new leader")
        # the replica lists the Job running once it decided; its admission reaches the server through the
        # writer after that: waited for, then it must name the new leader
        admission = wait_until(lambda: _annotations(kube_client, ns_a, waiting).get(ADMISSION_ANNOTATION), 120,
                               "the admission annotation on the Job")
        assert Admission.parse(admission, waiting).by == follower.overview()["kubernetes"]["identity"]
        # the Event follows the admission (written after it): waited for, and there is one
        wait_until(lambda: _events(kube_client, ns_a, waiting, "Admitted"), 120, "the Admitted Event")
        assert len(_events(kube_client, ns_a, waiting, "Admitted")) == 1
        wait_until(lambda: _reported(follower) == {tenant: 2.0} == _held_on_server(kube_client, (ns_a, ns_b)), 120,
                   "A to hold 2 GPUs, as its Jobs on the server do")


def test_kill_9_of_the_leader_keeps_the_job_waiting_for_quota_waiting(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """A (quota 2 GPUs on both replicas) runs a 2-GPU Job and has a second one waiting for quota. ``kill -9`` of
    the leader: the new leader keeps the second waiting through its first passes (A holds 2 GPUs, never 4; no
    admission on the Job), and admits it, once, when the running Job is deleted."""
    _quota_holds_across_kill_9(kube_control_plane, kube_client, run, namespaces, tmp_path, leader_only=False)


def _job_pods(kube: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.CoreV1Api(kube).list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}",
                                                      _preload_content=False)
    return list(json.loads(resp.data)["items"])


def test_a_leader_that_lost_its_lease_forgets_the_quota_of_a_job_that_ended_meanwhile(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """A (quota 2 GPUs on both replicas) runs a 2-GPU Job admitted by r0. r0 is frozen past its lease
    (``SIGSTOP``) and r1 takes over; the Job completes; r0 wakes up (``SIGCONT``), finds it lost the lease and
    rebuilds its jobs from the cluster as a follower. Then r1 is killed (``kill -9``) and r0 leads again: A holds
    nothing, so A's next Job is admitted. Before the fix the rebuild kept the ended Job's quota charge and the next
    Job waited for quota (``tenant A holds 2 of 2 GPUs``) for ever."""
    tenant, ns_a, ns_b = namespaces
    first, second = f"first-{run}", f"second-{run}"
    with replicas(kube_control_plane, tmp_path, run, {tenant: 2}) as (r0, r1):
        _apply(kube_control_plane, first, ns_a, tenant, run, run_s=math.inf)  # until it is ended below
        wait_until(lambda: _status(r0, first, "running") and _status(r1, first, "running"), 120,
                   "A's first Job to run, on both replicas")
        r0.proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: _leads(r1), 120, "r1 to take over from the frozen r0")
        [pod] = _job_pods(kube_client, ns_a, first)
        assert finish(kube_client, ns_a, pod["metadata"]["name"])  # the Job completes while r0 is frozen
        wait_until(lambda: _status(r1, first, "succeeded"), 120, "the first Job to complete")
        r0.proc.send_signal(signal.SIGCONT)
        wait_until(lambda: not r0.leading() and _status(r0, first, "succeeded"), 120,
                   "r0 to follow and see the Job completed")
        assert _reported(r0) == {} == _reported(r1)
        r1.kill()
        wait_until(lambda: _leads(r0), 120, "r0 to lead again")
        _apply(kube_control_plane, second, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(r0, second, "running"), 120, "A's next Job to be admitted")
        assert _reported(r0) == {tenant: 2.0} == _held_on_server(kube_client, (ns_a, ns_b))


def test_a_replica_restarted_after_a_job_it_knew_was_deleted_does_not_make_it_again(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """A (quota 2 GPUs, bound to ns-a) runs a Job and has a second one waiting for quota, which the follower stores.
    The follower stops; the waiting Job is deleted; the follower starts again on its store: the deleted Job is not
    restored (listed failed, saying why), and no Job is made for it anywhere (before the fix it was made again as
    a Job of the REST API in the control plane's namespace, where no namespace binding applies, and run)."""
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant, ns_a, _ns_b = namespaces
    running, waiting = f"running-{run}", f"waiting-{run}"
    with replicas(kube_control_plane, tmp_path, run, {tenant: 2}) as (leader, follower):
        _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(leader, running, "running"), 120, "A's first Job to run")
        _apply(kube_control_plane, waiting, ns_a, tenant, run, run_s=600)  # after it: it waits, the first runs
        wait_until(lambda: (j := _status(follower, waiting, "pending")) and "quota" in j["message"]
                   and _status(follower, running, "running"), 120, "the follower to list A's two Jobs")
        job_id = _api_job(follower, waiting)["id"]
        follower.stop()
        batch.delete_namespaced_job(waiting, ns_a, propagation_policy="Background")
        wait_until(lambda: _status(leader, waiting, "cancelled"), 120, "the leader to see the Job deleted")
        again = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--lease-name", f"lease-{run}",
                             "--lease-duration", str(LEASE_S), "--identity", f"again-{run}", data=follower.data.name)
        try:
            ticks = again.get("/healthz")["ticks"]
            wait_until(lambda: again.get("/healthz")["ticks"] >= ticks + 5, 120, "five ticks of the restarted follower")
            shown = _api_job(again, waiting)
            assert shown is not None and shown["id"] == job_id and shown["status"] in ("failed", "cancelled"), shown
            made = [j.metadata.name for ns in ("default", ns_a)
                    for j in batch.list_namespaced_job(ns, label_selector=f"{QUEUE_LABEL}={tenant}").items]
            assert made == [running], made
            assert _reported(again) == {tenant: 2.0} == _reported(leader)
        except BaseException:
            print(f"---- {again.log.name}\n{again.output()[-5000:]}")
            raise
        finally:
            again.stop()


# ------------------------------------------------------------------ tenants shared by the replicas (one ConfigMap)
def _quota(server: ControlPlane, tenant: str) -> float | bool | None:
    """The tenant's quota as ``server`` lists it (None: no quota), False when it does not list the tenant."""
    row = next((t for t in server.get("/api/v1/tenants")["tenants"] if t["name"] == tenant), None)
    return False if row is None else row["quota_gpus"]


def _tenancy(server: ControlPlane) -> dict[str, Any]:
    return dict(server.overview()["kubernetes"]["tenancy"])


def _shared(kube: Any, run: str) -> Any:
    from kubernetes import client

    return client.CoreV1Api(kube).read_namespaced_config_map(f"lease-{run}-tenants", "default")


def test_a_quota_set_on_the_leader_only_holds_after_kill_9_of_the_leader(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """A (quota 2 GPUs) is created through the **leader's** API only; it runs a 2-GPU Job and a second waits for
    quota. ``kill -9`` of the leader: the follower, which was never told of A, leads with A's quota (shared
    through the ConfigMap ``lease-<run>-tenants``), keeps the second Job waiting, and admits it once the first is
    deleted. Before the tenants were shared the follower made A on first use, unlimited, and admitted the second
    Job at its first pass."""
    _quota_holds_across_kill_9(kube_control_plane, kube_client, run, namespaces, tmp_path, leader_only=True)


def test_a_quota_changed_or_removed_through_either_replica_holds_on_both(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """A (quota 2, made on the leader) runs a 2-GPU Job, a second waits. The quota raised to 4 through the
    **follower's** API reaches the leader, which admits the second Job; the quota removed through the leader
    reaches the follower (no quota on either); the ConfigMap holds no token."""
    tenant, ns_a, _ns_b = namespaces
    running, waiting = f"running-{run}", f"waiting-{run}"
    with replicas(kube_control_plane, tmp_path, run, {}) as (leader, follower):
        with leader.client() as c:
            resp = c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
            assert resp.status_code == 201, resp.text
            token = resp.json()["token"]
        _apply(kube_control_plane, running, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _status(leader, running, "running"), 120, "A's first Job to run")
        _apply(kube_control_plane, waiting, ns_a, tenant, run, run_s=600)
        wait_until(lambda: (j := _status(leader, waiting, "pending")) and "quota" in j["message"], 120,
                   "A's second Job to wait for quota")
        with follower.client() as c:
            resp = c.patch(f"/api/v1/tenants/{tenant}", json={"quota_gpus": 4})
            assert resp.status_code == 200 and resp.json()["quota_gpus"] == 4, resp.text
        wait_until(lambda: _quota(leader, tenant) == 4, 120, "the leader to apply the follower's change")
        wait_until(lambda: _status(leader, waiting, "running"), 120, "the leader to admit the second Job under 4")
        with leader.client() as c:
            resp = c.patch(f"/api/v1/tenants/{tenant}", json={"quota_gpus": None})
            assert resp.status_code == 200 and resp.json()["quota_gpus"] is None, resp.text
        wait_until(lambda: _quota(follower, tenant) is None, 120, "the follower to drop A's quota")
        data = _shared(kube_client, run).data
        assert json.loads(data[tenant])["quota_gpus"] is None and token not in json.dumps(data)
        assert _tenancy(leader)["errors"] == {} == _tenancy(follower)["errors"]


def test_a_hand_broken_shared_object_keeps_the_last_good_settings_and_says_why(
        kube_control_plane: Any, kube_client: Any, run: str, tmp_path: Path) -> None:
    """A's key in the ConfigMap edited by hand to what no replica can read: both replicas keep A's quota of 2, name
    the key and the reason (the overview's ``kubernetes.tenancy.errors``, a Warning ``TenancyUnreadable`` Event on
    the ConfigMap) and go on; mended by hand to quota 3, both apply it."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, name = f"ta-{run}", f"lease-{run}-tenants"
    with replicas(kube_control_plane, tmp_path, run, {}) as (leader, follower):
        with follower.client() as c:
            assert c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2}).status_code == 201
        wait_until(lambda: _quota(leader, tenant) == 2, 120, "the leader to apply A's quota")
        core.patch_namespaced_config_map(name, "default", {"data": {tenant: '{"quota_gpus": "lots"}'}})
        for r in (leader, follower):
            errors = wait_until(lambda r=r: _tenancy(r)["errors"], 120, "the replica to report the broken key")
            assert list(errors) == [tenant] and "quota_gpus: expected a number" in errors[tenant], errors
            assert _quota(r, tenant) == 2 and r.healthy()
        events = wait_until(lambda: _refused(kube_client, "default", name, kind="ConfigMap",
                                             reason="TenancyUnreadable"), 120, "a TenancyUnreadable Event")
        assert all(e["type"] == "Warning" and f"key '{tenant}'" in e["message"] for e in events)
        core.patch_namespaced_config_map(name, "default", {"data": {tenant: '{"quota_gpus": 3}'}})
        for r in (leader, follower):
            wait_until(lambda r=r: _quota(r, tenant) == 3 and not _tenancy(r)["errors"], 120,
                       "the replica to apply the mended key")


def test_patches_of_different_fields_through_two_replicas_keep_both_on_the_real_configmap(
        kube_client: Any, namespace: str) -> None:
    """Two replicas' writers over one real ConfigMap: b changes the weight from a view that still has the old
    quota, after a changed the quota; the ConfigMap keeps both (a PATCH writes only its fields, over the value the
    read just before the replace holds, and a write between that read and the replace is a 409 and a new read)."""
    from kubernetes import client

    from gpucluster.kubernetes.sharedtenants import SharedTenants
    from gpucluster.model.tenants import TenantSettings

    core = client.CoreV1Api(kube_client)
    a, b = SharedTenants(core, namespace, "pair-tenants"), SharedTenants(core, namespace, "pair-tenants")
    a.publish({"ml": TenantSettings(2.0, 1.0, 5)}, {})
    a.publish({"ml": TenantSettings(6.0, 1.0, 5)}, {}, fields={"quota_gpus"})
    written = b.publish({"ml": TenantSettings(2.0, 4.0, 5)}, {}, fields={"weight"})  # b's view: quota 2
    assert written.tenants["ml"] == TenantSettings(6.0, 4.0, 5)
    data = core.read_namespaced_config_map("pair-tenants", namespace).data
    assert TenantSettings.decode(data["ml"]) == TenantSettings(6.0, 4.0, 5)
    # without fields a write is the whole settings (POST): b's stale quota would win
    b.publish({"ml": TenantSettings(2.0, 4.0, 5)}, {})
    assert TenantSettings.decode(core.read_namespaced_config_map("pair-tenants", namespace).data["ml"]).quota_gpus == 2


def test_a_new_leader_writes_the_pod_group_events_only_it_saw_and_no_event_twice(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """Tenant C (quota 2 GPUs): a pod group runs at the quota, a second waits for it (the leader writes a
    ``Waiting`` Event on its pods). The leader is frozen (``SIGSTOP``); the running group's members are relabelled
    (it stays C's: a ``Relabelled`` Event is owed) and a group naming a bad tenant is made (refused: ``Refused``
    Events owed); the follower sees both, then the leader is killed (``kill -9``). The new leader writes the
    ``Relabelled`` and ``Refused`` Events, one on each pod, and the waiting group's ``Waiting`` Event stays one
    (the new leader writes it again: the same Event, not a second). Before, the follower's pod-group verdicts and
    relabels were never written and every Event the new leader wrote again was a duplicate."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    _tenant, _ns_a, ns_b = namespaces
    other, moved = f"tc-{run}", f"td-{run}"
    running, waiting, bad, late = f"pr-{run}", f"pw-{run}", f"pb-{run}", f"pl-{run}"

    def on_pods(group: str, reason: str) -> list[int]:
        return [len(_refused(kube_client, ns_b, f"{group}-{i}", kind="Pod", reason=reason) or []) for i in range(2)]

    with replicas(kube_control_plane, tmp_path, run, {other: 2}) as (leader, follower):
        _group(core, ns_b, run, other, running, run_s=600)
        for r in (leader, follower):
            wait_until(lambda r=r: _status(r, running, "running"), 120, "the first group to run at C's quota")
        _group(core, ns_b, run, other, waiting)
        wait_until(lambda: (j := _status(leader, waiting, "pending")) and "quota" in j["message"], 120,
                   "the second group to wait for quota")
        wait_until(lambda: _status(follower, waiting, "pending"), 120, "the follower to list it waiting")
        wait_until(lambda: on_pods(waiting, "Waiting") == [1, 1], 120, "the leader's Waiting Events")

        leader.proc.send_signal(signal.SIGSTOP)  # it writes nothing from now on
        _relabel_group(core, ns_b, running, moved)
        _group(core, ns_b, run, "Not_A_Tenant", bad)
        wait_until(lambda: _status(follower, bad, "failed"), 120, "the follower to refuse the badly named group")
        assert on_pods(bad, "Refused") == [0, 0] and on_pods(running, "Relabelled") == [0, 0]
        leader.kill()
        wait_until(lambda: _leads(follower), 120, "the follower to take over")

        wait_until(lambda: on_pods(bad, "Refused") == [1, 1], 120, "the new leader to write the group's refusal")
        wait_until(lambda: on_pods(running, "Relabelled") == [1, 1], 120, "the new leader to write the relabel")
        [told] = _refused(kube_client, ns_b, f"{running}-0", kind="Pod", reason="Relabelled") or []
        assert f"it stays running, charged to tenant {other} until it ends" in told["message"]
        # a group the new leader refuses after it took over: its Event is written after every earlier write
        _group(core, ns_b, run, "Also_Not_A_Tenant", late)
        wait_until(lambda: on_pods(late, "Refused") == [1, 1], 120, "the new leader's own refusal")
        assert on_pods(waiting, "Waiting") == [1, 1]  # written again by the new leader: the same Event
        assert on_pods(bad, "Refused") == [1, 1] and on_pods(running, "Relabelled") == [1, 1]
        assert _status(follower, running, "running") and _status(follower, waiting, "pending")


def test_a_follower_whose_watch_lags_takes_in_the_old_leaders_admission_before_its_first_pass(
        kube_control_plane: Any, kube_client: Any, run: str, namespaces: tuple[str, str, str],
        fleet: list[Any], tmp_path: Path) -> None:
    """Tenant A (quota 2 GPUs). A leader (``up``) admits Job X of A (2 GPUs) and keeps a pod group Y of A (2 x 1
    GPU) waiting for quota; the follower, in process, has a Job watch that lags (its Job events held: it never
    sees X) and queues Y (through its pod watch). The leader is killed (``kill -9``) and the follower leads: before its first pass
    it reads the workloads from the API server, adopts X (A holds 2 GPUs) and keeps Y waiting for quota. Before,
    its first pass admitted Y beside X: A held 4 GPUs of a quota of 2."""
    from kubernetes import client

    from gpucluster.kubernetes import KubeRuntime

    class LaggingJobWatch(KubeRuntime):
        """A replica whose Job watch has not delivered the old leader's last writes: its Job events are held."""

        held: list[tuple[str, Any]] | None = None

        def _on_job(self, kind: str, obj: Any) -> None:
            if self.held is not None:
                self.held.append((kind, obj))
                return
            super()._on_job(kind, obj)

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, _ns_b = namespaces
    x, y = f"x-{run}", f"y-{run}"
    args = ("--lease-name", f"lease-{run}", "--lease-duration", str(LEASE_S))
    leader = ControlPlane(kube_control_plane.kubeconfig, tmp_path, *args, "--identity", f"l-{run}", data="l")
    follower: LaggingJobWatch | None = None
    try:
        wait_until(leader.leading, 120, "the up process to lead")
        follower = LaggingJobWatch(kube_control_plane.kubeconfig, namespace="default", identity=f"f-{run}",
                                   leader_elect=True, lease_name=f"lease-{run}", lease_duration=float(LEASE_S))
        follower.set_quotas({tenant: 2})
        rt = follower

        def tick(what: Any) -> Any:
            def step() -> Any:  # what the service does at each tick: the shared tenants' settings taken in
                shared = rt.shared_tenancy()
                if shared is not None:
                    rt.tenancy_applied(shared.version)
                rt.advance(rt.now + 0.25)
                return what()
            return step

        with leader.client() as c:
            resp = c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
            assert resp.status_code == 201, resp.text
        follower.held = []
        _apply(kube_control_plane, x, ns_a, tenant, run, run_s=600)
        wait_until(lambda: _admission_id(kube_client, ns_a, x), 120, "the leader to admit X")
        _group(core, ns_a, run, tenant, y, run_s=600)
        wait_until(lambda: (j := _status(leader, y, "pending")) and "quota" in j["message"], 120,
                   "Y to wait for A's quota on the leader")
        wait_until(tick(lambda: any(j.name == y and j.status == "pending" for j in rt.jobs())), 120,
                   "the follower to queue Y")
        assert not rt.leading and not any(j.name == x for j in rt.jobs())  # its Job watch never delivered X
        leader.kill()
        wait_until(tick(lambda: rt._leading), 120, "the follower to lead (and have read the cluster)")
        for _ in range(8):  # passes of the new leader
            rt.advance(rt.now + 0.5)
        wait_until(tick(lambda: not rt._writes), 60, "its writes done")
        waiting = next(j for j in rt.jobs() if j.name == y)
        assert waiting.status == "pending" and "quota" in waiting.message, waiting.message
        pods = json.loads(core.list_namespaced_pod(ns_a, label_selector=f"gpucluster.io/run={run}",
                                                   _preload_content=False).data)["items"]
        assert not [p["metadata"]["name"] for p in pods if p["metadata"]["name"].startswith(y)
                    and p["spec"].get("nodeName")]
        seen = next((j for j in rt.jobs() if j.name == x), None)
        assert seen is not None and seen.status == "running", seen
        assert rt.usage_by_tenant()[tenant]["gpus"] == 2
    except BaseException:
        print(leader.output()[-5000:])
        raise
    finally:
        if follower is not None:
            follower.close()
        leader.stop()
        subprocess.run([str(kube_control_plane.bin_dir / "kubectl"), "--kubeconfig",
                        str(kube_control_plane.kubeconfig), "delete", "lease", f"lease-{run}", "--ignore-not-found"],
                       capture_output=True, check=False, timeout=60)


def test_a_configmap_made_anew_without_the_tenants_gets_them_back_from_the_replicas(
        kube_control_plane: Any, kube_client: Any, run: str, tmp_path: Path) -> None:
    """The ConfigMap deleted and made anew naming no tenant (as a new replica's start makes it from its empty
    store): both replicas keep A's quota of 2 and write A back into the new object, instead of applying it as
    'no tenant has a quota'."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    tenant, name = f"tn-{run}", f"lease-{run}-tenants"
    with replicas(kube_control_plane, tmp_path, run, {}) as (leader, follower):
        with leader.client() as c:
            assert c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2}).status_code == 201
        wait_until(lambda: _quota(follower, tenant) == 2, 120, "the follower to apply A's quota")
        core.delete_namespaced_config_map(name, "default")
        core.create_namespaced_config_map("default", client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name=name), data={}))
        wait_until(lambda: tenant in (_shared(kube_client, run).data or {}), 120, "A written back into it")
        assert json.loads(_shared(kube_client, run).data[tenant])["quota_gpus"] == 2
        for r in (leader, follower):
            wait_until(lambda r=r: _tenancy(r)["applied_version"] == _shared(kube_client, run).metadata
                       .resource_version, 120, "the replica to apply the new object")
            assert _quota(r, tenant) == 2
