"""The job engine's parts on their own: the queue keeps policy order, the tenant ledger's books balance and its
shares read the state's usable capacity, the views read the engine without changing it."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import CapacityView, Job, JobSpec, TenantLedger
from gpucluster.jobs.queue import JobQueue
from gpucluster.simulator import Simulation
from tests.simulator.conftest import make_cluster


def _job(n: int, gpus: int, tenant: str = "t") -> Job:
    return Job(JobSpec(f"j{n}", 0.0, gpus, 100.0, tenant=tenant))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["push", "remove", "rekey"]), st.integers(0, 7), st.integers(0, 3),
                          st.integers(1, 2)), max_size=40))
def test_the_queue_stays_in_key_then_arrival_order(ops: list[tuple[str, int, int, int]]) -> None:
    q = JobQueue()
    jobs: dict[int, Job] = {}
    keys: dict[str, tuple[float, ...]] = {}
    arrival: dict[str, int] = {}
    seq = 0
    for op, n, key, gpus in ops:
        jid = f"j{n}"
        if op == "push" and jid not in q:
            jobs[n] = _job(n, gpus)
            q.push(jobs[n], (float(key),))
        elif op == "remove" and jid in q:
            q.remove(jobs[n])
            del keys[jid]
            continue
        elif op == "rekey" and jid in q:
            q.rekey(jid, (float(key),))
        else:
            continue
        keys[jid] = (float(key),)
        arrival[jid] = seq
        seq += 1
    assert q.ids() == sorted(keys, key=lambda j: (keys[j], arrival[j]))
    assert q.gpuless == 0  # every job here asks for GPUs
    assert q.gpus == sum(jobs[int(j[1:])].spec.gpu_share for j in keys)  # speed-fgd's contention measure
    assert all(q.key(j) == keys[j] for j in keys) and len(q) == len(keys)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 7), st.sampled_from([1, 2, 3, 4, 8, 16]),
                          st.sampled_from([1000, 500])), max_size=40))
def test_the_queue_knows_the_largest_whole_task_it_holds(ops: list[tuple[bool, int, int, int]]) -> None:
    """``largest_whole_task`` (speed-fgd's whole-node test) is the largest task of the queued whole-GPU jobs,
    kept as jobs come and go (no scan)."""
    q = JobQueue()
    jobs: dict[str, Job] = {}
    for push, n, gpus, milli in ops:
        jid = f"j{n}"
        if push and jid not in q:
            jobs[jid] = Job(JobSpec(jid, 0.0, gpus if milli == 1000 else 1, 100.0, gpu_milli=milli))
            q.push(jobs[jid], (0.0,))
        elif not push and jid in q:
            q.remove(jobs.pop(jid))
        else:
            continue
        whole = [j.spec.task_gpus for j in jobs.values() if j.spec.whole]
        assert q.largest_whole_task() == max(whole, default=0)
    assert all(n > 0 for n in q.whole_tasks.values())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(1, 8), st.booleans()), max_size=30))
def test_the_ledger_balances_and_its_shares_move_with_a_cordon(starts: list[tuple[str, int, bool]]) -> None:
    state = make_cluster(nodes=4, gpus=8).state()
    ledger = TenantLedger(CapacityView(lambda: state), weights={"b": 2.0})
    held: list[Job] = []
    for n, (tenant, gpus, stop) in enumerate(starts):
        job = _job(n, gpus, tenant)
        ledger.hold(job.spec)
        held.append(job)
        if stop:
            ledger.give_back(held.pop(0).spec)
    assert abs(ledger.busy - sum(j.spec.gpu_share for j in held)) < 1e-9
    for tenant in ("a", "b", "c"):
        mine = sum(j.spec.gpu_share for j in held if j.tenant == tenant)
        assert abs(ledger.usage().get(tenant, {"gpus": 0.0})["gpus"] - mine) < 1e-9
    before = {t: ledger.share(t) for t in ("a", "b", "c")}
    state.set_schedulable(state.nodes[0].name, False)  # 8 of 32 GPUs gone: every share's denominator moves
    for tenant, share in before.items():
        if ledger.tenants.get(tenant) and ledger.tenants[tenant].gpus > 1e-9 and share > 0:
            assert ledger.share(tenant) > share


def test_views_read_the_engine_without_changing_it() -> None:
    sim = Simulation(make_cluster(nodes=2, gpus=8), "fifo")
    for n, gpus in enumerate((8, 8, 8, 4)):
        sim.submit(JobSpec(f"j{n}", 0.0, gpus, 100.0, tenant="ab"[n % 2]))
    sim.run_until(1.0)
    views = sim.engine.views
    order = views.queue_order()
    assert [j.job_id for j in views.running()] == ["j0", "j1"]
    assert order == [j.job_id for j in views.queued()] == ["j2", "j3"]
    assert views.queue_order() == order and views.counts()["queued"] == 2
    assert views.usage_by_tenant()["a"] == {"gpus": 8.0, "pending_gpus": 8.0, "running": 1.0, "pending": 1.0}
    assert views.queue_stats() == (2, 1.0)
    assert sim.engine.ledger.busy == 16.0 and sim.engine.capacity.gpus == 16


def test_the_never_fits_cache_keeps_one_generation_of_answers() -> None:
    """A long-running control plane whose nodes come and go (every Kubernetes node added or removed changes the
    state's layout) and whose tenants submit many job shapes: the "can this job ever fit" answers are cached
    per shape for the current layout and quota revision only, so the cache stays bounded, and an answer given
    before a node came is not given after it."""
    from gpucluster.jobs import capacity
    from gpucluster.model import DeviceSpec, NodeSpec

    state = make_cluster(1, 1).state()
    view = CapacityView(lambda: state)
    big = JobSpec("big", 0.0, 4, 100.0, tenant="t")  # 4 GPUs in one task: no node has them
    assert view.never_fits(big) is not None
    for n in range(300):  # nodes come (and the question is asked again each time)
        state.add_node(NodeSpec(f"extra-{n}", 32000, 65536,
                                devices=tuple(DeviceSpec(f"GPU-x{n}-{d}", d, "nvidia", "A100", 81920)
                                              for d in range(1 + (n == 299) * 3))))
        assert (view.never_fits(big) is None) == (n == 299)
        assert len(view._never) <= 2, len(view._never)
    for k in range(capacity.MAX_NEVER_CACHED + 50):  # many shapes under one layout
        view.never_fits(JobSpec(f"s{k}", 0.0, 1, 100.0 + k, tenant=f"t{k}"))
    assert len(view._never) <= capacity.MAX_NEVER_CACHED
