"""Issue 28: a dynamic policy's (DRF's) pass no longer re-keys and re-sorts every queued job, and decides the same.

The queue keeps DRF's jobs sorted by the part of their key that does not move (priority, submit time); a pass
fixes each tenant's standing when it begins and merges the groups' heads by the composed keys
(:meth:`gpucluster.jobs.engine.JobEngine._fix_order`). :class:`FullResortOracle` is the engine as it was before:
every queued job holds its whole key and every pass re-keys all of them and sorts the queue again. Seeded
multi-tenant runs (priorities, weights, a quota tree with guarantees and reclaim, the control plane's described
and sliced passes) give the same events on both, and the order views give equals a full sort.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Hashable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import CapacityView, Job, JobEvent, JobSpec, TenantLedger
from gpucluster.jobs import recipe as recipe_module
from gpucluster.jobs.engine import JobEngine
from gpucluster.jobs.policies import DominantResourceFairness, Key
from gpucluster.jobs.queue import Entry, JobQueue
from gpucluster.jobs.views import JobViews
from gpucluster.scheduler.framework import PluginConfig
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree
from gpucluster.simulator.runner import Simulation, jobs_profile
from tests.simulator.conftest import make_cluster


class _ResortQueue(JobQueue):
    """The queue as it was (test oracle): :meth:`resort` keys every queued job again and sorts them all."""

    def resort(self, key: Callable[[str], Key]) -> None:
        """Key every queued job again with ``key``; jobs keep their insertion order among equal keys, and their
        groups are formed again (the code the engine ran at every dynamic pass before)."""
        self._entries = sorted((key(jid), s, jid) for _, s, jid in self._entries)
        self._entry = {e[2]: e for e in self._entries}
        groups: dict[Hashable, list[Entry]] = {}
        for e in self._entries:  # in order: each group's list comes out sorted
            g = self._grouper(e[2], e[0])
            old = self._group[e[2]]
            if g != old and self.keep_fresh:
                self.fresh.setdefault(g, []).append(e[2])
            self._group[e[2]] = g
            groups.setdefault(g, []).append(e)
        for g in [g for g in self.noted if g not in groups]:
            del self.noted[g]
        for g in [g for g in self.fresh if g not in groups]:
            del self.fresh[g]
        self.groups = groups


class FullResortOracle(JobEngine):
    """Test oracle: the engine with the full re-sort per pass it ran before. Its queue holds every job under its
    whole policy key (as of its queueing), each pass re-keys every queued job under the tenants' shares of that
    moment and sorts the whole queue, and the walk compares the queue's own entries (no composed keys). Only the
    pass is the old one: the views of this engine are not (they expect the new queue)."""

    resorts = 0
    keyed = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._queue = _ResortQueue(self._group_of, keep_fresh=self.options.describe)
        self.views = JobViews(self.jobs, self._queue, self._running, self.policy, self, self.ledger, self.jobs.tally)

    def _queue_key(self, job: Job) -> Key:
        return self.policy.key(job, self)

    def _keep_late(self, job: Job) -> None:
        pass  # its queue's entries hold whole keys already

    def _fix_order(self) -> None:
        if self.policy.dynamic:
            assert isinstance(self._queue, _ResortQueue)
            FullResortOracle.resorts += 1
            FullResortOracle.keyed += len(self._queue)
            with self.ledger.fixed_shares():
                self._queue.resort(lambda jid: self.policy.key(self.jobs[jid], self))
        self._order = None


def _record(sim: Simulation) -> list[str]:
    out: list[str] = []

    def on(ev: JobEvent) -> None:
        out.append(f"{ev.t:.6f} {ev.job_id} {ev.kind} {ev.state.value if ev.state else ''} {ev.node} {ev.message}")

    sim.listeners.append(on)
    return out


def _jobs(n: int, seed: int, tenants: int, distinct: bool = False) -> list[JobSpec]:
    """A seeded multi-tenant stream: bursts of alike jobs (groups), priorities, a few shapes of CPU (more groups),
    sizes from a fraction of a GPU to two nodes, some jobs that may not be preempted; ``distinct``: every job
    lists GPU models of its own (V100 first: a group each)."""
    rng = random.Random(seed)
    out: list[JobSpec] = []
    t = 0.0
    while len(out) < n:
        t += rng.expovariate(1 / 120.0)
        tenant = f"team-{rng.randrange(tenants)}"
        gpus = rng.choice((1, 1, 2, 4, 8, 8, 16))
        priority = rng.choice((0, 0, 0, 1, 2))
        cpu = rng.choice((2000, 4000, 6000))
        for _ in range(rng.choice((1, 1, 3, 8))):  # a burst of one shape from one tenant
            out.append(JobSpec(f"j{len(out)}", round(t, 3), gpus, rng.uniform(300.0, 20_000.0), tenant=tenant,
                               priority=priority, cpu_milli_per_gpu=cpu, preemptible=rng.random() < 0.9,
                               gpu_type=f"V100,X{len(out)}" if distinct else "",
                               gpu_milli=rng.choice((1000, 1000, 500)) if gpus == 1 else 1000))
            t += rng.uniform(0.0, 5.0)
    return out[:n]


def _tree(tenants: int) -> QuotaTree:
    return QuotaTree([QueueSpec("org-a", guarantee=24), QueueSpec("org-b", guarantee=8),
                      *[QueueSpec(f"team-{i}", parent="org-a" if i % 2 == 0 else "org-b",
                                  guarantee=8.0 if i < 2 else 0.0, weight=1.0 + (i % 3)) for i in range(tenants)]])


def _run(oracle: bool, monkeypatch: pytest.MonkeyPatch, seed: int, *, quota: bool, describe: bool = False,
         budget: float = float("inf"), distinct: bool = False) -> tuple[list[str], dict[str, Any], Simulation]:
    with monkeypatch.context() as m:
        if oracle:
            m.setattr(recipe_module, "JobEngine", FullResortOracle)
        tenants = 5
        kwargs: dict[str, Any] = {}
        if quota:
            kwargs = {"profile": jobs_profile(False, extra=[PluginConfig(name="Quota")]),
                      "services": {"quota": _tree(tenants)}}
        sim = Simulation(make_cluster(nodes=6, gpus=8), DominantResourceFairness(), seed=seed,
                         tenant_weights={"team-3": 2.0, "team-4": 0.5}, describe=describe, pass_budget_s=budget,
                         slowdown=False, **kwargs)
        assert isinstance(sim.engine, FullResortOracle) == oracle
    events = _record(sim)
    sim.submit_many(_jobs(400, seed, tenants, distinct))
    names = [n.name for n in sim.state.nodes]
    sim.at(3000.0, lambda: sim.fail_node(names[1], repair_after_s=5000.0))
    sim.run()
    return events, sim.summary(), sim


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("quota", [True, False])
def test_drf_decides_as_a_full_resort_each_pass_would(seed: int, quota: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded 400-job run of five tenants (priorities, weights; with a quota tree: guarantees and reclaim, and a
    node failure) gives the same events, to the message, and the same summary as the oracle that re-sorts every
    queued job at every pass."""
    before = FullResortOracle.resorts
    want, want_summary, old = _run(True, monkeypatch, seed, quota=quota)
    assert FullResortOracle.resorts > before  # the oracle did run its re-sorts
    got, got_summary, new = _run(False, monkeypatch, seed, quota=quota)
    assert got == want
    assert got_summary == want_summary
    assert new.totals.passes == old.totals.passes and new.totals.looked == old.totals.looked
    if quota:
        assert new.totals.reclaims > 0  # the run exercises reclaim (victims queued during a pass)
    assert any(" running " in e for e in got) and got_summary["jobs_completed"] > 300


