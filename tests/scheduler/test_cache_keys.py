"""Every cache answers for its own inputs only: two inputs that differ in nothing but the field its key must hold
never share an answer.

* DeviceFit's per request-kind verdicts (``_FitCache``): pods that differ only in ``nvidia.com/vgpu-mode`` or
  only in one vendor's device constraints (``nvidia.com/use-gputype`` against ``hygon.com/use-dcutype`` ...).
* Per-node rows kept by node generation (DeviceFit, FGD, stranding FGD, GPU clustering): a plugin that served
  one :class:`ClusterState` must not answer for another whose node generations happen to be the same numbers.

Each answer is compared with a fresh plugin's (or a full pass over every device), which has no cache to get
wrong."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.devices import hami
from gpucluster.model import (
    ClusterState,
    ContainerRequest,
    DeviceConstraints,
    DeviceRequest,
    DeviceSpec,
    NodeSpec,
    Pod,
    Snapshot,
)
from gpucluster.scheduler import Scheduler, binpack_spread_profile
from gpucluster.scheduler.framework import CycleState, Handle, PluginConfig, Reason
from gpucluster.scheduler.plugins.baselines import GpuClusteringScore
from gpucluster.scheduler.plugins.devicefit import DeviceFit, device_stages
from gpucluster.scheduler.plugins.fragmentation import FGDScore, StrandingFGDScore
from gpucluster.scheduler.plugins.fragmentation.measure import target_from_counts

MODES = ("hami-core", "mig", "mps")


def _nodes() -> list[NodeSpec]:
    """NVIDIA nodes whose devices differ in model and sharing mode, and Hygon nodes of two DCU models."""
    out = []
    for i in range(6):
        out.append(NodeSpec(
            name=f"nv{i}", cpu_milli=32000, memory_mib=65536,
            devices=tuple(DeviceSpec(f"nv{i}-{j}", j, "nvidia", ("A100", "T4")[(i + j) % 2], memory_mib=24000,
                                     mode=MODES[(i + 2 * j) % 3]) for j in range(2 + i % 3))))
    for i, models in enumerate((("Z100", "Z100"), ("K100_AI", "K100_AI"), ("Z100", "K100_AI"))):
        out.append(NodeSpec(
            name=f"dcu{i}", cpu_milli=32000, memory_mib=65536,
            devices=tuple(DeviceSpec(f"dcu{i}-{j}", j, "hygon", m, memory_mib=16000) for j, m in enumerate(models))))
    return out


NV_A100 = DeviceConstraints(use_types=("A100",))
SELECTIONS: tuple[tuple[dict[str, str], DeviceConstraints], ...] = (
    ({}, DeviceConstraints()),
    ({hami.VGPU_MODE_ANNOTATION: "mig"}, DeviceConstraints()),
    ({hami.VGPU_MODE_ANNOTATION: "hami-core"}, DeviceConstraints()),
    ({hami.VGPU_MODE_ANNOTATION: "mps"}, DeviceConstraints()),
    ({hami.VGPU_MODE_ANNOTATION: "mig,mps"}, DeviceConstraints()),
    ({}, DeviceConstraints(per_vendor={"nvidia": NV_A100})),
    ({}, DeviceConstraints(per_vendor={"nvidia": DeviceConstraints(use_types=("T4",))})),
    ({}, DeviceConstraints(per_vendor={"nvidia": DeviceConstraints(nouse_uuids=("nv3-0", "nv5-1", "nv5-2"))})),
    ({}, DeviceConstraints(per_vendor={"hygon": DeviceConstraints(use_types=("Z100",))})),
    ({}, DeviceConstraints(per_vendor={"hygon": DeviceConstraints(use_types=("K100",))})),
    ({}, DeviceConstraints(per_vendor={"nvidia": DeviceConstraints(use_uuids=("nv1-0", "nv4-1"))})),
    ({}, DeviceConstraints(per_vendor={"nvidia": NV_A100, "hygon": DeviceConstraints(use_types=("Z100",))})),
    ({hami.VGPU_MODE_ANNOTATION: "mig"}, DeviceConstraints(per_vendor={"nvidia": NV_A100})),
)
"""Device selections that differ from one another in one field: the vGPU mode, or one vendor's constraints."""
REQUESTS = (DeviceRequest("nvidia", 1, memory_mib=4000, core_milli=250),
            DeviceRequest("nvidia", 2, memory_mib=0, core_milli=1000),
            DeviceRequest("hygon", 2, memory_mib=2000, core_milli=100))


def _pod(name: str, request: DeviceRequest, selection: tuple[dict[str, str], DeviceConstraints]) -> Pod:
    annotations, constraints = selection
    return Pod(name, containers=(ContainerRequest("c", 1000, 1024, (request,)),), annotations=annotations,
               constraints=constraints)


