"""Bare pods of a pod group as one job of the queue (``gpucluster up --kubeconfig``). Pure: plain dicts in, a
:class:`~gpucluster.jobs.JobSpec` out, no client.

A pod is a **member of a queued pod group** when

* no Job made it (a Job's pods are the Job's: :mod:`.workloads`), nor the training operator for a queued
  PyTorchJob (that PyTorchJob's); a pod owned by another controller (an unqueued PyTorchJob, a Volcano Job) is a
  member like a bare pod;
* its ``spec.schedulerName`` is the control plane's (``gpucluster``);
* it names a gang: our ``gpucluster.io/gang`` (+ ``gpucluster.io/gang-min-member``) annotations, the
  ``scheduling.x-k8s.io/pod-group`` label (the PodGroup's ``spec.minMember``), or 1.37's
  ``spec.schedulingGroup.podGroupName`` (the PodGroup's ``minCount``): :mod:`.gangs`;
* and, when the control plane runs with ``--pod-groups labelled``, it carries the label ``gpucluster.io/queue``.

The group is one job: ``minMember`` tasks of the first member's resources, charged to the tenant of the
``gpucluster.io/queue`` label, else the pod's ``gpucluster.io/tenant`` annotation, else its namespace (as every
pod of this backend is charged). It is queued once ``minMember`` members exist, admitted all or nothing by the
engine, and its members are bound into the admission's slots. It is never preempted: no controller would make
its pods again.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpucluster.devices import VendorRegistry
from gpucluster.jobs import JobSpec
from gpucluster.kubernetes.convert import KubeInputError, parse_pod, pod_key
from gpucluster.kubernetes.gangs import GangRef, gang_ref
from gpucluster.kubernetes.workloads import annotation_number, first_container, pod_job_uid
from gpucluster.model.labels import (
    DURATION_ANNOTATION,
    GANG_ANNOTATION,
    GANG_MIN_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    TENANT_ANNOTATION,
)
from gpucluster.model.limits import MAX_JOB_DURATION_S, MAX_PRIORITY, MAX_REPLICAS

GROUP_UID_PREFIX = "podgroup:"
"""The pseudo uid a pod group's members are filed under (beside the Job uids of Jobs' pods)."""
POD_GROUP_MODES = ("all", "labelled", "none")
"""``up --pod-groups``: queue every pod group of the scheduler name, only those labelled
``gpucluster.io/queue`` (a secondary scheduler with the same name binds the rest), or none."""


@dataclass(frozen=True, slots=True)
class Member:
    """What makes a pod a member of a queued pod group."""

    namespace: str
    gang: str
    """The gang's name as the scheduler knows it (``podgroup/NAME`` for the label convention)."""
    ref: GangRef | None
    """The PodGroup convention (its size is the PodGroup's), None for our annotations."""
    min_member: int
    """Our ``gpucluster.io/gang-min-member`` (0: not given, or a PodGroup's)."""

    @property
    def uid(self) -> str:
        return group_uid(self.namespace, self.gang)

    @property
    def name(self) -> str:
        """The display name: the PodGroup's or our gang's."""
        return self.ref.name if self.ref is not None else self.gang


