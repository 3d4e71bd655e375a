"""The Helm chart (charts/gpucluster), rendered with scripts/render-chart.sh (helm, or the Go renderer built from
Debian's packages), the Kustomize overlays (deploy/kustomize, `kubectl kustomize`) and `gpucluster k8s
manifests` hold the same objects; every rendered object validates strictly against its Kubernetes version's
schema (kubernetes-validate); the chart's copies of the rule file and dashboard are current."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from gpucluster.kubernetes.manifests import DeployOptions, build, managed_resources
from gpucluster.monitoring import rule_file
from gpucluster.monitoring.dashboard import dashboard_json
from tests.kubernetes.helpers import registry

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "gpucluster"
RENDER = REPO / "scripts" / "render-chart.sh"
KUSTOMIZE = REPO / "deploy" / "kustomize"
VERSIONS = ["1.27", "1.28", "1.29", "1.30", "1.31", "1.32", "1.33"]
HELM_ONLY_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{what} (scripts/test-deps.sh install)", pytrace=False)
    pytest.skip(f"{what}: run scripts/test-deps.sh install")


@cache
def _render_cached(args: tuple[str, ...]) -> str:
    proc = subprocess.run([str(RENDER), str(CHART), *args], capture_output=True, text=True, timeout=300, check=False)
    if proc.returncode != 0:
        raise AssertionError(f"render-chart {' '.join(args)} failed:\n{proc.stderr}")
    return proc.stdout


def render(*args: str) -> list[dict[str, Any]]:
    if not shutil.which("helm") and not (shutil.which("go") and Path("/usr/share/gocode/src/github.com/Masterminds/"
                                                                       "sprig").is_dir()):
        _missing("neither helm nor Go with Debian's sprig sources")
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


@pytest.mark.parametrize("version", ["1.20", "1.23", *VERSIONS])
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
    obj = next(o for o in render("--kube-version", "1.33") if o["kind"] == "Deployment")
    obj["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonroot"] = True  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(obj, "1.33", strict=True)


def test_chart_refuses_a_kube_version_below_its_constraint() -> None:
    proc = subprocess.run([str(RENDER), str(CHART), "--kube-version", "1.19"], capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode != 0 and "kubeVersion" in proc.stderr


def test_device_config_and_extra_args_reach_the_scheduler() -> None:
    objs = render("--kube-version", "1.33", "--set", "deviceConfig.nvidia.deviceSplitCount=4",
                  "--set", "extraArgs={--v=4}")
    cm = next(o for o in objs if o["metadata"]["name"] == "gpucluster-device-config")
    assert yaml.safe_load(cm["data"]["device-config.yaml"]) == {"nvidia": {"deviceSplitCount": 4}}
    ext = next(c for o in objs if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
               if c["name"] == "extender")
    assert ext["command"][-3:] == ["--device-config", "/etc/gpucluster/devices/device-config.yaml", "--v=4"]
    assert {"name": "device-config", "mountPath": "/etc/gpucluster/devices", "readOnly": True} in ext["volumeMounts"]
    # without a device config the scheduler gets no such flag
    plain = render("--kube-version", "1.33")
    ext = next(c for o in plain if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
               if c["name"] == "extender")
    assert "--device-config" not in ext["command"]


def test_chart_copies_and_defaults_are_current() -> None:
    files = CHART / "files"
    assert (files / "gpucluster-alerts.yml").read_text() == rule_file(), "run: gpucluster monitor rules --out ..."
    assert (files / "gpucluster.json").read_text() == dashboard_json()
    assert (REPO / "deploy" / "grafana" / "gpucluster.json").read_text() == dashboard_json()
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["managedResources"] == managed_resources(registry())


# ------------------------------------------------------------------------------------------------ kustomize
OVERLAYS = {"extender": DeployOptions(kube_version="1.33", namespace="gpucluster"),
            "scheduler": DeployOptions(mode="scheduler", kube_version="1.33", namespace="gpucluster"),
            "up": DeployOptions(kube_version="1.33", namespace="gpucluster", up=True)}


def kubectl_kustomize(path: Path) -> list[dict[str, Any]]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        _missing("kubectl (Debian package kubernetes-client)")
    proc = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=120,
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
