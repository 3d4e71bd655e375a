"""Jobs (training or inference) made of tasks (pods), and their life cycle in the simulator.

A job asks for ``num_gpus`` whole GPUs, split into ``num_tasks`` equal tasks (pods) that must all run at once
(a gang). Its work is ``duration_s`` seconds at full speed on an ideal placement; a worse placement slows it
down by the network model's factor, so the job then needs longer. Work survives preemption (the job
checkpoints when it is stopped) but a failure loses the work since the last periodic checkpoint.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from gpucluster.model import ContainerRequest, DeviceConstraints, DeviceRequest, Pod

MAX_TASK_GPUS = 8
"""Largest number of GPUs one task (pod) asks for; bigger jobs are split into tasks of this size or less."""


_NO_CONSTRAINTS = DeviceConstraints()


class JobState(enum.StrEnum):
    PENDING = "pending"
    """Not submitted yet (arrival in the future)."""
    QUEUED = "queued"
    """Submitted and waiting for a placement (new, preempted or evicted by a failure)."""
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"


class JobKind(enum.StrEnum):
    TRAIN = "train"
    INFER = "infer"


@dataclass(frozen=True, slots=True)
class JobSpec:
    """What a trace says about one job."""

    job_id: str
    submit_s: float
    """Arrival time in seconds from the start of the trace."""
    num_gpus: int
    """Whole GPUs the job needs (all at once)."""
    duration_s: float
    """Run time at full speed on an ideal placement (the trace's duration)."""
    tenant: str = "default"
    """Tenant (virtual cluster / queue) the job is charged to."""
    model: str = ""
    """Model (job type) name, for the network model's gradient size and reports."""
    priority: int = 0
    kind: JobKind = JobKind.TRAIN
    gpus_per_task: int = 0
    """GPUs per task; 0 = choose (the largest of 8/4/2/1 that divides ``num_gpus``)."""
    cpu_milli_per_gpu: int = 4000
    memory_mib_per_gpu: int = 16384
    gpu_type: str = ""
    """Model substring the job insists on (HAMi ``use-gputype``); empty = any."""
    dataset: str = ""
    """Dataset the job reads (data locality), empty = none."""
    checkpoint_interval_s: float = 1800.0
    """Seconds of work between periodic checkpoints (what a failure can lose at most)."""
    gpu_milli: int = 1000
    """Share of each GPU in core milli (1000 = whole GPU; less = a HAMi-style fractional GPU, which also
    gets that share of the device memory)."""

    def __post_init__(self) -> None:
        if self.num_gpus <= 0:
            raise ValueError(f"job {self.job_id}: num_gpus must be > 0")
        if self.duration_s <= 0:
            raise ValueError(f"job {self.job_id}: duration must be > 0")
        if self.submit_s < 0:
            raise ValueError(f"job {self.job_id}: submit time must be >= 0")
        if not 0 < self.gpu_milli <= 1000:
            raise ValueError(f"job {self.job_id}: gpu_milli must be within 1..1000")
        if self.gpus_per_task and self.num_gpus % self.gpus_per_task:
            raise ValueError(f"job {self.job_id}: {self.num_gpus} GPUs do not split into tasks of "
                             f"{self.gpus_per_task}")

    @property
    def task_gpus(self) -> int:
        if self.gpus_per_task:
            return self.gpus_per_task
        for size in (MAX_TASK_GPUS, 4, 2, 1):
            if self.num_gpus % size == 0:
                return size
        return 1

    @property
    def num_tasks(self) -> int:
        return self.num_gpus // self.task_gpus

    @property
    def gpu_seconds(self) -> float:
        return self.gpu_share * self.duration_s

    @property
    def whole(self) -> bool:
        return self.gpu_milli >= 1000

    @property
    def gpu_share(self) -> float:
        """GPUs the job occupies (fractional for shared GPUs)."""
        return self.num_gpus * self.gpu_milli / 1000


@dataclass(slots=True)
class Job:
    """A job's live record in a simulation."""

    spec: JobSpec
    state: JobState = JobState.PENDING
    work_done_s: float = 0.0
    """Seconds of full-speed work completed (saved at the last stop)."""
    checkpoint_s: float = 0.0
    """Work saved by the last periodic checkpoint (a failure rolls back to it)."""
    attained_gpu_s: float = 0.0
    """GPU-seconds the job has run so far (2D-LAS's attained service), including lost work."""
    first_start_s: float = -1.0
    finish_s: float = -1.0
    run_start_s: float = -1.0
    """When the current run started (-1 when not running)."""
    slowdown: float = 1.0
    """Factor >= 1 the current placement stretches the job by."""
    queued_since_s: float = 0.0
    queue_s: float = 0.0
    """Total time spent queued."""
    nodes: tuple[str, ...] = ()
    """Nodes of the current placement, one per task."""
    pod_keys: tuple[str, ...] = ()
    attempt: int = 0
    """Incremented at every start; names the gang and invalidates stale finish events."""
    preemptions: int = 0
    failures: int = 0
    lost_work_s: float = 0.0
    bytes_moved: int = 0
    priority_queue: int = 0
    """Queue index a multi-level policy (2D-LAS) keeps the job in."""
    extra: dict[str, float] = field(default_factory=dict)

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
        return self.state in (JobState.COMPLETED, JobState.CANCELLED)


def task_pods(spec: JobSpec, attempt: int) -> list[Pod]:
    """The pods (tasks) of one run of a job: a gang named after the job and the attempt."""
    g = spec.task_gpus
    n = spec.num_tasks
    gang = f"{spec.job_id}#{attempt}" if n > 1 else ""
    annotations: dict[str, str] = {"gpucluster.io/job-gpus": str(spec.num_gpus)}
    if spec.dataset:
        annotations["gpucluster.io/dataset"] = spec.dataset
    pods = []
    for i in range(n):
        container = ContainerRequest(
            name="main",
            cpu_milli=spec.cpu_milli_per_gpu * g,
            memory_mib=spec.memory_mib_per_gpu * g,
            devices=(DeviceRequest("nvidia", g, memory_pct=max(spec.gpu_milli // 10, 1), core_milli=spec.gpu_milli),),
        )
        pods.append(Pod(
            name=f"{spec.job_id}-{attempt}-{i}",
            namespace=spec.tenant,
            containers=(container,),
            uid=f"{spec.job_id}/{attempt}/{i}",
            tenant=spec.tenant,
            gang=gang,
            gang_min_member=n if gang else 0,
            priority=spec.priority,
            labels={"gpucluster.io/job": spec.job_id, "gpucluster.io/kind": spec.kind.value},
            annotations=annotations,
            constraints=_constraints(spec),
        ))
    return pods


def _constraints(spec: JobSpec) -> DeviceConstraints:
    if spec.gpu_type:
        return DeviceConstraints(use_types=(spec.gpu_type,))
    return _NO_CONSTRAINTS



class TraceError(ValueError):
    """A bad trace or job file. ``str(err)`` is ``FILE:LINE: why``."""
