"""Failover for the gangs that are not batch/v1 Jobs (issue 26): two ``gpucluster up --kubeconfig`` replicas on a
Lease; each round a pod group (bare pods labelled ``scheduling.x-k8s.io/pod-group``, a PodGroup of ``minMember:
2``) and a JobSet (2 pods) are created and the leader is killed -9 while it admits them, five rounds: no gang is
admitted twice (a JobSet carries one admission; a pod group's members are all bound into the slots of one
admission) and none is lost (every one succeeds, and both live replicas list it as succeeded).

Real kube-apiserver and kube-controller-manager's Job controller; the test kubelet stand-in runs what is bound;
this test plays the JobSet controller (:class:`Watcher`: the child Jobs once a JobSet is released, its
``Completed`` condition once they completed)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch
from test_k8s_failover import LEASE_S
from test_k8s_gang_bind import BindRefuser, register_webhook
from test_k8s_jobset import GROUP as JS_GROUP
from test_k8s_jobset import PLURAL as JS_PLURAL
from test_k8s_jobset import VERSION as JS_VERSION
from test_k8s_jobset import _jobset, _play_jobset_controller_create, jobset_crd  # noqa: F401 (a fixture)
from test_k8s_pod_group import GROUP as PG_GROUP
from test_k8s_pod_group import PLURAL as PG_PLURAL
from test_k8s_pod_group import VERSION as PG_VERSION
from test_k8s_pod_group import pod_group_crd  # noqa: F401 (a fixture)
from test_k8s_pod_group_queue import _member
from up_process import ControlPlane, gpu_nodes, kubelet_fleet, leader_of, new_run, wait_until

from gpucluster.kubernetes.gangs import POD_GROUP_LABEL
from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, JOBSET_NAME_LABEL, QUEUE_LABEL, Admission
from gpucluster.model.labels import RESERVATION_ANNOTATION

pytestmark = pytest.mark.integration

NS = "default"
ROUNDS = 5


def _list_watch(stop: threading.Event, lister: Callable[..., Any], seen: Callable[[dict[str, Any]], None],
                **kw: Any) -> None:
    """List then watch what ``lister`` lists (again after any error), calling ``seen`` with each object."""
    while not stop.is_set():
        try:
            body = json.loads(lister(_preload_content=False, **kw).data)
            for obj in body["items"]:
                seen(obj)
            w = watch.Watch()  # type: ignore[no-untyped-call]
            for ev in w.stream(lister, resource_version=body["metadata"]["resourceVersion"], deserialize=False,
                               timeout_seconds=30, **kw):
                if stop.is_set():
                    return
                if ev.get("type") in ("ADDED", "MODIFIED"):
                    seen(ev.get("raw_object") or ev.get("object") or {})
        except Exception:
            stop.wait(0.2)


class Watcher:
    """Records every JobSet admission (by whom) and each pod group member's bind (its reservation and who bound
    it), and plays the JobSet controller for the tenant's JobSets."""

    def __init__(self, api: Any, tenant: str) -> None:
        self.custom: Any = client.CustomObjectsApi(api)
        self.batch: Any = client.BatchV1Api(api)
        self.core: Any = client.CoreV1Api(api)
        self.selector = f"{QUEUE_LABEL}={tenant}"
        self.set_admissions: dict[str, dict[str, str]] = defaultdict(dict)
        """JobSet name -> admission id -> the replica that wrote it."""
        self.binds: dict[str, dict[str, tuple[str, str]]] = defaultdict(dict)
        """Pod group -> member -> (its reservation, who bound it)."""
        self.completed: set[str] = set()
        """JobSets marked Completed."""
        self.children: dict[str, list[str]] = {}
        self.pods_done: dict[str, set[str]] = defaultdict(set)
        """Pod group -> its members that succeeded."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=_list_watch, daemon=True, args=(
                self._stop, self.core.list_namespaced_pod, self._pod), kwargs={
                "namespace": NS, "label_selector": self.selector}),
            threading.Thread(target=_list_watch, daemon=True, args=(
                self._stop, lambda **kw: self.custom.list_namespaced_custom_object(
                    JS_GROUP, JS_VERSION, NS, JS_PLURAL, **kw), self._jobset), kwargs={
                "label_selector": self.selector}),
            threading.Thread(target=self._complete_jobsets, daemon=True),
        ]
        for t in self._threads:
            t.start()

    def _pod(self, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        ann = meta.get("annotations") or {}
        if not group or not (pod.get("spec") or {}).get("nodeName"):
            return
        with self._lock:
            self.binds[group][meta["name"]] = (str(ann.get(RESERVATION_ANNOTATION) or ""),
                                               str(ann.get("gpucluster.io/scheduled-by") or ""))
            if (pod.get("status") or {}).get("phase") == "Succeeded":
                self.pods_done[group].add(meta["name"])

    def _jobset(self, js: dict[str, Any]) -> None:
        meta = js.get("metadata") or {}
        name = str(meta.get("name"))
        raw = (meta.get("annotations") or {}).get(ADMISSION_ANNOTATION)
        with self._lock:
            if raw:
                adm = Admission.parse(raw, name)
                self.set_admissions[name][adm.id] = adm.by
            make = raw and not (js.get("spec") or {}).get("suspend") and name not in self.children
            if make:
                self.children[name] = []
        if make:  # the JobSet controller's part: the child Jobs of a released JobSet
            made = _play_jobset_controller_create(self.batch, js)
            with self._lock:
                self.children[name] = made

    def _complete_jobsets(self) -> None:
        """The JobSet controller's part: a JobSet whose child Jobs all completed is Completed."""
        while not self._stop.wait(0.5):
            with self._lock:
                todo = {n: list(c) for n, c in self.children.items() if c and n not in self.completed}
            try:
                body = json.loads(self.batch.list_namespaced_job(NS, label_selector=JOBSET_NAME_LABEL,
                                                                 _preload_content=False).data)
            except Exception:
                continue
            complete = {j["metadata"]["name"] for j in body["items"] if any(
                c["type"] == "Complete" and c["status"] == "True" for c in j["status"].get("conditions") or [])}
            for name, kids in todo.items():
                if set(kids) <= complete:
                    try:
                        self.custom.patch_namespaced_custom_object(JS_GROUP, JS_VERSION, NS, JS_PLURAL, name, {
                            "status": {"conditions": [{"type": "Completed", "status": "True",
                                                       "reason": "AllJobsCompleted", "message": "done"}]}})
                    except Exception:
                        continue
                    with self._lock:
                        self.completed.add(name)

    def admitted_by(self, jobsets: list[str], groups: list[str]) -> set[str]:
        """Who admitted any of these JobSets or bound a member of any of these groups."""
        with self._lock:
            out = {by for n in jobsets for by in self.set_admissions.get(n, {}).values()}
            out |= {by.removeprefix("control-plane/") for g in groups for _r, by in self.binds.get(g, {}).values()}
            return out

    def stop(self) -> None:
        self._stop.set()


