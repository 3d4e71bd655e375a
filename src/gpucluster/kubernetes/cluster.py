"""The scheduler's view of a Kubernetes cluster: Node and Pod objects in, a :class:`Scheduler` over a
:class:`ClusterState` out. Pure with respect to the network (the informer feeds it objects; tests do too).

* Nodes become rows of the state; a node whose devices change gets the state rebuilt (allocations carried
  over); readiness, cordon, device health and the HAMi handshake are updated in place.
* Bound pods are *accounted*: their allocation is read back from HAMi's decision annotations, so a
  restarted scheduler rebuilds device usage from the API server and never hands a device out twice.
* ``decide`` runs the unchanged scheduler core with one extra Filter plugin, ``KubeNodeGate``: nodes that are
  not Ready, whose device-plugin handshake is older than the timeout, or that kube-scheduler did not offer
  (extender mode) are rejected with their own reason codes.
"""

from __future__ import annotations

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
from gpucluster.model import AllocationError, ClusterState, NodeSpec, Pod, Snapshot
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
    """The named placement profile (or ``base``) with the gate first and (optionally) the Kubernetes binder
    last."""
    base = base or profile_for(policy, seed)
    plugins = [PluginConfig(name=GATE_PLUGIN), *base.plugins]
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
    ) -> None:
        """``profile``: schedule with it instead of the named ``placement_policy`` (the job engine's profile);
        ``services``: more shared services for the plugins (e.g. the engine's quota tree)."""
        self.registry = registry
        self.clock = clock
        self.assume_ttl = assume_ttl
        self.nvlink_domain_size = nvlink_domain_size
        self.binder = binder
        self.profile = kube_profile(placement_policy, binder=binder is not None, seed=seed,
                                    scheduler_name=scheduler_name, base=profile)
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
        self.rebuilds = 0
        self._mask_cache: tuple[tuple[Any, ...], npt.NDArray[np.bool_]] | None = None
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
        for info in self.nodes.values():
            self._set_gate_row(info)
            if info.unschedulable:
                self.state.set_schedulable(info.spec.name, False)
            self._apply_health(info)
        for key, alloc in old.state.allocations.items():
            if alloc.node not in self.nodes:
                continue
            if key in self.bound:
                continue  # re-accounted below from its annotations against the new node rows
            try:
                self.scheduler.cache.assume(alloc)
            except AllocationError as exc:
                log.warning("assumed allocation of %s dropped on rebuild: %s", key, exc)
        for key in list(self.bound):
            self._account(key)

    def _apply_health(self, info: NodeInfo) -> None:
        for dev in info.spec.devices:
            i = self.state.node_index[info.spec.name]
            if bool(self.state.dev_healthy[i, dev.index]) != dev.healthy:
                self.state.set_device_health(info.spec.name, dev.index, dev.healthy)

    # ------------------------------------------------------------------------------------------ nodes
    def _parse_node(self, obj: Mapping[str, Any]) -> NodeInfo | None:
        name = str((obj.get("metadata") or {}).get("name") or "")
        try:
            info = node_info(obj, self.registry, self.nvlink_domain_size)
        except (KubeInputError, ValueError) as exc:
            log.warning("node %s ignored: %s", name, exc)
            self.bad_nodes[name] = str(exc)
            return None
        self.bad_nodes.pop(name, None)
        return info

    def set_nodes(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync (a list): exactly these nodes exist."""
        with self.lock:
            self.nodes = {}
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
                for key, (_pod, node) in list(self.bound.items()):
                    if node == name:
                        self._account(key)
                return
            if old is None or old.signature != info.signature or not st.present[st.node_index[name]]:
                self._rebuild()
                return
            self._set_gate_row(info)
            if old.unschedulable != info.unschedulable:
                st.set_schedulable(name, not info.unschedulable)
            self._apply_health(info)

    def delete_node(self, name: str) -> None:
        with self.lock:
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
            if not pod_holds_resources(obj):
                if pod_node(obj):  # finished
                    self.delete_pod(key)
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
            self.bound.pop(key, None)
            self.unaccounted.pop(key, None)
            self.scheduler.cache.remove(key)

    def set_pods(self, objs: Iterable[Mapping[str, Any]]) -> None:
        """Full resync (a list): exactly these pods exist. Assumed, not yet bound pods are kept."""
        with self.lock:
            seen: set[str] = set()
            for obj in objs:
                seen.add(pod_key(obj))
                self.apply_pod(obj)
            for key in [k for k in self.bound if k not in seen]:
                self.delete_pod(key)
            for key in [k for k in self.state.allocations
                        if k not in seen and not self.scheduler.cache.is_assumed(k)]:
                self.delete_pod(key)

    # ------------------------------------------------------------------------------------------ decide
    def candidates_mask(self, names: Iterable[str]) -> npt.NDArray[np.bool_]:
        """Nodes named in ``names`` (unknown names are ignored). kube-scheduler sends the same list again
        and again, so the last mask is kept (keyed by the names and the state's node rows)."""
        key = (tuple(names), self.state.layout)
        cached = self._mask_cache
        if cached is not None and cached[0] == key:
            return cached[1]
        mask = np.zeros(self.state.n_nodes, np.bool_)
        index = self.state.node_index
        for name in key[0]:
            i = index.get(name)
            if i is not None:
                mask[i] = True
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
                return self.scheduler.schedule(pod)
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
            return self.scheduler.schedule_group(pods, bind=False)

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
                stale_nodes=int(self.gate.stale()[: self.state.n_nodes].sum()),
                rebuilds=self.rebuilds,
            )
            return totals
