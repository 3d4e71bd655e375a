"""The default placement ``speed-fgd``: stranding-fgd inside the GPU models nearly as fast as the job's best.

It must be exactly ``stranding-fgd`` where speed cannot matter (one GPU model; jobs without a speed), and on a
mixed cluster put the work that gains from the fast model there."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.model import JobKind, JobSpec
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate
from tests.simulator.conftest import mixed_cluster


def _placements(sim: Simulation) -> list[tuple[str, tuple[str, ...], float]]:
    return sorted((j.job_id, j.nodes, round(j.finish_s, 6)) for j in sim.jobs.values())


def _run(cluster_h100: int, cluster_l40s: int, jobs: list[JobSpec], placement: str, queue: str = "fifo") -> Simulation:
    sim = Simulation(mixed_cluster(cluster_h100, cluster_l40s), queue, placement_policy=placement)
    sim.submit_many(jobs)
    sim.run()
    return sim


def test_a_training_gang_goes_to_h100_where_stranding_fgd_puts_it_on_l40s() -> None:
    gang = JobSpec("gang", 0.0, 16, 3600, kind=JobKind.TRAIN, ref_gpu="H100")
    blind = _run(2, 2, [gang], "stranding-fgd")
    aware = _run(2, 2, [gang], "default")
    assert {n.split("-")[0] for n in blind.job("gang").nodes} == {"l40s"}  # the speed-blind choice
    assert {n.split("-")[0] for n in aware.job("gang").nodes} == {"h100"}
    assert aware.job("gang").finish_s < blind.job("gang").finish_s / 2
    assert aware.placement_in_use == "speed-fgd"
    assert aware.placement_report()["training_share_by_model"] == {"H100": 1.0, "L40S": 0.0}


def test_a_job_nearly_as_fast_on_the_cheaper_model_may_go_there() -> None:
    """An RL job runs at ~95 % of its H100 speed on L40S: both models are within the 10 % tolerance, so
    stranding-fgd's own choice stands (the same node as stranding-fgd)."""
    rl = JobSpec("rl", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/rl")
    assert _run(1, 1, [rl], "default").job("rl").nodes == _run(1, 1, [rl], "stranding-fgd").job("rl").nodes


def test_when_the_fast_model_is_full_the_job_runs_on_the_other_rather_than_wait() -> None:
    jobs = [JobSpec(f"t{i}", float(i), 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100") for i in range(2)]
    sim = _run(1, 1, jobs, "default")
    assert {sim.job("t0").nodes[0].split("-")[0], sim.job("t1").nodes[0].split("-")[0]} == {"h100", "l40s"}
    assert sim.job("t1").first_start_s == 1.0


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 60), speeds=st.booleans())
def test_exactly_stranding_fgd_where_speed_cannot_matter(seed: int, n: int, speeds: bool) -> None:
    """A cluster of one GPU model (jobs with or without a speed), or a mixed cluster whose jobs carry no work to
    speed up: every decision and every finish time is stranding-fgd's."""
    base = generate(n, 16, seed=seed, load=1.0, max_gpus=8)
    jobs = [replace(j, ref_gpu="V100" if speeds else "") for j in base]
    for h100, l40s in ((2, 0), (0, 2)) if speeds else ((2, 0), (1, 1), (0, 2)):
        assert _placements(_run(h100, l40s, jobs, "speed-fgd", "default")) == \
            _placements(_run(h100, l40s, jobs, "stranding-fgd", "default"))


def test_an_open_ended_job_counts_the_gpu_seconds_it_has_run() -> None:
    """A job with no duration (the API's default) must not turn the share into inf / nan: the overview that
    carries it is JSON, which has neither."""
    sim = Simulation(mixed_cluster(1, 1), "fifo", placement_policy="default")
    sim.submit_many([JobSpec("open", 0.0, 8, float("inf"), kind=JobKind.TRAIN, ref_gpu="H100"),
                     JobSpec("short", 0.0, 8, 100.0, kind=JobKind.TRAIN, ref_gpu="H100")])
    sim.run_until(400.0)
    share = sim.placement_report()["training_share_by_model"]
    assert all(0.0 <= v <= 1.0 for v in share.values()) and sum(share.values()) == 1.0
