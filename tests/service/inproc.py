"""The control plane in-process: the real FastAPI app (guard included), EmbeddedRuntime and SQLite store on a
small cluster, driven by Starlette's test client with the scheduling loop ticked by hand (no server, no sleeps).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from fastapi.testclient import TestClient

from gpucluster.monitoring import RemediationPolicy
from gpucluster.service import EmbeddedRuntime, Service, ServiceConfig, create_app, open_service
from gpucluster.service.limits import RateLimits
from gpucluster.service.retention import JobRetention
from gpucluster.spec import Cluster, ClusterSpecFile, cluster_from_spec
from gpucluster.web import mount as web_mount

ADMIN = "in-process-admin-token"
SPEC = {
    "name": "small",
    "nodePools": [
        {"name": "train", "count": 4, "cpuMilli": 224000, "memoryMiB": 2097152,
         "gpu": {"model": "H100-SXM5-80GB", "count": 8, "memoryMiB": 81559, "nvlinkDomainSize": 8}},
        {"name": "infer", "count": 2, "cpuMilli": 128000, "memoryMiB": 1048576,
         "gpu": {"model": "L40S-48GB", "count": 8, "memoryMiB": 46068}},
    ],
}


def small_cluster() -> Cluster:
    return cluster_from_spec(ClusterSpecFile.model_validate(SPEC), "test")


def write_small_cluster(path: Path) -> Path:
    """The same small cluster as a spec file, for a real ``gpucluster up --cluster``."""
    path.write_text(yaml.safe_dump({"apiVersion": "gpucluster.io/v1alpha1", "kind": "ClusterSpec", **SPEC}))
    return path


@dataclass
class InProc:
    service: Service
    client: TestClient
    data_dir: Path

    def as_(self, token: str | None) -> TestClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return TestClient(self.client.app, headers=headers, raise_server_exceptions=False)

    def tick(self, dt: float = 1.0) -> None:
        """Advance the clock by ``dt`` runtime seconds and run one scheduling-loop tick."""
        self.service.clock_origin += dt
        self.service.tick()

    def tenant(self, name: str, **kw: Any) -> str:
        r = self.client.post("/api/v1/tenants", json={"name": name, **kw})
        assert r.status_code == 201, r.text
        token: str = r.json()["token"]
        return token


@contextmanager
def in_process(data_dir: Path, admin: str = ADMIN, rates: RateLimits | None = None,
               cluster: Cluster | None = None, queue_policy: str = "default", web: bool = False,
               remediation: RemediationPolicy | None = None, tenants_on_first_use: bool = True,
               unique_job_names: bool = True, retention: JobRetention | None = None) -> Iterator[InProc]:
    """``web``: with the dashboard's routes mounted, as ``gpucluster up`` serves them. ``remediation``: what
    automatic remediation may do (``up --remediate``; default: the monitoring package's). ``tenants_on_first_use``:
    ``up --tenants on-first-use`` (these tests name tenants they do not create; False: up's default).
    ``unique_job_names``: ``up --job-names unique`` (the default) or, False, ``shared``. ``retention``: which
    finished jobs stay in memory (``up --finished-job-ttl``, ``--max-finished-jobs``; default: up's)."""
    runtime = EmbeddedRuntime(cluster or small_cluster(), background=0.0, fault_rate_per_hour=0.0,
                              queue_policy=queue_policy, remediation=remediation)
    config = ServiceConfig(data_dir=data_dir, speed=0.0, admin_token=admin, rates=rates or RateLimits(),
                           tenants_on_first_use=tenants_on_first_use, unique_job_names=unique_job_names,
                           retention=retention or JobRetention())
    service, _ = open_service(runtime, config)
    app = create_app(service, mount_web=web_mount if web else None)
    client = TestClient(app, headers={"Authorization": f"Bearer {admin}"}, raise_server_exceptions=False)
    try:
        yield InProc(service, client, data_dir)
    finally:
        service.close()
