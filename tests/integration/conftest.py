"""Fixtures that run real services for integration tests.

* ``kube_control_plane``: etcd 3.6 + kube-apiserver on 127.0.0.1 (``scripts/k8s-control-plane.sh``), once per
  Kubernetes version the suite runs on: v1.37.2 and v1.35.4 (``scripts/test-deps.sh versions``), or the ones the
  environment variable ``K8S`` names (``K8S=v1.35.4``, ``K8S="v1.37.2 v1.35.4"``). Every test that uses it runs
  on each version (test ids end in ``[v1.37.2]``); one control plane runs at a time per process (``make
  integration``, two workers by default, runs one worker per version: ``integration_scope`` in
  ``tests/conftest.py``; ``INTEGRATION_WORKERS=1``: one process).
* ``kube_client``: a ``kubernetes.client.ApiClient`` for it (admin token).
* ``kube_scheduler_factory``: start kube-scheduler(s) of the same version against it with a given
  KubeSchedulerConfiguration (``kubescheduler.config.k8s.io/v1``).
* ``kube_controller_manager``: kube-controller-manager of the same version against it (Jobs, garbage
  collection, namespace deletion ...); started by the first test that asks, kept for the session.
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
CACHE = Path(os.environ.get("GPUCLUSTER_CACHE", "/var/cache/gpucluster"))


def _k8s_versions() -> list[str]:
    """The Kubernetes versions to run on: ``K8S`` (space- or comma-separated, ``v`` optional), else the ones
    ``scripts/test-deps.sh`` builds."""
    wanted = os.environ.get("K8S", "").replace(",", " ").split()
    if wanted:
        return [v if v.startswith("v") else f"v{v}" for v in wanted]
    out = subprocess.run([str(TEST_DEPS_SH), "versions"], capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split()


K8S_VERSIONS = _k8s_versions()


def k8s_bin_dir(version: str) -> Path:
    return CACHE / f"k8s-{version}" / "bin"


def gang_api_args(version: str) -> str:
    """kube-apiserver flags that serve Kubernetes' own gang-scheduling API where that version has the one we read
    (1.37: PodGroup ``scheduling.k8s.io/v1alpha3``, behind the beta feature gate GenericWorkload, off by
    default); empty for other versions."""
    minor = int(version.lstrip("v").split(".")[1])
    if minor == 37:
        return "--feature-gates=GenericWorkload=true --runtime-config=scheduling.k8s.io/v1alpha3=true"
    return ""


ETCD_BIN = Path(os.environ.get("ETCD_BIN") or subprocess.run(
    [str(TEST_DEPS_SH), "path", "etcd"], capture_output=True, text=True, check=True, timeout=30).stdout.strip())
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
    version: str = K8S_VERSIONS[0]
    """``v1.37.2``: the version of kube-apiserver (and of the kube-scheduler / -controller-manager started for it)."""
    env: dict[str, str] = field(default_factory=dict)

    @property
    def minor(self) -> str:
        """``1.37``: what ``--kube-version`` and ``scheduler_config(kube_version=...)`` take."""
        return ".".join(self.version.lstrip("v").split(".")[:2])

    @property
    def bin_dir(self) -> Path:
        return k8s_bin_dir(self.version)

    def log(self, name: str = "kube-apiserver") -> str:
        return (self.dir / f"{name}.log").read_text(errors="replace")


def _control_plane_down(workdir: Path) -> None:
    cmd = [str(CONTROL_PLANE_SH), "down", str(workdir)]
    subprocess.run(cmd, check=False, capture_output=True, timeout=120)


@pytest.fixture(scope="session", params=K8S_VERSIONS)
def kube_control_plane(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeControlPlane]:
    version: str = request.param
    bin_dir = k8s_bin_dir(version)
    for binary in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
        if not os.access(bin_dir / binary, os.X_OK):
            _missing(f"{bin_dir / binary}")
    if not os.access(ETCD_BIN, os.X_OK):
        _missing(f"etcd 3.6 ({ETCD_BIN})")
    workdir = tmp_path_factory.mktemp(f"k8s-{version}")
    env = {**os.environ, "K8S_BIN_DIR": str(bin_dir), "K8S_VERSION": version, "ETCD_BIN": str(ETCD_BIN),
           "APISERVER_EXTRA_ARGS": gang_api_args(version)}
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
        version=version,
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
    """``https://127.0.0.1:PORT/healthz`` (kube-scheduler's secure port, self-signed; no credentials needed)."""
    metrics_url: str
    """``https://127.0.0.1:PORT/metrics``: needs the admin token (:meth:`metrics`)."""
    log_path: Path
    token: str = ""

    def metrics(self) -> str:
        r = httpx.get(self.metrics_url, headers={"Authorization": f"Bearer {self.token}"}, verify=False, timeout=5)
        r.raise_for_status()
        return r.text

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
    """Start kube-scheduler of the control plane's version with a KubeSchedulerConfiguration
    (``kubescheduler.config.k8s.io/v1``).

    ``config`` is a path or the YAML text. The script fills in what is absent: the kubeconfig and
    ``leaderElect: false``; the secure port (healthz, metrics) is a free one on 127.0.0.1. Returns once /healthz
    is ok.
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
        env={**os.environ, "K8S_BIN_DIR": str(cp.bin_dir), "K8S_VERSION": cp.version},
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"kube-scheduler {name} did not start:\n{proc.stdout}\n{proc.stderr}")
    values = _read_env_text(proc.stdout)
    return KubeScheduler(
        name=name,
        pid=int(values["SCHEDULER_PID"]),
        healthz_url=values["SCHEDULER_HEALTHZ_URL"],
        metrics_url=values["SCHEDULER_METRICS_URL"],
        log_path=Path(values["SCHEDULER_LOG"]),
        token=cp.token,
    )


def _read_env_text(text: str) -> dict[str, str]:
    return {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in text.splitlines() if "=" in ln)}


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


@dataclass
class KubeControllerManager:
    pid: int
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


@pytest.fixture(scope="session")
def kube_controller_manager(kube_control_plane: KubeControlPlane) -> KubeControllerManager:
    """kube-controller-manager of the control plane's version (no cloud, node-lifecycle, IPAM, route or
    service-LB controllers: there are no kubelets); stopped with the control plane."""
    cp = kube_control_plane
    proc = subprocess.run(
        [str(CONTROL_PLANE_SH), "controller-manager", str(cp.dir)],
        check=False,
        env={**os.environ, "K8S_BIN_DIR": str(cp.bin_dir), "K8S_VERSION": cp.version},
        capture_output=True,
        text=True,
        timeout=150,
    )
    if proc.returncode != 0:
        pytest.fail(f"kube-controller-manager did not start:\n{proc.stdout}\n{proc.stderr}", pytrace=False)
    values = _read_env_text(proc.stdout)
    # the control plane's `down` stops it
    return KubeControllerManager(pid=int(values["CONTROLLER_MANAGER_PID"]),
                                 log_path=Path(values["CONTROLLER_MANAGER_LOG"]))


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
def run() -> str:
    """This test's run id (``up_process.new_run``): names and labels of what the test makes carry it."""
    from up_process import new_run
    return new_run()


