"""Job analysis: each simulated behaviour is classified as what it is; metrics files are read with clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.monitoring import JobSample, MetricsInputError, SimSource, analyze, load_metrics
from gpucluster.scheduler import Scheduler, profile_for
from tests.monitoring.conftest import FakeClock, activity_pod, place, small_state


def samples_for(activity: str, count: int = 1, nodes: int = 1, gpus: int = 4) -> list[JobSample]:
    state = small_state(nodes=nodes, gpus=gpus)
    sched = Scheduler(state, profile_for("spread"))
    pods = [activity_pod(f"w{k}", activity, count=count) for k in range(nodes)]
    assert place(sched, pods) == []
    clock = FakeClock()
    src = SimSource(state, clock=clock)
    out = []
    for t in (0.0, 10.0, 20.0):
        clock.t = t
        for s in src.sample():
            if s.pod:
                out.append(JobSample("j", s.gpu_util_pct or 0, t, s.hostname, s.gpu, s.gr_engine_active,
                                     s.tensor_active, s.dram_active, s.pcie_rx_bytes_per_s or 0,
                                     s.pcie_tx_bytes_per_s or 0, 0.0, s.fb_used_mib,
                                     (s.fb_used_mib or 0) + (s.fb_free_mib or 0)))
    return out


@pytest.mark.parametrize(("activity", "verdict"), [
    ("compute", "compute-bound"), ("input", "input-bound"), ("memory", "memory-bound"), ("idle", "idle"),
])
def test_simulated_behaviours_are_recognised(activity: str, verdict: str) -> None:
    r = analyze("j", samples_for(activity))
    assert r.verdict == verdict, r.why
    assert r.advice and r.gpus == 1 and r.samples == 3


def test_communication_bound_across_nodes_blames_placement() -> None:
    r = analyze("j", samples_for("communication", nodes=2))
    assert r.verdict == "communication-bound"
    assert "spans 2 nodes" in r.why and any("NVLink domain" in a for a in r.advice)
    assert r.nodes == ["n0", "n1"]


def test_full_memory_adds_a_warning() -> None:
    s = [JobSample("j", 95, fb_used_mib=79000, fb_total_mib=80000)]
    r = analyze("j", s)
    assert r.verdict == "compute-bound" and any("OOM" in a for a in r.advice)
    with pytest.raises(ValueError, match="no samples"):
        analyze("j", [])


def test_load_csv_and_json(tmp_path: Path) -> None:
    csv_path = tmp_path / "m.csv"
    csv_path.write_text("job,time,node,gpu,gpu_util,dram_active,tensor_active\n"
                        "a,0,n0,0,91,0.3,0.6\na,10,n0,0,93,0.3,0.6\nb,0,n1,0,2,,\n")
    jobs = load_metrics(csv_path)
    assert sorted(jobs) == ["a", "b"] and len(jobs["a"]) == 2 and jobs["b"][0].dram_active is None
    assert analyze("a", jobs["a"]).verdict == "compute-bound"
    json_path = tmp_path / "m.json"
    json_path.write_text(json.dumps({"samples": [{"job": "c", "gpu_util": 3}]}))
    assert analyze("c", load_metrics(json_path)["c"]).verdict == "idle"


@pytest.mark.parametrize(("name", "text", "match"), [
    ("m.csv", "job,gpu_util\na,abc\n", r"m.csv:2: gpu_util: not a number"),
    ("m.csv", "job,gpu_util\na,150\n", r"gpu_util: is a percentage"),
    ("m.csv", "job,gpu_util,speed\na,1,2\n", r"unknown field\(s\) speed"),
    ("m.csv", "job,gpu_util\n,50\n", r"job: required"),
    ("m.csv", "job,gpu_util\na,5,6\n", r"more values than header"),
    ("m.json", "[{\"job\": \"a\", \"gpu_util\": 5, \"dram_active\": 3}]", r"samples\[0\]: dram_active: is a ratio"),
    ("m.json", "{\"samples\": 3}", r"expected a list"),
    ("m.json", "{oops", r"m.json:1: not valid JSON"),
])
def test_bad_metrics_files_say_where_and_why(tmp_path: Path, name: str, text: str, match: str) -> None:
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(MetricsInputError, match=match):
        load_metrics(p)
