"""The real kube-scheduler (v1.37.2 and v1.35.4) with gpucluster's extender, on a real API server: 120 registered GPU
nodes of four models and three vendors, 1,000 HAMi pods created at once, the extender killed and restarted
in the middle. Everything is checked by reading the API server back."""

from __future__ import annotations

import random
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from k8s_helpers import (
    bound,
    core_api,
    create_pods,
    device_usage_violations,
    free_port,
    gpu_pod,
    list_nodes,
    list_pods,
    mixed_spec,
    registry,
    start_extender,
    wait_until,
)

from gpucluster.kubernetes.manifests import scheduler_config
from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.spec import load_cluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def fleet(kube_client: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any]]:
    """120 simulated GPU nodes registered through NodeRegistrar (what ``k8s register-nodes`` runs)."""
    run = uuid.uuid4().hex[:6]
    path = tmp_path_factory.mktemp("fleet") / "cluster.yaml"
    path.write_text(mixed_spec(run))
    cluster = load_cluster(path)
    reg = NodeRegistrar(kube_client, cluster.nodes, registry(), interval=10.0)
    reg.register()
    keeper = threading.Thread(target=reg.run, daemon=True)  # keep the device handshakes fresh
    keeper.start()
    try:
        yield run, cluster
    finally:
        reg.stop()
        keeper.join(30)
        reg.delete()


def _config(port: int, name: str, kube_version: str, node_cache_capable: bool = True) -> str:
    cfg = scheduler_config(f"http://127.0.0.1:{port}", registry(), name, node_cache_capable=node_cache_capable,
                           kube_version=kube_version)
    cfg["podInitialBackoffSeconds"] = 1
    cfg["podMaxBackoffSeconds"] = 2
    return yaml.safe_dump(cfg, sort_keys=False)


def test_registered_nodes_carry_hami_annotations(kube_client: Any, fleet: tuple[str, Any]) -> None:
    run, cluster = fleet
    nodes = list_nodes(core_api(kube_client), f"gpucluster.io/run={run}")
    assert len(nodes) == len(cluster.nodes) == 120
    models = {n["metadata"]["labels"]["gpucluster.io/gpu-model"] for n in nodes}
    assert models == {"A100-SXM4-80GB", "L40S-48GB", "MLU370-X8", "Z100"}
    a100 = next(n for n in nodes if n["metadata"]["name"] == f"a100-{run}-0000")
    assert a100["status"]["allocatable"]["nvidia.com/gpu"] == "32"  # 8 devices x 4 tasks, as HAMi reports
    assert a100["metadata"]["annotations"]["hami.io/node-handshake"].startswith("Reported_")
    assert '"type":"NVIDIA-A100-SXM4-80GB"' in a100["metadata"]["annotations"]["hami.io/node-nvidia-register"]
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in a100["status"]["conditions"])


