"""Issue 28, item 7 on a real kube-apiserver: ``gpucluster k8s extender`` started against an API server address
nothing answers on says so at once on ``/healthz`` (200, alive) and ``/readyz`` (503, with the reason), and turns
ready once the address reaches the real API server (a TCP relay to it is opened on that port)."""

from __future__ import annotations

import contextlib
import re
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml
from k8s_helpers import Process, free_port, wait_until

pytestmark = pytest.mark.integration


class Relay:
    """A TCP relay from ``127.0.0.1:port`` to the API server: the port refuses connections until :meth:`open`."""

    def __init__(self, port: int, target: tuple[str, int]) -> None:
        self.port, self.target = port, target
        self._listener: socket.socket | None = None
        self._stop = threading.Event()

    def open(self) -> None:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", self.port))
        s.listen(64)
        s.settimeout(0.2)
        self._listener = s
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target, timeout=10)
            for a, b in ((conn, upstream), (upstream, conn)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        src.settimeout(None)
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        if self._listener is not None:
            self._listener.close()


@pytest.fixture
def relayed(kube_control_plane: object, tmp_path: Path) -> Iterator[tuple[Relay, Path]]:
    api_url: str = kube_control_plane.api_url  # type: ignore[attr-defined]
    host, _, port = api_url.removeprefix("https://").rstrip("/").rpartition(":")
    relay = Relay(free_port(), (host, int(port)))
    doc = yaml.safe_load(kube_control_plane.kubeconfig.read_text())  # type: ignore[attr-defined]
    for c in doc["clusters"]:
        c["cluster"]["server"] = f"https://127.0.0.1:{relay.port}"
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(doc))
    try:
        yield relay, kubeconfig
    finally:
        relay.close()


def test_extender_says_why_it_waits_then_turns_ready(relayed: tuple[Relay, Path], tmp_path: Path) -> None:
    relay, kubeconfig = relayed
    port = free_port()
    ext = Process(["k8s", "extender", "--kubeconfig", str(kubeconfig), "--listen", f"127.0.0.1:{port}"],
                  tmp_path / "extender.log").start()
    base = f"http://127.0.0.1:{port}"
    try:
        def waiting() -> bool:
            if not ext.alive():
                raise AssertionError(f"extender exited:\n{ext.log()[-3000:]}")
            try:
                return "unreachable" in httpx.get(f"{base}/readyz", timeout=2).text
            except httpx.TransportError:
                return False

        wait_until(waiting, 60, "the extender to say it waits for the API server")
        ready, live = httpx.get(f"{base}/readyz", timeout=5), httpx.get(f"{base}/healthz", timeout=5)
        why = (rf"API server https://127\.0\.0\.1:{relay.port} unreachable: connection refused, "
               r"retrying in \d+s")
        assert ready.status_code == 503 and re.fullmatch(f"not ready: {why}", ready.text), ready.text
        assert live.status_code == 200 and re.fullmatch(f"waiting: {why}", live.text), live.text

        relay.open()  # the API server becomes reachable on the address the extender was given
        wait_until(lambda: httpx.get(f"{base}/readyz", timeout=2).status_code == 200, 90,
                   "/readyz to turn 200 once the API server is reachable")
        assert httpx.get(f"{base}/readyz", timeout=5).text == "ok"
        assert httpx.get(f"{base}/healthz", timeout=5).text == "ok"
        log = ext.log()
        tries = re.findall(r"unreachable: connection refused, retrying in (\d+)s", log)
        assert tries and [int(t) for t in tries] == sorted(int(t) for t in tries)  # backing off, never shorter
        assert max(int(t) for t in tries) <= 30
    finally:
        ext.stop()
