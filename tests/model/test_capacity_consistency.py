"""Property: whatever changes the cluster, every cached capacity figure equals a recomputation from scratch.

Two ways the cluster changes, each driven by hypothesis through a random sequence of operations:

* the simulator and the embedded control plane: jobs placed and finished or cancelled by the engine, node and
  device failures and repairs, nodes added and removed, and the remediation target's actions (cordon, uncordon,
  device health, drain, release, migrate: ``monitoring.SimTarget``, which changes the state directly);
* Kubernetes: the informer's updates to a ``KubeCluster`` (nodes added, cordoned, a device going bad, nodes
  deleted, other schedulers' pods bound and deleted), which also replace the state when a node's devices change,
  under a job engine placing jobs through the cluster.

After every operation, figures that something keeps are compared with the same figures computed again from the
state's primary arrays (capacity and usage per node and device, health, schedulable, present): the engine's
totals (usable GPUs, CPU and memory: fair-share denominators, the free-GPU pre-check, waiting messages), its
never-fit verdicts, the state's own free amounts, masks and totals, and every plugin cache (DeviceFit's per-node
verdicts, FGD's node mirror and incremental scores, GpuClustering's kind counts): a long-lived scheduler's Filter
and Score over every node must equal a fresh scheduler's on the same state.

Before the state owned these figures the first of them failed: ``SimTarget.cordon`` of an 8-GPU node left
``engine.totals.gpus`` at its old value, because only drivers that remembered to call ``engine.changed()`` got it
recounted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.jobs import JobEngine, JobSpec, Kernel, make_policy, never_fits
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import decision_annotations, parse_pod
from gpucluster.kubernetes.register import node_manifest
from gpucluster.model import ClusterState, DeviceSpec, NodeSpec, Pod
from gpucluster.monitoring import SimTarget
from gpucluster.scheduler import GroupDecision, Scheduler
from gpucluster.scheduler.framework import CycleState, Profile
from gpucluster.scheduler.plugins.fragmentation.measure import build_target_workload
from gpucluster.scheduler.profiles import fgd_paper_profile
from gpucluster.simulator import Simulation
from tests.helpers import gpu_pod
from tests.kubernetes.helpers import node_obj, pod_obj, registry

MODELS = ("A100", "L40S")
PROBE_SPECS = (
    JobSpec("probe-gang", 0.0, 16, 100.0, gpus_per_task=8, tenant="t0"),
    JobSpec("probe-big", 0.0, 8, 100.0, tenant="t1"),
    JobSpec("probe-small", 0.0, 1, 100.0, tenant="t0"),
)


def _node(i: int, gpus: int = 4) -> NodeSpec:
    model = MODELS[i % 2]
    return NodeSpec(name=f"n{i}", cpu_milli=32000, memory_mib=131072, leaf=f"l{i // 2}", spine="s0",
                    devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", model, 40960, nvlink_domain=0,
                                             max_tasks=4) for j in range(gpus)))


# ------------------------------------------------------------------------------------------ the checks
def _usable(state: ClusterState) -> np.ndarray:
    live = state.present & state.schedulable
    return state.dev_valid & state.dev_healthy & live[:, None]


def check_engine(engine: JobEngine) -> None:
    """The engine's cached figures against the state's primary arrays."""
    s = engine.state
    live = s.present & s.schedulable
    assert engine.totals.gpus == int(_usable(s).sum()), "engine.totals.gpus"
    assert engine.totals.cpu_milli == int(s.cpu_cap[live].sum()), "engine.totals.cpu_milli"
    assert engine.totals.memory_mib == int(s.mem_cap[live].sum()), "engine.totals.memory_mib"
    for spec in PROBE_SPECS:
        fresh = never_fits(spec, s, engine.quota)
        cached = engine.never_fits(spec)
        assert (cached.why if cached else None) == (fresh.why if fresh else None), f"never_fits({spec.job_id})"


def recount(state: ClusterState) -> Any:
    """``state.capacity``'s figures computed from scratch from the primary arrays."""
    from gpucluster.model.capacity import UsableCapacity  # (imported here so that this module runs on older states)

    out = UsableCapacity()
    live = state.present & state.schedulable
    usable = _usable(state)
    out.devices = int(usable.sum())
    out.idle_devices = int((usable & (state.dev_tasks == 0) & (state.dev_core_used == 0)).sum())
    out.cpu_milli = int(state.cpu_cap[live].sum())
    out.memory_mib = int(state.mem_cap[live].sum())
    out.usable_by_model = np.bincount(state.dev_model[usable], minlength=len(state.models.names)).astype(np.int64)
    return out