def is_labelled(obj: Mapping[str, Any]) -> bool:
    return bool(((obj.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL))


def member_of(obj: Mapping[str, Any], scheduler_name: str, mode: str = "all") -> Member | None:
    """The pod group a pod belongs to as a job of the queue, or None (see the module docstring)."""
    if mode == "none" or pod_job_uid(obj):
        return None
    if str((obj.get("spec") or {}).get("schedulerName") or "") != scheduler_name:
        return None
    if mode == "labelled" and not is_labelled(obj):
        return None
    meta = obj.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    ann = meta.get("annotations") or {}
    ours = str(ann.get(GANG_ANNOTATION) or "")
    if ours:
        try:
            size = int(str(ann.get(GANG_MIN_ANNOTATION) or 0))
        except ValueError:
            size = 0
        return Member(namespace, ours, None, max(size, 0))
    ref = gang_ref(obj)
    return Member(namespace, ref.gang, ref, 0) if ref is not None else None


def group_uid(namespace: str, gang: str) -> str:
    return f"{GROUP_UID_PREFIX}{namespace}/{gang}"


def group_job_id(namespace: str, gang: str, first_uid: str = "") -> str:
    """The job id of a pod group: ``g-``, 12 hex digits of its namespace and name and, when ``first_uid`` (the
    uid of its oldest member) is given, ``-`` and 8 hex digits of that uid. The same on every replica and after
    a restart, and a new one when the name is reused by new pods after the group's job ended (whichever replica
    saw the old one)."""
    digest = hashlib.sha1(f"{namespace}/{gang}".encode(), usedforsecurity=False).hexdigest()[:12]
    if not first_uid:
        return f"g-{digest}"
    return f"g-{digest}-{hashlib.sha1(first_uid.encode(), usedforsecurity=False).hexdigest()[:8]}"


def named_tenant(objs: Sequence[Mapping[str, Any]]) -> str | None:
    """The tenant a pod group's members name, as :func:`group_spec` reads it: their ``gpucluster.io/queue`` label
    (members without it follow the labelled ones), else their ``gpucluster.io/tenant`` annotation; "" when they
    name none (the group is charged to its namespace's tenant). None while they disagree (members relabelled one
    at a time): a change of it is acted on once they agree again (:meth:`KubeRuntime._group_relabelled`)."""
    labels = {str(((o.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "") for o in objs} - {""}
    if not labels:
        labels = {str(((o.get("metadata") or {}).get("annotations") or {}).get(TENANT_ANNOTATION) or "")
                  for o in objs}
    return next(iter(labels)) if len(labels) == 1 else ("" if not labels else None)


def _tenant_ok(tenant: str) -> bool:
    return (0 < len(tenant) <= 63 and all(c.isalnum() or c == "-" for c in tenant) and tenant == tenant.lower()
            and not tenant.startswith("-") and not tenant.endswith("-"))


MIXED_SHAPES_WHY = ("the queue admits a pod group as minMember slots of one shape (the engine places a gang of one "
                    "pod template: it has no slot per member shape), so a group whose members ask for different "
                    "resources is refused, not placed by a guess; give the other pods their own scheduler or group, "
                    "or make them ask alike")
"""Why a pod group of mixed shapes is refused (the end of its ``Refused`` message)."""


def _asks(obj: Mapping[str, Any]) -> str:
    """What a pod's containers ask for, as a user wrote it: ``container train: nvidia.com/gpu=8, cpu=4``."""
    parts = []
    for c in (obj.get("spec") or {}).get("containers") or []:
        res = (c.get("resources") or {}) if isinstance(c, Mapping) else {}
        asked = dict(res.get("limits") or res.get("requests") or {})
        parts.append(f"container {c.get('name')}: " + (", ".join(f"{k}={v}" for k, v in sorted(asked.items()))
                                                        or "nothing"))
    return "; ".join(parts) or "no containers"


def _shape(obj: Mapping[str, Any], registry: VendorRegistry) -> Any:
    pod = parse_pod(obj, registry)
    return tuple((c.cpu_milli, c.memory_mib, c.devices) for c in pod.containers), pod


def group_spec(job_id: str, member: Member, objs: Sequence[Mapping[str, Any]], min_member: int,
               registry: VendorRegistry, submit_s: float = 0.0, created: float = 0.0,
               namespace_tenant: str | None = None) -> JobSpec:
    """The job of a pod group whose ``min_member`` members ``objs`` (oldest first) exist. ``ValueError("where:
    why")`` when it can never be queued: members asking for different resources, members charged to different
    tenants, a bad tenant name, a size out of range, a bad annotation. ``namespace_tenant``: the tenant the
    group's namespace is bound to (:mod:`.tenancy`), charged when the pods name no tenant."""
    where = f"pod group {member.namespace}/{member.name}"
    if not objs:
        raise ValueError(f"{where}: no members")
    if not 1 <= min_member <= MAX_REPLICAS:
        raise ValueError(f"{where}: minMember: the gang must be 1..{MAX_REPLICAS} pods, got {min_member}")
    try:
        shapes = [(pod_key(o), *_shape(o, registry)) for o in objs]
    except KubeInputError as exc:
        raise ValueError(f"{where}: {exc}") from None
    first_key, first_shape, first = shapes[0]
    for i, (key, shape, _pod) in enumerate(shapes[1:], 1):
        if shape != first_shape:
            mine, theirs = _asks(objs[i]), _asks(objs[0])
            said = (f"({mine}) where pod {first_key} asks for ({theirs})" if mine != theirs
                    else "(other device requests in its annotations)")
            raise ValueError(f"{where}: pod {key} asks for other resources than pod {first_key} {said}; "
                             f"{MIXED_SHAPES_WHY}")
    labelled = {str(((o.get("metadata") or {}).get("labels") or {}).get(QUEUE_LABEL) or "") for o in objs} - {""}
    if len(labelled) > 1:
        raise ValueError(f"{where}: metadata.labels[{QUEUE_LABEL}]: members are charged to different tenants: "
                         f"{', '.join(sorted(labelled))}")
    tenant = next(iter(labelled)) if labelled else (first.tenant or namespace_tenant or first.charged_tenant)
    if not _tenant_ok(tenant):
        raise ValueError(f"{where}: metadata.labels[{QUEUE_LABEL}]: {tenant!r} is not a tenant name "
                         "(a lower-case DNS label)")
    meta = objs[0].get("metadata") or {}
    ann = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    at = f"{where}: pod {first_key}"
    priority = int(annotation_number(ann, PRIORITY_ANNOTATION, 0, MAX_PRIORITY, 0, at))
    duration = annotation_number(ann, DURATION_ANNOTATION, 1e-3, MAX_JOB_DURATION_S, math.inf, at)
    limits, workload = first_container(objs[0].get("spec") or {})
    template = replace(first, name="task", gang="", gang_min_member=0)
    gpu_type = ",".join(dict.fromkeys([*first.constraints.use_types, *(
        t for c in (first.constraints.per_vendor or {}).values() for t in c.use_types)]))
    return JobSpec(job_id, submit_s, template.device_count * min_member, duration, tenant=tenant,
                   priority=priority, gpu_type=gpu_type, checkpoint_interval_s=0.0, name=member.name,
                   preemptible=False, node_selector=dict(first.node_selector), template=template,
                   replicas=min_member, resources=limits, submitted_at=created, workload=workload)


__all__ = ["GROUP_UID_PREFIX", "MIXED_SHAPES_WHY", "POD_GROUP_MODES", "Member", "group_job_id", "group_spec",
           "group_uid", "is_labelled", "member_of", "named_tenant"]
