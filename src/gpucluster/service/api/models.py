"""Request and response models of the REST API: what the OpenAPI schema at ``/openapi.json`` documents.

Requests are strict (unknown fields are 422) and bounded (``service.limits``, ``model.limits``); responses list
the keys every backend answers with, and allow more (a backend may add its own, e.g. the Kubernetes overview's
``kubernetes`` block).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

from gpucluster.jobs import (
    ENV_NAME_RE,
    MAX_CLAIM_DEVICES,
    MAX_CLAIM_MEMORY_MIB,
    MAX_JOB_CLAIMS,
    OBJECT_NAME_RE,
    SECRET_KEY_RE,
    VOLUME_NAME_RE,
    WORKLOAD_FIELDS,
    workload_fields,
)
from gpucluster.model.limits import (
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_ENV,
    MAX_ENV_FROM,
    MAX_ENV_VALUE_CHARS,
    MAX_IMAGE_CHARS,
    MAX_JOB_DURATION_S,
    MAX_JOB_SPEEDUP,
    MAX_JOB_TOKENS,
    MAX_PATH_CHARS,
    MAX_PRIORITY,
    MAX_REPLICAS,
    MAX_TENANT_QUEUED,
    MAX_TOLERATIONS,
    MAX_VOLUMES,
)
from gpucluster.service.limits import (
    MAX_RESOURCE_KEYS,
    MAX_RESOURCE_NAME_CHARS,
    MAX_RESOURCE_VALUE_CHARS,
)

NAME_RE = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
RESOURCE_NAME_RE = r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
MAX_QUOTA_GPUS = 1_000_000.0
MAX_GPU_TYPES = 16
"""GPU models one job may list in ``gpu_type``."""
MAX_SPEEDUP_MODELS = 64
"""GPU models one job may give a measured ``speedup`` for."""
MAX_SELECTOR_LABELS = 32
"""Labels one job's ``node_selector`` may ask for."""
LABEL_KEY_RE = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_RE = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"

Name = Annotated[str, StringConstraints(pattern=NAME_RE, max_length=63)]
ResourceName = Annotated[str, StringConstraints(pattern=RESOURCE_NAME_RE, max_length=MAX_RESOURCE_NAME_CHARS)]
GpuModel = Annotated[str, StringConstraints(max_length=64, pattern=r"^[^\x00-\x1f]*$")]
WorkClassName = Annotated[str, StringConstraints(max_length=64, pattern=r"^[A-Za-z0-9][-A-Za-z0-9_./]*$")]
LabelKey = Annotated[str, StringConstraints(pattern=LABEL_KEY_RE, max_length=317)]
LabelValue = Annotated[str, StringConstraints(pattern=LABEL_VALUE_RE, max_length=63)]
MAX_RESOURCE_INT = 2**53
"""Largest integer resource value taken from JSON (exactly representable everywhere); each resource has its own,
tighter bound (``model.limits``) checked when the job is turned into pods."""


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


# ---------------------------------------------------------------------------------------------- requests
ObjectName = Annotated[str, StringConstraints(pattern=OBJECT_NAME_RE, max_length=253)]
"""A Secret, ConfigMap, PersistentVolumeClaim or ServiceAccount name (in the job's namespace on Kubernetes)."""
Arg = Annotated[str, StringConstraints(max_length=MAX_ARG_CHARS)]


class EnvVarIn(_In):
    """One environment variable: ``value``, or ``key`` of the Secret ``secret`` or the ConfigMap ``config_map``."""

    name: Annotated[str, StringConstraints(pattern=ENV_NAME_RE, max_length=253)]
    value: Annotated[str, StringConstraints(max_length=MAX_ENV_VALUE_CHARS)] | None = None
    secret: ObjectName | None = Field(None, description="Read the value from this Secret's key.")
    config_map: ObjectName | None = Field(None, description="Read the value from this ConfigMap's key.")
    key: Annotated[str, StringConstraints(pattern=SECRET_KEY_RE, max_length=253)] | None = None
    optional: bool | None = Field(None, description="Start even when the Secret/ConfigMap or its key is missing.")


