"""The scheduler's view of a Kubernetes cluster: Node and Pod objects in, a :class:`Scheduler` over a
:class:`ClusterState` out. Pure with respect to the network (the informer feeds it objects; tests do too).

* Nodes become rows of the state; a node whose devices change gets the state rebuilt (allocations carried
  over); readiness, cordon, device health and the HAMi handshake are updated in place.
* Bound pods are *accounted*: their allocation is read back from HAMi's decision annotations, so a
  restarted scheduler rebuilds device usage from the API server and never hands a device out twice.
* ``decide`` runs the unchanged scheduler core with one extra Filter plugin, ``KubeNodeGate``: nodes that are
  not Ready, whose device-plugin handshake is older than the timeout, or that kube-scheduler did not offer
  (extender mode) are rejected with their own reason codes.
* **Reservations** (the control plane's admitted jobs): an allocation held under a task key (``reserve``) for
  as long as the job is admitted, whatever pods come and go. A pod bound into one (annotation
  ``gpucluster.io/reservation: <task key>``) is *aliased* to it and not accounted again; when it ends, the
  reservation stays for the pod that replaces it; ``unreserve`` frees it at once and ignores its pods until they
  are gone. A bound pod naming a reservation that does not exist (yet: a restart) holds its own devices until
  the reservation is made, which then takes them over.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.convert import (
    KubeInputError,
    NodeInfo,
    allocation_from_pod,
    node_info,
    parse_pod,
    pod_holds_resources,
    pod_key,
    pod_node,
)
from gpucluster.kubernetes.dra import (
    CLAIM_KEY_PREFIX,
    ClaimInfo,
    ClaimRequest,
    DeviceClassInfo,
    DraInputError,
    Selectors,
    SliceDevice,
    SliceInfo,
    consumption,
    held,
    merge_devices,
    parse_claim,
    parse_class,
    parse_slice,
    unreadable_claim,
    unreadable_class,
)
from gpucluster.model import (
    Allocation,
    AllocationError,
    ClusterState,
    ContainerRequest,
    DeviceGrant,
    DeviceRequest,
    NodeSpec,
    Pod,
    Snapshot,
)
from gpucluster.model.labels import RESERVATION_ANNOTATION
from gpucluster.scheduler import Decision, GroupDecision, Outcome, Scheduler, profile_for
from gpucluster.scheduler.framework import (
    BindPlugin,
    CycleState,
    Handle,
    PluginConfig,
    PluginRegistry,
    Profile,
    Reason,
    ReasonArray,
)
from gpucluster.scheduler.plugins import builtin_registry

log = logging.getLogger(__name__)

GATE_PLUGIN = "KubeNodeGate"
BINDER_PLUGIN = "KubeBinder"
DRA_CONTAINER_PREFIX = "dra:"
"""Name prefix of the pseudo container that carries one ResourceClaim's device requests through the scheduler
(``dra:<namespace>/<claim>``; ``dra:`` alone for the claim of the pod's DRA-backed extended resources)."""
DRA_ENTRY_PREFIX = "dra-entry:"
"""Name prefix of the pseudo container that carries one ``spec.resourceClaims`` entry of a queued Job's pod
template through the control plane's admission (``dra-entry:<entry name>``): the claim may not exist yet (one is
made per pod from a ResourceClaimTemplate), so the devices are chosen for the task, held in its reservation and
written to the pod's claim when the pod binds (:meth:`KubeCluster.slot_claim_plan`)."""


class ClaimNotReadyError(KubeInputError):
    """A pod's ResourceClaim cannot be allocated now (not created yet, being deleted, a mode we do not
    allocate); the message says which and why."""


@dataclasses.dataclass(frozen=True, slots=True)
class ClaimResult:
    """One device an allocation gives a claim request."""

    request: str
    device: SliceDevice
    memory_mib: int
    core_milli: int


@dataclasses.dataclass(slots=True)
class ClaimPlan:
    """What binding a pod must write to its ResourceClaims first: per claim (``namespace/name``; ``""`` for the
    extended-resource claim to create), the devices chosen (none for a claim that is allocated already, which
    only gets the pod in ``reservedFor``)."""

    pod_key: str
    node: str
    claims: dict[str, list[ClaimResult]]
    extended_requests: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    """The extended-resource claim's ``spec.devices.requests`` (kube-scheduler's naming)."""
    extended_mappings: list[dict[str, str]] = dataclasses.field(default_factory=list)
    """``status.extendedResourceClaimStatus.requestMappings`` for the pod."""
    written: list[str] | None = None
    """The claims (``namespace/name``) written so far, once the binder wrote them (None before)."""
    undo: list[Any] = dataclasses.field(default_factory=list)
    """How to take the writes back (the binder's steps, last first)."""
    checked: bool = False
    """The written claims were read back from the server with every other claim and no device of theirs is held
    beyond its capacity by another claim (the secondary scheduler's settle check, else the bind's own)."""


class NodeGate:
    """Filter: rejects nodes that are not Ready (``NodeNotReady``), whose device plugin stopped reporting
    (``NodeHandshakeTimeout``) and, while ``candidates`` is set, nodes outside it (``NodeUnschedulable``).
    Reads arrays the cluster keeps per node index; never mutates anything."""

    name = GATE_PLUGIN

    def __init__(self, clock: Callable[[], float], handshake_timeout: float) -> None:
        self.clock = clock
        self.handshake_timeout = handshake_timeout
        self.ready: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
        self.handshake: npt.NDArray[np.float64] = np.zeros(0, np.float64)
        self.has_devices: npt.NDArray[np.bool_] = np.zeros(0, np.bool_)
        self.candidates: npt.NDArray[np.bool_] | None = None

    def resize(self, n: int) -> None:
        grow = n - self.ready.size
        if grow > 0:
            self.ready = np.concatenate([self.ready, np.zeros(grow, np.bool_)])
            self.handshake = np.concatenate([self.handshake, np.full(grow, np.inf)])
            self.has_devices = np.concatenate([self.has_devices, np.zeros(grow, np.bool_)])

    def stale(self) -> npt.NDArray[np.bool_]:
        """Nodes with devices whose handshake is older than the timeout (now)."""
        age = self.clock() - self.handshake
        return self.has_devices & (age > self.handshake_timeout)

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        n = snap.n_nodes
        out = np.zeros(n, np.int16)
        out[~self.ready[:n]] = Reason.NodeNotReady
        if pod.device_requests:
            out[(out == 0) & self.stale()[:n]] = Reason.NodeHandshakeTimeout
        if self.candidates is not None:
            out[(out == 0) & ~self.candidates[:n]] = Reason.NodeUnschedulable
        return out


def kube_profile(policy: str, *, binder: bool, seed: int = 0, scheduler_name: str = "gpucluster",
                 base: Profile | None = None) -> Profile:
    """The named placement profile (or ``base``) with the gate first (and ``NodeSelector``: a pod's
    ``spec.nodeSelector``) and (optionally) the Kubernetes binder last."""
    base = base or profile_for(policy, seed)
    plugins = [PluginConfig(name=GATE_PLUGIN), *base.plugins]
    if not any(p.name == "NodeSelector" for p in plugins):
        plugins.insert(1, PluginConfig(name="NodeSelector"))
    if binder:
        plugins.append(PluginConfig(name=BINDER_PLUGIN))
    return base.model_copy(update={"plugins": plugins, "scheduler_name": scheduler_name})


def kube_registry() -> PluginRegistry:
    """Built-in plugins plus the gate and the binder; both are services handed in through the Handle."""
    reg = builtin_registry()
    reg.register(GATE_PLUGIN, lambda args, handle: handle.services["kube_gate"])
    reg.register(BINDER_PLUGIN, lambda args, handle: handle.services["kube_binder"])
    return reg


class KubeCluster:
    """Nodes and pods as the API server reports them, and the scheduler deciding over them.

    Thread-safe: every public method holds ``lock`` (an ``RLock``); callers that decide and then assume
    must hold it across both (``decide`` does)."""

    def __init__(
        self,
        registry: VendorRegistry,
        placement_policy: str = "default",
        *,
        binder: BindPlugin | None = None,
        handshake_timeout: float = 60.0,
        clock: Callable[[], float] = time.time,
        assume_ttl: float = 30.0,
        nvlink_domain_size: int = 8,
        seed: int = 0,
        scheduler_name: str = "gpucluster",
        profile: Profile | None = None,
        services: Mapping[str, Any] | None = None,
        percentage_of_nodes_to_score: int | None = None,
    ) -> None:
        """``profile``: schedule with it instead of the named ``placement_policy`` (the job engine's profile);
        ``services``: more shared services for the plugins (e.g. the engine's quota tree);
        ``percentage_of_nodes_to_score``: the profile's ``percentage_of_nodes_to_score`` (None: the profile's own,
        100 unless it says otherwise)."""
        self.registry = registry
        self.clock = clock
        self.assume_ttl = assume_ttl
        self.nvlink_domain_size = nvlink_domain_size
        self.binder = binder
        self.profile = kube_profile(placement_policy, binder=binder is not None, seed=seed,
                                    scheduler_name=scheduler_name, base=profile)
        if percentage_of_nodes_to_score is not None:
            self.profile = self.profile.model_copy(
                update={"percentage_of_nodes_to_score": percentage_of_nodes_to_score})
        self.services = dict(services or {})
        self.plugins = kube_registry()
        self.gate = NodeGate(clock, handshake_timeout)
        self.lock = threading.RLock()
        self.nodes: dict[str, NodeInfo] = {}
        self.bound: dict[str, tuple[Pod, str]] = {}
        """Pods bound to a node and not finished: (pod, node)."""
        self.unaccounted: dict[str, str] = {}
        """Bound pods whose usage could not be recorded, with why (logged; exported as a metric)."""
        self.bad_nodes: dict[str, str] = {}
        """Nodes whose objects could not be understood, with why (they get no pods)."""
        self.reserved: dict[str, Allocation] = {}
        """Task key -> the allocation reserved for it (held, never expires) until ``unreserve``."""
        self.aliases: dict[str, str] = {}
        """Pod key -> the reservation it is bound into (its devices are the reservation's)."""
        self.released: set[str] = set()
        """Pods of released reservations: ignored until they are gone (they are being deleted)."""
        self.rebuilds = 0
        self._mask_cache: tuple[tuple[Any, ...], npt.NDArray[np.bool_]] | None = None
        # Dynamic Resource Allocation (resource.k8s.io/v1)
        self.node_objs: dict[str, Mapping[str, Any]] = {}
        """The last Node object seen per name (node rows are derived again when its DRA devices change)."""
        self.slices: dict[str, SliceInfo] = {}
        self.classes: dict[str, DeviceClassInfo] = {}
        self.claims: dict[str, ClaimInfo] = {}
        """ResourceClaims by ``namespace/name``."""
        self.selectors = Selectors()
        self.bad_dra: dict[str, str] = {}
        """DRA objects that could not be understood (``kind name`` -> why)."""
        self._bad_dra_reported: dict[str, str] = {}
        """What a Warning Event said of each unreadable DRA object (a relist does not say it again)."""
        self.claim_plans: dict[str, ClaimPlan] = {}
        """Pod key -> the claim writes its bind must do first (secondary scheduler, control plane)."""
        self.claim_slots: dict[str, str] = {}
        """Claim key -> the reservation whose devices it holds (control plane: a claim of a pod bound into a
        reservation is not accounted again; after ``unreserve`` it is ignored until it is deallocated)."""
        self._slice_devices: dict[str, list[SliceDevice]] = {}
        self._dra_index: dict[str, tuple[str, int]] = {}
        """DRA device key (``driver/pool/device``) -> (node, device index)."""
        self._dra_by_key: dict[str, SliceDevice] = {}
        self._extended_meta: dict[str, list[tuple[str, str, int, str, str]]] = {}
        """Pod key -> per DRA-backed extended resource request: (request name, class, count, container, resource)
        (noted by :meth:`prepare_pod`, dropped when the pod is gone)."""
        self._shared_claims: dict[str, list[str]] = {}
        """Pod key -> claims it uses that are allocated already (its bind adds it to their ``reservedFor``; noted
        by :meth:`prepare_pod`, dropped when the pod is gone)."""
        self.scheduler = self._new_scheduler([])

    # ------------------------------------------------------------------------------------------ plumbing
    def _new_scheduler(self, nodes: list[NodeSpec]) -> Scheduler:
        self.gate = NodeGate(self.clock, self.gate.handshake_timeout)
        handle = Handle(rng=np.random.default_rng(self.profile.seed),
                        services={**self.services, "kube_gate": self.gate, "kube_binder": self.binder})
        sched = Scheduler(ClusterState(nodes), self.profile, self.plugins, clock=time.monotonic, handle=handle,
                          assume_ttl=self.assume_ttl, lock=self.lock)
        self.gate.resize(len(nodes))
        return sched

    @property
    def state(self) -> ClusterState:
        return self.scheduler.state

    def _set_gate_row(self, info: NodeInfo) -> None:
        i = self.state.node_index[info.spec.name]
        self.gate.ready[i] = info.ready
        self.gate.handshake[i] = info.handshake
        self.gate.has_devices[i] = bool(info.spec.devices)

    def _rebuild(self) -> None:
        """New state over the current nodes; allocations (assumed ones stay assumed) carried over."""
        old = self.scheduler
        self.rebuilds += 1
        specs = [info.spec for info in self.nodes.values()]
        self.scheduler = self._new_scheduler(specs)
        # where the next decision starts looking when only a share of the nodes is scored (round-robin)
        self.scheduler.framework.next_start_node = old.framework.next_start_node
        for info in self.nodes.values():
            self._set_gate_row(info)
            if info.unschedulable:
                self.state.set_schedulable(info.spec.name, False)
            self._apply_health(info)
        self._index_dra()
        for key, alloc in old.state.allocations.items():
            if alloc.node not in self.nodes:
                continue
            if key in self.bound or self._claim_allocated(key):
                continue  # re-accounted below from its annotations (claims: their status) on the new rows
            if key in self.reserved:
                try:
                    self.state.assign(alloc)
                except AllocationError as exc:
                    log.warning("reservation %s dropped on rebuild: %s", key, exc)
                    del self.reserved[key]
                continue
            try:
                self.scheduler.cache.assume(alloc)
            except AllocationError as exc:
                log.warning("assumed allocation of %s dropped on rebuild: %s", key, exc)
        for key in list(self.bound):
            self._account(key)
        for claim in list(self.claims.values()):
            self._account_claim(claim)

    def _apply_health(self, info: NodeInfo) -> None:
        for dev in info.spec.devices:
            i = self.state.node_index[info.spec.name]
            if bool(self.state.dev_healthy[i, dev.index]) != dev.healthy:
                self.state.set_device_health(info.spec.name, dev.index, dev.healthy)

    # ------------------------------------------------------------------------------------------ nodes
    def _parse_node(self, obj: Mapping[str, Any]) -> NodeInfo | None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        if name:
            self.node_objs[name] = obj
        try:
            info = node_info(obj, self.registry, self.nvlink_domain_size)
        except (KubeInputError, ValueError) as exc:
            log.warning("node %s ignored: %s", name, exc)
            self.bad_nodes[name] = str(exc)
            return None
        self.bad_nodes.pop(name, None)
        dra = self._slice_devices.get(name)
        if dra:
            info = dataclasses.replace(info, spec=merge_devices(info.spec, dra, self.nvlink_domain_size))
        return info

    def set_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync (a list): exactly these nodes exist."""
        with self.lock:
            self.nodes = {}
            self.node_objs = {}
            self.bad_nodes = {}  # a bad node deleted while the watch was down is no longer counted
            for obj in objs:
                info = self._parse_node(obj)
                if info is not None:
                    self.nodes[info.spec.name] = info
            self._rebuild()

    def apply_node(self, obj: Mapping[str, Any]) -> None:
        """A node was added or changed."""
        with self.lock:
            info = self._parse_node(obj)
            if info is None:
                name = str((obj.get("metadata") or {}).get("name") or "")
                if name in self.nodes:
                    self.delete_node(name)
                return
            name = info.spec.name
            old = self.nodes.get(name)
            self.nodes[name] = info
            st = self.state
            if old is None and name not in st.node_index:
                st.add_node(info.spec)
                self.gate.resize(st.n_nodes)
                self._set_gate_row(info)
                if info.unschedulable:
                    st.set_schedulable(name, False)
                self._index_dra()
                for key, (_pod, node) in list(self.bound.items()):
                    if node == name:
                        self._account(key)
                for claim in list(self.claims.values()):
                    self._account_claim(claim)
                return
            if old is None or old.signature != info.signature or not st.present[st.node_index[name]]:
                self._rebuild()
                return
            self._set_gate_row(info)
            if old.unschedulable != info.unschedulable:
                st.set_schedulable(name, not info.unschedulable)
            if old.spec.labels != info.spec.labels:  # relabelled: node selectors match its new labels at once
                st.set_labels(name, info.spec.labels, info.spec.pool)
            self._apply_health(info)

    def delete_node(self, name: str) -> None:
        with self.lock:
            self.node_objs.pop(name, None)
            self.bad_nodes.pop(name, None)
            if self.nodes.pop(name, None) is None:
                return
            if name in self.state.node_index:
                self.state.remove_node(name)
            for key, (_pod, node) in self.bound.items():
                if node == name:
                    self.unaccounted[key] = f"node {name} is gone"

    # ------------------------------------------------------------------------------------------ pods
    def _account(self, key: str) -> None:
        """Make the state hold what the bound pod ``key`` holds (idempotent)."""
        pod, node = self.bound[key]
        cache = self.scheduler.cache
        current = self.state.allocations.get(key)
        if current is not None:
            if current.node == node:
                cache.confirm(key)
                self.unaccounted.pop(key, None)
                return
            cache.remove(key)  # assumed on one node, bound to another by someone else
        info = self.nodes.get(node)
        if info is None or node not in self.state.node_index:
            self.unaccounted[key] = f"node {node} is unknown"
            return
        try:
            alloc = allocation_from_pod(pod, info.spec, self.registry)
            self.state.assign(alloc)
        except (KubeInputError, AllocationError) as exc:
            log.warning("bound pod %s not accounted: %s", key, exc)
            self.unaccounted[key] = str(exc)
            return
        self.unaccounted.pop(key, None)

    def apply_pod(self, obj: Mapping[str, Any]) -> None:
        """A pod was added or changed: account it when bound, release it when finished."""
        key = pod_key(obj)
        with self.lock:
            if key in self.released:
                if not pod_holds_resources(obj):
                    self.released.discard(key)
                return
            if key in self.aliases:
                if not pod_holds_resources(obj) and pod_node(obj):  # ended: the reservation waits for the next
                    del self.aliases[key]
                return
            if not pod_holds_resources(obj):
                if pod_node(obj):  # finished
                    self.delete_pod(key)
                return
            reservation = str(((obj.get("metadata") or {}).get("annotations") or {}).get(RESERVATION_ANNOTATION)
                              or "")
            if reservation and reservation in self.reserved:
                self.delete_pod(key)
                self.aliases[key] = reservation
                return
            node = pod_node(obj)
            known = self.bound.get(key)
            if known is not None and known[1] == node and key in self.state.allocations:
                return
            try:
                pod = parse_pod(obj, self.registry)
            except KubeInputError as exc:
                log.warning("bound pod %s not accounted: %s", key, exc)
                self.unaccounted[key] = str(exc)
                return
            self.bound[key] = (pod, node)
            self._account(key)

    def delete_pod(self, key: str) -> None:
        with self.lock:
            self.aliases.pop(key, None)
            self.released.discard(key)
            self._forget_prepared(key)
            if key in self.reserved:
                return  # a reservation, not a pod: only unreserve frees it
            self.bound.pop(key, None)
            self.unaccounted.pop(key, None)
            self.scheduler.cache.remove(key)

    # ------------------------------------------------------------------------------------------ reservations
    def reserve(self, allocations: Sequence[Allocation]) -> None:
        """Hold these allocations (task keys) until :meth:`unreserve`: decided ones (assumed by ``decide_group``)
        are confirmed; others (rebuilt from an admission record) are assigned, first taking over the devices of
        bound pods that name them (``gpucluster.io/reservation``). Raises ``AllocationError`` (nothing held)
        when one does not fit."""
        with self.lock:
            cache = self.scheduler.cache
            done: list[str] = []
            taken: dict[str, tuple[Pod, str]] = {}
            try:
                for alloc in allocations:
                    key = alloc.pod_key
                    held = self.state.allocations.get(key)
                    if held is not None and key not in self.bound:
                        cache.confirm(key)
                    else:
                        for pod_k, (pod, node) in list(self.bound.items()):
                            if pod.annotations.get(RESERVATION_ANNOTATION) == key:
                                taken[pod_k] = (pod, node)
                                self.bound.pop(pod_k)
                                self.unaccounted.pop(pod_k, None)
                                cache.remove(pod_k)
                                self.aliases[pod_k] = key
                                self._claims_to_slot(pod.uid, key)
                        self.state.assign(alloc)
                    self.reserved[key] = alloc
                    done.append(key)
            except AllocationError:
                self.unreserve(done)
                self._give_back(taken, {*done, alloc.pod_key})
                raise

    def _give_back(self, taken: Mapping[str, tuple[Pod, str]], keys: set[str]) -> None:
        """Reservations ``keys`` that were not made (one did not fit): the bound pods (and their claims) they took
        over are bound pods again, accounted as before (or reported unaccounted), not aliases of reservations that
        do not exist. Caller holds the lock."""
        for pod_k, (pod, node) in taken.items():
            if self.aliases.get(pod_k) in keys:
                del self.aliases[pod_k]
            self.released.discard(pod_k)
            self.bound[pod_k] = (pod, node)
            self._account(pod_k)
        for info in list(self.claims.values()):
            if self.claim_slots.get(info.key) in keys:
                del self.claim_slots[info.key]
                self._account_claim(info)

    def _claims_to_slot(self, pod_uid: str, reservation: str) -> None:
        """The claims reserved for the pod ``pod_uid`` hold the devices of ``reservation`` (not accounted again)."""
        if not pod_uid:
            return
        for info in self.claims.values():
            if any(ref[2] == pod_uid for ref in info.reserved_for):
                self.claim_slots[info.key] = reservation
                self.scheduler.cache.remove(info.state_key)
                self.unaccounted.pop(info.state_key, None)

    def unreserve(self, keys: Iterable[str]) -> None:
        """Free reservations at once; the pods bound into them are ignored until they are gone."""
        with self.lock:
            for key in keys:
                if self.reserved.pop(key, None) is None:
                    self.scheduler.cache.forget(key)  # decided, never reserved
                    continue
                self.scheduler.cache.remove(key)
                for pod_k, res in list(self.aliases.items()):
                    if res == key:
                        del self.aliases[pod_k]
                        self.released.add(pod_k)

    def alias(self, pod_k: str, reservation: str) -> None:
        """The pod ``pod_k`` is being bound into ``reservation`` (before the bind, so its bound state is never
        accounted twice)."""
        with self.lock:
            assert reservation in self.reserved, reservation
            self.aliases[pod_k] = reservation

    def unalias(self, pod_k: str) -> None:
        with self.lock:
            self.aliases.pop(pod_k, None)

    def slot_pods(self, reservation: str) -> list[str]:
        """Pods bound (or being bound) into ``reservation``."""
        with self.lock:
            return [p for p, r in self.aliases.items() if r == reservation]

    def set_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync (a list): exactly these pods exist. Assumed, not yet bound pods are kept."""
        with self.lock:
            seen: set[str] = set()
            for obj in objs:
                seen.add(pod_key(obj))
                self.apply_pod(obj)
            for key in [k for k in self.bound if k not in seen]:
                self.delete_pod(key)
            for key in [k for k in self.aliases if k not in seen]:
                del self.aliases[key]
            self.released &= seen
            for key in [k for k in (*self._shared_claims, *self._extended_meta) if k not in seen]:
                self._forget_prepared(key)  # its delete event was missed (a watch that ended)
            for key in [k for k in self.state.allocations
                        if k not in seen and not self.scheduler.cache.is_assumed(k) and k not in self.reserved]:
                self.delete_pod(key)

    # ------------------------------------------------------------------------------------------ DRA objects
    def _reindex_slices(self) -> set[str]:
        """Rebuild node -> DRA devices (newest pool generation only); returns the nodes whose devices changed."""
        newest: dict[tuple[str, str], int] = {}
        for sl in self.slices.values():
            pool = (sl.driver, sl.pool)
            newest[pool] = max(newest.get(pool, sl.generation), sl.generation)
        by_node: dict[str, list[SliceDevice]] = {}
        for sl in self.slices.values():
            if sl.generation != newest[(sl.driver, sl.pool)]:
                continue
            for dev in sl.devices:
                if dev.node:
                    by_node.setdefault(dev.node, []).append(dev)
        changed = {n for n in by_node.keys() | self._slice_devices.keys()
                   if by_node.get(n, []) != self._slice_devices.get(n, [])}
        self._slice_devices = by_node
        self._dra_by_key = {d.key: d for devs in by_node.values() for d in devs}
        return changed

    def _rederive(self, nodes: Iterable[str]) -> None:
        for name in nodes:
            obj = self.node_objs.get(name)
            if obj is not None:
                self.apply_node(obj)

    def _forget_bad_dra(self, kind: str) -> None:
        for label in [k for k in self.bad_dra if k.startswith(kind + " ")]:
            del self.bad_dra[label]

    def _parse_dra(self, kind: str, obj: Mapping[str, Any], parse: Callable[[Mapping[str, Any]], Any]) -> Any:
        """``parse(obj)``, or None when the object cannot be read: then it is counted in :attr:`bad_dra` (the
        overview's ``kubernetes.bad_dra_objects``), logged and, the first time for this reason, a Warning Event
        ``Unreadable`` names it and why."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        ns = str(meta.get("namespace") or "")
        label = f"{kind} {ns + '/' if ns else ''}{meta.get('name')}"
        try:
            out = parse(obj)
        except (DraInputError, ValueError, TypeError, AttributeError, KeyError) as exc:
            why = str(exc) if isinstance(exc, DraInputError) else f"{label}: {type(exc).__name__}: {exc}"
            log.warning("%s cannot be read: %s", label, why)
            self.bad_dra[label] = why
            if self._bad_dra_reported.get(label) != why:
                self._bad_dra_reported[label] = why
                report = getattr(self.binder, "report_unreadable", None)
                if report is not None:
                    report(obj, why, self.profile.scheduler_name)
            return None
        self.bad_dra.pop(label, None)
        self._bad_dra_reported.pop(label, None)
        return out

    def _read_claim(self, obj: Mapping[str, Any]) -> ClaimInfo | None:
        """The claim ``obj``; one that cannot be read is kept as :func:`unreadable_claim` makes it (the devices
        it holds, or held when last read, stay held: never given to a second claim). None: no name to key it."""
        info = self._parse_dra("resourceclaim", obj, parse_claim)
        if info is not None:
            return info  # type: ignore[no-any-return]
        meta = obj.get("metadata")
        if not isinstance(meta, Mapping) or not meta.get("name"):
            return None
        key = f"{meta.get('namespace') or 'default'}/{meta['name']}"
        label = f"resourceclaim {meta.get('namespace') or ''}{'/' if meta.get('namespace') else ''}{meta['name']}"
        return unreadable_claim(obj, self.claims.get(key), self.bad_dra.get(label, "cannot be read"))

    def set_slices(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync of ResourceSlices."""
        with self.lock:
            self._forget_bad_dra("resourceslice")  # those of this kind a relist lists again are added back
            self.slices = {}
            for obj in objs:
                info = self._parse_dra("resourceslice", obj, parse_slice)
                if info is not None:
                    self.slices[info.name] = info
            self._rederive(self._reindex_slices())

    def apply_slice(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            info = self._parse_dra("resourceslice", obj, parse_slice)
            name = str((obj.get("metadata") or {}).get("name") or "")
            if info is None:
                self.slices.pop(name, None)
            else:
                self.slices[name] = info
            self._rederive(self._reindex_slices())

    def delete_slice(self, name: str) -> None:
        with self.lock:
            self.bad_dra.pop(f"resourceslice {name}", None)
            self._bad_dra_reported.pop(f"resourceslice {name}", None)
            if self.slices.pop(name, None) is not None:
                self._rederive(self._reindex_slices())

    def set_classes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        with self.lock:
            self._forget_bad_dra("deviceclass")  # those of this kind a relist lists again are added back
            previous, self.classes = self.classes, {}
            for obj in objs:
                self._apply_class(obj, previous)

    def apply_class(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            self._apply_class(obj, self.classes)

    def _apply_class(self, obj: Mapping[str, Any], previous: Mapping[str, DeviceClassInfo]) -> None:
        """A class that cannot be read is kept marked unreadable (:func:`unreadable_class`): nothing is
        allocated through it until it is fixed (its previous selectors may no longer be what its author wants)."""
        info = self._parse_dra("deviceclass", obj, parse_class)
        if info is None:
            meta = obj.get("metadata")
            name = str(meta.get("name") or "") if isinstance(meta, Mapping) else ""
            if name:
                self.classes[name] = unreadable_class(obj, previous.get(name), self.bad_dra.get(
                    f"deviceclass {name}", "cannot be read"))
            return
        self.classes[info.name] = info

    def delete_class(self, name: str) -> None:
        with self.lock:
            self.bad_dra.pop(f"deviceclass {name}", None)
            self._bad_dra_reported.pop(f"deviceclass {name}", None)
            self.classes.pop(name, None)

    def set_claims(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync of ResourceClaims: exactly these exist (assumed allocations of claims we are writing
        stay until they expire or show up). One that cannot be read is kept as :meth:`_read_claim` says."""
        with self.lock:
            self._forget_bad_dra("resourceclaim")  # those of this kind a relist lists again are added back
            seen = set()
            for obj in objs:
                info = self._read_claim(obj)
                if info is not None:
                    seen.add(info.key)
                    self._put_claim(info)
            for key in [k for k in self.claims if k not in seen]:
                self.delete_claim(key)

    def apply_claim(self, obj: Mapping[str, Any]) -> None:
        with self.lock:
            info = self._read_claim(obj)
            if info is not None:
                self._put_claim(info)

    def delete_claim(self, key: str) -> None:
        with self.lock:
            self.bad_dra.pop(f"resourceclaim {key}", None)
            self._bad_dra_reported.pop(f"resourceclaim {key}", None)
            self.claims.pop(key, None)
            self.claim_slots.pop(key, None)
            self.unaccounted.pop(CLAIM_KEY_PREFIX + key, None)
            self.scheduler.cache.remove(CLAIM_KEY_PREFIX + key)

    def _put_claim(self, info: ClaimInfo) -> None:
        self.claims[info.key] = info
        self._account_claim(info)

    def _index_dra(self) -> None:
        self._dra_index = {}
        for i, node in enumerate(self.state.nodes):
            if not self.state.present[i]:
                continue
            for dev in node.devices:
                if dev.dra:
                    self._dra_index[dev.dra] = (node.name, dev.index)

    def _claim_allocated(self, state_key: str) -> bool:
        if not state_key.startswith(CLAIM_KEY_PREFIX):
            return False
        info = self.claims.get(state_key[len(CLAIM_KEY_PREFIX):])
        return info is not None and info.allocated is not None

    def claim_allocation(self, info: ClaimInfo) -> Allocation | None:
        """What an allocated claim holds on our device rows (None: not allocated, or holds no GPU we know).
        Devices on several nodes (not node-local slices) are held on the first one's node only."""
        if info.allocated is None:
            return None
        grants: list[DeviceGrant] = []
        node = ""
        for r in info.allocated:
            if r.admin:
                continue  # admin access shares a device with its users; it allocates nothing
            where = self._dra_index.get(r.key)
            dev = self._dra_by_key.get(r.key)
            if where is None or dev is None or (node and where[0] != node):
                continue
            node = where[0]
            mem, core = held(dev, r)
            spec = self.state.node_spec(node).devices[where[1]]
            grants.append(DeviceGrant(where[1], spec.uuid, spec.vendor, min(mem, spec.memory_mib),
                                      min(core, spec.core_milli)))
        if not grants:
            return None
        return Allocation(pod_key=info.state_key, node=node, cpu_milli=0, memory_mib=0, devices=(tuple(grants),),
                          tenant=info.namespace)

    def _account_claim(self, info: ClaimInfo) -> None:
        """Make the state hold what the claim's allocation holds (idempotent); an unallocated claim holds
        nothing unless we are writing its allocation (then it stays assumed)."""
        key = info.state_key
        cache = self.scheduler.cache
        slot = self.claim_slots.get(info.key)
        if slot is not None:
            if slot in self.reserved or info.allocated is not None:
                # its devices are the reservation's (or were, until it was released: ignored until deallocated)
                if key in self.state.allocations:
                    cache.remove(key)
                self.unaccounted.pop(key, None)
                return
            del self.claim_slots[info.key]
        alloc = self.claim_allocation(info)
        if info.extended and alloc is not None:  # we created it: it was held under a name of our own till now
            for _res, pod_name, _uid in info.reserved_for:
                cache.forget(CLAIM_KEY_PREFIX + f"{info.namespace}/{pod_name}-extended-resources")
        current = self.state.allocations.get(key)
        if alloc is None:
            if current is not None and (info.allocated is not None or not cache.is_assumed(key)):
                cache.remove(key)
            self.unaccounted.pop(key, None)
            return
        if current is not None:
            if current.node == alloc.node and sorted(current.grants, key=lambda g: g.device_index) == sorted(
                    alloc.grants, key=lambda g: g.device_index):
                cache.confirm(key)
                self.unaccounted.pop(key, None)
                return
            cache.remove(key)
        try:
            self.state.assign(alloc)
        except AllocationError as exc:
            log.warning("allocated claim %s not accounted: %s", info.key, exc)
            self.unaccounted[key] = str(exc)
            return
        self.unaccounted.pop(key, None)

    # ------------------------------------------------------------------------------------------ DRA pods
    def dra_extended(self) -> dict[str, DeviceClassInfo]:
        """Extended resource name -> the DeviceClass that maps it to DRA."""
        out: dict[str, DeviceClassInfo] = {}
        for cls in sorted(self.classes.values(), key=lambda c: c.name):
            for name in cls.extended_names:
                out.setdefault(name, cls)
        return out

    def uses_dra(self, obj: Mapping[str, Any]) -> bool:
        """The pod asks for devices through ResourceClaims or a DRA-backed extended resource."""
        spec = obj.get("spec") or {}
        if spec.get("resourceClaims"):
            return True
        mapped = self.dra_extended()
        if not mapped:
            return False
        for c in (*(spec.get("containers") or ()), *(spec.get("initContainers") or ())):
            res = (c or {}).get("resources") or {}
            if any(k in mapped for part in ("limits", "requests") for k in (res.get(part) or {})):
                return True
        return False

    def _pod_claim_keys(self, obj: Mapping[str, Any]) -> list[tuple[str, str]]:
        """``(pod claim entry name, claim namespace/name)`` for the pod's ``spec.resourceClaims``."""
        meta = obj.get("metadata") or {}
        namespace = str(meta.get("namespace") or "default")
        statuses = {str(s.get("name")): s.get("resourceClaimName")
                    for s in (obj.get("status") or {}).get("resourceClaimStatuses") or () if isinstance(s, Mapping)}
        out = []
        for i, entry in enumerate((obj.get("spec") or {}).get("resourceClaims") or ()):
            name = str((entry or {}).get("name") or "")
            where = f"pod {pod_key(obj)}: spec.resourceClaims[{i}]"
            if entry.get("resourceClaimName"):
                out.append((name, f"{namespace}/{entry['resourceClaimName']}"))
            elif entry.get("resourceClaimTemplateName"):
                generated = statuses.get(name)
                if not generated:
                    raise ClaimNotReadyError(f"{where}: the claim of template {entry['resourceClaimTemplateName']} "
                                        "is not created yet (status.resourceClaimStatuses)")
                out.append((name, f"{namespace}/{generated}"))
            else:
                raise KubeInputError(f"{where}: resourceClaimName or resourceClaimTemplateName: required")
        return out

    def _device_request(self, req: ClaimRequest, where: str) -> DeviceRequest:
        """One claim request as a device request over the DRA devices its class and selectors match."""
        if req.admin or req.all_devices:
            raise ClaimNotReadyError(f"{where}: {'adminAccess' if req.admin else 'allocationMode All'} requests are "
                                "left to kube-scheduler; gpucluster allocates ExactCount requests")
        cls = self.classes.get(req.class_name)
        if cls is None:
            raise ClaimNotReadyError(f"{where}: DeviceClass {req.class_name!r} does not exist")
        if cls.unreadable:
            raise ClaimNotReadyError(f"{where}: DeviceClass {req.class_name!r} cannot be read ({cls.unreadable}); "
                                     "nothing is allocated through it until it is fixed")
        exprs = (*cls.selectors, *req.selectors)
        groups: dict[tuple[str, int, int, bool], set[str]] = {}
        for dev in self._dra_by_key.values():
            if not self.selectors.match_all(exprs, dev):
                continue
            got = consumption(dev, req)
            if got is None:
                continue
            whole = not dev.shared
            shape = (dev.vendor, 0 if whole else got[0], 0 if whole else got[1], whole)
            groups.setdefault(shape, set()).add(dev.uuid)
        if not groups:
            bad = "; ".join(f"{e!r} {self.selectors.errors[e]}" for e in exprs if e in self.selectors.errors)
            raise ClaimNotReadyError(f"{where}: no device matches DeviceClass {req.class_name}"
                                f"{' and the selectors' if req.selectors else ''}{': ' + bad if bad else ''}")
        (vendor, mem, core, whole), uuids = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))
        if whole:
            return DeviceRequest(vendor, req.count, memory_pct=100, core_milli=1000, dra=True,
                                 uuids=frozenset(uuids))
        return DeviceRequest(vendor, req.count, memory_mib=mem, core_milli=core, dra=True, uuids=frozenset(uuids))

    def prepare_pod(self, obj: Mapping[str, Any]) -> Pod:
        """A pod we schedule, with one pseudo container (``dra:<claim>``) per ResourceClaim still to allocate
        and one (``dra:``) for its DRA-backed extended resources; a pod whose claims are all allocated
        already gets the node they are on as its only candidate (:meth:`claim_node`). Raises
        :class:`ClaimNotReadyError` / :class:`KubeInputError` saying why it cannot be scheduled now."""
        pod = parse_pod(obj, self.registry)
        with self.lock:
            spec = obj.get("spec") or {}
            mapped = self.dra_extended()
            extra: list[ContainerRequest] = []
            shared: list[str] = []
            if spec.get("resourceClaims"):
                for entry, key in self._pod_claim_keys(obj):
                    info = self.claims.get(key)
                    where = f"pod {pod.key}: claim {entry} ({key})"
                    if info is None:
                        raise ClaimNotReadyError(f"{where}: ResourceClaim {key} does not exist (yet)")
                    if info.deleting:
                        raise ClaimNotReadyError(f"{where}: ResourceClaim {key} is being deleted")
                    if info.unreadable:
                        raise ClaimNotReadyError(f"{where}: ResourceClaim {key} cannot be read ({info.unreadable})")
                    if info.allocated is not None:
                        shared.append(key)
                        continue
                    reqs = tuple(self._device_request(r, f"{where}: request {r.name}") for r in info.requests)
                    extra.append(ContainerRequest(name=DRA_CONTAINER_PREFIX + key, devices=reqs))
            if mapped and any(n in mapped for c in (*pod.containers, *pod.init_containers) for n in c.extended):
                pod, ext = self._strip_extended(pod, mapped, obj)
                if ext is not None:
                    extra.append(ext)
            self._shared_claims[pod.key] = shared
        if not extra:
            return pod
        return dataclasses.replace(pod, containers=(*pod.containers, *extra))

    def _forget_prepared(self, key: str) -> None:
        """The pod ``key`` is gone: what :meth:`prepare_pod` noted of it goes too (else every pod ever scheduled
        stays in memory for as long as the scheduler runs)."""
        self._shared_claims.pop(key, None)
        self._extended_meta.pop(key, None)

    def _strip_extended(self, pod: Pod, mapped: Mapping[str, DeviceClassInfo], obj: Mapping[str, Any]
                        ) -> tuple[Pod, ContainerRequest | None]:
        """Take DRA-backed extended resources out of the containers: one device request per (container,
        resource), as kube-scheduler names them (``container-<i>-request-<j>``, init containers first)."""
        extended = [c for c in self.claims.values() if c.extended and any(
            ref[2] == pod.uid for ref in c.reserved_for)] if pod.uid else []
        reqs: list[DeviceRequest] = []
        meta: list[tuple[str, str, int, str, str]] = []
        containers = []
        spec = obj.get("spec") or {}
        raws = [*(spec.get("initContainers") or ()), *(spec.get("containers") or ())]
        for ci, c in enumerate((*pod.init_containers, *pod.containers)):
            keep = {k: v for k, v in c.extended.items() if k not in mapped}
            res = (raws[ci] if ci < len(raws) else {}).get("resources") or {}
            names = sorted({*(res.get("requests") or {}), *(res.get("limits") or {})})
            for k, v in sorted(c.extended.items()):
                if k in mapped and v > 0 and not extended:
                    cls = mapped[k]
                    reqs.append(self._device_request(ClaimRequest(name=k, class_name=cls.name, count=v),
                                                     f"pod {pod.key}: {c.name}: {k}"))
                    meta.append((f"container-{ci}-request-{names.index(k)}", cls.name, v, c.name, k))
            containers.append(dataclasses.replace(c, extended=keep))
        self._extended_meta[pod.key] = meta
        n_init = len(pod.init_containers)
        pod = dataclasses.replace(pod, init_containers=tuple(containers[:n_init]),
                                  containers=tuple(containers[n_init:]))
        if not reqs:
            return pod, None
        return pod, ContainerRequest(name=DRA_CONTAINER_PREFIX, devices=tuple(reqs))

    def claim_conflicts(self, objs: Iterable[Mapping[str, Any]], mine: Iterable[str]) -> dict[str, str]:
        """Of the claims ``mine`` (``namespace/name``), those that share a device with another claim beyond what
        the device allows (an unshared device in two claims, a shared one over its memory or cores), with why:
        another scheduler (kube-scheduler's DRA plugin) allocated the same device at the same time."""
        mine = set(mine)
        holders: dict[str, list[tuple[str, int, int]]] = {}
        with self.lock:
            for obj in objs:
                try:
                    info = parse_claim(obj)
                except (DraInputError, ValueError, TypeError, AttributeError, KeyError) as exc:
                    # what it holds still holds its devices (read leniently, else as last read)
                    meta = obj.get("metadata")
                    meta = meta if isinstance(meta, Mapping) else {}
                    previous = self.claims.get(f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}")
                    info = unreadable_claim(obj, previous, str(exc))
                for r in info.allocated or ():
                    dev = self._dra_by_key.get(r.key)
                    if dev is None or r.admin:
                        continue
                    mem, core = held(dev, r)
                    holders.setdefault(r.key, []).append((info.key, mem, core))
            out: dict[str, str] = {}
            for key, held_by in holders.items():
                dev = self._dra_by_key[key]
                claims = {k for k, _, _ in held_by}
                if len(claims) < 2 or not claims & mine:
                    continue
                mem = sum(m for _, m, _ in held_by)
                core = sum(c for _, _, c in held_by)
                if not dev.shared or mem > dev.memory_mib or core > dev.cores_pct * 10:
                    others = sorted(claims - mine) or sorted(claims)
                    for k in claims & mine:
                        out[k] = f"device {key} is also allocated to claim {others[0]}"
            return out

    def without_dra_extended(self, pod: Pod) -> Pod:
        """The pod without its DRA-backed extended resources (kube-scheduler's DRA plugin serves them)."""
        mapped = self.dra_extended()
        if not mapped or not any(n in mapped for c in (*pod.containers, *pod.init_containers) for n in c.extended):
            return pod

        def strip(cs: tuple[ContainerRequest, ...]) -> tuple[ContainerRequest, ...]:
            return tuple(dataclasses.replace(c, extended={k: v for k, v in c.extended.items() if k not in mapped})
                         for c in cs)

        return dataclasses.replace(pod, containers=strip(pod.containers), init_containers=strip(pod.init_containers))

    def claim_node(self, obj: Mapping[str, Any]) -> str | None:
        """The node the pod's allocated claims are on (they must all agree), or None when none is allocated."""
        node = None
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self.lock:
            infos = [self.claims.get(key) for _entry, key in self._pod_claim_keys(obj)]
            if uid:  # the claim of its DRA-backed extended resources, written before a restart
                infos += [c for c in self.claims.values() if c.extended and any(r[2] == uid for r in c.reserved_for)]
            for info in infos:
                alloc = self.claim_allocation(info) if info is not None else None
                if alloc is not None:
                    node = alloc.node
        return node

    # ------------------------------------------------------------------------------------------ decide
    def candidates_mask(self, names: Iterable[str]) -> npt.NDArray[np.bool_]:
        """Nodes named in ``names`` (unknown names are ignored). kube-scheduler sends the same nodes again and
        again, in a different order each time (it filters in parallel and starts where the last cycle stopped),
        so the last mask is kept keyed by the *set* of names and the state's node rows."""
        key = (frozenset(names), self.state.layout)
        cached = self._mask_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        index = self.state.node_index
        rows = np.fromiter((index.get(name, -1) for name in key[0]), np.int64, len(key[0]))
        mask = np.zeros(self.state.n_nodes, np.bool_)
        mask[rows[rows >= 0]] = True
        mask.flags.writeable = False
        self._mask_cache = (key, mask)
        return mask

    def decide(self, pod: Pod, candidates: Iterable[str] | None = None) -> Decision:
        """Decide and assume (under the lock). ``candidates`` limits the nodes (extender mode). A pod that
        is assumed but not bound yet is re-decided (its old assumption is forgotten first)."""
        with self.lock:
            cache = self.scheduler.cache
            cache.expire()
            held = self.state.allocations.get(pod.key)
            if held is not None:
                if not cache.is_assumed(pod.key):  # bound already: the answer is where it is
                    return Decision(pod, Outcome.SCHEDULED, node=held.node,
                                    node_index=self.state.node_index[held.node], allocation=held)
                cache.forget(pod.key)
            self.gate.candidates = None if candidates is None else self.candidates_mask(candidates)
            try:
                return self._split(self.scheduler.schedule(pod))
            finally:
                self.gate.candidates = None

    def decide_group(self, pods: Sequence[Pod]) -> GroupDecision:
        """Decide and assume a group of pods all or none (under the lock), without binding: the caller binds
        each decision (``scheduler.bind``). Assumed-but-unbound earlier decisions of these pods are forgotten
        first."""
        with self.lock:
            cache = self.scheduler.cache
            cache.expire()
            for pod in pods:
                if pod.key in self.state.allocations and cache.is_assumed(pod.key):
                    cache.forget(pod.key)
            group = self.scheduler.schedule_group(pods, bind=False)
            group.decisions = [self._split(d) for d in group.decisions]
            return group

    # ------------------------------------------------------------------------------------------ DRA decisions
    def _split(self, d: Decision) -> Decision:
        """A decision for a pod with ``dra:`` pseudo containers -> the pod's own part (assumed under its key)
        plus one assumed allocation per claim (under ``claim:<namespace>/<name>``) and the :class:`ClaimPlan`
        its bind writes."""
        pod, alloc = d.pod, d.allocation
        if alloc is None:
            return d
        if not any(c.name.startswith(DRA_CONTAINER_PREFIX) for c in pod.containers):
            join = [k for k in self._shared_claims.get(pod.key, ()) if not any(
                ref[2] == pod.uid for ref in self.claims[k].reserved_for)] if pod.uid else []
            if join:  # claims allocated already: the bind only adds the pod to their reservedFor
                self.claim_plans[pod.key] = ClaimPlan(pod.key, alloc.node, {key: [] for key in join})
            return d
        n_real = next(i for i, c in enumerate(pod.containers) if c.name.startswith(DRA_CONTAINER_PREFIX))
        cache = self.scheduler.cache
        real = dataclasses.replace(pod, containers=pod.containers[:n_real])
        own = Allocation(pod_key=pod.key, node=alloc.node, cpu_milli=alloc.cpu_milli, memory_mib=alloc.memory_mib,
                         devices=alloc.devices[:n_real], tenant=alloc.tenant, pod=real,
                         init_devices=alloc.init_devices)
        plan = ClaimPlan(pod.key, alloc.node, {})
        claim_allocs: list[Allocation] = []
        node_devs = self.state.node_spec(alloc.node).devices
        for c, grants in zip(pod.containers[n_real:], alloc.devices[n_real:], strict=True):
            claim_key = c.name[len(DRA_CONTAINER_PREFIX):]
            if claim_key:
                info = self.claims[claim_key]
                names = [r.name for r in info.requests]
                namespace = info.namespace
            else:
                meta = self._extended_meta.get(pod.key, [])
                names = [m[0] for m in meta]
                namespace = pod.namespace
                plan.extended_requests = [{"name": m[0], "exactly": {"deviceClassName": m[1],
                                                                     "allocationMode": "ExactCount", "count": m[2]}}
                                          for m in meta]
                plan.extended_mappings = [{"containerName": m[3], "resourceName": m[4], "requestName": m[0]}
                                          for m in meta]
            plan.claims[claim_key] = self._claim_results(names, c.devices, grants, node_devs)
            state_key = CLAIM_KEY_PREFIX + (claim_key or f"{pod.key}-extended-resources")
            claim_allocs.append(Allocation(pod_key=state_key, node=alloc.node, cpu_milli=0, memory_mib=0,
                                           devices=(tuple(grants),), tenant=namespace))
        for entry_key in self._claims_of(pod):
            if not any(ref[2] == pod.uid for ref in self.claims[entry_key].reserved_for):
                plan.claims.setdefault(entry_key, [])  # allocated already: only reservedFor
        cache.forget(pod.key)
        cache.assume(own)
        for ca in claim_allocs:
            cache.remove(ca.pod_key)
            cache.assume(ca)
        self.claim_plans[pod.key] = plan
        d.pod, d.allocation = real, own
        return d

    def _claim_results(self, names: Sequence[str], reqs: Sequence[DeviceRequest], grants: Sequence[DeviceGrant],
                       node_devs: Sequence[Any]) -> list[ClaimResult]:
        """The devices ``grants`` gave one claim's requests (``names``, in the order of ``reqs``)."""
        results: list[ClaimResult] = []
        it = iter(grants)
        for name, req in zip(names, reqs, strict=True):
            for _ in range(req.count):
                g = next(it)
                dev = self._dra_by_key[node_devs[g.device_index].dra]
                results.append(ClaimResult(name, dev, g.memory_mib, g.core_milli))
        return results

    # ------------------------------------------------------------------------------------------ queued Jobs' claims
    def entry_container(self, entry: str, requests: Sequence[ClaimRequest], where: str) -> ContainerRequest:
        """The pseudo container (``dra-entry:<entry>``) that asks, in a queued Job's task pod, for the devices of
        one ``spec.resourceClaims`` entry of its pod template (``requests``: the claim's or its template's).
        Raises :class:`ClaimNotReadyError` while no device matches (a DeviceClass missing, ...)."""
        with self.lock:
            reqs = tuple(self._device_request(r, f"{where}: request {r.name}") for r in requests)
        return ContainerRequest(name=DRA_ENTRY_PREFIX + entry, devices=reqs)

    def slot_claim_plan(self, obj: Mapping[str, Any], alloc: Allocation, reservation: str
                        ) -> tuple[Allocation, ClaimPlan | None]:
        """A pod (``obj``) is bound into ``reservation`` (``alloc``, decided for a task with ``dra-entry:``
        containers): the pod's own allocation (what HAMi's annotations say) and the :class:`ClaimPlan` that writes
        the reserved devices of each entry to the pod's claim (made from the template, or named). The claims
        then hold the reservation's devices (:attr:`claim_slots`), never counted twice. ``(alloc, None)`` for a
        task without claims. Raises :class:`ClaimNotReadyError` while a claim is not made (or not seen) yet."""
        task = alloc.pod
        if task is None or not any(c.name.startswith(DRA_ENTRY_PREFIX) for c in task.containers):
            return alloc, None
        pod = parse_pod(obj, self.registry)
        with self.lock:
            entries = dict(self._pod_claim_keys(obj))
            n_real = next(i for i, c in enumerate(task.containers) if c.name.startswith(DRA_ENTRY_PREFIX))
            own = Allocation(pod_key=pod.key, node=alloc.node, cpu_milli=alloc.cpu_milli,
                             memory_mib=alloc.memory_mib, devices=alloc.devices[:n_real], tenant=alloc.tenant,
                             pod=pod, init_devices=alloc.init_devices)
            plan = ClaimPlan(pod.key, alloc.node, {})
            node_devs = self.state.node_spec(alloc.node).devices
            for c, grants in zip(task.containers[n_real:], alloc.devices[n_real:], strict=True):
                entry = c.name[len(DRA_ENTRY_PREFIX):]
                where = f"pod {pod.key}: claim {entry}"
                key = entries.get(entry)
                if key is None:
                    raise KubeInputError(f"{where}: not in the pod's spec.resourceClaims")
                info = self.claims.get(key)
                if info is None:
                    raise ClaimNotReadyError(f"{where}: ResourceClaim {key} not seen yet")
                if info.unreadable:
                    raise ClaimNotReadyError(f"{where}: ResourceClaim {key} cannot be read ({info.unreadable})")
                if info.allocated is not None:
                    if pod.uid and any(ref[2] == pod.uid for ref in info.reserved_for):
                        plan.claims[key] = []  # written already (a retried bind): nothing to allocate
                        continue
                    raise ClaimNotReadyError(f"{where}: ResourceClaim {key} is allocated already (by someone "
                                             "else)")
                names = [r.name for r in info.requests]
                if [r.count for r in info.requests] != [r.count for r in c.devices]:
                    raise KubeInputError(f"{where}: ResourceClaim {key} asks for other devices than its job was "
                                         "admitted with")
                plan.claims[key] = self._claim_results(names, c.devices, grants, node_devs)
            for key in plan.claims:
                self.claim_slots[key] = reservation
        return own, plan

    def _claims_of(self, pod: Pod) -> list[str]:
        """The claims (``namespace/name``) reserved for nobody yet that the pod's pseudo containers do not cover
        but that it uses: allocated claims it shares (known from :meth:`prepare_pod`'s caller)."""
        return list(self._shared_claims.get(pod.key, ()))

    def forget_plan(self, pod_key: str) -> None:
        """Give back the devices a pod's plan assumed for its claims; an allocated claim that could not be
        accounted because the plan held its devices (another scheduler's allocation of the same moment, which
        the settle check found) is accounted now: else the devices looked free and the next pass chose them
        again, forever, since such a claim gets no further event."""
        with self.lock:
            plan = self.claim_plans.pop(pod_key, None)
            if plan is None:
                return
            for claim_key in plan.claims:
                state_key = CLAIM_KEY_PREFIX + (claim_key or f"{pod_key}-extended-resources")
                self.scheduler.cache.forget(state_key)
            for key in [k[len(CLAIM_KEY_PREFIX):] for k in self.unaccounted if k.startswith(CLAIM_KEY_PREFIX)]:
                info = self.claims.get(key)
                if info is not None:
                    self._account_claim(info)

    def claim_written(self, pod_key: str, claim_key: str, obj: Mapping[str, Any] | None) -> None:
        """The binder wrote a claim's allocation (``obj``: the claim as the API server returned it): hold it
        under its real name (the extended-resource claim got one only now) until the informer confirms it."""
        with self.lock:
            if not claim_key:
                temp = CLAIM_KEY_PREFIX + f"{pod_key}-extended-resources"
                self.scheduler.cache.forget(temp)
            if obj is not None:
                info = self._parse_dra("resourceclaim", obj, parse_claim)
                if info is not None:
                    self._put_claim(info)

    def node_reasons(self, pod: Pod, candidates: Iterable[str] | None = None) -> ReasonArray:
        """Per node, why ``pod`` does not fit it (0 = it fits), as Filter sees it now."""
        with self.lock:
            fw = self.scheduler.framework
            snap = self.state.snapshot()
            cs = CycleState()
            self.gate.candidates = None if candidates is None else self.candidates_mask(candidates)
            try:
                st = fw.run_pre_filter(cs, pod, snap)
                if not st.ok:
                    code = (Reason[st.reasons[0]] if st.reasons and st.reasons[0] in Reason.__members__
                            else Reason.NoDevicesOfVendor)
                    return np.full(snap.n_nodes, code, np.int16)
                reasons = fw.run_filter(cs, pod, snap)
                reasons[~np.asarray(snap.present)] = Reason.NodeNotReady
                fw.explain(cs, pod, snap, reasons)
                return reasons
            finally:
                self.gate.candidates = None

    def summary(self) -> dict[str, Any]:
        with self.lock:
            totals = self.state.totals()
            totals.update(
                assumed=sum(1 for k in self.state.allocations if self.scheduler.cache.is_assumed(k)),
                bound=len(self.bound),
                unaccounted=len(self.unaccounted),
                bad_nodes=len(self.bad_nodes),
                bad_dra_objects=len(self.bad_dra),
                stale_nodes=int(self.gate.stale()[: self.state.n_nodes].sum()),
                rebuilds=self.rebuilds,
            )
            return totals
