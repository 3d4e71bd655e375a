"""GPU speed in the engine: a job's work is seconds on its ``ref_gpu``; the GPUs it gets run it faster or slower."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.jobs.model import JobKind, JobSpec
from gpucluster.jobs.speed import SPEED_KEY, GpuSpeeds
from gpucluster.perf import SpeedModel
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.jobs import load_jobs
from gpucluster.simulator.traces.philly import load_philly
from gpucluster.simulator.traces.synthetic import generate
from gpucluster.spec import Cluster
from tests.simulator.conftest import make_cluster, mixed_cluster

runner = CliRunner()


def _run(cluster: Cluster, jobs: list[JobSpec], policy: str = "fifo") -> Simulation:
    sim = Simulation(cluster, policy)
    sim.submit_many(jobs)
    sim.run()
    return sim


def _per_job(sim: Simulation) -> dict[str, tuple[float, float, int]]:
    return {j.job_id: (j.first_start_s, j.finish_s, j.preemptions) for j in sim.jobs.values()}


@pytest.mark.parametrize("policy", ["fifo", "tiresias", "default"])
@pytest.mark.parametrize("ref", ["V100", "V100-SXM2-32GB", "Tesla-V100-SXM2-32GB"])
def test_work_on_the_clusters_own_model_keeps_every_jct(policy: str, ref: str) -> None:
    """With ``ref_gpu`` = the cluster's model (by any of its names) every job starts and ends as without it."""
    jobs = generate(300, 32, seed=5, load=1.2, max_gpus=16)
    plain = _run(make_cluster(), jobs, policy)
    timed = _run(make_cluster(), [replace(j, ref_gpu=ref) for j in jobs], policy)
    assert _per_job(timed) == _per_job(plain)
    assert timed.summary()["gpu_speed"] == 1.0


def _catalog_ratio(kind: str, model: str) -> float:
    m = SpeedModel()
    job = m.job(kind=kind, model=model, ref_gpu="V100")
    return m.factor(job, "H100") / m.factor(job, "L40S")


@pytest.mark.parametrize(("model", "kind"), [("Transformer", JobKind.TRAIN), ("ResNet-50", JobKind.TRAIN)])
def test_h100_finishes_training_work_faster_than_l40s_by_the_catalog_ratio(model: str, kind: JobKind) -> None:
    """Same GPU count, same work: the L40S cluster needs the speed model's ratio more GPU time, and that ratio sits
    between the published BF16 peak ratio and the memory bandwidth ratio (989 / 362 and 3.35 / 0.86 TB/s)."""
    jobs = [replace(j, model=model, kind=kind, ref_gpu="V100") for j in generate(200, 32, seed=2, load=0.3,
                                                                                max_gpus=8)]
    h100 = _run(make_cluster(model="H100", name="h100"), jobs)
    l40s = _run(make_cluster(model="L40S", name="l40s"), jobs)
    expected = _catalog_ratio("training", model)
    measured = l40s.totals.busy_gpu_s / h100.totals.busy_gpu_s
    assert measured == pytest.approx(expected, rel=0.02)
    cat = SpeedModel().catalog
    h, lo = cat.gpu("H100-SXM5-80GB"), cat.gpu("L40S-48GB")
    peak, bw = h.peak("bf16") / lo.peak("bf16"), h.memory_bw_gbs / lo.memory_bw_gbs
    assert 0.8 * min(peak, bw) <= measured <= 1.1 * max(peak, bw)
    sh, sl = h100.summary(), l40s.summary()
    assert sh["avg_jct_s"] < sl["avg_jct_s"]
    assert sh["gpu_speed"] / sl["gpu_speed"] == pytest.approx(expected, rel=0.02)
    assert sh["work_ref_gpu_h"] == pytest.approx(sl["work_ref_gpu_h"])


def test_each_job_runs_at_the_speed_of_the_model_it_landed_on() -> None:
    jobs = [JobSpec(f"j{i}", 0, 8, 3600, model="Transformer", ref_gpu="V100") for i in range(2)]
    sim = _run(mixed_cluster(), jobs)
    speeds = GpuSpeeds(sim.state)
    for job in sim.jobs.values():
        [node] = job.nodes
        expected = speeds.factor(job.spec, "H100" if node.startswith("h100") else "L40S")
        assert job.extra[SPEED_KEY] == pytest.approx(expected)
        assert job.finish_s == pytest.approx(3600 / expected)
    assert {j.nodes for j in sim.jobs.values()} == {("h100-0",), ("l40s-1",)}
    # a placement over both models (the engine keeps gangs on one) would run at the slower one's pace
    spec = jobs[0]
    both = speeds.on_devices(spec, [(0, 0), (1, 0)])
    assert both == pytest.approx(speeds.factor(spec, "L40S")) and both < speeds.factor(spec, "H100")


def test_a_measured_speedup_overrides_the_model_and_needs_no_network_part() -> None:
    spec = JobSpec("m", 0, 8, 3600, ref_gpu="V100", speedup={"H100": 2.0})
    sim = _run(make_cluster(model="H100"), [spec])
    assert sim.job("m").finish_s == pytest.approx(1800.0)
    assert sim.summary()["avg_placement_slowdown"] == pytest.approx(1.0)