def check_state(s: ClusterState) -> None:
    """The state's derived rows and totals against its primary arrays."""
    usable = _usable(s)
    np.testing.assert_array_equal(s.cpu_free, s.cpu_cap - s.cpu_used)
    np.testing.assert_array_equal(s.mem_free, s.mem_cap - s.mem_used)
    np.testing.assert_array_equal(s.dev_core_free, s.dev_core_cap - s.dev_core_used)
    np.testing.assert_array_equal(s.dev_mem_free, s.dev_mem_cap - s.dev_mem_used)
    np.testing.assert_array_equal(s.dev_usable, usable)
    np.testing.assert_array_equal(s.dev_live, s.dev_valid & s.dev_healthy)
    idle = usable & (s.dev_tasks == 0) & (s.dev_core_used == 0)
    np.testing.assert_array_equal(s.dev_idle, idle)
    np.testing.assert_array_equal(s.node_idle, idle.sum(axis=1))
    np.testing.assert_array_equal(s.node_usable, usable.sum(axis=1))
    fresh, kept = recount(s).as_dict(), s.capacity.as_dict()
    width = max(len(fresh["usable_by_model"]), len(kept["usable_by_model"]))
    for d in (fresh, kept):
        d["usable_by_model"] = d["usable_by_model"] + [0] * (width - len(d["usable_by_model"]))
    assert kept == fresh, "state.capacity"


def _probe_pods() -> list[Pod]:
    return [gpu_pod("probe-whole", count=1, cores_pct=100, memory_pct=100),
            gpu_pod("probe-share", count=1, cores_pct=30, memory_mib=8000),
            gpu_pod("probe-two", count=2, cores_pct=100, memory_pct=100)]


def _phases(sched: Scheduler, pod: Pod) -> tuple[Any, ...]:
    """What Filter and Score say about every node (no Reserve: nothing changes)."""
    snap = sched.state.snapshot()
    fw = sched.framework
    cycle = CycleState()
    st = fw.run_pre_filter(cycle, pod, snap)
    if not st.ok:
        return ("prefilter", st.code, st.reasons)
    reasons = np.array(fw.run_filter(cycle, pod, snap))
    feasible = np.flatnonzero(reasons == 0)
    scores = np.array(fw.run_score(cycle, pod, snap, feasible)) if feasible.size else np.zeros(0)
    return ("ok", reasons.tolist(), feasible.tolist(), np.round(scores, 9).tolist())


def check_plugin_caches(probes: Sequence[tuple[Scheduler, Profile]], state: ClusterState) -> None:
    """Each long-lived probe scheduler (its plugins' caches filled along the whole sequence) against a fresh
    one with the same profile on the same state."""
    for sched, profile in probes:
        fresh = Scheduler(state, profile)
        for pod in _probe_pods():
            assert _phases(sched, pod) == _phases(fresh, pod), f"{profile.scheduler_name}: {pod.name}"


def _probe_profiles() -> list[Profile]:
    target = build_target_workload([(1000, 1000, 1, ""), (2000, 300, 1, ""), (4000, 1000, 2, "")], 1.0)
    fixed = {"target": target.to_json()}
    return [fgd_paper_profile("fgd", 0, fixed), fgd_paper_profile("clustering", 0, None),
            fgd_paper_profile("bestfit", 0, None)]


# ------------------------------------------------------------------------------------------ simulator side
SIM_OPS = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([1, 2, 4, 8]), st.integers(1, 2)),
    st.tuples(st.just("advance"), st.integers(1, 400)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("fail_node"), st.integers(0, 5)),
    st.tuples(st.just("repair_node"), st.integers(0, 5)),
    st.tuples(st.just("fail_device"), st.integers(0, 5), st.integers(0, 3)),
    st.tuples(st.just("add_node"), st.integers(6, 9)),
    st.tuples(st.just("remove_node"), st.integers(0, 9)),
    st.tuples(st.just("cordon"), st.integers(0, 5)),
    st.tuples(st.just("uncordon"), st.integers(0, 5)),
    st.tuples(st.just("device_health"), st.integers(0, 5), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("drain"), st.integers(0, 5)),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("migrate"), st.integers(0, 30)),
)