def test_kill_9_of_the_leader_while_it_admits_pod_groups_and_jobsets_loses_none_and_admits_none_twice(
        kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any, pod_group_crd: None,  # noqa: F811
        jobset_crd: None, tmp_path: Path) -> None:  # noqa: F811
    cp = kube_control_plane
    run = new_run()
    tenant = f"hg-{run}"
    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    args = ("--lease-name", f"lease-{run}", "--lease-duration", str(LEASE_S))
    groups: list[str] = []
    jobsets: list[str] = []
    takeovers: list[float] = []
    with kubelet_fleet(kube_client, gpu_nodes(run, 2, 4), tmp_path):
        watcher = Watcher(kube_client, tenant)
        replicas = [ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", f"r{i}", data=f"r{i}")
                    for i in range(2)]
        everyone = list(replicas)
        try:
            leader = wait_until(lambda: leader_of(replicas), 60, "one replica to lead")
            for rnd in range(ROUNDS):
                group, jobset = f"pg{rnd}-{run}", f"js{rnd}-{run}"
                groups.append(group)
                jobsets.append(jobset)
                custom.create_namespaced_custom_object(PG_GROUP, PG_VERSION, NS, PG_PLURAL, {
                    "apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": "PodGroup", "metadata": {"name": group},
                    "spec": {"minMember": 2}})
                js = _jobset(jobset, tenant, run, replicas=1, parallelism=2, gpus=1)
                js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"] = [
                    {"name": "FAKE_RUN_S", "value": "2"}]
                custom.create_namespaced_custom_object(JS_GROUP, JS_VERSION, NS, JS_PLURAL, js)
                for i in range(2):
                    core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=1, run_s=2, labels={
                        QUEUE_LABEL: tenant, POD_GROUP_LABEL: group}))
                me = leader.overview()["kubernetes"]["identity"]
                wait_until(lambda g=group, j=jobset, m=me: m in watcher.admitted_by([j], [g]), 60,
                           f"round {rnd}: the leader {me} to admit the new JobSet or bind a member of the new group")
                leader.kill()  # while it admits (and binds) the rest of the round
                killed_at = time.monotonic()
                replicas.remove(leader)
                fresh = ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", f"r{rnd + 2}", data=f"r{rnd + 2}",
                                     wait=False)
                replicas.append(fresh)
                everyone.append(fresh)
                leader = wait_until(lambda: leader_of(replicas), 90, f"round {rnd}: the follower to take over")
                takeovers.append(time.monotonic() - killed_at)
                wait_until(fresh.healthy, 90, f"round {rnd}: the new replica to follow")

            def all_done() -> bool:
                with watcher._lock:
                    return set(jobsets) <= watcher.completed and all(
                        len(watcher.pods_done.get(g, ())) == 2 for g in groups)

            wait_until(all_done, 240, "every JobSet to complete and every pod group's members to succeed")
            twice = {n: ids for n, ids in watcher.set_admissions.items() if len(ids) > 1}
            assert twice == {}, twice
            for g in groups:  # one admission per group: its members' reservations name one job and one run
                runs = {r.partition("/")[2].rsplit("-", 1)[0] for r, _by in watcher.binds[g].values()}
                assert len(runs) == 1 and "" not in runs, (g, watcher.binds[g])
            # none lost: both live replicas list every gang as succeeded, once
            for r in replicas:
                def listed(r: ControlPlane = r) -> bool:
                    if not r.healthy():
                        return False
                    jobs = r.get("/api/v1/jobs", params={"tenant": tenant, "limit": 500})["jobs"]
                    names = [j["name"] for j in jobs if j["status"] == "succeeded"]
                    # the difference goes into the timeout's message: what is missing, doubled or not succeeded
                    assert sorted(names) == sorted(groups + jobsets), [
                        (j["name"], j["id"], j["status"], j["message"]) for j in jobs
                        if j["status"] != "succeeded" or names.count(j["name"]) != 1] + [
                        n for n in groups + jobsets if n not in names]
                    return True
                wait_until(listed, 60, f"{r.log.name}: every gang listed once, as succeeded")
            follower = next(r for r in replicas if r is not leader)
            assert not follower.leading()
            print(f"failover of gangs: {ROUNDS} rounds of kill -9, takeover after "
                  f"{', '.join(f'{t:.1f}' for t in takeovers)} s (lease {LEASE_S} s); {len(groups)} pod groups and "
                  f"{len(jobsets)} JobSets, each admitted once, none lost")
        except BaseException:
            for r in everyone:
                print(f"---- {r.log.name}\n{r.output()[-4000:]}")
            print("binds:", dict(watcher.binds), "\njobset admissions:", dict(watcher.set_admissions))
            for r in replicas:
                with contextlib.suppress(Exception):
                    print(f"---- {r.log.name} lists:", [(j["name"], j["id"], j["status"], j["message"]) for j in r.get(
                        "/api/v1/jobs", params={"tenant": tenant, "limit": 500})["jobs"]])
            raise
        finally:
            watcher.stop()
            for r in everyone:
                r.stop()
            core.delete_collection_namespaced_pod(NS, label_selector=f"gpucluster.io/run={run}",
                                                  grace_period_seconds=0)
            for name in jobsets:
                with contextlib.suppress(client.ApiException):
                    custom.delete_namespaced_custom_object(JS_GROUP, JS_VERSION, NS, JS_PLURAL, name)
            if jobsets:
                client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                    NS, label_selector=f"{JOBSET_NAME_LABEL} in ({','.join(jobsets)})",
                    propagation_policy="Background")
            for name in groups:
                with contextlib.suppress(client.ApiException):
                    custom.delete_namespaced_custom_object(PG_GROUP, PG_VERSION, NS, PG_PLURAL, name)
            subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "delete", "lease",
                            f"lease-{run}", "--ignore-not-found"], capture_output=True, check=False, timeout=60)