class EnvFromIn(_In):
    """Every key of a Secret or a ConfigMap as environment variables."""

    secret: ObjectName | None = None
    config_map: ObjectName | None = None
    prefix: Annotated[str, StringConstraints(pattern=ENV_NAME_RE, max_length=253)] | None = None
    optional: bool | None = None


class VolumeIn(_In):
    """A PersistentVolumeClaim (``pvc``), ConfigMap or Secret, by name, mounted at ``mount_path``."""

    mount_path: Annotated[str, StringConstraints(pattern=r"^/", max_length=MAX_PATH_CHARS)]
    pvc: ObjectName | None = None
    config_map: ObjectName | None = None
    secret: ObjectName | None = None
    read_only: bool | None = None
    sub_path: Annotated[str, StringConstraints(max_length=MAX_PATH_CHARS)] | None = None
    name: Annotated[str, StringConstraints(pattern=VOLUME_NAME_RE, max_length=63)] | None = Field(
        None, description="Volume name in the pod (default vol-<index>).")


class ClaimIn(_In):
    """Devices each pod asks for through Dynamic Resource Allocation (Kubernetes: a ResourceClaim per pod, made
    from a ResourceClaimTemplate of the job and allocated by the control plane's placement; embedded: the same
    number of GPUs, shared by memory when memory_mib is given)."""

    device_class: ObjectName = Field(description="DeviceClass the devices come from (e.g. gpu.nvidia.com).")
    count: int = Field(1, ge=1, le=MAX_CLAIM_DEVICES, description="Devices of that class each pod gets.")
    memory_mib: int | None = Field(
        None, ge=1, le=MAX_CLAIM_MEMORY_MIB,
        description="MiB of each device's consumable memory (a shared device, e.g. HAMi's DRA driver); omit for "
                    "whole devices. On Kubernetes the DeviceClass's devices must publish consumable memory.")


class TolerationIn(_In):
    key: Annotated[str, StringConstraints(pattern=LABEL_KEY_RE, max_length=317)] | None = None
    operator: Literal["Equal", "Exists"] | None = None
    value: Annotated[str, StringConstraints(pattern=LABEL_VALUE_RE, max_length=63)] | None = None
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] | None = None
    toleration_seconds: int | None = Field(None, ge=0, le=2**31 - 1)


