"""Admission: one way to turn a request into a job, and one check of whether it can ever run.

* :func:`job_spec` builds a control-plane job (the REST API's body, ``gpucluster submit``) from HAMi-style
  container limits; a bad field is a ``ValueError("where: why")``.
* :func:`never_fits` says why a job could not run even on the empty cluster (too few matching nodes, devices,
  CPU or memory, or beyond its tenant's quota limits); the engine refuses such a job on arrival and the control
  plane refuses it at submission.
* :func:`least_gpus` is the fewest GPU-equivalents a job could hold (``model.share``: per device the larger of
  its compute share and its memory share, so a pod holding a whole device's memory holds the device).

Queue order is the queue policy's (:mod:`gpucluster.jobs.policies`); quota is the ``QuotaTree`` behind the
``Quota`` plugin, checked when the engine places the job.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpucluster.devices import DeviceInputError, VendorRegistry
from gpucluster.jobs.model import CLAIM_CONTAINER_PREFIX, DeviceClaim, JobKind, JobSpec, split_types, task_pods
from gpucluster.jobs.speed import check_speed_fields
from gpucluster.jobs.workload import Workload
from gpucluster.model import ClusterState, DeviceConstraints, Pod
from gpucluster.model.limits import MAX_JOB_SPEEDUP, MAX_JOB_TOKENS
from gpucluster.model.share import largest_devices, pod_gpus_at_least
from gpucluster.scheduler import feasibility
from gpucluster.scheduler.feasibility import Infeasible
from gpucluster.scheduler.plugins.quota import QuotaTree, pod_charge

MAX_JOB_CLAIMS = 4
"""DRA claims one task may ask for."""
MAX_CLAIM_DEVICES = 16
"""Devices one claim may ask for."""
MAX_CLAIM_MEMORY_MIB = 1 << 22
"""Consumable memory one claim may ask of each device (4 TiB)."""
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@functools.cache
def default_registry() -> VendorRegistry:
    """The vendors as configured (``VendorRegistry.from_settings``), built once."""
    return VendorRegistry.from_settings()


def template_pod(resources: Mapping[str, Any], *, tenant: str = "default", priority: int = 0, gpu_type: str = "",
                 node_selector: Mapping[str, str] | None = None, registry: VendorRegistry | None = None,
                 claims: Sequence[DeviceClaim] = ()) -> Pod:
    """One task's pod from container limits (``{"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, "cpu": "4"}``)
    and DRA ``claims`` (each a ``claim-<i>`` pseudo container asking for the equivalent HAMi devices: ``count``
    NVIDIA GPUs, with ``memory_mib`` of each's memory when given, else whole); ``ValueError("resources: why")``
    when they do not parse, ask for nothing, or ask for devices both ways."""
    reg = registry or default_registry()
    names = reg["nvidia"].names
    containers: list[dict[str, Any]] = [{"name": "main", "resources": {"limits": dict(resources)}}]
    for i, c in enumerate(claims):
        limits: dict[str, Any] = {names.resource_count: c.count}
        if c.memory_mib:
            limits[names.resource_memory] = c.memory_mib
        containers.append({"name": f"{CLAIM_CONTAINER_PREFIX}{i}", "resources": {"limits": limits}})
    manifest = {"kind": "Pod", "metadata": {"name": "task", "namespace": tenant},
                "spec": {"priority": priority, "containers": containers}}
    try:
        pod = reg.parse_pod(manifest, "resources")
    except DeviceInputError as exc:
        raise ValueError(str(exc).replace("resources: spec.containers[0].resources.limits: ", "resources: ")) \
            from None
    if claims and pod.containers[0].devices:
        raise ValueError("claims: ask for devices either in resources or in claims, not both")
    if not pod.device_requests and pod.cpu_milli == 0 and pod.memory_mib == 0:
        raise ValueError("resources: asks for nothing (give nvidia.com/gpu, cpu or memory, or claims)")
    types = split_types(gpu_type)
    if types:
        pod = replace(pod, constraints=DeviceConstraints(types, *_rest(pod.constraints)))
    return replace(pod, node_selector=dict(node_selector or {}))


def _rest(c: DeviceConstraints) -> tuple[tuple[str, ...], tuple[str, ...], tuple[str, ...]]:
    return c.nouse_types, c.use_uuids, c.nouse_uuids


def device_claims(raw: Sequence[DeviceClaim | Mapping[str, Any]] | None) -> tuple[DeviceClaim, ...]:
    """The API's ``claims`` (``[{"device_class": "gpu.nvidia.com", "count": 1, "memory_mib": 20480}]``) read and
    checked: ``ValueError("claims[i].field: why")``."""
    out = []
    items = list(raw or ())
    if len(items) > MAX_JOB_CLAIMS:
        raise ValueError(f"claims: at most {MAX_JOB_CLAIMS} entries, got {len(items)}")
    for i, item in enumerate(items):
        where = f"claims[{i}]"
        if isinstance(item, DeviceClaim):
            c = item
        elif isinstance(item, Mapping):
            unknown = set(item) - {"device_class", "count", "memory_mib"}
            if unknown:
                raise ValueError(f"{where}.{sorted(unknown)[0]}: not a field (device_class, count, memory_mib)")
            try:
                c = DeviceClaim(str(item.get("device_class") or ""), _whole(item.get("count", 1), f"{where}.count"),
                                _whole(item.get("memory_mib") or 0, f"{where}.memory_mib"))
            except TypeError as exc:
                raise ValueError(f"{where}: {exc}") from None
        else:
            raise ValueError(f"{where}: must be a mapping with device_class, count and memory_mib")
        if not c.device_class or len(c.device_class) > 253 or not _DNS_SUBDOMAIN.fullmatch(c.device_class):
            raise ValueError(f"{where}.device_class: {c.device_class!r} is not a DeviceClass name (a DNS subdomain: "
                             "lower-case letters, digits, '-' and '.')")
        if not 1 <= c.count <= MAX_CLAIM_DEVICES:
            raise ValueError(f"{where}.count: must be 1..{MAX_CLAIM_DEVICES}, got {c.count}")
        if not 0 <= c.memory_mib <= MAX_CLAIM_MEMORY_MIB:
            raise ValueError(f"{where}.memory_mib: must be 1..{MAX_CLAIM_MEMORY_MIB} (or omitted: whole devices), "
                             f"got {c.memory_mib}")
        out.append(c)
    return tuple(out)


def _whole(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where}: must be a whole number, got {value!r}")
    return value


def job_spec(job_id: str, *, name: str, tenant: str, replicas: int, resources: Mapping[str, Any],
             duration_s: float | None, submit_s: float, priority: int = 0, gpu_type: str = "",
             node_selector: Mapping[str, str] | None = None, kind: str = "train", preemptible: bool = True,
             submitted_at: float = 0.0, synthetic: bool = False, registry: VendorRegistry | None = None,
             ref_gpu: str = "", work_class: str = "", speedup: Mapping[str, float] | None = None,
             tokens: float = 0.0, workload: Workload | Mapping[str, Any] | None = None,
             claims: Sequence[DeviceClaim | Mapping[str, Any]] | None = None) -> JobSpec:
    """A control-plane job: ``replicas`` copies of the pod ``resources`` describe, run ``duration_s`` seconds
    (None = until cancelled) from when all of them are placed. ``ValueError("where: why")`` on bad input.

    Speed fields (:mod:`gpucluster.jobs.speed`): ``duration_s`` is seconds of work on ``ref_gpu`` (a catalog
    GPU model; empty = the same on every model), ``work_class`` the speed model's class (empty: from ``kind``),
    ``speedup`` measured speeds relative to ``ref_gpu`` per model, ``tokens`` an inference job's token count.
    ``workload``: what its containers run (:class:`~gpucluster.jobs.workload.Workload` or its dict form)."""
    if replicas <= 0:
        raise ValueError("replicas: must be > 0")
    try:
        job_kind = JobKind(kind)
    except ValueError:
        raise ValueError(f"kind: must be train or infer, got {kind!r}") from None
    if not 0.0 <= tokens <= MAX_JOB_TOKENS:  # NaN fails too
        raise ValueError(f"tokens: must be within 0..{MAX_JOB_TOKENS:g}, got {tokens!r}")
    for model, value in (speedup or {}).items():
        if not 0.0 < value <= MAX_JOB_SPEEDUP:
            raise ValueError(f"speedup.{model}: must be > 0 and at most {MAX_JOB_SPEEDUP:g}, got {value!r}")
    work = workload if isinstance(workload, Workload) else Workload.from_dict(workload)
    asked = device_claims(claims)
    template = template_pod(resources, tenant=tenant, priority=priority, gpu_type=gpu_type,
                            node_selector=node_selector, registry=registry, claims=asked)
    spec = JobSpec(
        job_id, submit_s, template.device_count * replicas, duration_s if duration_s is not None else math.inf,
        tenant=tenant, priority=priority, kind=job_kind, gpu_type=gpu_type, checkpoint_interval_s=0.0,
        name=name, preemptible=preemptible, node_selector=dict(node_selector or {}), template=template,
        replicas=replicas, resources=dict(resources), submitted_at=submitted_at, synthetic=synthetic,
        ref_gpu=ref_gpu, work_class=work_class, speedup=dict(speedup or {}), tokens=tokens, workload=work,
        claims=asked)
    check_speed_fields(spec)
    return spec


USER_PRIORITY = 10
"""Control-plane users' jobs keep at least this priority, so they go before the background workload."""


def user_submission(spec: JobSpec, now: float) -> JobSpec:
    """A user's job as a control plane queues it: arriving ``now`` (or at its own later ``submit_s``: a replayed
    trace), with at least :data:`USER_PRIORITY`."""
    return replace(spec, submit_s=max(spec.submit_s, now), priority=max(spec.priority, USER_PRIORITY))


def restored_submission(spec: JobSpec, now: float) -> JobSpec:
    """A user's job recovered after a control-plane restart: it keeps its submission time (never later than
    ``now``: queue order and waiting time carry over) and at least :data:`USER_PRIORITY`; it arrives ``now``."""
    return replace(spec, submit_s=min(spec.submit_s, now), priority=max(spec.priority, USER_PRIORITY))


def never_fits(spec: JobSpec, state: ClusterState, quota: QuotaTree | None = None) -> Infeasible | None:
    """Why the job could never run here, even on the empty cluster (``scheduler.feasibility.never_fits`` on its
    pods: devices, models, node selector, CPU, memory, room for the whole gang), or beyond a limit of its
    tenant's queues in ``quota``; None when it could."""
    pods = task_pods(spec, 0)
    found = feasibility.never_fits(pods, state)
    if found is not None:
        return Infeasible(found.where, f"can never fit the cluster: {found.why}")
    if quota is not None and quota.chain(spec.tenant):
        total = job_charge(spec, state)
        if not quota.could_ever_fit(spec.tenant, total):
            limits = [quota.queues[q].limit["gpu"] for q in quota.chain(spec.tenant) if "gpu" in quota.queues[q].limit]
            limit = f"tenant {spec.tenant}'s quota is {min(limits):g} GPUs" if limits else \
                f"a limit of tenant {spec.tenant}'s queues is lower"
            return Infeasible("quota", f"can never fit the quota of tenant {spec.tenant}: it holds at least "
                                       f"{total.get('gpu', 0.0):g} GPUs (each device counts max(compute share, "
                                       f"memory share)); {limit}")
    return None


def job_charge(spec: JobSpec, state: ClusterState) -> dict[str, float]:
    """What the whole job charges its tenant's queues before devices are chosen (the ``Quota`` plugin's
    estimate, :func:`~gpucluster.scheduler.plugins.quota.pod_charge`, summed over its tasks)."""
    snap = state.snapshot()
    total: dict[str, float] = {}
    for p in task_pods(spec, 0):
        for r, v in pod_charge(p, snap).items():
            total[r] = total.get(r, 0.0) + v
    return total


def least_gpus(spec: JobSpec, state: ClusterState) -> float:
    """The fewest GPU-equivalents the job could hold here (``model.share``: each task on its vendor's largest
    devices, each device counting max(compute share, memory share))."""
    largest = largest_devices(state)
    return sum(pod_gpus_at_least(p, largest) for p in task_pods(spec, 0))
