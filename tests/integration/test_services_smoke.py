"""Smoke tests of the real services the integration suite runs on: kube-apiserver v1.37.2 and v1.35.4 (+ kube-scheduler)
and Prometheus. They prove the fixtures work; product tests build on them."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest
from kubernetes import client
from kubernetes.client import ApiException
from polling import wait_until
from prometheus_client import CollectorRegistry, Gauge, make_wsgi_app

pytestmark = pytest.mark.integration




def _uid() -> str:
    return uuid.uuid4().hex[:6]


def _pod(name: str, scheduler_name: str, gpus: int = 1, node_selector: dict[str, str] | None = None) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name),
        spec=client.V1PodSpec(
            scheduler_name=scheduler_name,
            node_selector=node_selector,
            containers=[
                client.V1Container(
                    name="main",
                    image="busybox:1.36",
                    resources=client.V1ResourceRequirements(
                        requests={"nvidia.com/gpu": str(gpus)}, limits={"nvidia.com/gpu": str(gpus)}
                    ),
                )
            ],
        ),
    )


def test_apiserver_version(kube_control_plane: Any, kube_client: Any) -> None:
    info = client.VersionApi(kube_client).get_code()
    assert info.git_version == kube_control_plane.version
    assert (info.major, info.minor) == ("1", kube_control_plane.minor.split(".")[1])
    assert kube_control_plane.version in kube_control_plane.log()  # "Version" line of kube-apiserver's log


def test_fake_gpu_nodes_report_allocatable(kube_client: Any, gpu_node_factory: Any) -> None:
    core: Any = client.CoreV1Api(kube_client)
    run = _uid()
    gpus = {f"gpu-{run}-{i}": 8 // (i + 1) for i in range(3)}  # 8, 4, 2 GPUs
    for i, (name, count) in enumerate(gpus.items()):
        gpu_node_factory(
            name,
            {"nvidia.com/gpu": count},
            annotations={"gpucluster.io/gpu-model": "A100-80G"},
            labels={"gpucluster.io/run": run, "topology.kubernetes.io/zone": f"rack-{i}"},
        )
    nodes = core.list_node(label_selector=f"gpucluster.io/run={run}").items
    assert {n.metadata.name: int(n.status.allocatable["nvidia.com/gpu"]) for n in nodes} == gpus
    for node in nodes:
        assert node.status.capacity["nvidia.com/gpu"] == node.status.allocatable["nvidia.com/gpu"]
        assert node.metadata.annotations["gpucluster.io/gpu-model"] == "A100-80G"
        ready = [c for c in node.status.conditions if c.type == "Ready"]
        assert ready
        assert ready[0].status == "True"
        assert not node.spec.taints  # TaintNodesByCondition is off: nothing would ever remove the taint


def test_bind_pod_then_second_bind_conflicts(kube_client: Any, gpu_node_factory: Any, namespace: str) -> None:
    core: Any = client.CoreV1Api(kube_client)
    run = _uid()
    gpu_node_factory(f"bind-{run}-a", {"nvidia.com/gpu": 8})
    gpu_node_factory(f"bind-{run}-b", {"nvidia.com/gpu": 8})
    # a scheduler name nobody serves: only the test binds this pod
    core.create_namespaced_pod(namespace, _pod("p0", scheduler_name="nobody"))

    def bind(node: str) -> None:
        body = client.V1Binding(
            metadata=client.V1ObjectMeta(name="p0"),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # the reply is a Status object the client cannot deserialize as V1Binding
        resp = core.create_namespaced_binding(namespace, body, _preload_content=False)
        assert resp.status == 201

    bind(f"bind-{run}-a")
    assert core.read_namespaced_pod("p0", namespace).spec.node_name == f"bind-{run}-a"
    with pytest.raises(ApiException) as err:
        bind(f"bind-{run}-b")
    assert err.value.status == 409
    assert "already assigned" in (err.value.body or "")
    assert core.read_namespaced_pod("p0", namespace).spec.node_name == f"bind-{run}-a"


def test_kube_scheduler_binds_to_fake_gpu_node(
    kube_client: Any, kube_scheduler_factory: Any, gpu_node_factory: Any, namespace: str
) -> None:
    core: Any = client.CoreV1Api(kube_client)
    run = _uid()
    sched_name = f"smoke-{run}"
    scheduler = kube_scheduler_factory(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"profiles:\n- schedulerName: {sched_name}\n"
    )
    assert scheduler.alive()
    gpu_node_factory(f"sched-{run}-small", {"nvidia.com/gpu": 1}, labels={"gpucluster.io/run": run})
    gpu_node_factory(f"sched-{run}-big", {"nvidia.com/gpu": 8}, labels={"gpucluster.io/run": run})
    pod = _pod("p4", sched_name, gpus=4, node_selector={"gpucluster.io/run": run})
    core.create_namespaced_pod(namespace, pod)

    def bound_node() -> str | None:
        spec = core.read_namespaced_pod("p4", namespace).spec
        return spec.node_name if spec else None

    node = wait_until(bound_node, 60, "kube-scheduler to bind the pod")
    assert node == f"sched-{run}-big"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def metrics_server() -> Iterator[tuple[int, Gauge]]:
    """A prometheus-client exporter on 127.0.0.1 (free port) with one gauge."""
    registry = CollectorRegistry()
    gauge = Gauge("gpucluster_smoke_gpus_free", "free GPUs (smoke test)", ["node"], registry=registry)
    server: WSGIServer = make_server("127.0.0.1", 0, make_wsgi_app(registry), handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, gauge
    finally:
        server.shutdown()
        server.server_close()


def test_prometheus_scrapes_exporter(prometheus_factory: Any, metrics_server: tuple[int, Gauge]) -> None:
    port, gauge = metrics_server
    gauge.labels(node="gpu-0").set(6)
    prom = prometheus_factory([{"job_name": "smoke", "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}])
    query = 'gpucluster_smoke_gpus_free{job="smoke",node="gpu-0"}'

    def value() -> float | None:
        result = prom.query(query)
        return float(result[0]["value"][1]) if result else None

    assert wait_until(lambda: value() == 6, 60, "prometheus to scrape 6")
    gauge.labels(node="gpu-0").set(2.5)
    assert wait_until(lambda: value() == 2.5, 60, "prometheus to scrape the new value 2.5")
    up = prom.query('up{job="smoke"}')
    assert up
    assert up[0]["value"][1] == "1"


def test_controller_manager_runs_jobs(kube_controller_manager: Any, kube_client: Any, namespace: str) -> None:
    """kube-controller-manager of the control plane's version is there for the tests that need controllers: its
    Job controller makes a Job's pods (they wait unscheduled: no scheduler serves their name, no kubelet)."""
    batch = client.BatchV1Api(kube_client)
    core: Any = client.CoreV1Api(kube_client)
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "two"},
           "spec": {"parallelism": 2, "completions": 2, "template": {"spec": {
               "schedulerName": "nobody", "restartPolicy": "Never",
               "containers": [{"name": "c", "image": "busybox:1.36"}]}}}}
    batch.create_namespaced_job(namespace, job)

    def pods_of_the_job() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector="job-name=two").items
        return pods if len(pods) == 2 else []

    pods = wait_until(pods_of_the_job, 60, "the Job controller to create 2 pods")
    assert all(p.metadata.owner_references[0].kind == "Job" for p in pods)
    assert all(not p.spec.node_name for p in pods)
    assert kube_controller_manager.pid > 0