@pytest.fixture
def fleet(kube_client: Any, run: str, tmp_path: Path) -> Iterator[list[Any]]:
    """2 nodes x 4 A100 with a kubelet stand-in (``up_process.kubelet_fleet``); modules that need another fleet
    define their own ``fleet``."""
    from up_process import gpu_nodes, kubelet_fleet
    with kubelet_fleet(kube_client, gpu_nodes(run, 2, 4), tmp_path) as nodes:
        yield nodes


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


@pytest.fixture
def namespaces(kube_control_plane: Any, kube_controller_manager: Any, kube_client: Any,
               run: str) -> Iterator[tuple[str, str, str]]:
    """(tenant A, its namespace ns-a bound to it by ``NAMESPACE_TENANT_LABEL``, another namespace ns-b), made before
    the control plane starts; deleted after the test with the Jobs and pods in them (the controller-manager
    finishes the deletion)."""
    from kubernetes import client

    from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL
    from gpucluster.kubernetes.workloads import QUEUE_LABEL

    core = client.CoreV1Api(kube_client)
    tenant, ns_a, ns_b = f"ta-{run}", f"a-{run}", f"b-{run}"
    core.create_namespace({"metadata": {"name": ns_a, "labels": {NAMESPACE_TENANT_LABEL: tenant}}})
    core.create_namespace({"metadata": {"name": ns_b}})
    try:
        yield tenant, ns_a, ns_b
    finally:
        for ns in (ns_a, ns_b):
            client.BatchV1Api(kube_client).delete_collection_namespaced_job(
                ns, label_selector=QUEUE_LABEL, propagation_policy="Background")
            core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            core.delete_namespace(ns)


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
