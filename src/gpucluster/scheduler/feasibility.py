"""Can a job ever fit this cluster? Answered once, at submission, instead of on every scheduling pass.

kube-scheduler says ``0/N nodes are available: ...`` for every attempt of a pod that cannot fit *now*; a job
that could not fit even on an empty cluster would wait forever and be retried on every pass. :func:`never_fits`
finds those up front, with the reason, so the API can refuse them (422). It is optimistic on purpose: it
considers every present node as if empty (cordoned and unhealthy ones too, as they come back) and counts
capacity generously, so a job it lets through may still have to wait, but a job it refuses can never run:

* an extended resource no node offers (a typo such as ``nvidia.com/gpumemory`` beside ``nvidia.com/gpu``: the
  answer suggests the closest name a node or a device vendor knows);
* a device vendor the cluster has none of;
* a node selector no node matches, GPU models (``nvidia.com/use-gputype``) or UUIDs no device of the vendor has;
* more device memory or compute per device than the largest device of that vendor;
* more devices (of a vendor, per pod) than any node has that are large enough;
* more CPU or host memory than any node has, or no node that has all of it at once (counted reasons);
* more pods (a gang) than the whole cluster could hold at once, or than the nodes of any one GPU model could
  (a gang stays on one model, the Gang plugin);
* more GPU-equivalents (:mod:`gpucluster.model.share`) than the tenant's quota, even on the largest devices.

Vectorised over nodes (numpy); one call per distinct pod shape of the job.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpucluster.model import ClusterState, DeviceRequest, Pod
from gpucluster.model.share import largest_devices, pod_gpus_at_least
from gpucluster.scheduler.plugins.devicefit import allowed_devices

_BIG = np.int64(1 << 40)


@dataclass(frozen=True, slots=True)
class Infeasible:
    """Why a job can never run here: ``where`` names the request field, ``why`` says it in words."""

    where: str
    why: str


def _shape(pod: Pod) -> tuple[object, ...]:
    return (pod.cpu_milli, pod.memory_mib, tuple(r for _, r in pod.device_requests), repr(pod.constraints),
            tuple(sorted(pod.node_selector.items())))


def _selected(pod: Pod, state: ClusterState) -> np.ndarray:
    """Nodes whose labels match the pod's node selector (all of them without one)."""
    if not pod.node_selector:
        return np.ones(state.n_nodes, np.bool_)
    items = pod.node_selector.items()
    return np.array([all(node.labels.get(k) == v for k, v in items) for node in state.nodes], np.bool_)


