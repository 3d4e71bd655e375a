"""Run ``gpucluster up`` as a real subprocess on 127.0.0.1 with a free port (shared by service and web tests)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

ADMIN = "test-admin-token"
START_DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    url: str
    data_dir: Path
    proc: subprocess.Popen[bytes]
    log: Path

    def client(self, token: str | None = ADMIN) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30.0)

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_server(data_dir: Path, *args: str, token: str = ADMIN, port: int | None = None,
                 tenants: str | None = "on-first-use") -> Server:
    """``gpucluster up`` on 127.0.0.1. ``tenants``: ``--tenants`` (these tests submit jobs for tenants they
    do not create first; None = up's own default, explicit)."""
    port = port or free_port()
    if tenants is not None:
        args = (*args, "--tenants", tenants)
    log = data_dir.parent / f"{data_dir.name}-server-{port}.log"
    env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": token}
    cmd = [sys.executable, "-m", "gpucluster.cli.main", "up", "--host", "127.0.0.1", "--port", str(port),
           "--data-dir", str(data_dir), *args]
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env)
    server = Server(f"http://127.0.0.1:{port}", data_dir, proc, log)
    deadline = time.monotonic() + START_DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{server.output()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{server.url}/healthz", timeout=2.0).status_code == 200:
                return server
        time.sleep(0.1)
    server.stop()
    raise RuntimeError(f"server did not answer within {START_DEADLINE_S} s:\n{server.output()}")


def wait_for(fn: Any, what: str, timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll ``fn()`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}; last value: {last!r}")


def submit_job(server: Server, body: dict[str, Any], token: str | None = ADMIN) -> dict[str, Any]:
    """POST a job (asserting 201) and return it."""
    with server.client(token) as c:
        r = c.post("/api/v1/jobs", json=body)
        assert r.status_code == 201, r.text
        return r.json()  # type: ignore[no-any-return]


def wait_running(server: Server, job_id: str, timeout: float = 30.0) -> dict[str, Any]:
    """The job once it runs (with its placements)."""
    def get() -> dict[str, Any] | None:
        with server.client() as c:
            j: dict[str, Any] = c.get(f"/api/v1/jobs/{job_id}").json()
        return j if j["status"] == "running" else None

    found: dict[str, Any] = wait_for(get, f"job {job_id} running", timeout)
    return found
