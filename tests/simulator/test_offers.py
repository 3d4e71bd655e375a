from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobEvent
from gpucluster.jobs.model import Job, JobSpec, JobState
from gpucluster.jobs.offers import Framework, Offer, OfferAllocator, offer_round
from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.scheduler.plugins.datalocality import DataCatalog, Dataset
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces.synthetic import generate
from gpucluster.spec import Cluster

from .conftest import make_cluster


def test_frameworks_decline_offers_without_their_data_and_drf_arbitrates() -> None:
    nodes = {f"n{i}": {"gpu": 4.0, "cpu": 16.0} for i in range(4)}
    alloc = OfferAllocator(nodes)
    shards = {"a": {"n0", "n1"}, "b": {"n2", "n3"}}

    def local(name: str):  # type: ignore[no-untyped-def]
        return lambda offer: 4 if offer.node in shards[name] else 0

    alloc.register(Framework("a", {"gpu": 1.0, "cpu": 2.0}, pending=12, decide=local("a")))
    alloc.register(Framework("b", {"gpu": 1.0, "cpu": 2.0}, pending=3, decide=local("b")))
    launched = alloc.round()
    a, b = alloc.frameworks["a"], alloc.frameworks["b"]
    assert launched == 8 + 3
    assert set(a.launched) == {"n0", "n1"} and set(b.launched) <= {"n2", "n3"}
    assert alloc.declined > 0
    alloc.release("a", "n0")
    assert alloc.free["n0"]["gpu"] == 1.0


def test_drf_order_between_greedy_frameworks() -> None:
    alloc = OfferAllocator({"n0": {"cpu": 9.0, "mem": 18.0}})
    alloc.register(Framework("A", {"cpu": 1.0, "mem": 4.0}, pending=100, decide=lambda o: 1))
    alloc.register(Framework("B", {"cpu": 3.0, "mem": 1.0}, pending=100, decide=lambda o: 1))
    alloc.round()
    assert len(alloc.frameworks["A"].launched) == 3 and len(alloc.frameworks["B"].launched) == 2
    assert isinstance(Offer("n0", {}), Offer)


# ------------------------------------------------------------------------------ the simulator's offers policy
def _locality_cluster() -> Cluster:
    nodes = tuple(NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20, rack=f"r{i // 2}", leaf="l0",
                           spine="s", devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768)
                                                    for j in range(4)))
                  for i in range(8))
    return Cluster("d", nodes, Fabric(), "test")


def _catalog() -> DataCatalog:
    return DataCatalog([Dataset("imagenet", 150 * 2**30, {"n6", "n7"})])


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 10_000))
def test_offers_policy_completes_a_trace_and_never_overcommits(seed: int) -> None:
    sim = Simulation(make_cluster(nodes=4), "offers", seed=seed)

    def watch(ev: JobEvent) -> None:
        assert sim.busy_gpus <= sim.usable_gpus
        assert int(sim.state.dev_tasks.max()) <= 1  # whole GPUs: never two tasks on one device

    sim.listeners.append(watch)
    jobs = generate(60, 32, seed=seed, load=1.5, max_gpus=16)
    sim.submit_many(jobs)
    sim.run()
    s = sim.summary()
    assert s["jobs_lost"] == 0 and s["jobs_completed"] == 60
    assert sim.totals.offers_accepted > 0
    for j in sim.jobs.values():
        assert len(j.nodes) == j.spec.num_tasks
        assert math.isclose(j.work_done_s, j.spec.duration_s)


def test_framework_declines_non_local_offers_and_the_job_lands_on_a_replica_node() -> None:
    sim = Simulation(_locality_cluster(), "offers", services={"datasets": _catalog()})
    sim.submit(JobSpec("train", 0, 4, 100, dataset="imagenet"))
    sim.run_until(1)
    job = sim.job("train")
    assert job.state == JobState.RUNNING and job.nodes == ("n6",)  # n0..n5 come first in offer order
    assert sim.totals.offers_declined >= 6 and job.bytes_moved == 0
    blind = Simulation(_locality_cluster(), "offers")  # no catalog: the first offer is taken
    blind.submit(JobSpec("train", 0, 4, 100, dataset="imagenet"))
    blind.run_until(1)
    assert blind.job("train").nodes == ("n0",) and blind.totals.offers_declined == 0


def test_delay_scheduling_is_bounded_then_any_offer_is_taken() -> None:
    sim = Simulation(_locality_cluster(), "offers", services={"datasets": _catalog()}, locality_delay_s=600)
    sim.submit(JobSpec("hog-6", 0, 4, 10_000))
    sim.submit(JobSpec("hog-7", 0, 4, 10_000))
    sim.run_until(1)
    assert {sim.job("hog-6").nodes, sim.job("hog-7").nodes} == {("n0",), ("n1",)}
    # both replica nodes busy: the framework waits for them, up to the delay
    sim.submit(JobSpec("fill-6", 1, 4, 10_000, dataset="imagenet"))
    sim.submit(JobSpec("fill-7", 1, 4, 10_000, dataset="imagenet"))
    sim.submit(JobSpec("train", 2, 4, 100, dataset="imagenet"))
    sim.run_until(500)
    assert {sim.job("fill-6").nodes, sim.job("fill-7").nodes} == {("n6",), ("n7",)}
    assert sim.job("train").state == JobState.QUEUED
    sim.run_until(700)
    train = sim.job("train")
    assert train.state == JobState.RUNNING and train.first_start_s == 602  # queued at 2, delay 600
    assert train.nodes[0] not in {"n6", "n7"} and train.bytes_moved > 0


def test_drf_arbitration_offers_first_to_the_tenant_with_the_lower_dominant_share() -> None:
    def run(policy: str) -> Simulation:
        sim = Simulation(make_cluster(nodes=1), policy)
        sim.submit(JobSpec("a-run", 0, 4, 10_000, tenant="a"))   # a holds half the node
        sim.submit(JobSpec("b-run", 0, 2, 10_000, tenant="b"))   # b a quarter; 2 GPUs stay free
        sim.submit(JobSpec("a-next", 10, 2, 100, tenant="a"))    # both ask for the 2 free GPUs at once
        sim.submit(JobSpec("b-next", 10, 2, 100, tenant="b"))
        sim.run_until(11)
        return sim
    offers, fifo = run("offers"), run("fifo")
    assert offers.job("b-next").state == JobState.RUNNING and offers.job("a-next").state == JobState.QUEUED
    assert fifo.job("a-next").state == JobState.RUNNING and fifo.job("b-next").state == JobState.QUEUED


def test_a_gang_keeps_the_offer_turn_until_it_is_complete() -> None:
    # two free nodes; tenant a (lowest share) needs both for one gang, b one node for its job
    nodes = {"n0": {"gpu": 4.0, "whole": 4.0, "cpu": 64000.0, "mem": 1e6},
             "n1": {"gpu": 4.0, "whole": 4.0, "cpu": 64000.0, "mem": 1e6}}
    cap = {"gpu": 16.0, "cpu": 256000.0, "mem": 4e6}
    gang = Job(JobSpec("gang", 0, 8, 100, tenant="a", gpus_per_task=4), state=JobState.QUEUED)
    small = Job(JobSpec("small", 0, 4, 100, tenant="b"), state=JobState.QUEUED)
    res = offer_round(nodes, cap, {"a": [gang], "b": [small]}, {"a": {}, "b": {"gpu": 1.0}}, {}, now=0.0)
    assert res.placed == [(gang, ("n0", "n1"))]
