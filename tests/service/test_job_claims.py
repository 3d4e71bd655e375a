"""Jobs of the API that ask for devices through DRA (``claims``: a DeviceClass, a count, optionally consumable
memory), on the embedded backend: each claim is the equivalent device request (``count`` GPUs, shared by memory
when ``memory_mib`` is given), shown as given and kept across a restart; each bad field is a 422 naming it.
(Kubernetes: tests/integration/test_k8s_dra_jobs.py makes ResourceClaimTemplates and allocates the claims.)"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gpucluster.jobs import job_spec
from gpucluster.kubernetes.workloads import claim_templates, job_manifest, request_of, spec_from_request
from tests.kubernetes.helpers import registry
from tests.service.inproc import in_process

BASE: dict[str, Any] = {"name": "dra", "tenant": "ml", "duration_s": 120}


def test_a_job_with_claims_runs_on_the_equivalent_devices_and_is_kept_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path / "d"
    claims = [{"device_class": "gpu.nvidia.com", "count": 2}, {"device_class": "hami.gpu", "memory_mib": 20000}]
    with in_process(data) as ip:
        r = ip.client.post("/api/v1/jobs", json={**BASE, "claims": claims})
        assert r.status_code == 201, r.text
        job = r.json()
        assert job["claims"] == [{**claims[0]}, {**claims[1], "count": 1}]
        for _ in range(3):
            ip.tick(1.0)
        running = ip.client.get(f"/api/v1/jobs/{job['id']}").json()
        assert running["status"] == "running", running["message"]
        devices = [d for p in running["placements"] for d in p["devices"]]
        assert len(devices) == 3  # two whole GPUs and one 20000 MiB share
        assert sorted(int(d["memory_mib"]) for d in devices)[0] == 20000
        assert running["gpus"] > 2.0
    with in_process(data) as ip:
        again = ip.client.get(f"/api/v1/jobs/{job['id']}").json()
        assert again["claims"] == job["claims"]


@pytest.mark.parametrize(("body", "where", "why"), [
    ({"claims": [{"device_class": "gpu.nvidia.com", "count": 0}]}, "claims.0.count", "greater than or equal to 1"),
    ({"claims": [{"device_class": "Bad_Class"}]}, "claims.0.device_class", "pattern"),
    ({"claims": [{"count": 1}]}, "claims.0.device_class", "required"),
    ({"claims": [{"device_class": "gpu.nvidia.com", "memory_mib": 0}]}, "claims.0.memory_mib",
     "greater than or equal to 1"),
    ({"claims": [{"device_class": "gpu.nvidia.com", "colour": "red"}]}, "claims.0.colour", "Extra inputs"),
    ({"claims": [{"device_class": "gpu.nvidia.com"}] * 5}, "claims", "at most 4"),
    ({"resources": {"nvidia.com/gpu": 1}, "claims": [{"device_class": "gpu.nvidia.com"}]}, "claims", "not both"),
    ({}, "resources", "asks for nothing"),
])
def test_bad_claims_are_422_naming_the_field(tmp_path: Path, body: dict[str, Any], where: str, why: str) -> None:
    with in_process(tmp_path / "d") as ip:
        r = ip.client.post("/api/v1/jobs", json={**BASE, **body})
        assert r.status_code == 422, r.text
        err = r.json()
        assert (err["where"], why in err["error"]) == (where, True), err
        assert ip.client.get("/api/v1/jobs").json()["jobs"] == []  # nothing accepted


def test_on_kubernetes_a_job_with_claims_has_a_claim_template_per_claim_and_no_gpu_limits() -> None:
    spec = job_spec("j-abc", name="dra", tenant="ml", replicas=2, resources={"cpu": "2"}, duration_s=None,
                    submit_s=0.0, registry=registry(),
                    claims=[{"device_class": "gpu.nvidia.com", "count": 2},
                            {"device_class": "hami.gpu", "memory_mib": 20000}])
    body = job_manifest(spec, "default", "gpucluster", registry=registry())
    pod = body["spec"]["template"]["spec"]
    assert pod["resourceClaims"] == [{"name": "claim-0", "resourceClaimTemplateName": "j-abc-claim-0"},
                                     {"name": "claim-1", "resourceClaimTemplateName": "j-abc-claim-1"}]
    assert pod["containers"][0]["resources"] == {"limits": {"cpu": "2"},
                                                 "claims": [{"name": "claim-0"}, {"name": "claim-1"}]}
    templates = claim_templates(spec, "default", "uid-1")
    assert [t["metadata"]["name"] for t in templates] == ["j-abc-claim-0", "j-abc-claim-1"]
    assert templates[0]["metadata"]["ownerReferences"][0]["uid"] == "uid-1"
    first = templates[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    second = templates[1]["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert first == {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 2}
    assert second["capacity"] == {"requests": {"memory": "20000Mi"}}
    again = spec_from_request(spec.job_id, request_of(spec), registry(), 0.0)
    assert again.claims == spec.claims and again.num_gpus == spec.num_gpus == 6


def test_claims_are_checked_where_job_spec_reads_them() -> None:
    def spec(claims: Any) -> Any:
        return job_spec("j", name="j", tenant="t", replicas=1, resources={}, duration_s=None, submit_s=0.0,
                        claims=claims)

    for claims, where in (([{"device_class": "x", "count": True}], "claims[0].count"),
                          ([{"device_class": "x", "count": 17}], "claims[0].count"),
                          ([{"device_class": "x", "memory_mib": -1}], "claims[0].memory_mib"),
                          ([{"device_class": "-x"}], "claims[0].device_class"),
                          ([{"device_class": "x", "size": 1}], "claims[0].size"),
                          (["gpu"], "claims[0]")):
        with pytest.raises(ValueError, match="^" + re.escape(where) + ": "):
            spec(claims)
