"""Fixtures that run real services for integration tests.

* ``kube_control_plane``: etcd + kube-apiserver v1.20.2 on 127.0.0.1 (``scripts/k8s-control-plane.sh``).
* ``kube_client``: a ``kubernetes.client.ApiClient`` for it (admin token).
* ``kube_scheduler_factory``: start kube-scheduler(s) against it with a given KubeSchedulerConfiguration.
* ``prometheus_factory``: start Debian's ``/usr/bin/prometheus`` with a given scrape config.
* ``make_gpu_node`` (plain function) / ``gpu_node_factory`` (fixture, deletes its nodes afterwards):
  fake GPU nodes (Node object + patched status; there is no kubelet).

Binaries come from ``scripts/test-deps.sh install``. When they are missing the tests are skipped with a hint,
unless the environment variable ``CI`` is set: then they fail.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
CONTROL_PLANE_SH = SCRIPTS / "k8s-control-plane.sh"
TEST_DEPS_SH = SCRIPTS / "test-deps.sh"
K8S_BIN_DIR = Path(
    os.environ.get(
        "K8S_BIN_DIR",
        Path(os.environ.get("GPUCLUSTER_CACHE", "/var/cache/gpucluster")) / "k8s-v1.20.2" / "bin",
    )
)
PROMETHEUS_BIN = os.environ.get("PROMETHEUS_BIN", "/usr/bin/prometheus")
INSTALL_HINT = f"install them with: sudo {TEST_DEPS_SH.relative_to(REPO)} install (see docs/testing.md)"


# --------------------------------------------------------------------------------------------- markers
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "integration: needs real services (kube-apiserver, etcd, prometheus)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).resolve().parent
    for item in items:
        if here in Path(str(item.fspath)).resolve().parents:
            item.add_marker(pytest.mark.integration)


def _missing(what: str) -> None:
    msg = f"integration dependency missing: {what}; {INSTALL_HINT}"
    if os.environ.get("CI"):
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])




def _stop_process(proc: subprocess.Popen[bytes], timeout: float = 10) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _read_env(path: Path) -> dict[str, str]:
    env: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    return env


# --------------------------------------------------------------------------------------------- kubernetes
@dataclass
class KubeControlPlane:
    dir: Path
    kubeconfig: Path
    api_url: str
    token: str
    ca_cert: Path
    env: dict[str, str] = field(default_factory=dict)

    def log(self, name: str = "kube-apiserver") -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")


def _control_plane_down(workdir: Path) -> None:
    cmd = [str(CONTROL_PLANE_SH), "down", str(workdir)]
    subprocess.run(cmd, check=False, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def kube_control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeControlPlane]:
    for binary in ("kube-apiserver", "kube-scheduler"):
        if not os.access(K8S_BIN_DIR / binary, os.X_OK):
            _missing(f"{K8S_BIN_DIR / binary}")
    if not shutil.which("etcd"):
        _missing("etcd (apt package etcd-server)")
    workdir = tmp_path_factory.mktemp("k8s")
    env = {**os.environ, "K8S_BIN_DIR": str(K8S_BIN_DIR)}
    proc = subprocess.run(
        [str(CONTROL_PLANE_SH), "up", str(workdir)],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    if proc.returncode != 0:
        _control_plane_down(workdir)
        pytest.fail(f"control plane did not start:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    values = _read_env(workdir / "env")
    cp = KubeControlPlane(
        dir=workdir,
        kubeconfig=Path(values["KUBECONFIG"]),
        api_url=values["API_URL"],
        token=values["TOKEN"],
        ca_cert=Path(values["CA_CERT"]),
        env=values,
    )
    try:
        yield cp
    finally:
        _control_plane_down(workdir)


@pytest.fixture(scope="session")
def kube_client(kube_control_plane: KubeControlPlane) -> Iterator[Any]:
    from kubernetes import config

    api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kube_control_plane.kubeconfig)
    )
    try:
        yield api_client
    finally:
        api_client.close()


@dataclass
class KubeScheduler:
    name: str
    pid: int
    healthz_url: str
    metrics_url: str
    log_path: Path

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def stop(self, timeout: float = 10) -> None:
        if not self.alive():
            return
        os.kill(self.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.alive():
            os.kill(self.pid, signal.SIGKILL)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_kube_scheduler(cp: KubeControlPlane, config: str | Path, name: str | None = None) -> KubeScheduler:
    """Start kube-scheduler v1.20.2 with a KubeSchedulerConfiguration (kubescheduler.config.k8s.io/v1beta1).

    ``config`` is a path or the YAML text. The script fills in what is absent: the kubeconfig,
    healthz/metrics on 127.0.0.1 at a free port, and ``leaderElect: false``. Returns once /healthz is ok.
    """
    name = name or f"s{uuid.uuid4().hex[:8]}"
    if isinstance(config, str) and "\n" in config:
        path = cp.dir / f"scheduler-{name}.input.yaml"
        path.write_text(config)
    else:
        path = Path(config)
    proc = subprocess.run(
        [str(CONTROL_PLANE_SH), "scheduler", str(cp.dir), str(path), name],
        check=False,
        env={**os.environ, "K8S_BIN_DIR": str(K8S_BIN_DIR)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kube-scheduler {name} did not start:\n{proc.stdout}\n{proc.stderr}")
    values = _read_env_text(proc.stdout)
    port = values["SCHEDULER_HEALTHZ_PORT"]
    return KubeScheduler(
        name=name,
        pid=int(values["SCHEDULER_PID"]),
        healthz_url=f"http://127.0.0.1:{port}/healthz",
        metrics_url=f"http://127.0.0.1:{port}/metrics",
        log_path=Path(values["SCHEDULER_LOG"]),
    )


def _read_env_text(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in text.splitlines() if "=" in ln)}


@pytest.fixture(scope="session")
def kube_scheduler_calls_extender_preempt() -> None:
    """kube-scheduler v1.20.2 never calls an extender's preemptVerb (kubernetes#102971); test-deps.sh builds
    ours with the upstream fix (scripts/k8s-patches) and records the patches next to the binary."""
    stamp = K8S_BIN_DIR / "kube-scheduler.patches"
    if "extenders-on-preemption" not in (stamp.read_text() if stamp.exists() else ""):
        _missing(f"{K8S_BIN_DIR / 'kube-scheduler'} built with the extender-preemption fix ({stamp})")


@pytest.fixture(scope="session")
def kube_scheduler_factory(
    kube_control_plane: KubeControlPlane,
) -> Iterator[Callable[..., KubeScheduler]]:
    """``start(config, name=None) -> KubeScheduler``; every scheduler started is stopped at session end."""
    started: list[KubeScheduler] = []

    def start(config: str | Path, name: str | None = None) -> KubeScheduler:
        sched = start_kube_scheduler(kube_control_plane, config, name)
        started.append(sched)
        return sched

    try:
        yield start
    finally:
        for sched in started:
            sched.stop()


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_gpu_node(
    api: Any,
    name: str,
    capacity: Mapping[str, Any],
    annotations: Mapping[str, str] | None = None,
    labels: Mapping[str, str] | None = None,
) -> Any:
    """Create a fake node (no kubelet): a Node object whose status carries ``capacity`` (also used as
    allocatable, on top of cpu/memory/pods defaults) and a Ready condition. ``api`` is a CoreV1Api or an
    ApiClient. Returns the V1Node read back."""
    from kubernetes import client

    core = api if isinstance(api, client.CoreV1Api) else client.CoreV1Api(api)
    resources = {"cpu": "64", "memory": "512Gi", "pods": "110", "ephemeral-storage": "1Ti"}
    resources.update({k: str(v) for k, v in capacity.items()})
    core.create_node(
        client.V1Node(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={"kubernetes.io/hostname": name, **(labels or {})},
                annotations=dict(annotations or {}),
            )
        )
    )
    now = _now()
    core.patch_node_status(
        name,
        {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node for tests",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
            }
        },
    )
    return core.read_node(name)


@pytest.fixture
def gpu_node_factory(kube_client: Any) -> Iterator[Callable[..., Any]]:
    """``make(name, capacity, annotations=None, labels=None) -> V1Node``; nodes are deleted after the test."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    made: list[str] = []

    def make(
        name: str,
        capacity: Mapping[str, Any],
        annotations: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Any:
        node = make_gpu_node(core, name, capacity, annotations, labels)
        made.append(name)
        return node

    try:
        yield make
    finally:
        for name in made:
            with contextlib.suppress(client.ApiException):
                core.delete_node(name)


@pytest.fixture
def namespace(kube_client: Any) -> Iterator[str]:
    """A fresh namespace, deleted after the test (without a controller-manager it stays Terminating)."""
    from kubernetes import client

    core = client.CoreV1Api(kube_client)
    name = f"it-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        try:
            core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            core.delete_namespace(name)
        except client.ApiException:
            pass


# --------------------------------------------------------------------------------------------- prometheus
@dataclass
class Prometheus:
    base_url: str
    dir: Path
    process: subprocess.Popen[bytes]

    def query(self, promql: str) -> list[dict[str, Any]]:
        r = httpx.get(f"{self.base_url}/api/v1/query", params={"query": promql}, timeout=5)
        r.raise_for_status()
        body = r.json()
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def stop(self) -> None:
        _stop_process(self.process)

    def log(self) -> str:
        return (self.dir / "prometheus.log").read_text(errors="replace")


def _prometheus_config(scrape: str | Mapping[str, Any] | list[Mapping[str, Any]], interval: str) -> str:
    if isinstance(scrape, str):
        return scrape
    if isinstance(scrape, list):
        scrape = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": scrape,
        }
    return json.dumps(scrape, indent=2)  # JSON is YAML


