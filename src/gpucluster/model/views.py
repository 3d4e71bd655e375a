"""JSON views of a :class:`ClusterState` shared by every backend (the embedded simulation and Kubernetes): node
rows, one node with its devices, overview figures, a history sample, the topology, and the simple allocation
fragmentation measure the dashboard and monitoring show.

Pure functions over the state; the caller holds whatever lock guards it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.model.share import device_share
from gpucluster.model.state import Allocation, ClusterState, DeviceGrant, Snapshot

FloatArray = npt.NDArray[np.float64]

PodDescriber = Callable[[Allocation], dict[str, Any]]
"""Allocation -> ``{"job", "job_name", "tenant"}`` (what the node view shows next to each pod)."""


def node_fragmentation(s: ClusterState | Snapshot) -> FloatArray:
    """Per node (``[N]``, 0..1): free compute on partly used devices / free compute on all usable devices.

    0 when every free core milli sits on a whole free device (a whole-GPU job can use all of it); 1 when every
    device with room is already shared (only fractional jobs fit). A node with nothing free scores 0: it is
    full, not fragmented. Unhealthy and padding slots do not count. (The FGD measure against a target workload
    is ``scheduler.plugins.fragmentation``; this one needs no workload model.)
    """
    live = s.dev_live
    free = np.where(live, s.dev_core_free, 0).astype(np.float64)
    partial = live & ((s.dev_core_used > 0) | (s.dev_tasks > 0))
    free_total = free.sum(axis=1)
    free_partial = np.where(partial, free, 0.0).sum(axis=1)
    out: FloatArray = np.divide(free_partial, free_total, out=np.zeros_like(free_total), where=free_total > 0)
    return out


def fragmentation(s: ClusterState) -> float:
    """The same measure over the whole cluster's schedulable nodes."""
    free = np.where(s.dev_usable, s.dev_core_free, 0)
    partial = free[(s.dev_core_used > 0) | (s.dev_tasks > 0)].sum()
    total = free.sum()
    return float(partial / total) if total else 0.0


def node_rows(s: ClusterState, indices: list[int]) -> list[dict[str, Any]]:
    """Compact per-node rows (device arrays as lists)."""
    mem_pct = np.round(np.divide(s.dev_mem_used * 100.0, s.dev_mem_cap, out=np.zeros(s.dev_mem_cap.shape),
                                 where=s.dev_mem_cap > 0), 1)
    core, pct, healthy = s.dev_core_used.tolist(), mem_pct.tolist(), s.dev_healthy.tolist()
    cpu_cap, cpu_used = s.cpu_cap.tolist(), s.cpu_used.tolist()
    mem_cap, mem_used = s.mem_cap.tolist(), s.mem_used.tolist()
    pods, present, sched, count = s.pod_count.tolist(), s.present.tolist(), s.schedulable.tolist(), \
        s.dev_count.tolist()
    rows = []
    for i in indices:
        node = s.nodes[i]
        d = count[i]
        rows.append({
            "name": node.name, "rack": node.rack, "leaf": node.leaf, "spine": node.spine, "pool": node.pool,
            "model": node.devices[0].model if node.devices else "",
            "present": present[i], "schedulable": sched[i],
            "cpu_milli": cpu_cap[i], "cpu_used_milli": cpu_used[i],
            "memory_mib": mem_cap[i], "memory_used_mib": mem_used[i],
            "pods": pods[i], "gpus": d,
            "dev_core_used": core[i][:d], "dev_mem_pct": pct[i][:d], "dev_healthy": healthy[i][:d],
        })
    return rows


def present_rows(s: ClusterState) -> list[dict[str, Any]]:
    return node_rows(s, [i for i, p in enumerate(s.present.tolist()) if p])


def grant_cores(s: ClusterState, node: int, g: DeviceGrant) -> int:
    """Percent of the device's compute a grant holds: what it asked, or 100 when it holds the whole device
    (all of its memory, no cores given: HAMi's ``nvidia.com/gpu: 1``)."""
    if g.core_milli == 0 and g.memory_mib >= int(s.dev_mem_cap[node, g.device_index]) > 0:
        return 100
    return g.core_milli // 10


def node_detail(s: ClusterState, name: str, describe: PodDescriber) -> dict[str, Any] | None:
    """One node's row plus its devices, each with the pods holding a share of it."""
    i = s.node_index.get(name)
    if i is None or not s.present[i]:
        return None
    row = node_rows(s, [i])[0]
    by_dev: dict[int, list[dict[str, Any]]] = {}
    for alloc in s.allocations_on(name):
        who = describe(alloc)
        for g in alloc.grants:
            by_dev.setdefault(g.device_index, []).append({
                "pod": alloc.pod_key, **who, "cores": grant_cores(s, i, g), "memory_mib": g.memory_mib,
                **grant_share(s, i, g)})
    row["devices"] = [
        {"index": dev.index, "uuid": dev.uuid, "model": dev.model, "numa": dev.numa,
         "nvlink_domain": dev.nvlink_domain, "healthy": bool(s.dev_healthy[i, dev.index]),
         "core_used": int(s.dev_core_used[i, dev.index]), "core_cap": int(s.dev_core_cap[i, dev.index]),
         "memory_used_mib": int(s.dev_mem_used[i, dev.index]),
         "memory_mib": int(s.dev_mem_cap[i, dev.index]), "tasks": int(s.dev_tasks[i, dev.index]),
         "max_tasks": int(s.dev_max_tasks[i, dev.index]), "pods": by_dev.get(dev.index, [])}
        for dev in s.nodes[i].devices
    ]
    return row


