"""The Helm chart (charts/gpucluster), rendered with ``helm template`` (Helm v4.3.2, built by
scripts/test-deps.sh), the Kustomize overlays (deploy/kustomize, ``kubectl kustomize`` of the kubectl built
beside kube-apiserver) and ``gpucluster k8s manifests`` hold the same objects; ``helm lint --strict`` passes; every
rendered object validates strictly against the schema of each supported Kubernetes version (kubernetes-validate,
1.35, 1.36, 1.37); the chart's copies of the rule file and dashboard are current."""

from __future__ import annotations

import copy
import json
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpucluster.kubernetes.manifests import (
    DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
    DeployOptions,
    build,
    managed_resources,
)
from gpucluster.monitoring import rule_file
from gpucluster.monitoring.dashboard import dashboard_json
from tests.kubernetes.helpers import registry
from tests.tools import require_tool

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpucluster"
KUSTOMIZE = REPO / "deploy" / "kustomize"
VERSIONS = ["1.35", "1.36", "1.37"]
"""The Kubernetes releases in support (December 2026): the chart is rendered and validated for each."""
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(require_tool("helm")), *args], capture_output=True, text=True, timeout=300,
                          check=False)


@cache
def _render_cached(args: tuple[str, ...]) -> str:
    proc = helm("template", "gpucluster", str(CHART), *args)
    if proc.returncode != 0:
        raise AssertionError(f"helm template {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def render(*args: str) -> list[dict[str, Any]]:
    """``helm template gpucluster charts/gpucluster ARGS``, as objects."""
    return [d for d in yaml.safe_load_all(_render_cached(args)) if d]


def normalise(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop Helm's bookkeeping labels; compare ConfigMap data as parsed YAML/JSON, not as text."""
    o = copy.deepcopy(obj)
    labels = o.get("metadata", {}).get("labels", {})
    for k in HELM_ONLY_LABELS:
        labels.pop(k, None)
    if o["kind"] == "ConfigMap":
        o["data"] = {k: (json.loads(v) if k.endswith(".json") else yaml.safe_load(v)) for k, v in o["data"].items()}
    return o


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    out = {}
    for o in objs:
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        assert key not in out, f"duplicate object {key}"
        out[key] = normalise(o)
    return out


def assert_same(chart: list[dict[str, Any]], ours: list[dict[str, Any]]) -> None:
    a, b = by_key(chart), by_key(ours)
    assert sorted(a) == sorted(b)
    for key in a:
        assert a[key] == b[key], f"{key} differs between the chart and `k8s manifests`"


TWIN = "name: twin\nnodes: []\n"
CASES = [
    ("extender-defaults", {}, {}),
    ("scheduler-no-agent", {"mode": "scheduler", "agent.enabled": "false", "replicas": "3"},
     {"mode": "scheduler", "agent": False, "replicas": 3}),
    ("device-config", {"deviceConfig.nvidia.deviceSplitCount": "4", "deviceConfig.nvidia.defaultCores": "20"},
     {"device_config": {"nvidia": {"deviceSplitCount": 4, "defaultCores": 20}}}),
    ("everything", {"legacyMetrics": "true", "up.enabled": "true", "monitoring.serviceMonitor.enabled": "true",
                    "monitoring.prometheusRule.enabled": "true", "monitoring.dashboard.enabled": "true",
                    "schedulerName": "gpu", "policy": "binpack"},
     {"legacy_metrics": True, "up": True, "service_monitor": True, "prometheus_rules": "RULES",
      "dashboard": "DASHBOARD", "scheduler_name": "gpu", "policy": "binpack", "twins": TWIN}),
    ("fewer-nodes-scored", {"kubeScheduler.percentageOfNodesToScore": "30"}, {"percentage_of_nodes_to_score": 30}),
    ("scheduler-fewer-nodes-scored", {"mode": "scheduler", "kubeScheduler.percentageOfNodesToScore": "30"},
     {"mode": "scheduler", "percentage_of_nodes_to_score": 30}),
]


def _options(kw: dict[str, Any], version: str, namespace: str) -> DeployOptions:
    kw = dict(kw)
    if kw.get("prometheus_rules") == "RULES":
        kw["prometheus_rules"] = rule_file()
    if kw.get("dashboard") == "DASHBOARD":
        kw["dashboard"] = dashboard_json()
    return DeployOptions(kube_version=version, namespace=namespace, **kw)


def _chart_args(sets: dict[str, str], version: str, namespace: str, twins: bool) -> tuple[str, ...]:
    args = ["--kube-version", version, "--namespace", namespace]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    if twins:
        args += ["--set-string", f"twins.cluster={TWIN}"]
    return tuple(args)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("case", "sets", "kw"), CASES, ids=[c[0] for c in CASES])
def test_chart_renders_what_k8s_manifests_prints(case: str, sets: dict[str, str], kw: dict[str, Any],
                                                 version: str) -> None:
    ns = "gpu-system"
    chart = render(*_chart_args(sets, version, ns, "twins" in kw))
    assert_same(chart, build(_options(kw, version, ns), registry()))


@pytest.mark.parametrize("version", VERSIONS)
def test_every_rendered_object_validates_strictly(version: str) -> None:
    sets = CASES[3][1]
    objs = render(*_chart_args(sets, version, "gpu-system", True))
    objs += render(*_chart_args(CASES[1][1], version, "gpu-system", False))
    kinds = set()
    for obj in objs:
        kinds.add(obj["kind"])
        if obj["kind"] in CRD_KINDS:
            continue  # not in Kubernetes' schema; checked below
        kubernetes_validate.validate(obj, version, strict=True)
    assert {"Deployment", "DaemonSet", "ConfigMap", "ClusterRole", "Role", "Service", "ServiceAccount"} <= kinds
    rule = next(o for o in objs if o["kind"] == "PrometheusRule")
    assert rule["spec"]["groups"] == yaml.safe_load(rule_file())["groups"]
    monitor = next(o for o in objs if o["kind"] == "ServiceMonitor")
    assert set(monitor["spec"]) == {"selector", "namespaceSelector", "endpoints"}


def test_strict_validation_catches_a_broken_object() -> None:
    obj = next(o for o in render("--kube-version", "1.37") if o["kind"] == "Deployment")
    obj["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = True  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.37", strict=True)


def test_chart_refuses_a_kube_version_below_its_constraint() -> None:
    proc = helm("template", "gpucluster", str(CHART), "--kube-version", "1.34")
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr


@pytest.mark.parametrize("version", VERSIONS)
def test_helm_lint_strict(version: str) -> None:
    proc = helm("lint", "--strict", str(CHART), "--kube-version", version)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in proc.stdout


def test_helm_lint_catches_a_broken_chart(tmp_path: Path) -> None:
    broken = tmp_path / "gpucluster"
    subprocess.run(["cp", "-r", str(CHART), str(broken)], check=True)
    (broken / "templates" / "scheduler.yaml").write_text("{{ .Values.nothing.here }\n")  # unclosed action
    proc = helm("lint", "--strict", str(broken), "--kube-version", "1.37")
    assert proc.returncode != 0


def test_device_config_and_extra_args_reach_the_scheduler() -> None:
    objs = render("--kube-version", "1.37", "--set", "deviceConfig.nvidia.deviceSplitCount=4",
                  "--set", "extraArgs={--v=4}")
    cm = next(o for o in objs if o["metadata"]["name"] == "gpucluster-device-config")
    assert yaml.safe_load(cm["data"]["device-config.yaml"]) == {"nvidia": {"deviceSplitCount": 4}}
    ext = next(c for o in objs if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
               if c["name"] == "extender")
    assert ext["command"][-3:] == ["--device-config", "/etc/gpucluster/devices/device-config.yaml", "--v=4"]
    assert {"name": "device-config", "mountPath": "/etc/gpucluster/devices", "readOnly": True} in ext["volumeMounts"]
    # without a device config the scheduler gets no such flag
    plain = render("--kube-version", "1.37")
    ext = next(c for o in plain if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
               if c["name"] == "extender")
    assert "--device-config" not in ext["command"]


def _kube_scheduler_config(objs: list[dict[str, Any]]) -> dict[str, Any]:
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpucluster-scheduler-config")
    cfg: dict[str, Any] = yaml.safe_load(cm["data"]["config.yaml"])
    assert cfg["kind"] == "KubeSchedulerConfiguration"
    return cfg


def test_percentage_of_nodes_to_score_reaches_kube_schedulers_config(tmp_path: Path) -> None:
    """Issue 25: kubeScheduler.percentageOfNodesToScore is the value kube-scheduler gets (100 by default: the
    extender sees every feasible node; 0: kube-scheduler's adaptive default); anything but a whole number 0..100
    is refused by `helm template` naming the value. On main the chart wrote 100 whatever the values said."""
    assert _kube_scheduler_config(render("--kube-version", "1.37"))["percentageOfNodesToScore"] == 100
    for value in ("30", "0", "100"):
        objs = render("--kube-version", "1.37", "--set", f"kubeScheduler.percentageOfNodesToScore={value}")
        assert _kube_scheduler_config(objs)["percentageOfNodesToScore"] == int(value)
    values = tmp_path / "values.yaml"
    values.write_text("kubeScheduler:\n  percentageOfNodesToScore: 45\n")
    objs = render("--kube-version", "1.35", "-f", str(values))
    assert _kube_scheduler_config(objs)["percentageOfNodesToScore"] == 45
    for bad in ("101", "-1", "abc", "50.5"):
        proc = helm("template", "gpucluster", str(CHART), "--kube-version", "1.37",
                    "--set", f"kubeScheduler.percentageOfNodesToScore={bad}")
        assert proc.returncode != 0, f"{bad} was accepted"
        assert "kubeScheduler.percentageOfNodesToScore: expected a whole number 0..100" in proc.stderr, proc.stderr
        assert f"got {bad}" in proc.stderr
    values.write_text("kubeScheduler:\n  percentageOfNodesToScore: 12.5\n")
    proc = helm("template", "gpucluster", str(CHART), "--kube-version", "1.37", "-f", str(values))
    assert proc.returncode != 0 and "got 12.5" in proc.stderr, proc.stderr


def _secondary_scheduler_command(objs: list[dict[str, Any]]) -> list[str]:
    dep = next(o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "gpucluster-scheduler")
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "scheduler"
    command: list[str] = container["command"]
    return command


def test_percentage_of_nodes_to_score_reaches_our_secondary_scheduler(tmp_path: Path) -> None:
    """Issue 25: in scheduler mode (no kube-scheduler) the value is our secondary scheduler's
    ``--percentage-of-nodes-to-score``, validated as in extender mode; on 739abbf the chart dropped it there (the
    scheduler's command had no such flag, and a bad value was accepted)."""
    for version in ("1.35", "1.36", "1.37"):
        command = _secondary_scheduler_command(render("--kube-version", version, "--set", "mode=scheduler"))
        assert command[command.index("--percentage-of-nodes-to-score") + 1] == "100"
    for value in ("30", "0"):
        command = _secondary_scheduler_command(render("--kube-version", "1.37", "--set", "mode=scheduler",
                                                      "--set", f"kubeScheduler.percentageOfNodesToScore={value}"))
        assert command[command.index("--percentage-of-nodes-to-score") + 1] == value
    assert not any(o["kind"] == "ConfigMap" and o["metadata"]["name"] == "gpucluster-scheduler-config"
                   for o in render("--kube-version", "1.37", "--set", "mode=scheduler"))
    for bad in ("101", "abc", "50.5"):
        proc = helm("template", "gpucluster", str(CHART), "--kube-version", "1.37", "--set", "mode=scheduler",
                    "--set", f"kubeScheduler.percentageOfNodesToScore={bad}")
        assert proc.returncode != 0 and f"expected a whole number 0..100 (0 = kube-scheduler's adaptive default), " \
            f"got {bad}" in proc.stderr, proc.stderr
    # the flag the chart passes is one the scheduler takes, with the same bounds
    from typer.testing import CliRunner

    from gpucluster.cli.main import app

    r = CliRunner().invoke(app, ["k8s", "scheduler", "--percentage-of-nodes-to-score", "101"])
    assert r.exit_code == 2 and "--percentage-of-nodes-to-score" in r.output, r.output


def test_k8s_manifests_takes_the_same_percentage() -> None:
    from typer.testing import CliRunner

    from gpucluster.cli.main import app

    r = CliRunner().invoke(app, ["k8s", "manifests", "--percentage-of-nodes-to-score", "30"])
    assert r.exit_code == 0, r.output
    objs = [d for d in yaml.safe_load_all(r.stdout) if d]
    assert _kube_scheduler_config(objs)["percentageOfNodesToScore"] == 30
    r = CliRunner().invoke(app, ["k8s", "manifests", "--percentage-of-nodes-to-score", "101"])
    assert r.exit_code == 2 and "--percentage-of-nodes-to-score" in r.output
    with pytest.raises(ValueError, match=r"percentageOfNodesToScore: expected a whole number 0\.\.100"):
        build(DeployOptions(percentage_of_nodes_to_score=-5), registry())


def test_chart_copies_and_defaults_are_current() -> None:
    files = CHART / "files"
    assert (files / "gpucluster-alerts.yml").read_text() == rule_file(), "run: gpucluster monitor rules --out ..."
    assert (files / "gpucluster.json").read_text() == dashboard_json()
    assert (REPO / "deploy" / "grafana" / "gpucluster.json").read_text() == dashboard_json()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["managedResources"] == managed_resources(registry())
    assert values["kubeScheduler"]["percentageOfNodesToScore"] == DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE


# ------------------------------------------------------------------------------------------------ kustomize
OVERLAYS = {"extender": DeployOptions(namespace="gpucluster"),
            "scheduler": DeployOptions(mode="scheduler", namespace="gpucluster"),
            "up": DeployOptions(namespace="gpucluster", up=True)}


def kubectl_kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    proc = subprocess.run([str(kubectl), "kustomize", str(path)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


@pytest.mark.parametrize("overlay", sorted(OVERLAYS))
def test_kustomize_overlays_hold_the_same_objects_and_validate(overlay: str) -> None:
    objs = kubectl_kustomize(KUSTOMIZE / "overlays" / overlay)
    assert_same(objs, build(OVERLAYS[overlay], registry()))
    for version in VERSIONS:
        for obj in objs:
            kubernetes_validate.validate(obj, version, strict=True)