def test_thousand_pods_through_kube_scheduler_with_restart(
    kube_control_plane: Any, kube_client: Any, kube_scheduler_factory: Any, fleet: tuple[str, Any],
    namespace: str, tmp_path: Path,
) -> None:
    run, _cluster = fleet
    core = core_api(kube_client)
    port = free_port()
    name = f"gpucluster-{run}"
    ext = start_extender(kube_control_plane.kubeconfig, port, tmp_path / "extender.log",
                         "--scheduler-name", name)
    try:
        kube_scheduler_factory(_config(port, name, kube_control_plane.minor), name=f"ext-{run}")
        pods: list[dict[str, Any]] = []
        for i in range(500):
            pods.append(gpu_pod(f"nv-{i:04d}", name, "nvidia", 1, 8000, 20, run=run))
        for i in range(50):
            pods.append(gpu_pod(f"nv2-{i:04d}", name, "nvidia", 2, 4000, 10, run=run))
        for i in range(50):
            pods.append(gpu_pod(f"a100-{i:04d}", name, "nvidia", 1, 10000, 10, run=run,
                                annotations={"nvidia.com/use-gputype": "A100"}))
        for i in range(175):
            pods.append(gpu_pod(f"mlu-{i:04d}", name, "cambricon", 1, 4000, 20, run=run))
        for i in range(175):
            pods.append(gpu_pod(f"dcu-{i:04d}", name, "hygon", 1, 4000, 20, run=run))
        for i in range(25):  # more memory than any device has
            pods.append(gpu_pod(f"huge-{i:04d}", name, "nvidia", 1, 200000, 10, run=run))
        for i in range(25):  # a model nobody has
            pods.append(gpu_pod(f"h100-{i:04d}", name, "nvidia", 1, 1000, 10, run=run,
                                annotations={"nvidia.com/use-gputype": "H100"}))
        assert len(pods) == 1000
        fits = {p["metadata"]["name"] for p in pods if not p["metadata"]["name"].startswith(("huge", "h100"))}
        random.Random(7).shuffle(pods)
        create_pods(core, namespace, pods[:600])

        # kill the extender in the middle of the run (binds in flight), create the rest while it is down,
        # then start it again on the same port
        wait_until(lambda: len(bound(list_pods(core, namespace))) >= 200, 120, "200 pods bound")
        ext.kill()
        create_pods(core, namespace, pods[600:])
        at_kill = bound(list_pods(core, namespace))
        assert 200 <= len(at_kill) < len(fits), "the restart must happen in the middle of the run"
        ext = start_extender(kube_control_plane.kubeconfig, port, tmp_path / "extender.log",
                             "--scheduler-name", name)

        wait_until(lambda: fits <= set(bound(list_pods(core, namespace))), 150,
                   "every pod that fits to be bound")
        final = list_pods(core, namespace)
        placed = bound(final)
        # nothing lost: pods bound before the kill stayed where they were
        assert all(placed[k] == v for k, v in at_kill.items())
        assert set(placed) == fits
        # nothing double-allocated: per device, read back from the API server
        nodes = list_nodes(core, f"gpucluster.io/run={run}")
        assert device_usage_violations(nodes, final) == []
        for pod in final:
            if pod["metadata"]["name"] in fits:
                ann = pod["metadata"]["annotations"]
                assert ann["hami.io/vgpu-node"] == pod["spec"]["nodeName"]
                assert ann["hami.io/vgpu-time"].isdigit()
        # A100-only pods are on A100 nodes
        assert all(v.startswith(f"a100-{run}") for k, v in placed.items() if k.startswith("a100-"))

        # pods that cannot fit carry our counted reasons
        def reasons() -> dict[str, str]:
            out = {}
            for pod in list_pods(core, namespace):
                conds = [c for c in pod["status"].get("conditions") or [] if c["type"] == "PodScheduled"]
                if conds and conds[0]["status"] == "False":
                    out[pod["metadata"]["name"]] = conds[0].get("message", "")
            return out

        unfit = {p["metadata"]["name"] for p in pods} - fits

        def unfit_reasons() -> dict[str, str] | None:
            r = {k: m for k, m in reasons().items() if k in unfit and m.startswith("0/")}
            return r if len(r) == len(unfit) else None

        # kube-scheduler retries a pod that failed while the extender was down only after its backoff
        # (pods an error sent back wait in its backoff queue, unschedulable ones until a cluster event or
        # podMaxInUnschedulablePodsDuration), so on a loaded machine the last reasons can take a while to appear
        msgs = wait_until(unfit_reasons, 300, "50 unschedulable conditions with counted reasons")
        assert all("InsufficientGPUMemory" in m for k, m in msgs.items() if k.startswith("huge"))
        assert all("GPUTypeMismatch" in m for k, m in msgs.items() if k.startswith("h100"))
        assert all(m.startswith("0/") for m in msgs.values())

        metrics = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        assert 'gpucluster_extender_requests_total{result="ok",verb="bind"}' in metrics
        assert "gpucluster_scheduler_unaccounted 0.0" in metrics
    finally:
        ext.stop()
