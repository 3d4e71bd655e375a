"""``gpucluster up --kubeconfig`` as a real subprocess for the Kubernetes integration tests, simulated GPU nodes
for it, and small polling helpers."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
from fake_kubelet import FakeKubelet
from k8s_helpers import GPUCLUSTER, free_port, registry
from polling import wait_until

from gpucluster.kubernetes.register import NodeRegistrar
from gpucluster.model import DeviceSpec, NodeSpec

ADMIN = "k8s-service-admin-token"


class ControlPlane:
    """``gpucluster up --kubeconfig`` on 127.0.0.1 at a free port (``args``: more flags)."""

    def __init__(self, kubeconfig: Path, workdir: Path, *args: str, data: str = "data", wait: bool = True) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / f"up-{self.port}.log"
        self.data = workdir / data
        env = {**os.environ, "GPUCLUSTER_ADMIN_TOKEN": ADMIN}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                [*GPUCLUSTER, "up", "--kubeconfig", str(kubeconfig), "--host", "127.0.0.1", "--port", str(self.port),
                 "--data-dir", str(self.data), *args],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
        if wait:
            try:
                wait_until(self.healthy, 90, "gpucluster up --kubeconfig to answer /healthz")
            except BaseException:
                self.stop()
                raise

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"gpucluster up exited with {self.proc.returncode}:\n{self.output()[-4000:]}")
        try:
            return httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=30.0)

    def get(self, path: str, **kw: Any) -> Any:
        with self.client() as c:
            resp = c.get(path, **kw)
            resp.raise_for_status()
            return resp.json()

    def overview(self) -> dict[str, Any]:
        body: dict[str, Any] = self.get("/api/v1/overview")
        return body

    def leading(self) -> bool:
        return bool(self.overview()["kubernetes"]["leader"])

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def kill(self) -> None:
        """``kill -9``: no lease given back, nothing flushed."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def leader_of(replicas: list[ControlPlane]) -> ControlPlane | None:
    """The one live replica that says it leads (None while none does); two that say so fail the test."""
    found = []
    for r in replicas:
        try:
            if r.proc.poll() is None and r.leading():
                found.append(r)
        except Exception:
            continue
    assert len(found) <= 1, "two replicas say they lead"
    return found[0] if found else None


def gpu_nodes(run: str, count: int, gpus: int, model: str = "A100-80GB") -> list[NodeSpec]:
    """``count`` nodes of ``gpus`` whole GPUs each, labelled ``gpucluster.io/run: run`` (jobs select them)."""
    return [
        NodeSpec(name=f"w-{run}-{i}", cpu_milli=64000, memory_mib=262144, rack=f"rack-{run}", leaf=f"leaf-{run}",
                 labels={"gpucluster.io/run": run},
                 devices=tuple(DeviceSpec(uuid=f"GPU-{run}-{i}-{j}", index=j, vendor="nvidia", model=model,
                                          memory_mib=81920, max_tasks=4) for j in range(gpus)))
        for i in range(count)
    ]


@contextlib.contextmanager
def serving(kubeconfig: Any, workdir: Path, *args: str) -> Iterator[ControlPlane]:
    """A :class:`ControlPlane` (``gpucluster up`` on ``kubeconfig``, ``args`` added); the tail of its output printed
    when the test fails in the block, so the failure says what the control plane did; stopped afterwards."""
    srv = ControlPlane(kubeconfig, workdir, *args)
    try:
        yield srv
    except BaseException:
        print(srv.output()[-6000:])
        raise
    finally:
        srv.stop()


@contextlib.contextmanager
def registered(api: Any, nodes: list[NodeSpec]) -> Iterator[list[NodeSpec]]:
    """The nodes in the API server, their device-plugin handshakes kept fresh; deleted afterwards."""
    reg = NodeRegistrar(api, nodes, registry(), interval=5.0)
    reg.register()
    refresher = threading.Thread(target=reg.run, name="handshakes", daemon=True)
    refresher.start()
    try:
        yield nodes
    finally:
        reg.stop()
        refresher.join(10)
        reg.delete()



@contextlib.contextmanager
def kubelet_fleet(api: Any, nodes: list[NodeSpec], workdir: Path) -> Iterator[list[NodeSpec]]:
    """The nodes registered (:func:`registered`) and a kubelet stand-in playing their kubelets (:class:`FakeKubelet`,
    its files under ``workdir/kubelet``); both gone afterwards."""
    with registered(api, nodes) as fleet, FakeKubelet(api, [n.name for n in fleet], workdir / "kubelet"):
        yield fleet

def new_run() -> str:
    """A short run id for names and label values; it starts with a letter, so no YAML reader takes it for a
    number (an all-hex id such as '5e1234' reads as 5 x 10^1234)."""
    return "r" + uuid.uuid4().hex[:5]


def ticking(rt: Any, step_s: float = 0.25) -> Any:
    """``tick(what)``: a poll that first advances ``rt``'s clock by ``step_s`` (a runtime driven by the test, with
    no loop of its own), then calls ``what``."""
    def tick(what: Any) -> Any:
        def step() -> Any:
            rt.advance(rt.now + step_s)
            return what()
        return step
    return tick


__all__ = ["ADMIN", "ControlPlane", "gpu_nodes", "new_run", "registered", "wait_until"]
