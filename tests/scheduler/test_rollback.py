"""The framework's rollback paths: whatever fails after a plugin reserved something, nothing of it stays.

* A Reserve plugin that fails: every Reserve plugin before it (quota charge, gang membership, devices) is
  unreserved, on every node tried.
* A pod rejected at Permit: its Reserve bookkeeping is undone.
* A group whose later member's bind fails: the members already bound give their devices, quota and gang
  places back, and the room goes to the next group at once.

The faults are injected by plugins named for them (``FaultyReserve``, ``FaultyPermit``, ``FaultyBinder``): the
API server refusing a Binding can be caused for real (``tests/integration``), a plugin failing at Reserve or
Permit only by a plugin that does. Everything else is the real framework, scheduler, quota tree and gang plugin,
and the checks read what users see: which pods hold devices, what a tenant is charged, and whether the next
pods of that tenant fit."""

from __future__ import annotations

from gpucluster.jobs import JobEngine, JobSpec, JobState, SchedulerPlacer, make_policy
from gpucluster.model import (
    Allocation,
    ClusterState,
    ContainerRequest,
    DeviceRequest,
    DeviceSpec,
    NodeSpec,
    Pod,
    Snapshot,
)
from gpucluster.scheduler import Scheduler
from gpucluster.scheduler.framework import Code, CycleState, Handle, PluginConfig, Profile, Status
from gpucluster.scheduler.plugins import builtin_registry
from gpucluster.scheduler.plugins.gang import Gang
from gpucluster.scheduler.plugins.quota import QueueSpec, QuotaTree

TENANT = "team"
QUOTA = 2.0


