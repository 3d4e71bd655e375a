"""Users' real workloads through the queue (issue 26), on a real kube-apiserver with kube-controller-manager's Job
controller making the pods and a test kubelet (``fake_kubelet``) running them:

* ``kubectl apply -f job.yaml`` with ``gpucluster.io/queue``: a Job of 4 pods x 2 GPUs is admitted as a gang,
  its pods bound where the engine decided, run, succeeded, shown in ``get jobs`` with its pods;
* an over-quota Job waits and says why (in ``get jobs``, as an Event and an annotation on the Job); one that
  can never fit is refused with a Warning Event on the Job; a Job created without ``suspend`` is still queued
  before any of its pods binds; a failing container fails the job with its exit code;
* the fragmented-admission comparison: enough free GPUs in total but no node can hold the pods; count-only
  admission (the engine with the device check off, as Kueue admits) lets the job in and it hangs; ours keeps
  it waiting with the reason and admits the next job that fits;
* jobs of the REST API become indexed Jobs running their image, command and environment; ``gpucluster logs``.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fake_kubelet import finish
from k8s_helpers import GPUCLUSTER
from up_process import ADMIN, ControlPlane, gpu_nodes, kubelet_fleet, serving, ticking, wait_until

from gpucluster.kubernetes.workloads import ADMISSION_ANNOTATION, QUEUE_LABEL, Admission

pytestmark = pytest.mark.integration

NS = "default"


@pytest.fixture
def cp_with_jobs(kube_control_plane: Any, kube_controller_manager: Any) -> Any:
    """The control plane with kube-controller-manager (the Job controller makes the pods)."""
    return kube_control_plane


def _kubectl(cp: Any, *args: str, stdin: str | None = None) -> str:
    out = subprocess.run([str(cp.bin_dir / "kubectl"), "--kubeconfig", str(cp.kubeconfig), *args], input=stdin,
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


def job_yaml(name: str, tenant: str, run: str, *, pods: int, gpus: int, suspend: bool = True,
             env: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> str:
    """A complete batch/v1 Job for the queue (what docs/kubernetes.md shows)."""
    doc = {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": NS, "labels": {QUEUE_LABEL: tenant},
                     "annotations": dict(annotations or {})},
        "spec": {
            **({"suspend": True} if suspend else {}),
            "parallelism": pods, "completions": pods, "completionMode": "Indexed", "backoffLimit": 0,
            "template": {"spec": {
                "schedulerName": "gpucluster", "restartPolicy": "Never",
                "nodeSelector": {"gpucluster.io/run": run},
                "containers": [{"name": "train", "image": "registry.example/ml/train:v1",
                                "command": ["python", "train.py"],
                                "env": [{"name": k, "value": v} for k, v in (env or {}).items()],
                                "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}},
        },
    }
    # JSON, which kubectl reads as YAML: a YAML dump would leave a run id like '5e1234' unquoted and the API
    # server's YAML reader would take it for a number
    return json.dumps(doc, indent=2) + "\n"  # ends its line: documents are joined with '---' lines


def _job(core_batch: Any, name: str) -> dict[str, Any]:
    resp = core_batch.read_namespaced_job(name, NS, _preload_content=False)
    return dict(json.loads(resp.data))


def _pods_of(kube: Any, job_name: str) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.CoreV1Api(kube).list_namespaced_pod(NS, label_selector=f"batch.kubernetes.io/job-name={job_name}",
                                                      _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _events_of(kube: Any, job_name: str) -> list[dict[str, Any]]:
    from kubernetes import client

    resp = client.CoreV1Api(kube).list_namespaced_event(
        NS, field_selector=f"involvedObject.name={job_name},involvedObject.kind=Job", _preload_content=False)
    return list(json.loads(resp.data)["items"])


def _gc_jobs(kube: Any, tenant: str) -> None:
    from kubernetes import client

    client.BatchV1Api(kube).delete_collection_namespaced_job(NS, label_selector=f"{QUEUE_LABEL}={tenant}",
                                                             propagation_policy="Background")
    client.CoreV1Api(kube).delete_collection_namespaced_pod(NS, label_selector=f"{QUEUE_LABEL}={tenant}",
                                                            grace_period_seconds=0)


def _cli(server: ControlPlane, *args: str) -> Any:
    out = subprocess.run([*GPUCLUSTER, *args, "--server", server.url, "--token", ADMIN], capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _api_job(server: ControlPlane, name: str) -> dict[str, Any] | None:
    jobs = server.get("/api/v1/jobs", params={"q": name})["jobs"]
    same = [j for j in jobs if j["name"] == name]
    return same[0] if same else None


@pytest.fixture
def server(cp_with_jobs: Any, fleet: list[Any], tmp_path: Path) -> Iterator[ControlPlane]:
    with serving(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect") as srv:
        yield srv


def test_kubectl_apply_a_job_of_4_pods_x_2_gpus_admitted_as_a_gang(cp_with_jobs: Any, kube_client: Any, run: str,
                                                                   fleet: list[Any], server: ControlPlane) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"t-{run}"
    name = f"bert-{run}"
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(name, tenant, run, pods=4, gpus=2, env={"FAKE_RUN_S": "3"}))

        def admitted() -> dict[str, Any] | None:
            job = _job(batch, name)
            return job if not job["spec"].get("suspend") else None

        job = wait_until(admitted, 60, "the Job to be admitted (released)")
        adm = Admission.parse(job["metadata"]["annotations"][ADMISSION_ANNOTATION], "test")
        assert len(adm.slots) == 4
        devices = [(s.node, d.split(",")[0]) for s in adm.slots
                   for d in s.devices["hami.io/vgpu-devices-allocated"].split(";")[0].split(":") if d]
        assert len(devices) == 8
        assert len(set(devices)) == len(devices)  # each slot its own devices

        def bound() -> list[dict[str, Any]] | None:
            pods = [p for p in _pods_of(kube_client, name) if p["spec"].get("nodeName")]
            return pods if len(pods) == 4 else None

        pods = wait_until(bound, 60, "the Job controller's 4 pods to be bound")
        nodes = {n.name for n in fleet}
        for pod in pods:
            index = int(pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
            assert pod["spec"]["nodeName"] == adm.slots[index].node in nodes  # where the engine decided
            assert pod["metadata"]["annotations"]["hami.io/vgpu-node"] == pod["spec"]["nodeName"]
            assert pod["metadata"]["annotations"]["gpucluster.io/reservation"].endswith(f"-{index}")
        assert len({p["spec"]["nodeName"] for p in pods}) == 2  # 4 x 2 GPUs on 2 x 4: two per node

        shown = wait_until(lambda: _api_job(server, name), 30, "the Job in get jobs")
        assert shown["tenant"] == tenant and shown["replicas"] == 4 and shown["status"] in ("running", "succeeded")
        done = wait_until(lambda: (j := _api_job(server, name)) and j["status"] == "succeeded" and j, 60,
                          "the job to succeed (the kubelet stand-in ends its pods after 3 s)")
        assert "completed" in done["message"]
        table = _cli(server, "get", "jobs", "--tenant", tenant, "-o", "json")
        listed = json.loads(table)
        row = next(j for j in (listed["jobs"] if isinstance(listed, dict) else listed) if j["name"] == name)
        assert row["status"] == "succeeded"
        assert sorted(p["pod"] for p in row["placements"]) == sorted(
            f"{NS}/{p['metadata']['name']}" for p in pods)  # its pods, the Job controller's
        job = _job(batch, name)
        assert any(c["type"] == "Complete" and c["status"] == "True" for c in job["status"]["conditions"])
        reasons = [e["reason"] for e in _events_of(kube_client, name)]
        assert reasons.count("Admitted") == 1
    finally:
        _gc_jobs(kube_client, tenant)


def _tenant(server: ControlPlane, name: str, quota: float) -> None:
    with server.client() as c:
        r = c.post("/api/v1/tenants", json={"name": name, "quota_gpus": quota})
        assert r.status_code == 201, r.text


def _status(server: ControlPlane, name: str, status: str) -> dict[str, Any] | None:
    job = _api_job(server, name)
    return job if job is not None and job["status"] == status else None


def test_an_over_quota_job_waits_and_says_why(cp_with_jobs: Any, kube_client: Any, run: str, fleet: list[Any],
                                              server: ControlPlane) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"q-{run}"
    _tenant(server, tenant, 4)
    first, second = f"first-{run}", f"second-{run}"
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(first, tenant, run, pods=2, gpus=2, env={"FAKE_RUN_S": "8"}))
        wait_until(lambda: _status(server, first, "running"), 60, "the job at its quota to run")
        _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=job_yaml(second, tenant, run, pods=1, gpus=2))
        why = f"waiting for quota: tenant {tenant} holds 4 of 4 GPUs, the job needs 2"
        held = wait_until(lambda: (j := _status(server, second, "pending")) and why in j["message"] and j, 60,
                          "the job over its quota to wait, saying why")
        assert held["tenant"] == tenant
        job = wait_until(lambda: (j := _job(batch, second))["metadata"]["annotations"].get(
            "gpucluster.io/message", "").startswith("waiting for quota") and j, 30, "the reason on the Job")
        assert job["spec"]["suspend"] is True and not _pods_of(kube_client, second)
        # the Event is written right after the annotation (two writes): wait for it too
        wait_until(lambda: [e for e in _events_of(kube_client, second)
                            if e["reason"] == "Waiting" and why in e["message"]], 30, "the Waiting event on the Job")
        # once the first is done, the second runs
        wait_until(lambda: _status(server, second, "succeeded"), 90, "the waiting job to run after the first")
    finally:
        _gc_jobs(kube_client, tenant)


def test_a_job_that_can_never_fit_is_refused_with_an_event(cp_with_jobs: Any, kube_client: Any, run: str,
                                                           fleet: list[Any], server: ControlPlane) -> None:
    tenant = f"n-{run}"
    name, wrong = f"huge-{run}", f"wrong-{run}"
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=job_yaml(name, tenant, run, pods=1, gpus=8))

        def refused(job_name: str) -> list[dict[str, Any]] | None:
            events = [e for e in _events_of(kube_client, job_name) if e["reason"] == "Refused"]
            return events or None

        [event] = wait_until(lambda: refused(name), 60, "a Refused event on the Job that can never fit")
        assert event["type"] == "Warning" and "can never fit" in event["message"]
        shown = wait_until(lambda: _status(server, name, "failed"), 30, "the refused job in get jobs")
        assert "can never fit" in shown["message"]
        assert not _pods_of(kube_client, name)
        # a Job for another scheduler is refused too, naming the field
        doc = yaml.safe_load(job_yaml(wrong, tenant, run, pods=1, gpus=1))
        doc["spec"]["template"]["spec"]["schedulerName"] = "default-scheduler"
        _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=json.dumps(doc))
        [event] = wait_until(lambda: refused(wrong), 60, "a Refused event on the Job for another scheduler")
        assert "spec.template.spec.schedulerName: must be 'gpucluster'" in event["message"]
    finally:
        _gc_jobs(kube_client, tenant)


def test_a_job_created_without_suspend_is_queued_before_any_pod_binds(cp_with_jobs: Any, kube_client: Any,
                                                                      run: str, fleet: list[Any],
                                                                      server: ControlPlane) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"s-{run}"
    blocker, eager = f"blocker-{run}", f"eager-{run}"
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(blocker, tenant, run, pods=2, gpus=4, env={"FAKE_RUN_S": "6"}))
        wait_until(lambda: _status(server, blocker, "running"), 60, "the blocker to hold every GPU")
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(eager, tenant, run, pods=1, gpus=2, suspend=False, env={"FAKE_RUN_S": "1"}))
        [pod] = wait_until(lambda: _pods_of(kube_client, eager) or None, 30,
                           "the Job controller to make the unsuspended Job's pod at once")
        made_at = pod["metadata"]["creationTimestamp"]
        # the control plane may see the Job a moment after the Job controller made its pod: once it shows the job
        # queued, the pod is still unbound (it binds only when admitted, after the blocker)
        wait_until(lambda: _status(server, eager, "pending"), 30, "the control plane to queue the unsuspended Job")
        [pod] = _pods_of(kube_client, eager)
        assert not pod["spec"].get("nodeName")
        wait_until(lambda: _status(server, eager, "succeeded"), 90, "the eager job to run after the blocker")
        adm = Admission.parse(_job(batch, eager)["metadata"]["annotations"][ADMISSION_ANNOTATION], "test")
        ended = max(c["state"]["terminated"]["finishedAt"] for p in _pods_of(kube_client, blocker)
                    for c in p["status"]["containerStatuses"])
        import datetime as dt

        finished = dt.datetime.fromisoformat(ended.replace("Z", "+00:00")).timestamp()
        made = dt.datetime.fromisoformat(made_at.replace("Z", "+00:00")).timestamp()
        assert made < finished <= adm.at + 1  # its pod existed long before; it was admitted once GPUs were free
    finally:
        _gc_jobs(kube_client, tenant)


def test_a_failing_container_fails_the_job_with_its_exit_code(cp_with_jobs: Any, kube_client: Any, run: str,
                                                              fleet: list[Any], server: ControlPlane) -> None:
    tenant = f"f-{run}"
    name = f"crash-{run}"
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 stdin=job_yaml(name, tenant, run, pods=2, gpus=1, env={"FAKE_RUN_S": "1", "FAKE_EXIT_CODE": "3"}))
        failed = wait_until(lambda: _status(server, name, "failed"), 90, "the job to fail")
        assert "the Job failed" in failed["message"] and "exit code 3" in failed["message"], failed["message"]
    finally:
        _gc_jobs(kube_client, tenant)


def test_an_api_job_is_an_indexed_job_running_its_workload_and_its_logs_are_read(
        cp_with_jobs: Any, kube_client: Any, run: str, fleet: list[Any], server: ControlPlane) -> None:
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"a-{run}"
    body = {"name": "trainer", "tenant": tenant, "replicas": 2, "duration_s": 60,
            "resources": {"nvidia.com/gpu": 1}, "node_selector": {"gpucluster.io/run": run},
            "image": "registry.example/ml/train:v2", "command": ["python", "-m", "train"], "args": ["--lr", "3e-4"],
            "env": [{"name": "FAKE_RUN_S", "value": "inf"}, {"name": "TOKEN", "secret": "hf", "key": "token"}],
            "env_from": [{"config_map": "common"}], "working_dir": "/workspace",
            "volumes": [{"mount_path": "/data", "pvc": "datasets", "read_only": True}],
            "service_account": "default", "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}
    try:
        with server.client() as c:
            resp = c.post("/api/v1/jobs", json=body)
            assert resp.status_code == 201, resp.text
            job_id = resp.json()["id"]
            bad = c.post("/api/v1/jobs", json={**body, "volumes": [{"mount_path": "/data"}]})
            assert bad.status_code == 422 and bad.json()["where"] == "volumes.0", bad.text

        def released() -> dict[str, Any] | None:
            j = _job(batch, job_id)
            return j if not j["spec"].get("suspend") else None

        job = wait_until(released, 60, "the API job's Job to be admitted")
        spec = job["spec"]
        assert (spec["completionMode"], spec["parallelism"], spec["completions"]) == ("Indexed", 2, 2)
        assert job["metadata"]["labels"][QUEUE_LABEL] == tenant
        pods = wait_until(lambda: (ps := [p for p in _pods_of(kube_client, job_id) if p["spec"].get("nodeName")])
                          and len(ps) == 2 and ps, 60, "both pods bound")
        [c] = pods[0]["spec"]["containers"]
        assert (c["image"], c["command"], c["args"], c["workingDir"]) == (
            "registry.example/ml/train:v2", ["python", "-m", "train"], ["--lr", "3e-4"], "/workspace")
        assert {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}} in c["env"]
        assert pods[0]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "datasets", "readOnly": True}
        wait_until(lambda: _status(server, "trainer", "running") and all(
            p["status"].get("phase") == "Running" for p in _pods_of(kube_client, job_id)), 60, "the pods to run")
        # the log through the API server (the kubelet stand-in serves it)
        out = _cli(server, "logs", job_id, "--replica", "1")
        assert "runs registry.example/ml/train:v2 python -m train --lr 3e-4" in out
        pod1 = next(p for p in pods
                    if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "1")
        assert pod1["metadata"]["name"] in out
        with server.client() as c:
            r = c.get(f"/api/v1/jobs/{job_id}/logs", params={"replica": 5})
            assert r.status_code == 422 and r.json()["where"] == "replica"
            assert c.delete(f"/api/v1/jobs/{job_id}").status_code == 200
        wait_until(lambda: _status(server, "trainer", "cancelled"), 30, "the job to be cancelled")
        wait_until(lambda: not [j for j in batch.list_namespaced_job(NS).items if j.metadata.name == job_id], 60,
                   "cancel to delete the Job")
    finally:
        _gc_jobs(kube_client, tenant)


def test_fragmented_admission_count_only_hangs_ours_waits_and_admits_the_next(
        cp_with_jobs: Any, kube_client: Any, run: str, tmp_path: Path) -> None:
    """16 GPUs on 4 nodes; a blocker of 4 pods x 3 GPUs leaves one free GPU per node. Job A (2 pods x 2 GPUs)
    fits the free count (4) but no node; job B (4 pods x 1 GPU) fits. Count-only admission (the engine with the
    device check off, as Kueue admits) lets A in: its pods hang unbound and B waits behind the GPUs A holds.
    Ours keeps A waiting with the reason and runs B."""
    from kubernetes import client

    batch = client.BatchV1Api(kube_client)
    tenant = f"g-{run}"
    blocker = f"blocker-{run}"
    with kubelet_fleet(kube_client, gpu_nodes(run, 4, 4), tmp_path) as nodes:
        count_cp = ControlPlane(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect", "--admission", "count",
                                data="count")
        ours: ControlPlane | None = None
        try:
            _kubectl(cp_with_jobs, "apply", "-f", "-",
                     stdin=job_yaml(blocker, tenant, run, pods=4, gpus=3, env={"FAKE_RUN_S": "inf"}))
            wait_until(lambda: len([p for p in _pods_of(kube_client, blocker) if p["spec"].get("nodeName")]) == 4,
                       60, "the blocker's 4 pods bound, one per node")
            # ---- count-only admission
            a, b = f"a-{run}", f"b-{run}"
            _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=job_yaml(a, tenant, run, pods=2, gpus=2))
            wait_until(lambda: _status(count_cp, a, "running"), 60, "count-only admission to let A in")
            _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=job_yaml(b, tenant, run, pods=4, gpus=1))
            hung = wait_until(lambda: (j := _api_job(count_cp, a)) and "the job hangs" in j["message"] and j, 60,
                              "A to hang: admitted, its pods without a place")
            assert "2 of 2 pod(s) have no place" in hung["message"], hung["message"]
            assert not _job(batch, a)["spec"].get("suspend")  # released: its pods are made, and wait
            pods_a = wait_until(lambda: (ps := _pods_of(kube_client, a)) and len(ps) == 2 and ps, 60,
                                "the Job controller to make A's pods")
            assert not any(p["spec"].get("nodeName") for p in pods_a)
            waiting_b = wait_until(lambda: (j := _status(count_cp, b, "pending")) and "waiting for GPUs" in j[
                "message"] and j, 60, "B to wait behind the GPUs A was counted for")
            assert "more than are free now" in waiting_b["message"], waiting_b["message"]
            assert not [p for p in _pods_of(kube_client, a) if p["spec"].get("nodeName")]  # still hanging
            count_cp.stop()
            for name in (a, b):
                _kubectl(cp_with_jobs, "delete", "job", name, "--wait=true")
            # ---- ours: the same jobs again
            a2, b2 = f"a2-{run}", f"b2-{run}"
            ours = ControlPlane(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect", data="devices")
            wait_until(lambda: _status(ours, blocker, "running"), 60, "the blocker to be rebuilt as running")
            _kubectl(cp_with_jobs, "apply", "-f", "-", stdin=job_yaml(a2, tenant, run, pods=2, gpus=2))
            _kubectl(cp_with_jobs, "apply", "-f", "-",
                     stdin=job_yaml(b2, tenant, run, pods=4, gpus=1, env={"FAKE_RUN_S": "2"}))
            done = wait_until(lambda: _status(ours, b2, "succeeded"), 90, "B to run and succeed")
            assert len({p["node"] for p in done["placements"]}) == 4  # one free GPU on each node
            held = _status(ours, a2, "pending")
            assert held is not None, _api_job(ours, a2)
            assert held["message"] == ("waiting for a placement: needs 2 task(s) of 2 whole GPU(s) on one node each; "
                                       "enough GPUs are free in all but fragmented: too few nodes have 2 free"), held
            free = {n["name"]: n for n in ours.get("/api/v1/nodes")["nodes"] if n["name"] in {x.name for x in nodes}}
            assert len(free) == 4
            assert _job(batch, a2)["spec"]["suspend"] is True and not _pods_of(kube_client, a2)
        except BaseException:
            for cp in (count_cp, ours):
                if cp is not None:
                    print(cp.output()[-4000:])
            raise
        finally:
            count_cp.stop()
            if ours is not None:
                ours.stop()
            _gc_jobs(kube_client, tenant)


def test_count_only_admission_counts_the_pods_it_places_late_and_frees_them_with_the_job(
        cp_with_jobs: Any, kube_client: Any, run: str, tmp_path: Path) -> None:
    """Count-only admission lets job A (2 pods x 2 GPUs) in while a blocker leaves one free GPU per node: its two
    slots have no place. Once the blocker is deleted both are placed later and A's pods bound: A's status lists
    both placements, holds 4 GPUs and its tenant is charged 4; deleting A frees them all (its tenant holds 0 and a
    Job of all 16 GPUs runs). Before, the late-placed pods were not counted: the running job and its tenant held
    0 GPUs."""
    tenant = f"c-{run}"
    blocker, a, whole = f"blocker-{run}", f"a-{run}", f"whole-{run}"
    with kubelet_fleet(kube_client, gpu_nodes(run, 4, 4), tmp_path), \
            serving(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect", "--admission", "count") as server:
        try:
            _kubectl(cp_with_jobs, "apply", "-f", "-",
                     stdin=job_yaml(blocker, tenant, run, pods=4, gpus=3, env={"FAKE_RUN_S": "inf"}))
            wait_until(lambda: len([p for p in _pods_of(kube_client, blocker) if p["spec"].get("nodeName")]) == 4,
                       60, "the blocker's 4 pods bound, one per node")
            _kubectl(cp_with_jobs, "apply", "-f", "-",
                     stdin=job_yaml(a, tenant, run, pods=2, gpus=2, env={"FAKE_RUN_S": "inf"}))
            wait_until(lambda: (j := _api_job(server, a)) and "2 of 2 pod(s) have no place" in j["message"], 60,
                       "A admitted by count, its pods without a place")
            _kubectl(cp_with_jobs, "delete", "job", blocker, "--wait=true")
            wait_until(lambda: len([p for p in _pods_of(kube_client, a) if p["spec"].get("nodeName")]) == 2, 90,
                       "A's two pods placed late and bound")

            def counted() -> dict[str, Any] | None:
                job = _status(server, a, "running")
                return job if job is not None and len([e for e in job["placements"] if e["node"]]) == 2 else None

            job = wait_until(counted, 60, "A's status to list both late-placed pods")
            assert "have no place" not in job["message"], job["message"]
            assert job["gpus"] == 4
            row = wait_until(lambda: (t := [r for r in server.get("/api/v1/tenants")["tenants"]
                                           if r["name"] == tenant]) and t[0]["gpus"] == 4 and t[0], 60,
                             "A's tenant charged its 4 GPUs")
            assert row["running"] == 1

            _kubectl(cp_with_jobs, "delete", "job", a, "--wait=true")
            wait_until(lambda: _status(server, a, "cancelled"), 60, "A cancelled by its deletion")
            wait_until(lambda: not [r for r in server.get("/api/v1/tenants")["tenants"]
                                    if r["name"] == tenant and r["gpus"]], 60, "A's GPUs given back")
            _kubectl(cp_with_jobs, "apply", "-f", "-",
                     stdin=job_yaml(whole, tenant, run, pods=4, gpus=4, env={"FAKE_RUN_S": "inf"}))
            wait_until(lambda: len([p for p in _pods_of(kube_client, whole) if p["spec"].get("nodeName")]) == 4,
                       90, "a Job of all 16 GPUs to be admitted and bound (nothing of A left reserved)")
        except BaseException:
            print(server.output()[-6000:])
            raise
        finally:
            _gc_jobs(kube_client, tenant)


def test_preemption_suspends_the_job_again_and_frees_its_gpus(cp_with_jobs: Any, kube_client: Any, run: str,
                                                              fleet: list[Any]) -> None:
    """In-process KubeRuntime with the preemptive tiresias queue policy (its 10-minute lease set to 0 for the
    test): a high-priority job takes the GPUs of a running low-priority one, which is suspended again (Kueue's
    way), loses its admission and its pods, and waits."""
    from kubernetes import client

    from gpucluster.jobs import Job, job_spec
    from gpucluster.kubernetes import KubeRuntime

    batch = client.BatchV1Api(kube_client)
    tenant = f"p-{run}"
    rt = KubeRuntime(cp_with_jobs.kubeconfig, queue_policy="tiresias", namespace=NS, identity=f"test-{run}")
    rt.engine.policy.min_run_s = 0.0  # type: ignore[misc]

    tick = ticking(rt)

    def submit(name: str, priority: int, replicas: int) -> str:
        job = Job(job_spec(f"j-{name}-{run}", name=name, tenant=tenant, replicas=replicas,
                           resources={"nvidia.com/gpu": 4}, duration_s=None, submit_s=rt.now, priority=priority,
                           node_selector={"gpucluster.io/run": run}, registry=rt.registry,
                           workload={"env": [{"name": "FAKE_RUN_S", "value": "inf"}]}))
        rt.validate(job)
        rt.submit(job)
        return job.id

    try:
        low = submit("low", 10, 2)
        wait_until(tick(lambda: len([p for p in _pods_of(kube_client, low) if p["spec"].get("nodeName")]) == 2),
                   60, "the low-priority job's pods bound (every GPU of the fleet)")
        high = submit("high", 50, 1)
        wait_until(tick(lambda: rt.job(high).status == "running"), 60, "the high-priority job to run")  # type: ignore[union-attr]
        victim = rt.job(low)
        assert victim is not None and victim.status == "pending" and "preempted" in victim.message
        assert victim.preemptions == 1
        job = wait_until(tick(lambda: (j := _job(batch, low))["spec"].get("suspend") and j), 30,
                         "the preempted Job to be suspended again")
        assert ADMISSION_ANNOTATION not in job["metadata"]["annotations"]
        wait_until(tick(lambda: not [p for p in _pods_of(kube_client, low)
                                     if not p["metadata"].get("deletionTimestamp")]), 30, "its pods deleted")
        wait_until(lambda: "Preempted" in [e["reason"] for e in _events_of(kube_client, low)], 30,
                   "the Preempted event (written after the suspend)")
        wait_until(tick(lambda: [p for p in _pods_of(kube_client, high) if p["spec"].get("nodeName")]), 30,
                   "the high-priority job's pod bound")
        # its GPUs were freed at once: the fleet holds exactly the high-priority job's 4
        busy = sum(1 for n in fleet for row in [rt.node(n.name)] if row for d in row["devices"] if d["pods"])
        assert busy == 4
    finally:
        rt.close()
        _gc_jobs(kube_client, tenant)


def test_a_restarted_control_plane_rebuilds_every_job_from_the_cluster(cp_with_jobs: Any, kube_client: Any,
                                                                       run: str, fleet: list[Any],
                                                                       tmp_path: Path) -> None:
    """kill -9 while a job runs: the restarted control plane finds it running (its store keeps the history,
    with a ``recovered`` event); a replica with an empty store rebuilds the same job from its Job object."""
    tenant = f"r-{run}"
    name = f"long-{run}"
    first = ControlPlane(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect")
    second = fresh = None
    try:
        _kubectl(cp_with_jobs, "apply", "-f", "-",
                 # runs until the test ends it: it must outlast a kill -9 and a restart however loaded the machine
                 # (at a fixed 12 s it had once finished before the restarted control plane served, so it was
                 # never seen running again; a fixed 30 s made every run wait out the rest of the 30 s)
                 stdin=job_yaml(name, tenant, run, pods=2, gpus=2, env={"FAKE_RUN_S": "inf"}))
        before = wait_until(lambda: _status(first, name, "running"), 60, "the job to run")
        first.kill()
        second = ControlPlane(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect")
        again = wait_until(lambda: _status(second, name, "running"), 30, "the restarted control plane to show it")
        assert again["id"] == before["id"]
        assert {p["node"] for p in again["placements"]} == {p["node"] for p in before["placements"]}
        events = second.get(f"/api/v1/jobs/{again['id']}")["events"]
        assert [e["kind"] for e in events][:2] == ["submitted", "running"]
        assert "recovered" in [e["kind"] for e in events]
        pods = _pods_of(kube_client, name)
        assert len(pods) == 2
        for p in pods:  # the containers exit now
            assert finish(kube_client, NS, p["metadata"]["name"])
        wait_until(lambda: _status(second, name, "succeeded"), 90, "the job to succeed")
        second.stop()
        fresh = ControlPlane(cp_with_jobs.kubeconfig, tmp_path, "--no-leader-elect", data="empty-store")
        rebuilt = wait_until(lambda: _status(fresh, name, "succeeded"), 30, "a new replica to rebuild it")
        assert rebuilt["id"] == before["id"] and rebuilt["tenant"] == tenant
    except BaseException:
        for cp in (first, second, fresh):
            if cp is not None:
                print(cp.output()[-3000:])
        raise
    finally:
        for cp in (first, second, fresh):
            if cp is not None:
                cp.stop()
        _gc_jobs(kube_client, tenant)