def _device_need(state: ClusterState, req: DeviceRequest, vid: int) -> tuple[np.ndarray, np.ndarray]:
    """(eligible devices mask, pods-per-device slots) for one request on devices of vendor ``vid``."""
    mem_cap = state.dev_mem_cap
    memory = (mem_cap * (req.memory_pct or 0) // 100) if req.memory_pct is not None else np.full_like(
        mem_cap, req.memory_mib)
    core_cap = state.dev_core_cap
    eligible = state.dev_valid & (state.dev_vendor == vid) & (mem_cap >= memory) & (core_cap >= req.core_milli)
    slots = np.maximum(state.dev_max_tasks, 1)
    if req.core_milli > 0:
        slots = np.minimum(slots, core_cap // req.core_milli)
    with np.errstate(divide="ignore"):
        by_memory = np.where(memory > 0, mem_cap // np.maximum(memory, 1), _BIG)
    slots = np.minimum(slots, by_memory)
    return eligible, np.where(eligible, slots, 0)


def _one_shape(pod: Pod, replicas: int, state: ClusterState, within: np.ndarray | None = None) -> Infeasible | None:
    """Why ``replicas`` pods like ``pod`` could never run at once on the present nodes (only those in ``within``
    when given), or None."""
    present = state.present if within is None else state.present & within
    n = int(present.sum())
    if n == 0:
        return Infeasible("resources", "the cluster has no nodes")
    reasons: dict[str, np.ndarray] = {}
    node_ok = present.copy()
    capacity = np.full(state.n_nodes, _BIG, np.int64)
    if pod.node_selector:
        selected = _selected(pod, state)
        wanted = ",".join(f"{k}={v}" for k, v in sorted(pod.node_selector.items()))
        if not (present & selected).any():
            return Infeasible("node_selector", f"no node carries the labels {wanted}")
        reasons[f"labels other than {wanted}"] = present & ~selected
    allowed: np.ndarray | None = None
    if pod.device_requests:
        allowed, _ = allowed_devices(pod, state.snapshot())
    if pod.cpu_milli > 0:
        reasons["too little CPU"] = present & (state.cpu_cap < pod.cpu_milli)
        capacity = np.minimum(capacity, state.cpu_cap // pod.cpu_milli)
    if pod.memory_mib > 0:
        reasons["too little host memory"] = present & (state.mem_cap < pod.memory_mib)
        capacity = np.minimum(capacity, state.mem_cap // pod.memory_mib)
    by_vendor: dict[str, list[DeviceRequest]] = {}
    for _, req in pod.device_requests:
        by_vendor.setdefault(req.vendor, []).append(req)
    for vendor, reqs in by_vendor.items():
        vid = state.vendors.ids.get(vendor)
        mine = state.dev_valid & (state.dev_vendor == vid) if vid is not None else None
        if mine is None or not mine.any():
            have = sorted(v for v, i in state.vendors.ids.items() if (state.dev_valid & (state.dev_vendor == i)).any())
            return Infeasible("resources", f"the cluster has no {vendor} devices (it has {', '.join(have) or 'none'})")
        need = max(r.count for r in reqs)  # containers are fitted one by one and may share a device
        eligible_any = np.zeros_like(state.dev_valid)
        slots_total = np.zeros(state.n_nodes, np.int64)
        for req in reqs:
            biggest = int(state.dev_mem_cap[mine].max())
            if req.memory_pct is None and req.memory_mib > biggest:
                return Infeasible("resources", f"asks for {req.memory_mib:,} MiB of memory per {vendor} device; the "
                                               f"largest {vendor} device has {biggest:,} MiB")
            if req.core_milli > int(state.dev_core_cap[mine].max()):
                return Infeasible("resources", f"asks for more compute per {vendor} device than any device has")
            assert vid is not None
            eligible, slots = _device_need(state, req, vid)
            if allowed is not None:
                if not (eligible & allowed).any() and eligible.any():
                    c = pod.constraints.for_vendor(vendor)
                    models = ",".join(c.use_types) or "allowed"
                    return Infeasible("gpu_type", f"no {vendor} device of the cluster is of the {models} model(s) "
                                                  "or UUIDs the job may use")
                eligible &= allowed
                slots = np.where(eligible, slots, 0)
            most = int(eligible.sum(axis=1).max()) if eligible.size else 0
            if req.count > most:
                kind = " of the allowed models" if allowed is not None else ""
                return Infeasible("resources", f"asks for {req.count} {vendor} devices per pod; no node has more than "
                                               f"{most}{kind} that are large enough")
            eligible_any |= eligible
            slots_total += slots.sum(axis=1)
        count = eligible_any.sum(axis=1)
        reasons[f"fewer than {need} large enough {vendor} devices"] = present & (count < need)
        capacity = np.minimum(capacity, np.where(count >= need, slots_total // max(need, 1), 0))
    for mask in reasons.values():
        node_ok &= ~mask
    if not node_ok.any():
        counted = sorted(((int(m.sum()), r) for r, m in reasons.items() if m.any()), reverse=True)
        parts = ", ".join(f"{k} with {r}" for k, r in counted)
        return Infeasible("resources", f"0/{n} nodes could ever hold one pod of this job: {parts}")
    room = int(np.minimum(capacity[node_ok], replicas).sum())
    if room < replicas:
        return Infeasible("replicas", f"the job needs {replicas} pods of this shape at once; even empty, the whole "
                                      f"cluster holds at most {room}")
    return None


@functools.cache
def _device_resource_names() -> frozenset[str]:
    """The resource names HAMi's default device settings read (the suggestions for a misspelt one)."""
    from gpucluster.devices import VendorRegistry

    return VendorRegistry.from_settings().device_resources


def unknown_resource(pods: Sequence[Pod], state: ClusterState, known: Iterable[str]) -> Infeasible | None:
    """An extended resource the pods ask for that no present node offers (not even a cordoned one)."""
    wanted = sorted({r for p in pods for r, n in p.extended.items() if n > 0})
    if not wanted:
        return None
    offered = {r for i, node in enumerate(state.nodes) if state.present[i] for r, n in node.extended.items() if n > 0}
    for res in wanted:
        if res in offered:
            continue
        names = sorted(offered | set(known) | _device_resource_names())
        close = difflib.get_close_matches(res, names, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        return Infeasible(f"resources.{res}", f"no node has the resource {res}{hint}")
    return None


def never_fits(pods: Sequence[Pod], state: ClusterState, quota_gpus: float | None = None,
               tenant: str = "", known_resources: Iterable[str] = ()) -> Infeasible | None:
    """Why ``pods`` (one job, placed all at once) can never run on ``state``'s cluster, or None when they
    might. ``quota_gpus`` is the tenant's GPU-equivalent limit (None = no limit); ``known_resources``: more
    resource names to suggest for a misspelt one (the configured vendors')."""
    found = unknown_resource(pods, state, known_resources)
    if found is not None:
        return found
    groups: dict[tuple[object, ...], list[Pod]] = {}
    for pod in pods:
        groups.setdefault(_shape(pod), []).append(pod)
    for group in groups.values():
        found = _one_shape(group[0], len(group), state)
        if found is not None:
            return found
    found = _one_model(pods, groups, state)
    if found is not None:
        return found
    if quota_gpus is not None:
        largest = largest_devices(state)
        least = sum(pod_gpus_at_least(p, largest) for p in pods)
        if least > quota_gpus + 1e-9:
            return Infeasible("quota", f"holds at least {least:g} GPUs (each device counts max(compute share, "
                                           f"memory share)); tenant {tenant or '?'}'s quota is {quota_gpus:g}")
    return None


def _one_model(pods: Sequence[Pod], groups: dict[tuple[object, ...], list[Pod]],
               state: ClusterState) -> Infeasible | None:
    """A gang with devices stays on one GPU model (the Gang plugin's Filter): on a cluster of several models,
    the nodes of at least one model must be able to hold all of it."""
    if len(pods) < 2 or not all(p.gang and p.device_requests for p in pods):
        return None
    models = np.asarray(state.dev_model[:, 0], np.int64) if state.dev_model.shape[1] else np.full(state.n_nodes, -1)
    present = models[state.present]
    kinds = np.unique(present[present >= 0])
    if kinds.size <= 1:
        return None
    for m in kinds:
        within = models == m
        if all(_one_shape(g[0], len(g), state, within) is None for g in groups.values()):
            return None
    names = ", ".join(sorted(state.models.names[int(m)] for m in kinds))
    return Infeasible("replicas", f"a gang stays on one GPU model and no model of the cluster ({names}) could ever "
                                  f"hold all {len(pods)} pods at once")


__all__ = ["Infeasible", "never_fits"]
