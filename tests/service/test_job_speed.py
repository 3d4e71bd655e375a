"""GPU speed in the control plane: the speed-model fields of ``POST /api/v1/jobs`` (``ref_gpu``, ``work_class``,
``speedup``, ``tokens``) are validated with where and why, shown in the job's view, kept across a restart, and the
embedded runtime runs a job's work at the speed model's speed on the GPUs it got (the real app in-process, the
clock ticked by hand)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucluster.jobs.speed import default_speed_model
from tests.service.inproc import InProc, in_process

H100 = "H100-SXM5-80GB"  # the GPU model of the in-process cluster's train pool (L40S-48GB is the other)


def _submit(ip: InProc, **body: Any) -> dict[str, Any]:
    r = ip.client.post("/api/v1/jobs", json={"tenant": "ml", "resources": {"nvidia.com/gpu": 8}, **body})
    assert r.status_code == 201, r.text
    job: dict[str, Any] = r.json()
    return job


def _until_done(ip: InProc, job_id: str, limit: int = 400) -> dict[str, Any]:
    for _ in range(limit):
        ip.tick(10.0)
        job: dict[str, Any] = ip.client.get(f"/api/v1/jobs/{job_id}").json()
        if job["status"] == "succeeded":
            return job
    raise AssertionError(f"job {job_id} did not finish in {limit} ticks: {job}")


def test_a_v100_job_on_h100_runs_shorter_by_the_catalog_ratio(tmp_path: Path) -> None:
    model = default_speed_model()
    ratio = model.factor(model.job(kind="training", ref_gpu="V100"), H100)
    assert ratio > 1.5  # the published figures put an H100 far ahead of a V100
    with in_process(tmp_path / "d") as ip:
        fast = _submit(ip, name="v100-work", duration_s=1000, gpu_type="H100", ref_gpu="V100")
        plain = _submit(ip, name="no-ref", duration_s=1000, gpu_type="H100")
        fast, plain = _until_done(ip, fast["id"]), _until_done(ip, plain["id"])
    assert fast["finished_t"] - fast["started_t"] == pytest.approx(1000 / ratio, rel=1e-9)
    assert fast["gpu_speed"] == pytest.approx(ratio) and fast["ref_gpu"] == "V100"
    assert plain["finished_t"] - plain["started_t"] == pytest.approx(1000, rel=1e-9)
    assert plain["gpu_speed"] == 1.0


def test_a_measured_speedup_overrides_the_model(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        job = _submit(ip, name="measured", duration_s=900, gpu_type="H100", ref_gpu="V100",
                      speedup={"H100": 3.0})
        done = _until_done(ip, job["id"])
    assert done["finished_t"] - done["started_t"] == pytest.approx(300.0, rel=1e-9)
    assert done["speedup"] == {"H100": 3.0}


@pytest.mark.parametrize(("field", "body", "where", "why"), [
    ("ref_gpu", {"ref_gpu": "X9"}, "ref_gpu", "unknown GPU model 'X9'"),
    ("work_class", {"ref_gpu": "V100", "work_class": "training/nope"}, "work_class", "training/nope"),
    ("speedup key", {"ref_gpu": "V100", "speedup": {"X9": 2.0}}, "speedup.X9", "unknown GPU model"),
    ("speedup zero", {"ref_gpu": "V100", "speedup": {"H100": 0}}, "speedup", "must be > 0"),
    ("speedup huge", {"ref_gpu": "V100", "speedup": {"H100": 1e9}}, "speedup", "at most 1000"),
    ("speedup text", {"ref_gpu": "V100", "speedup": {"H100": "fast"}}, "speedup.H100", "number"),
    ("speedup alone", {"speedup": {"H100": 2.0}}, "speedup", "need a ref_gpu"),
    ("tokens negative", {"tokens": -1}, "tokens", "greater than or equal to 0"),
    ("tokens huge", {"tokens": 1e30}, "tokens", "less than or equal to"),
    ("tokens nan", {"tokens": "NaN"}, "tokens", "finite"),
])
def test_bad_speed_fields_are_422_with_the_field_named(tmp_path: Path, field: str, body: dict[str, Any],
                                                        where: str, why: str) -> None:
    with in_process(tmp_path / "d") as ip:
        r = ip.client.post("/api/v1/jobs", json={"name": "bad", "tenant": "ml", "duration_s": 60,
                                                 "resources": {"nvidia.com/gpu": 1}, **body})
        assert r.status_code == 422, (field, r.text)
        err = r.json()
        assert err["where"] == where and why in err["error"], (field, err)
        assert ip.client.get("/api/v1/jobs").json()["total"] == 0  # nothing was accepted


def test_a_restart_keeps_the_speed_fields(tmp_path: Path) -> None:
    data = tmp_path / "d"
    fields = {"ref_gpu": "V100", "work_class": "inference/llm-decode", "speedup": {"L40S": 1.7},
              "tokens": 2.5e9, "kind": "infer"}
    with in_process(data) as ip:
        job = _submit(ip, name="kept", duration_s=3600, **fields)
        assert {k: job[k] for k in fields} == fields
    with in_process(data) as ip:
        again = ip.client.get(f"/api/v1/jobs/{job['id']}").json()
    assert {k: again[k] for k in fields} == fields
