"""A restarted control plane's first admission pass already knows the stored quotas.

A runtime that reads its workloads back from the cluster (Kubernetes: a tenant's running Job and its Job waiting
for quota, seen by the informers before the service is opened) admits at the service's first ``advance`` (the
clock resumed from the store). Before this change the stored quotas were given to the runtime only after that
pass: every tenant was unlimited then, the waiting Job was admitted and the tenant held twice its quota.
"""

from __future__ import annotations

from pathlib import Path

from gpucluster.jobs import Job, JobSpec, JobState
from gpucluster.service import EmbeddedRuntime, ServiceConfig, open_service
from tests.service.inproc import ADMIN, in_process, small_cluster


def test_the_first_pass_after_a_restart_keeps_the_tenant_within_its_quota(tmp_path: Path) -> None:
    data = tmp_path / "d"
    with in_process(data) as ip:
        r = ip.client.post("/api/v1/tenants", json={"name": "team", "quota_gpus": 2})
        assert r.status_code == 201, r.text
        ip.tick(10.0)  # the stored clock is ahead of the new runtime's: the restart's first advance admits
    # the restarted runtime already holds what it found in the cluster: one job running, one waiting
    runtime = EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0)
    runtime.submit(Job(JobSpec("running", 0.0, 2, 1e6, tenant="team", gpus_per_task=2)))
    runtime.advance(1.0)
    assert runtime.job("running").state == JobState.RUNNING  # type: ignore[union-attr]
    runtime.submit(Job(JobSpec("waiting", 1.0, 2, 1e6, tenant="team", gpus_per_task=2)))
    service, _ = open_service(runtime, ServiceConfig(data_dir=data, speed=0.0, admin_token=ADMIN))
    try:
        assert runtime.now >= 10.0
        waiting = runtime.job("waiting")
        assert waiting is not None and waiting.state == JobState.QUEUED, waiting
        assert "quota" in waiting.message
        assert runtime.usage_by_tenant()["team"]["gpus"] == 2.0
    finally:
        service.close()
