"""Jobs as Kubernetes sees them: the batch/v1 Job the control plane makes for a job of its API, and what any
Job in the queue says (ours, or one a user created with ``kubectl apply``). Pure: plain dicts in and out, no
client, so everything here is unit-tested without a server.

A Job is **in the queue** when it carries the label ``gpucluster.io/queue: TENANT``. The control plane admits
it when the engine has a placement for every pod of its gang (``parallelism`` pods): it writes the decision
on the Job (annotation ``gpucluster.io/admission``: who decided, the run's attempt, each slot's node and HAMi
device annotations) and releases it (``spec.suspend: false``); the Job controller then makes the pods, and
each is bound into a slot (``gpucluster.io/reservation`` on the pod, HAMi's annotations, a Binding). The
admission on the Job is the record a restarted or newly elected control plane rebuilds from.

Labels and annotations on a Job (all optional but the first):

* ``gpucluster.io/queue: TENANT`` (label): queue it, charged to this tenant (quota, fair share);
* ``gpucluster.io/priority: N``: queue priority (0..1000, default 0);
* ``gpucluster.io/duration-s: S``: the expected run time (queue policies that order by it; the Job ends when
  Kubernetes says so);
* ``gpucluster.io/preemptible: "false"``: never suspended to make room for another job;
* in the pod template, ``nvidia.com/use-gputype`` (HAMi) restricts the GPU models.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gpucluster.devices import DeviceInputError, VendorRegistry
from gpucluster.jobs import CLAIM_CONTAINER_PREFIX, JobSpec, Workload, job_spec
from gpucluster.kubernetes.convert import (
    BIND_PHASE_ANNOTATION,
    BIND_TIME_ANNOTATION,
    VGPU_NODE_ANNOTATION,
    VGPU_TIME_ANNOTATION,
    allocation_from_pod,
    decision_annotations,
)
from gpucluster.model import Allocation, Pod
from gpucluster.model.labels import (
    ADMISSION_ANNOTATION,
    DURATION_ANNOTATION,
    JOB_ID_ANNOTATION,
    JOB_LABEL,
    JOB_NAME_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MESSAGE_ANNOTATION,
    PREEMPTIBLE_ANNOTATION,
    PRIORITY_ANNOTATION,
    QUEUE_LABEL,
    REFUSED_ANNOTATION,
    REQUEST_ANNOTATION,
    RESERVATION_ANNOTATION,
    TENANT_ANNOTATION,
)
from gpucluster.model.limits import MAX_JOB_DURATION_S, MAX_PRIORITY, MAX_REPLICAS

COMPLETION_INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets")
"""JobSet: group, version, plural."""
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
"""On a JobSet's child Jobs and their pods: the JobSet's name (same namespace)."""
PYTORCHJOB_API = ("kubeflow.org", "v1", "pytorchjobs")
"""PyTorchJob (the Kubeflow training operator's): group, version, plural."""
PYTORCH_REPLICA_TYPES = ("Master", "Worker")
"""The replica types of a PyTorchJob, in slot order (the Master's pod takes slot 0)."""
TRAINING_JOB_NAME_LABEL = "training.kubeflow.org/job-name"
TRAINING_REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
TRAINING_REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
"""On the pods the training operator makes: the job's name, the replica type (lower case) and index."""
CONTROLLER_UID_LABELS = ("batch.kubernetes.io/controller-uid", "controller-uid")
DEFAULT_IMAGE = "busybox:1.36"
MAIN_CONTAINER = "main"
_NOT_DEVICES = frozenset({VGPU_NODE_ANNOTATION, VGPU_TIME_ANNOTATION, BIND_TIME_ANNOTATION, BIND_PHASE_ANNOTATION})


# ---------------------------------------------------------------------------------------------- admissions
@dataclass(frozen=True, slots=True)
class Slot:
    """Where one pod of an admitted Job goes: a node and HAMi's device annotations (what it holds there)."""

    node: str
    devices: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Admission:
    """The decision written on a Job when it is admitted (annotation ``gpucluster.io/admission``)."""

    id: str
    by: str
    """The control-plane replica that decided."""
    attempt: int
    """The engine's run number (names the reservations: ``<job>-<attempt>-<slot>``)."""
    at: float
    """Epoch seconds of the decision (wall clock: replicas share no other)."""
    slots: tuple[Slot, ...]
    count_only: bool = False
    """Admitted by GPU count alone (comparison mode): slots may be fewer than pods."""

    def to_json(self) -> str:
        return json.dumps({"id": self.id, "by": self.by, "attempt": self.attempt, "at": round(self.at, 3),
                           "slots": [{"node": s.node, "devices": dict(s.devices)} for s in self.slots],
                           **({"countOnly": True} if self.count_only else {})}, separators=(",", ":"))

    @classmethod
    def parse(cls, text: str, where: str) -> Admission:
        try:
            raw = json.loads(text)
            slots = tuple(Slot(str(s["node"]), {str(k): str(v) for k, v in dict(s.get("devices") or {}).items()})
                          for s in raw["slots"])
            return cls(str(raw["id"]), str(raw.get("by", "")), int(raw["attempt"]), float(raw.get("at", 0.0)),
                       slots, bool(raw.get("countOnly", False)))
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: not an admission record: {exc}") from None


def admission_of(decisions: Sequence[Allocation | None], registry: VendorRegistry, *, admission_id: str, by: str,
                 attempt: int, at: float, count_only: bool = False) -> Admission:
    """The admission record of allocations decided for a job's slots (in slot order; None: a slot with no place
    yet, count-only admission)."""
    slots = []
    for alloc in decisions:
        if alloc is None:
            slots.append(Slot(""))
            continue
        ann = decision_annotations(alloc, registry, at)
        slots.append(Slot(alloc.node, {k: v for k, v in ann.items() if k not in _NOT_DEVICES}))
    return Admission(admission_id, by, attempt, at, tuple(slots), count_only)


def slot_allocation(task: Pod, slot: Slot, node_spec: Any, registry: VendorRegistry) -> Allocation:
    """The allocation an admission's slot holds for the task pod ``task`` (rebuilt from its annotations)."""
    annotated = replace(task, annotations={**task.annotations, **slot.devices})
    return allocation_from_pod(annotated, node_spec, registry)


# ---------------------------------------------------------------------------------------------- our Jobs
def request_of(spec: JobSpec) -> dict[str, Any]:
    """The job as its API body (and the store's columns): what a replica needs to rebuild its :class:`JobSpec`."""
    return {
        "name": spec.display_name, "tenant": spec.tenant, "replicas": spec.num_tasks,
        "resources": dict(spec.resources),
        "duration_s": spec.duration_s if math.isfinite(spec.duration_s) else None,
        "priority": spec.priority, "gpu_type": spec.gpu_type, "node_selector": dict(spec.node_selector),
        "kind": spec.kind.value, "preemptible": spec.preemptible, "ref_gpu": spec.ref_gpu,
        "work_class": spec.work_class, "speedup": dict(spec.speedup), "tokens": spec.tokens,
        "submitted_at": spec.submitted_at, "workload": spec.workload.to_dict() if not spec.workload.empty else {},
        **({"claims": [c.to_dict() for c in spec.claims]} if spec.claims else {}),
    }


def spec_from_request(job_id: str, raw: Mapping[str, Any], registry: VendorRegistry, submit_s: float) -> JobSpec:
    """:func:`request_of` read back (``ValueError("where: why")``)."""
    return job_spec(job_id, name=str(raw["name"]), tenant=str(raw["tenant"]), replicas=int(raw["replicas"]),
                    resources=dict(raw["resources"]), duration_s=raw.get("duration_s"), submit_s=submit_s,
                    priority=int(raw.get("priority", 0)), gpu_type=str(raw.get("gpu_type", "")),
                    node_selector=dict(raw.get("node_selector") or {}), kind=str(raw.get("kind", "train")),
                    preemptible=bool(raw.get("preemptible", True)),
                    submitted_at=float(raw.get("submitted_at", 0.0)), registry=registry,
                    ref_gpu=str(raw.get("ref_gpu", "")), work_class=str(raw.get("work_class", "")),
                    speedup={str(k): float(v) for k, v in dict(raw.get("speedup") or {}).items()},
                    tokens=float(raw.get("tokens", 0.0)), workload=raw.get("workload") or None,
                    claims=raw.get("claims") or None)


def _container(spec: JobSpec, image: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The main container and the pod's volumes."""
    work = spec.workload
    container: dict[str, Any] = {"name": MAIN_CONTAINER, "image": work.image or image,
                                 "resources": {"limits": {k: str(v) for k, v in spec.resources.items()}}}
    if work.command or work.args:
        if work.command:
            container["command"] = list(work.command)
        if work.args:
            container["args"] = list(work.args)
    elif not work.image:  # the placeholder: sleep for the run time (or until deleted)
        container["command"] = (["sleep", str(math.ceil(spec.duration_s))] if math.isfinite(spec.duration_s)
                                else ["sh", "-c", "while true; do sleep 3600; done"])
    env: list[dict[str, Any]] = []
    for e in work.env:
        if e.secret or e.config_map:
            ref = {"name": e.secret or e.config_map, "key": e.key, **({"optional": True} if e.optional else {})}
            env.append({"name": e.name, "valueFrom": {"secretKeyRef" if e.secret else "configMapKeyRef": ref}})
        else:
            env.append({"name": e.name, "value": e.value})
    if env:
        container["env"] = env
    env_from = [{("secretRef" if f.secret else "configMapRef"):
                 {"name": f.secret or f.config_map, **({"optional": True} if f.optional else {})},
                 **({"prefix": f.prefix} if f.prefix else {})} for f in work.env_from]
    if env_from:
        container["envFrom"] = env_from
    if work.working_dir:
        container["workingDir"] = work.working_dir
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for i, v in enumerate(work.volumes):
        name = v.name or f"vol-{i}"
        kind, obj = v.source
        source = ({"persistentVolumeClaim": {"claimName": obj, **({"readOnly": True} if v.read_only else {})}}
                  if kind == "pvc" else {"configMap": {"name": obj}} if kind == "config_map"
                  else {"secret": {"secretName": obj}})
        volumes.append({"name": name, **source})
        mounts.append({"name": name, "mountPath": v.mount_path, **({"readOnly": True} if v.read_only else {}),
                       **({"subPath": v.sub_path} if v.sub_path else {})})
    if mounts:
        container["volumeMounts"] = mounts
    return container, volumes


def job_manifest(spec: JobSpec, namespace: str, scheduler_name: str, *, image: str = DEFAULT_IMAGE,
                 registry: VendorRegistry | None = None) -> dict[str, Any]:
    """The batch/v1 Job for a job of the control plane's API: named after the job id, indexed, ``parallelism =
    completions = replicas``, created suspended (released when admitted), ``backoffLimit: 0`` (a failed pod
    fails the job), pods for ``schedulerName`` with the job's resources as limits and its workload."""
    labels = {QUEUE_LABEL: spec.tenant, JOB_LABEL: spec.job_id, MANAGED_BY_LABEL: MANAGED_BY}
    pod_annotations = {TENANT_ANNOTATION: spec.tenant, JOB_NAME_ANNOTATION: spec.display_name}
    if spec.gpu_type and registry is not None and spec.template is not None:
        for vendor in dict.fromkeys(r.vendor for _, r in spec.template.device_requests):
            pod_annotations[registry[vendor].names.use_type_annotation] = spec.gpu_type
    container, volumes = _container(spec, image)
    work = spec.workload
    pod_spec: dict[str, Any] = {"schedulerName": scheduler_name, "restartPolicy": "Never",
                                "containers": [container]}
    if not work.image:
        pod_spec["terminationGracePeriodSeconds"] = 0
    if volumes:
        pod_spec["volumes"] = volumes
    if work.service_account:
        pod_spec["serviceAccountName"] = work.service_account
    if work.tolerations:
        pod_spec["tolerations"] = [{k: v for k, v in (
            ("key", t.key), ("operator", t.operator), ("value", t.value), ("effect", t.effect),
            ("tolerationSeconds", t.toleration_seconds)) if v not in ("", None)} for t in work.tolerations]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    if spec.claims:
        entries = [f"{CLAIM_CONTAINER_PREFIX}{i}" for i in range(len(spec.claims))]
        pod_spec["resourceClaims"] = [{"name": e, "resourceClaimTemplateName": claim_template_name(spec.job_id, i)}
                                      for i, e in enumerate(entries)]
        container["resources"]["claims"] = [{"name": e} for e in entries]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": spec.job_id, "namespace": namespace, "labels": labels,
            "annotations": {JOB_ID_ANNOTATION: spec.job_id, JOB_NAME_ANNOTATION: spec.display_name,
                            REQUEST_ANNOTATION: json.dumps(request_of(spec), separators=(",", ":")),
                            PRIORITY_ANNOTATION: str(spec.priority)},
        },
        "spec": {
            "suspend": True,
            "completionMode": "Indexed",
            "parallelism": spec.num_tasks,
            "completions": spec.num_tasks,
            "backoffLimit": 0,
            "template": {"metadata": {"labels": labels, "annotations": pod_annotations}, "spec": pod_spec},
        },
    }


