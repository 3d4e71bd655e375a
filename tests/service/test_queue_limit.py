"""Issue 28, item 5: one tenant cannot queue without bound. Each tenant may have ``max_queued_jobs`` jobs pending
(a default, ``gpucluster up --max-queued-jobs``, or its own through ``POST /api/v1/tenants``); beyond it a
submission is 429 with a JSON error naming the tenant and the limit, and nothing is stored. On main before this
change every submission was accepted."""

from __future__ import annotations

from pathlib import Path

from tests.service.inproc import in_process

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


def test_a_tenant_over_its_queued_jobs_limit_is_429(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        token = ip.tenant("busy", quota_gpus=1, max_queued_jobs=2)
        tenant = ip.as_(token)
        codes = [tenant.post("/api/v1/jobs", json={"name": f"j{i}", "resources": GPU}).status_code for i in range(3)]
        assert codes == [201, 201, 429]  # two pending before the first pass: the limit
        ip.tick()  # one runs (quota 1), one waits: the limit counts the waiting ones
        assert tenant.post("/api/v1/jobs", json={"name": "j2", "resources": GPU}).status_code == 201
        r = tenant.post("/api/v1/jobs", json={"name": "over", "resources": GPU})
        assert r.status_code == 429, r.text
        body = r.json()
        assert body["where"] == "tenant" and "busy" in body["error"] and "limit of queued jobs is 2" in body["error"]
        assert ip.client.get("/api/v1/jobs").json()["total"] == 3  # nothing stored
        # another tenant is not held back
        other = ip.as_(ip.tenant("calm"))
        assert other.post("/api/v1/jobs", json={"name": "c", "resources": GPU}).status_code == 201
        # the admin raises the limit (the tenant's new token comes with it)
        r = ip.client.post("/api/v1/tenants", json={"name": "busy", "quota_gpus": 1, "max_queued_jobs": 3})
        assert r.status_code == 201 and r.json()["max_queued_jobs"] == 3, r.text
        tenant = ip.as_(r.json()["token"])
        assert tenant.post("/api/v1/jobs", json={"name": "now", "resources": GPU}).status_code == 201
        rows = {t["name"]: t for t in ip.client.get("/api/v1/tenants").json()["tenants"]}
        assert rows["busy"]["max_queued_jobs"] == 3 and rows["calm"]["max_queued_jobs"] == 1000
