"""Issue 28 (round 2, item 4): ``/metrics`` stays bounded and costs no scan of the jobs, however many are queued.

The queue gauges (``gpucluster_scheduler_pending_pods``, ``gpucluster_scheduler_oldest_pending_seconds``,
docs/monitoring.md) are read from the runtime's counts (``gpucluster.jobs.tally``), and the per-tenant figures are
one series per tenant (``gpucluster_tenant_jobs_pending`` beside ``gpucluster_tenant_gpus_pending``), never one per
job. On main before this change every scrape listed every job of the runtime to count the pending ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.service.inproc import in_process


def _series(text: str, name: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith((name + "{", name + " ")):
            labels, _, value = line.rpartition(" ")
            out[labels[len(name):]] = float(value)
    return out


def test_queue_gauges_are_counts_not_a_scan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with in_process(tmp_path / "d") as ip:
        ip.tenant("flood", quota_gpus=1)
        for i in range(30):
            r = ip.client.post("/api/v1/jobs", json={"name": f"f{i}", "tenant": "flood",
                                                     "resources": {"nvidia.com/gpu": 1}})
            assert r.status_code == 201, r.text
        ip.tick()
        ip.tick(5.0)
        scans: list[int] = []
        jobs = ip.service.runtime.jobs

        def counted() -> Any:
            scans.append(1)
            return jobs()

        monkeypatch.setattr(ip.service.runtime, "jobs", counted)
        text = ip.client.get("/metrics").text
        assert not scans  # no list of the jobs per scrape
        pending = {j["id"]: j for j in ip.client.get("/api/v1/jobs", params={"status": "pending"}).json()["jobs"]}
        pods = sum(j["replicas"] for j in pending.values())
        assert _series(text, "gpucluster_scheduler_pending_pods") == {"": float(pods)}
        assert pods >= 29  # the flood's quota runs one of its 30
        oldest = _series(text, "gpucluster_scheduler_oldest_pending_seconds")[""]
        assert oldest >= 5.0  # they have waited since the first tick
        per_tenant = _series(text, "gpucluster_tenant_jobs_pending")
        assert per_tenant['{tenant="flood"}'] == 29.0
        # bounded: one series per tenant, not per job, for every metric of the scrape
        names = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and line[0] != "#"}
        for name in names:
            assert len(_series(text, name)) < 60, name  # devices and nodes of the small cluster, never 30 jobs
        assert not any(jid in text for jid in pending)
