"""The job record every backend shares: what was asked (:class:`JobSpec`), where the job stands (:class:`Job`,
:class:`JobState`), what happened to it (:class:`JobEvent`), and the pods one run of it is made of
(:func:`task_pods`).

A job asks for ``num_tasks`` identical pods (tasks) that must all run at once (a gang when there are several).
Two ways to say what one task needs:

* a trace's job: ``num_gpus`` whole (or ``gpu_milli`` shares of) GPUs, split into tasks of ``gpus_per_task``
  (0 = the largest of 8/4/2/1 that divides ``num_gpus``), with ``cpu_milli_per_gpu`` / ``memory_mib_per_gpu``;
* a control-plane job: ``replicas`` copies of a ``template`` pod parsed from HAMi-style container limits
  (``resources``, see :func:`gpucluster.jobs.admission.job_spec`).

Its work is ``duration_s`` seconds at full speed (``inf``: until cancelled). A worse placement may slow it down
(the simulator's network model), so it then runs longer. Work survives preemption (the job checkpoints when it
is stopped) but an eviction by a failure loses the work since the last periodic checkpoint.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpucluster.jobs.workload import NO_WORKLOAD, Workload
from gpucluster.model import CORE_MILLI_PER_DEVICE, ContainerRequest, DeviceConstraints, DeviceRequest, Pod
from gpucluster.model.labels import DATASET_ANNOTATION, JOB_GPUS_ANNOTATION, JOB_LABEL, KIND_LABEL

MAX_TASK_GPUS = 8
"""Largest number of GPUs one task (pod) asks for; bigger jobs are split into tasks of this size or less."""

_NO_CONSTRAINTS = DeviceConstraints()
_NO_LABELS: Mapping[str, str] = {}


class JobStatus(enum.StrEnum):
    """The control plane's name for where a job stands (the API's ``status`` field): new and queued jobs are both
    ``pending``. A ``str``, so it compares equal to its value."""

    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED)


class JobState(enum.StrEnum):
    """Where a job stands. Only :func:`gpucluster.jobs.transitions.transition` changes it."""

    NEW = "new"
    """Accepted; its arrival (a trace's submit time) is still in the future."""
    QUEUED = "queued"
    """Waiting for a placement (new, preempted or evicted)."""
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """Refused on arrival (it can never fit), or its pods failed."""
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL

    @property
    def status(self) -> JobStatus:
        """The control plane's name for it (``pending`` for new and queued jobs; the API's status field)."""
        return JobStatus.PENDING if self in (JobState.NEW, JobState.QUEUED) else JobStatus(self.value)


_TERMINAL = frozenset({JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED})
STATUSES = tuple(s.value for s in JobStatus)
"""The control plane's job statuses (:attr:`JobState.status`), in life-cycle order."""


class JobKind(enum.StrEnum):
    TRAIN = "train"
    INFER = "infer"


def split_types(gpu_type: str) -> tuple[str, ...]:
    """``"A100,H100"`` -> ``("A100", "H100")`` (HAMi ``nvidia.com/use-gputype`` takes a comma list)."""
    return tuple(t.strip() for t in gpu_type.split(",") if t.strip())


CLAIM_CONTAINER_PREFIX = "claim-"
"""Name prefix of a task pod's pseudo container that stands for one of its job's :class:`DeviceClaim` (the
embedded backend places it as a device request; Kubernetes makes it a ResourceClaim of the pod)."""


@dataclass(frozen=True, slots=True)
class DeviceClaim:
    """Devices a task asks for through Dynamic Resource Allocation (the API's ``claims`` entry): ``count``
    devices of the DeviceClass ``device_class``, each with ``memory_mib`` of its consumable memory (0: the
    devices whole)."""

    device_class: str
    count: int = 1
    memory_mib: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"device_class": self.device_class, "count": self.count,
                **({"memory_mib": self.memory_mib} if self.memory_mib else {})}


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What was asked: a trace record or a control-plane submission (see the module docstring)."""

    job_id: str
    submit_s: float
    """Arrival time in seconds on the engine's clock (a trace's submit time; ``now`` for a submission)."""
    num_gpus: int
    """GPUs the job needs (all at once); with a ``template``, ``replicas`` x the template's devices."""
    duration_s: float
    """Run time at full speed on an ideal placement (the trace's duration); ``inf`` = until cancelled."""
    tenant: str = "default"
    """Tenant (virtual cluster / quota queue) the job is charged to."""
    model: str = ""
    """Model (job type) name, for the network model's gradient size and reports."""
    priority: int = 0
    kind: JobKind = JobKind.TRAIN
    gpus_per_task: int = 0
    """GPUs per task; 0 = choose (the largest of 8/4/2/1 that divides ``num_gpus``)."""
    cpu_milli_per_gpu: int = 4000
    memory_mib_per_gpu: int = 16384
    gpu_type: str = ""
    """GPU models the job insists on (HAMi ``nvidia.com/use-gputype``: model substrings, comma-separated);
    empty = any (a gang still stays on one model)."""
    dataset: str = ""
    """Dataset the job reads (data locality), empty = none."""
    checkpoint_interval_s: float = 1800.0
    """Seconds of work between periodic checkpoints (what a failure can lose at most); 0 = none (an
    eviction restarts the work from the last stop)."""
    gpu_milli: int = 1000
    """Share of each GPU in core milli (1000 = whole GPU; less = a HAMi-style fractional GPU, which also
    gets that share of the device memory)."""
    name: str = ""
    """Display name (the control plane's job name); empty = the id."""
    preemptible: bool = True
    """False: never chosen as a victim of preemption or reclaim."""
    node_selector: Mapping[str, str] = field(default_factory=dict)
    """Node labels every task's node must carry (Kubernetes ``nodeSelector``)."""
    template: Pod | None = None
    """One task's pod (control-plane jobs: parsed from ``resources``); None = built from ``num_gpus`` ..."""
    replicas: int = 0
    """Tasks of a ``template`` job."""
    resources: Mapping[str, Any] = field(default_factory=dict)
    """The container limits ``template`` was parsed from (Kubernetes manifests and the store keep them)."""
    submitted_at: float = 0.0
    """Wall-clock (Unix) time a control-plane job was accepted."""
    synthetic: bool = False
    """Part of the control plane's background workload (not persisted, not reported)."""
    ref_gpu: str = ""
    """GPU model ``duration_s`` was measured on (a :mod:`gpucluster.perf` catalog name or alias): on another model
    the job runs at the speed model's speed relative to it (:mod:`gpucluster.jobs.speed`); empty = the same speed
    on every model."""
    work_class: str = ""
    """Speed-model work class (``training/cnn``, ``inference/llm-decode`` ...); empty = chosen from ``kind`` and
    ``model``."""
    speedup: Mapping[str, float] = field(default_factory=dict)
    """Measured speed relative to ``ref_gpu`` per GPU model (overrides the speed model for those models)."""
    tokens: float = 0.0
    """Tokens an inference job processes in all (cost per million tokens); 0 = not given."""
    workload: Workload = NO_WORKLOAD
    """What its containers run (image, command, env, volumes ...): Kubernetes runs it; the simulated engine only
    keeps it (:mod:`gpucluster.jobs.workload`)."""
    claims: tuple[DeviceClaim, ...] = ()
    """Devices each task asks for through DRA (the ``template`` has one ``claim-<i>`` pseudo container each)."""
    # derived in __post_init__ (read in the scheduling pass for every queued job, so computed once)
    task_gpus: int = field(init=False, default=0)
    num_tasks: int = field(init=False, default=0)
    gpu_share: float = field(init=False, default=0.0)
    """GPUs the job occupies: devices x compute share (fractional for shared GPUs; a device asked for by
    memory alone counts its memory share when it is given as a percentage)."""
    whole: bool = field(init=False, default=True)
    """Every device is asked for whole (exclusive)."""
    cpu_milli: int = field(init=False, default=0)
    """Host CPU of all tasks."""
    memory_mib: int = field(init=False, default=0)
    """Host memory of all tasks."""
    shape: tuple[Any, ...] = field(init=False, default=())
    """What one task asks for, as a key: jobs of one shape (and tenant) are interchangeable for placement, so
    when one does not fit in a scheduling pass the others of that shape needing as much are not tried."""

    def __post_init__(self) -> None:
        if self.template is None and self.num_gpus <= 0:
            raise ValueError(f"job {self.job_id}: num_gpus must be > 0")
        if not self.duration_s > 0:
            raise ValueError(f"job {self.job_id}: duration must be > 0")
        if self.submit_s < 0:
            raise ValueError(f"job {self.job_id}: submit time must be >= 0")
        if not 0 < self.gpu_milli <= 1000:
            raise ValueError(f"job {self.job_id}: gpu_milli must be within 1..1000")
        if not self.tokens >= 0:
            raise ValueError(f"job {self.job_id}: tokens must be >= 0")
        if self.gpus_per_task and self.num_gpus % self.gpus_per_task:
            raise ValueError(f"job {self.job_id}: {self.num_gpus} GPUs do not split into tasks of "
                             f"{self.gpus_per_task}")
        put = object.__setattr__
        selector = tuple(sorted(self.node_selector.items())) if self.node_selector else ()
        if self.template is not None:
            if self.replicas <= 0:
                raise ValueError(f"job {self.job_id}: replicas must be > 0")
            share = 0.0
            whole = True
            for _, r in self.template.device_requests:
                core = r.core_milli / CORE_MILLI_PER_DEVICE
                share += r.count * max(core, (r.memory_pct or 0) / 100)
                whole = whole and r.whole
            put(self, "task_gpus", self.template.device_count)
            put(self, "num_tasks", self.replicas)
            put(self, "gpu_share", share * self.replicas)
            put(self, "whole", whole)
            put(self, "cpu_milli", self.template.cpu_milli * self.replicas)
            put(self, "memory_mib", self.template.memory_mib * self.replicas)
            t = self.template
            # repr: containers and constraints may carry mappings (extended resources, per-vendor constraints)
            put(self, "shape", (repr((t.containers, t.init_containers, t.constraints)), t.node_policy, t.gpu_policy,
                                self.gpu_type, selector))
            return
        task = self.gpus_per_task or next(s for s in (MAX_TASK_GPUS, 4, 2, 1) if self.num_gpus % s == 0)
        put(self, "task_gpus", task)
        put(self, "num_tasks", self.num_gpus // task)
        put(self, "gpu_share", self.num_gpus * self.gpu_milli / 1000)
        put(self, "whole", self.gpu_milli >= 1000)
        put(self, "cpu_milli", self.cpu_milli_per_gpu * self.num_gpus)
        put(self, "memory_mib", self.memory_mib_per_gpu * self.num_gpus)
        put(self, "shape", (task * self.gpu_milli, self.gpu_type, *selector))

    @property
    def gpu_seconds(self) -> float:
        return self.gpu_share * self.duration_s

    @property
    def display_name(self) -> str:
        return self.name or self.job_id

    def split(self, per_node: int) -> JobSpec:
        """The same job with tasks small enough for nodes of ``per_node`` devices (a trace job whose default
        task size is larger than any node); unchanged when it already fits or chose its task size."""
        if self.template is not None or self.gpus_per_task or self.task_gpus <= per_node:
            return self
        size = next((g for g in (8, 4, 2, 1) if g <= per_node and self.num_gpus % g == 0), 1)
        return replace(self, gpus_per_task=size)


@dataclass(slots=True, eq=False)
class Job:
    """A job's live record (one per job, shared by the engine, the simulator's metrics and the API)."""

    spec: JobSpec
    state: JobState = JobState.NEW
    message: str = ""
    """What the job is waiting for or where it runs, in words (the API's ``message``)."""
    work_done_s: float = 0.0
    """Seconds of full-speed work completed (saved at the last stop)."""
    checkpoint_s: float = 0.0
    """Work saved by the last periodic checkpoint (a failure rolls back to it)."""
    attained_gpu_s: float = 0.0
    """GPU-seconds the job has run so far (2D-LAS's attained service), including lost work."""
    first_start_s: float = -1.0
    finish_s: float = -1.0
    run_start_s: float = -1.0
    """When the current (or last) run started; -1 while queued."""
    slowdown: float = 1.0
    """Factor >= 1 the current placement stretches the job by."""
    queued_since_s: float = 0.0
    queue_s: float = 0.0
    """Total time spent queued."""
    nodes: tuple[str, ...] = ()
    """Nodes of the current placement, one per task."""
    pod_keys: tuple[str, ...] = ()
    placements: list[dict[str, Any]] = field(default_factory=list)
    """Per task while running: pod key, node and device shares (``gpucluster.model.views.placement``)."""
    held_gpus: float = 0.0
    """GPU-equivalents the running job holds (per device the larger of its compute and memory share)."""
    least_gpus: float = -1.0
    """The fewest GPU-equivalents it could hold on its cluster (set by an engine that describes its jobs: the
    control plane's); -1 = not known, ``spec.gpu_share`` stands in."""
    attempt: int = 0
    """Incremented at every start; names the gang and invalidates stale finish events."""
    preemptions: int = 0
    failures: int = 0
    lost_work_s: float = 0.0
    bytes_moved: int = 0
    priority_queue: int = 0
    """Queue index a multi-level policy (2D-LAS) keeps the job in."""
    extra: dict[str, float] = field(default_factory=dict)
    """Policy bookkeeping (2D-LAS promotion) and per-run figures (topology level)."""
    noted_s: float = -math.inf
    """When the job's waiting reason was last reported (an ``unschedulable`` event)."""
    tally: Any = field(default=None, repr=False)
    """The :class:`gpucluster.jobs.tally.JobTally` counting this job (set while it is in an engine's job table):
    :func:`gpucluster.jobs.transitions.transition` tells it of every change."""

    # ---------------------------------------------------------------------------------------- progress
    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def remaining_s(self) -> float:
        return max(self.spec.duration_s - self.work_done_s, 0.0)

    def progress_at(self, now: float) -> float:
        """Work done by ``now`` if running (not saved until the job stops)."""
        if self.state != JobState.RUNNING:
            return self.work_done_s
        return min(self.spec.duration_s, self.work_done_s + (now - self.run_start_s) / self.slowdown)

    def attained_at(self, now: float) -> float:
        if self.state != JobState.RUNNING:
            return self.attained_gpu_s
        return self.attained_gpu_s + (now - self.run_start_s) * self.spec.gpu_share

    @property
    def jct_s(self) -> float:
        return self.finish_s - self.spec.submit_s if self.finish_s >= 0 else -1.0

    @property
    def done(self) -> bool:
        return self.state.terminal

    @property
    def rejected(self) -> bool:
        """Refused on arrival because it can never fit the cluster or its quota."""
        return self.state == JobState.FAILED and self.first_start_s < 0

    # ---------------------------------------------------------------------------------------- API view
    @property
    def id(self) -> str:
        return self.spec.job_id

    @property
    def name(self) -> str:
        return self.spec.display_name

    @property
    def tenant(self) -> str:
        return self.spec.tenant

    @property
    def replicas(self) -> int:
        return self.spec.num_tasks

    @property
    def priority(self) -> int:
        return self.spec.priority

    @property
    def synthetic(self) -> bool:
        return self.spec.synthetic

    @property
    def status(self) -> JobStatus:
        return self.state.status

    @property
    def submitted_at(self) -> float:
        return self.spec.submitted_at

    @property
    def submitted_t(self) -> float:
        return self.spec.submit_s

    @property
    def started_t(self) -> float | None:
        return self.run_start_s if self.run_start_s >= 0 else None

    @property
    def finished_t(self) -> float | None:
        return self.finish_s if self.finish_s >= 0 else None

    @property
    def duration_s(self) -> float | None:
        """Run time at full speed; None = until cancelled."""
        d = self.spec.duration_s
        return d if math.isfinite(d) else None

    @property
    def resources(self) -> Mapping[str, Any]:
        return self.spec.resources

    @property
    def attempts(self) -> int:
        return self.attempt

    @property
    def gpus(self) -> float:
        """GPU-equivalents the job holds when running; before, the least it could hold."""
        if self.state == JobState.RUNNING:
            return self.held_gpus
        return self.least_gpus if self.least_gpus >= 0 else self.spec.gpu_share

    def to_dict(self) -> dict[str, Any]:
        """The control plane's JSON view of the job."""
        spec = self.spec
        return {
            "id": self.id,
            "name": self.name,
            "tenant": self.tenant,
            "replicas": self.replicas,
            "resources": dict(spec.resources),
            "claims": [c.to_dict() for c in spec.claims],
            "duration_s": self.duration_s,
            "priority": spec.priority,
            "gpu_type": spec.gpu_type,
            "node_selector": dict(spec.node_selector),
            "kind": spec.kind.value,
            "preemptible": spec.preemptible,
            "ref_gpu": spec.ref_gpu,
            "work_class": spec.work_class,
            "speedup": dict(spec.speedup),
            "tokens": spec.tokens,
            "gpu_speed": self.extra.get("speed"),
            **spec.workload.to_dict(),
            "status": self.status.value,
            "message": self.message,
            "synthetic": spec.synthetic,
            "submitted_at": spec.submitted_at,
            "submitted_t": spec.submit_s,
            "started_t": self.started_t,
            "finished_t": self.finished_t,
            "gpus": self.gpus,
            "attempts": self.attempt,
            "preemptions": self.preemptions,
            "placements": list(self.placements),
        }


@dataclass(frozen=True, slots=True)
class JobEvent:
    """Something that happened to a job (or, with no ``job_id``, to a node): one type for every backend;
    the simulator's listeners, the control plane's store and the API read it."""

    job_id: str
    t: float
    """Engine clock time."""
    kind: str
    """Job events: ``queued``, ``rejected``, ``running``, ``succeeded``, ``preempted``, ``evicted``,
    ``cancelled``, ``failed``, ``unschedulable``, ``migrated`` (the control plane adds ``submitted`` and
    ``requeued``). Node events (no ``job_id``): ``node_down``, ``node_up``, ``device_down``, ``node_added``,
    ``node_removed``."""
    state: JobState | None = None
    """The job's state after the event (None for node events)."""
    message: str = ""
    node: str = ""

    @property
    def status(self) -> str:
        """The control plane's status after the event (``""`` for node events)."""
        return self.state.status.value if self.state is not None else ""


FOLDED_EVENT_KINDS = frozenset({"unschedulable"})
"""Event kinds that fold: a job's event of one of these kinds right after one of the same kind is a repeat of it
(Kubernetes' event series: one event with a count and its first and last time, the latest message), never a new
line in the job's history. A waiting job is reported again as its reason changes and at least every
``NOTE_REPEAT_S`` (``jobs.engine``) while it waits."""


def folds(previous_kind: str | None, kind: str) -> bool:
    """Whether an event of ``kind`` right after one of ``previous_kind`` (of the same job) folds into it."""
    return kind in FOLDED_EVENT_KINDS and previous_kind == kind


def task_pods(spec: JobSpec, attempt: int, namespace: str = "") -> list[Pod]:
    """The pods (tasks) of one run of a job: ``<job>-<attempt>-<i>`` in ``namespace`` (default the tenant), a
    gang ``<job>#<attempt>`` when there are several."""
    n = spec.num_tasks
    gang = f"{spec.job_id}#{attempt}" if n > 1 else ""
    ns = namespace or spec.tenant
    annotations: dict[str, str] = {JOB_GPUS_ANNOTATION: str(spec.num_gpus)}
    if spec.dataset:
        annotations[DATASET_ANNOTATION] = spec.dataset
    labels = {JOB_LABEL: spec.job_id, KIND_LABEL: spec.kind.value}
    selector = dict(spec.node_selector) if spec.node_selector else _NO_LABELS
    if spec.template is not None:
        base = spec.template
        return [replace(base, name=f"{spec.job_id}-{attempt}-{i}", namespace=ns,
                        uid=f"{spec.job_id}/{attempt}/{i}", tenant=spec.tenant, gang=gang,
                        gang_min_member=n if gang else 0, priority=spec.priority,
                        labels={**base.labels, **labels}, annotations={**base.annotations, **annotations},
                        node_selector=selector)
                for i in range(n)]
    g = spec.task_gpus
    container = ContainerRequest(
        name="main",
        cpu_milli=spec.cpu_milli_per_gpu * g,
        memory_mib=spec.memory_mib_per_gpu * g,
        devices=(DeviceRequest("nvidia", g, memory_pct=max(spec.gpu_milli // 10, 1), core_milli=spec.gpu_milli),),
    )
    constraints = DeviceConstraints(use_types=split_types(spec.gpu_type)) if spec.gpu_type else _NO_CONSTRAINTS
    return [Pod(name=f"{spec.job_id}-{attempt}-{i}", namespace=ns, containers=(container,),
                uid=f"{spec.job_id}/{attempt}/{i}", tenant=spec.tenant, gang=gang, gang_min_member=n if gang else 0,
                priority=spec.priority, labels=labels, annotations=annotations, constraints=constraints,
                node_selector=selector)
            for i in range(n)]
