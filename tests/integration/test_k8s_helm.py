"""Helm for real against the real API server: ``helm install`` of charts/gpucluster, then kube-scheduler (the
control plane's version, the chart's KubeSchedulerConfiguration) and gpucluster's extender, each running under
the ServiceAccount token the chart created, place 100 pods; the chart's identities can do their work and cannot
read Secrets; ``helm upgrade`` with a changed value takes effect; ``helm uninstall`` leaves nothing of ours.

There is no kubelet: the chart's Deployments never get running pods, so the test runs their containers' commands
itself, as processes on 127.0.0.1, with the chart's own ServiceAccount tokens (TokenRequest), config and args."""

from __future__ import annotations

import json
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from k8s_helpers import (
    Process,
    a100_twins,
    bound,
    core_api,
    create_pods,
    device_usage_violations,
    free_port,
    gpu_pod,
    list_nodes,
    list_pods,
    start_extender,
    wait_until,
)
from kubernetes import client, config
from tests.tools import require_tool

from gpucluster.service.auth import ADMIN_TOKEN_FILE

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpucluster"
INSTANCE = "app.kubernetes.io/instance"


class Helm:
    def __init__(self, kubeconfig: Path, namespace: str) -> None:
        self.bin = require_tool("helm")
        self.kubeconfig = kubeconfig
        self.namespace = namespace

    def __call__(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run([str(self.bin), *args, "--kubeconfig", str(self.kubeconfig), "-n", self.namespace],
                              capture_output=True, text=True, timeout=300, check=False)
        if check:
            assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc


def sa_kubeconfig(kube_control_plane: Any, kube_client: Any, namespace: str, sa: str, path: Path) -> Path:
    """A kubeconfig holding a token of ServiceAccount ``sa`` (TokenRequest, one hour)."""
    core = core_api(kube_client)
    req = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600))
    token = core.create_namespaced_service_account_token(sa, namespace, req).status.token
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "sa",
        "clusters": [{"name": "c", "cluster": {"server": kube_control_plane.api_url,
                                                "certificate-authority": str(kube_control_plane.ca_cert)}}],
        "users": [{"name": sa, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": sa, "namespace": namespace}}],
    }))
    path.chmod(0o600)
    return path


def can_i(api: Any, verb: str, resource: str, namespace: str = "", group: str = "") -> bool:
    review = client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource, namespace=namespace or None,
                                                        group=group)))
    return bool(client.AuthorizationV1Api(api).create_self_subject_access_review(review).status.allowed)


def ours_left(kube_client: Any, release: str, namespace: str) -> list[str]:
    """Every object labelled with the release that is still there (namespaced in ``namespace`` and kube-system,
    and cluster-scoped)."""
    sel = f"{INSTANCE}={release}"
    core, apps, rbac = client.CoreV1Api(kube_client), client.AppsV1Api(kube_client), client.RbacAuthorizationV1Api(
        kube_client)
    found: list[str] = []
    for ns in (namespace, "kube-system"):
        for kind, lister in (("ServiceAccount", core.list_namespaced_service_account),
                             ("ConfigMap", core.list_namespaced_config_map), ("Service", core.list_namespaced_service),
                             ("Secret", core.list_namespaced_secret), ("Deployment", apps.list_namespaced_deployment),
                             ("DaemonSet", apps.list_namespaced_daemon_set), ("Role", rbac.list_namespaced_role),
                             ("RoleBinding", rbac.list_namespaced_role_binding)):
            found += [f"{kind} {ns}/{o.metadata.name}" for o in lister(ns, label_selector=sel).items]
    for kind, lister in (("ClusterRole", rbac.list_cluster_role),
                         ("ClusterRoleBinding", rbac.list_cluster_role_binding)):
        found += [f"{kind} {o.metadata.name}" for o in lister(label_selector=sel).items]
    return found


def _container(apps: Any, namespace: str, deployment: str, name: str) -> Any:
    dep = apps.read_namespaced_deployment(deployment, namespace)
    return next(c for c in dep.spec.template.spec.containers if c.name == name)