def claim_template_name(job_id: str, i: int) -> str:
    """The ResourceClaimTemplate of a job's ``claims[i]`` (each task pod's claim is made from it)."""
    return f"{job_id}-{CLAIM_CONTAINER_PREFIX}{i}"


def claim_templates(spec: JobSpec, namespace: str, job_uid: str) -> list[dict[str, Any]]:
    """The ResourceClaimTemplates (``resource.k8s.io/v1``) of a job of the API with ``claims``, owned by its Job
    (``job_uid``: deleted with it): one per claim, one request ``gpu`` of ``count`` devices of the DeviceClass,
    with ``memory_mib`` of each device's consumable memory (``capacity.requests.memory``) when given."""
    out = []
    for i, c in enumerate(spec.claims):
        exactly: dict[str, Any] = {"deviceClassName": c.device_class, "allocationMode": "ExactCount",
                                   "count": c.count}
        if c.memory_mib:
            exactly["capacity"] = {"requests": {"memory": f"{c.memory_mib}Mi"}}
        out.append({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": claim_template_name(spec.job_id, i), "namespace": namespace,
                         "labels": {JOB_LABEL: spec.job_id, MANAGED_BY_LABEL: MANAGED_BY},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": spec.job_id,
                                              "uid": job_uid}]},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
        })
    return out


