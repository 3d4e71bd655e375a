"""Idle GPUs while work waits: the usable GPUs no job holds while a queued job waits for GPUs, over the arrival
window (``idle_gpus_while_waiting``, ``idle_gpu_h_while_waiting_per_h``, ``waiting_share_window``)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.jobs.model import JobKind, JobSpec
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator.load import idle_while_waiting
from gpucluster.simulator.runner import Simulation
from gpucluster.spec import Cluster

from .conftest import REPO, make_cluster, mixed_cluster

CLUSTER = REPO / "src" / "gpucluster" / "data" / "philly-500.yaml"
KEYS = ("idle_gpus_while_waiting", "idle_gpu_h_while_waiting_per_h", "waiting_share_window")


def _run(cluster: Cluster, jobs: list[JobSpec], policy: str = "fifo", quota: QuotaTree | None = None,
         placement: str | None = None) -> tuple[Simulation, dict[str, Any]]:
    sim = Simulation(cluster, policy, placement_policy=placement,
                     services=None if quota is None else {"quota": quota})
    sim.submit_many(jobs)
    sim.run()
    return sim, sim.summary()


def _plain_idle(s: dict[str, Any], gpus: int) -> float:
    return gpus * (1.0 - s["gpu_utilization_window"])


def test_a_job_waiting_for_two_gpus_while_one_is_free_counts_that_one() -> None:
    """3 GPUs; a (2 GPUs) runs 0..100, b (2 GPUs) waits 0..100 with 1 GPU free, runs 100..200; c at 300 closes the
    arrival window [0, 300]: one idle GPU for 100 s of waiting, none counted after (nothing waits, however many
    GPUs are idle)."""
    _, s = _run(make_cluster(nodes=1, gpus=3),
                [JobSpec("a", 0, 2, 100), JobSpec("b", 0, 2, 100), JobSpec("c", 300, 1, 10)])
    assert s["idle_gpus_while_waiting"] == pytest.approx(1.0)
    assert s["idle_gpu_h_while_waiting_per_h"] == pytest.approx(100 / 300)
    assert s["waiting_share_window"] == pytest.approx(100 / 300)
    assert _plain_idle(s, 3) == pytest.approx(3 - (2 * 100 + 2 * 100) / 300)  # 1.67: every idle GPU


def test_a_gang_stranded_across_nodes_counts_the_free_gpus_of_both() -> None:
    """Two 4-GPU nodes, each with 3 GPUs held: a 2-GPU whole task cannot use the 1 + 1 free (stranded), so both
    count while it waits."""
    jobs = [JobSpec("x", 0, 3, 100, gpus_per_task=3), JobSpec("y", 0, 3, 100, gpus_per_task=3),
            JobSpec("g", 1, 2, 50), JobSpec("end", 201, 1, 1)]
    sim, s = _run(make_cluster(nodes=2, gpus=4, nodes_per_leaf=2), jobs)
    assert sim.job("g").first_start_s == 100
    assert s["idle_gpus_while_waiting"] == pytest.approx(2.0)
    assert s["idle_gpu_h_while_waiting_per_h"] == pytest.approx(2.0 * 99 / 201)


def test_a_job_held_back_only_by_its_tenants_quota_does_not_count() -> None:
    """Tenant q may hold 2 GPUs: its second 2-GPU job waits with 2 GPUs free, but it could not have them."""
    tree = QuotaTree([QueueSpec("q", limit={"gpu": 2})])
    jobs = [JobSpec("q1", 0, 2, 100, tenant="q"), JobSpec("q2", 0, 2, 100, tenant="q"),
            JobSpec("end", 300, 1, 1)]
    sim, s = _run(make_cluster(nodes=1, gpus=4), jobs, quota=tree)
    assert sim.job("q2").first_start_s == 100 and s["avg_queue_len_window"] > 0
    assert s["idle_gpus_while_waiting"] == 0.0 and s["waiting_share_window"] == 0.0
    # the same jobs without the quota run at once: nothing waits either
    free = _run(make_cluster(nodes=1, gpus=4), jobs)[1]
    assert free["waiting_share_window"] == 0.0
    # a job of another tenant that needs 4 GPUs does count, beside the quota-held one: it waits for GPUs 0..200
    # (q1 holds 2 until 100, then q2 until 200), with 2 of the 4 idle throughout
    tree = QuotaTree([QueueSpec("q", limit={"gpu": 2})])
    more = [*jobs[:2], JobSpec("big", 0, 4, 10, tenant="r"), jobs[2]]
    sim, s = _run(make_cluster(nodes=1, gpus=4), more, quota=tree)
    assert sim.job("big").first_start_s == 200
    assert s["waiting_share_window"] == pytest.approx(200 / 300)
    assert s["idle_gpus_while_waiting"] == pytest.approx(2.0)
    assert s["idle_gpu_h_while_waiting_per_h"] == pytest.approx(2.0 * 200 / 300)


def test_a_quota_held_job_stays_uncounted_when_a_node_is_added_while_it_waits() -> None:
    """The per-group charge the count reads is kept for one cluster layout: a node added at 50 s (elastic scale-up)
    gives 4 more free GPUs, and q's second job still waits for its quota, not for GPUs; a job of another tenant
    that arrives at 60 s asking for more than is free (8 of 6) counts from then until q1 ends at 100 s, with the
    6 GPUs idle."""
    tree = QuotaTree([QueueSpec("q", limit={"gpu": 2})])
    jobs = [JobSpec("q1", 0, 2, 100, tenant="q"), JobSpec("q2", 0, 2, 100, tenant="q"),
            JobSpec("big", 60, 8, 10, tenant="r", gpus_per_task=4), JobSpec("end", 300, 1, 1)]
    sim = Simulation(make_cluster(nodes=1, gpus=4), "fifo", services={"quota": tree})
    extra = make_cluster(nodes=1, gpus=4, name="extra").nodes[0]
    sim.at(50, lambda: sim.add_node(extra))
    sim.submit_many(jobs)
    sim.run()
    s = sim.summary()
    assert sim.job("q2").first_start_s == 100 and sim.job("big").first_start_s >= 100
    assert s["waiting_share_window"] == pytest.approx((sim.job("big").first_start_s - 60) / 300)
    assert s["idle_gpus_while_waiting"] > 0


def test_a_faster_placement_raises_plain_idle_gpus_but_not_idle_while_waiting() -> None:
    """The same training job pinned to H100 or to L40S (what a speed-aware and a speed-blind placement would
    choose): on H100 it finishes sooner, so over the same window more GPUs are idle, but nothing ever waits."""
    job = JobSpec("t", 0, 4, 20_000, model="Transformer", kind=JobKind.TRAIN, ref_gpu="V100")
    end = JobSpec("end", 30_000, 1, 1)
    runs = {m: _run(mixed_cluster(), [replace(job, gpu_type=m), end])[1] for m in ("H100", "L40S")}
    gpus = 16
    assert _plain_idle(runs["H100"], gpus) > _plain_idle(runs["L40S"], gpus) + 0.5
    for s in runs.values():
        assert s["idle_gpus_while_waiting"] == 0.0 and s["idle_gpu_h_while_waiting_per_h"] == 0.0


def test_idle_while_waiting_from_step_series() -> None:
    # idle 3 while waiting on [0, 10), idle 1 not waiting on [10, 20), idle 0 waiting on [20, 40)
    out = idle_while_waiting([0.0, 10.0, 20.0], [1.0, 3.0, 4.0], [4.0, 4.0, 4.0], [2, 0, 1], 0.0, 40.0)
    assert out["idle_gpus_while_waiting"] == pytest.approx(30 / 30)
    assert out["idle_gpu_h_while_waiting_per_h"] == pytest.approx(30 / 40)
    assert out["waiting_share_window"] == pytest.approx(30 / 40)
    # a capacity below what is held (a node lost) counts no idle GPU, never a negative one
    out = idle_while_waiting([0.0], [5.0], [4.0], [1], 0.0, 10.0)
    assert out["idle_gpus_while_waiting"] == 0.0 and out["waiting_share_window"] == 1.0
    assert idle_while_waiting([], [], [], [], 0.0, 1.0)["idle_gpus_while_waiting"] == 0.0
    assert idle_while_waiting([0.0], [0.0], [4.0], [1], 5.0, 5.0)["waiting_share_window"] == 0.0


@st.composite
def _jobs(draw: st.DrawFn) -> list[JobSpec]:
    n = draw(st.integers(2, 14))
    out = []
    for i in range(n):
        out.append(JobSpec(f"j{i}", draw(st.floats(0, 500)), draw(st.sampled_from([1, 1, 2, 3, 4, 6, 8])),
                           draw(st.floats(1, 400)), tenant=draw(st.sampled_from(["a", "b"]))))
    return out


@settings(max_examples=20, deadline=None)
@given(jobs=_jobs(), policy=st.sampled_from(["fifo", "sjf", "default"]), limit=st.sampled_from([None, 3.0, 6.0]))
def test_idle_while_waiting_is_never_negative_nor_above_the_plain_idle_gpus(jobs: list[JobSpec], policy: str,
                                                                           limit: float | None) -> None:
    gpus = 8
    tree = None if limit is None else QuotaTree([QueueSpec("a", limit={"gpu": limit})])
    sim, s = _run(make_cluster(nodes=2, gpus=4), jobs, policy, quota=tree)
    assert s["jobs_lost"] == 0
    if not sim.series:  # every job refused on arrival (beyond the quota): no window figures at all
        assert "idle_gpus_while_waiting" not in s and s["jobs_rejected"] == len(jobs)
        return
    note(f"{[(p.time, p.busy_gpus, p.waiting_jobs, p.gpus) for p in sim.series]} {s}")
    avg, per_h, share = (s[k] for k in KEYS)
    assert 0.0 <= per_h <= _plain_idle(s, gpus) + 1e-9
    assert 0.0 <= avg <= gpus and 0.0 <= share <= 1.0 + 1e-12
    assert per_h <= avg + 1e-9 and per_h == pytest.approx(avg * share, abs=1e-9)
    # the engine's count: never more than the queued jobs, and none while nothing is queued
    for p in sim.series:
        assert 0 <= p.waiting_jobs <= p.queued_jobs
    if s["avg_queue_len_window"] == 0:
        assert share == 0.0


def test_simulate_json_and_table_show_idle_while_waiting() -> None:
    args = ["simulate", "--cluster", str(CLUSTER), "--trace", "synthetic:300"]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert "gpu_utilization_window" in data and all(k in data for k in KEYS)
    gpus = data["idle_gpu_h_while_waiting_per_h"]
    assert 0.0 <= gpus <= data["idle_gpus_while_waiting"] + 1e-9
    table = CliRunner().invoke(app, args)
    assert table.exit_code == 0 and "idle_gpus_while_waiting" in table.output