@dataclass
class SimWorld:
    sim: Simulation
    target: SimTarget
    probes: list[tuple[Scheduler, Profile]]
    jobs: list[str] = field(default_factory=list)

    @classmethod
    def make(cls) -> SimWorld:
        state = ClusterState([_node(i) for i in range(6)])
        sim = Simulation(state, "fifo", placement_policy="default", slowdown=False)
        probes = [(Scheduler(state, p), p) for p in _probe_profiles()]
        return cls(sim, SimTarget(sim.scheduler), probes)

    def node(self, i: int) -> str | None:
        s = self.sim.state
        name = f"n{i}"
        return name if name in s.node_index and s.present[s.node_index[name]] else None

    def pod(self, k: int) -> str | None:
        keys = sorted(self.sim.state.allocations)
        return keys[k % len(keys)] if keys else None

    def apply(self, op: tuple[Any, ...]) -> None:
        sim, s, kind = self.sim, self.sim.state, op[0]
        if kind == "submit":
            jid = f"j{len(self.jobs)}"
            self.jobs.append(jid)
            sim.submit(JobSpec(jid, sim.now, op[1], 300.0, gpus_per_task=max(op[1] // op[2], 1),
                               tenant=f"t{len(self.jobs) % 2}"))
            sim.run_until(sim.now)
        elif kind == "advance":
            sim.run_until(sim.now + op[1])
        elif kind == "cancel" and self.jobs:
            sim.cancel(self.jobs[op[1] % len(self.jobs)])
        elif kind == "add_node":
            if f"n{op[1]}" not in s.node_index:
                sim.add_node(_node(op[1], gpus=8 if op[1] % 2 else 2))
        elif kind == "release":
            key = self.pod(op[1])
            if key is not None:
                self.target.release(key)
        elif kind == "migrate":
            key = self.pod(op[1])
            if key is not None:
                self.target.migrate(key)
        elif (name := self.node(op[1])) is not None:
            if kind == "fail_node":
                sim.fail_node(name)
            elif kind == "repair_node":
                sim.repair_node(name)
            elif kind == "fail_device" and op[2] < s.dev_count[s.node_index[name]]:
                sim.fail_device(name, op[2])
            elif kind == "remove_node":
                sim.remove_node(name)
            elif kind == "cordon":
                self.target.cordon(name)
            elif kind == "uncordon":
                self.target.uncordon(name)
            elif kind == "device_health" and op[2] < s.dev_count[s.node_index[name]]:
                self.target.set_device_health(name, op[2], op[3])
            elif kind == "drain":
                self.target.drain(name)


def test_a_cordon_by_the_remediation_target_is_counted_at_once() -> None:
    """The issue's reproduction: cordon an 8-GPU node through ``SimTarget.cordon`` and the engine's usable GPUs
    drop by 8 without anybody telling the engine."""
    sim = Simulation(ClusterState([_node(i, gpus=8) for i in range(3)]), "fifo")
    assert sim.engine.totals.gpus == 24
    SimTarget(sim.scheduler).cordon("n1")
    assert sim.engine.totals.gpus == 16
    check_engine(sim.engine)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(SIM_OPS, min_size=1, max_size=25))
def test_simulator_and_remediation_leave_every_cached_capacity_figure_right(ops: list[tuple[Any, ...]]) -> None:
    world = SimWorld.make()
    for op in ops:
        world.apply(op)
        check_engine(world.sim.engine)
        check_state(world.sim.state)
        check_plugin_caches(world.probes, world.sim.state)


# ------------------------------------------------------------------------------------------ Kubernetes side
class ClusterPlacer:
    """The engine's Placer over an informer-fed ``KubeCluster``, binding in memory (no API server): decide under
    the cluster lock, bind the group whole (``Scheduler.bind_group``), release by deleting the pods."""

    def __init__(self, cluster: KubeCluster) -> None:
        self.cluster = cluster

    @property
    def state(self) -> ClusterState:
        return self.cluster.state

    def place(self, job: Any, pods: Sequence[Pod]) -> GroupDecision:
        group = self.cluster.decide_group(pods)
        if group.ok:
            result = self.cluster.scheduler.bind_group(group.decisions)
            assert result.ok
        return group

    def release(self, job: Any, pod_keys: Sequence[str]) -> None:
        for key in pod_keys:
            self.cluster.delete_pod(key)