# ---------------------------------------------------------------------------------------------- any Job
@dataclass(slots=True)
class QueueJob:
    """What one Job object in the queue says (see :func:`parse_queue_job`)."""

    uid: str
    namespace: str
    name: str
    job_id: str
    tenant: str
    ours: bool
    """Made by the control plane for a job of its API."""
    spec: JobSpec | None
    error: str = ""
    """Why it can never be queued (a bad label, template, or scheduler name); with ``spec`` None."""
    suspended: bool = False
    admission: Admission | None = None
    finished: str = ""
    """``Complete`` or ``Failed`` once Kubernetes says so."""
    finish_message: str = ""
    active: int = 0
    succeeded: int = 0
    failed: int = 0
    deleting: bool = False
    resource_version: str = ""
    created: float = 0.0
    refused: str = ""
    """Why it was refused (``gpucluster.io/refused``), once written."""
    message: str = ""
    """The leader's last word on why it waits (``gpucluster.io/message``)."""
    annotations: Mapping[str, str] = field(default_factory=dict)
    kind: str = "Job"
    """``Job`` (batch/v1), ``JobSet`` or ``PyTorchJob`` (read as one, :func:`jobset_as_job`,
    :func:`pytorchjob_as_job`)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


def _epoch(stamp: Any) -> float:
    if not stamp:
        return 0.0
    try:
        return dt.datetime.fromisoformat(str(stamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


NATIVE_ID_PREFIX = "k-"
"""Job ids of the workloads found in the cluster (:func:`native_id`); the REST API's are ``j-``."""


