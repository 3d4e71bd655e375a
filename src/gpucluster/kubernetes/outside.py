"""What the allocated ResourceClaims outside the control plane's jobs are charged, and to which tenant (the
figures :meth:`gpucluster.jobs.JobEngine.set_outside_use` counts in quota, fair share and usage).

Two rules, pure functions so they can be checked without a cluster:

* **Once per claim, to one tenant** (:func:`claim_charge_tenant`): a claim is charged once however many pods
  reserve it. Its tenant is the claim's own ``gpucluster.io/queue`` label, else its ``gpucluster.io/tenant``
  annotation; else the tenant of the pods reserving it when they all are of one tenant; else (pods of several
  tenants share it, or none of them is known) the claim's namespace. The order of ``reservedFor`` never
  matters.
* **Never more than the devices that exist** (:func:`claim_charges`): per device, the claims' charges add up to
  at most the device: one GPU-equivalent, its memory and its cores. Claims another scheduler allocated beyond a
  device's capacity (or whose shares, each the larger of compute and memory, add up to more than one device)
  are scaled down together on that device, in proportion to what each asks of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.dra import CLAIM_KEY_PREFIX
from gpucluster.model.labels import QUEUE_LABEL, TENANT_ANNOTATION
from gpucluster.model.share import device_share


@dataclass(frozen=True, slots=True)
class HeldShare:
    """What one claim holds of one device."""

    device: str
    """The device, unique in the cluster (``node/index``)."""
    gpu: float
    """GPU-equivalents (0..1: the larger of its compute and memory share)."""
    memory_mib: float
    cores: float
    """Percent of the device's compute."""
    memory_cap: float
    """The device's memory (MiB)."""
    cores_cap: float = 100.0
    """The device's compute (percent)."""


@dataclass(frozen=True, slots=True)
class OutsideClaim:
    key: str
    """``namespace/name`` of the claim."""
    tenant: str
    held: tuple[HeldShare, ...]


def claim_charge_tenant(namespace: str, labels: Mapping[str, str] | None, annotations: Mapping[str, str] | None,
                        reserving: Iterable[str]) -> str:
    """The tenant a claim is charged to (module docstring): ``reserving`` are the tenants of the pods in its
    ``reservedFor`` that are known (one entry per pod, in any order)."""
    own = str((labels or {}).get(QUEUE_LABEL) or (annotations or {}).get(TENANT_ANNOTATION) or "")
    if own:
        return own
    tenants = set(reserving)
    if len(tenants) == 1:
        return tenants.pop()
    return namespace or "default"


def claim_charges(claims: Iterable[OutsideClaim]) -> dict[str, tuple[str, dict[str, float]]]:
    """``claim key -> (tenant, {"gpu", "gpumem", "gpucores"})`` for :meth:`JobEngine.set_outside_use`: each
    claim once, each device charged at most once over all claims."""
    claims = list(claims)
    totals: dict[str, list[float]] = {}
    caps: dict[str, tuple[float, float]] = {}
    for c in claims:
        for h in c.held:
            t = totals.setdefault(h.device, [0.0, 0.0, 0.0])
            t[0] += max(h.gpu, 0.0)
            t[1] += max(h.memory_mib, 0.0)
            t[2] += max(h.cores, 0.0)
            caps[h.device] = (h.memory_cap, h.cores_cap)
    scale: dict[str, tuple[float, float, float]] = {}
    for device, (gpu, mem, cores) in totals.items():
        mem_cap, cores_cap = caps[device]
        scale[device] = (1.0 / gpu if gpu > 1.0 else 1.0,
                         mem_cap / mem if 0.0 < mem_cap < mem else 1.0,  # a capacity not known (0) caps nothing
                         cores_cap / cores if 0.0 < cores_cap < cores else 1.0)
    out: dict[str, tuple[str, dict[str, float]]] = {}
    for c in claims:
        gpu = mem = cores = 0.0
        for h in c.held:
            sg, sm, sc = scale[h.device]
            gpu += max(h.gpu, 0.0) * sg
            mem += max(h.memory_mib, 0.0) * sm
            cores += max(h.cores, 0.0) * sc
        out[c.key] = (c.tenant, {"gpu": gpu, "gpumem": mem, "gpucores": cores})
    return out


def outside_claims(cluster: KubeCluster, claimants: Mapping[str, tuple[str, str]]) -> list[OutsideClaim]:
    """The allocated claims of ``cluster`` that hold devices outside the control plane's jobs (kube-scheduler's
    DRA plugin, or a secondary scheduler, allocated them for some pod), with their tenant and what they hold of
    each device. ``claimants``: pod key -> (uid, tenant) of the pods using claims (:func:`claim_tenant`). The
    caller holds the cluster's lock."""
    state = cluster.state
    out: list[OutsideClaim] = []
    for key, info in cluster.claims.items():
        if info.allocated is None or key in cluster.claim_slots:
            continue  # not allocated, or one of our jobs' (its reservation holds and charges the devices)
        alloc = state.allocations.get(info.state_key)
        if alloc is None or alloc.node not in state.node_index:
            continue  # holds no GPU of ours
        reserving = []
        for resource, name, uid in info.reserved_for:
            known = claimants.get(f"{info.namespace}/{name}")
            if resource == "pods" and known is not None and known[0] == uid:
                reserving.append(known[1])
        meta = info.raw.get("metadata") or {}
        tenant = claim_charge_tenant(info.namespace, meta.get("labels"), meta.get("annotations"), reserving)
        i = state.node_index[alloc.node]
        held = []
        for g in alloc.grants:
            core_cap = float(state.dev_core_cap[i, g.device_index])
            mem_cap = float(state.dev_mem_cap[i, g.device_index])
            held.append(HeldShare(f"{alloc.node}/{g.device_index}",
                                  device_share(g.core_milli, g.memory_mib, core_cap, mem_cap),
                                  float(g.memory_mib), g.core_milli / 10, mem_cap, core_cap / 10))
        out.append(OutsideClaim(CLAIM_KEY_PREFIX + key, tenant, tuple(held)))
    return out


def outside_use(cluster: KubeCluster, claimants: Mapping[str, tuple[str, str]]
                ) -> dict[str, tuple[str, dict[str, float]]]:
    """What :meth:`JobEngine.set_outside_use` gets on Kubernetes: :func:`claim_charges` of
    :func:`outside_claims`."""
    return claim_charges(outside_claims(cluster, claimants))
