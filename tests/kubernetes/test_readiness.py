"""Issue 28, item 7: the extender (and the secondary scheduler's HTTP side) answer ``/healthz`` and ``/readyz`` at
once while the API server is unreachable, and retry it with a bounded exponential backoff.

A real unreachable API server: 127.0.0.1 on a port nothing listens on (connection refused). Before the fix the
extender started serving only after its informer synced, so nothing answered on its port."""

from __future__ import annotations

import logging
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.kubernetes.extender import Readiness
from gpucluster.kubernetes.runtime import Running, RunOptions, start_extender, wait_for_api


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _api(port: int) -> client.ApiClient:
    cfg = client.Configuration()
    cfg.host = f"https://127.0.0.1:{port}"
    cfg.verify_ssl = False
    cfg.retries = 0
    return client.ApiClient(cfg)


def _until(check: Callable[[], bool], what: str, deadline_s: float = 30.0) -> None:
    end = time.monotonic() + deadline_s
    while not check():
        if time.monotonic() > end:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def unreachable() -> Iterator[tuple[Running, int]]:
    port = _closed_port()
    running = start_extender(_api(port), VendorRegistry.from_settings(DeviceSettings()), "127.0.0.1", 0,
                             RunOptions())
    try:
        yield running, port
    finally:
        running.stop()


def test_healthz_and_readyz_answer_while_the_api_server_is_unreachable(unreachable: tuple[Running, int]) -> None:
    running, port = unreachable
    assert running.server is not None
    base = f"http://127.0.0.1:{running.server.port}"
    with httpx.Client(base_url=base, timeout=5) as http:
        # the first answer may come before the first try has failed: it then says what it waits for
        _until(lambda: "unreachable" in http.get("/readyz").text, "the first failed try")
        ready = http.get("/readyz")
        live = http.get("/healthz")
        verb = http.post("/filter", json={"Pod": {}, "NodeNames": []})
    want = rf"API server https://127\.0\.0\.1:{port} unreachable: connection refused, retrying in \d+s"
    assert ready.status_code == 503
    assert re.fullmatch(rf"not ready: {want}", ready.text), ready.text
    assert live.status_code == 200  # alive: a liveness probe must not restart a process that is only waiting
    assert re.fullmatch(rf"waiting: {want}", live.text), live.text
    assert verb.status_code == 503
    assert re.fullmatch(rf"not ready: {want}", verb.json()["error"]), verb.json()


def test_the_backoff_doubles_up_to_its_cap_and_logs_each_try_once(caplog: pytest.LogCaptureFixture) -> None:
    port = _closed_port()
    readiness = Readiness()
    stop = threading.Event()
    caplog.set_level(logging.WARNING, logger="gpucluster.kubernetes.runtime")
    waiter = threading.Thread(target=wait_for_api, args=(_api(port), readiness, stop),
                              kwargs={"first": 0.01, "cap": 0.04}, daemon=True)
    waiter.start()
    try:
        _until(lambda: len(caplog.records) >= 6, "six failed tries")
    finally:
        stop.set()
        waiter.join(10)
    assert not waiter.is_alive()
    delays = [float(re.search(r"retrying in ([\d.]+)s", r.getMessage()).group(1))  # type: ignore[union-attr]
              for r in caplog.records[:6]]
    assert delays == [0.01, 0.02, 0.04, 0.04, 0.04, 0.04]
    assert all("connection refused" in r.getMessage() for r in caplog.records)
    ok, why = readiness.check()
    assert not ok and why == caplog.records[-1].getMessage()


def test_readiness_reports_a_lost_informer_sync() -> None:
    synced = [True]
    readiness = Readiness(ready=lambda: synced[0])
    assert readiness.check() == (False, "starting")
    readiness.set_ready()
    assert readiness.check() == (True, "")
    synced[0] = False
    ok, why = readiness.check()
    assert not ok and "not in sync" in why


def test_the_secondary_scheduler_cli_answers_while_it_waits(tmp_path: Path) -> None:
    """``gpucluster k8s scheduler --listen`` as its own process: /readyz says why it waits; SIGTERM ends it."""
    api_port, port = _closed_port(), _closed_port()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        f"clusters: [{{name: k, cluster: {{server: 'https://127.0.0.1:{api_port}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n")
    proc = subprocess.Popen([sys.executable, "-m", "gpucluster.cli.main", "k8s", "scheduler", "--kubeconfig",
                             str(kubeconfig), "--listen", f"127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        def waiting() -> bool:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                return "unreachable" in httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).text
            except httpx.TransportError:
                return False

        _until(waiting, "the scheduler to say it waits", 240)
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
        assert ready.status_code == 503
        assert re.fullmatch(rf"not ready: API server https://127\.0\.0\.1:{api_port} unreachable: connection "
                            r"refused, retrying in \d+s", ready.text), ready.text
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert code == 0
