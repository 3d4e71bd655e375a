"""The heterogeneity-aware ``gavel`` policy: jobs go where their speed counts most (Gavel's effective throughput)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gpucluster.jobs.model import JobSpec, task_pods
from gpucluster.jobs.placement import job_profile
from gpucluster.jobs.policies import POLICIES, make_policy
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate
from tests.simulator.conftest import mixed_cluster


def _job(jid: str, model: str, submit: float = 0.0, **kw: object) -> JobSpec:
    return JobSpec(jid, submit, 8, 3600, model=model, ref_gpu="V100", **kw)  # type: ignore[arg-type]


@pytest.mark.parametrize("first", ["Recommendation", "Transformer"])
def test_the_job_that_gains_most_gets_the_fast_model_whatever_the_order(first: str) -> None:
    """A transformer gains ~3x from H100 over L40S, a host-bound recommender little: gavel gives the H100 to the
    transformer even when the recommender comes first; binpack (fifo) gives it to whoever comes first."""
    second = "Transformer" if first == "Recommendation" else "Recommendation"
    jobs = [_job("a", first), _job("b", second, submit=1.0)]
    for policy in ("gavel", "fifo"):
        sim = Simulation(mixed_cluster(), policy)
        sim.submit_many(jobs)
        sim.run_until(2.0)
        where = {sim.job(j).spec.model: sim.job(j).nodes[0].split("-")[0] for j in ("a", "b")}
        if policy == "gavel":
            assert where == {"Transformer": "h100", "Recommendation": "l40s"}
        else:
            assert where[first] == "h100"  # binpack takes the first node


def test_gavel_runs_a_mixed_trace_at_a_higher_speed_than_binpack() -> None:
    base = generate(300, 32, seed=4, load=1.0, max_gpus=8)
    jobs = [replace(j, ref_gpu="V100", model="Transformer" if i % 2 else "Recommendation")
            for i, j in enumerate(base)]

    def transformer_share_on_h100(policy: str) -> tuple[float, float]:
        sim = Simulation(mixed_cluster(2, 2), policy)
        sim.submit_many(jobs)
        sim.run()
        work = {True: 0.0, False: 0.0}
        for j in sim.jobs.values():
            if j.spec.model == "Transformer":
                work[j.nodes[0].startswith("h100")] += j.spec.gpu_seconds
        assert sim.summary()["jobs_completed"] == 300
        return work[True] / (work[True] + work[False]), float(sim.summary()["gpu_speed"])

    gavel_share, gavel_speed = transformer_share_on_h100("gavel")
    fifo_share, fifo_speed = transformer_share_on_h100("fifo")
    assert gavel_share > fifo_share + 0.05
    assert gavel_speed >= fifo_speed


def test_gpu_type_lists_are_the_models_a_job_accepts() -> None:
    sim = Simulation(mixed_cluster(), "gavel")
    sim.submit(_job("only-l40s", "Transformer", gpu_type="L40S"))
    sim.submit(_job("either", "Transformer", submit=1.0, gpu_type="H100,L40S"))
    sim.run_until(2.0)
    assert sim.job("only-l40s").nodes[0].startswith("l40s")
    assert sim.job("either").nodes[0].startswith("h100")
    assert task_pods(sim.job("either").spec, 1)[0].constraints.use_types == ("H100", "L40S")


def test_scores_are_relative_to_the_jobs_best_option_and_the_mix() -> None:
    sim = Simulation(mixed_cluster(), "gavel")
    sim.submit_many([_job("t", "Transformer"), _job("r", "Recommendation")])
    models = ["H100-SXM5-80GB", "L40S-48GB"]
    t = sim.speeds.normalized(sim.job("t").spec, models)
    r = sim.speeds.normalized(sim.job("r").spec, models)
    assert t[0] == r[0] == 1.0 and t[1] < r[1] < 1.0
    pods = {j: task_pods(sim.job(j).spec, 1)[0] for j in ("t", "r")}
    st, sr = (sim.speeds.model_scores(pods[j], models) for j in ("t", "r"))
    assert st is not None and sr is not None
    assert max(st) == max(sr) == 1.0
    assert st.index(1.0) == 0 and sr.index(1.0) == 1  # each to where it is comparatively strong
    plain = task_pods(JobSpec("p", 0, 1, 10), 1)[0]
    sim.submit(JobSpec("p", 0, 1, 10))
    assert sim.speeds.model_scores(plain, models) is None  # no ref_gpu: the same everywhere, plugin skips


def test_gavel_is_a_queue_and_a_placement_policy() -> None:
    assert "gavel" in POLICIES
    names = [p.name for p in job_profile(None, make_policy("gavel")).plugins]
    assert "GpuSpeed" in names and "Gang" in names
    names = [p.name for p in job_profile("gavel", make_policy("fifo")).plugins]
    assert "GpuSpeed" in names