def _extender_args(command: list[str]) -> list[str]:
    """The chart's extender command without ``gpucluster k8s extender`` and its ``--listen``."""
    args = command[3:]
    i = args.index("--listen")
    return args[:i] + args[i + 2:]


def _up_args(command: list[str]) -> list[str]:
    """The chart's ``gpucluster up`` command without the program, the verb and the in-pod paths and address."""
    args, out = command[2:], []
    skip = {"--kubeconfig", "--host", "--port", "--data-dir"}
    i = 0
    while i < len(args):
        if args[i] in skip:
            i += 2
            continue
        out.append(args[i])
        i += 1
    return out


def _kube_scheduler_configz(sched: Any) -> dict[str, Any]:
    """The configuration a running kube-scheduler applied (its ``/configz``, admin token): the internal type,
    so Go field names (``PercentageOfNodesToScore``)."""
    resp = httpx.get(sched.healthz_url.replace("/healthz", "/configz"), verify=False, timeout=5,
                     headers={"Authorization": f"Bearer {sched.token}"})
    resp.raise_for_status()
    applied: dict[str, Any] = resp.json()["componentconfig"]
    return {k[0].lower() + k[1:]: v for k, v in applied.items()}


def _scheduler_args(command: list[str], port: int) -> list[str]:
    """The chart's secondary-scheduler command without ``gpucluster k8s scheduler``, listening on
    127.0.0.1:``port``."""
    assert command[:3] == ["gpucluster", "k8s", "scheduler"]
    args = command[3:]
    i = args.index("--listen")
    return [*args[:i], "--listen", f"127.0.0.1:{port}", *args[i + 2:]]