class JobIn(_In):
    """A job: ``replicas`` identical pods, each with these HAMi-style container limits."""

    name: Name = Field(description="DNS-label job name.")
    tenant: Name | None = Field(None, description="Tenant; defaults to the caller's tenant.")
    replicas: int = Field(1, ge=1, le=MAX_REPLICAS, description="Pods placed all-or-nothing (a gang).")
    resources: dict[ResourceName, int | str] = Field(
        default_factory=dict, max_length=MAX_RESOURCE_KEYS,
        description='Per-pod limits, e.g. {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 50, '
                    '"nvidia.com/gpumem": 20000, "cpu": "4", "memory": "16Gi"}.')
    claims: list[ClaimIn] | None = Field(
        None, max_length=MAX_JOB_CLAIMS,
        description="Devices each pod gets through DRA (a DeviceClass and a count, optionally consumable memory), "
                    "instead of GPUs in resources.")
    duration_s: float | None = Field(None, gt=0, le=MAX_JOB_DURATION_S,
                                     description="Run time; omit to run until deleted.")
    priority: int = Field(0, ge=0, le=MAX_PRIORITY,
                          description="Queue priority; a tenant may use up to its max_priority.")
    gpu_type: Annotated[str, StringConstraints(max_length=MAX_GPU_TYPES * 65)] | list[GpuModel] | None = Field(
        None, description="GPU models the job may use (HAMi nvidia.com/use-gputype: model-name substrings, a "
                          "comma list or a list); omit for any. A gang stays on one model either way.")
    node_selector: dict[LabelKey, LabelValue] = Field(
        default_factory=dict, max_length=MAX_SELECTOR_LABELS,
        description="Node labels every pod's node must carry (Kubernetes nodeSelector).")
    kind: Literal["train", "infer"] = Field("train", description="Training or inference job.")
    preemptible: bool = Field(True, description="False: never stopped to make room for another job.")
    ref_gpu: GpuModel = Field(
        "", description="GPU model duration_s was measured on (a catalog model or alias: V100, H100, L40S ...): on "
                        "another model the job runs for duration_s / its speed there (the speed model, "
                        "docs/gpu-speed.md); empty = the same run time on every model.")
    work_class: WorkClassName | Literal[""] = Field(
        "", description="Speed-model work class (training/cnn, inference/llm-decode ...); empty = chosen from "
                        "kind.")
    speedup: dict[GpuModel, float] = Field(
        default_factory=dict, max_length=MAX_SPEEDUP_MODELS,
        description="Measured speed relative to ref_gpu per GPU model (e.g. {\"H100\": 3.1}); overrides the speed "
                    "model on those models. Needs ref_gpu.")
    tokens: float = Field(0.0, ge=0, le=MAX_JOB_TOKENS,
                          description="Tokens an inference job processes in all (cost per million tokens); 0 = "
                                      "not given.")
    # what the containers run (Kubernetes runs it; the embedded backend keeps it and simulates duration_s)
    image: Annotated[str, StringConstraints(max_length=MAX_IMAGE_CHARS)] | None = Field(
        None, description="Container image (registry/path:tag). On Kubernetes omitted = a placeholder that sleeps "
                          "duration_s; the embedded backend ignores it.")
    command: list[Arg] | None = Field(None, max_length=MAX_ARGS, description="Entrypoint (the image's if "
                                                                                 "omitted).")
    args: list[Arg] | None = Field(None, max_length=MAX_ARGS, description="Arguments to the entrypoint.")
    env: list[EnvVarIn] | None = Field(None, max_length=MAX_ENV, description="Environment variables.")
    env_from: list[EnvFromIn] | None = Field(None, max_length=MAX_ENV_FROM,
                                             description="Secrets and ConfigMaps whose keys become variables.")
    working_dir: Annotated[str, StringConstraints(pattern=r"^/", max_length=MAX_PATH_CHARS)] | None = Field(
        None, description="Working directory (absolute path).")
    volumes: list[VolumeIn] | None = Field(None, max_length=MAX_VOLUMES,
                                           description="PersistentVolumeClaims, ConfigMaps and Secrets to mount.")
    service_account: ObjectName | None = Field(None, description="ServiceAccount the pods run as.")
    tolerations: list[TolerationIn] | None = Field(None, max_length=MAX_TOLERATIONS,
                                                   description="Kubernetes tolerations of the pods.")

    def workload(self) -> dict[str, Any]:
        """The container fields as :meth:`gpucluster.jobs.workload.Workload.from_dict` reads them."""
        return workload_fields(self.model_dump(include=set(WORKLOAD_FIELDS), exclude_none=True))

    def gpu_types(self) -> str:
        """``gpu_type`` as HAMi's comma list (empty = any)."""
        raw = self.gpu_type if isinstance(self.gpu_type, list) else [self.gpu_type or ""]
        return ",".join(t.strip() for t in raw if t and t.strip())

    @field_validator("gpu_type")
    @classmethod
    def _few_types(cls, value: str | list[str] | None) -> str | list[str] | None:
        items = value if isinstance(value, list) else (value or "").split(",")
        if len([t for t in items if t.strip()]) > MAX_GPU_TYPES:
            raise ValueError(f"at most {MAX_GPU_TYPES} GPU models")
        return value

    @field_validator("speedup")
    @classmethod
    def _positive_speeds(cls, value: dict[str, float]) -> dict[str, float]:
        for key, speed in value.items():
            if not 0 < speed <= MAX_JOB_SPEEDUP:
                raise ValueError(f"{key}: must be > 0 and at most {MAX_JOB_SPEEDUP:g}, got {speed!r}")
        return value

    @field_validator("resources")
    @classmethod
    def _bounded_values(cls, value: dict[str, int | str]) -> dict[str, int | str]:
        for key, item in value.items():
            if isinstance(item, int) and not 0 <= item <= MAX_RESOURCE_INT:
                raise ValueError(f"{key}: must be within 0..{MAX_RESOURCE_INT}")
            if isinstance(item, str) and len(item) > MAX_RESOURCE_VALUE_CHARS:
                raise ValueError(f"{key}: at most {MAX_RESOURCE_VALUE_CHARS} characters")
        return value


