"""The default placement ``speed-fgd``: stranding-fgd inside the GPU models nearly as fast as the job's best.

It must be exactly ``stranding-fgd`` where speed cannot matter (one GPU model; jobs without a speed), and on a
mixed cluster put the work that gains from the fast model there."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.model import JobKind, JobSpec
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate
from tests.simulator.conftest import mixed_cluster


def _placements(sim: Simulation) -> list[tuple[str, tuple[str, ...], float]]:
    return sorted((j.job_id, j.nodes, round(j.finish_s, 6)) for j in sim.jobs.values())


def _run(cluster_h100: int, cluster_l40s: int, jobs: list[JobSpec], placement: str, queue: str = "fifo",
         tier_args: dict[str, Any] | None = None) -> Simulation:
    """Run ``jobs`` to the end; ``tier_args`` replace the ``GpuSpeedTier`` plugin's arguments in the profile."""
    cluster = mixed_cluster(cluster_h100, cluster_l40s)
    profile = None
    if tier_args is not None:
        base = Simulation(cluster, queue, placement_policy=placement).recipe.profile
        plugins = [p.model_copy(update={"args": tier_args}) if p.name == "GpuSpeedTier" else p for p in base.plugins]
        assert any(p.name == "GpuSpeedTier" for p in plugins)
        profile = base.model_copy(update={"plugins": plugins})
    sim = Simulation(cluster, queue, placement_policy=placement, profile=profile)
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


def _model(sim: Simulation, job_id: str) -> str:
    return sim.job(job_id).nodes[0].split("-")[0]