def _scheduler_config(core: Any, namespace: str, release: str, port: int, kubeconfig: Path) -> str:
    cm = core.read_namespaced_config_map(f"{release}-scheduler-config", namespace)
    cfg = yaml.safe_load(cm.data["config.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    assert cfg["extenders"][0]["urlPrefix"] == "http://127.0.0.1:8888"  # the sidecar; here a free port
    cfg["extenders"][0]["urlPrefix"] = f"http://127.0.0.1:{port}"
    cfg["clientConnection"] = {"kubeconfig": str(kubeconfig)}
    cfg["podInitialBackoffSeconds"] = 1
    cfg["podMaxBackoffSeconds"] = 2
    return yaml.safe_dump(cfg)


@pytest.fixture
def release(kube_control_plane: Any, namespace: str) -> Iterator[tuple[str, Helm]]:
    name = f"g{uuid.uuid4().hex[:6]}"
    helm = Helm(kube_control_plane.kubeconfig, namespace)
    try:
        yield name, helm
    finally:
        helm("uninstall", name, "--ignore-not-found", check=False)


def test_helm_install_schedule_upgrade_uninstall(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, namespace: str, tmp_path: Path,
    release: tuple[str, Helm],
) -> None:
    name, helm = release
    core, apps = core_api(kube_client), client.AppsV1Api(kube_client)
    sched_name = f"{name}-gpu"
    helm("install", name, str(CHART), "--set", f"schedulerName={sched_name},replicas=1,agent.enabled=false,"
         "up.enabled=true")
    listed = json.loads(helm("list", "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in listed] == [(name, "deployed")]
    assert f"{name}-scheduler" in {sa.metadata.name for sa in core.list_namespaced_service_account(namespace).items}

    # the chart's identities: each can do its work and cannot read Secrets
    sched_kc = sa_kubeconfig(kube_control_plane, kube_client, namespace, f"{name}-scheduler", tmp_path / "s.kc")
    up_kc = sa_kubeconfig(kube_control_plane, kube_client, namespace, f"{name}-up", tmp_path / "up.kc")
    for kc in (sched_kc, up_kc):
        api = config.new_client_from_config(config_file=str(kc))  # type: ignore[no-untyped-call]
        try:
            assert can_i(api, "list", "nodes") and can_i(api, "create", "pods/binding", namespace)
            assert not can_i(api, "get", "secrets", namespace)
            assert not can_i(api, "list", "secrets")
            assert not can_i(api, "get", "secrets", "kube-system")
            with pytest.raises(client.ApiException) as denied:
                client.CoreV1Api(api).list_namespaced_secret(namespace)
            assert denied.value.status == 403
            assert not can_i(api, "create", "clusterroles", group="rbac.authorization.k8s.io")
        finally:
            api.close()
    # up's replicas share the tenants' settings through a ConfigMap of the release's namespace (and only there)
    api = config.new_client_from_config(config_file=str(up_kc))  # type: ignore[no-untyped-call]
    try:
        for verb in ("get", "list", "watch", "create", "update"):
            assert can_i(api, verb, "configmaps", namespace), verb
        assert not can_i(api, "update", "configmaps", "kube-system")
    finally:
        api.close()

    run = uuid.uuid4().hex[:6]
    reg = a100_twins(kube_client, tmp_path, f"helm-{run}", run, nodes=13)  # 26 GPUs x 4 tasks
    keeper = threading.Thread(target=reg.run, daemon=True)  # the device plugins' handshakes stay fresh
    keeper.start()
    port = free_port()
    procs: list[Process] = []
    try:
        ext_args = _extender_args(_container(apps, namespace, f"{name}-scheduler", "extender").command)
        assert ext_args[ext_args.index("--scheduler-name") + 1] == sched_name
        procs.append(start_extender(sched_kc, port, tmp_path / "extender.log", *ext_args))
        sched = kube_scheduler_factory(_scheduler_config(core, namespace, name, port, sched_kc), name=f"helm-{run}")
        # `up --kubeconfig` under its own token, with the chart's arguments (policy, the Lease in the release's
        # namespace): it reads the cluster (the same nodes, Jobs, DRA kinds) and answers
        up_args = _up_args(_container(apps, namespace, f"{name}-up", "up").command)
        assert up_args[up_args.index("--lease-namespace") + 1] == namespace
        up_port = free_port()
        up = Process(["up", "--kubeconfig", str(up_kc), "--host", "127.0.0.1", "--port", str(up_port),
                      "--data-dir", str(tmp_path / "up-data"), *up_args], tmp_path / "up.log").start()
        procs.append(up)

        def up_nodes() -> set[str]:
            token = (tmp_path / "up-data" / ADMIN_TOKEN_FILE).read_text().strip()
            resp = httpx.get(f"http://127.0.0.1:{up_port}/api/v1/nodes", timeout=5,
                             headers={"Authorization": f"Bearer {token}"})
            resp.raise_for_status()
            return {n["name"] for n in resp.json()["nodes"]}

        wait_until(lambda: f"helm-{run}-0000" in up_nodes(), 90,
                   "gpucluster up (chart token) to show the registered nodes")

        pods = [gpu_pod(f"p{i:03d}", sched_name, mem=8000, cores=20, run=run) for i in range(100)]
        create_pods(core, namespace, pods)
        # only the test's pods: with the Job/Deployment controllers running (another test started
        # kube-controller-manager), the chart's own Deployments have pods in this namespace too
        mine = f"gpucluster.io/run={run}"
        placed = wait_until(lambda: len(bound(got := list_pods(core, namespace, mine))) == 100 and got, 240,
                            "100 pods bound by kube-scheduler + the extender under the chart's token")
        assert device_usage_violations(list_nodes(core, f"gpucluster.io/run={run}"), placed) == []
        assert all(p["metadata"]["annotations"]["hami.io/vgpu-node"] == p["spec"]["nodeName"] for p in placed)
        assert "Traceback" not in procs[0].log()

        assert _kube_scheduler_configz(sched)["percentageOfNodesToScore"] == 100  # the chart's default

        # helm upgrade: a new scheduler name and kube-scheduler's percentageOfNodesToScore reach the ConfigMap and
        # the extender's args; restarted from them, kube-scheduler applies the new share (its /configz) and with
        # the extender places pods that ask for the new name
        sched.stop()
        procs[0].stop()
        renamed = f"{name}-new"
        helm("upgrade", name, str(CHART), "--reuse-values", "--set", f"schedulerName={renamed}",
             "--set", "kubeScheduler.percentageOfNodesToScore=40")
        assert json.loads(helm("list", "-o", "json").stdout)[0]["revision"] == "2"
        ext_args = _extender_args(_container(apps, namespace, f"{name}-scheduler", "extender").command)
        assert ext_args[ext_args.index("--scheduler-name") + 1] == renamed
        procs.append(start_extender(sched_kc, port, tmp_path / "extender2.log", *ext_args))
        cfg = _scheduler_config(core, namespace, name, port, sched_kc)
        assert yaml.safe_load(cfg)["profiles"][0]["schedulerName"] == renamed
        assert yaml.safe_load(cfg)["percentageOfNodesToScore"] == 40
        sched2 = kube_scheduler_factory(cfg, name=f"helm2-{run}")
        assert _kube_scheduler_configz(sched2)["percentageOfNodesToScore"] == 40
        create_pods(core, namespace, [gpu_pod(f"n{i}", renamed, mem=8000, cores=20, run=run) for i in range(4)])
        wait_until(lambda: {f"n{i}" for i in range(4)} <= set(bound(list_pods(core, namespace, mine))), 120,
                   "pods of the upgraded scheduler name to be bound")

        # helm upgrade to scheduler mode with another share: our secondary scheduler's command carries it, and
        # the process started from that command under the chart's token decides with it (its /configz) and binds
        sched2.stop()
        procs[-1].stop()
        helm("upgrade", name, str(CHART), "--reuse-values", "--set", "mode=scheduler",
             "--set", "kubeScheduler.percentageOfNodesToScore=25")
        assert json.loads(helm("list", "-o", "json").stdout)[0]["revision"] == "3"
        command = _container(apps, namespace, f"{name}-scheduler", "scheduler").command
        assert command[command.index("--percentage-of-nodes-to-score") + 1] == "25"
        with pytest.raises(client.ApiException):  # kube-scheduler's configuration is gone with extender mode
            core.read_namespaced_config_map(f"{name}-scheduler-config", namespace)
        core.delete_collection_namespaced_pod(namespace, label_selector=mine, grace_period_seconds=0)
        wait_until(lambda: not list_pods(core, namespace, mine), 60, "the test's pods to be deleted")
        sched_port = free_port()
        secondary = Process(["k8s", "scheduler", "--kubeconfig", str(sched_kc), *_scheduler_args(command, sched_port)],
                            tmp_path / "scheduler.log").start()
        procs.append(secondary)
        wait_until(lambda: httpx.get(f"http://127.0.0.1:{sched_port}/readyz", timeout=2).status_code == 200, 90,
                   "the secondary scheduler (chart's command and token) to answer /readyz")
        configz = httpx.get(f"http://127.0.0.1:{sched_port}/configz", timeout=5).json()
        assert configz["profile"] == {**configz["profile"], "schedulerName": renamed, "percentageOfNodesToScore": 25}
        create_pods(core, namespace, [gpu_pod(f"s{i}", renamed, mem=8000, cores=20, run=run) for i in range(4)])
        wait_until(lambda: {f"s{i}" for i in range(4)} <= set(bound(list_pods(core, namespace, mine))), 120,
                   "pods bound by the secondary scheduler of the upgraded chart")
        assert "Traceback" not in secondary.log()
    finally:
        for proc in procs:
            proc.stop()
        core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
        reg.stop()
        keeper.join(30)
        reg.delete()

    assert len(ours_left(kube_client, name, namespace)) >= 10
    helm("uninstall", name)
    wait_until(lambda: not ours_left(kube_client, name, namespace), 60, "helm uninstall to remove everything")
    assert json.loads(helm("list", "-o", "json").stdout) == []