class FaultyReserve:
    """A Reserve plugin that refuses the nodes in ``nodes`` (all nodes when None) while ``on``."""

    name = "FaultyReserve"

    def __init__(self) -> None:
        self.on = True
        self.nodes: set[int] | None = None
        self.refused: list[tuple[str, int]] = []

    def reserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if self.on and (self.nodes is None or node in self.nodes):
            self.refused.append((pod.key, node))
            return Status.unschedulable(self.name, "injected fault at Reserve")
        return Status.success()

    def unreserve(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> None:
        return None


class FaultyPermit:
    """A Permit plugin that rejects pods labelled ``reject``."""

    name = "FaultyPermit"

    def permit(self, state: CycleState, pod: Pod, snap: Snapshot, node: int) -> Status:
        if pod.labels.get("reject"):
            return Status.unschedulable(self.name, "injected rejection at Permit")
        return Status.success()


class FaultyBinder:
    """A Bind plugin that refuses the pods in ``refuse`` (as an API server refusing the Binding would) and
    binds the rest; it records, nothing else: confirming or giving back is the scheduler's work."""

    name = "FaultyBinder"

    def __init__(self) -> None:
        self.refuse: set[str] = set()
        self.bound: list[str] = []

    def bind(self, pod: Pod, allocation: Allocation) -> Status:
        if pod.key in self.refuse:
            return Status.error(self.name, "injected: the Binding was refused")
        self.bound.append(pod.key)
        return Status.success()


def _state(nodes: int = 2, gpus: int = 4) -> ClusterState:
    return ClusterState([NodeSpec(name=f"n{i}", cpu_milli=64000, memory_mib=1 << 20, leaf="l0", spine="s",
                                  devices=tuple(DeviceSpec(f"G{i}-{j}", j, "nvidia", "V100", 32768, nvlink_domain=0)
                                                for j in range(gpus)))
                         for i in range(nodes)])


def _pod(name: str, gpus: int = 1, gang: str = "", members: int = 0, **labels: str) -> Pod:
    c = ContainerRequest("m", 1000, 1024, (DeviceRequest("nvidia", gpus, memory_pct=100, core_milli=1000),))
    return Pod(name=name, namespace=TENANT, containers=(c,), gang=gang, gang_min_member=members, labels=labels)


class _Rig:
    """A scheduler with the quota tree (``TENANT`` limited to ``QUOTA`` GPUs), the gang plugin and the faulty
    plugins at the end of the profile (after every plugin that reserves something)."""

    def __init__(self, nodes: int = 2, gpus: int = 4) -> None:
        self.reserve = FaultyReserve()
        self.permit = FaultyPermit()
        self.binder = FaultyBinder()
        self.tree = QuotaTree([QueueSpec(TENANT, limit={"gpu": QUOTA})])
        reg = builtin_registry()
        reg.register(FaultyReserve.name, lambda args, handle: self.reserve)
        reg.register(FaultyPermit.name, lambda args, handle: self.permit)
        reg.register(FaultyBinder.name, lambda args, handle: self.binder)
        names = ["NodeUnschedulable", "NodeResourcesFit", "DeviceFit", "Gang", "Topology", "Quota",
                 FaultyReserve.name, FaultyPermit.name, FaultyBinder.name]
        profile = Profile(plugins=[PluginConfig(name=n) for n in names], tie_break="first",
                          max_reserve_attempts=4)
        self.state = _state(nodes, gpus)
        self.scheduler = Scheduler(self.state, profile, reg, handle=Handle(services={"quota": self.tree}),
                                   assume_ttl=float("inf"))

    @property
    def gang(self) -> Gang:
        plugin = self.scheduler.framework.plugin("Gang")
        assert isinstance(plugin, Gang)
        return plugin

    def charged(self) -> float:
        return self.tree.used[TENANT]["gpu"]

    def quota_left_for_two(self) -> bool:
        """Whether the tenant can still place two one-GPU pods (its whole quota) now; they are removed again."""
        placed = [self.scheduler.schedule_and_bind(_pod(f"probe-{k}")) for k in range(2)]
        ok = all(d.ok for d in placed)
        for d in placed:
            if d.ok:
                self.scheduler.delete(d.pod.key)
                self.tree.refund(d.pod.key)
        return ok


def test_a_reserve_plugin_that_fails_leaves_no_earlier_reservation() -> None:
    rig = _Rig()
    d = rig.scheduler.schedule(_pod("x-0", gang="x", members=2))
    assert not d.ok and d.status.code == Code.UNSCHEDULABLE
    assert {node for _, node in rig.reserve.refused} == {0, 1}  # tried on every node, refused on each
    assert rig.state.allocations == {}
    assert rig.charged() == 0.0  # Quota reserved before the fault: refunded
    assert rig.gang.reserved("x") == 0  # Gang reserved before the fault: forgotten
    assert rig.scheduler.framework.waiting_pods == {}
    rig.reserve.on = False
    assert rig.quota_left_for_two()  # the tenant's whole quota is there for its next pods
    group = rig.scheduler.schedule_group([_pod(f"x2-{k}", gang="x", members=2) for k in range(2)])
    assert group.ok, group.message()  # the gang starts afresh: no member left over from the failed attempt


def test_a_reserve_failure_on_one_node_leaves_nothing_there_when_the_pod_goes_elsewhere() -> None:
    rig = _Rig()
    rig.reserve.nodes = {0}  # the preferred node fails at Reserve; the next one is tried
    d = rig.scheduler.schedule_and_bind(_pod("y"))
    assert d.ok and d.node == "n1"
    assert set(rig.state.allocations) == {f"{TENANT}/y"}
    assert rig.charged() == 1.0  # charged once, for the node it holds
    rig.scheduler.delete(d.pod.key)
    rig.tree.refund(d.pod.key)
    assert rig.charged() == 0.0 and rig.state.allocations == {}


def test_a_pod_rejected_at_permit_keeps_no_reserve_bookkeeping() -> None:
    rig = _Rig()
    rig.reserve.on = False
    d = rig.scheduler.schedule(_pod("z-0", gang="z", members=1, reject="yes"))
    assert not d.ok and d.status.plugin == FaultyPermit.name
    assert rig.state.allocations == {} and rig.scheduler.framework.waiting_pods == {}
    assert rig.charged() == 0.0
    assert rig.gang.reserved("z") == 0
    assert rig.quota_left_for_two()


def test_a_group_whose_later_bind_fails_keeps_no_bound_members_devices() -> None:
    """Member 0 binds, member 1's Binding is refused: member 0 gives its devices, quota and gang place back,
    and another group of the same tenant takes the whole quota at once."""
    rig = _Rig(nodes=2, gpus=1)
    rig.reserve.on = False
    pods = [_pod(f"g-{k}", gang="g", members=2) for k in range(2)]
    rig.binder.refuse = {pods[1].key}
    group = rig.scheduler.schedule_group(pods)
    assert not group.ok
    assert rig.binder.bound == [pods[0].key]  # member 0 really was bound before member 1 failed
    assert rig.state.allocations == {}
    assert rig.charged() == 0.0 and rig.gang.reserved("g") == 0
    assert rig.scheduler.framework.waiting_pods == {}
    again = rig.scheduler.schedule_group([_pod(f"h-{k}", gang="h", members=2) for k in range(2)])
    assert again.ok, again.message()  # both GPUs of the cluster, the tenant's whole quota


def test_the_engine_gives_a_job_whose_bind_fails_nothing_and_the_room_to_the_next() -> None:
    """Through the job engine (every driver places a job's pods through the same group routine): a two-task
    job whose second Binding is refused stays queued holding nothing, and a job that needs the whole cluster
    starts in the same pass; once the binder works again the first job runs."""
    rig = _Rig(nodes=2, gpus=1)
    rig.reserve.on = False
    engine = JobEngine(SchedulerPlacer(rig.scheduler), make_policy("sjf"), quota=rig.tree)
    engine.submit(JobSpec("pair", 0.0, 2, 10.0, tenant=TENANT, gpus_per_task=1))  # shorter: tried first
    engine.submit(JobSpec("whole", 0.0, 2, 50.0, tenant="other", gpus_per_task=1))
    rig.binder.refuse = {f"{TENANT}/pair-1-1"}  # the second task's pod
    engine.run_until(1.0)
    assert engine.job("pair").state == JobState.QUEUED
    assert engine.job("whole").state == JobState.RUNNING  # it got both GPUs: nothing of 'pair' stayed held
    assert rig.charged() == 0.0
    rig.binder.refuse = set()
    engine.run()
    assert engine.job("pair").state == JobState.SUCCEEDED and engine.job("whole").state == JobState.SUCCEEDED
    assert rig.state.allocations == {} and rig.charged() == 0.0
