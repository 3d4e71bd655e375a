from __future__ import annotations

import pytest
import yaml
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.kubernetes.manifests import manifests, scheduler_config
from gpucluster.kubernetes.register import node_manifest

from .helpers import registry, spec_node

runner = CliRunner()


def test_scheduler_config_manages_every_vendor_resource() -> None:
    cfg = scheduler_config("http://127.0.0.1:9999", registry(), "gpu")
    ext = cfg["extenders"][0]
    names = {r["name"] for r in ext["managedResources"]}
    assert {"nvidia.com/gpu", "nvidia.com/gpumem", "cambricon.com/vmlu", "hygon.com/dcumem"} <= names
    assert all(r["ignoredByScheduler"] for r in ext["managedResources"])
    assert ext["nodeCacheCapable"] is True
    assert cfg["profiles"] == [{"schedulerName": "gpu"}]


def test_rbac_is_least_privilege() -> None:
    objs = manifests("scheduler", registry())
    role = next(o for o in objs if o["kind"] == "ClusterRole")
    verbs = {(r["resources"][0], v) for r in role["rules"] for v in r["verbs"]}
    assert ("nodes", "watch") in verbs
    assert ("pods/binding", "create") in verbs
    assert not any(v == "*" for _, v in verbs)
    # delete only on the claims it makes itself for DRA-backed extended resources (undone on a rollback)
    assert {res for res, v in verbs if v == "delete"} == {"resourceclaims"}
    assert not any(res == "nodes" and v in ("patch", "update") for res, v in verbs)
    lease_role = next(o for o in objs if o["kind"] == "Role")
    assert lease_role["metadata"]["namespace"] == "kube-system"
    deploy = next(o for o in objs if o["kind"] == "Deployment")
    assert deploy["spec"]["replicas"] == 2
    extender = manifests("extender", registry())
    assert any(o["kind"] == "ConfigMap" for o in extender)
    assert {c["name"] for o in extender if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"]} == {"kube-scheduler", "extender"}


def test_node_manifest_has_hami_registration() -> None:
    obj = node_manifest(spec_node("n1", gpus=2, max_tasks=5), registry(), now=0.0)
    ann = obj["metadata"]["annotations"]
    assert ann["hami.io/node-handshake"] == "Reported_1970.01.01 00:00:00"
    assert '"count":5' in ann["hami.io/node-nvidia-register"]
    assert obj["status"]["capacity"]["nvidia.com/gpu"] == "10"
    assert obj["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


def test_cli_manifests_and_errors() -> None:
    r = runner.invoke(app, ["k8s", "manifests", "--mode", "scheduler"])
    assert r.exit_code == 0
    kinds = [d["kind"] for d in yaml.safe_load_all(r.stdout) if d]
    assert kinds[0] == "ServiceAccount"
    r = runner.invoke(app, ["k8s", "manifests", "--mode", "sidecar"])
    assert r.exit_code == 2
    assert "--mode 'sidecar'" in r.stderr
    r = runner.invoke(app, ["k8s", "extender", "--listen", "nowhere"])
    assert r.exit_code == 2
    assert "HOST:PORT" in r.stderr
    r = runner.invoke(app, ["k8s", "scheduler", "--policy", "random-walk"])
    assert r.exit_code == 2
    assert "unknown" in r.stderr


def test_leader_elector_rejects_bad_timings() -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(None, "l", "ns", "me", lease_duration=5, renew_deadline=6, retry_period=1)  # type: ignore[arg-type]


def test_secondary_scheduler_wakes_on_events() -> None:
    from gpucluster.kubernetes.cluster import KubeCluster
    from gpucluster.kubernetes.secondary import SecondaryScheduler

    from .helpers import pod_obj

    cluster = KubeCluster(registry())
    sched = SecondaryScheduler(cluster, binder=None, scheduler_name="gpucluster")  # type: ignore[arg-type]
    sched.on_pod("ADDED", pod_obj("p"))
    assert "default/p" in sched.pending
    other = pod_obj("q")
    other["spec"]["schedulerName"] = "default-scheduler"
    sched.on_pod("ADDED", other)
    assert "default/q" not in sched.pending
    sched.on_pod("MODIFIED", pod_obj("p", node="n1", phase="Running"))
    assert sched.pending == {}
    assert sched._wake.is_set()