def native_id(uid: str) -> str:
    """The job id of a Job the control plane did not make: ``k-`` and its uid's first 12 hex digits."""
    return NATIVE_ID_PREFIX + uid.replace("-", "")[:12]


def parse_queue_job(obj: Mapping[str, Any], registry: VendorRegistry, scheduler_name: str,
                    submit_s: float = 0.0) -> QueueJob:
    """A Job object (JSON dict) in the queue -> :class:`QueueJob`. A Job that cannot be run here (bad template,
    another scheduler) comes back with ``error`` saying where and why and no spec."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    uid = str(meta.get("uid") or "")
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name") or "")
    job_id = annotations.get(JOB_ID_ANNOTATION) or native_id(uid)
    tenant = labels.get(QUEUE_LABEL, "")
    finished, finish_message = "", ""
    for cond in status.get("conditions") or []:
        if cond.get("status") == "True" and cond.get("type") in ("Complete", "Failed"):
            finished = str(cond["type"])
            finish_message = ": ".join(x for x in (str(cond.get("reason") or ""), str(cond.get("message") or ""))
                                       if x)
    kind = str(obj.get("kind")) if obj.get("kind") in ("JobSet", "PyTorchJob") else "Job"
    q = QueueJob(uid, namespace, name, job_id, tenant, REQUEST_ANNOTATION in annotations, None,
                 suspended=bool(spec.get("suspend")), finished=finished, finish_message=finish_message,
                 active=int(status.get("active") or 0), succeeded=int(status.get("succeeded") or 0),
                 failed=int(status.get("failed") or 0), deleting=bool(meta.get("deletionTimestamp")),
                 resource_version=str(meta.get("resourceVersion") or ""), created=_epoch(meta.get("creationTimestamp")),
                 refused=annotations.get(REFUSED_ANNOTATION, ""), message=annotations.get(MESSAGE_ANNOTATION, ""),
                 annotations=annotations, kind=kind)
    where = f"{kind} {q.key}"
    if obj.get("error"):  # a JobSet or PyTorchJob that is no gang of one shape (jobset_as_job, pytorchjob_as_job)
        q.error = str(obj["error"])
        return q
    if ADMISSION_ANNOTATION in annotations:
        try:
            q.admission = Admission.parse(annotations[ADMISSION_ANNOTATION], f"{where}: metadata.annotations"
                                                                             f"[{ADMISSION_ANNOTATION}]")
        except ValueError as exc:
            q.error = str(exc)
            return q
    try:
        q.spec = _spec_of(q, obj, registry, scheduler_name, submit_s)
    except ValueError as exc:
        q.error = str(exc)
    return q



def annotation_number(ann: Mapping[str, str], key: str, lo: float, hi: float, default: float, where: str) -> float:
    """The number the annotation ``key`` of ``ann`` holds, within ``lo..hi`` (``default`` when it is absent);
    ``ValueError("{where}: metadata.annotations[key]: why")`` for a value that is not a number or out of range."""
    if key not in ann:
        return default
    try:
        value = float(ann[key])
    except ValueError:
        raise ValueError(f"{where}: metadata.annotations[{key}]: not a number: {ann[key]!r}") from None
    if not lo <= value <= hi:
        raise ValueError(f"{where}: metadata.annotations[{key}]: must be within {lo:g}..{hi:g}, got {value:g}")
    return value


def first_container(pod_spec: Mapping[str, Any]) -> tuple[dict[str, Any], Workload]:
    """A pod spec's first container read as the queue reads a task: its limits (its requests when it has no
    limits) and its :class:`Workload` (image, command, args, working directory, the pod's service account)."""
    containers = pod_spec.get("containers") or [{}]
    first = containers[0] if isinstance(containers[0], Mapping) else {}
    resources = first.get("resources") or {}
    limits = dict(resources.get("limits") or resources.get("requests") or {})
    workload = Workload(image=str(first.get("image") or ""),
                        command=tuple(str(x) for x in first.get("command") or ()),
                        args=tuple(str(x) for x in first.get("args") or ()),
                        working_dir=str(first.get("workingDir") or ""),
                        service_account=str(pod_spec.get("serviceAccountName") or ""))
    return limits, workload

def _spec_of(q: QueueJob, obj: Mapping[str, Any], registry: VendorRegistry, scheduler_name: str,
             submit_s: float) -> JobSpec:
    where = f"{q.kind} {q.key}"
    if q.ours:
        try:
            raw = json.loads(q.annotations[REQUEST_ANNOTATION])
            return spec_from_request(q.job_id, raw, registry, submit_s)
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{where}: metadata.annotations[{REQUEST_ANNOTATION}]: {exc}") from None
    if not q.tenant or len(q.tenant) > 63 or not all(c.isalnum() or c == "-" for c in q.tenant) \
            or q.tenant != q.tenant.lower() or q.tenant.startswith("-") or q.tenant.endswith("-"):
        raise ValueError(f"{where}: metadata.labels[{QUEUE_LABEL}]: {q.tenant!r} is not a tenant name "
                         "(a lower-case DNS label)")
    spec = obj.get("spec") or {}
    template = spec.get("template") or {}
    tspec = template.get("spec") or {}
    got = str(tspec.get("schedulerName") or "default-scheduler")
    if got != scheduler_name:
        field_ = str(obj.get("templateField") or "spec.template")
        raise ValueError(f"{where}: {field_}.spec.schedulerName: must be {scheduler_name!r} for the queue to "
                         f"place its pods, got {got!r}")
    parallelism = spec.get("parallelism")
    replicas = 1 if parallelism is None else int(parallelism)
    completions = spec.get("completions")
    if completions is not None:
        replicas = min(replicas, int(completions))
    if not 1 <= replicas <= MAX_REPLICAS:
        raise ValueError(f"{where}: spec.parallelism: the gang must be 1..{MAX_REPLICAS} pods, got {replicas}")
    tmeta = template.get("metadata") or {}
    manifest = {"kind": "Pod", "metadata": {**tmeta, "name": "task", "namespace": q.namespace}, "spec": tspec}
    try:
        pod = registry.parse_pod(manifest, f"{where}: {obj.get('templateField') or 'spec.template'}")
    except DeviceInputError as exc:
        raise ValueError(str(exc)) from None
    selector = {str(k): str(v) for k, v in (tspec.get("nodeSelector") or {}).items()}
    pod = replace(pod, node_selector=selector)
    ann = q.annotations
    priority = int(annotation_number(ann, PRIORITY_ANNOTATION, 0, MAX_PRIORITY, 0, where))
    duration = annotation_number(ann, DURATION_ANNOTATION, 1e-3, MAX_JOB_DURATION_S, math.inf, where)
    preemptible = ann.get(PREEMPTIBLE_ANNOTATION, "true").lower() not in ("false", "0", "no")
    limits, workload = first_container(tspec)
    gpu_type = ",".join(dict.fromkeys([*pod.constraints.use_types, *(
        t for c in (pod.constraints.per_vendor or {}).values() for t in c.use_types)]))
    return JobSpec(q.job_id, submit_s, pod.device_count * replicas, duration, tenant=q.tenant, priority=priority,
                   gpu_type=gpu_type, checkpoint_interval_s=0.0, name=q.name, preemptible=preemptible,
                   node_selector=selector, template=pod, replicas=replicas, resources=limits,
                   submitted_at=q.created, workload=workload)


# ---------------------------------------------------------------------------------------------- JobSets
def _job_conditions(obj: Mapping[str, Any], done: str) -> list[dict[str, Any]]:
    """A workload's status conditions read as a batch/v1 Job's: its ``done`` condition (a JobSet's ``Completed``,
    a PyTorchJob's ``Succeeded``) as ``Complete``, ``Failed`` as it is, the others left out."""
    out = []
    for cond in (obj.get("status") or {}).get("conditions") or []:
        kind = {done: "Complete", "Failed": "Failed"}.get(str(cond.get("type") or ""))
        if kind:
            out.append({**cond, "type": kind})
    return out


def jobset_as_job(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A JobSet (``jobset.x-k8s.io/v1alpha2``) read as the batch/v1 Job the queue knows (``kind: JobSet`` kept):
    its metadata; ``spec.suspend``; one gang of ``parallelism = completions =`` the sum over
    ``spec.replicatedJobs`` of ``replicas`` x the Job template's ``parallelism`` (capped by its ``completions``);
    the replicated Jobs' pod template (they must all ask for the same resources, on the same scheduler and
    nodes; else ``error`` says where and why); its ``Completed``/``Failed`` condition as ``Complete``/``Failed``.
    """
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    where = f"JobSet {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    rjobs = spec.get("replicatedJobs") or []
    total, template, first, error = 0, None, "", ""
    if not isinstance(rjobs, list) or not rjobs:
        error = f"{where}: spec.replicatedJobs: at least one replicated Job is required"
        rjobs = []
    for i, rj in enumerate(rjobs):
        rj = rj if isinstance(rj, Mapping) else {}
        jspec = (rj.get("template") or {}).get("spec") or {}
        try:
            replicas = int(rj.get("replicas", 1))
            par = 1 if jspec.get("parallelism") is None else int(jspec["parallelism"])
            if jspec.get("completions") is not None:
                par = min(par, int(jspec["completions"]))
        except (TypeError, ValueError):
            error = error or f"{where}: spec.replicatedJobs[{i}]: replicas and parallelism must be integers"
            continue
        total += max(replicas, 0) * max(par, 0)
        tmpl = jspec.get("template") or {}
        tspec = tmpl.get("spec") or {}
        shape = json.dumps([[c.get("resources") for c in tspec.get("containers") or [] if isinstance(c, Mapping)],
                            tspec.get("schedulerName"), tspec.get("nodeSelector")], sort_keys=True)
        if template is None:
            template, first = tmpl, shape
        elif shape != first and not error:
            error = (f"{where}: spec.replicatedJobs[{i}].template.spec.template: asks for other resources (or "
                     f"scheduler, or nodes) than replicatedJobs[0]; the queue admits a JobSet whose pods are alike")
    conditions = _job_conditions(obj, "Completed")
    out: dict[str, Any] = {"apiVersion": "/".join(JOBSET_API[:2]), "kind": "JobSet", "metadata": meta,
                           "spec": {"suspend": bool(spec.get("suspend")), "parallelism": total, "completions": total,
                                    "template": template or {}},
                           "status": {"conditions": conditions}}
    if error:
        out["error"] = error
    return out


# ---------------------------------------------------------------------------------------------- PyTorchJobs
def _count(value: Any, where: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError(f"{where}: must be an integer, got {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{where}: must be an integer, got {value!r}") from None


def pytorchjob_as_job(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A PyTorchJob (``kubeflow.org/v1``, the Kubeflow training operator's) read as the batch/v1 Job the queue
    knows (``kind: PyTorchJob`` kept): its metadata; ``spec.runPolicy.suspend`` as ``spec.suspend``; one gang of
    all its replicas, ``spec.pytorchReplicaSpecs.Master.replicas`` (1 when given without a count) plus
    ``Worker.replicas``, the Master's pod in slot 0 (``offsets``: the first slot of each replica type, by the
    lower-case name the operator puts in ``training.kubeflow.org/replica-type``); the replicas' pod template
    (Master and Workers must ask for the same resources, on the same scheduler and nodes: the engine admits a
    gang of one shape); its ``Succeeded``/``Failed`` condition as ``Complete``/``Failed``.

    Refused (``error`` says where and why): no replica spec, a replica type the training operator does not
    know for PyTorch, more than one Master, a count that is no integer, replica types of different shapes,
    ``runPolicy.schedulingPolicy.minAvailable`` outside 1..all replicas, a ``schedulingPolicy.queue`` other
    than the ``gpucluster.io/queue`` label, and an ``elasticPolicy`` (the gang's size is fixed here)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    where = f"PyTorchJob {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    run_policy = spec.get("runPolicy") or {}
    sched = run_policy.get("schedulingPolicy") or {}
    rspecs = spec.get("pytorchReplicaSpecs")
    total, template, field_, first, error = 0, None, "", "", ""
    offsets: dict[str, int] = {}
    try:
        if not isinstance(rspecs, Mapping) or not rspecs:
            raise ValueError(f"{where}: spec.pytorchReplicaSpecs: a Master or Worker replica spec is required")
        unknown = sorted(str(k) for k in rspecs if k not in PYTORCH_REPLICA_TYPES)
        if unknown:
            raise ValueError(f"{where}: spec.pytorchReplicaSpecs.{unknown[0]}: not a replica type of a PyTorchJob "
                             f"(Master, Worker)")
        for rtype in PYTORCH_REPLICA_TYPES:
            rs = rspecs.get(rtype)
            if rs is None:
                continue
            at = f"spec.pytorchReplicaSpecs.{rtype}"
            rs = rs if isinstance(rs, Mapping) else {}
            replicas = _count(rs.get("replicas"), f"{where}: {at}.replicas", 1)
            if replicas < 0 or (rtype == "Master" and replicas > 1):
                raise ValueError(f"{where}: {at}.replicas: " + (
                    "a PyTorchJob has one Master" if replicas > 1 else f"must not be negative, got {replicas}"))
            offsets[rtype.lower()] = total
            total += replicas
            tmpl = rs.get("template") or {}
            tspec = tmpl.get("spec") or {}
            shape = json.dumps([[c.get("resources") for c in tspec.get("containers") or [] if isinstance(c, Mapping)],
                                tspec.get("schedulerName"), tspec.get("nodeSelector")], sort_keys=True)
            if template is None:
                template, field_, first = tmpl, f"{at}.template", shape
            elif shape != first:
                raise ValueError(f"{where}: {at}.template: asks for other resources (or scheduler, or nodes) than "
                                 f"{field_}; the queue admits a PyTorchJob whose Master and Workers are alike")
        if total < 1:
            raise ValueError(f"{where}: spec.pytorchReplicaSpecs: no replicas (Master and Worker replicas are 0)")
        if sched.get("minAvailable") is not None:
            least = _count(sched["minAvailable"], f"{where}: spec.runPolicy.schedulingPolicy.minAvailable", 0)
            if not 1 <= least <= total:
                raise ValueError(f"{where}: spec.runPolicy.schedulingPolicy.minAvailable: must be within 1..{total} "
                                 f"(its replicas), got {least}")
        label = str((meta.get("labels") or {}).get(QUEUE_LABEL) or "")
        if sched.get("queue") and str(sched["queue"]) != label:
            raise ValueError(f"{where}: spec.runPolicy.schedulingPolicy.queue: {sched['queue']!r} is not its "
                             f"{QUEUE_LABEL} label {label!r} (the label names the tenant; leave queue out or the same)")
        if spec.get("elasticPolicy") is not None:
            raise ValueError(f"{where}: spec.elasticPolicy: an elastic PyTorchJob is not queued (the gang's size is "
                             "fixed: all its replicas are admitted together)")
    except ValueError as exc:
        error = str(exc)
    conditions = _job_conditions(obj, "Succeeded")
    out: dict[str, Any] = {"apiVersion": "/".join(PYTORCHJOB_API[:2]), "kind": "PyTorchJob", "metadata": meta,
                           "spec": {"suspend": bool(run_policy.get("suspend")), "parallelism": total,
                                    "completions": total, "template": template or {}},
                           "status": {"conditions": conditions}, "templateField": field_ or "spec.pytorchReplicaSpecs",
                           "offsets": offsets}
    if error:
        out["error"] = error
    return out


def pytorchjob_owner(obj: Mapping[str, Any]) -> str:
    """The uid of the PyTorchJob that made this pod (its controller ``ownerReference``), "" for any other pod."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "PyTorchJob" and str(ref.get("apiVersion") or "").startswith(
                f"{PYTORCHJOB_API[0]}/") and ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