class TenantIn(_In):
    name: Name
    quota_gpus: float | None = Field(None, ge=0, le=MAX_QUOTA_GPUS,
                                     description="GPU-equivalents the tenant may hold; omit = none.")
    weight: float = Field(1.0, gt=0, le=1000, description="Fair-share weight.")
    max_priority: int | None = Field(None, ge=0, le=MAX_PRIORITY,
                                     description="Highest job priority the tenant may ask for; omit = the "
                                                 "default (100).")
    max_queued_jobs: int | None = Field(None, ge=0, le=MAX_TENANT_QUEUED,
                                        description="Jobs the tenant may have pending at once (429 beyond); omit = "
                                                    "the default (gpucluster up --max-queued-jobs, 1000).")


class TenantPatch(_In):
    quota_gpus: float | None = Field(None, ge=0, le=MAX_QUOTA_GPUS,
                                     description="GPU-equivalents the tenant may hold; null = no quota.")
    weight: float | None = Field(None, gt=0, le=1000, description="Fair-share weight; omit = unchanged.")
    max_priority: int | None = Field(None, ge=0, le=MAX_PRIORITY,
                                     description="Highest job priority the tenant may ask for; omit = unchanged.")
    max_queued_jobs: int | None = Field(None, ge=0, le=MAX_TENANT_QUEUED,
                                        description="Jobs the tenant may have pending at once; null = the default "
                                                    "(gpucluster up --max-queued-jobs); omit = unchanged.")


class ExperimentIn(_In):
    policies: list[Annotated[str, StringConstraints(max_length=64)]] = Field(
        default_factory=lambda: ["stranding-fgd", "binpack", "spread"], min_length=1, max_length=4)
    jobs: int = Field(3000, ge=10, le=20000)
    seed: int = Field(0, ge=0, le=2**32 - 1)


# ---------------------------------------------------------------------------------------------- responses
class ErrorOut(BaseModel):
    error: str = Field(description="Why.")
    where: str = Field(description="The field, header or path part at fault.")
    status: int
    problems: list[dict[str, str]] | None = Field(None, description="Every invalid field (422 only).")


class Placement(_Out):
    pod: str
    node: str
    devices: list[dict[str, Any]]


class JobOut(_Out):
    id: str
    name: str
    tenant: str
    replicas: int
    resources: dict[str, Any]
    claims: list[dict[str, Any]] = Field(default_factory=list, description="Devices each pod gets through DRA.")
    duration_s: float | None
    priority: int
    gpu_type: str = Field("", description="GPU models the job may use (comma list); empty = any.")
    node_selector: dict[str, str] = Field(default_factory=dict)
    kind: str = Field("train", description="train or infer.")
    preemptible: bool = True
    ref_gpu: str = Field("", description="GPU model duration_s is measured on; empty = the same everywhere.")
    work_class: str = Field("", description="Speed-model work class; empty = chosen from kind.")
    speedup: dict[str, float] = Field(default_factory=dict, description="Measured speeds relative to ref_gpu.")
    tokens: float = Field(0.0, description="Tokens the job processes in all; 0 = not given.")
    gpu_speed: float | None = Field(None, description="Speed of the current (or last) run relative to ref_gpu "
                                                      "(its slowest GPU); None before it first ran.")
    image: str = Field("", description="Container image; empty = none given.")
    command: list[str] = Field(default_factory=list)
    args: list[str] = Field(default_factory=list)
    env: list[dict[str, Any]] = Field(default_factory=list)
    env_from: list[dict[str, Any]] = Field(default_factory=list)
    working_dir: str = ""
    volumes: list[dict[str, Any]] = Field(default_factory=list)
    service_account: str = ""
    tolerations: list[dict[str, Any]] = Field(default_factory=list)
    status: str
    message: str
    synthetic: bool
    submitted_at: float
    submitted_t: float
    started_t: float | None
    finished_t: float | None
    gpus: float = Field(description="GPU-equivalents: held while running, the least it could hold before.")
    placements: list[Placement]
    pruned: bool = Field(False, description=(
        "The job finished and left the control plane's memory under the retention policy (up --finished-job-ttl, "
        "--max-finished-jobs): read back from the store as it ended; the job list no longer shows it (the history, "
        "include=pruned, does)."))


