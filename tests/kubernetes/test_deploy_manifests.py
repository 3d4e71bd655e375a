"""``k8s manifests --kube-version``: the KubeSchedulerConfiguration version and image a release reads, the
restricted security context on every container, least-privilege RBAC, and the optional objects."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.kubernetes.manifests import (
    DeployOptions,
    KubeVersionError,
    build,
    kube_scheduler_image,
    parse_kube_version,
    scheduler_api_version,
)
from gpucluster.monitoring import rule_file
from gpucluster.monitoring.dashboard import dashboard_json

from .helpers import registry

runner = CliRunner()


@pytest.mark.parametrize(("version", "api"), [
    ("1.35", "v1"), ("v1.35.4", "v1"), ("1.36", "v1"), ("1.37.2", "v1"), ("1.40", "v1"),
])
def test_scheduler_config_version_follows_kube_version(version: str, api: str) -> None:
    assert scheduler_api_version(version) == f"kubescheduler.config.k8s.io/{api}"
    objs = build(DeployOptions(kube_version=version), registry())
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-config"))
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    assert cfg["apiVersion"] == f"kubescheduler.config.k8s.io/{api}"
    assert cfg["leaderElection"]["leaderElect"] is True
    assert cfg["leaderElection"]["resourceNamespace"] == "kube-system"
    ext = cfg["extenders"][0]
    assert (ext["filterVerb"], ext["preemptVerb"], ext["bindVerb"]) == ("filter", "preempt", "bind")
    sched = next(c for o in objs if o["kind"] == "Deployment"
                 for c in o["spec"]["template"]["spec"]["containers"] if c["name"] == "kube-scheduler")
    major_minor = version.lstrip("v").split(".")[:2]
    assert sched["image"].startswith(f"registry.k8s.io/kube-scheduler:v{'.'.join(major_minor)}.")


def test_kube_version_parsing() -> None:
    assert parse_kube_version("v1.36.4") == (1, 36, 4)
    assert kube_scheduler_image("1.36.1") == "registry.k8s.io/kube-scheduler:v1.36.1"
    assert kube_scheduler_image("1.37") == "registry.k8s.io/kube-scheduler:v1.37.2"
    assert kube_scheduler_image("1.35.0") == "registry.k8s.io/kube-scheduler:v1.35.4"
    for bad in ("1", "one.two", "1.19", "1.34", "v1.34.9"):
        with pytest.raises(KubeVersionError):
            parse_kube_version(bad)
    with pytest.raises(KubeVersionError, match="oldest we support and test"):
        scheduler_api_version("1.24")


def _containers(objs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(o["spec"]["template"]["spec"], c) for o in objs if o["kind"] in ("Deployment", "DaemonSet")
            for c in o["spec"]["template"]["spec"]["containers"]]


@pytest.mark.parametrize("mode", ["extender", "scheduler"])
def test_every_container_is_restricted_with_resources_and_probes(mode: str) -> None:
    objs = build(DeployOptions(mode=mode, up=True, twins="name: t\n"), registry())
    pairs = _containers(objs)
    assert len(pairs) >= 4
    for pod, c in pairs:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
        if c["name"] != "register-nodes":
            assert "readinessProbe" in c or "livenessProbe" in c, c["name"]


def test_rbac_least_privilege_per_component() -> None:
    objs = build(DeployOptions(up=True, twins="name: t\n"), registry())
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] in ("ClusterRole", "Role")}
    for role in roles.values():
        for rule in role["rules"]:
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]["name"]
            assert "secrets" not in rule["resources"]
    sched = {(r, v) for rule in roles["gpucluster-scheduler"]["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("pods/binding", "create") in sched and ("nodes", "patch") not in sched
    assert ("pods", "delete") not in sched
    twins = {(r, v) for rule in roles["gpucluster-twins"]["rules"] for r in rule["resources"] for v in rule["verbs"]}
    assert ("nodes", "create") in twins and not any(r.startswith("pods") for r, _ in twins)
    agent_sa = next(o for o in objs if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "gpucluster-agent")
    assert agent_sa["automountServiceAccountToken"] is False  # the agent talks to no API server
    assert not any(o["kind"].endswith("Binding") and o["subjects"][0]["name"] == "gpucluster-agent" for o in objs)


def test_monitoring_objects_carry_the_rule_file_and_dashboard() -> None:
    objs = build(DeployOptions(service_monitor=True, prometheus_rules=rule_file(), dashboard=dashboard_json()),
                 registry())
    kinds = [o["kind"] for o in objs]
    assert kinds.count("ServiceMonitor") == 2
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(rule_file())["groups"]
    cm = next(o for o in objs if o["metadata"]["name"] == "gpucluster-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert '"uid": "gpucluster-overview"' in cm["data"]["gpucluster.json"]


def test_cli_kube_version_and_errors(tmp_path: Any) -> None:
    r = runner.invoke(app, ["k8s", "manifests", "--kube-version", "1.35", "--no-agent"])
    assert r.exit_code == 0, r.output
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert "DaemonSet" not in {d["kind"] for d in docs}
    cfg = yaml.safe_load(next(d for d in docs if d["kind"] == "ConfigMap")["data"]["config.yaml"])
    assert cfg["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    r = runner.invoke(app, ["k8s", "manifests", "--kube-version", "1.34"])
    assert r.exit_code == 2 and "older than the oldest" in r.output
    r = runner.invoke(app, ["k8s", "manifests", "--twins", str(tmp_path / "missing.yaml")])
    assert r.exit_code == 2
