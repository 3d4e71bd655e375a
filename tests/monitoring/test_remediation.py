"""Remediation: an XID 79 fires the alert, the node is drained, its pods run elsewhere, nothing is lost;
dry-run, policy, cooldown, the brake on draining, idle release and defragmentation."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model import ClusterState
from gpucluster.monitoring import (
    Action,
    Alert,
    AuditLog,
    EmbeddedMonitor,
    RemediationPolicy,
    RemediationTarget,
    Remediator,
    SimSource,
    SimTarget,
    build_registry,
    lost_pods,
)
from gpucluster.scheduler import Scheduler, profile_for
from tests.helpers import gpu_pod
from tests.monitoring.conftest import FakeClock, activity_pod, place, small_state


def setup(nodes: int = 3, gpus: int = 4, policy: str = "binpack") -> tuple[ClusterState, Scheduler, SimTarget]:
    state = small_state(nodes, gpus)
    sched = Scheduler(state, profile_for(policy))
    return state, sched, SimTarget(sched)


def busiest(state: ClusterState) -> str:
    return max(state.nodes, key=lambda n: len(state.pods_on_node[state.node_index[n.name]])).name


def alert(name: str, action: Action, node: str, gpu: int | None = 0) -> Alert:
    labels = {"Hostname": node, "alertname": name, "action": str(action)}
    if gpu is not None:
        labels["gpu"] = str(gpu)
    return Alert(name, labels, {"summary": name}, "firing", 0.0, 1.0)


def test_xid79_fires_drains_and_reschedules_without_loss(tmp_path: Path) -> None:
    state, sched, target = setup(nodes=3, gpus=4)
    pods = [activity_pod(f"job-{k}", "compute", cores_pct=50, memory_mib=20000) for k in range(6)]
    assert place(sched, pods) == []
    clock = FakeClock()
    src = SimSource(state, clock=clock)
    audit = AuditLog(tmp_path / "audit.jsonl")
    rem = Remediator(target, audit=audit, node_count=lambda: state.n_nodes, clock=clock)
    mon = EmbeddedMonitor({"agent": build_registry(src, state)}, remediator=rem)
    before = sorted(state.allocations)
    bad = busiest(state)
    victims = {a.pod_key for a in state.allocations_on(bad)}
    assert victims

    assert mon.step(0.0).firing == []
    src.inject_xid(bad, 0, 79)
    clock.t = 15.0
    res = mon.step(15.0)

    assert {a.name for a in res.firing} == {"GpuXidCritical", "GpuXidError"}
    (rec,) = res.actions
    assert (rec.action, rec.outcome, rec.alert) == ("drain", "done", "GpuXidCritical")
    i = state.node_index[bad]
    assert not state.schedulable[i] and not state.dev_healthy[i, 0]
    assert state.pods_on_node[i] == set()
    assert set(rec.detail["evicted"]) == victims  # type: ignore[arg-type]
    moved = rec.detail["rescheduled"]
    assert set(moved) == victims and bad not in set(moved.values())  # type: ignore[union-attr]
    assert sorted(state.allocations) == before and lost_pods(before, target) == set()
    logged = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert logged[0]["action"] == "drain" and logged[0]["target"] == f"{bad}/gpu0"

    # the alert keeps firing: the drain is not repeated and the moved pods stay put
    clock.t = 30.0
    res = mon.step(30.0)
    assert res.actions == [] and sorted(state.allocations) == before
    # pods moving changes the pod labels of device series; that must not look like GPUs going missing
    assert {a.name for a in res.firing} == {"GpuXidCritical", "GpuXidError"}
    # repaired, then it fails again within the cooldown: considered, but skipped
    src.clear(bad, 0)
    clock.t = 45.0
    assert mon.step(45.0).firing == []
    src.inject_xid(bad, 0, 79)
    clock.t = 60.0
    (again,) = mon.step(60.0).actions
    assert again.outcome == "skipped" and "cooldown" in str(again.detail["why"])


def test_drain_without_room_parks_pods_until_capacity_returns() -> None:
    state, sched, target = setup(nodes=2, gpus=2)
    assert place(sched, [gpu_pod(f"w{k}", cores_pct=100) for k in range(4)]) == []
    before = sorted(state.allocations)
    res = target.drain("n0")
    assert len(res.evicted) == 2 and res.rescheduled == {} and sorted(res.pending) == sorted(res.evicted)
    assert lost_pods(before, target) == set()
    assert target.retry_pending() == {}
    target.uncordon("n0")
    placed = target.retry_pending()
    assert set(placed) == set(res.pending) and target.pending == {}
    assert sorted(state.allocations) == before


def test_dry_run_logs_and_changes_nothing() -> None:
    state, sched, target = setup()
    place(sched, [gpu_pod("a", cores_pct=100)])
    node = busiest(state)
    gen = state.generation
    rem = Remediator(target, dry_run=True, node_count=lambda: 3)
    (rec,) = rem.handle([alert("GpuXidCritical", Action.DRAIN, node)])
    assert rec.outcome == "dry-run" and rec.dry_run
    assert state.generation == gen


def test_policy_skips_release_unless_allowed_and_release_frees_the_idle_device() -> None:
    state, sched, target = setup()
    place(sched, [gpu_pod("idle", cores_pct=100)])
    alloc = state.allocations["default/idle"]
    gpu = next(alloc.grants).device_index
    a = alert("GpuAllocatedIdle", Action.RELEASE, alloc.node, gpu)
    (rec,) = Remediator(target).handle([a])
    assert rec.outcome == "skipped" and "default/idle" in state.allocations
    allow = RemediationPolicy(allow=frozenset({Action.RELEASE}))
    (rec,) = Remediator(target, policy=allow).handle([a])
    assert rec.outcome == "done" and rec.detail == {"released": ["default/idle"]}
    assert "default/idle" not in state.allocations and lost_pods(["default/idle"], target) == set()


def test_brake_never_drains_past_the_limit() -> None:
    state, _, target = setup(nodes=4, gpus=1)
    rem = Remediator(target, policy=RemediationPolicy(max_unschedulable_fraction=0.5), node_count=lambda: 4)
    recs = rem.handle([alert("GpuXidCritical", Action.DRAIN, f"n{k}") for k in range(4)])
    assert [r.outcome for r in recs] == ["done", "done", "skipped", "skipped"]
    assert int(state.schedulable.sum()) == 2


def test_plan_orders_and_dedupes() -> None:
    _, _, target = setup()
    rem = Remediator(target)
    plan = rem.plan([
        alert("NodeFragmentationHigh", Action.DEFRAGMENT, "n1", None),
        alert("GpuTemperatureHigh", Action.CORDON, "n0", 1),
        alert("GpuTemperatureHigh", Action.CORDON, "n0", 2),
        alert("GpuXidCritical", Action.DRAIN, "n1", 3),
        alert("GpuXidError", Action.NONE, "n2", 0),
        Alert("X", {"Hostname": "n2", "action": "drain"}, {}, "pending", 0.0, 1.0),
    ])
    assert [(p.action, p.node) for p in plan] == [(Action.DRAIN, "n1"), (Action.CORDON, "n0")]


def test_failing_backend_is_recorded() -> None:
    _, _, target = setup()
    (rec,) = Remediator(target).handle([alert("GpuXidCritical", Action.DRAIN, "ghost")])
    assert rec.outcome == "failed" and "KeyError" in str(rec.detail["error"])


def test_defragment_frees_whole_devices() -> None:
    state, sched, target = setup(nodes=2, gpus=4, policy="spread")
    # spread puts one small pod per device on n0 and n1: every device partly used
    assert place(sched, [gpu_pod(f"s{k}", cores_pct=20, memory_mib=1000) for k in range(8)]) == []
    before = sorted(state.allocations)
    frag0 = target.fragmentation("n0")
    assert frag0 > 0.9
    (rec,) = Remediator(target).handle([alert("NodeFragmentationHigh", Action.DEFRAGMENT, "n0", None)])
    assert rec.outcome == "done"
    assert rec.detail["fragmentation_after"] < frag0  # type: ignore[operator]
    assert rec.detail["freed_gpus"] and all(state.dev_tasks[0, j] == 0 for j in rec.detail["freed_gpus"])  # type: ignore[union-attr]
    assert sorted(state.allocations) == before and bool(state.schedulable[0])


def test_sim_target_satisfies_the_protocol() -> None:
    _, _, target = setup()
    assert isinstance(target, RemediationTarget)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(1, 2), st.sampled_from([10, 30, 50, 100])), min_size=1, max_size=20),
       st.integers(0, 2), st.sampled_from(["binpack", "spread"]))
def test_drain_never_loses_a_pod(shapes: list[tuple[int, int]], node: int, policy: str) -> None:
    state, sched, target = setup(nodes=3, gpus=4, policy=policy)
    place(sched, [gpu_pod(f"p{k}", count=c, cores_pct=cp, memory_mib=1000) for k, (c, cp) in enumerate(shapes)])
    before = sorted(state.allocations)
    res = target.drain(f"n{node}")
    assert lost_pods(before, target) == set()
    assert set(res.evicted) == set(res.rescheduled) | set(res.pending)
    assert state.pods_on_node[node] == set()
    assert int(state.dev_core_used.sum()) == sum(a.core_milli for a in state.allocations.values())


def test_a_node_back_in_service_no_longer_counts_against_the_brake() -> None:
    state = small_state(nodes=4, gpus=2)
    sched = Scheduler(state, profile_for("binpack"))
    clock = FakeClock()
    rem = Remediator(SimTarget(sched), node_count=lambda: 4, clock=clock)  # at most one node out
    xid = Alert("GpuXidCritical", {"Hostname": "n0", "gpu": "0", "action": "drain", "severity": "critical"},
                {"summary": "x"}, "firing", 0.0, 79.0)
    other = Alert("GpuXidCritical", {"Hostname": "n1", "gpu": "0", "action": "drain", "severity": "critical"},
                  {"summary": "y"}, "firing", 0.0, 79.0)
    assert [r.outcome for r in rem.handle([xid])] == ["done"]
    assert [r.outcome for r in rem.handle([other])] == ["skipped"]
    state.set_schedulable("n0", True)
    rem.node_restored("n0")
    clock.t = 1.0
    assert rem.handle([]) == []  # the skipped alert's episode ends; when it fires again it is considered anew
    assert [r.outcome for r in rem.handle([other])] == ["done"]


def test_disruptive_actions_are_planned_only_unless_opted_in() -> None:
    """``RemediationPolicy.opt_in``: a drain not switched on moves nothing (every pod stays where it was) but
    cordons the node and marks the device unusable, and it is listed as planned while its alert fires."""
    state, sched, target = setup(nodes=3, gpus=4)
    pods = [activity_pod(f"job-{k}", "compute", cores_pct=50, memory_mib=20000) for k in range(6)]
    assert place(sched, pods) == []
    bad = busiest(state)
    before = {k: a.node for k, a in state.allocations.items()}
    rem = Remediator(target, RemediationPolicy.opt_in([]), node_count=lambda: state.n_nodes, clock=FakeClock())
    firing = [alert("GpuXidCritical", Action.DRAIN, bad, gpu=1)]
    (rec,) = rem.handle(firing)
    assert (rec.action, rec.outcome) == ("drain", "dry-run")
    assert {k: a.node for k, a in state.allocations.items()} == before  # nobody evicted
    i = state.node_index[bad]
    assert not state.schedulable[i] and not state.dev_healthy[i, 1]  # but nothing new lands there
    assert set(rec.detail["would_evict"]) == {k for k, n in before.items() if n == bad}  # type: ignore[arg-type]
    assert [r.target for r in rem.planned()] == [f"{bad}/gpu1"]
    assert rem.handle(firing) == []  # one record per alert episode
    assert rem.handle([]) == [] and rem.planned() == []  # resolved: no longer planned

    on = Remediator(target, RemediationPolicy.opt_in([Action.DRAIN]), node_count=lambda: state.n_nodes,
                    clock=FakeClock())
    (done,) = on.handle(firing)
    assert done.outcome == "done" and state.pods_on_node[i] == set() and on.planned() == []


def test_opt_in_modes_and_observe_only() -> None:
    policy = RemediationPolicy.opt_in([Action.DEFRAGMENT])
    assert policy.modes() == {"cordon": "on", "drain": "dry-run", "defragment": "on", "release": "dry-run"}
    watch = RemediationPolicy.opt_in([], observe_only=True)
    assert set(watch.modes().values()) == {"dry-run"}
    state, sched, target = setup(nodes=3, gpus=4)
    assert place(sched, [activity_pod("p", "compute", cores_pct=50, memory_mib=20000)]) == []
    node = next(iter(state.allocations.values())).node
    (rec,) = Remediator(target, watch, clock=FakeClock()).handle([alert("GpuXidCritical", Action.DRAIN, node)])
    assert rec.outcome == "dry-run" and "cordoned" not in rec.detail
    assert state.schedulable[state.node_index[node]]  # observe only: not even a cordon
    assert RemediationPolicy().modes()["drain"] == "on"  # the library default is unchanged
