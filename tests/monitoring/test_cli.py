"""``gpucluster agent``, ``monitor rules``, ``monitor fault`` and ``analyze job`` end to end."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.monitoring import rule_file

runner = CliRunner()

CLUSTER = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: small
nodePools:
  - {name: a, count: 3, cpuMilli: 64000, memoryMiB: 262144,
     gpu: {model: H100-SXM5-80GB, count: 4, memoryMiB: 81559, nvlinkDomainSize: 4}}
"""


def pod(name: str, activity: str, gpus: int = 1, cores: int = 30, labels: str = "") -> str:
    return f"""apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: ml, annotations: {{gpucluster.io/activity: {activity}}}{labels}}}
spec:
  containers:
  - name: c
    resources: {{limits: {{nvidia.com/gpu: {gpus}, nvidia.com/gpumem: 20000, nvidia.com/gpucores: {cores}, cpu: "2", memory: 8Gi}}}}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    c = tmp_path / "cluster.yaml"
    c.write_text(CLUSTER)
    p = tmp_path / "pods.yaml"
    p.write_text("---\n".join([pod(f"p{k}", "compute" if k % 2 else "idle") for k in range(6)]
                              + [pod("loader", "input", cores=100), pod("trainer", "memory", cores=100)]))
    return c, p


def test_rules_to_stdout_file_and_json(tmp_path: Path) -> None:
    r = runner.invoke(app, ["monitor", "rules"])
    assert r.exit_code == 0 and r.stdout == rule_file()
    out = tmp_path / "rules.yml"
    r = runner.invoke(app, ["monitor", "rules", "--out", str(out)])
    assert r.exit_code == 0 and out.read_text() == rule_file()
    r = runner.invoke(app, ["monitor", "rules", "--json"])
    rules = json.loads(r.stdout)["rules"]
    assert {x["alert"] for x in rules} >= {"GpuXidCritical", "GpuMissing", "PodsPendingTooLong"}
    r = runner.invoke(app, ["monitor", "rules", "--out", str(tmp_path / "no" / "such" / "dir.yml")])
    assert r.exit_code == 2 and "--out" in r.output


def test_fault_drill_drains_without_loss(files: tuple[Path, Path], tmp_path: Path) -> None:
    c, p = files
    audit = tmp_path / "audit.jsonl"
    r = runner.invoke(app, ["monitor", "fault", "--cluster", str(c), "--pods", str(p), "--xid", "79",
                            "--audit-log", str(audit), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["lost"] == [] and out["placed_before"] == 8 and out["node_schedulable"] is False
    drain = next(a for a in out["actions"] if a["action"] == "drain")
    assert drain["outcome"] == "done" and drain["detail"]["evicted"]
    assert set(drain["detail"]["evicted"]) == set(drain["detail"]["rescheduled"]) | set(out["pending_after"])
    assert json.loads(audit.read_text().splitlines()[0])["action"] == "drain"
    r = runner.invoke(app, ["monitor", "fault", "--cluster", str(c), "--pods", str(p), "--dry-run", "--json"])
    out = json.loads(r.stdout)
    assert out["node_schedulable"] is True and out["actions"][0]["outcome"] == "dry-run"
    r = runner.invoke(app, ["monitor", "fault", "--cluster", str(c), "--pods", str(p), "--node", "zz"])
    assert r.exit_code == 2 and "--node 'zz'" in r.output
    r = runner.invoke(app, ["monitor", "fault", "--cluster", str(c), "--pods", str(p), "--gpu", "9"])
    assert r.exit_code == 2 and "has 4 devices" in r.output


def test_fault_drill_table_says_what_was_done_in_words(files: tuple[Path, Path]) -> None:
    c, p = files
    r = runner.invoke(app, ["monitor", "fault", "--cluster", str(c), "--pods", str(p), "--xid", "79"],
                      env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    assert "{'" not in r.stdout and "evicted': [" not in r.stdout  # no Python dict repr
    words = " ".join(r.stdout.split())
    assert "GpuXidCritical" in words and "cordoned the node and evicted" in words
    assert all(len(line) <= 80 for line in r.stdout.splitlines())


def test_analyze_job_from_file_and_sim(files: tuple[Path, Path], tmp_path: Path) -> None:
    c, p = files
    m = tmp_path / "m.csv"
    m.write_text("job,gpu_util,dram_active,tensor_active\nj1,40,0.9,0.05\nj1,42,0.8,0.05\n")
    r = runner.invoke(app, ["analyze", "job", "j1", "--metrics", str(m), "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["verdict"] == "memory-bound"
    r = runner.invoke(app, ["analyze", "job", "j1", "--metrics", str(m)], terminal_width=200)
    assert r.exit_code == 0 and "memory-bound" in r.output and "why:" in r.output
    r = runner.invoke(app, ["analyze", "job", "loader", "--source", "sim", "--cluster", str(c), "--pods", str(p),
                            "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["verdict"] == "input-bound"
    r = runner.invoke(app, ["analyze", "job", "p1", "--pods", str(p), "--cluster", str(c), "--json"])
    assert json.loads(r.stdout)["verdict"] == "compute-bound"  # busy within its 30 % share of the device


@pytest.mark.parametrize(("args", "match"), [
    (["analyze", "job", "nope", "--metrics", "{m}"], "job 'nope': not in"),
    (["analyze", "job", "j1"], "give --metrics"),
    (["analyze", "job", "j1", "--source", "carrier-pigeon", "--metrics", "{m}"], "--source 'carrier-pigeon'"),
    (["analyze", "job", "j1", "--metrics", "{missing}"], "no such file"),
    (["analyze", "job", "ghost", "--source", "sim", "--pods", "{p}", "--cluster", "{c}"], "job 'ghost'"),
    # flags the chosen source does not read were ignored without a word (exit 0, an answer from the other source)
    (["analyze", "job", "j1", "--metrics", "{m}", "--pods", "{p}"], "--pods: used with --source sim only"),
    (["analyze", "job", "j1", "--metrics", "{m}", "--cluster", "{c}"], "--cluster: used with --source sim only"),
    (["analyze", "job", "p1", "--source", "sim", "--pods", "{p}", "--metrics", "{m}"], "not read with --source sim"),
    (["agent", "--source", "sim", "--cluster", "{c}", "--placement-policy", "bogus", "--duration", "0.01"],
     "--placement-policy 'bogus': unknown"),
    (["agent", "--listen", "localhost"], "expected HOST:PORT"),
    (["agent", "--listen", "127.0.0.1:99999"], "expected HOST:PORT"),
    (["agent", "--source", "tpu"], "--source 'tpu'"),
    (["agent", "--source", "sim", "--cluster", "{c}", "--node", "zz"], "--node 'zz'"),
    (["agent", "--source", "sim", "--cluster", "{c}", "--fault", "a-0000:9:79@1"], "has no GPU 9"),
    (["agent", "--source", "sim", "--cluster", "{c}", "--fault", "a-0000:x"], "expected NODE:GPU:XID@SECONDS"),
])
def test_bad_input_exits_2(files: tuple[Path, Path], tmp_path: Path, args: list[str], match: str) -> None:
    c, p = files
    m = tmp_path / "m.csv"
    m.write_text("job,gpu_util\nj1,50\n")
    subs = {"{m}": str(m), "{p}": str(p), "{c}": str(c), "{missing}": str(tmp_path / "missing.csv")}
    r = runner.invoke(app, [subs.get(a, a) for a in args], terminal_width=300)
    assert r.exit_code == 2, r.output
    assert match in r.output.replace("\n", "")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_agent_process_serves_metrics(files: tuple[Path, Path]) -> None:
    c, p = files
    port = _free_port()
    exe = Path(sys.executable).with_name("gpucluster")
    proc = subprocess.Popen(
        [str(exe), "agent", "--listen", f"127.0.0.1:{port}", "--source", "sim", "--cluster", str(c),
         "--pods", str(p), "--node", "all", "--control-plane", "--duration", "60", "--fault", "a-0001:2:79@0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        deadline = time.monotonic() + 30
        body = ""
        # label order is the renderer's (sorted, as generate_latest writes them): look for both labels anywhere
        xid = re.compile(r'DCGM_FI_DEV_XID_ERRORS\{(?=[^}]*\bgpu="2")(?=[^}]*Hostname="a-0001")[^}]*\} 79\.0')
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                if xid.search(body):
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        assert xid.search(body), body[:2000]
        assert body, proc.stderr.read().decode() if proc.stderr and proc.poll() is not None else "no answer"
        assert body.count("DCGM_FI_DEV_GPU_UTIL{") == 12
        assert 'gpucluster_device_tasks{' in body and "gpucluster_scheduler_pending_pods 0.0" in body
    finally:
        proc.send_signal(signal.SIGINT)
        # communicate() drains the pipes while waiting: a child blocked writing to a full pipe cannot exit
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0
    assert b"serving http://127.0.0.1:" in err


def test_agent_nvml_without_gpu_is_a_usage_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.monitoring.test_collectors import fake_pynvml

    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(gpus=0))
    r = runner.invoke(app, ["agent", "--source", "nvml"], terminal_width=300)
    assert r.exit_code == 2 and "NVML sees no GPU" in r.output and "--source sim" in r.output


@pytest.mark.parametrize("job", ["[/x]", "a[bold]b"])
def test_analyze_job_prints_a_job_id_with_brackets_as_it_is(tmp_path: Path, job: str) -> None:
    """A job id from a metrics file is text, not rich markup: ``[/x]`` was a markup error, ``a[bold]b`` lost
    its brackets."""
    m = tmp_path / "m.csv"
    m.write_text(f"job,gpu_util,dram_active,tensor_active\n{job},40,0.9,0.05\n{job},42,0.8,0.05\n")
    r = runner.invoke(app, ["analyze", "job", job, "--metrics", str(m)], terminal_width=200)
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert r.exit_code == 0, r.output
    assert f"job {job}: memory-bound" in r.stdout, r.stdout