def replica_slot(obj: Mapping[str, Any], offsets: Mapping[str, int]) -> int | None:
    """The slot of a PyTorchJob's pod: its replica type's first slot (``offsets``, :func:`pytorchjob_as_job`) plus
    its ``training.kubeflow.org/replica-index``; None when its labels do not say."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    rtype = str(labels.get(TRAINING_REPLICA_TYPE_LABEL) or "").lower()
    try:
        index = int(str(labels.get(TRAINING_REPLICA_INDEX_LABEL)))
    except ValueError:
        return None
    return offsets[rtype] + index if rtype in offsets and index >= 0 else None


# ---------------------------------------------------------------------------------------------- pods
def pod_job_uid(obj: Mapping[str, Any]) -> str:
    """The uid of the Job that made this pod ("" when no Job did)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for key in CONTROLLER_UID_LABELS:
        if labels.get(key):
            return str(labels[key])
    return ""


def completion_index(obj: Mapping[str, Any]) -> int | None:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(COMPLETION_INDEX_ANNOTATION)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


@dataclass(slots=True)
class PodView:
    """What the control plane keeps about one pod of a queued Job."""

    key: str
    job_uid: str
    index: int | None
    node: str
    phase: str
    scheduler_name: str
    deleting: bool
    reservation: str
    restarts: int
    exit_code: int | None
    reason: str
    created: str
    bind_time: float | None
    obj: Mapping[str, Any]

    @property
    def live(self) -> bool:
        return self.phase not in ("Succeeded", "Failed") and not self.deleting


