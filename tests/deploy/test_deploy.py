from __future__ import annotations

import stat
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.deploy.kind import CDI_PREFIX, KindConfigError, gpu_assignment, kind_config
from gpucluster.deploy.preflight import parse_version, run_preflight

runner = CliRunner()


def test_even_split_gives_remainder_to_first_workers() -> None:
    assert gpu_assignment(3, 8) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert gpu_assignment(2, 0) == [[], []]


def test_explicit_lists() -> None:
    assert gpu_assignment(3, 8, ["0", "1,2,3", "4-7"]) == [[0], [1, 2, 3], [4, 5, 6, 7]]
    assert gpu_assignment(2, 2, ["all", ""]) == [[0, 1], []]
    with pytest.raises(KindConfigError, match=r"--gpus-per-worker\[1\]: GPU 0 is already given to worker 0"):
        gpu_assignment(2, 4, ["0,1", "0"])
    with pytest.raises(KindConfigError, match="GPU 9 does not exist"):
        gpu_assignment(1, 4, ["9"])
    with pytest.raises(KindConfigError, match="expected once per worker"):
        gpu_assignment(2, 4, ["0"])


def test_kind_config_mounts_and_labels() -> None:
    cfg = kind_config(2, 3)
    assert cfg["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    workers = [n for n in cfg["nodes"] if n["role"] == "worker"]
    assert workers[0]["extraMounts"] == [
        {"hostPath": "/dev/null", "containerPath": f"{CDI_PREFIX}/0"},
        {"hostPath": "/dev/null", "containerPath": f"{CDI_PREFIX}/1"},
    ]
    assert workers[1]["labels"] == {"nvidia.com/gpu.present": "true"}
    assert cfg["nodes"][0] == {"role": "control-plane"}


def test_kind_config_cli() -> None:
    r = runner.invoke(app, ["deploy", "kind-config", "--workers", "2", "--gpus", "4",
                            "--gpus-per-worker", "0", "--gpus-per-worker", "1-3"])
    assert r.exit_code == 0, r.stderr
    doc = yaml.safe_load(r.stdout)
    assert len(doc["nodes"][2]["extraMounts"]) == 3
    r = runner.invoke(app, ["deploy", "kind-config", "--workers", "0"])
    assert r.exit_code == 2
    assert "--workers: must be within 1..256" in r.stderr


def _fake_tool(bindir: Path, name: str, output: str, code: int = 0) -> None:
    path = bindir / name
    assert "'" not in output
    path.write_text(f"#!/bin/sh\nprintf '%s\\n' '{output}'\nexit {code}\n")  # builtins only: PATH is bare
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def fake_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    monkeypatch.setenv("PATH", str(bindir))
    return bindir


def test_preflight_all_present(fake_path: Path) -> None:
    _fake_tool(fake_path, "docker", '24.0.7\n{"nvidia":{"path":"nvidia-container-runtime"},"runc":{}} nvidia')
    _fake_tool(fake_path, "kind", "kind v0.22.0 go1.21.7 linux/amd64")
    _fake_tool(fake_path, "kubectl", '{"clientVersion":{"gitVersion":"v1.29.2"},'
                                     '"serverVersion":{"gitVersion":"v1.29.1"}}')
    _fake_tool(fake_path, "helm", "v3.14.0+g3fc9f4b")
    _fake_tool(fake_path, "nvidia-smi", "535.104.05")
    _fake_tool(fake_path, "nvidia-ctk", "NVIDIA Container Toolkit CLI version 1.14.3")
    report = run_preflight()
    assert report.ok, report.text()
    assert "Kubernetes: version 1.29.1 (server)" in report.text()


def test_preflight_helm_too_old_still_fails(fake_path: Path) -> None:
    _fake_tool(fake_path, "helm", "v2.17.0+ga690bad")
    report = run_preflight()
    assert "[MISSING] helm: version 2.17.0 (need >= 3.0)" in report.text()


def test_preflight_reports_what_is_missing_and_how_to_fix(fake_path: Path) -> None:
    _fake_tool(fake_path, "nvidia-smi", "375.26")  # too old
    _fake_tool(fake_path, "kubectl", '{"clientVersion":{"gitVersion":"v1.15.3"}}')
    report = run_preflight()
    assert not report.ok
    text = report.text()
    assert "[MISSING] docker: not installed" in text
    assert "[MISSING] NVIDIA driver: version 375.26 (need >= 384.81)" in text
    assert "[MISSING] Kubernetes: version 1.15.3" in text
    # helm is optional (the chart is one of three ways to the same objects): not a failed check
    assert "[ok     ] helm: not installed (optional" in text and "fix: install helm 3" not in text
    assert "nvidia-ctk runtime configure" in text


def test_preflight_cli_exit_code(fake_path: Path) -> None:
    r = runner.invoke(app, ["deploy", "preflight", "--json"])
    assert r.exit_code == 1
    assert '"ok": false' in r.stdout


def test_parse_version() -> None:
    assert parse_version("Client Version: v1.20.2") == (1, 20, 2)
    assert parse_version("no digits") is None