def test_a_group_whose_leader_died_between_binds_is_finished_by_a_replica_started_after_its_bound_member_ended(
        kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any, pod_group_crd: None,  # noqa: F811
        tmp_path: Path) -> None:
    """The leader binds the first member of a two-pod group and dies while the API server holds the second
    member's binding (a Binding webhook that hangs, then refuses it); the first member runs and succeeds. A replica
    started only then finds a group with one member ended and one waiting: it is the same admission, not over (it
    was read as cancelled, and the waiting member was never bound): the new replica binds the waiting member into
    the dead leader's run, and the group succeeds, listed once."""
    cp = kube_control_plane
    run = new_run()
    tenant = f"hb-{run}"
    group = f"pg-{run}"
    custom = client.CustomObjectsApi(kube_client)
    core = client.CoreV1Api(kube_client)
    args = ("--lease-name", f"lease-{run}", "--lease-duration", str(LEASE_S))
    refuser = BindRefuser(NS, tmp_path)
    refuser.hold_prefix, refuser.hold_real_number = f"{group}-", 2  # the group's second real binding
    replicas: list[ControlPlane] = []
    webhook = ""
    with kubelet_fleet(kube_client, gpu_nodes(run, 2, 4), tmp_path) as fleet:
        try:
            webhook = register_webhook(kube_client, refuser, fleet[0].name, "gpucluster", run)
            first = ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", "r0", data="r0")
            replicas.append(first)
            wait_until(first.leading, 60, "the only replica to lead")
            custom.create_namespaced_custom_object(PG_GROUP, PG_VERSION, NS, PG_PLURAL, {
                "apiVersion": f"{PG_GROUP}/{PG_VERSION}", "kind": "PodGroup", "metadata": {"name": group},
                "spec": {"minMember": 2}})
            for i in range(2):
                core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=1, run_s=1, labels={
                    QUEUE_LABEL: tenant, POD_GROUP_LABEL: group}))
            assert refuser.holding.wait(60), "the leader never bound the group's second member"
            first.kill()
            refuser.release.set()  # the held binding is refused: its pod stays unbound
            selector = f"{POD_GROUP_LABEL}={group}"

            def one_ended_one_waiting() -> list[dict[str, Any]]:
                pods = core.list_namespaced_pod(NS, label_selector=selector).items
                done = [p for p in pods if p.spec.node_name and p.status.phase == "Succeeded"]
                waiting = [p for p in pods if not p.spec.node_name]
                return done if len(done) == 1 and len(waiting) == 1 else []

            done = wait_until(one_ended_one_waiting, 60, "the bound member to succeed, the other to stay unbound")
            reservation = done[0].metadata.annotations[RESERVATION_ANNOTATION]
            fresh = ControlPlane(cp.kubeconfig, tmp_path, *args, "--identity", "r1", data="r1")
            replicas.append(fresh)

            def both_succeeded() -> bool:
                pods = core.list_namespaced_pod(NS, label_selector=selector).items
                return len(pods) == 2 and all(p.status.phase == "Succeeded" for p in pods)

            wait_until(both_succeeded, 90, "the new replica to bind the waiting member and the group to succeed")
            pods = core.list_namespaced_pod(NS, label_selector=selector).items
            runs = {p.metadata.annotations[RESERVATION_ANNOTATION].rsplit("-", 1)[0] for p in pods}
            assert runs == {reservation.rsplit("-", 1)[0]}, runs  # the dead leader's admission, its two slots

            def listed() -> bool:
                jobs = fresh.get("/api/v1/jobs", params={"tenant": tenant, "limit": 50})["jobs"]
                assert [(j["name"], j["status"]) for j in jobs] == [(group, "succeeded")], jobs
                return True

            wait_until(listed, 60, "the group listed once, as succeeded")
        except BaseException:
            for r in replicas:
                print(f"---- {r.log.name}\n{r.output()[-4000:]}")
            print("webhook reviews:", refuser.seen())
            raise
        finally:
            refuser.release.set()
            for r in replicas:
                r.stop()
            if webhook:
                client.AdmissionregistrationV1Api(kube_client).delete_validating_webhook_configuration(webhook)
            refuser.close()
            core.delete_collection_namespaced_pod(NS, label_selector=f"gpucluster.io/run={run}",
                                                  grace_period_seconds=0)
            with contextlib.suppress(client.ApiException):
                custom.delete_namespaced_custom_object(PG_GROUP, PG_VERSION, NS, PG_PLURAL, group)
            subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), "delete", "lease",
                            f"lease-{run}", "--ignore-not-found"], capture_output=True, check=False, timeout=60)