def claim_tenant(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(uid, tenant) of a pod that uses ResourceClaims (``spec.resourceClaims``, or the claim kube-scheduler
    made for its DRA-backed extended resources), whoever schedules it; None for any other pod. The tenant is
    the pod's ``gpucluster.io/queue`` label, else its ``gpucluster.io/tenant`` annotation, else its namespace
    (as a pod of the control plane's jobs is charged: ``Pod.charged_tenant``)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not spec.get("resourceClaims") and not status.get("extendedResourceClaimStatus"):
        return None
    meta = obj.get("metadata") or {}
    tenant = str((meta.get("labels") or {}).get(QUEUE_LABEL) or (meta.get("annotations") or {}).get(
        TENANT_ANNOTATION) or meta.get("namespace") or "default")
    return str(meta.get("uid") or ""), tenant


def pod_view(obj: Mapping[str, Any], key: str) -> PodView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    ann = meta.get("annotations") or {}
    restarts = 0
    exit_code: int | None = None
    reason = ""
    for cs in status.get("containerStatuses") or []:
        restarts += int(cs.get("restartCount") or 0)
        term = (cs.get("state") or {}).get("terminated") or (cs.get("lastState") or {}).get("terminated")
        if term and exit_code is None:
            exit_code = int(term.get("exitCode") or 0)
            reason = f"container {cs.get('name')}: {term.get('reason') or 'Terminated'} (exit code {exit_code})"
            if term.get("message"):
                reason += f": {term['message']}"
    if not reason and status.get("phase") == "Failed":
        reason = str(status.get("message") or status.get("reason") or "")
    raw_bind = ann.get(BIND_TIME_ANNOTATION)
    try:
        bind_time = float(raw_bind) if raw_bind is not None else None
    except ValueError:
        bind_time = None
    return PodView(key, pod_job_uid(obj), completion_index(obj), str(spec.get("nodeName") or ""),
                   str(status.get("phase") or ""), str(spec.get("schedulerName") or ""),
                   bool(meta.get("deletionTimestamp")), str(ann.get(RESERVATION_ANNOTATION) or ""), restarts,
                   exit_code, reason, str(meta.get("creationTimestamp") or ""), bind_time, obj)


__all__ = [
    "ADMISSION_ANNOTATION",
    "DEFAULT_IMAGE",
    "JOBSET_API",
    "JOBSET_NAME_LABEL",
    "JOB_ID_ANNOTATION",
    "MESSAGE_ANNOTATION",
    "NATIVE_ID_PREFIX",
    "PYTORCHJOB_API",
    "PYTORCH_REPLICA_TYPES",
    "QUEUE_LABEL",
    "REFUSED_ANNOTATION",
    "TRAINING_JOB_NAME_LABEL",
    "TRAINING_REPLICA_INDEX_LABEL",
    "TRAINING_REPLICA_TYPE_LABEL",
    "Admission",
    "PodView",
    "QueueJob",
    "Slot",
    "admission_of",
    "claim_template_name",
    "claim_templates",
    "claim_tenant",
    "completion_index",
    "job_manifest",
    "jobset_as_job",
    "native_id",
    "parse_queue_job",
    "pod_job_uid",
    "pod_view",
    "pytorchjob_as_job",
    "pytorchjob_owner",
    "replica_slot",
    "request_of",
    "slot_allocation",
    "spec_from_request",
]