@pytest.mark.parametrize(("seed", "quota"), [(1, True), (5, True), (1, False)])
def test_drf_described_passes_match_the_full_resort(seed: int, quota: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The control plane's way, every waiting job told why (``unschedulable`` events): reclaim victims queued
    during a pass keep their key as of then in that pass (as when every pass re-keyed the queue: which reason
    they get, and in which order their group is told: without that, seeds 1 and 5 tell two jobs in swapped
    order), a pass tells the groups in the order the old re-sort formed them (by their first job), and the jobs
    after a job the order stops at (without reclaim: a full cluster) wait their turn: the same events as the
    oracle's, in the same order, with and without a quota tree."""
    want, want_summary, _ = _run(True, monkeypatch, seed, quota=quota, describe=True)
    got, got_summary, new = _run(False, monkeypatch, seed, quota=quota, describe=True)
    assert got == want and got_summary == want_summary
    assert any(" unschedulable " in e for e in got) and (new.totals.reclaims > 0) == quota
    if not quota:  # the order stops at a job that waits (no reclaim, no backfill past a full cluster)
        assert any("waiting its turn" in e for e in got)


def test_drf_described_and_sliced_passes_match_the_full_resort(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control plane's way: every waiting job told why (``unschedulable`` events), passes cut after their
    first 128 groups and resumed at the next run (a resume entry keyed under the tenants' standing of an
    earlier pass; a group per job here, so that passes are cut), reclaim victims noted in the pass that queued
    them: the same events as the oracle's."""
    want, want_summary, old = _run(True, monkeypatch, 3, quota=True, describe=True, budget=0.0, distinct=True)
    cut = 0
    walk = JobEngine._walk

    def counting_walk(engine: JobEngine, resume: Entry | None) -> None:
        nonlocal cut
        walk(engine, resume)
        cut += engine._resume is not None

    monkeypatch.setattr(JobEngine, "_walk", counting_walk)
    got, got_summary, new = _run(False, monkeypatch, 3, quota=True, describe=True, budget=0.0, distinct=True)
    assert cut > 100  # passes were cut short and resumed
    assert got == want and got_summary == want_summary
    assert new.totals.passes == old.totals.passes and new.totals.looked == old.totals.looked
    assert any(" unschedulable " in e for e in got)
    assert new.totals.reclaims > 0


class _View:
    """A policy view over a ledger: standings as the engine reads them."""

    def __init__(self, ledger: TenantLedger) -> None:
        self.ledger = ledger
        self.now = 0.0

    def tenant_share(self, tenant: str) -> float:
        return self.ledger.share(tenant)

    def tenant_standing(self, tenant: str) -> tuple[float, float]:
        return self.ledger.standing(tenant)


def _tenant_group(jobs: dict[str, Job]) -> Callable[[str, Key], Hashable]:
    def group(jid: str, key: Key) -> Hashable:
        spec = jobs[jid].spec
        return (spec.tenant, spec.num_gpus)  # one tenant per group, as the engine's groups

    return group


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 2), st.integers(0, 5), st.sampled_from((1, 2, 4))),
                min_size=1, max_size=40),
       st.lists(st.tuples(st.sampled_from("abcd"), st.integers(1, 16)), max_size=8),
       st.booleans(), st.lists(st.integers(0, 39), max_size=10))
