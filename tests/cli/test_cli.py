from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gpucluster.cli.main import app

runner = CliRunner()

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: small-1, namespace: ml}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4000, nvidia.com/gpucores: 20, cpu: "2", memory: 8Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: small-2, namespace: ml}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpumem: 4000, nvidia.com/gpucores: 20, cpu: "2", memory: 8Gi}}
---
apiVersion: v1
kind: Pod
metadata: {name: too-big, namespace: ml}
spec:
  containers:
  - name: c
    resources: {limits: {nvidia.com/gpu: 9}}
"""

CLUSTER = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: small
nodePools:
  - {name: a, count: 3, cpuMilli: 64000, memoryMiB: 262144,
     gpu: {model: A100, count: 4, memoryMiB: 40960}}
"""


def files(tmp_path: Path) -> tuple[Path, Path]:
    pods = tmp_path / "pods.yaml"
    pods.write_text(PODS)
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(CLUSTER)
    return pods, cluster


def placements(tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    pods, cluster = files(tmp_path)
    r = runner.invoke(app, ["schedule", "--cluster", str(cluster), "--pods", str(pods), "--json", *extra])
    assert r.exit_code == 3, r.output  # ml/too-big is not placed
    body = json.loads(r.stdout)
    assert (body["placed"], body["unplaced"]) == (2, 1)
    return body["placements"]  # type: ignore[no-any-return]


def test_schedule_json_shape_and_reasons(tmp_path: Path) -> None:
    out = placements(tmp_path)
    assert [p["pod"] for p in out] == ["ml/small-1", "ml/small-2", "ml/too-big"]
    first = out[0]
    assert first["node"].startswith("a-")  # type: ignore[union-attr]
    dev = first["devices"][0][0]  # type: ignore[index]
    assert first["devices"] == [[{"id": dev["id"], "memory_mib": 4000, "cores": 20, "index": dev["index"],
                                  "share": 0.2, "whole": False}]]  # max(20 % compute, 4000/40960 memory)
    assert out[2]["node"] is None and out[2]["devices"] == []
    assert out[2]["reasons"] == {"InsufficientGPUCount": 3}
    assert out[2]["why"] == "0/3 nodes are available: 3 InsufficientGPUCount."
    assert "why" not in first


def test_binpack_and_spread_differ_at_node_and_device_level(tmp_path: Path) -> None:
    packed = placements(tmp_path, "--node-policy", "binpack", "--gpu-policy", "binpack")
    spread = placements(tmp_path, "--node-policy", "spread", "--gpu-policy", "spread")
    assert packed[0]["node"] == packed[1]["node"]
    assert packed[0]["devices"][0][0]["id"] == packed[1]["devices"][0][0]["id"]  # type: ignore[index]
    assert spread[0]["node"] != spread[1]["node"]
    same_node = placements(tmp_path, "--node-policy", "binpack", "--gpu-policy", "spread")
    assert same_node[0]["node"] == same_node[1]["node"]
    assert same_node[0]["devices"][0][0]["id"] != same_node[1]["devices"][0][0]["id"]  # type: ignore[index]


def test_schedule_policy_option(tmp_path: Path) -> None:
    default = placements(tmp_path)
    assert placements(tmp_path, "--policy", "default") == default
    assert placements(tmp_path, "--policy", "stranding-fgd") == default
    # the explicit fgd-paper profiles run too, with the same JSON shape
    assert [p["pod"] for p in placements(tmp_path, "--policy", "bestfit")] == [p["pod"] for p in default]
    pods, cluster = files(tmp_path)
    r = runner.invoke(app, ["schedule", "--cluster", str(cluster), "--pods", str(pods), "--policy", "nope"])
    assert r.exit_code == 2 and "--placement-policy 'nope': unknown" in r.output
    r = runner.invoke(app, ["schedule", "--cluster", str(cluster), "--pods", str(pods), "--policy", "fgd",
                            "--node-policy", "spread"])
    assert r.exit_code == 2 and "cannot be combined" in r.output


def test_schedule_table_output(tmp_path: Path) -> None:
    pods, cluster = files(tmp_path)
    r = runner.invoke(app, ["schedule", "--cluster", str(cluster), "--pods", str(pods)], env={"COLUMNS": "80"})
    assert r.exit_code == 3  # one pod was not placed
    words = " ".join(r.output.split())
    assert "2/3 placed" in words and "3 InsufficientGPUCount." in words  # the reason whole (wrapped), at 80 columns
    assert all(len(line) <= 80 for line in r.output.splitlines())


def test_bad_inputs_exit_2_with_where_and_why(tmp_path: Path) -> None:
    pods, cluster = files(tmp_path)
    bad = tmp_path / "bad.yaml"
    bad.write_text(CLUSTER.replace("memoryMiB: 40960", "memoryMiB: -1"))
    r = runner.invoke(app, ["spec", "validate", str(bad)])
    assert r.exit_code == 2
    assert "nodePools[0].gpu.memoryMiB: must be > 0" in r.output
    badpods = tmp_path / "badpods.yaml"
    # two bad pods: both reported at once, each with where and why
    badpods.write_text(PODS.replace("nvidia.com/gpucores: 20", "nvidia.com/gpumem-percentage: 200")
                       .replace("limits:", "limit:", 1))
    r = runner.invoke(app, ["schedule", "--cluster", str(cluster), "--pods", str(badpods)], terminal_width=300)
    assert r.exit_code == 2
    assert "document 0: spec.containers[0].resources.limit: unknown field; did you mean 'limits'?" in r.output
    assert "document 1: spec.containers[0].resources.limits: nvidia.com/gpumem-percentage: must be at most 100" \
        in r.output
    r = runner.invoke(app, ["schedule", "--pods", str(pods), "--node-policy", "sideways"])
    assert r.exit_code == 2


def test_spec_show_and_validate(tmp_path: Path) -> None:
    _, cluster = files(tmp_path)
    r = runner.invoke(app, ["spec", "validate", str(cluster), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["gpus"] == 12
    r = runner.invoke(app, ["spec", "show", "--json"])
    summary = json.loads(r.stdout)
    assert summary["nodes"] == 240 and summary["gpus"] == 1920
    r = runner.invoke(app, ["spec", "show", "--raw"])
    assert "kind: ClusterSpec" in r.output


def test_demo_json_compares_policies() -> None:
    r = runner.invoke(app, ["demo", "--pods", "400", "--policy", "binpack", "--policy", "spread", "--json"])
    assert r.exit_code == 0, r.output
    results = json.loads(r.stdout)["results"]
    assert [x["policy"] for x in results] == ["binpack", "spread"]
    assert all(0 < x["placed"] <= 400 for x in results)
    r = runner.invoke(app, ["demo", "--pods", "10", "--policy", "nope"])
    assert r.exit_code == 2
