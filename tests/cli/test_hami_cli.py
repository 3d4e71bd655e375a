"""``--device-config`` on the commands that schedule, and HAMi's semantics through ``gpucluster schedule``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpucluster.cli.main import app

runner = CliRunner()

NODES = """
apiVersion: v1
kind: Node
metadata:
  name: node1
  annotations:
    hami.io/node-nvidia-register: '[{"id":"GPU-a","index":0,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-A10","numa":0,"health":true},{"id":"GPU-b","index":1,"count":10,"devmem":8000,"devcore":100,"type":"NVIDIA-A10","numa":0,"health":true}]'
status:
  allocatable: {cpu: "32", memory: 64Gi, nvidia.com/gpu: "20", example.com/fpga: "2"}
"""

TYPO = """
apiVersion: v1
kind: Pod
metadata: {name: typo}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpus: 1}}
"""

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: renamed}
spec:
  containers:
  - name: c
    resources: {limits: {hami.io/gpu: 1, hami.io/gpumem: 1000}}
---
apiVersion: v1
kind: Pod
metadata: {name: fpga}
spec:
  initContainers:
  - name: warm
    resources: {limits: {hami.io/gpu: 1, hami.io/gpumem: 3000}}
  containers:
  - name: c
    resources: {limits: {example.com/fpga: 2, hami.io/gpu: 1, hami.io/gpumem: 500}}
"""


def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    nodes, pods, config = tmp_path / "nodes.yaml", tmp_path / "pods.yaml", tmp_path / "device-config.yaml"
    nodes.write_text(NODES)
    pods.write_text(PODS)
    config.write_text("nvidia:\n  resourceCountName: hami.io/gpu\n  resourceMemoryName: hami.io/gpumem\n"
                      "  gpuCorePolicy: default\n")
    return nodes, pods, config


def test_schedule_reads_the_device_config(tmp_path: Path) -> None:
    nodes, pods, config = files(tmp_path)
    r = runner.invoke(app, ["schedule", "--cluster", str(nodes), "--pods", str(pods), "--policy", "binpack",
                            "--device-config", str(config), "--json"])
    assert r.exit_code == 0, r.output
    got = {p["pod"]: p for p in json.loads(r.stdout)["placements"]}
    # hami.io/gpu is the GPU count here; 1000 MiB and no cores: HAMi's defaultCores (0), spread: the later GPU
    dev = got["default/renamed"]["devices"][0][0]
    assert {k: dev[k] for k in ("id", "memory_mib", "cores", "whole")} == {"id": "GPU-b", "memory_mib": 1000,
                                                                           "cores": 0, "whole": False}
    # the init container fits on its own; the extended resource the node offers is checked
    assert got["default/fpga"]["node"] == "node1"
    assert len(got["default/fpga"]["init_devices"]) == 1
    # the unused plugin-only setting is reported, not silently dropped
    assert "gpuCorePolicy" in r.stderr and "not used" in r.stderr
    # a resource no node offers is never ignored: the file is refused, naming the pod and the closest name
    pods.write_text(PODS + "---" + TYPO)
    r = runner.invoke(app, ["schedule", "--cluster", str(nodes), "--pods", str(pods), "--device-config",
                            str(config)])
    assert r.exit_code == 2, r.output
    assert "pod default/typo: resources.nvidia.com/gpus: no node has the resource nvidia.com/gpus; did you mean " \
           "nvidia.com/gpu?" in r.stderr


def test_without_the_config_the_renamed_resources_are_unknown(tmp_path: Path) -> None:
    nodes, pods, _ = files(tmp_path)
    r = runner.invoke(app, ["schedule", "--cluster", str(nodes), "--pods", str(pods), "--json"])
    assert r.exit_code == 2, r.output  # no node offers hami.io/gpu as a plain resource either
    assert "pod default/renamed: resources.hami.io/gpu: no node has the resource hami.io/gpu" in r.stderr


@pytest.mark.parametrize("command", [
    ["schedule", "--pods", "PODS"],
    ["simulate", "--trace", "synthetic:5"],
    ["up", "--port", "0"],
    ["k8s", "extender"],
    ["k8s", "scheduler"],
])
def test_a_bad_device_config_is_refused_with_where_and_why(tmp_path: Path, command: list[str]) -> None:
    _, pods, _ = files(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text("nvidia:\n  defaultGPUnum: 2\n")
    args = [str(pods) if a == "PODS" else a for a in command]
    r = runner.invoke(app, [*args, "--device-config", str(bad)])
    assert r.exit_code == 2, r.output
    assert "nvidia.defaultGPUnum: unknown setting; did you mean 'defaultGPUNum'?" in r.output


def test_manifests_manage_the_configured_resource_names(tmp_path: Path) -> None:
    _, _, config = files(tmp_path)
    r = runner.invoke(app, ["k8s", "manifests", "--device-config", str(config)])
    assert r.exit_code == 0, r.output
    assert "name: hami.io/gpu" in r.stdout and "name: nvidia.com/gpu\n" not in r.stdout
    objs = [o for o in yaml.safe_load_all(r.stdout) if o]
    # the file itself reaches the scheduler pods: its ConfigMap, mounted, and the flag naming it
    cm = next(o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-device-config"))
    assert yaml.safe_load(cm["data"]["device-config.yaml"]) == yaml.safe_load(config.read_text())
    ext = next(c for o in objs if o["kind"] == "Deployment" for c in o["spec"]["template"]["spec"]["containers"]
               if c["name"] == "extender")
    flag = ext["command"].index("--device-config")
    mount = next(m for m in ext["volumeMounts"] if m["name"] == "device-config")
    assert ext["command"][flag + 1] == f"{mount['mountPath']}/device-config.yaml"
