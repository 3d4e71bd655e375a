"""`gpucluster submit / jobs / nodes` against a running control plane, and `gpucluster up` refusing bad flags."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from tests.service.server import ADMIN, Server, wait_for, wait_running

pytestmark = pytest.mark.integration
runner = CliRunner()


def _cli(server: Server, *args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, [*args, "--server", server.url, "--token", ADMIN])
    return r.exit_code, r.stdout, r.stderr


def test_submit_then_list_jobs_and_nodes(server: Server, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: cli-job\ntenant: cli\nreplicas: 1\nresources:\n  nvidia.com/gpu: 1\n"
                   "  nvidia.com/gpucores: 50\n  nvidia.com/gpumem: 20000\nduration_s: 30\n"
                   "gpu_type: [L40S]\nkind: infer\nnode_selector: {gpucluster.io/pool: infer}\n")
    code, out, err = _cli(server, "submit", str(job), "--json")
    assert code == 0, err
    submitted = json.loads(out)
    assert submitted["name"] == "cli-job" and submitted["gpus"] == 0.5
    assert (submitted["gpu_type"], submitted["kind"], submitted["node_selector"]) == (
        "L40S", "infer", {"gpucluster.io/pool": "infer"})

    def listed() -> dict[str, object] | None:
        code, out, _ = _cli(server, "jobs", "--json", "--tenant", "cli")
        assert code == 0
        jobs = json.loads(out)["jobs"]
        return jobs[0] if jobs and jobs[0]["status"] == "succeeded" else None

    done = wait_for(listed, "the CLI job to succeed")
    assert done["id"] == submitted["id"]
    code, out, _ = _cli(server, "jobs", "--tenant", "cli")
    assert code == 0 and "cli-job" in out and "succeeded" in out
    code, out, _ = _cli(server, "nodes", "--json")
    assert code == 0 and json.loads(out)["total"] == 240
    code, out, _ = _cli(server, "nodes")
    assert code == 0 and "train-0000" in out


def test_client_errors_exit_2_with_where_and_why(server: Server, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: Bad Name\nresources: {nvidia.com/gpu: 1}\n")
    code, _, err = _cli(server, "submit", str(bad))
    assert code == 2 and "name:" in err and "HTTP 422" in err
    code, _, err = _cli(server, "submit", str(tmp_path / "missing.yaml"))
    assert code == 2 and "missing.yaml" in err
    notyaml = tmp_path / "x.yaml"
    notyaml.write_text("- a\n- b\n")
    code, _, err = _cli(server, "submit", str(notyaml))
    assert code == 2 and "must be a mapping" in err
    r = runner.invoke(app, ["jobs", "--server", server.url, "--token", "wrong"])
    assert r.exit_code == 2 and "unknown token" in r.stderr
    r = runner.invoke(app, ["jobs", "--server", "http://127.0.0.1:9", "--token", "x"])
    assert r.exit_code == 2 and "cannot reach" in r.stderr


def _up(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucluster.cli.main", "up", *args], capture_output=True,
                          text=True, timeout=120, check=False)


def test_up_refuses_bad_flags(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = _up("--port", str(port), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "--port" in r.stderr and "in use" in r.stderr
    r = _up("--cluster", str(tmp_path / "none.yaml"), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "none.yaml" in r.stderr
    r = _up("--kubeconfig", str(tmp_path / "kc"), "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "--kubeconfig" in r.stderr
    r = _up("--policy", "roundrobin", "--data-dir", str(tmp_path / "d"))  # --policy: the placement policy
    assert r.returncode == 2 and "--placement-policy: unknown placement policy 'roundrobin'" in r.stderr
    r = _up("--queue-policy", "lifo", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "--queue-policy: unknown queue policy 'lifo'" in r.stderr
    r = _up("--finished-job-ttl", "nan", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "--finished-job-ttl" in r.stderr
    r = _up("--max-finished-jobs", "-1", "--data-dir", str(tmp_path / "d"))
    assert r.returncode == 2 and "--max-finished-jobs" in r.stderr


def test_up_prints_the_url_and_a_generated_admin_token(tmp_path: Path) -> None:
    from tests.service.server import free_port

    port = free_port()
    data = tmp_path / "d"
    env_less = {k: v for k, v in __import__("os").environ.items() if k != "GPUCLUSTER_ADMIN_TOKEN"}
    proc = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "up", "--port", str(port), "--data-dir",
                             str(data), "--background", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env_less)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        assert f"dashboard: http://127.0.0.1:{port}/" in lines[1]
        token = (data / "admin-token").read_text().strip()
        assert token in lines[2] and "generated" in lines[2]
        import httpx

        def who() -> object:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/api/v1/whoami",
                                 headers={"Authorization": f"Bearer {token}"}).json()
            except httpx.HTTPError:
                return None

        assert wait_for(who, "the server")["role"] == "admin"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_submit_speed_flags_and_describe_shows_them(server: Server, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: speed-job\ntenant: cli\nresources: {nvidia.com/gpu: 1}\nduration_s: 3600\n"
                   "ref_gpu: A100\nspeedup: {L40S: 0.8}\n")
    code, out, err = _cli(server, "submit", str(job), "--json", "--ref-gpu", "V100", "--work-class",
                          "training/transformer", "--tokens", "1e6", "--speedup", "H100=3.1", "--speedup", "A100=2")
    assert code == 0, err
    sent = json.loads(out)
    assert (sent["ref_gpu"], sent["work_class"], sent["tokens"]) == ("V100", "training/transformer", 1e6)
    assert sent["speedup"] == {"L40S": 0.8, "H100": 3.1, "A100": 2.0}  # the flags add to the file's
    code, out, err = _cli(server, "describe", "job", sent["id"])
    assert code == 0, err
    assert "V100" in out and "training/transformer" in out and "H100=3.1" in out and "1,000,000" in out
    code, _, err = _cli(server, "submit", str(job), "--speedup", "H100")
    assert code == 2 and "--speedup 'H100': expected MODEL=X" in err
    code, _, err = _cli(server, "submit", str(job), "--speedup", "H100=-1")
    assert code == 2 and "must be at least 0" in err
    code, _, err = _cli(server, "submit", str(job), "--speedup", "X9=2")
    assert code == 2 and "HTTP 422" in err and "speedup.X9" in err
    assert _cli(server, "cancel", sent["id"])[0] == 0


def test_submit_of_a_job_with_claims_runs_on_the_equivalent_devices(server: Server, tmp_path: Path) -> None:
    """``gpucluster submit`` of a job file with ``claims`` (devices through DRA; on the embedded backend the
    equivalent GPUs: two whole ones and a 20000 MiB share): accepted as given, and it runs on those devices."""
    job = tmp_path / "claims.yaml"
    job.write_text("name: cli-claims\ntenant: cli-dra\nreplicas: 1\nresources: {cpu: '2'}\nduration_s: 600\n"
                   "claims:\n- {device_class: gpu.nvidia.com, count: 2}\n"
                   "- {device_class: hami-gpu, memory_mib: 20000}\n")
    code, out, err = _cli(server, "submit", str(job), "--json")
    assert code == 0, err
    submitted = json.loads(out)
    assert submitted["claims"] == [{"device_class": "gpu.nvidia.com", "count": 2},
                                   {"device_class": "hami-gpu", "count": 1, "memory_mib": 20000}]
    running = wait_running(server, submitted["id"])
    devices = [d for p in running["placements"] for d in p["devices"]]
    assert len(devices) == 3 and sorted(int(d["memory_mib"]) for d in devices)[0] == 20000
    code, out, _ = _cli(server, "jobs", "--json", "--tenant", "cli-dra")
    assert code == 0 and json.loads(out)["jobs"][0]["claims"] == submitted["claims"]


@pytest.mark.parametrize(("claims", "where"), [
    ("[{device_class: gpu.nvidia.com, count: 0}]", "claims.0.count"),
    ("[{count: 1}]", "claims.0.device_class"),
    ("[{device_class: gpu.nvidia.com, memory_mb: 100}]", "claims.0.memory_mb"),
    ("{device_class: gpu.nvidia.com}", "claims"),
])
def test_submit_of_a_bad_claim_exits_2_naming_the_field(server: Server, tmp_path: Path, claims: str,
                                                         where: str) -> None:
    job = tmp_path / "bad-claims.yaml"
    job.write_text(f"name: cli-bad-claims\ntenant: cli-dra-bad\nduration_s: 60\nclaims: {claims}\n")
    code, out, err = _cli(server, "submit", str(job))
    assert code == 2, (out, err)
    assert re.search(rf"(^|\s){re.escape(where)}: .*\(HTTP 422\)", err), err
    code, out, _ = _cli(server, "jobs", "--json", "--tenant", "cli-dra-bad")
    assert code == 0 and json.loads(out)["jobs"] == []  # nothing accepted
