"""One recipe makes every backend's engine; the runtime's view half is written once (EngineFront)."""

from __future__ import annotations

import time

import pytest

from gpucluster.jobs import EngineFront, EngineOptions, EngineRecipe, Job, SchedulerPlacer, engine_recipe, job_spec
from gpucluster.jobs.policies import TwoDimensionalLAS
from gpucluster.model import Allocation
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.framework import Handle
from gpucluster.scheduler.plugins.quota import QuotaTree
from gpucluster.service import EmbeddedRuntime
from gpucluster.simulator import Simulation
from tests.simulator.conftest import make_cluster


def test_the_recipe_names_the_policies_profile_quota_and_options() -> None:
    tree = QuotaTree([])
    recipe = engine_recipe("drf", "binpack", quota=tree, options=EngineOptions(describe=True))
    assert recipe.queue_policy.name == "drf"
    names = [p.name for p in recipe.profile.plugins]
    assert "Quota" in names and "Gang" in names
    assert recipe.services() == {"quota": tree}
    assert "Quota" not in [p.name for p in engine_recipe("drf", "binpack").profile.plugins]
    assert engine_recipe("fifo").services() == {}
    with pytest.raises(ValueError, match="placement"):
        engine_recipe("fifo", "no-such-placement")
    state = make_cluster(nodes=2, gpus=8).state()
    sched = Scheduler(state, recipe.profile, handle=Handle(services=recipe.services()))
    engine = recipe.build(SchedulerPlacer(sched))
    assert engine.policy is recipe.queue_policy and engine.quota is tree and engine.options.describe


def test_the_simulator_and_the_embedded_runtime_make_their_engine_from_a_recipe() -> None:
    sim = Simulation(make_cluster(), "default", describe=True, record_series=False)
    assert isinstance(sim.recipe, EngineRecipe) and isinstance(sim.recipe.queue_policy, TwoDimensionalLAS)
    assert sim.engine.policy is sim.recipe.queue_policy and sim.engine.options == sim.recipe.options
    assert sim.scheduler.framework.profile is sim.recipe.profile
    rt = EmbeddedRuntime(make_cluster(nodes=2, gpus=4), background=0.0, fault_rate_per_hour=0.0)
    assert rt.sim.recipe.quota is rt.quota is rt.engine.quota
    assert rt.engine.options.describe and not rt.engine.options.record_series


def test_the_view_half_is_the_fronts_and_reads_the_state_under_reading() -> None:
    rt = EmbeddedRuntime(make_cluster(nodes=2, gpus=4), background=0.0, fault_rate_per_hour=0.0)
    for name in ("overview", "node", "topology", "_describe"):
        assert getattr(type(rt), name) is getattr(EngineFront, name), name  # not written again by the backend
    # the embedded runtime adds its monitor's device figures to the node rows and the samples (issue 32)
    assert "dev_util" in rt.nodes()[0]
    job = rt.submit(Job(job_spec("j", name="j", tenant="t", replicas=1, duration_s=100.0, submit_s=0.0,
                                 submitted_at=time.time(), resources={"nvidia.com/gpu": 2})))
    rt.advance(1.0)
    o = rt.overview()
    assert (o["backend"], o["cluster"], o["queue"], o["jobs"]["running"]) == ("embedded", "test", 0, 1)
    assert o["history"] and o["alerts_firing"] == 0
    node = job.placements[0]["node"]
    detail = rt.node(node)
    assert detail is not None
    pods = [p for dev in detail["devices"] for p in dev["pods"]]
    assert [(p["job"], p["tenant"]) for p in pods] == [("j", "t"), ("j", "t")]  # one pod, two devices
    alloc: Allocation = rt.state.allocations[job.pod_keys[0]]
    assert rt._job_of(alloc) == "j"
    assert len(rt.nodes()) == 2 and rt.topology()
