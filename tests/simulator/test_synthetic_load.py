"""Synthetic traces reach their offered load over the arrival window, and the window figures measure it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.model import JobSpec
from gpucluster.simulator.load import arrival_window, offered_load, step_mean, window_figures
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.synthetic import PROFILES, generate
from gpucluster.spec import load_cluster


@settings(max_examples=60, deadline=None)
@given(profile=st.sampled_from(sorted(PROFILES)), n=st.integers(20, 3000), gpus=st.integers(8, 2048),
       load=st.floats(0.05, 3.0), seed=st.integers(0, 10_000))
def test_a_synthetic_trace_offers_its_load_over_its_arrival_window(profile: str, n: int, gpus: int, load: float,
                                                                   seed: int) -> None:
    try:
        jobs, refused = generate(n, gpus, profile=profile, load=load, seed=seed), ""
    except TraceError as exc:
        jobs, refused = [], str(exc)
    if refused:  # only when the jobs cannot ask for that many GPUs at once
        assert "too few to keep" in refused
        return
    start, end = arrival_window(jobs)
    assert start == 0.0 and end > 0.0
    assert offered_load(jobs, gpus) == pytest.approx(load, rel=1e-3)
    # the trace opens on a busy cluster: what is submitted at 0 asks for the load already
    assert sum(j.num_gpus for j in jobs if j.submit_s == 0.0) >= load * gpus
    assert [j.submit_s for j in jobs] == sorted(j.submit_s for j in jobs)


@settings(max_examples=20, deadline=None)
@given(profile=st.sampled_from(sorted(PROFILES)), seed=st.integers(0, 10_000), a=st.floats(0.1, 2.0),
       b=st.floats(0.1, 2.0))
def test_the_load_moves_arrivals_only(profile: str, seed: int, a: float, b: float) -> None:
    """The calibrated job mix (sizes, run times, tenants, models) does not depend on the load."""
    x, y = generate(3000, 256, profile=profile, load=a, seed=seed), generate(3000, 256, profile=profile, load=b,
                                                                             seed=seed)
    assert [(j.num_gpus, j.duration_s, j.tenant, j.model) for j in x] == \
        [(j.num_gpus, j.duration_s, j.tenant, j.model) for j in y]
    if a < b:  # more load from the same jobs: a shorter window
        assert arrival_window(x)[1] > arrival_window(y)[1]


def test_too_few_jobs_for_the_load_is_an_error_that_says_how_many() -> None:
    with pytest.raises(TraceError, match=r"synthetic:100:philly:0.7: 100 jobs ask for \d+ GPUs in all, too few to "
                                         r"keep 0.7 x 1920 GPUs busy; use more jobs \(at [\d.]+ GPUs per job it "
                                         r"takes about \d+"):
        generate(100, 1920, profile="philly", load=0.7)
    with pytest.raises(TraceError, match="the cluster has no GPUs"):
        generate(100, 0)


def _job(i: int, submit: float, gpus: int, duration: float) -> JobSpec:
    return JobSpec(job_id=f"j{i}", submit_s=submit, num_gpus=gpus, duration_s=duration)


def test_offered_load_counts_each_job_until_it_ends_or_the_window_closes() -> None:
    # window 0..100 on 10 GPUs: 4 GPUs for 50 s, 2 GPUs from 20 s past the end (80 s), 8 GPUs from 100 s (0 s)
    jobs = [_job(0, 0.0, 4, 50.0), _job(1, 20.0, 2, 1000.0), _job(2, 100.0, 8, 5.0)]
    assert offered_load(jobs, 10) == pytest.approx((4 * 50 + 2 * 80) / (10 * 100))
    assert offered_load(jobs, 10, (0.0, 50.0)) == pytest.approx((4 * 50 + 2 * 30) / (10 * 50))
    assert offered_load([], 10) == 0.0 and offered_load(jobs, 0) == 0.0 and offered_load(jobs[:1], 10) == 0.0


def test_step_mean_is_the_time_average_of_a_step_series() -> None:
    # 0 before t=10, 4 on [10, 30), 2 from 30 on; over [0, 40]: (4*20 + 2*10) / 40
    assert step_mean([10.0, 30.0], [4.0, 2.0], 0.0, 40.0) == pytest.approx(2.5)
    assert step_mean([10.0, 30.0], [4.0, 2.0], 15.0, 25.0) == pytest.approx(4.0)
    assert step_mean([], [], 0.0, 1.0) == 0.0 and step_mean([1.0], [3.0], 5.0, 5.0) == 0.0


def _run(trace: tuple[int, str, float]) -> tuple[dict[str, float], dict[str, float]]:
    cluster = load_cluster(None)  # the reference cluster: 1,920 GPUs
    gpus = sum(len(n.devices) for n in cluster.nodes)
    n, profile, load = trace
    jobs = generate(n, gpus, profile=profile, load=load, seed=0)
    sim = Simulation(cluster, "default", seed=0)
    sim.submit_many(jobs)
    sim.run()
    window = window_figures(jobs, gpus, [p.time for p in sim.series], [p.busy_gpus for p in sim.series],
                            [p.queued_jobs for p in sim.series])
    return window, sim.summary()


@pytest.mark.slow
def test_load_one_and_a_half_queues_on_the_reference_cluster() -> None:
    """The issue's check: ``simulate --trace synthetic:2000:philly:1.5`` keeps the cluster busy and queues."""
    window, summary = _run((2000, "philly", 1.5))
    assert window["offered_load"] == pytest.approx(1.5, rel=1e-3)
    assert window["gpu_utilization_window"] >= 0.5
    assert summary["avg_queue_s"] > 0 and window["avg_queue_len_window"] > 0
    assert summary["jobs_completed"] == 2000 and summary["jobs_lost"] == 0


@pytest.mark.slow
def test_below_capacity_the_cluster_carries_what_is_offered() -> None:
    window, summary = _run((2000, "philly", 0.7))
    assert math.isclose(window["gpu_utilization_window"], 0.7, abs_tol=0.05)
    assert summary["jobs_completed"] == 2000
