"""Pods labelled with a pod group are gangs of the queue (issue 26), on a real kube-apiserver with
``gpucluster up --kubeconfig`` and a test kubelet (``fake_kubelet``) running what is bound:

* bare pods labelled ``scheduling.x-k8s.io/pod-group`` (a PodGroup of ``minMember: 4``) and ``schedulerName:
  gpucluster`` are one queued job of the tenant of their ``gpucluster.io/queue`` label: three members wait for
  the fourth, then the engine admits all 4 pods x 2 GPUs together and the control plane binds them where it
  decided; the tenant's usage counts them while they run; ``get jobs`` shows the job with its pods;
* a pod group over its tenant's quota (our ``gpucluster.io/gang`` annotations, no label: the namespace is the
  tenant) waits with the quota reason, as Events on its pods too, and runs once the quota frees;
* with a secondary scheduler of the same name beside ``up --pod-groups labelled``, the labelled group is the
  control plane's and the unlabelled one the secondary scheduler's: neither binds the other's pods.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fake_kubelet import finish
from k8s_helpers import GPUCLUSTER, Process
from kubernetes import client
from test_k8s_pod_group import GROUP, PLURAL, VERSION, pod_group_crd  # noqa: F401 (a fixture)
from up_process import ADMIN, ControlPlane, wait_until

from gpucluster.kubernetes.gangs import POD_GROUP_LABEL
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION, QUEUE_LABEL, RESERVATION_ANNOTATION

pytestmark = pytest.mark.integration

NS = "default"


def _member(name: str, run: str, *, gpus: int, run_s: float, labels: dict[str, str] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"gpucluster.io/run": run, **(labels or {})},
                     "annotations": dict(annotations or {})},
        "spec": {"schedulerName": "gpucluster", "restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "nodeSelector": {"gpucluster.io/run": run},
                 "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                 "env": [{"name": "FAKE_RUN_S", "value": str(run_s)}],  # inf: until finish()
                                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
    }


def _finish(core: Any, pods: list[dict[str, Any]]) -> None:
    """The pods' containers exit 0 now (they run with ``FAKE_RUN_S=inf``: a test ends them once it has checked
    what it checks while they run, instead of waiting out a fixed run time that a loaded machine may also
    outlast before the checks are done)."""
    assert pods
    for p in pods:
        assert finish(core, NS, p["metadata"]["name"]), f"pod {p['metadata']['name']} is gone"


def _pods(core: Any, selector: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_pod(NS, label_selector=selector, _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _bound(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if p["spec"].get("nodeName")]


def _api_job(server: ControlPlane, name: str) -> dict[str, Any] | None:
    same = [j for j in server.get("/api/v1/jobs", params={"q": name})["jobs"] if j["name"] == name]
    return same[0] if same else None


def _status(server: ControlPlane, name: str, status: str) -> dict[str, Any] | None:
    job = _api_job(server, name)
    return job if job is not None and job["status"] == status else None


def _tenant_row(server: ControlPlane, tenant: str) -> dict[str, Any]:
    rows = [t for t in server.get("/api/v1/tenants")["tenants"] if t["name"] == tenant]
    return rows[0] if rows else {}


def _gc(core: Any, run: str) -> None:
    core.delete_collection_namespaced_pod(NS, label_selector=f"gpucluster.io/run={run}", grace_period_seconds=0)


@pytest.fixture
def server(kube_control_plane: Any, fleet: list[Any], tmp_path: Path) -> Iterator[ControlPlane]:
    srv = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    try:
        yield srv
    finally:
        srv.stop()


@pytest.mark.usefixtures("pod_group_crd")
def test_a_pod_group_of_4_pods_x_2_gpus_is_one_queued_job_admitted_as_a_gang(
        kube_client: Any, run: str, fleet: list[Any], server: ControlPlane) -> None:
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    tenant, group = f"t-{run}", f"bert-{run}"
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": group},
        "spec": {"minMember": 4}})
    labels = {QUEUE_LABEL: tenant, POD_GROUP_LABEL: group}
    selector = f"{POD_GROUP_LABEL}={group}"
    try:
        for i in range(3):
            core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=2, run_s=math.inf, labels=labels))
        waiting = wait_until(lambda: (j := _status(server, group, "pending")) and "3 of 4" in j["message"] and j,
                             60, "three members to wait for the fourth")
        assert waiting["tenant"] == tenant and "minMember 4" in waiting["message"]
        assert not _bound(_pods(core, selector))  # nothing binds before the gang is whole
        core.create_namespaced_pod(NS, _member(f"{group}-3", run, gpus=2, run_s=math.inf, labels=labels))

        pods = wait_until(lambda: (b := _bound(_pods(core, selector))) and len(b) == 4 and b, 60,
                          "the 4 members to be bound as one gang")
        running = wait_until(lambda: _status(server, group, "running"), 30, "the job to run")
        assert running["tenant"] == tenant and running["replicas"] == 4 and running["gpus"] == 8
        nodes = {n.name for n in fleet}
        assert {p["spec"]["nodeName"] for p in pods} == nodes  # 4 x 2 GPUs on 2 x 4: two per node
        devices = [d.split(",")[0] for p in pods
                   for d in p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(";")[0].split(":")
                   if d]
        assert len(devices) == 8 and len(set(devices)) == 8  # each member its own GPUs
        for pod in pods:
            ann = pod["metadata"]["annotations"]
            assert ann["hami.io/vgpu-node"] == pod["spec"]["nodeName"]
            assert ann[RESERVATION_ANNOTATION].startswith(f"{NS}/{running['id']}-")  # a slot of the admission
            assert ann["gpucluster.io/scheduled-by"].startswith("control-plane/")
        # the slots the engine decided are where the pods are
        placed = {p["pod"]: p["node"] for p in running["placements"]}
        assert placed == {f"{NS}/{p['metadata']['name']}": p["spec"]["nodeName"] for p in pods}
        # charged to the tenant while they hold GPUs
        row = wait_until(lambda: (t := _tenant_row(server, tenant)) and t.get("gpus") == 8 and t, 30,
                         "the tenant's usage to count the group")
        assert row["running"] == 1
        listed = json.loads(_cli(server, "get", "jobs", "--tenant", tenant, "-o", "json"))
        rows = listed["jobs"] if isinstance(listed, dict) else listed
        assert [r["name"] for r in rows] == [group]
        _finish(core, pods)  # the members' containers exit now that everything checked while they run is seen
        done = wait_until(lambda: _status(server, group, "succeeded"), 120, "the group to succeed")
        assert "4 pod(s) succeeded" in done["message"]
        assert _tenant_row(server, tenant).get("gpus", 0) == 0
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        _gc(core, run)
        with contextlib.suppress(client.ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, group)


def _cli(server: ControlPlane, *args: str) -> str:
    import subprocess

    out = subprocess.run([*GPUCLUSTER, *args, "--server", server.url, "--token", ADMIN], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_an_over_quota_pod_group_waits_with_the_quota_reason(kube_client: Any, run: str, fleet: list[Any],
                                                             server: ControlPlane) -> None:
    """Our gang annotations, no queue label: the namespace is the tenant (as every pod of this backend is
    charged). Quota 4: the first group (2 x 2 GPUs) runs at it; the second waits with the reason."""
    core = client.CoreV1Api(kube_client)
    tenant = NS
    with server.client() as c:
        r = c.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 4})
        assert r.status_code == 201, r.text
    first, second = f"first-{run}", f"second-{run}"

    def gang(name: str, n: int) -> dict[str, str]:
        return {GANG_ANNOTATION: name, GANG_MIN_ANNOTATION: str(n)}

    try:
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{first}-{i}", run, gpus=2, run_s=math.inf,
                                                   annotations=gang(first, 2)))
        wait_until(lambda: _status(server, first, "running"), 60, "the group at its quota to run")
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{second}-{i}", run, gpus=1, run_s=1,
                                                   annotations=gang(second, 2)))
        why = f"waiting for quota: tenant {tenant} holds 4 of 4 GPUs, the job needs 2"
        held = wait_until(lambda: (j := _status(server, second, "pending")) and why in j["message"] and j, 60,
                          "the group over its quota to wait, saying why")
        assert held["tenant"] == tenant and held["replicas"] == 2
        row = _tenant_row(server, tenant)
        assert row["gpus"] == 4 and row["pending_gpus"] == 2  # the running group is charged, the waiting one asks
        assert not [p for p in _bound(_pods(core, f"gpucluster.io/run={run}"))
                    if p["metadata"]["name"].startswith(second)]

        def waiting_events() -> list[dict[str, Any]]:
            resp = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={second}-0",
                                              _preload_content=False)
            return [e for e in json.loads(resp.data)["items"] if e["reason"] == "Waiting" and why in e["message"]]

        wait_until(waiting_events, 30, "the reason as an Event on the waiting pods")
        _finish(core, [p for p in _pods(core, f"gpucluster.io/run={run}") if p["metadata"]["name"].startswith(first)])
        wait_until(lambda: _status(server, second, "succeeded"), 120, "the waiting group to run after the first")
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        _gc(core, run)


def test_the_secondary_scheduler_never_binds_the_queue_s_pods(kube_control_plane: Any, kube_client: Any, run: str,
                                                             fleet: list[Any], tmp_path: Path) -> None:
    """Who binds what when both run with the scheduler name ``gpucluster``: ``up --pod-groups labelled`` queues
    and binds the group labelled ``gpucluster.io/queue``; the secondary scheduler binds the unlabelled group and
    leaves the labelled one alone."""
    core = client.CoreV1Api(kube_client)
    cp = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect", "--pod-groups", "labelled")
    sched = Process(["k8s", "scheduler", "--kubeconfig", str(kube_control_plane.kubeconfig), "--scheduler-name",
                     "gpucluster", "--namespace", NS, "--lease-name", f"sched-{run}", "--lease-duration", "3",
                     "--handshake-timeout", "600"], tmp_path / "sched.log").start()
    queued, theirs = f"queued-{run}", f"theirs-{run}"
    try:
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{queued}-{i}", run, gpus=2, run_s=60, annotations={
                GANG_ANNOTATION: queued, GANG_MIN_ANNOTATION: "2"}, labels={QUEUE_LABEL: f"q-{run}"}))
            core.create_namespaced_pod(NS, _member(f"{theirs}-{i}", run, gpus=1, run_s=60, annotations={
                GANG_ANNOTATION: theirs, GANG_MIN_ANNOTATION: "2"}))
        pods = wait_until(lambda: (b := _bound(_pods(core, f"gpucluster.io/run={run}"))) and len(b) == 4 and b, 90,
                          "both groups to be bound")
        by = {p["metadata"]["name"]: p["metadata"]["annotations"] for p in pods}
        for i in range(2):
            assert by[f"{queued}-{i}"]["gpucluster.io/scheduled-by"].startswith("control-plane/")
            assert RESERVATION_ANNOTATION in by[f"{queued}-{i}"]
            assert not by[f"{theirs}-{i}"]["gpucluster.io/scheduled-by"].startswith("control-plane/")
            assert RESERVATION_ANNOTATION not in by[f"{theirs}-{i}"]
        job = wait_until(lambda: _status(cp, queued, "running"), 30, "the labelled group to run as a job")
        assert job["tenant"] == f"q-{run}"
        assert _api_job(cp, theirs) is None  # not the queue's
        assert "Traceback" not in sched.log()
    except BaseException:
        print(cp.output()[-4000:])
        print(sched.log()[-3000:])
        raise
    finally:
        sched.stop()
        cp.stop()
        _gc(core, run)


def test_a_reused_pod_group_name_gets_a_new_id_the_same_on_every_replica(
        kube_control_plane: Any, kube_client: Any, run: str, fleet: list[Any], tmp_path: Path) -> None:
    """A pod group runs and succeeds; its pods are deleted and made again under the same names (a user re-running
    the same manifest). The new group is a new job (the first keeps its id and its success), and its id is the same
    on the leader and on a replica started after the first group ended (the id comes from the new members, not
    from what a replica happened to see; before, the leader named it after the first job's id and, having
    forgotten the group once its pods were gone, reused that very id)."""
    core = client.CoreV1Api(kube_client)
    group = f"again-{run}"
    args = ("--lease-name", f"lease-{run}", "--lease-duration", "3")
    gang = {GANG_ANNOTATION: group, GANG_MIN_ANNOTATION: "2"}
    labels = {QUEUE_LABEL: f"t-{run}"}
    first = ControlPlane(kube_control_plane.kubeconfig, tmp_path, *args, "--identity", "r0", data="r0")
    replicas = [first]
    try:
        wait_until(first.leading, 60, "the first replica to lead")
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=1, run_s=1, labels=labels,
                                                   annotations=gang))
        done = wait_until(lambda: _status(first, group, "succeeded"), 90, "the first run of the group to succeed")
        _gc(core, run)
        wait_until(lambda: not _pods(core, f"gpucluster.io/run={run}"), 60, "the first run's pods to be gone")
        second = ControlPlane(kube_control_plane.kubeconfig, tmp_path, *args, "--identity", "r1", data="r1")
        replicas.append(second)
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=1, run_s=600, labels=labels,
                                                   annotations=gang))

        def again(r: ControlPlane) -> dict[str, Any] | None:
            return next((j for j in r.get("/api/v1/jobs", params={"q": group, "limit": 50})["jobs"]
                         if j["name"] == group and j["id"] != done["id"] and j["status"] == "running"), None)

        led = wait_until(lambda: again(first), 60, "the leader to run the reused name as a new job")
        followed = wait_until(lambda: again(second), 60, "the follower to show the new job")
        assert followed["id"] == led["id"] != done["id"]
        same_name = {j["id"]: j["status"] for j in first.get("/api/v1/jobs", params={"q": group, "limit": 50})["jobs"]
                     if j["name"] == group}
        assert same_name == {done["id"]: "succeeded", led["id"]: "running"}
    except BaseException:
        for r in replicas:
            print(r.output()[-4000:])
        raise
    finally:
        for r in replicas:
            r.stop()
        _gc(core, run)


@pytest.mark.usefixtures("pod_group_crd")
def test_members_beyond_min_member_are_bound_once_the_gang_runs_and_charged(
        kube_client: Any, run: str, fleet: list[Any], server: ControlPlane) -> None:
    """A PodGroup of ``minMember: 2`` with 3 members of 2 GPUs: the gang of 2 is admitted; the third member, beyond
    ``minMember``, is bound too once the gang runs (as coscheduling binds members past its minimum), by its own
    decision on free devices, and its GPUs are charged to the tenant; the job succeeds when all three have.
    Before, the third member stayed pending for ever."""
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    tenant, group = f"t-{run}", f"extra-{run}"
    custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": group},
        "spec": {"minMember": 2}})
    labels = {QUEUE_LABEL: tenant, POD_GROUP_LABEL: group}
    selector = f"{POD_GROUP_LABEL}={group}"
    try:
        for i in range(3):
            core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=2, run_s=math.inf, labels=labels))
        pods = wait_until(lambda: (b := _bound(_pods(core, selector))) and len(b) == 3 and b, 60,
                          "the gang of 2 and the member beyond minMember to be bound")
        running = wait_until(lambda: _status(server, group, "running"), 30, "the job to run")
        assert running["replicas"] == 2  # the gang is minMember pods; the third runs beside it
        devices = [d.split(",")[0] for p in pods
                   for d in p["metadata"]["annotations"]["hami.io/vgpu-devices-allocated"].split(";")[0].split(":")
                   if d]
        assert len(devices) == 6 and len(set(devices)) == 6  # each member its own GPUs
        row = wait_until(lambda: (t := _tenant_row(server, tenant)) and t.get("gpus") == 6 and t, 30,
                         "the tenant charged the third member's GPUs too")
        assert row["running"] == 1
        _finish(core, pods)
        done = wait_until(lambda: _status(server, group, "succeeded"), 120, "the group to succeed")
        assert {p["status"]["phase"] for p in _pods(core, selector)} == {"Succeeded"}
        assert done["id"] == running["id"]
        wait_until(lambda: _tenant_row(server, tenant).get("gpus", 0) == 0, 30, "the tenant's GPUs freed")
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        _gc(core, run)
        with contextlib.suppress(client.ApiException):
            custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, group)


@pytest.mark.usefixtures("pod_group_crd")
def test_members_beyond_min_member_are_readopted_after_a_kill_9_not_lost_nor_bound_twice(
        kube_control_plane: Any, kube_client: Any, run: str, fleet: list[Any], tmp_path: Path) -> None:
    """A PodGroup of ``minMember: 2`` with 3 members of 2 GPUs runs (the third bound beyond ``minMember``); the
    control plane is killed (-9) and started again: the restarted one adopts the group as the same running job,
    leaves the three pods where they are (same nodes and devices, no new reservation: nothing bound twice),
    charges the tenant the third member's GPUs again, and counts them as held: a pod group of one 4-GPU member
    created after the restart waits (2 GPUs are free, not the 4 a lost member would leave), and runs once the
    first group has ended. The job succeeds with all three of its pods."""
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    tenant, group, late = f"t-{run}", f"extra-{run}", f"late-{run}"
    for name, size in ((group, 2), (late, 1)):
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"minMember": size}})
    labels = {QUEUE_LABEL: tenant, POD_GROUP_LABEL: group}
    selector = f"{POD_GROUP_LABEL}={group}"
    first = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
    second: ControlPlane | None = None
    try:
        for i in range(3):
            core.create_namespaced_pod(NS, _member(f"{group}-{i}", run, gpus=2, run_s=math.inf, labels=labels))
        before = wait_until(lambda: (b := _bound(_pods(core, selector))) and len(b) == 3 and b, 60,
                            "the gang of 2 and the member beyond minMember to be bound")
        running = wait_until(lambda: _status(first, group, "running"), 30, "the job to run")
        extra = [p for p in before if p["metadata"]["annotations"][RESERVATION_ANNOTATION].endswith("-extra")]
        assert len(extra) == 1
        first.kill()

        second = ControlPlane(kube_control_plane.kubeconfig, tmp_path, "--no-leader-elect")
        again = wait_until(lambda: _status(second, group, "running"), 30, "the restarted control plane to adopt it")
        assert again["id"] == running["id"] and again["replicas"] == 2
        row = wait_until(lambda: (t := _tenant_row(second, tenant)) and t.get("gpus") == 6 and t, 30,
                         "the tenant charged the 3 members' 6 GPUs after the restart")
        assert row["running"] == 1
        # the late group's one member asks for 4 GPUs: 2 are free, so it waits
        core.create_namespaced_pod(NS, _member(f"{late}-0", run, gpus=4, run_s=1,
                                               labels={QUEUE_LABEL: tenant, POD_GROUP_LABEL: late}))
        waiting = wait_until(lambda: _status(second, late, "pending"), 30, "the late group queued")
        assert not _bound(_pods(core, f"{POD_GROUP_LABEL}={late}"))
        after = {p["metadata"]["name"]: p for p in _bound(_pods(core, selector))}
        assert len(after) == 3
        for p in before:  # nothing moved or bound again: the same pod on the same node with the same devices
            now = after[p["metadata"]["name"]]
            assert now["metadata"]["uid"] == p["metadata"]["uid"] and now["spec"]["nodeName"] == p["spec"]["nodeName"]
            for key in (RESERVATION_ANNOTATION, "hami.io/vgpu-devices-allocated"):
                assert now["metadata"]["annotations"][key] == p["metadata"]["annotations"][key]
        assert waiting["id"] != running["id"]
        _finish(core, before)
        done = wait_until(lambda: _status(second, group, "succeeded"), 120, "the group to succeed")
        assert done["id"] == running["id"] and "3 pod(s) succeeded (1 beyond minMember)" in done["message"]
        wait_until(lambda: _status(second, late, "succeeded"), 60, "the late group to run once the GPUs are free")
    except BaseException:
        print(first.output()[-4000:])
        if second is not None:
            print(second.output()[-6000:])
        raise
    finally:
        first.stop()
        if second is not None:
            second.stop()
        _gc(core, run)
        for name in (group, late):
            with contextlib.suppress(client.ApiException):
                custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)


def _pod_events(core: Any, name: str, reason: str) -> list[dict[str, Any]]:
    resp = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}", _preload_content=False)
    return [e for e in json.loads(resp.data)["items"] if e["reason"] == reason]


@pytest.mark.usefixtures("pod_group_crd")
def test_a_pod_group_label_change_moves_a_waiting_member_and_never_a_bound_one(
        kube_client: Any, run: str, fleet: list[Any], server: ControlPlane) -> None:
    """Tenant quota 2, held by a running blocker group. PodGroup A (minMember 2, members a-0 and a-1 of 1 GPU)
    waits for quota. a-1 relabelled to PodGroup B (minMember 1): it leaves A (a ``LeftGroup`` Event), A has 1 of 2
    members and goes back to waiting for its pods (never admitted short, a-0 never bound), B is queued with a-1
    and runs once the blocker ends. a-1, bound, relabelled to PodGroup C: it stays B's (a ``Relabelled`` Event),
    B runs on, no job for C. a-0's label removed: a pod of no group (``LeftGroup``), never bound. Before, A stayed
    queued for 2 slots (admitted with a-0 alone) and a bound member's new label cancelled its running group."""
    core = client.CoreV1Api(kube_client)
    custom = client.CustomObjectsApi(kube_client)
    tenant = f"t-{run}"
    block, a, b, c = f"block-{run}", f"a-{run}", f"b-{run}", f"c-{run}"
    with server.client() as http:
        r = http.post("/api/v1/tenants", json={"name": tenant, "quota_gpus": 2})
        assert r.status_code == 201, r.text
    for name, size in ((a, 2), (b, 1), (c, 1)):
        custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup", "metadata": {"name": name},
            "spec": {"minMember": size}})

    def relabel(pod: str, group: str | None) -> None:
        core.patch_namespaced_pod(pod, NS, {"metadata": {"labels": {POD_GROUP_LABEL: group}}})

    def node_of(pod: str) -> str:
        return str(core.read_namespaced_pod(pod, NS).spec.node_name or "")

    try:
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{block}-{i}", run, gpus=1, run_s=600, labels={
                QUEUE_LABEL: tenant}, annotations={GANG_ANNOTATION: block, GANG_MIN_ANNOTATION: "2"}))
        wait_until(lambda: _status(server, block, "running"), 60, "the blocker to run at the tenant's quota")
        for i in range(2):
            core.create_namespaced_pod(NS, _member(f"{a}-{i}", run, gpus=1, run_s=600, labels={
                QUEUE_LABEL: tenant, POD_GROUP_LABEL: a}))
        queued = wait_until(lambda: (j := _status(server, a, "pending")) and "waiting for quota" in j["message"]
                            and j, 60, "group A to wait for quota")

        relabel(f"{a}-1", b)
        [left] = wait_until(lambda: _pod_events(core, f"{a}-1", "LeftGroup"), 90, "a LeftGroup Event on a-1")
        assert f"left pod group {NS}/{a} before it was bound" in left["message"]
        assert f"now names pod group {NS}/{b}" in left["message"]
        back = wait_until(lambda: (j := _status(server, a, "pending")) and "1 of 2 created" in j["message"] and j,
                          90, "group A to wait for its pods again")
        assert back["id"] == queued["id"]  # the same job, waiting again (its oldest member stayed)
        wait_until(lambda: _status(server, b, "pending"), 60, "group B queued with a-1")

        core.delete_collection_namespaced_pod(NS, label_selector=f"gpucluster.io/run={run},{POD_GROUP_LABEL}!={a}"
                                              f",{POD_GROUP_LABEL}!={b}", grace_period_seconds=0)
        running = wait_until(lambda: _status(server, b, "running"), 90, "group B to run once the blocker is gone")
        wait_until(lambda: node_of(f"{a}-1"), 60, "a-1 to be bound")
        assert not node_of(f"{a}-0")  # A has one member of two: never admitted short
        assert "1 of 2 created" in (_status(server, a, "pending") or {}).get("message", "")

        relabel(f"{a}-1", c)
        [told] = wait_until(lambda: _pod_events(core, f"{a}-1", "Relabelled"), 90, "a Relabelled Event on a-1")
        assert f"it stays a member of pod group {NS}/{b}" in told["message"]
        relabel(f"{a}-0", None)
        left_a0 = wait_until(lambda: _pod_events(core, f"{a}-0", "LeftGroup"), 90, "a LeftGroup Event on a-0")
        assert "a pod of no group is not the queue's" in left_a0[0]["message"]
        still = _status(server, b, "running")
        assert still is not None and still["id"] == running["id"]
        assert _api_job(server, c) is None  # a bound member never makes a job of its new group
        assert not node_of(f"{a}-0")
        assert _tenant_row(server, tenant).get("gpus") == 1
    except BaseException:
        print(server.output()[-6000:])
        raise
    finally:
        _gc(core, run)
        for name in (a, b, c):
            with contextlib.suppress(client.ApiException):
                custom.delete_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, name)
