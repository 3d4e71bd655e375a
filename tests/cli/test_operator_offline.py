"""Issue 32 (CLI part) without a server: what the offline commands refuse and how they read at 80 columns."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.model import ContainerRequest, DeviceRequest, NodeSpec, Pod
from gpucluster.scheduler.feasibility import never_fits
from tests.helpers import gpu_node, state_of

runner = CliRunner()

TYPO_POD = """apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - name: c
    resources:
      limits: {nvidia.com/gpu: 1, nvidia.com/gpumemory: 8000}
"""


def test_schedule_refuses_a_resource_no_node_has(tmp_path: Path) -> None:
    """Item 1, offline: a typo is bad input (exit 2 naming the file, the pod and the field), not a pod that
    waits (exit 3)."""
    pods = tmp_path / "pods.yaml"
    pods.write_text(TYPO_POD)
    r = runner.invoke(app, ["schedule", "--pods", str(pods)])
    assert r.exit_code == 2, r.stdout
    assert f"{pods}: pod default/typo: resources.nvidia.com/gpumemory: no node has the resource" in r.stderr
    assert "did you mean nvidia.com/gpumem?" in r.stderr


def _pod(extended: dict[str, int]) -> Pod:
    return Pod(name="p", containers=(ContainerRequest("main", 1000, 1024, (DeviceRequest("nvidia", 1),),
                                                      extended=extended),))


def test_an_extended_resource_a_node_offers_is_not_refused() -> None:
    plain = gpu_node("a")
    offered = NodeSpec(name="b", cpu_milli=plain.cpu_milli, memory_mib=plain.memory_mib, devices=plain.devices,
                       leaf=plain.leaf, extended={"example.com/fpga": 2})
    state = state_of(plain, offered)
    assert never_fits([_pod({"example.com/fpga": 1})], state) is None
    found = never_fits([_pod({"example.com/fpgaa": 1})], state)
    assert found is not None and found.where == "resources.example.com/fpgaa"
    assert "did you mean example.com/fpga?" in found.why
