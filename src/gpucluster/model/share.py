"""What a pod holds of a GPU, in GPU-equivalents: the one figure quota admission, the tenants view, the
metrics and the dashboard count.

A share of a device is the larger of its compute share and its memory share, capped at one device:
``max(core_milli / device cores, memory_mib / device memory)``. Whoever holds all 80 GB of an 80 GB GPU holds
the whole GPU, whatever ``gpucores`` says, since nobody else can use it; whoever holds all of its compute holds
it too, whatever memory it leaves. A request without ``gpucores`` and without memory asks for the whole device's
memory (HAMi's default), so it counts one.

Before a pod is placed, the device is not known: :func:`pod_gpus_at_least` gives the smallest figure the pod
could hold on any device of the cluster (the largest device of its vendor), which is what admission may
refuse on; once placed, :func:`allocation_gpus` gives what it does hold.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpucluster.model.resources import CORE_MILLI_PER_DEVICE
from gpucluster.model.state import Allocation, ClusterState
from gpucluster.model.workload import DeviceRequest, Pod


def device_share(core_milli: float, memory_mib: float, core_cap: float, memory_cap: float) -> float:
    """The share of one device (0..1) held by a grant of ``core_milli`` compute and ``memory_mib`` memory on a
    device with ``core_cap`` and ``memory_cap``."""
    cores = core_milli / core_cap if core_cap > 0 else 0.0
    memory = memory_mib / memory_cap if memory_cap > 0 else 0.0
    return min(1.0, max(cores, memory))


def request_share(req: DeviceRequest, core_cap: float = CORE_MILLI_PER_DEVICE, memory_cap: float = 0.0) -> float:
    """GPU-equivalents one device request holds on devices of ``core_cap`` and ``memory_cap`` (its count x the
    share of each device). ``memory_cap`` 0 (unknown) counts only what does not depend on it."""
    memory = memory_cap * req.memory_pct / 100 if req.memory_pct is not None else float(req.memory_mib)
    share = device_share(req.core_milli, memory, core_cap, memory_cap)
    if req.memory_pct is not None:
        share = max(share, min(1.0, req.memory_pct / 100))
    return req.count * share


def allocation_gpus(state: ClusterState, alloc: Allocation) -> float:
    """GPU-equivalents a bound pod holds (each granted device's share, summed)."""
    i = state.node_index[alloc.node]
    return sum(device_share(g.core_milli, g.memory_mib, float(state.dev_core_cap[i, g.device_index]),
                            float(state.dev_mem_cap[i, g.device_index])) for g in alloc.grants)


def largest_devices(state: ClusterState) -> dict[str, tuple[float, float]]:
    """Vendor -> (largest compute, largest memory) of its devices anywhere in the cluster."""
    out: dict[str, tuple[float, float]] = {}
    for vendor, vid in state.vendors.ids.items():
        mask = state.dev_valid & (state.dev_vendor == vid)
        if mask.any():
            out[vendor] = (float(state.dev_core_cap[mask].max()), float(state.dev_mem_cap[mask].max()))
    return out


def pod_gpus_at_least(pod: Pod, largest: dict[str, tuple[float, float]]) -> float:
    """The fewest GPU-equivalents ``pod`` could hold on this cluster (each request on its vendor's largest
    device; ``largest`` from :func:`largest_devices`)."""
    total = 0.0
    for _, req in pod.device_requests:
        core_cap, memory_cap = largest.get(req.vendor, (float(CORE_MILLI_PER_DEVICE), 0.0))
        total += request_share(req, core_cap, memory_cap)
    return total


def pods_gpus(state: ClusterState, pods: Iterable[Pod]) -> float:
    """What ``pods`` hold: each bound pod's :func:`allocation_gpus`, each unbound one's lower bound."""
    largest: dict[str, tuple[float, float]] | None = None
    total = 0.0
    for pod in pods:
        alloc = state.allocations.get(pod.key)
        if alloc is not None:
            total += allocation_gpus(state, alloc)
            continue
        if largest is None:
            largest = largest_devices(state)
        total += pod_gpus_at_least(pod, largest)
    return total


def state_gpus_by_tenant(state: ClusterState) -> dict[str, float]:
    """Tenant -> GPU-equivalents its bound pods hold, over every allocation of the state."""
    out: dict[str, float] = {}
    for alloc in list(state.allocations.values()):
        tenant = alloc.tenant or (alloc.pod.charged_tenant if alloc.pod is not None else alloc.pod_key.split("/")[0])
        out[tenant] = out.get(tenant, 0.0) + allocation_gpus(state, alloc)
    return out


__all__ = [
    "allocation_gpus",
    "device_share",
    "largest_devices",
    "pod_gpus_at_least",
    "pods_gpus",
    "request_share",
    "state_gpus_by_tenant",
]