def test_the_merged_drf_order_is_the_full_sort(queued: list[tuple[str, int, int, int]],
                                               held: list[tuple[str, int]], with_tree: bool,
                                               removed: list[int]) -> None:
    """Random queues (tenants, priorities, submit times with ties, sizes), random holdings (and with a quota tree,
    guarantees): the queue merged by composed keys (what views and a pass use) is exactly the sort of every
    queued job by its whole DRF key, ties by arrival; and the key composes from its parts."""
    state = make_cluster(nodes=4, gpus=8).state()
    tree = QuotaTree([QueueSpec("a", guarantee=8), QueueSpec("b", guarantee=4, weight=2.0)]) if with_tree else None
    ledger = TenantLedger(CapacityView(lambda: state, tree), tree, {"c": 3.0})
    for n, (tenant, gpus) in enumerate(held):
        ledger.hold(JobSpec(f"h{n}", 0.0, gpus, 1.0, tenant=tenant))
        if tree is not None:
            tree.charge(f"h{n}", tenant, {"gpu": float(gpus)})
    view = _View(ledger)
    pol = DominantResourceFairness()
    jobs: dict[str, Job] = {}
    q = JobQueue(_tenant_group(jobs))
    for n, (tenant, prio, submit, gpus) in enumerate(queued):
        job = jobs[f"q{n}"] = Job(JobSpec(f"q{n}", float(submit), gpus, 1.0, tenant=tenant, priority=prio))
        q.push(job, pol.queue_key(job, view))
    for n in removed:
        if f"q{n}" in q:
            q.remove(jobs[f"q{n}"])
    live = [jid for jid in jobs if jid in q]
    full = sorted(live, key=lambda jid: (pol.key(jobs[jid], view), q.entry(jid)[1]))
    merged = [jid for _, _, jid in q.ordered(q.parts(jobs, lambda t: pol.tenant_key(t, view)), pol.compose)]
    assert merged == full
    for jid in live:
        job = jobs[jid]
        assert pol.compose(pol.queue_key(job, view), pol.tenant_key(job.spec.tenant, view)) == pol.key(job, view)