@pytest.fixture(scope="session")
def prometheus_factory(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., Prometheus]]:
    """``start(config, interval="1s") -> Prometheus`` on 127.0.0.1 at a free port, ready to query.

    ``config``: full prometheus.yml text, a config dict, or a list of ``scrape_configs`` entries
    (then ``global.scrape_interval`` is ``interval``). All instances stop at session end."""
    if not os.access(PROMETHEUS_BIN, os.X_OK):
        _missing(f"{PROMETHEUS_BIN} (apt package prometheus)")
    started: list[Prometheus] = []

    def start(config: str | Mapping[str, Any] | list[Mapping[str, Any]], interval: str = "1s") -> Prometheus:
        workdir = tmp_path_factory.mktemp("prometheus")
        cfg = workdir / "prometheus.yml"
        cfg.write_text(_prometheus_config(config, interval))
        last_error = ""
        for _attempt in range(3):  # a free port can be taken between the probe and the bind: retry
            port = free_port()
            logf = open(workdir / "prometheus.log", "wb")  # noqa: SIM115 - handed to the child
            proc = subprocess.Popen(
                [
                    PROMETHEUS_BIN,
                    f"--config.file={cfg}",
                    f"--storage.tsdb.path={workdir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                    "--web.enable-lifecycle",
                    "--log.level=info",
                ],
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            logf.close()
            prom = Prometheus(base_url=f"http://127.0.0.1:{port}", dir=workdir, process=proc)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    if httpx.get(f"{prom.base_url}/-/ready", timeout=2).status_code == 200:
                        started.append(prom)
                        return prom
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            _stop_process(proc)
            last_error = prom.log()[-3000:]
        raise RuntimeError(f"prometheus did not become ready:\n{last_error}")

    try:
        yield start
    finally:
        for prom in started:
            prom.stop()