def grant_share(s: ClusterState, i: int, g: DeviceGrant) -> dict[str, Any]:
    """``share``: GPU-equivalents the grant holds of its device (``model.share``), ``whole``: all of it."""
    share = device_share(g.core_milli, g.memory_mib, float(s.dev_core_cap[i, g.device_index]),
                         float(s.dev_mem_cap[i, g.device_index]))
    return {"share": round(share, 4), "whole": share >= 1.0 - 1e-9}


def placement(s: ClusterState, pod_key: str, node: str) -> dict[str, Any]:
    """Where a bound pod is and which device shares it holds (empty when its usage is not accounted)."""
    alloc = s.allocations.get(pod_key)
    i = s.node_index.get(node, -1)
    devices = [] if alloc is None or i < 0 else [
        {"uuid": g.uuid, "index": g.device_index, "memory_mib": g.memory_mib, "cores": grant_cores(s, i, g),
         **grant_share(s, i, g)}
        for g in alloc.grants]
    return {"pod": pod_key, "node": node, "devices": devices}


def figures(s: ClusterState) -> dict[str, Any]:
    """The cluster half of the overview: capacity, allocation, fragmentation, per-model figures."""
    tot = s.totals()
    valid = s.dev_valid & s.present[:, None]
    models: dict[str, dict[str, float]] = {}
    for mid, model in enumerate(s.models.names):
        mask = valid & (s.dev_model == mid)
        if not mask.any():
            continue
        cap = int(s.dev_core_cap[mask].sum())
        models[model] = {"devices": int(mask.sum()),
                         "alloc": float(s.dev_core_used[mask].sum() / cap) if cap else 0.0}
    return {
        "nodes": tot["nodes"],
        "nodes_cordoned": int((s.present & ~s.schedulable).sum()),
        "devices": tot["devices"],
        "devices_in_use": int((valid & (s.dev_tasks > 0)).sum()),
        "devices_unhealthy": int((valid & ~s.dev_healthy).sum()),
        "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
        "gpu_mem_alloc": tot["device_memory_used_mib"] / max(tot["device_memory_mib"], 1),
        "cpu_alloc": tot["cpu_used_milli"] / max(tot["cpu_milli"], 1),
        "mem_alloc": tot["memory_used_mib"] / max(tot["memory_mib"], 1),
        "fragmentation": fragmentation(s),
        "pods": tot["pods"],
        "models": models,
    }


def sample(s: ClusterState, t: float, pending: int) -> dict[str, float]:
    """One point of the overview's history chart."""
    tot = s.totals()
    return {
        "t": t,
        "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
        "mem_alloc": tot["device_memory_used_mib"] / max(tot["device_memory_mib"], 1),
        "fragmentation": fragmentation(s),
        "pending": float(pending),
    }


def topology(s: ClusterState) -> dict[str, Any]:
    """Spine groups -> leaves -> racks -> nodes (NVLink domains per node)."""
    spines: dict[str, dict[str, dict[str, list[dict[str, Any]]]]] = {}
    for i, node in enumerate(s.nodes):
        if not s.present[i]:
            continue
        domains: dict[int, int] = {}
        for dev in node.devices:
            domains[dev.nvlink_domain] = domains.get(dev.nvlink_domain, 0) + 1
        cap = int(s.dev_core_cap[i].sum())
        spines.setdefault(node.spine, {}).setdefault(node.leaf, {}).setdefault(node.rack, []).append({
            "name": node.name, "model": node.devices[0].model if node.devices else "",
            "gpus": len(node.devices), "nvlink_domains": [n for d, n in sorted(domains.items()) if d >= 0],
            "pcie_only": domains.get(-1, 0), "alloc": float(s.dev_core_used[i].sum() / cap) if cap else 0.0,
            "schedulable": bool(s.schedulable[i])})
    f = s.fabric
    return {
        "fabric": {"type": str(f.type), "link_gbps": f.link_gbps, "oversubscription": f.oversubscription,
                   "nvlink_gbps_per_gpu": f.nvlink_gbps_per_gpu},
        "spines": [
            {"name": sp, "leaves": [
                {"name": lf, "racks": [{"name": rk, "nodes": nodes} for rk, nodes in sorted(racks.items())]}
                for lf, racks in sorted(leaves.items())]}
            for sp, leaves in sorted(spines.items())
        ],
    }
