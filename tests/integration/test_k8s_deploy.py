"""The deployment manifests are accepted by a real API server (server-side dry run), and ``gpucluster k8s
register-nodes`` creates and deletes a spec's nodes."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import GPUCLUSTER, core_api, list_nodes, mixed_spec
from kubernetes import client, utils

pytestmark = pytest.mark.integration


def _gpucluster(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GPUCLUSTER, *args], capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("mode", ["extender", "scheduler"])
def test_manifests_pass_server_side_dry_run(kube_control_plane: Any, kube_client: Any, namespace: str,
                                            mode: str) -> None:
    out = _gpucluster("k8s", "manifests", "--mode", mode, "--namespace", namespace,
                      "--kube-version", kube_control_plane.minor,
                      "--scheduler-name", f"gpucluster-{uuid.uuid4().hex[:4]}")
    assert out.returncode == 0, out.stderr
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    kinds = sorted(d["kind"] for d in docs)
    assert {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment",
            "Service"} <= set(kinds)
    if mode == "extender":
        cm = next(d for d in docs if d["kind"] == "ConfigMap")
        cfg = yaml.safe_load(cm["data"]["config.yaml"])
        assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
        assert cfg["extenders"][0]["bindVerb"] == "bind"
    for doc in docs:
        # the server validates and admits each object, then discards it
        utils.create_from_dict(kube_client, doc, dry_run="All")
    # nothing was created
    rbac = client.RbacAuthorizationV1Api(kube_client)
    names = {r.metadata.name for r in rbac.list_cluster_role().items}
    assert "gpucluster-scheduler" not in names


def test_manifest_rejected_by_server_when_broken(kube_control_plane: Any, kube_client: Any, namespace: str) -> None:
    out = _gpucluster("k8s", "manifests", "--mode", "scheduler", "--namespace", namespace,
                      "--kube-version", kube_control_plane.minor)
    deployment = next(d for d in yaml.safe_load_all(out.stdout) if d and d["kind"] == "Deployment")
    deployment["spec"]["selector"]["matchLabels"] = {"other": "x"}  # selector no longer matches the template
    with pytest.raises(utils.FailToCreateError):
        utils.create_from_dict(kube_client, deployment, dry_run="All")


def test_register_nodes_cli(kube_control_plane: Any, kube_client: Any, tmp_path: Path) -> None:
    run = uuid.uuid4().hex[:6]
    spec = tmp_path / "cluster.yaml"
    spec.write_text(mixed_spec(run, a100=2, l40s=1, mlu=1, dcu=1))
    kc = str(kube_control_plane.kubeconfig)
    out = _gpucluster("k8s", "register-nodes", "--kubeconfig", kc, "--cluster", str(spec), "--once")
    assert out.returncode == 0, out.stderr
    nodes = list_nodes(core_api(kube_client), f"gpucluster.io/run={run}")
    assert len(nodes) == 5
    mlu = next(n for n in nodes if n["metadata"]["name"].startswith("mlu"))
    assert "hami.io/node-mlu-register" in mlu["metadata"]["annotations"]
    assert mlu["status"]["allocatable"]["cambricon.com/vmlu"] == "32"
    out = _gpucluster("k8s", "register-nodes", "--kubeconfig", kc, "--cluster", str(spec), "--delete")
    assert out.returncode == 0, out.stderr
    assert list_nodes(core_api(kube_client), f"gpucluster.io/run={run}") == []
    bad = _gpucluster("k8s", "register-nodes", "--kubeconfig", str(tmp_path / "missing"), "--cluster", str(spec))
    assert bad.returncode == 2
    assert f"{tmp_path / 'missing'}: no such file" in bad.stderr and "Traceback" not in bad.stderr
