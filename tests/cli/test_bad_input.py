"""Issue 14, defect 9: bad files exit 2 with where and why, never a traceback (nor a run that never ends)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app

runner = CliRunner()

POD = """
kind: Pod
metadata: {{name: p}}
spec:
  containers:
  - name: c
    resources: {{limits: {limits}}}
"""

SPEC = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
nodePools:
- name: big
  count: {count}
  cpuMilli: 64000
  memoryMiB: 262144
  gpu: {{model: H100, count: 8, memoryMiB: 81559}}
"""


def _refused(args: list[str], *expected: str) -> None:
    res = runner.invoke(app, args)
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2, res.output
    for text in expected:
        assert text in res.output, res.output


def test_spec_validate_on_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.yaml"
    f.write_bytes("name: caf\xe9\n".encode("latin-1"))
    _refused(["spec", "validate", str(f)], "latin1.yaml", "not UTF-8")


@pytest.mark.parametrize(("limits", "why"), [
    ('{nvidia.com/gpu: "1e309"}', "out of range"),
    ("{nvidia.com/gpu: 1e22}", "at most 128"),
    ('{nvidia.com/gpu: 1, cpu: "1e999999"}', "out of range"),
    ('{nvidia.com/gpu: .nan}', "finite"),
])
def test_schedule_with_out_of_range_quantities(tmp_path: Path, limits: str, why: str) -> None:
    f = tmp_path / "pods.yaml"
    f.write_text(POD.format(limits=limits))
    _refused(["schedule", "--pods", str(f)], "pods.yaml", why)


def test_jobs_csv_with_a_nan_duration(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s\na,0,8,nan\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "jobs.csv:2: duration_s: must be a finite number")
    f.write_text("id,submit_s,gpus,duration_s\na,0,8,inf\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "jobs.csv:2: duration_s: must be a finite number")
    f.write_bytes(b"id,submit_s,gpus,duration_s\na,0,8,1\xff\n")
    _refused(["simulate", "--trace", f"jobs:{f}"], "not UTF-8")


def test_cluster_spec_with_a_hundred_million_nodes_is_refused_at_once(tmp_path: Path) -> None:
    f = tmp_path / "huge.yaml"
    f.write_text(SPEC.format(count=100_000_000))
    _refused(["spec", "validate", str(f)], "nodePools[0].count: must be <= 50000")
    second = SPEC.format(count=30_000).split("nodePools:\n")[1].replace("name: big", "name: more")
    f.write_text(SPEC.format(count=30_000) + second)
    _refused(["spec", "validate", str(f)], "at most 50,000")