class JobEventOut(_Out):
    at: float = Field(description="Wall-clock (Unix) time it was (last) recorded.")
    t: float = Field(description="Runtime clock time it last happened.")
    kind: str
    status: str
    message: str = Field(description="What happened (the latest message of a folded event).")
    count: int = Field(1, description="How many times it happened in a row: repeats (a waiting job's "
                                      "``unschedulable``) fold into one event, as Kubernetes counts them.")
    first_at: float | None = Field(None, description="Wall-clock time of the first of the folded repeats.")
    first_t: float | None = Field(None, description="Runtime clock time of the first of the folded repeats.")


class JobDetail(JobOut):
    events: list[JobEventOut]


class JobList(_Out):
    total: int
    t: float
    jobs: list[JobOut]
    pruned: int = Field(0, description=(
        "Finished jobs that left memory under the retention policy since the control plane started: not listed, "
        "each reads back by id (GET /api/v1/jobs/{id}) and in the history (include=pruned)."))
    next: str | None = Field(None, description=(
        "include=pruned: the cursor of the next page (pass it as before); null on the last page."))


class Health(_Out):
    ok: bool
    backend: str
    t: float
    ticks: int
    loop_error: str | None = Field(description="Why the scheduling loop fails (details for the admin only).")
    version: str


class WhoAmI(_Out):
    role: str
    tenant: str | None
    backend: str
    speed: float
    design: bool


class Overview(_Out):
    backend: str
    t: float
    nodes: int
    devices: int
    gpu_alloc: float
    queue: int
    jobs: dict[str, int]
    user_jobs: dict[str, int]
    speed: float
    gpu_utilisation: float | None = Field(None, description=(
        "Mean SM utilisation of the reporting GPUs at the last scrape, 0..1 (beside gpu_alloc, what they hold); "
        "null where the backend has no device metrics."))
    gpu_memory_used_fraction: float | None = Field(None, description=(
        "Framebuffer in use / physical framebuffer of the reporting GPUs, 0..1 (beside gpu_mem_alloc)."))
    allocated_idle_gpus: int | None = Field(None, description=(
        "GPUs with a pod on them and utilisation below idle_util_pct at the last scrape."))
    allocated_idle: list[dict[str, Any]] = Field(default_factory=list, description=(
        "The allocated-but-idle GPUs, emptiest first (node, gpu, util_pct, pod, job, job_name, tenant); at most 50."))


class NodeRow(_Out):
    name: str
    rack: str
    leaf: str
    gpus: int
    pods: int
    schedulable: bool
    dev_core_used: list[int]
    dev_mem_pct: list[float]
    dev_healthy: list[bool]


class NodeList(_Out):
    total: int
    t: float
    nodes: list[NodeRow]


class NodeDetail(NodeRow):
    devices: list[dict[str, Any]]


class FaultOut(_Out):
    ok: bool
    evicted_user_jobs: int


class AffectedJob(_Out):
    id: str
    name: str
    tenant: str
    synthetic: bool = Field(description="True for the background workload's jobs (embedded backend).")
    status: str = Field(description="The job's status after the action (a drained job is pending again).")


