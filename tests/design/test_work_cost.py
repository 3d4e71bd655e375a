"""Cost per unit of work: owned vs cloud on-demand vs spot, spot interruptions as lost work."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.design.cost import HOURS_PER_YEAR
from gpucluster.design.prices import load_price_catalog
from gpucluster.design.work_cost import (
    GpuHourPrice,
    SpotRisk,
    cloud_prices,
    mix_speed,
    owned_price,
    usd_per_million_tokens,
)
from gpucluster.perf import SpeedModel

PRICES = load_price_catalog()


def _simulate_spot(risk: SpotRisk, run_h: float, trials: int, seed: int) -> float:
    """Monte Carlo: wall hours to finish ``run_h`` hours of work under Poisson interruptions, checkpointing every
    interval; an interruption loses the work since the last checkpoint and costs a restart."""
    rng = np.random.default_rng(seed)
    total = 0.0
    for _ in range(trials):
        done, wall = 0.0, 0.0
        while done < run_h - 1e-12:
            segment = min(risk.checkpoint_interval_h, run_h - done)
            need = segment + (risk.checkpoint_cost_h if done + segment < run_h else 0.0)
            while True:
                gap = rng.exponential(1.0 / risk.interruptions_per_hour)
                if gap >= need:
                    wall += need
                    break
                wall += gap + risk.restart_h
            done += segment
        total += wall
    return total / trials / run_h


def test_spot_overhead_matches_a_simulation_of_interruptions() -> None:
    risk = SpotRisk(interruptions_per_hour=0.5, checkpoint_interval_h=1.0, restart_h=0.2, checkpoint_cost_h=0.05)
    simulated = _simulate_spot(risk, run_h=20.0, trials=3000, seed=1)
    # (Daly's formula also lets a restart itself be interrupted; here that differs by under 1 %)
    assert risk.overhead(20.0) == pytest.approx(simulated, rel=0.03)
    short = SpotRisk(interruptions_per_hour=0.5, checkpoint_interval_h=5.0, restart_h=0.1)
    assert short.overhead(0.5) == pytest.approx(_simulate_spot(short, 0.5, 6000, 2), rel=0.03)


@settings(max_examples=100, deadline=None)
@given(rate=st.floats(0.0, 2.0), interval=st.floats(0.05, 10.0), restart=st.floats(0.0, 1.0),
       run=st.floats(0.01, 1000.0))
def test_spot_overhead_is_at_least_one_and_grows_with_the_risk(rate: float, interval: float, restart: float,
                                                               run: float) -> None:
    r = SpotRisk(rate, interval, restart)
    o = r.overhead(run)
    assert o >= 1.0 - 1e-12
    assert SpotRisk(rate + 0.1, interval, restart).overhead(run) >= o
    assert SpotRisk(rate, interval, restart + 0.1).overhead(run) >= o
    assert r.lost_work_h(run) == pytest.approx(run * (o - 1.0))
    if rate * (interval + restart) < 0.01:  # rare interruptions: half an interval and a restart lost each
        assert o == pytest.approx(1 + rate * (min(interval, run) / 2 + restart), rel=0.02)


def test_no_interruptions_cost_only_the_checkpoints() -> None:
    assert SpotRisk(0.0, 2.0, 1.0).overhead() == 1.0
    assert SpotRisk(0.0, 2.0, 1.0, checkpoint_cost_h=0.2).overhead() == pytest.approx(1.1)
    with pytest.raises(ValueError, match="checkpoint_interval_h: must be > 0"):
        SpotRisk(checkpoint_interval_h=0)
    with pytest.raises(ValueError, match="interruptions_per_hour: must be >= 0"):
        SpotRisk(interruptions_per_hour=-1)


def test_owned_gpu_hours_cost_more_when_idle() -> None:
    p = owned_price("H100-SXM5-80GB", owned_usd_per_year=1_000_000, gpus=128, utilization=0.5)
    assert p.usd_per_gpu_hour == pytest.approx(1_000_000 / (128 * HOURS_PER_YEAR * 0.5))
    assert owned_price("H100-SXM5-80GB", 1_000_000, 128, 0.25).usd_per_gpu_hour == pytest.approx(
        2 * p.usd_per_gpu_hour)
    with pytest.raises(ValueError, match=r"utilization: must be within \(0, 1\]"):
        owned_price("H100-SXM5-80GB", 1.0, 8, 0.0)


def test_cloud_prices_come_per_region_on_demand_and_spot() -> None:
    rows = cloud_prices(PRICES, "H100-SXM5-80GB")
    offers = PRICES.cloud["H100-SXM5-80GB"]
    assert len(rows) == 2 * len(offers)
    us = {r.option: r for r in rows if r.provider == "aws" and r.region == "us-east-1"}
    assert us["on-demand"].usd_per_gpu_hour == pytest.approx(55.04 / 8)
    assert us["spot"].usd_per_gpu_hour == pytest.approx(55.04 / 8 * 0.45)
    assert us["spot"].overhead() > 1.0 == us["on-demand"].overhead()
    effective = [r.usd_per_gpu_hour * r.overhead() for r in rows]
    assert effective == sorted(effective)
    assert cloud_prices(PRICES, "K80") == []


@settings(max_examples=50, deadline=None)
@given(price=st.floats(0.1, 100.0), speed=st.floats(0.05, 5.0), work_h=st.floats(0.01, 500.0),
       gpus=st.integers(1, 64))
def test_a_job_costs_its_reference_hours_at_the_price_per_reference_hour(price: float, speed: float, work_h: float,
                                                                        gpus: int) -> None:
    p = GpuHourPrice("X", "on-demand", "p", "r", "i", price)
    assert p.job_usd(work_h * 3600, gpus, speed) == pytest.approx(p.usd_per_ref_gpu_hour(speed) * work_h * gpus)
    assert p.usd_per_ref_gpu_hour(2 * speed) == pytest.approx(p.usd_per_ref_gpu_hour(speed) / 2)
    spot = GpuHourPrice("X", "spot", "p", "r", "i", price, SpotRisk())
    assert spot.job_usd(work_h * 3600, gpus, speed) >= p.job_usd(work_h * 3600, gpus, speed)


def test_per_million_tokens_and_workload_speed() -> None:
    assert usd_per_million_tokens(12.0, 4_000_000) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="tokens: must be > 0"):
        usd_per_million_tokens(1.0, 0)
    # one hour of work at speed 2 and one at speed 0.5: 2 reference hours in 0.5 + 2 GPU-hours
    assert mix_speed([3600.0, 3600.0], [2.0, 0.5]) == pytest.approx(2 / 2.5)
    assert mix_speed([], []) == 1.0
    with pytest.raises(ValueError, match="speed: must be > 0"):
        mix_speed([1.0], [0.0])


def test_on_the_price_sheet_an_h100_hour_of_training_is_cheaper_on_an_h100_than_on_an_l40s() -> None:
    """Cheaper per GPU-hour is not cheaper per unit of work: the L40S costs 55 % of an H100 hour on demand in
    us-east-1 but trains a third as fast."""
    model = SpeedModel()
    job = model.job(kind="training", model="llama", ref_gpu="H100-SXM5-80GB")

    def cheapest(gpu: str) -> float:
        on_demand = [p for p in cloud_prices(PRICES, gpu) if p.option == "on-demand" and p.region == "us-east-1"]
        return on_demand[0].usd_per_ref_gpu_hour(model.factor(job, gpu))

    h100, l40s = cheapest("H100-SXM5-80GB"), cheapest("L40S-48GB")
    assert cloud_prices(PRICES, "L40S-48GB")[0].usd_per_gpu_hour < cloud_prices(PRICES, "H100-SXM5-80GB")[0].usd_per_gpu_hour
    assert h100 < l40s
    assert math.isclose(h100, 55.04 / 8)


def test_spot_so_risky_that_work_never_gets_done_costs_infinity_not_an_overflow() -> None:
    """``whatif --spot-restart-h 1e20`` (or interruptions so frequent that exp() overflows) raised OverflowError
    (exit 1 with no message naming a flag); the work never gets done: its overhead is infinite."""
    assert SpotRisk(interruptions_per_hour=1.0, restart_h=1e20).overhead() == math.inf
    assert SpotRisk(interruptions_per_hour=1e20 / 24).overhead(2.0) == math.inf