def _full_pass(state: CycleState, snap: Snapshot) -> np.ndarray:
    """DeviceFit's answer the straightforward way: every device of every node, every time."""
    prep = state.read("DeviceFit")
    out = np.zeros(snap.n_nodes, np.int16)
    for req, vid in prep.all_requests():
        final = device_stages(snap, slice(None), vid, req, prep.allowed, prep.type_bad, options=prep.options)[-1][1]
        out[np.count_nonzero(final, axis=1) < req.count] = Reason.DeviceDoesNotFit
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.permutations(range(len(SELECTIONS))), st.lists(st.integers(0, 20), max_size=6))
def test_devicefit_never_shares_verdicts_between_device_selections(order: list[int], placements: list[int]) -> None:
    """One DeviceFit (one cache) answers every request under every selection, in any order, with some pods
    placed in between; each answer is the full pass's for that pod."""
    state = ClusterState(_nodes())
    sched = Scheduler(state, binpack_spread_profile())
    plugin = DeviceFit(sched.framework.handle)
    distinct = 0
    for step, k in enumerate(order):
        if step < len(placements):  # the cluster changes a little between some of the questions
            sched.schedule_and_bind(_pod(f"p{step}", REQUESTS[placements[step] % 3], SELECTIONS[placements[step] % 5]))
        snap = state.snapshot()
        answers = set()
        for r, request in enumerate(REQUESTS):
            probe = _pod(f"probe-{k}-{r}", request, SELECTIONS[k])
            cycle = CycleState()
            if not plugin.pre_filter(cycle, probe, snap).ok:
                continue
            got = plugin.filter(cycle, probe, snap)
            assert np.array_equal(got, _full_pass(cycle, snap)), (SELECTIONS[k], request)
            answers.add(got.tobytes())
        distinct += len(answers)
    assert distinct > len(order)  # the selections do lead to different answers: the test can tell them apart


def test_each_vendor_constraint_and_mode_selects_other_devices() -> None:
    """The selections above are not equivalent: each one gets other nodes than any other for some request
    (otherwise the property above could not fail)."""
    state = ClusterState(_nodes())
    sched = Scheduler(state, binpack_spread_profile())
    snap = state.snapshot()
    seen: dict[bytes, list[int]] = {}
    for k, selection in enumerate(SELECTIONS):
        key = b""
        for request in REQUESTS:
            plugin = DeviceFit(sched.framework.handle)  # fresh: no cache
            cycle = CycleState()
            probe = _pod("p", request, selection)
            key += plugin.filter(cycle, probe, snap).tobytes() if plugin.pre_filter(cycle, probe, snap).ok else b"x"
        seen.setdefault(key, []).append(k)
    assert all(len(ks) == 1 for ks in seen.values()), seen


# ------------------------------------------------------------------------------------------ another ClusterState
def _twin_states() -> tuple[ClusterState, ClusterState, list[Pod]]:
    """Two clusters of one shape: on ``busy`` pods hold most of n0's GPUs, ``idle`` holds nothing, and n0 has
    the same ``node_generation`` in both (a no-op change on ``idle`` moves it there)."""
    nodes = [NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20,
                      devices=tuple(DeviceSpec(f"n{i}-{j}", j, "nvidia", "V100", 32768) for j in range(4)))
             for i in range(3)]
    busy, idle = ClusterState(nodes), ClusterState(nodes)
    base = binpack_spread_profile()
    sched = Scheduler(busy, base.model_copy(update={"plugins": [PluginConfig(name="NodeName"), *base.plugins]}))
    whole = ContainerRequest("c", 8000, 1024, (DeviceRequest("nvidia", 1, memory_pct=100, core_milli=1000),))
    half = ContainerRequest("c", 2000, 1024, (DeviceRequest("nvidia", 1, memory_mib=8000, core_milli=500),))
    for k, c in enumerate((whole, whole, whole, half)):
        d = sched.schedule_and_bind(Pod(f"b{k}", containers=(c,), annotations={"gpucluster.io/node-name": "n0"}))
        assert d.ok
    placed_on = {a.node for a in busy.allocations.values()}
    assert placed_on == {"n0"}, placed_on
    while idle.node_generation[0] < busy.node_generation[0]:
        idle.set_schedulable("n0", True)  # a no-op that bumps n0's generation
    assert idle.node_generation[0] == busy.node_generation[0]
    probes = [Pod("q1", containers=(whole,)), Pod("q2", containers=(half,))]
    return busy, idle, probes


TARGET = target_from_counts(Counter({(8000, 1000, 1, ""): 3, (2000, 500, 1, ""): 2, (4000, 250, 1, ""): 1}))
"""A fixed target workload: a learned one would differ between a plugin that has seen more pods and a fresh one."""
PLUGINS = {
    "DeviceFit": None,
    "FGDScore": lambda: FGDScore(TARGET),
    "StrandingFGDScore": lambda: StrandingFGDScore(TARGET),
    "GpuClusteringScore": GpuClusteringScore,
}


def _answer(plugin: object, pod: Pod, snap: Snapshot) -> np.ndarray:
    cycle = CycleState()
    candidates = np.arange(snap.n_nodes)
    if isinstance(plugin, DeviceFit):
        assert plugin.pre_filter(cycle, pod, snap).ok
        return np.asarray(plugin.filter(cycle, pod, snap)).copy()
    if isinstance(plugin, FGDScore):
        plugin.pre_filter(cycle, pod, snap)
    assert isinstance(plugin, FGDScore | GpuClusteringScore)
    return np.asarray(plugin.score(cycle, pod, snap, candidates)).copy()


@pytest.mark.parametrize("name", sorted(PLUGINS))
def test_rows_of_another_cluster_state_are_never_reused(name: str) -> None:
    busy, idle, probes = _twin_states()
    factory = PLUGINS[name]

    def fresh() -> object:
        return DeviceFit(Handle()) if factory is None else factory()

    kept = fresh()
    for state in (busy, idle, busy):
        snap = state.snapshot()
        for pod in probes:
            assert np.array_equal(_answer(kept, pod, snap), _answer(fresh(), pod, snap)), (name, pod.name)
    # and the two clusters really do differ on n0 for these pods (else the test could not fail)
    differ = [not np.array_equal(_answer(fresh(), p, busy.snapshot()), _answer(fresh(), p, idle.snapshot()))
              for p in probes]
    assert any(differ)