class NodeActionOut(_Out):
    node: str
    action: str = Field(description="``cordon``, ``uncordon`` or ``drain``.")
    schedulable: bool = Field(description="Whether new pods may land on the node after the action.")
    jobs: list[AffectedJob] = Field(description="Jobs the action moved (a drain evicts them back to the queue "
                                                "from their last checkpoint; they start elsewhere when room "
                                                "frees); empty for cordon and uncordon.")
    message: str


class RemediationDecision(_Out):
    id: str = Field(description="The planned action's id (``GET /api/v1/remediations``, ``planned[].id``).")
    decision: str = Field(description="``approved`` or ``dismissed``.")
    action: str
    target: str
    outcome: str = Field(description="``done`` or ``failed`` for an approval; ``dismissed``.")
    detail: str
    alert: str


class Topology(_Out):
    fabric: dict[str, Any]
    spines: list[dict[str, Any]]


class Alerts(_Out):
    firing: int
    alerts: list[dict[str, Any]]
    remediations: list[dict[str, Any]]


class TenantRow(_Out):
    name: str
    quota_gpus: float | None
    weight: float
    max_priority: int = Field(description="Highest job priority the tenant may ask for.")
    max_queued_jobs: int = Field(description="Jobs the tenant may have pending at once (429 beyond).")
    created: float | None
    fair_share_gpus: float
    gpus: float = Field(description="GPU-equivalents its running jobs hold (model.share).")
    pending_gpus: float
    running: int
    pending: int
    share_used: float
    over_quota: bool = Field(False, description="Its running jobs hold more GPUs than its quota (the quota was "
                                                "lowered, or jobs were admitted before it was set): no new job of "
                                                "it starts until it is back under.")


class TenantList(_Out):
    total_gpus: float
    tenants: list[TenantRow]


class TenantCreated(_Out):
    name: str
    quota_gpus: float | None
    weight: float
    max_priority: int
    max_queued_jobs: int
    token: str = Field(description="The tenant's new token, shown once; its previous tokens are revoked.")


class TokenIssued(_Out):
    name: str
    token: str = Field(description="The new token, shown once; the previous ones are revoked.")
    revoked: int = Field(description="Tokens revoked by this call.")


class TokensRevoked(_Out):
    name: str
    revoked: int


class AuditEntry(_Out):
    at: float
    actor: str
    action: str
    target: str
    detail: str


class AuditLog(_Out):
    entries: list[AuditEntry]


class TaskOut(_Out):
    id: str
    kind: str
    status: str
    progress: float
    stage: str
    created: float
    result: dict[str, Any] | None
    error: dict[str, str] | None
    files: list[str]


class TaskList(_Out):
    experiments: list[TaskOut]


class EventOut(_Out):
    id: str = Field(description="``e<n>`` (a job event) or ``a<n>`` (a cluster event from the audit log).")
    at: float = Field(description="Wall-clock (Unix) time it was recorded.")
    t: float | None = Field(description="Runtime clock time (job events).")
    type: str = Field(description="``job``, ``remediation`` or ``alert``.")
    kind: str = Field(description="Job: submitted, running, unschedulable, evicted, migrated, succeeded ...; "
                                  "remediation: the action; alert: firing or resolved.")
    object: str = Field(description="``job/<id>``, ``node/<name>`` or ``cluster``.")
    name: str
    tenant: str
    status: str
    message: str
    count: int = Field(1, description="Repeats folded into this event (a waiting job's ``unschedulable``); it "
                                      "comes back with a new id and a higher count when it repeats again.")
    first_at: float | None = Field(None, description="Wall-clock time of the first of the folded repeats.")
    first_t: float | None = Field(None, description="Runtime clock time of the first of the folded repeats.")


class EventList(_Out):
    events: list[EventOut]
    cursor: str = Field(description="Pass back as ``?cursor=`` for the events after these.")


