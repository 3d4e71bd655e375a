"""The one job engine every backend drives: what the simulator measures is what ``gpucluster up`` and
Kubernetes run.

* :mod:`~gpucluster.jobs.model`: :class:`JobSpec` (what was asked), :class:`Job` (the live record),
  :class:`JobState`, :class:`JobEvent` (one event type), :func:`task_pods`;
* :mod:`~gpucluster.jobs.transitions`: ``transition(job, stimulus, now) -> events``, the only place a job's
  state changes (a table of allowed pairs, as Dask's scheduler);
* :mod:`~gpucluster.jobs.admission`: building a control-plane job from container limits (one validation),
  whether a job can ever fit, what a pod holds;
* :mod:`~gpucluster.jobs.policies`: the queue policies (``fifo``, ``sjf``, ``tiresias``, ``drf``, ``offers``,
  ``default``);
* :mod:`~gpucluster.jobs.placement`: the profile a job is placed with and the :class:`Placer` port;
* :mod:`~gpucluster.jobs.preemption`: preemption and reclaim as pure planners;
* :mod:`~gpucluster.jobs.offers`: Mesos-style offers with DRF arbitration;
* :mod:`~gpucluster.jobs.engine`: :class:`JobEngine`, the event loop, the queue (:mod:`~gpucluster.jobs.queue`)
  and the scheduling pass; it holds :class:`CapacityView` (:mod:`~gpucluster.jobs.capacity`),
  :class:`TenantLedger` (:mod:`~gpucluster.jobs.accounting`), the offers adaptor and :class:`JobViews`
  (:mod:`~gpucluster.jobs.views`, what the control plane reads);
* :mod:`~gpucluster.jobs.speed`: :class:`GpuSpeeds`, a job's speed on the GPU models it got (work is seconds on
  its ``ref_gpu``; :mod:`gpucluster.perf`);
* :mod:`~gpucluster.jobs.kernel`: the event heap the engine's clock runs on;
* :mod:`~gpucluster.jobs.recipe`: :func:`engine_recipe` / :class:`EngineRecipe`, how every backend makes its
  engine (queue policy, placement profile, quota, options);
* :mod:`~gpucluster.jobs.front`: :class:`EngineFront`, the job-facing half every control-plane runtime shares.

Usage (the simulator wraps this; see ``docs/jobs-simulation.md``)::

    engine = JobEngine(SchedulerPlacer(scheduler), make_policy("default"))
    engine.submit(JobSpec("j1", submit_s=0, num_gpus=8, duration_s=3600))
    engine.run_until(600.0)
"""

from gpucluster.jobs.accounting import TenantLedger
from gpucluster.jobs.admission import (
    MAX_CLAIM_DEVICES,
    MAX_CLAIM_MEMORY_MIB,
    MAX_JOB_CLAIMS,
    default_registry,
    job_spec,
    least_gpus,
    never_fits,
    restored_submission,
    template_pod,
    user_submission,
)
from gpucluster.jobs.capacity import CapacityView
from gpucluster.jobs.engine import (
    CONTROL_PLANE_PASS_BUDGET_S,
    EngineOptions,
    JobEngine,
    SeriesPoint,
    Slowdown,
    Timer,
    Totals,
    no_slowdown,
)
from gpucluster.jobs.front import EngineFront
from gpucluster.jobs.kernel import Kernel
from gpucluster.jobs.model import (
    CLAIM_CONTAINER_PREFIX,
    FOLDED_EVENT_KINDS,
    STATUSES,
    DeviceClaim,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobState,
    JobStatus,
    folds,
    task_pods,
)
from gpucluster.jobs.placement import (
    JOB_PLACEMENT,
    Placer,
    SchedulerPlacer,
    job_profile,
    jobs_profile,
    placement_in_use,
    placement_names,
)
from gpucluster.jobs.policies import DEFAULT_QUEUE_POLICY, POLICIES, QueuePolicy, make_policy
from gpucluster.jobs.recipe import EngineRecipe, engine_recipe
from gpucluster.jobs.speed import SPEED_KEY, GpuSpeeds, default_speed_model
from gpucluster.jobs.speed import describe as describe_speed
from gpucluster.jobs.transitions import Cancel, Fail, InvalidTransitionError, Note, Reject, transition
from gpucluster.jobs.views import JobViews
from gpucluster.jobs.workload import (
    ENV_NAME_RE,
    NO_WORKLOAD,
    OBJECT_NAME_RE,
    SECRET_KEY_RE,
    VOLUME_NAME_RE,
    WORKLOAD_FIELDS,
    EnvFrom,
    EnvVar,
    Toleration,
    VolumeMount,
    Workload,
    workload_fields,
)
from gpucluster.model.labels import JOB_LABEL

__all__ = [
    "CLAIM_CONTAINER_PREFIX",
    "CONTROL_PLANE_PASS_BUDGET_S",
    "DEFAULT_QUEUE_POLICY",
    "ENV_NAME_RE",
    "FOLDED_EVENT_KINDS",
    "JOB_LABEL",
    "JOB_PLACEMENT",
    "MAX_CLAIM_DEVICES",
    "MAX_CLAIM_MEMORY_MIB",
    "MAX_JOB_CLAIMS",
    "NO_WORKLOAD",
    "OBJECT_NAME_RE",
    "POLICIES",
    "SECRET_KEY_RE",
    "SPEED_KEY",
    "STATUSES",
    "VOLUME_NAME_RE",
    "WORKLOAD_FIELDS",
    "Cancel",
    "CapacityView",
    "DeviceClaim",
    "EngineFront",
    "EngineOptions",
    "EngineRecipe",
    "EnvFrom",
    "EnvVar",
    "Fail",
    "GpuSpeeds",
    "InvalidTransitionError",
    "Job",
    "JobEngine",
    "JobEvent",
    "JobKind",
    "JobSpec",
    "JobState",
    "JobStatus",
    "JobViews",
    "Kernel",
    "Note",
    "Placer",
    "QueuePolicy",
    "Reject",
    "SchedulerPlacer",
    "SeriesPoint",
    "Slowdown",
    "TenantLedger",
    "Timer",
    "Toleration",
    "Totals",
    "VolumeMount",
    "Workload",
    "default_registry",
    "default_speed_model",
    "describe_speed",
    "engine_recipe",
    "folds",
    "job_profile",
    "job_spec",
    "jobs_profile",
    "least_gpus",
    "make_policy",
    "never_fits",
    "no_slowdown",
    "placement_in_use",
    "placement_names",
    "restored_submission",
    "task_pods",
    "template_pod",
    "transition",
    "user_submission",
    "workload_fields",
]