def test_jobs_without_a_reference_run_the_same_on_every_model() -> None:
    jobs = generate(100, 32, seed=1, load=0.5, max_gpus=8)
    a = _run(make_cluster(model="H100"), jobs)
    b = _run(make_cluster(model="L40S"), jobs)
    assert [j.finish_s for j in a.jobs.values()] == [j.finish_s for j in b.jobs.values()]


def test_bad_speed_fields_are_refused_naming_the_job_and_field(tmp_path: Path) -> None:
    sim = Simulation(make_cluster(), "fifo")
    with pytest.raises(ValueError, match="job x: ref_gpu: unknown GPU model 'V1000'"):
        sim.submit(JobSpec("x", 0, 1, 10, ref_gpu="V1000"))
    with pytest.raises(ValueError, match=r"job y: speed\.H100: must be > 0"):
        sim.submit(JobSpec("y", 0, 1, 10, ref_gpu="V100", speedup={"H100": 0.0}))
    assert sim.jobs == {}
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s,ref_gpu\na,0,1,60,V100\nb,0,1,60,V1000\n")
    with pytest.raises(TraceError, match=r"jobs.csv:3: ref_gpu: unknown GPU model"):
        load_jobs(f)
    f.write_text("id,submit_s,gpus,duration_s,ref_gpu,speedup\na,0,1,60,V100,H100\n")
    with pytest.raises(TraceError, match=r"jobs.csv:2: speedup: expected MODEL=SPEED"):
        load_jobs(f)


def test_the_job_format_carries_the_speed_fields(tmp_path: Path) -> None:
    c = tmp_path / "jobs.csv"
    c.write_text("id,submit_s,gpus,duration_s,kind,ref_gpu,speedup,tokens,work_class\n"
                 "a,0,1,60,infer,H100,L40S=0.4;L4=0.1,2e6,inference/llm-decode\n")
    [a] = load_jobs(c)
    assert (a.ref_gpu, dict(a.speedup), a.tokens, a.work_class) == (
        "H100", {"L40S": 0.4, "L4": 0.1}, 2e6, "inference/llm-decode")
    y = tmp_path / "jobs.yaml"
    y.write_text("- {id: b, submit_s: 0, gpus: 1, duration_s: 9, ref_gpu: A100, speedup: {H100: 1.5}}\n")
    [b] = load_jobs(y)
    assert dict(b.speedup) == {"H100": 1.5}
    sim = _run(make_cluster(model="H100"), [b])
    assert sim.job("b").finish_s == pytest.approx(6.0)


def test_philly_jobs_are_v100_work_with_gavels_measured_speeds(philly_dir: Path) -> None:
    jobs = load_philly(philly_dir, limit=200)
    oracle = json.loads((philly_dir.parent / "oracle_throughputs.json").read_text()) \
        if (philly_dir.parent / "oracle_throughputs.json").is_file() else None
    assert {j.ref_gpu for j in jobs} == {"V100"} and {j.kind for j in jobs} == {JobKind.TRAIN}
    j = jobs[0]
    assert j.speedup["V100-SXM2-16GB"] == 1.0 and 0 < j.speedup["K80"] < 1
    if oracle is not None:
        assert j.speedup["P100-PCIe-16GB"] == pytest.approx(
            oracle["p100"][j.model]["null"] / oracle["v100"][j.model]["null"])
    # on the Philly cluster (V100) the trace runs exactly as before the speed model
    plain = _run(make_cluster(), [replace(x, ref_gpu="", speedup={}) for x in jobs[:80]])
    timed = _run(make_cluster(), jobs[:80])
    assert _per_job(timed) == _per_job(plain)


def test_simulate_load_one_and_a_half_on_the_reference_cluster_queues() -> None:
    """``simulate --trace synthetic:2000:philly:1.5``: synthetic work is on the cluster's main model (H100)."""
    res = runner.invoke(app, ["simulate", "--trace", "synthetic:2000:philly:1.5", "--json"])
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["gpu_utilization_window"] >= 0.5 and s["avg_queue_s"] > 0 and s["avg_queue_len_window"] > 0
    assert s["jobs_completed"] == 2000 and s["jobs_lost"] == 0
    assert 0 < s["gpu_speed"] <= 1.0  # H100 work; some of it lands on the L40S nodes


def test_ref_gpu_flag_fills_in_jobs_without_one(tmp_path: Path) -> None:
    f = tmp_path / "jobs.csv"
    f.write_text("id,submit_s,gpus,duration_s,model\na,0,8,3600,Transformer\n")
    base = ["simulate", "--cluster", "src/gpucluster/data/philly-500.yaml", "--trace", f"jobs:{f}", "--json"]
    plain = json.loads(runner.invoke(app, base).stdout)
    a100 = json.loads(runner.invoke(app, [*base, "--ref-gpu", "A100"]).stdout)
    assert plain["avg_jct_s"] == pytest.approx(3600.0)
    assert a100["avg_jct_s"] > 3600.0  # A100 work takes longer on the V100s
    res = runner.invoke(app, [*base, "--ref-gpu", "Z9000"])
    assert res.exit_code == 2 and "--ref-gpu: unknown GPU model 'Z9000'" in res.output
