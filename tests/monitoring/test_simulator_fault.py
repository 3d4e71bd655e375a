"""Fault injection in the job simulator: an XID 79 on a GPU fires the alert, the embedded monitor drains the
node, its jobs restart elsewhere from their checkpoints and every job finishes."""

from __future__ import annotations

import pytest

from gpucluster.jobs import model as jobs_mod
from gpucluster.model import ClusterState
from gpucluster.monitoring import (
    EmbeddedMonitor,
    JobSimulatorTarget,
    RemediationTarget,
    Remediator,
    SimSource,
    build_registry,
)
from gpucluster.simulator import runner as simulator
from tests.helpers import gpu_node


@pytest.mark.slow
def test_xid79_in_the_simulator_drains_and_every_job_finishes() -> None:
    state = ClusterState([gpu_node(f"n{i}", gpus=8, memory_mib=81920, model="H100-SXM5-80GB") for i in range(4)])
    sim = simulator.Simulation(state, queue_policy="fifo")
    specs = [jobs_mod.JobSpec(f"j{k}", submit_s=0.0, num_gpus=4, duration_s=3600.0, checkpoint_interval_s=600.0)
             for k in range(10)]
    sim.submit_many(specs)
    src = SimSource(state, clock=lambda: sim.now)
    target = JobSimulatorTarget(sim)
    assert isinstance(target, RemediationTarget)
    rem = Remediator(target, node_count=lambda: state.n_nodes, clock=lambda: sim.now)
    mon = EmbeddedMonitor({"agent": build_registry(src, state)}, remediator=rem)
    fired: list[tuple[float, str]] = []
    hit: dict[str, object] = {}

    def tick() -> None:
        res = mon.step(sim.now)
        fired.extend((sim.now, a.name) for a in res.firing if a.name == "GpuXidCritical")
        if not all(j.done for j in sim.jobs.values()):
            sim.at(sim.now + 15.0, tick)

    def fault() -> None:
        node = max(state.nodes, key=lambda n: len(state.pods_on_node[state.node_index[n.name]])).name
        hit["node"] = node
        hit["jobs"] = sorted({state.allocations[k].pod.labels["gpucluster.io/job"]  # type: ignore[union-attr]
                              for k in state.pods_on_node[state.node_index[node]]})
        src.inject_xid(node, 0, 79)

    sim.at(0.0, tick)
    sim.at(1000.0, fault)
    sim.run()

    node = str(hit["node"])
    victims = hit["jobs"]
    assert victims, "the fault hit a node with running jobs"
    assert fired and fired[0][0] == pytest.approx(1005.0)  # the first evaluation after the fault
    drains = [r for r in rem.audit.records if r.action == "drain"]
    assert len(drains) == 1 and drains[0].outcome == "done" and drains[0].target == f"{node}/gpu0"
    assert sorted(drains[0].detail["pending"]) == victims  # type: ignore[arg-type]
    # nothing lost: every job completed; the victims restarted once, elsewhere, from a checkpoint
    assert all(j.state == jobs_mod.JobState.SUCCEEDED for j in sim.jobs.values())
    for jid in victims:  # type: ignore[union-attr]
        job = sim.job(jid)
        assert job.failures == 1 and node not in job.nodes
        assert job.lost_work_s <= 600.0
    assert not state.schedulable[state.node_index[node]]
    assert state.pods_on_node[state.node_index[node]] == set()