def test_the_fast_model_goes_to_the_job_that_gains_most_from_it() -> None:
    """Comparative advantage: a recommendation job (about 1.2x faster on H100 than on L40S) is queued first, a
    transformer job (about 3x) right behind it; one H100 node and one L40S node are free, so the fast model cannot
    hold both. Speed alone (the rule before, ``comparative: false``) gave the H100 to whichever came first; the
    default now leaves it to the 3x job, and both start at once. On main the recommendation job took the H100
    and the transformer ran 3x slower on L40S."""
    jobs = [JobSpec("rec", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/recommendation"),
            JobSpec("tfm", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")]
    sim = _run(1, 1, jobs, "default")
    assert (_model(sim, "rec"), _model(sim, "tfm")) == ("l40s", "h100")
    assert sim.job("rec").first_start_s == sim.job("tfm").first_start_s == 0.0
    blind = _run(1, 1, jobs, "default", tier_args={"comparative": False})
    assert (_model(blind, "rec"), _model(blind, "tfm")) == ("h100", "l40s")  # speed alone: first come
    assert max(j.finish_s for j in sim.jobs.values()) < max(j.finish_s for j in blind.jobs.values()) / 2


def test_with_nobody_waiting_the_job_that_gains_least_still_takes_the_free_fast_model() -> None:
    """The same mix, but the 3x job arrives after the 1.2x one has finished: when the job starts, the GPUs that
    wait (its own) fit on the idle H100s, so there is nobody to leave them to and absolute speed decides."""
    rec = JobSpec("rec", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/recommendation")
    tfm = JobSpec("tfm", 7200.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
    sim = _run(1, 1, [rec, tfm], "default")
    assert (_model(sim, "rec"), _model(sim, "tfm")) == ("h100", "h100")


def test_under_contention_the_1_2x_job_leaves_the_fast_model_even_with_h100_idle() -> None:
    """Two H100 nodes, two L40S nodes, and three 3x jobs queued behind a 1.2x job: 32 GPUs wait for 16 idle
    H100s, so the 1.2x job goes to L40S and the three 3x jobs get both H100 nodes and the other L40S node."""
    rec = JobSpec("rec", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/recommendation")
    tfm = [JobSpec(f"tfm{i}", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
           for i in range(3)]
    sim = _run(2, 2, [rec, *tfm], "default")
    assert _model(sim, "rec") == "l40s"
    assert sorted(_model(sim, f"tfm{i}") for i in range(3)) == ["h100", "h100", "l40s"]


def test_a_homogeneous_mix_still_takes_the_fastest_model() -> None:
    """Every job gains the same: comparative advantage ties, and absolute speed decides (H100 first, L40S
    when the H100s are taken)."""
    jobs = [JobSpec(f"t{i}", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100") for i in range(3)]
    sim = _run(2, 2, jobs, "default")
    assert sorted(_model(sim, f"t{i}") for i in range(3)) == ["h100", "h100", "l40s"]


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


def _rec_then_transformers(h100: int, l40s: int, scarcity: bool = True) -> Simulation:
    """A 1.2x job submitted first and alone, and three 3x jobs that arrive once it has started: 75 % of the
    submitted work prefers H100."""
    rec = JobSpec("rec", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/recommendation")
    tfm = [JobSpec(f"tfm{i}", 600.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
           for i in range(3)]
    return _run(h100, l40s, [rec, *tfm], "default", tier_args=None if scarcity else {"scarcity": False})


def test_when_the_work_that_prefers_h100_outgrows_its_share_the_1_2x_job_leaves_it_with_nothing_waiting() -> None:
    """Half the GPUs are H100 and 75 % of the submitted work gains most there: the 1.2x job, alone in the queue
    with every H100 idle, goes to L40S (the scarcity test), so the 3x jobs that come later all find an H100
    (two nodes) or the L40S node left. Without the test (the rule before) it took an idle H100."""
    sim = _rec_then_transformers(2, 2)
    assert _model(sim, "rec") == "l40s" and sim.job("rec").first_start_s == 0.0
    assert sorted(_model(sim, f"tfm{i}") for i in range(3)) == ["h100", "h100", "l40s"]
    before = _rec_then_transformers(2, 2, scarcity=False)
    assert _model(before, "rec") == "h100"


def test_when_h100_is_the_large_majority_the_same_job_and_mix_still_take_an_idle_h100() -> None:
    """Seven H100 nodes of eight (87.5 %, like the reference cluster's 87 %): 75 % of the work preferring H100
    is below H100's share of the GPUs, so the fast model is not scarce and speed decides, as before."""
    sim = _rec_then_transformers(7, 1)
    assert _model(sim, "rec") == "h100"
    assert _placements(sim) == _placements(_rec_then_transformers(7, 1, scarcity=False))


_CLASSES = ("training/recommendation", "training/transformer", "training/cnn", "training/rl", "")


@settings(max_examples=25, deadline=None)
@given(jobs=st.lists(st.tuples(st.sampled_from(_CLASSES), st.integers(1, 16),
                               st.one_of(st.floats(1.0, 20_000.0), st.just(float("inf"))), st.booleans(),
                               st.floats(0.0, 5_000.0)), min_size=1, max_size=25),
       steps=st.lists(st.floats(0.0, 30_000.0), max_size=4))
def test_the_kept_work_per_preferred_model_equals_a_recomputation(
        jobs: list[tuple[str, int, float, bool, float]], steps: list[float]) -> None:
    """``preferred_work`` (work kept per job description on submit, split by preferred model on demand) equals the
    same figure computed from scratch over every submitted job, whatever ran or finished in between."""
    sim = Simulation(mixed_cluster(1, 1), "fifo", placement_policy="default")
    names = ("H100", "L40S")
    submitted: list[JobSpec] = []
    for i, (work_class, gpus, duration, speed, at) in enumerate(jobs):
        spec = JobSpec(f"j{i}", sim.now + at, gpus, duration, kind=JobKind.TRAIN,
                       ref_gpu="H100" if speed or work_class else "", work_class=work_class)
        sim.submit(spec)
        submitted.append(spec)
        if steps:
            sim.run_until(sim.now + steps[i % len(steps)])
    with_speed = [s for s in submitted if s.ref_gpu]
    found = sim.speeds.preferred_work(names)
    if not with_speed:
        assert found is None
        return
    normalized = [sim.speeds.normalized(s, names) for s in with_speed]
    mix = [sum(n[m] for n in normalized) / len(normalized) for m in range(len(names))]
    expected = [0.0] * len(names)
    for spec, norm in zip(with_speed, normalized, strict=True):
        adv = [n / m for n, m in zip(norm, mix, strict=True)]
        if spec.gpu_share * spec.duration_s < float("inf"):
            expected[adv.index(max(adv))] += spec.gpu_share * spec.duration_s
    assert found == pytest.approx(expected, rel=1e-9, abs=1e-6)


def _gang_behind_fillers(keep_whole: bool) -> Simulation:
    """3 x 8 H100 + 1 x 8 L40S, the L40S node busy; on H100 a long 6-GPU job (its node keeps 2 GPUs free) and a
    short 8-GPU job (1,000 s), so one H100 node is whole. A 2 x 8 training gang arrives at 1 s and waits (one whole
    node of its model); two 1-GPU training jobs of 3,000 s arrive at 2 and 3 s (the default queue backfills)."""
    jobs = [JobSpec("l40s-filler", 0.0, 8, 10_000, kind=JobKind.TRAIN, gpu_type="L40S"),
            JobSpec("long", 0.0, 6, 10_000, kind=JobKind.TRAIN, gpu_type="H100"),
            JobSpec("short", 0.0, 8, 1_000, kind=JobKind.TRAIN, gpu_type="H100"),
            JobSpec("gang", 1.0, 16, 3_600, kind=JobKind.TRAIN, ref_gpu="H100"),
            *(JobSpec(f"small{i}", 2.0 + i, 1, 3_000, kind=JobKind.TRAIN, ref_gpu="H100") for i in range(2))]
    return _run(3, 1, jobs, "default", "default", tier_args={"keep_whole": keep_whole})


def test_small_jobs_leave_the_last_whole_node_to_a_waiting_gang() -> None:
    """While a gang of 8-GPU tasks waits, small jobs fill the partly used node and the last whole H100 node stays
    whole, so the gang starts when the short job frees a second one (1,000 s). Before (``keep_whole: false``, the
    rule on main) stranding-fgd put them on the whole node and the gang waited for them to finish."""
    sim = _gang_behind_fillers(keep_whole=True)
    long_node = sim.job("long").nodes[0]
    assert [sim.job(f"small{i}").nodes for i in range(2)] == [(long_node,), (long_node,)]
    assert sim.job("gang").first_start_s == 1_000.0
    assert set(sim.job("gang").nodes) == {"h100-0", "h100-1", "h100-2"} - {long_node}
    before = _gang_behind_fillers(keep_whole=False)
    assert before.job("small0").nodes[0] not in (before.job("long").nodes[0], before.job("short").nodes[0])
    assert before.job("gang").first_start_s > 3_000.0


@pytest.mark.parametrize("rule", ["keep_whole", "group_short"])
@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 50), gpus=st.sampled_from([1, 2, 4, 8]))
def test_with_no_larger_whole_task_waiting_the_rule_changes_nothing(rule: str, seed: int, n: int, gpus: int) -> None:
    """Jobs of one size on a mixed cluster: no queued job ever asks for tasks larger than the pod's, so every
    decision and finish time is the rule's before (``keep_whole: false``, or ``group_short: false``)."""
    jobs = [replace(j, num_gpus=gpus, ref_gpu="H100") for j in generate(n, 16, seed=seed, load=1.0, max_gpus=8)]
    assert _placements(_run(2, 2, jobs, "default", "default")) == \
        _placements(_run(2, 2, jobs, "default", "default", tier_args={rule: False}))


def _long_rec_among_short(long_quantile: float | None) -> Simulation:
    """Two H100 nodes, three L40S nodes; queued at once: a 1.2x job ten times longer than the others, a short 1.2x
    job and three short 3x jobs (40 GPUs wait for 16 idle H100s: contention)."""
    rec = [JobSpec(f"rec-{name}", 0.0, 8, secs, kind=JobKind.TRAIN, ref_gpu="H100",
                   work_class="training/recommendation") for name, secs in (("long", 36_000), ("short", 3600))]
    tfm = [JobSpec(f"tfm{i}", 0.0, 8, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
           for i in range(3)]
    args = {} if long_quantile is not None else {"long_quantile": None}
    return _run(2, 3, [*rec, *tfm], "default", tier_args=args)


def test_the_job_that_sets_the_makespan_keeps_h100_while_short_jobs_follow_comparative_advantage() -> None:
    """The long 1.2x job is the longest submitted (the ``long_quantile`` test): it keeps an H100 node, so it no
    longer runs 1.2x longer on L40S and sets a later makespan; the short 1.2x job still leaves H100 to the 3x
    jobs. Without the test (the rule before) both 1.2x jobs went to L40S."""
    sim = _long_rec_among_short(0.99)
    assert (_model(sim, "rec-long"), _model(sim, "rec-short")) == ("h100", "l40s")
    assert sorted(_model(sim, f"tfm{i}") for i in range(3)) == ["h100", "l40s", "l40s"]
    before = _long_rec_among_short(None)
    assert (_model(before, "rec-long"), _model(before, "rec-short")) == ("l40s", "l40s")
    assert sorted(_model(before, f"tfm{i}") for i in range(3)) == ["h100", "h100", "l40s"]
    makespan = max(j.finish_s for j in sim.jobs.values())
    assert makespan < max(j.finish_s for j in before.jobs.values()) / 1.1


def _long_behind_short(reserve_long: bool) -> Simulation:
    """One H100 node and one L40S node (8 GPUs each); queued at once, in this order: eight short 1-GPU transformer
    jobs (1 h) and a 1-GPU transformer job 20 times longer (the longest submitted: ``long_quantile``'s long job).
    Every job runs about 3x faster on H100, so each one's fastest model is H100."""
    short = [JobSpec(f"a{i}", 0.0, 1, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
             for i in range(8)]
    long = JobSpec("z-long", 0.0, 1, 72_000, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
    return _run(1, 1, [*short, long], "default", tier_args={"reserve_long": reserve_long})


def test_the_last_fast_gpu_is_kept_for_the_queued_longest_job() -> None:
    """``reserve_long``: the short jobs ahead of the long one in the queue leave the H100 node's last idle GPU to
    it (one short job goes to L40S), so the long job runs on H100 and the makespan is its own run, not 3x that.
    Without the rule (the rule before) the eight short jobs fill the H100 node and the long job runs on L40S."""
    sim = _long_behind_short(True)
    assert _model(sim, "z-long") == "h100"
    assert sorted(_model(sim, f"a{i}") for i in range(8)) == ["h100"] * 7 + ["l40s"]
    before = _long_behind_short(False)
    assert _model(before, "z-long") == "l40s"
    assert {_model(before, f"a{i}") for i in range(8)} == {"h100"}
    makespan = max(j.finish_s for j in sim.jobs.values())
    assert makespan < max(j.finish_s for j in before.jobs.values()) / 2
    assert makespan == pytest.approx(sim.job("z-long").finish_s)


def test_without_a_queued_long_job_the_reserve_changes_nothing() -> None:
    """The long job arrives after the short ones have been placed (nothing long is queued when they are): every
    decision and finish time is the rule's before."""
    short = [JobSpec(f"a{i}", 0.0, 1, 3600, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
             for i in range(8)]
    long = JobSpec("z-long", 10.0, 1, 72_000, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
    assert _placements(_run(1, 1, [*short, long], "default", tier_args={"reserve_long": True})) == \
        _placements(_run(1, 1, [*short, long], "default", tier_args={"reserve_long": False}))


def _short_before_long_gang(reserve_whole: bool, l40s_busy: bool = False, wait_fast: bool = True) -> Simulation:
    """3 x 8 H100 + 1 x 8 L40S. Queued at once, in this order (``fifo``): two 7-GPU jobs (one task each, 10,000 s)
    that leave one idle GPU on two H100 nodes, a short 2-GPU job (1,000 s), and the longest job, one task of 8 GPUs
    (50,000 s). Idle H100 GPUs (1 + 1 + 8) minus the short job's 2 still cover the long job's 8, so the reserve
    counted in idle GPUs does not hold, while the only H100 node the short job fits on is the last whole one.
    Every job is a transformer, about 3x faster on H100. ``l40s_busy``: a job holds the L40S node first."""
    jobs = [JobSpec("l40s-filler", 0.0, 8, 20_000, kind=JobKind.TRAIN, gpu_type="L40S")] if l40s_busy else []
    jobs += [JobSpec("busy1", 0.0, 7, 10_000, gpus_per_task=7, kind=JobKind.TRAIN, ref_gpu="H100",
                     work_class="training/transformer"),
             JobSpec("busy2", 0.0, 7, 10_000, gpus_per_task=7, kind=JobKind.TRAIN, ref_gpu="H100",
                     work_class="training/transformer"),
             JobSpec("short", 0.0, 2, 1_000, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer"),
             JobSpec("z-long", 0.0, 8, 50_000, kind=JobKind.TRAIN, ref_gpu="H100",
                     work_class="training/transformer")]
    return _run(3, 1, jobs, "default", tier_args={"reserve_whole": reserve_whole, "wait_fast": wait_fast})


def test_a_short_job_leaves_the_last_whole_fast_node_to_the_queued_long_gang() -> None:
    """``reserve_whole``: the short job would break the last whole H100 node that the queued long 8-GPU job
    needs, so it goes to the L40S node and the long job runs on H100 (the makespan is its own run). Counting idle
    GPUs (the rule before, ``wait_fast`` off), the short job takes two GPUs of that node and the long job finds only
    the L40S node; with ``wait_fast`` (8 idle GPUs beside its own 8) it waits 1,000 s for the short job's H100 GPUs."""
    sim = _short_before_long_gang(True)
    assert (_model(sim, "short"), _model(sim, "z-long")) == ("l40s", "h100")
    assert sim.job("z-long").first_start_s == 0.0
    waits = _short_before_long_gang(False)
    assert (_model(waits, "short"), _model(waits, "z-long")) == ("h100", "h100")
    assert waits.job("z-long").first_start_s == pytest.approx(1000.0)
    before = _short_before_long_gang(False, wait_fast=False)
    assert (_model(before, "short"), _model(before, "z-long")) == ("h100", "l40s")
    makespan = max(j.finish_s for j in sim.jobs.values())
    assert makespan == pytest.approx(sim.job("z-long").finish_s)
    assert makespan < max(j.finish_s for j in before.jobs.values()) / 2


def test_with_nothing_else_free_the_short_job_still_takes_the_fast_node() -> None:
    """The same with the L40S node busy: nothing but the whole H100 node can take the short job now, so it does
    (no GPU is left idle for the reserve); every decision is the rule's before."""
    sim = _short_before_long_gang(True, l40s_busy=True)
    assert _model(sim, "short") == "h100"
    assert _placements(sim) == _placements(_short_before_long_gang(False, l40s_busy=True))


def _short_and_long_behind_gang(group_short: bool) -> Simulation:
    """3 x 8 H100 + 1 x 8 L40S, the L40S node busy. Queued at once, in this order: a 4-GPU job of 10,000 s, a 4-GPU
    job of 1,000 s, the same two again, and a gang of two 8-GPU tasks (3,600 s), last in FIFO order, that waits for
    two whole nodes while the others are placed. The 1,000 s jobs are the short ones (the shortest 10 % of the
    submitted durations with a speed)."""
    jobs = [JobSpec("l40s-filler", 0.0, 8, 20_000, kind=JobKind.TRAIN, gpu_type="L40S"),
            JobSpec("long1", 0.0, 4, 10_000, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("short1", 0.0, 4, 1_000, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("long2", 0.0, 4, 10_000, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("short2", 0.0, 4, 1_000, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("gang", 0.0, 16, 3_600, kind=JobKind.TRAIN, ref_gpu="H100")]
    return _run(3, 1, jobs, "default", "fifo", tier_args={"group_short": group_short})


def test_short_jobs_share_a_node_so_it_comes_free_whole_for_the_waiting_gang() -> None:
    """``group_short``: while the gang waits, the two short jobs share one H100 node and the two long ones another,
    so when the short jobs end (1,000 s) their node is whole again and the gang starts on it and the third node.
    Without the rule (stranding-fgd packs each short job next to a long one) both partly used nodes keep a long
    job and the gang waits for one of them to end (10,000 s)."""
    sim = _short_and_long_behind_gang(True)
    assert sim.job("short1").nodes == sim.job("short2").nodes
    assert sim.job("long1").nodes == sim.job("long2").nodes
    assert sim.job("gang").first_start_s == pytest.approx(1_000.0)
    assert sim.job("short1").nodes[0] in sim.job("gang").nodes
    before = _short_and_long_behind_gang(False)
    assert before.job("short1").nodes != before.job("short2").nodes
    assert before.job("gang").first_start_s >= 10_000.0


def _long_after_fillers(wait_fast: bool, filler_s: float = 3600.0, work_class: str = "training/transformer",
                        queue: str = "fifo", l40s_idle: int = 1) -> Simulation:
    """One H100 node and one L40S node (8 GPUs each). At 0 s eight 1-GPU transformer jobs of ``filler_s`` fill the
    H100 node (their fastest model) and a job of ``8 - l40s_idle`` GPUs asks for L40S (20,000 s); at 10 s a 1-GPU job
    of 72,000 s of ``work_class`` arrives (the longest submitted: ``long_quantile``'s long job) and reaches the
    queue's head with only ``l40s_idle`` L40S GPUs idle."""
    fill = [JobSpec(f"a{i}", 0.0, 1, filler_s, kind=JobKind.TRAIN, ref_gpu="H100", work_class="training/transformer")
            for i in range(8)]
    if l40s_idle < 8:
        fill.append(JobSpec("b-l40s", 0.0, 8 - l40s_idle, 20_000, gpus_per_task=8 - l40s_idle, kind=JobKind.TRAIN,
                            gpu_type="L40S"))
    long = JobSpec("z-long", 10.0, 1, 72_000, kind=JobKind.TRAIN, ref_gpu="H100", work_class=work_class)
    return _run(1, 1, [*fill, long], "default", queue, tier_args={"wait_fast": wait_fast})


def test_the_long_job_at_the_fifo_head_waits_for_its_fast_model() -> None:
    """``wait_fast``: the long transformer job (about 3x faster on H100) at the ``fifo`` head, with one L40S GPU
    idle beside it, waits 3,590 s for the first H100 GPU the fillers free rather than start at once on L40S, and
    ends about 2.8x sooner. Without the rule it starts on L40S at 10 s."""
    sim = _long_after_fillers(True)
    job = sim.job("z-long")
    assert _model(sim, "b-l40s") == "l40s" and sorted(_model(sim, f"a{i}") for i in range(8)) == ["h100"] * 8
    assert _model(sim, "z-long") == "h100"
    assert job.first_start_s == pytest.approx(3600.0)
    before = _long_after_fillers(False)
    assert _model(before, "z-long") == "l40s" and before.job("z-long").first_start_s == 10.0
    assert job.finish_s < before.job("z-long").finish_s / 2.5


@pytest.mark.parametrize(("filler_s", "work_class", "l40s_idle"), [
    (60_000.0, "training/recommendation", 1),  # H100 frees at 60,000 s; 1.2x faster there: waiting ends it later
    (float("inf"), "training/transformer", 1),  # the fillers have no known end: nothing says when H100 frees
    (3600.0, "training/transformer", 3),  # two GPUs beside its own one would stand idle while it waits
    (3600.0, "training/transformer", 8),
])
def test_the_long_job_does_not_wait_when_waiting_is_worse(filler_s: float, work_class: str, l40s_idle: int) -> None:
    """No wait where waiting is not expected to end the job sooner, or where it would leave more GPUs idle than its
    own: it starts on L40S at once, as without the rule (every decision and finish time the same)."""
    sim = _long_after_fillers(True, filler_s, work_class, l40s_idle=l40s_idle)
    assert _model(sim, "z-long") == "l40s" and sim.job("z-long").first_start_s == 10.0
    assert _placements(sim) == _placements(_long_after_fillers(False, filler_s, work_class, l40s_idle=l40s_idle))


def test_a_queue_that_backfills_never_holds_the_long_job() -> None:
    """The wait is for a queue that stops at its head (``fifo``): under the ``default`` queue (backfill,
    preemption) the rule changes nothing."""
    assert _placements(_long_after_fillers(True, queue="default")) == \
        _placements(_long_after_fillers(False, queue="default"))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 50), mixed=st.booleans())
def test_the_wait_changes_nothing_on_one_model_or_without_speeds(seed: int, n: int, mixed: bool) -> None:
    """``fifo``, jobs with a speed on a cluster of one model, or jobs without one on a mixed cluster: every decision
    and finish time is the rule's before (``wait_fast: false``)."""
    jobs = [replace(j, ref_gpu="" if mixed else "H100") for j in generate(n, 16, seed=seed, load=1.0, max_gpus=8)]
    for h100, l40s in ((1, 1),) if mixed else ((2, 0), (0, 2)):
        assert _placements(_run(h100, l40s, jobs, "default", "fifo")) == \
            _placements(_run(h100, l40s, jobs, "default", "fifo", tier_args={"wait_fast": False}))




def _small_before_gang(whole_ahead: bool, queue: str = "fifo") -> Simulation:
    """3 x 8 H100 + 1 x 8 L40S, the L40S node busy. At 0 s four 2-GPU jobs of 0.5 s (the submitted mix is mostly
    2-GPU jobs, so stranding-fgd keeps 2-GPU holes); at 0.1 s a 6-GPU job of 10,000 s (its H100 node keeps 2 GPUs
    idle) and an 8-GPU job of one task (500 s: a task of a whole node among the submitted jobs) take two H100 nodes;
    at 1 s a 1-GPU job of 3,000 s arrives with the third H100 node whole; at 600 s a gang of two 8-GPU tasks."""
    jobs = [JobSpec("l40s-filler", 0.0, 8, 10_000, kind=JobKind.TRAIN, gpu_type="L40S"),
            *(JobSpec(f"pair{i}", 0.0, 2, 0.5, gpus_per_task=2, kind=JobKind.TRAIN, ref_gpu="H100") for i in range(4)),
            JobSpec("long", 0.1, 6, 10_000, gpus_per_task=6, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("big", 0.1, 8, 500, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("small", 1.0, 1, 3_000, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("gang", 600.0, 16, 3_600, kind=JobKind.TRAIN, ref_gpu="H100")]
    return _run(3, 1, jobs, "default", queue, tier_args={"whole_ahead": whole_ahead})


def test_under_fifo_a_small_job_keeps_a_whole_node_for_the_gang_to_come() -> None:
    """``whole_ahead``: under ``fifo``, with a task of a whole node among the submitted jobs, the 1-GPU job fills
    the partly used H100 node rather than break the whole one, so at 600 s (the 8-GPU job ended at 500 s) the gang
    finds two whole H100 nodes and starts at once. Without the rule (the rule before) stranding-fgd puts the 1-GPU
    job on the whole node, and the gang, which nothing can help while it waits at the head, waits until the 1-GPU
    job ends (3,001 s)."""
    sim = _small_before_gang(True)
    assert sim.job("small").nodes == sim.job("long").nodes
    assert sim.job("gang").first_start_s == pytest.approx(600.0)
    assert set(sim.job("gang").nodes) == {"h100-0", "h100-1", "h100-2"} - set(sim.job("long").nodes)
    before = _small_before_gang(False)
    assert _model(before, "small") == "h100"
    assert before.job("small").nodes[0] not in (before.job("long").nodes[0], before.job("big").nodes[0])
    assert before.job("gang").first_start_s == pytest.approx(3_001.0)

def test_a_queue_that_backfills_keeps_no_whole_node_ahead() -> None:
    """Under the ``default`` queue (backfill; ``keep_whole`` acts while a gang waits) the rule changes nothing."""
    assert _placements(_small_before_gang(True, "default")) == _placements(_small_before_gang(False, "default"))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 50), gpus=st.sampled_from([1, 2, 4]))
def test_without_a_whole_node_task_the_rule_changes_nothing(seed: int, n: int, gpus: int) -> None:
    """``fifo``, jobs of fewer GPUs than a node only: no task asks for a whole node, so every decision and finish
    time is the rule's before (``whole_ahead: false``)."""
    jobs = [replace(j, num_gpus=gpus, ref_gpu="H100") for j in generate(n, 16, seed=seed, load=1.0, max_gpus=8)]
    assert _placements(_run(2, 2, jobs, "default", "fifo")) == \
        _placements(_run(2, 2, jobs, "default", "fifo", tier_args={"whole_ahead": False}))


def _beside_ending_jobs(under_ends: bool, queue: str = "default") -> Simulation:
    """2 x 8 H100 + 1 x 8 L40S, the L40S node busy. At 0 s a 6-GPU job of 1,000 s and at 0.1 s one of 10,000 s each
    take an H100 node (2 GPUs idle on each); at 1 s a 2-GPU job of 2,000 s, with nothing queued; at 1,500 s an 8-GPU
    job."""
    jobs = [JobSpec("l40s-filler", 0.0, 8, 10_000, kind=JobKind.TRAIN, gpu_type="L40S"),
            JobSpec("short", 0.0, 6, 1_000, gpus_per_task=6, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("long", 0.1, 6, 10_000, gpus_per_task=6, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("mid", 1.0, 2, 2_000, gpus_per_task=2, kind=JobKind.TRAIN, ref_gpu="H100"),
            JobSpec("big", 1_500.0, 8, 3_600, kind=JobKind.TRAIN, ref_gpu="H100")]
    return _run(2, 1, jobs, "default", queue, tier_args={"under_ends": under_ends})


def test_a_job_goes_beside_a_longer_one_so_the_ending_jobs_node_comes_free_whole() -> None:
    """``under_ends``, ``default`` queue: the 2-GPU job (ends at 2,001 s) goes beside the 10,000 s job rather than
    the 1,000 s one, so that node comes free whole at 1,000 s and the 8-GPU job starts when it arrives (1,500 s).
    Without the rule (the rule before) stranding-fgd puts it beside the 1,000 s job, keeping that node partly busy
    until 2,001 s, and the 8-GPU job waits until then."""
    sim = _beside_ending_jobs(True)
    assert sim.job("mid").nodes == sim.job("long").nodes
    assert sim.job("big").nodes == sim.job("short").nodes
    assert sim.job("big").first_start_s == pytest.approx(1_500.0)
    before = _beside_ending_jobs(False)
    assert before.job("mid").nodes == before.job("short").nodes
    assert before.job("big").first_start_s == pytest.approx(2_001.0)


def test_under_fifo_the_job_is_placed_as_before() -> None:
    """Under ``fifo`` (``whole_ahead``'s queue; measured worse there) the rule does not act."""
    assert _placements(_beside_ending_jobs(True, "fifo")) == _placements(_beside_ending_jobs(False, "fifo"))


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(30, 50), one_model=st.booleans())
def test_under_fifo_or_on_one_model_the_rule_changes_nothing(seed: int, n: int, one_model: bool) -> None:
    """Where ``under_ends`` must not act -- a mixed cluster under ``fifo``, and a cluster of one GPU model under the
    ``default`` queue -- every decision and finish time is the rule's before (``under_ends: false``)."""
    jobs = [replace(j, ref_gpu="H100") for j in generate(n, 16, seed=seed, load=1.0, max_gpus=8)]
    cases = [(3, 0, "default"), (0, 3, "default")] if one_model else [(3, 1, "fifo")]
    for h100, l40s, queue in cases:
        assert _placements(_run(h100, l40s, jobs, "default", queue)) == \
            _placements(_run(h100, l40s, jobs, "default", queue, tier_args={"under_ends": False}))