KUBE_OPS = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([1, 2, 4]), st.integers(1, 2)),
    st.tuples(st.just("advance"), st.integers(1, 400)),
    st.tuples(st.just("cancel"), st.integers(0, 30)),
    st.tuples(st.just("add_node"), st.integers(0, 7), st.sampled_from([2, 4, 8])),
    st.tuples(st.just("cordon"), st.integers(0, 7), st.booleans()),
    st.tuples(st.just("bad_device"), st.integers(0, 7), st.integers(0, 3)),
    st.tuples(st.just("delete_node"), st.integers(0, 7)),
    st.tuples(st.just("foreign_pod"), st.integers(0, 7), st.integers(0, 99)),
    st.tuples(st.just("delete_foreign"), st.integers(0, 99)),
)


@dataclass
class KubeWorld:
    cluster: KubeCluster
    engine: JobEngine
    now: float = 10_000.0
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    foreign: set[str] = field(default_factory=set)

    @classmethod
    def make(cls) -> KubeWorld:
        now = 10_000.0
        cluster = KubeCluster(registry(), "binpack", clock=lambda: now, handshake_timeout=1e12)
        objs = {f"n{i}": node_obj(f"n{i}", now=now, gpus=4) for i in range(4)}
        cluster.set_nodes(objs.values())
        queue = make_policy("fifo")
        with cluster.lock:
            engine = JobEngine(ClusterPlacer(cluster), queue, kernel=Kernel(now))
        return cls(cluster, engine, now, objs)

    def apply(self, op: tuple[Any, ...]) -> None:
        c, e, kind = self.cluster, self.engine, op[0]
        name = f"n{op[1]}" if kind in ("add_node", "cordon", "bad_device", "delete_node", "foreign_pod") else ""
        with c.lock:
            if kind == "submit":
                jid = f"k{len(self.jobs)}"
                self.jobs.append(jid)
                e.submit(JobSpec(jid, e.now, op[1], 300.0, gpus_per_task=max(op[1] // op[2], 1)))
                e.run_until(e.now)
            elif kind == "advance":
                e.run_until(e.now + op[1])
            elif kind == "cancel" and self.jobs:
                e.cancel(self.jobs[op[1] % len(self.jobs)])
            elif kind == "add_node" and name not in self.nodes:
                self.nodes[name] = node_obj(name, now=self.now, gpus=op[2])
                c.apply_node(self.nodes[name])
            elif kind == "cordon" and name in self.nodes:
                self.nodes[name].setdefault("spec", {})["unschedulable"] = op[2]
                c.apply_node(self.nodes[name])
            elif kind == "bad_device" and name in self.nodes:
                spec = c.nodes[name].spec
                if op[2] < len(spec.devices):
                    devices = tuple(d if d.index != op[2] else DeviceSpec(d.uuid, d.index, d.vendor, d.model,
                                                                           d.memory_mib, healthy=False,
                                                                           max_tasks=d.max_tasks)
                                    for d in spec.devices)
                    obj = node_obj(name, now=self.now, gpus=len(devices))
                    obj["spec"] = self.nodes[name].get("spec", {})
                    fresh = node_manifest(NodeSpec(spec.name, spec.cpu_milli, spec.memory_mib, devices=devices,
                                                   rack=spec.rack, leaf=spec.leaf), registry(), self.now)
                    obj["metadata"]["annotations"] = fresh["metadata"]["annotations"]
                    self.nodes[name] = obj
                    c.apply_node(obj)
            elif kind == "delete_node" and name in self.nodes:
                del self.nodes[name]
                c.delete_node(name)
            elif kind == "foreign_pod" and name in self.nodes:
                key = f"default/f{op[2]}"
                if key not in self.foreign and key not in c.state.allocations:
                    pod = pod_obj(f"f{op[2]}", cores=25, mem=4000)
                    d = c.decide(parse_pod(pod, registry()), candidates=[name])
                    if d.ok and d.allocation is not None:
                        c.scheduler.cache.forget(d.pod.key)  # another scheduler binds it; the informer reports it
                        pod["metadata"]["annotations"].update(decision_annotations(d.allocation, registry(), self.now))
                        pod["spec"]["nodeName"] = name
                        c.apply_pod(pod)
                        self.foreign.add(key)
            elif kind == "delete_foreign" and self.foreign:
                key = sorted(self.foreign)[op[1] % len(self.foreign)]
                self.foreign.discard(key)
                c.delete_pod(key)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(KUBE_OPS, min_size=1, max_size=25))
def test_informer_updates_leave_every_cached_capacity_figure_right(ops: list[tuple[Any, ...]]) -> None:
    world = KubeWorld.make()
    for op in ops:
        world.apply(op)
        with world.cluster.lock:
            check_engine(world.engine)
            check_state(world.cluster.state)
