"""The FGD sweep and ``whatif`` on a real local Ray cluster give the same files as local runs.

A Ray head is started with ``ray start --head --block`` in its own process group, bound to 127.0.0.1 (Ray
resolves ``--node-ip-address=127.0.0.1`` to the machine's interface address unless multi-machine clusters are
off, which ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` does: every Ray service and the driver then use loopback),
and ended by signalling that group.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from polling import wait_until

from conftest import free_port

pytestmark = pytest.mark.integration

RAY = Path(sys.executable).parent / "ray"
LOOPBACK_ONLY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(LOOPBACK_ONLY)
    env.update(extra)
    return env


def _accepts(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    assert RAY.is_file(), "ray is not installed: make venv installs it (dev extras)"
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's unix sockets live under it
    log = (temp / "head.log").open("wb")
    head = subprocess.Popen(
        [str(RAY), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--include-dashboard=false", "--num-cpus=2", "--disable-usage-stats", f"--temp-dir={temp / 't'}"],
        stdout=log, stderr=subprocess.STDOUT, env=_env(), start_new_session=True)
    try:
        wait_until(lambda: head.poll() is None and b"Ray runtime started" in (temp / "head.log").read_bytes()
                   and _accepts(port), 120, "the Ray head to start")
        yield f"127.0.0.1:{port}"
    finally:
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(head.pid, sig)
            except ProcessLookupError:
                break
            try:
                head.wait(grace)
            except subprocess.TimeoutExpired:
                continue
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _cli(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucluster.cli.main", *args], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def _trace(d: Path) -> Path:
    (d / "openb_node_list_gpu_node.csv").write_text(
        "sn,cpu_milli,memory_mib,gpu,model\n" + "".join(f"n{i},32000,131072,{2 + 2 * (i % 2)},G2\n" for i in range(8)))
    rows = [f"p{i:03d},{2000 + 1000 * (i % 5)},4096,{(i % 3) and 1},{(200, 500, 1000)[i % 3]}" for i in range(60)]
    head = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
    (d / "openb_pod_list_tiny.csv").write_text(head + "\n".join(rows))
    (d / "openb_pod_list_half.csv").write_text(head + "\n".join(rows[::2]))
    return d


def test_sweep_on_ray_matches_local_and_resumes(ray_head: str, tmp_path: Path) -> None:
    trace = _trace(tmp_path)
    common = ["experiment", "fgd-sweep", "--trace-dir", str(trace), "--workloads", "tiny,half",
              "--policies", "bestfit,fgd,stranding-fgd", "--seeds", "1-3", "--json"]
    local = _cli(*common, "--out", str(tmp_path / "local"), "--jobs", "2", env=_env())
    assert local.returncode == 0, local.stderr
    on_ray = _cli(*common, "--out", str(tmp_path / "ray"), env=_env(RAY_ADDRESS=ray_head))  # the variable
    assert on_ray.returncode == 0, on_ray.stderr
    assert f"on Ray cluster at {ray_head}" in on_ray.stderr
    assert json.loads(on_ray.stdout)["ran_now"] == 18
    assert (tmp_path / "ray" / "summary.csv").read_bytes() == (tmp_path / "local" / "summary.csv").read_bytes()
    runs = sorted(p.relative_to(tmp_path / "local") for p in (tmp_path / "local" / "runs").rglob("*.json"))
    assert len(runs) == 18
    for r in runs:
        assert (tmp_path / "ray" / r).read_bytes() == (tmp_path / "local" / r).read_bytes(), r
    # resumable as before: only the missing run runs again, and the result is the same
    (tmp_path / "ray" / runs[0]).unlink()
    again = _cli(*common, "--out", str(tmp_path / "ray"), "--ray-address", ray_head, env=_env())  # the flag
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["ran_now"] == 1
    assert (tmp_path / "ray" / "summary.csv").read_bytes() == (tmp_path / "local" / "summary.csv").read_bytes()


def test_whatif_on_ray_matches_local(ray_head: str, tmp_path: Path) -> None:
    small, large = tmp_path / "small.yaml", tmp_path / "large.yaml"
    small.write_text("name: small\ngpu: H100\nservers: 4\n")
    large.write_text("name: large\ngpu: H100\nservers: 8\n")
    args = ["whatif", "--design", str(small), "--design", str(large), "--trace", "synthetic:80:helios:0.9", "--json"]
    local = _cli(*args, env=_env())
    on_ray = _cli(*args, "--ray-address", ray_head, env=_env())
    assert local.returncode == 0 and on_ray.returncode == 0, on_ray.stderr
    assert "2 designs on Ray cluster" in on_ray.stderr
    assert on_ray.stdout == local.stdout


def test_unreachable_cluster_is_a_clear_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    res = _cli("experiment", "fgd-sweep", "--trace-dir", str(_trace(tmp_path)), "--workloads", "tiny",
               "--policies", "fgd", "--seeds", "1", "--out", str(tmp_path / "o"), "--ray-address",
               f"127.0.0.1:{port}", env=_env(RAY_gcs_rpc_server_connect_timeout_s="3"))
    assert res.returncode == 2
    assert "--ray-address" in res.stderr and f"127.0.0.1:{port}" in res.stderr