class QueueRow(_Out):
    position: int = Field(description="1 = tried next.")
    id: str
    name: str
    tenant: str
    synthetic: bool
    priority: int
    replicas: int
    gpus: float
    waiting_s: float
    why: str = Field(description="Why it waits (the scheduler's counted reasons, quota ...).")
    blocked: str | None = Field(None, description="``quota``: its tenant's quota holds it back (freed GPUs would "
                                                  "not start it); ``never``: it can no longer start here (the "
                                                  "cluster or the quota changed since it was accepted); null.")
    est_start_t: float | None = Field(description="Rough start estimate (runtime clock); null = unknown or "
                                                  "blocked.")
    est_wait_s: float | None


class QueueView(_Out):
    t: float
    total: int = Field(description="Pending jobs in the whole queue (rows may be fewer: a tenant sees its own).")
    free_gpus: float
    jobs: list[QueueRow]


class RemediationPlan(_Out):
    available: bool = Field(description="False where the backend does not remediate on its own.")
    modes: dict[str, str] = Field(description="Per action: on, dry-run (planned only) or off.")
    planned: list[dict[str, Any]] = Field(description="Planned (dry-run) actions whose alert still fires, each with "
                                                      "an ``id`` to approve (``POST /api/v1/remediations/{id}/"
                                                      "approve``) or dismiss.")
    log: list[dict[str, Any]] = Field(description="Every decision, newest first.")


class HistoryOut(_Out):
    t: float
    range_s: float
    points: list[dict[str, float]]


class DeviceUsage(_Out):
    index: int
    reporting: bool
    util_pct: float | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    temp_c: float | None
    power_w: float | None
    xid: int | None
    history: dict[str, Any]


class NodeUsage(_Out):
    name: str
    t: float
    available: bool = Field(description="False where the backend has no device collector.")
    devices: list[DeviceUsage]


class SilenceIn(_In):
    alert: Annotated[str, StringConstraints(max_length=128)] = Field(
        "", description="Alert name (e.g. GpuXidCritical); empty = any alert.")
    target: Annotated[str, StringConstraints(max_length=300)] = Field(
        "", description="node, node/gpuN or cluster; empty = any target. A node also covers its GPUs.")
    duration_s: float = Field(3600.0, gt=0, le=30 * 86400, description="How long, in runtime clock seconds.")
    comment: Annotated[str, StringConstraints(max_length=500)] = ""


class SilenceOut(_Out):
    id: str
    alert: str
    target: str
    starts_t: float
    ends_t: float
    comment: str
    created_by: str


class SilenceList(_Out):
    t: float
    silences: list[SilenceOut]


ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": why} for code, why in (
        (400, "The body is not UTF-8 JSON, or a header is malformed."),
        (401, "Missing or unknown bearer token."),
        (403, "The token may not do this."),
        (404, "No such object (a tenant cannot tell others' objects from missing ones)."),
        (409, "Conflict with the object's state (already finished, key reused, token not rotatable here)."),
        (413, "Request body too large."),
        (422, "Invalid request: where and why."),
        (429, "Too many submissions: retry after Retry-After seconds."),
    )
}
"""Error answers shared by every route (documented in the schema)."""

__all__ = [
    "ERRORS",
    "NAME_RE",
    "AffectedJob",
    "Alerts",
    "AuditLog",
    "DeviceUsage",
    "ErrorOut",
    "EventList",
    "EventOut",
    "ExperimentIn",
    "FaultOut",
    "Health",
    "HistoryOut",
    "JobDetail",
    "JobIn",
    "JobList",
    "JobOut",
    "NodeActionOut",
    "NodeDetail",
    "NodeList",
    "NodeUsage",
    "Overview",
    "QueueRow",
    "QueueView",
    "RemediationDecision",
    "RemediationPlan",
    "SilenceIn",
    "SilenceList",
    "SilenceOut",
    "TaskList",
    "TaskOut",
    "TenantCreated",
    "TenantIn",
    "TenantList",
    "TenantPatch",
    "TokenIssued",
    "TokensRevoked",
    "Topology",
    "WhoAmI",
]
