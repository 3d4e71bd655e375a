from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.jobs.model import JobSpec, task_pods
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.jobs import load_jobs
from gpucluster.simulator.traces.synthetic import PROFILES, generate


def test_tasks_split_into_whole_nodes_and_form_a_gang() -> None:
    spec = JobSpec("j", 0, 24, 100)
    assert (spec.task_gpus, spec.num_tasks) == (8, 3)
    pods = task_pods(spec, 2)
    assert len(pods) == 3
    assert {p.gang for p in pods} == {"j#2"}
    assert all(p.gang_min_member == 3 and p.device_count == 8 for p in pods)
    assert task_pods(JobSpec("s", 0, 1, 10), 1)[0].gang == ""
    assert JobSpec("o", 0, 12, 1).task_gpus == 4


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(ValueError, match="num_gpus"):
        JobSpec("j", 0, 0, 10)
    with pytest.raises(ValueError, match="split"):
        JobSpec("j", 0, 6, 10, gpus_per_task=4)


def test_job_file_csv_and_yaml(tmp_path: Path) -> None:
    c = tmp_path / "jobs.csv"
    c.write_text("id,submit_s,gpus,duration_s,tenant\na,0,8,3600,t1\nb,5,1,60,t2\n")
    jobs = load_jobs(c)
    assert [(j.job_id, j.num_gpus, j.tenant) for j in jobs] == [("a", 8, "t1"), ("b", 1, "t2")]
    y = tmp_path / "jobs.yaml"
    y.write_text("jobs:\n  - id: a\n    submit_s: 0\n    gpus: 2\n    duration_s: 10\n")
    assert load_jobs(y)[0].num_gpus == 2


def test_job_file_errors_name_file_and_line(tmp_path: Path) -> None:
    c = tmp_path / "bad.csv"
    c.write_text("id,submit_s,gpus,duration_s\na,0,8,3600\nb,zero,1,60\n")
    with pytest.raises(TraceError, match=r"bad.csv:3: submit_s: not a number"):
        load_jobs(c)
    y = tmp_path / "bad.yaml"
    y.write_text("- id: a\n  submit_s: 0\n  gpus: 1\n  duration_s: 1\n- id: b\n  submit_s: 0\n  gpus: 1\n")
    with pytest.raises(TraceError, match=r"bad.yaml:5: duration_s: required"):
        load_jobs(y)


def test_synthetic_generator_matches_its_calibration() -> None:
    jobs = generate(20000, 500, seed=1)
    runs = sorted(j.duration_s for j in jobs)
    median = runs[len(runs) // 2]
    mean_gpus = sum(j.num_gpus for j in jobs) / len(jobs)
    p = PROFILES["philly"]
    assert abs(median - p.median_run_s) / p.median_run_s < 0.1
    assert abs(mean_gpus - p.mean_gpus) < 0.15
    assert generate(50, 32, seed=3) == generate(50, 32, seed=3)
    with pytest.raises(TraceError, match="unknown profile"):
        generate(5, 100, profile="nope")
    with pytest.raises(TraceError, match=r"synthetic:50:philly:0.7: 50 jobs ask for \d+ GPUs in all, too few to keep "
                                         r"0.7 x 500 GPUs busy; use more jobs"):
        generate(50, 500, seed=3)
