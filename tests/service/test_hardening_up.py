"""Issue 14 against a real ``gpucluster up`` on 127.0.0.1: the data-dir lock, what ``up`` prints, and the
request-level defects over real HTTP (body before auth, bombs, a 500 that commits)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from tests.service.server import ADMIN, free_port, start_server, wait_for

pytestmark = pytest.mark.integration

QUIET = ("--background", "0", "--faults-per-hour", "0", "--speed", "10")


def _up(data: Path, *args: str, env: dict[str, str] | None = None,
        port: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "up", "--port", str(port or free_port()),
                             "--data-dir", str(data), *QUIET, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or dict(os.environ))


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    return out, err


def test_a_second_up_on_the_same_data_dir_exits_2_naming_the_holder(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = start_server(data, *QUIET)
    try:
        second = _up(data)
        try:
            out, err = second.communicate(timeout=120)
        finally:
            if second.poll() is None:  # it should have exited at once; never leave it running
                second.kill()
                second.communicate(timeout=30)
        assert second.returncode == 2, (out, err)
        assert "--data-dir" in err and f"pid {first.proc.pid}" in err and "in use" in err
        assert first.client().get("/healthz").json()["ok"] is True  # the first one is unharmed
    finally:
        first.stop()
    third = start_server(data, *QUIET)  # the lock went with the process
    third.stop()


def test_the_admin_token_is_printed_only_when_it_is_generated(tmp_path: Path) -> None:
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if k != "GPUCLUSTER_ADMIN_TOKEN"}
    port = free_port()
    proc = _up(data, env=env, port=port)
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
        token = (data / "admin-token").read_text().strip()
        assert token in lines[2] and "generated" in lines[2]
        wait_for(lambda: _answers(port), "the first server")
    finally:
        _stop(proc)
    proc = _up(data, env=env, port=port)
    try:
        wait_for(lambda: _answers(port), "the second server")
    finally:
        out, _ = _stop(proc)
    assert token not in out and f"saved in {data / 'admin-token'}" in out


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def test_listening_on_every_interface_prints_a_reachable_url_and_warns(tmp_path: Path) -> None:
    port = free_port()
    proc = _up(tmp_path / "data", "--host", "0.0.0.0", port=port)
    try:
        wait_for(lambda: _answers(port), "the server")
    finally:
        out, err = _stop(proc)
    assert f"dashboard: http://{socket.gethostname()}:{port}/" in out
    assert "127.0.0.1" not in out.splitlines()[1]
    assert "warning: --host 0.0.0.0" in err and "TLS" in err


def test_request_defects_over_real_http(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data, *QUIET)
    try:
        with srv.client(token=None) as anon, srv.client() as admin:
            big = b"{" + b" " * (36 * 2**20) + b"}"
            r = anon.post("/api/v1/jobs", content=big, headers={"Content-Type": "application/json"})
            assert r.status_code == 413  # defect 6: refused from its length, before a byte is parsed
            for res in ({"nvidia.com/gpu": "1e309"}, {"nvidia.com/gpu": "1e300000"}, {"memory": "1e999999"}):
                r = admin.post("/api/v1/jobs", json={"name": "bomb", "resources": res})
                assert r.status_code == 422, r.text  # defects 2 and 3
            assert admin.get("/api/v1/jobs").json()["total"] == 0
            ok = admin.post("/api/v1/jobs", json={"name": "fine", "resources": {"nvidia.com/gpu": 1}})
            assert ok.status_code == 201
        job = tmp_path / "job.yaml"  # the CLI passes an Idempotency-Key: running it twice makes one job
        job.write_text("name: once\nresources: {nvidia.com/gpu: 1}\n")
        ids = []
        for _ in range(2):
            r = CliRunner().invoke(app, ["submit", str(job), "--idempotency-key", "cli-once-1", "--json",
                                         "--server", srv.url, "--token", ADMIN])
            assert r.exit_code == 0, r.output
            ids.append(json.loads(r.stdout)["id"])
        assert ids[0] == ids[1]
        srv.kill9()
    finally:
        srv.stop()
    again = start_server(data, *QUIET)  # defect 2: it starts again, the accepted job is there
    try:
        with again.client() as admin:
            jobs = admin.get("/api/v1/jobs").json()["jobs"]
            assert [j["name"] for j in jobs] == ["once", "fine"]
    finally:
        again.stop()


def test_tenant_defects_over_real_http(tmp_path: Path) -> None:
    """Defects 1, 4 and 5 as a tenant meets them on a real server (their in-process tests go further)."""
    srv = start_server(tmp_path / "data", *QUIET)
    try:
        with srv.client() as admin:
            old = admin.post("/api/v1/tenants", json={"name": "small", "quota_gpus": 2}).json()["token"]
            with srv.client(old) as t:
                r = t.post("/api/v1/jobs", json={"name": "p", "resources": {"nvidia.com/gpu": 10**20}})
                assert r.status_code == 422, r.text  # defect 1: refused, not 201
                whole = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 1, "nvidia.com/gpumem": 81559}
                r = t.post("/api/v1/jobs", json={"name": "many", "replicas": 32, "resources": whole})
                assert r.status_code == 422 and r.json()["where"] == "quota", r.text  # defect 4
                assert t.get("/api/v1/whoami").status_code == 200
                new = admin.post("/api/v1/tenants", json={"name": "small", "quota_gpus": 2}).json()["token"]
                assert t.get("/api/v1/whoami").status_code == 401  # defect 5: the old token is dead at once
            with srv.client(new) as t:
                assert t.get("/api/v1/whoami").json()["tenant"] == "small"
            assert admin.get("/healthz").json()["ok"] is True
    finally:
        srv.stop()
