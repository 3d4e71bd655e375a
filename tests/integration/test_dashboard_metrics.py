"""The Grafana dashboard reads only what gpucluster exports. Its three sources run for real: the agent (simulated
GPUs with pods on them, control-plane families on, one XID injected), a real ``gpucluster up`` and the extender
against the real API server after one /filter. Every metric name in every dashboard expression (parsed as
PromQL, Grafana's ``label_values`` unwrapped) must be among the names they serve, and a real Prometheus that
scrapes all three must accept every expression and hold series for every name."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import httpx
import promql_parser
import pytest
import yaml
from k8s_helpers import Process, free_port, gpu_pod, registry, start_extender, wait_until
from prometheus_client.parser import text_string_to_metric_families

from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.monitoring.dashboard import dashboard, expressions
from gpucluster.spec import load_cluster

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TOKEN = "dashboard-test-token"


def cluster(pool: str) -> dict[str, Any]:
    return {"apiVersion": "gpucluster.io/v1alpha1", "kind": "ClusterSpec", "name": pool,
            "nodePools": [{"name": pool, "count": 2, "cpuMilli": 64000, "memoryMiB": 262144,
                           "gpu": {"vendor": "nvidia", "model": "H100-SXM5-80GB", "count": 4, "memoryMiB": 81559}}]}

LABEL_VALUES = re.compile(r"^\s*label_values\((?P<expr>.+),\s*(?P<label>\w+)\s*\)\s*$")


def promql(expr: str) -> str:
    """A dashboard expression as Prometheus takes it: Grafana's label_values(EXPR, label) is EXPR; $node: all."""
    m = LABEL_VALUES.match(expr)
    return (m.group("expr") if m else expr).replace("$node", ".*")


def metric_names(expr: str) -> set[str]:
    """Every metric name an expression selects (vector selectors, also inside range selectors)."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            if node.name:
                names.add(node.name)
            names.update(str(m.value) for m in node.matchers.matchers if m.name == "__name__")

    promql_parser.walk(promql_parser.parse(promql(expr)), visit)
    return names


def served_names(url: str, token: str | None = None) -> set[str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    text = httpx.get(url, headers=headers, timeout=30).text
    return {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_metric_names_of_the_example_expressions() -> None:  # the extraction the check below relies on
    assert metric_names('histogram_quantile(0.9, sum by (le) (rate(a_bucket{x=~"$node"}[5m]))) / '
                        "ignoring(y) b > 0") == {"a_bucket", "b"}
    assert metric_names("label_values(c_info, node)") == {"c_info"}
    assert metric_names('{__name__="d"} + on(node) group_left e offset 5m') == {"d", "e"}


def test_every_dashboard_expression_reads_exported_metrics(
    kube_control_plane: Any, kube_client: Any, prometheus_factory: Any, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run = uuid.uuid4().hex[:6]
    pool = f"dash{run}"  # node names of their own: the extender's twins meet no other test's nodes
    spec = tmp_path / "cluster.yaml"
    spec.write_text(yaml.safe_dump(cluster(pool)))
    pods = tmp_path / "pods.yaml"
    pods.write_text("---\n".join(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"p{k}", "namespace": "ml", "labels": {"gpucluster.io/tenant": "team-a"}},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {
            "nvidia.com/gpu": 1, "nvidia.com/gpumem": 20000, "nvidia.com/gpucores": 30}}}]}}) for k in range(5)))
    monkeypatch.setenv("GPUCLUSTER_ADMIN_TOKEN", TOKEN)
    ports = {"agent": free_port(), "up": free_port(), "extender": free_port()}
    procs = [
        Process(["agent", "--source", "sim", "--cluster", str(spec), "--node", "all", "--pods", str(pods),
                 "--control-plane", "--fault", f"{pool}-0000:1:79@0", "--listen", f"127.0.0.1:{ports['agent']}"],
                tmp_path / "agent.log").start(),
        Process(["up", "--cluster", str(spec), "--host", "127.0.0.1", "--port", str(ports["up"]),
                 "--data-dir", str(tmp_path / "up-data"), "--speed", "60"], tmp_path / "up.log").start(),
    ]
    reg = NodeRegistrar(kube_client, load_cluster(spec).nodes, registry(), interval=10.0)
    reg.register()
    ext = start_extender(kube_control_plane.kubeconfig, ports["extender"], tmp_path / "extender.log",
                         "--scheduler-name", f"dash-{run}")
    try:
        urls = {name: f"http://127.0.0.1:{port}/metrics" for name, port in ports.items()}
        for name in ("agent", "up"):
            wait_until(lambda name=name: httpx.get(urls[name], headers={"Authorization": f"Bearer {TOKEN}"},
                                                   timeout=5).status_code == 200, 60, f"{name} to serve /metrics")
        pod = gpu_pod("probe", f"dash-{run}", mem=4000, cores=10)
        pod["metadata"].update(namespace="default", uid=f"uid-{run}")
        r = httpx.post(f"http://127.0.0.1:{ports['extender']}/filter", timeout=10,
                       json={"Pod": pod, "NodeNames": [f"{pool}-0000", f"{pool}-0001"]})
        assert r.status_code == 200, r.text
        r = httpx.post(f"http://127.0.0.1:{ports['up']}/api/v1/jobs", timeout=10,
                       headers={"Authorization": f"Bearer {TOKEN}"},
                       json={"name": "probe", "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 25}})
        assert r.status_code == 201, r.text
        wait_until(lambda: "gpucluster_scheduling_decisions_total" in served_names(urls["up"], TOKEN), 60,
                   "up to have decided a job")
        served = {name: served_names(url, TOKEN if name == "up" else None) for name, url in urls.items()}
        exported = set().union(*served.values())
        model = dashboard()
        assert json.loads((REPO / "deploy" / "grafana" / "gpucluster.json").read_text()) == model
        used: dict[str, set[str]] = {}
        for expr in expressions(model):
            for name in metric_names(expr):
                used.setdefault(name, set()).add(expr)
        missing = {name: sorted(exprs) for name, exprs in used.items() if name not in exported}
        assert not missing, f"dashboard expressions read metrics nobody exports: {missing}"
        assert used.keys() & served["agent"] and used.keys() & served["up"] and used.keys() & served["extender"]
        for name in ("agent", "up"):  # both feed the decisions panel (up: its scheduler's on_decision hook)
            assert "gpucluster_scheduling_decisions_total" in served[name], name

        targets = [{"job_name": name, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
                    **({"authorization": {"credentials": TOKEN}} if name == "up" else {})}
                   for name, port in ports.items()]
        prom = prometheus_factory(targets)
        wait_until(lambda: len(prom.query("up == 1")) == 3, 60, "Prometheus to scrape all three")
        for name in sorted(used):
            wait_until(lambda name=name: prom.query(f'count({{__name__="{name}"}})'), 30, f"series of {name}")
        for expr in expressions(model):
            prom.query(promql(expr))  # raises unless Prometheus accepts the expression
    finally:
        ext.stop()
        reg.delete()
        for p in procs:
            p.stop()
