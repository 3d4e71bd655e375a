"""``KubeRuntime``: the control plane's Runtime (``gpucluster up --kubeconfig FILE``) over a real API server.

The API server is the source of truth; the one job engine (:class:`gpucluster.jobs.JobEngine`) decides.

* **Jobs are batch/v1 Jobs.** Every Job labelled ``gpucluster.io/queue: TENANT`` is a job of the queue: one a
  user applied with kubectl (``suspend: true``, ``schedulerName: gpucluster`` in its pod template), or one the
  control plane made for a job of its REST API (:func:`~gpucluster.kubernetes.workloads.job_manifest`: indexed,
  ``parallelism = completions = replicas``, created suspended). An informer lists and watches them; a restart or
  a newly elected leader rebuilds every job from them (the store keeps history and audit).
* **Admission sees devices.** The engine's scheduling pass (queue policy, quota and fair share, the Job's
  ``parallelism`` as a gang, GPU model, placement) admits a job only when it has a placement for all its pods
  on real devices; the placement is *reserved* in the cluster view (:class:`KubeCluster` reservations), written
  on the Job (``gpucluster.io/admission``) and the Job released (``suspend: false``). With
  ``admission="count"`` the engine admits by GPU count alone, as Kueue does (comparison only): it places what
  it can one pod at a time and the rest waits after admission.
* **Pods are the Job controller's.** Each pod of an admitted Job is bound into a free slot of its reservation
  (its completion index's when it can): ``gpucluster.io/reservation``, HAMi's decision annotations, a Binding. A
  Job created without ``suspend`` gets its pods at once; they stay unbound until the job is admitted.
* **JobSets are jobs too** (``jobset.x-k8s.io/v1alpha2``, once served: a CRD installed after the start is
  looked for every ``JOBSET_RECHECK_S`` seconds): read as one Job
  (:func:`~gpucluster.kubernetes.workloads.jobset_as_job`: the sum of its replicated Jobs' pods is the gang),
  admitted, written and unsuspended the same way; its child Jobs' pods are filed under the JobSet's uid (their
  ``jobset.sigs.k8s.io/jobset-name``) and bound into its slots; the child Jobs are never queued themselves.
* **PyTorchJobs are jobs too** (``kubeflow.org/v1``, the Kubeflow training operator's, once served, looked for
  like JobSets): read as one Job (:func:`~gpucluster.kubernetes.workloads.pytorchjob_as_job`: Master and Workers
  are one gang), admitted and written the same way, released by ``spec.runPolicy.suspend: false`` (suspended
  again when preempted); the pods the operator makes (owned by the PyTorchJob) are filed under its uid, each in
  its replica's slot (Master first, then the Workers by ``training.kubeflow.org/replica-index``).
* **Pod groups are jobs too.** Bare pods for our scheduler name that name a gang (the
  ``scheduling.x-k8s.io/pod-group`` label and its PodGroup's ``minMember``, or ``gpucluster.io/gang``) are one
  job of their tenant (:mod:`.podgroups`): gathered until ``minMember`` exist, admitted all or nothing by the
  same engine, each member bound into a slot; members beyond ``minMember`` are bound by their own decision once
  the gang runs (reservation ``NS/<job>-extra``, charged to the tenant); never preempted (no controller makes
  its pods again). A replica adopts a group from its bound members' reservations (a run whose pods ended is
  listed ended, never admitted again). Their pseudo uid (``podgroup:NS/GANG``) files their pods beside the
  Jobs' pods.
* **Tenants by namespace** (:mod:`.tenancy`): a workload in a namespace that may not use the tenant it names is
  refused; a change of the Namespace bindings re-checks, at the next tick, the workloads not admitted
  (:meth:`KubeRuntime._recheck_tenancy`): refused ones now allowed are queued, queued ones now foreign refused,
  running ones left running. A change of a refused Job's own queue label (a pod group's members') re-checks it as
  a new one; a queued or running one keeps its tenant (:meth:`KubeRuntime._relabelled`,
  :meth:`KubeRuntime._group_relabelled`). A refused one the retention policy pruned is re-checked alike while its
  object stays (:attr:`KubeRuntime._refused_tombs`).
* **A running job is never queued here**: found admitted and released, it is adopted running even when a slot of
  its admission cannot be held yet (:meth:`KubeRuntime._adopt`; the slot is tried again at each pass).
* **Status from Kubernetes.** The Job's ``Complete``/``Failed`` condition ends the job (``duration_s`` is only an
  estimate here); while it runs, its message counts the pods by phase, restarts, and the last container's exit
  code and reason. Cancel deletes the Job; preemption suspends it again and frees its GPUs at once (its pods
  are deleted).
* **Leader election** (``leader_elect``): replicas share a Lease; only the leader admits, binds and preempts.
  A follower mirrors the leader's decisions from the Jobs and serves reads; any replica accepts submissions and
  cancellations (they are writes of Job objects). An admission is written with the Job's resourceVersion, so
  two replicas can never both admit a job.

Threads: the informer's (Jobs, pods, nodes), the writer's (every API write), the elector's. Job records are
touched only by the service's calls (the Runtime contract); what the informer reports is kept under ``_lock``
and read by :meth:`advance`.
"""

from __future__ import annotations

import collections
import concurrent.futures as cf
import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpucluster.devices import DeviceSettings, VendorRegistry
from gpucluster.jobs import (
    CLAIM_CONTAINER_PREFIX,
    CONTROL_PLANE_PASS_BUDGET_S,
    DEFAULT_QUEUE_POLICY,
    Cancel,
    EngineFront,
    EngineOptions,
    Fail,
    Job,
    JobEngine,
    JobEvent,
    JobSpec,
    JobState,
    Kernel,
    Note,
    Reject,
    engine_recipe,
    restored_submission,
    task_pods,
    transition,
    user_submission,
)
from gpucluster.kubernetes.client import ApiException, KubeConfigError, api_client, raw_get, raw_list
from gpucluster.kubernetes.cluster import ClaimNotReadyError, ClaimPlan
from gpucluster.kubernetes.convert import (
    BIND_PHASE_ANNOTATION,
    BIND_TIME_ANNOTATION,
    VGPU_NODE_ANNOTATION,
    VGPU_TIME_ANNOTATION,
    KubeInputError,
    parse_pod,
    pod_key,
)
from gpucluster.kubernetes.dra import ClaimRequest, DraInputError, parse_claim_template
from gpucluster.kubernetes.gangs import GroupSizes
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.kubernetes.outside import outside_use
from gpucluster.kubernetes.podgroups import (
    GROUP_UID_PREFIX,
    POD_GROUP_MODES,
    Member,
    group_job_id,
    group_spec,
    member_of,
    named_tenant,
)
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.kubernetes.sharedtenants import SharedTenants, TenancyWriteError, configmap_name
from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL, Held, NamespaceBindings
from gpucluster.kubernetes.workloads import (
    DEFAULT_IMAGE,
    JOBSET_API,
    JOBSET_NAME_LABEL,
    NATIVE_ID_PREFIX,
    PYTORCHJOB_API,
    Admission,
    PodView,
    QueueJob,
    Slot,
    admission_of,
    claim_templates,
    claim_tenant,
    job_manifest,
    jobset_as_job,
    native_id,
    parse_queue_job,
    pod_view,
    pytorchjob_as_job,
    pytorchjob_owner,
    replica_slot,
    slot_allocation,
)
from gpucluster.model import Allocation, AllocationError, ClusterState, Pod, views
from gpucluster.model.labels import (
    ADMISSION_ANNOTATION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    MESSAGE_ANNOTATION,
    QUEUE_LABEL,
    QUOTA_ADMITTED_ANNOTATION,
    REFUSED_ANNOTATION,
    RESERVATION_ANNOTATION,
)
from gpucluster.model.share import allocation_gpus
from gpucluster.model.tenants import DEFAULTS, SharedTenancy, TenantSettings
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY, Decision, GroupDecision, Outcome
from gpucluster.scheduler.framework import Status
from gpucluster.scheduler.plugins.quota import QuotaTree, pod_charge

log = logging.getLogger(__name__)

TENANT_LABEL = QUEUE_LABEL
"""Deprecated name of the queue label (the tenant a Job is charged to)."""
NOTE_EVERY_S = 5.0
"""Shortest time between two "why it waits" notes written on one Job."""
ADMISSIONS = ("devices", "count")
EXTRA_SUFFIX = "-extra"
EXTRA_KEY_PREFIX = "extra:"
"""A pod group's member beyond its ``minMember`` slots is bound with the reservation ``NAMESPACE/<job id>-extra``."""
UNMIRRORED_KEY_PREFIX = "unmirrored:"
"""The outside-use key of a running job's slot that is not held here (:meth:`KubeRuntime._adopt`)."""
OWED_MAX = 4096
"""The most Events a follower keeps to write if it comes to lead (:meth:`KubeRuntime._say`); the oldest go first."""
JOBSET_RECHECK_S = 5.0
"""How often the JobSet (and PyTorchJob) list is tried again while the API server does not serve them (no CRD
yet)."""
CUSTOM_KINDS: Mapping[str, tuple[str, str, str]] = {"JobSet": JOBSET_API, "PyTorchJob": PYTORCHJOB_API}
"""The workload kinds read as jobs of the queue besides batch/v1 Jobs: kind -> (group, version, plural)."""
_NOT_SLOT = frozenset({VGPU_NODE_ANNOTATION, VGPU_TIME_ANNOTATION, BIND_TIME_ANNOTATION, BIND_PHASE_ANNOTATION,
                       RESERVATION_ANNOTATION})


def _epoch(stamp: str) -> float:
    """An RFC 3339 time of the API server as epoch seconds (0 when there is none)."""
    if not stamp:
        return 0.0
    try:
        return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


@dataclass(slots=True)
class _Rec:
    """What the runtime keeps about one job besides the engine's record."""

    job_id: str
    ours: bool
    namespace: str = ""
    name: str = ""
    uid: str = ""
    rv: str = ""
    admission: Admission | None = None
    """The admission the engine's current run is (written by us or observed)."""
    writing: bool = False
    """Our admission of the current run is being written (until the informer shows it on the Job)."""
    withdrawn: set[str] = field(default_factory=set)
    """Admissions this replica took back (preempted, not written): a late view of the Job showing one is old."""
    slots: list[str] = field(default_factory=list)
    """Reservation (task) keys of the current run, by slot; "" = not placed yet (count-only admission)."""
    tasks: list[Pod] = field(default_factory=list)
    note: str = ""
    note_at: float = -math.inf
    refused: bool = False
    phases: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    unplaced_why: str = ""
    """Count-only admission: why the last pod tried found no place."""
    group: bool = False
    """A pod group (bare pods, :mod:`.podgroups`), not a Job: ``uid`` is the group's pseudo uid."""
    foreign: str = ""
    """Refused because its namespace may not use this tenant (the one it named), "" otherwise: a change of the
    bindings re-checks it (:meth:`KubeRuntime._recheck_tenancy`)."""
    label: str | None = None
    """A Job's (JobSet's, PyTorchJob's) ``gpucluster.io/queue`` label when its record was made, a pod group's
    :func:`~gpucluster.kubernetes.podgroups.named_tenant` (None: its members disagreed): a change of it re-checks a
    refused one, and is answered on any other (:meth:`KubeRuntime._relabelled`, :meth:`KubeRuntime._group_seen`)."""
    rejected: bool = False
    """Ended here as refused (on arrival, or by a binding change), not by running."""
    told: str | None = None
    """The last new label a queued or running one was told it does not follow (one Event for each)."""
    unmirrored: dict[int, str] = field(default_factory=dict)
    """Slots of a running job's admission not held here yet (slot index -> why: its node unknown, its devices
    held by another pod), tried again at each pass (:meth:`KubeRuntime._mirror_slots`)."""
    refusal: str = ""
    """A refused pod group's reason (a re-check that refuses it for the same one says nothing new)."""


@dataclass(slots=True)
class _Queued:
    """The queued objects of one custom kind (JobSets, PyTorchJobs) as the informer last reported them: uid ->
    the object read as a Job (``convert``), and ``namespace/name`` -> uid (their pods are filed under it)."""

    convert: Callable[[Mapping[str, Any]], Mapping[str, Any]]
    raw: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    """uid -> the object as the API server last showed it (its resourceVersion orders late watch events)."""
    objs: dict[str, Mapping[str, Any]] = field(default_factory=dict)
    uids: dict[str, str] = field(default_factory=dict)

    def event(self, kind: str, obj: Mapping[str, Any], gone: set[str]) -> tuple[str, str]:
        """Take in one watch event; returns the object's (uid, ``namespace/name``). A deleted object's uid joins
        ``gone``."""
        uid, where = _uid_where(obj)
        if kind == "DELETED":
            self.objs.pop(uid, None)
            self.uids.pop(where, None)
            gone.add(uid)
        elif _older(obj, self.raw.get(uid)):
            pass  # a late watch event: a relist read a newer version already
        else:
            self.raw[uid] = obj
            self.objs[uid] = self.convert(obj)
            self.uids[where] = uid
            gone.discard(uid)
        return uid, where

    def relist(self, items: Sequence[Mapping[str, Any]], gone: set[str]) -> set[str]:
        """Take in a whole list; the uids no longer listed join ``gone``. Returns the uids listed."""
        fresh = {_uid_where(o)[0]: o for o in items}
        gone |= set(self.objs) - set(fresh)
        self.raw = dict(fresh)
        self.objs = {u: self.convert(o) for u, o in fresh.items()}
        self.uids = {_uid_where(o)[1]: u for u, o in fresh.items()}
        return set(fresh)


def _older(obj: Mapping[str, Any], seen: Mapping[str, Any] | None) -> bool:
    """``obj`` is an older version of the object than ``seen`` (a watch event delivered after a relist that read
    a newer one). resourceVersions are compared as numbers when both are (the API server's are etcd revisions);
    otherwise nothing is taken for older."""
    if seen is None:
        return False
    try:
        return int(str((obj.get("metadata") or {}).get("resourceVersion"))) < int(
            str((seen.get("metadata") or {}).get("resourceVersion")))
    except ValueError:
        return False


def _uid_where(obj: Mapping[str, Any]) -> tuple[str, str]:
    """An object's uid and ``namespace/name``."""
    meta = obj.get("metadata") or {}
    return str(meta.get("uid") or ""), f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"


def _api_error(exc: BaseException) -> str:
    """``422 Unprocessable Entity: Job "x" is invalid: ...`` (the Status message when the body has one)."""
    if not isinstance(exc, ApiException):
        return f"{type(exc).__name__}: {exc}"
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return f"{exc.status} {exc.reason}" + (f": {message}" if message else "")


def _cluster_name(kubeconfig: Path) -> str:
    try:
        _contexts, active = config.list_kube_config_contexts(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    except Exception:  # only a label for the overview; api_client reports real problems
        return kubeconfig.name
    ctx = (active or {}).get("context") or {}
    return str(ctx.get("cluster") or (active or {}).get("name") or kubeconfig.name)


def _placeholder(q: QueueJob, submit_s: float) -> JobSpec:
    """A spec for a Job that cannot be queued (it is shown, refused)."""
    return JobSpec(q.job_id, submit_s, 0, math.inf, tenant=q.tenant or "default", name=q.name,
                   template=Pod(q.job_id, namespace=q.namespace), replicas=1, submitted_at=q.created)


def solo(pod: Pod) -> Pod:
    """The pod without its gang (count-only admission places pods one at a time, as kube-scheduler does)."""
    return replace(pod, gang="", gang_min_member=0)


class KubePlacer:
    """The engine's :class:`~gpucluster.jobs.placement.Placer` on Kubernetes: decide under the cluster lock,
    reserve the placement and write the admission on the Job (writer thread); ``release`` frees the
    reservation at once and (unless the cluster itself ended the job) suspends the Job and deletes its pods."""

    def __init__(self, runtime: KubeRuntime) -> None:
        self.rt = runtime

    @property
    def state(self) -> ClusterState:
        return self.rt.cluster.state

    def place(self, job: Job, pods: Sequence[Pod]) -> GroupDecision:
        rt = self.rt
        rec = rt.recs.get(job.id)
        if rec is None or not rec.uid:
            return GroupDecision(failed=Decision(pods[0], Outcome.UNSCHEDULABLE, status=Status.unschedulable(
                "KubeRuntime", "its Job object is not there yet")), cycles=0)
        if rt.admission == "count":  # one pod at a time, no gang: what fits now is placed, the rest waits
            decisions = [d for d in (rt.cluster.decide(solo(p)) for p in pods) if d.ok]
            group = GroupDecision(decisions=decisions, cycles=len(pods))
        else:
            group = rt.cluster.decide_group(pods)
            if not group.ok:
                return group
        allocs = [d.allocation for d in group.decisions if d.allocation is not None]
        rt.cluster.reserve(allocs)
        placed = {a.pod_key: a for a in allocs}
        admission = admission_of([placed.get(p.key) for p in pods], rt.registry, admission_id=uuid.uuid4().hex,
                                 by=rt.identity, attempt=job.attempt + 1, at=time.time(),
                                 count_only=rt.admission == "count")
        rec.admission, rec.writing, rec.tasks = admission, True, list(pods)
        rec.slots = [p.key if p.key in placed else "" for p in pods]
        if rec.group:
            rt.submit_write("admit", job.id, rt.write_group_admission, rec.uid, admission)
        else:
            rt.submit_write("admit", job.id, rt.write_admission, rec.namespace, rec.name, rec.rv, admission)
        return group

    def release(self, job: Job, pod_keys: Sequence[str]) -> None:
        rt = self.rt
        rec = rt.recs.get(job.id)
        rt.cluster.unreserve(pod_keys)
        if rec is None:
            return
        if rec.admission is not None:
            rec.withdrawn.add(rec.admission.id)
        rec.slots, rec.admission, rec.writing, rec.unmirrored = [], None, False, {}
        if job.id in rt.quiet or not rt.leading or rec.group:
            return  # a pod group is never preempted (nothing would make its pods again)
        # the engine stopped it (preemption): suspend the Job again, its GPUs are free already
        rt.submit_write("suspend", job.id, rt.write_suspend, rec.namespace, rec.name, rec.uid)


class KubeRuntime(EngineFront):
    """A ``service.runtime.Runtime`` whose cluster is a real Kubernetes API server (see the module docstring)."""

    def __init__(
        self,
        kubeconfig: Path,
        placement_policy: str = DEFAULT_PLACEMENT_POLICY,
        *,
        queue_policy: str = DEFAULT_QUEUE_POLICY,
        namespace: str = "default",
        scheduler_name: str = "gpucluster",
        image: str = DEFAULT_IMAGE,
        handshake_timeout: float = 60.0,
        sync_timeout: float = 30.0,
        devices: DeviceSettings | None = None,
        admission: str = "devices",
        leader_elect: bool = False,
        lease_name: str = "gpucluster-control-plane",
        lease_namespace: str | None = None,
        lease_duration: float = 15.0,
        identity: str | None = None,
        pod_groups: str = "all",
    ) -> None:
        if admission not in ADMISSIONS:
            raise ValueError(f"admission: must be devices or count, got {admission!r}")
        if pod_groups not in POD_GROUP_MODES:
            raise ValueError(f"pod_groups: must be one of {', '.join(POD_GROUP_MODES)}, got {pod_groups!r}")
        self.pod_groups = pod_groups
        """Which pod groups (bare pods of a gang for our scheduler name) are jobs of the queue (:mod:`.podgroups`)."""
        self.kubeconfig = Path(kubeconfig)
        self.placement_policy = placement_policy
        self.queue_policy = queue_policy
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.image = image
        self.admission = admission
        self.identity = identity or f"{socket.gethostname()}-{os.getpid()}"
        self.registry = VendorRegistry.from_settings(devices)
        self.api = api_client(self.kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.batch: Any = client.BatchV1Api(self.api)
        self.resource: Any = client.ResourceV1Api(self.api)
        self.custom: Any = client.CustomObjectsApi(self.api)
        self._claim_templates: dict[str, tuple[ClaimRequest, ...]] = {}
        """ResourceClaimTemplates read so far (``namespace/name`` -> its requests; a template's spec is
        immutable)."""
        self._claim_waits: dict[str, tuple[str, float]] = {}
        """Job uid -> (why its claims cannot be asked for yet, when to look again)."""
        self.cluster_name = _cluster_name(self.kubeconfig)
        self.server_version = self._probe()
        self.quota = QuotaTree([])
        self.recipe = engine_recipe(queue_policy, placement_policy, quota=self.quota, options=EngineOptions(
            describe=True, namespace=namespace, record_series=False, timed_finish=False, quota_waits=True,
            pass_budget_s=CONTROL_PLANE_PASS_BUDGET_S, device_check=admission == "devices"))
        """How the engine is made (:func:`gpucluster.jobs.engine_recipe`, as the simulator makes its own); a
        replica that becomes the leader builds a fresh one from it."""
        opts = RunOptions(placement_policy=placement_policy, scheduler_name=scheduler_name,
                          handshake_timeout=handshake_timeout, sync_timeout=sync_timeout)
        self.cluster, self.binder, self.informer = build(
            self.api, self.registry, opts, identity=f"control-plane/{self.identity}", profile=self.recipe.profile,
            services=self.recipe.services(), recreate_unbound=False)
        self._lock = threading.Lock()
        self._pods: dict[str, PodView] = {}
        """Pods made by Jobs (label ``batch.kubernetes.io/controller-uid``), as the informer last reported them."""
        self._claimants: dict[str, tuple[str, str]] = {}
        """Pods with ResourceClaims (any scheduler's): pod key -> (uid, the tenant it is charged to)."""
        self._job_objs: dict[str, Mapping[str, Any]] = {}
        """Job uid -> the queued Job object as last reported."""
        self._dirty: set[str] = set()
        self._gone: set[str] = set()
        self._members: dict[str, Member] = {}
        """Pod groups seen (their pseudo uid -> what makes their pods members); their pods are in ``_pods``."""
        self._gathering: dict[str, Job] = {}
        """Pod groups not queued yet (fewer than minMember pods, or no PodGroup yet), shown with why they wait."""
        self._owed: collections.deque[tuple[str, Any, tuple[Any, ...]]] = collections.deque(maxlen=OWED_MAX)
        """The Events this replica decided on while following (:meth:`_say`), written if it comes to lead."""
        self._regrouped: list[tuple[str, str, str]] = []
        """(pod key, reason, message) of the Events owed to pods whose pod group label changed (:meth:`_regroup`),
        written by the leader at the next tick (guarded by ``_lock``)."""
        self._regroup_told: dict[str, str] = {}
        """Bound pod key -> the group its label named when it was told it stays in its own (:meth:`_regroup`)."""
        self._group_ended: dict[str, set[str]] = {}
        """Pod group uid -> the pods of its last job that ended (refused, finished, failed, cancelled): only pods
        made after it make a new job of the group."""
        self.group_sizes = GroupSizes.from_api(self.api)
        self._sets = _Queued(jobset_as_job)
        """The queued JobSets, read as Jobs (:func:`jobset_as_job`); their child Jobs' pods are filed under them."""
        self._ptjs = _Queued(pytorchjob_as_job)
        """The queued PyTorchJobs, read as Jobs (:func:`pytorchjob_as_job`)."""
        self.bindings = NamespaceBindings()
        """Namespaces bound to tenants (label ``gpucluster.io/tenant`` on a Namespace, :mod:`.tenancy`), as the
        informer last reported them (guarded by ``_lock``)."""
        self._rebound = False
        """A binding changed since the last tick: the workloads not admitted are re-checked (guarded by ``_lock``)."""
        self._accepted: dict[str, str] = {}
        """Job uid -> why it is accepted now, for a Job refused for its namespace that a binding change let in (its
        refusal is taken off the Job when it is seen again)."""
        self.informer.pod_listeners.append(self._on_pod)
        self.informer.pod_resync_listeners.append(self._on_pod_resync)
        self.informer.watch_kind("jobs", self.batch.list_job_for_all_namespaces, self._on_job, self._on_job_list,
                                 label_selector=QUEUE_LABEL)
        self.informer.watch_kind("namespaces", self.core.list_namespace, self._on_namespace, self._on_namespace_list,
                                 label_selector=NAMESPACE_TENANT_LABEL)
        self.informer.watch_kind("jobsets", functools.partial(self.custom.list_cluster_custom_object, *JOBSET_API),
                                 self._on_jobset, self._on_jobset_list, label_selector=QUEUE_LABEL, optional=True,
                                 recheck_s=JOBSET_RECHECK_S)
        self.informer.watch_kind("pytorchjobs",
                                 functools.partial(self.custom.list_cluster_custom_object, *PYTORCHJOB_API),
                                 self._on_pytorchjob, self._on_pytorchjob_list, label_selector=QUEUE_LABEL,
                                 optional=True, recheck_s=JOBSET_RECHECK_S)
        self.tenancy: SharedTenants | None = None
        """The tenants' settings the replicas share (:mod:`.sharedtenants`); with leader election only (one replica
        without it: its store alone holds them)."""
        self._tenancy_wait = ""
        if leader_elect:
            where = lease_namespace or namespace
            self.tenancy = SharedTenants(self.core, where, configmap_name(lease_name), event=self._tenancy_event)
            self.informer.watch_kind("configmaps", functools.partial(self.core.list_namespaced_config_map, where),
                                     self.tenancy.on_event, self.tenancy.on_list,
                                     field_selector=f"metadata.name={self.tenancy.name}")
        self.informer.start()
        if not self.informer.wait_synced(sync_timeout):
            self.informer.stop()
            raise ConnectionError(f"{self.kubeconfig}: the API server at {self.api.configuration.host} did not "
                                  f"answer a list of nodes, pods and Jobs within {sync_timeout:g} s")
        self.writer = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kube-writes")
        self._writes: list[tuple[str, str, cf.Future[Any]]] = []
        """(what, job id, future) of writes whose outcome the next advance reads."""
        self._binding: set[str] = set()
        """Pods whose bind is in flight."""
        self.bound_count = 0
        self._events: list[JobEvent] = []
        self.recs: dict[str, _Rec] = {}
        self.by_uid: dict[str, str] = {}
        self.quiet: set[str] = set()
        """Jobs the engine is ending because the cluster said so (nothing to write back)."""
        self._creating: dict[str, Job] = {}
        """Jobs of our API whose Job object is being created (not in the engine yet)."""
        self._discovered: list[Job] = []
        self._pruned: set[str] = set()
        """Tombstones: finished jobs the control plane dropped (:meth:`forget`) whose object (Job, JobSet,
        PyTorchJob, a pod group's pods) is still in the cluster: not read as new jobs when the informer shows the
        object again. Each keeps its ``by_uid`` entry, and both go when the object does (a deleted Job, a group's
        last pod); a job whose object is gone already leaves no tombstone. So ``recs`` and ``by_uid`` hold the
        jobs in the engine plus one entry per tombstone, never one per job ever seen."""
        self._refused_tombs: dict[str, _Rec] = {}
        """The tombstones (a subset of :attr:`_pruned`) of workloads that ended *refused* (for their namespace, or
        for a bad label): their last record, so a binding change (:meth:`_recheck_tenancy`) or a change of their
        queue label (:meth:`_job_seen`, :meth:`_group_seen`) re-checks them as it re-checks a refused workload
        still in memory: the object is still there, so it is read again as a new one."""
        self._rechecked: dict[str, tuple[_Rec, bool]] = {}
        """Object uid -> (the last record of a refused workload being read again as new (:meth:`_reopen`: its
        label changed, or a binding change let it in), whether it was a tombstone), until it is read: refused
        again, a tombstone is one again at once (:meth:`_rebury`) and a pod group refused for the same reason
        gets no second Event."""
        self.elector: LeaderElector | None = None
        if leader_elect:
            self.elector = LeaderElector(self.api, lease_name, lease_namespace or namespace, self.identity,
                                         lease_duration=lease_duration, renew_deadline=lease_duration * 2 / 3,
                                         retry_period=max(lease_duration / 7, 0.2))
        self._leading = self.elector is None
        self._new_engine()
        self._start_history()
        with self._lock:
            self._dirty = set(self._job_objs) | set(self._sets.objs) | set(self._ptjs.objs)  # JobSets, PyTorchJobs
        self._sync_jobs()
        self._sync_groups()
        if self.elector is not None:
            self.elector.start()
        self._sample()

    def _new_engine(self) -> None:
        """A fresh engine from the recipe (at the start, and when this replica lost the lease and rebuilds every
        job from the cluster). The quota tree is the recipe's, shared with the scheduler's ``Quota`` plugin: its
        limits stay, every charge the old engine made goes (the new one charges the jobs it finds running, and
        only those: a job that ended or was deleted meanwhile must not hold its tenant's quota here). The tenants'
        fair-share weights (:meth:`set_quotas`) carry over."""
        old: JobEngine | None = getattr(self, "engine", None)
        with self.cluster.lock:
            self.quota.refund_all()
            self.engine = self.recipe.build(KubePlacer(self), kernel=Kernel())
            self.engine.paused = not self._leading
            if old is not None:
                self.engine.ledger.weights = dict(old.ledger.weights)
        self.engine.listeners.append(self._report)

    def _probe(self) -> str:
        """One quick call, so an unreachable or refusing API server is reported at once, not after the sync
        timeout."""
        host = self.api.configuration.host
        try:
            info = client.VersionApi(self.api).get_code(_request_timeout=(5.0, 10.0))
        except ApiException as exc:
            raise ConnectionError(f"{self.kubeconfig}: the API server at {host} refused us: "
                                  f"{exc.status} {exc.reason}") from None
        except Exception as exc:  # urllib3: connection refused, TLS, DNS (the cause is in MaxRetryError.reason)
            why = getattr(exc, "reason", None) or exc
            raise ConnectionError(f"{self.kubeconfig}: cannot reach the API server at {host}: {why}") from None
        return str(info.git_version)

    # ------------------------------------------------------------------ informer side (its threads)
    def _on_pod(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = pod_key(obj)
        view = pod_view(obj, key) if kind != "DELETED" else None
        member = None
        jobset = str(((obj.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL) or "")
        if view is not None and view.job_uid and jobset:  # a JobSet's child Job made it: the JobSet's pod
            where = f"{key.partition('/')[0]}/{jobset}"
            with self._lock:
                view.job_uid = self._sets.uids.get(where) or f"jobset:{where}"
        owner = pytorchjob_owner(obj) if view is not None and not view.job_uid else ""
        if owner:  # the training operator made it: its queued PyTorchJob's pod, in its replica's slot
            with self._lock:
                ptj = self._ptjs.objs.get(owner)
            if ptj is not None and view is not None:
                view.job_uid, view.index = owner, replica_slot(obj, ptj.get("offsets") or {})
        grouped = False
        if view is not None and not view.job_uid:
            grouped = True
            member = member_of(obj, self.scheduler_name, self.pod_groups)
            if member is not None:
                view.job_uid = member.uid
            elif owner:  # a PyTorchJob not known (yet): kept, so that its list files the pod when it comes
                view.job_uid = owner
        claimant = claim_tenant(obj) if kind != "DELETED" else None
        with self._lock:
            seen = self._pods.get(key)
            if view is not None and seen is not None and _older(obj, seen.obj):
                return  # a late watch event: a relist (:meth:`_relist`) read a newer version already
            if grouped and view is not None:
                member = self._regroup(view, member)
            elif view is None:
                self._regroup_told.pop(key, None)
            if view is None or not view.job_uid:
                self._pods.pop(key, None)
            else:
                self._pods[key] = view
                if member is not None:
                    self._members.setdefault(member.uid, member)
            if claimant is None:
                self._claimants.pop(key, None)
            else:
                self._claimants[key] = claimant

    def _regroup(self, view: PodView, member: Member | None) -> Member | None:
        """A pod that is (or was) a pod group's member, whose group may have changed since its last view (its
        ``scheduling.x-k8s.io/pod-group`` label, or our gang annotation, edited or removed): returns the group it is
        filed under. A **bound** member stays in the group it was admitted and bound with (its reservation names
        that group's job) until it ends, whatever its label says now: a Normal ``Relabelled`` Event says so once for
        each new label. An **unbound** member follows its label: it leaves its old group (a queued group that has
        fewer than ``minMember`` members left goes back to waiting for its pods, :meth:`_group_seen`) and joins the
        new one, or, its label removed, is a pod of no group (not the queue's: never bound here); a Normal
        ``LeftGroup`` Event says so. Caller holds ``_lock``."""
        prev = self._pods.get(view.key)
        was = prev.job_uid if prev is not None and prev.job_uid.startswith(GROUP_UID_PREFIX) else ""
        now = (f"now names pod group {member.namespace}/{member.name}" if member is not None
               else "no longer names a pod group of this control plane")
        job = view.reservation.partition("/")[2] if view.node else ""
        if job.startswith("g-"):  # bound into a group's slot (or as one beyond its minMember): that group's
            groups = ([member] if member is not None else []) + list(self._members.values())
            home = next((m for m in groups if job.startswith(group_job_id(m.namespace, m.gang) + "-")), None)
            if home is None or (member is not None and home.uid == member.uid):
                return member
            view.job_uid = home.uid
            told = member.uid if member is not None else ""
            if self._regroup_told.get(view.key) != told:
                self._regroup_told[view.key] = told
                self._regrouped.append((view.key, "Relabelled", (
                    f"its pod group label {now}, but it stays a member of pod group {home.namespace}/{home.name}, "
                    "bound into a slot of its running gang, until it ends (a bound pod never changes group: delete "
                    "it and create it again to move it)")))
            return home
        if was and was != view.job_uid and view.live:
            old = self._members.get(was)
            left = f"{old.namespace}/{old.name}" if old is not None else was[len(GROUP_UID_PREFIX):]
            self._regrouped.append((view.key, "LeftGroup", f"left pod group {left} before it was bound: its pod group "
                                    f"label {now}" + (", and it waits with that group" if member is not None else
                "; a pod of no group is not the queue's: the control plane does not bind it (a scheduler of its own "
                "does, e.g. gpucluster k8s scheduler; label it again to queue it)")))
        return member

    def _on_pod_resync(self, keys: set[str]) -> None:
        with self._lock:
            for key in [k for k in self._pods if k not in keys]:
                del self._pods[key]
            for key in [k for k in self._claimants if k not in keys]:
                del self._claimants[key]

    @property
    def jobsets(self) -> bool:
        """The API server serves JobSets now (their CRD is installed): they are read as jobs of the queue. A CRD
        installed while the control plane runs is found within ``JOBSET_RECHECK_S`` seconds."""
        return bool(self.informer.served.get("jobsets"))

    def _on_jobset(self, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            uid, where = self._sets.event(kind, obj, self._gone)
            if kind != "DELETED":
                for p in self._pods.values():  # pods seen before their JobSet
                    if p.job_uid == f"jobset:{where}":
                        p.job_uid = uid
            self._dirty.add(uid)

    def _on_jobset_list(self, items: list[Mapping[str, Any]]) -> None:
        with self._lock:
            fresh = self._sets.relist(items, self._gone)
            for p in self._pods.values():
                if p.job_uid.startswith("jobset:") and p.job_uid[7:] in self._sets.uids:
                    p.job_uid = self._sets.uids[p.job_uid[7:]]
            self._dirty |= fresh | self._gone

    def _on_pytorchjob(self, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            uid, _where = self._ptjs.event(kind, obj, self._gone)
            if kind != "DELETED":
                self._file_ptj_pods({uid})
            self._dirty.add(uid)

    def _on_pytorchjob_list(self, items: list[Mapping[str, Any]]) -> None:
        with self._lock:
            fresh = self._ptjs.relist(items, self._gone)
            self._file_ptj_pods(fresh)
            self._dirty |= fresh | self._gone

    def _file_ptj_pods(self, uids: set[str]) -> None:
        """Pods seen before their PyTorchJob (filed as its pods from now on, each in its replica's slot). Caller
        holds ``_lock``."""
        for p in self._pods.values():
            owner = pytorchjob_owner(p.obj)
            if owner in uids:
                p.job_uid, p.index = owner, replica_slot(p.obj, self._ptjs.objs[owner].get("offsets") or {})

    def _kind_of(self, namespace: str, name: str) -> str:
        where = f"{namespace}/{name}"
        with self._lock:
            return "JobSet" if where in self._sets.uids else "PyTorchJob" if where in self._ptjs.uids else "Job"

    def _suspend_body(self, namespace: str, name: str, suspend: bool) -> dict[str, Any]:
        """The patch that suspends (or releases) the queued object: ``spec.runPolicy.suspend`` on a PyTorchJob,
        ``spec.suspend`` on a Job or JobSet."""
        if self._kind_of(namespace, name) == "PyTorchJob":
            return {"runPolicy": {"suspend": suspend}}
        return {"suspend": suspend}

    def _patch(self, namespace: str, name: str, body: Mapping[str, Any]) -> None:
        """Patch the queued Job, JobSet or PyTorchJob ``namespace/name``."""
        api = CUSTOM_KINDS.get(self._kind_of(namespace, name))
        if api is not None:
            group, version, plural = api
            self.custom.patch_namespaced_custom_object(group, version, namespace, plural, name, body)
        else:
            self.batch.patch_namespaced_job(name, namespace, body)

    def _read(self, namespace: str, name: str) -> dict[str, Any]:
        """The queued object ``namespace/name`` read as a Job (``spec.suspend`` says whether it is suspended)."""
        kind = self._kind_of(namespace, name)
        api = CUSTOM_KINDS.get(kind)
        if api is None:
            return raw_get(self.batch.read_namespaced_job, name, namespace)
        group, version, plural = api
        obj = raw_get(self.custom.get_namespaced_custom_object, group, version, namespace, plural, name)
        return pytorchjob_as_job(obj) if kind == "PyTorchJob" else obj

    def _on_job(self, kind: str, obj: Mapping[str, Any]) -> None:
        if ((obj.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL):
            return  # a JobSet's child: queued as its JobSet
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        with self._lock:
            if kind != "DELETED" and _older(obj, self._job_objs.get(uid)):
                return  # a late watch event: a relist (:meth:`_relist`) read a newer version already
            if kind == "DELETED":
                self._job_objs.pop(uid, None)
                self._gone.add(uid)
            else:
                self._job_objs[uid] = obj
                self._gone.discard(uid)
            self._dirty.add(uid)

    def _on_namespace(self, kind: str, obj: Mapping[str, Any]) -> None:
        with self._lock:
            if self.bindings.event(kind, obj):
                self._rebound = True
                log.info("namespace %s: bound to tenant %s", (obj.get("metadata") or {}).get("name"),
                         self.bindings.tenant_of(str((obj.get("metadata") or {}).get("name") or "")) or "(none)")

    def _on_namespace_list(self, items: list[Mapping[str, Any]]) -> None:
        with self._lock:
            if self.bindings.relist(items):
                self._rebound = True

    def _bound_count(self) -> int:
        """How many namespaces are bound to a tenant now (the overview's ``bound_namespaces``)."""
        with self._lock:
            return self.bindings.count()

    def _tenancy(self, namespace: str, tenant: str) -> tuple[str | None, str | None]:
        """(the tenant ``namespace`` is bound to, why a workload there may not charge ``tenant``) now."""
        with self._lock:
            return self.bindings.tenant_of(namespace), self.bindings.refusal(namespace, tenant)

    def _on_job_list(self, items: list[Mapping[str, Any]]) -> None:
        with self._lock:
            fresh = {str((o.get("metadata") or {}).get("uid") or ""): o for o in items
                     if not ((o.get("metadata") or {}).get("labels") or {}).get(JOBSET_NAME_LABEL)}
            self._gone |= set(self._job_objs) - set(fresh)
            self._job_objs = fresh
            self._dirty |= set(fresh) | self._gone

    def close(self) -> None:
        """Give the lease back, stop the informer and the writer (Jobs and pods stay: they are the cluster's)."""
        if self.elector is not None:
            self.elector.stop()
        self.informer.stop()
        self.writer.shutdown(wait=True, cancel_futures=False)

    def engine_lock(self) -> contextlib.AbstractContextManager[object]:
        return self.cluster.lock

    # ------------------------------------------------------------------ protocol: properties
    @property
    def now(self) -> float:
        return self.engine.now

    @property
    def backend(self) -> str:
        return "kubernetes"

    def engine_time(self, epoch: float) -> float:
        """An epoch time of the cluster (a creation or admission time) on the engine's clock (which is the
        control plane's own: it resumes across restarts, each replica has its own)."""
        return max(0.0, self.now - max(0.0, time.time() - epoch))

    @property
    def leading(self) -> bool:
        """This replica admits, binds and preempts (always without leader election)."""
        return self.elector is None or self.elector.is_leader

    # ------------------------------------------------------------------ writes (writer thread)
    def submit_write(self, what: str, job_id: str, fn: Any, *args: Any) -> None:
        self._writes.append((what, job_id, self.writer.submit(fn, *args)))

    def _say(self, job_id: str, fn: Any, *args: Any) -> None:
        """An Event only the leader writes about a verdict every replica reaches (a pod group refused or let in,
        a workload relabelled, a pod that left its group): written now by the leader; kept by a follower and
        written once it leads (:meth:`_write_owed`: the old leader may have died before writing it, and one it did
        write is not written twice, :meth:`_event`)."""
        if self._leading:
            self.submit_write("note", job_id, fn, *args)
        else:
            self._owed.append((job_id, fn, args))

    def write_admission(self, namespace: str, name: str, rv: str, admission: Admission) -> str:
        """Write the admission on the Job and release it, if nobody else admitted it first: ``ok``, ``gone``,
        ``lost`` (not the leader any more) or ``taken:<admission json>``."""
        for _ in range(4):
            if not self.leading:
                return "lost"
            body = {"metadata": {"resourceVersion": rv, "annotations": {
                ADMISSION_ANNOTATION: admission.to_json(), MESSAGE_ANNOTATION: None}},
                "spec": self._suspend_body(namespace, name, False)}
            try:
                self._patch(namespace, name, body)
                self._job_event(namespace, name, "Normal", "Admitted",
                                f"admitted by {admission.by}: " + ", ".join(
                                    f"pod {i} on {s.node or '(not placed)'}" for i, s in enumerate(admission.slots)),
                                series=admission.id)
                return "ok"
            except ApiException as exc:
                if exc.status == 404:
                    return "gone"
                if exc.status != 409:
                    raise
            try:
                obj = self._read(namespace, name)
            except ApiException as exc:
                if exc.status == 404:
                    return "gone"
                raise
            meta = obj.get("metadata") or {}
            current = (meta.get("annotations") or {}).get(ADMISSION_ANNOTATION)
            if current and not (obj.get("spec") or {}).get("suspend"):
                theirs = Admission.parse(current, f"Job {namespace}/{name}")
                if theirs.id != admission.id:
                    return "taken:" + str(current)
                return "ok"
            rv = str(meta.get("resourceVersion") or "")
        raise RuntimeError(f"Job {namespace}/{name}: the admission kept conflicting with other writes")

    def write_group_admission(self, uid: str, admission: Admission) -> str:
        """A pod group's admission: nothing to write before its pods bind (each bound pod carries its slot:
        ``gpucluster.io/reservation`` and HAMi's annotations, what a restarted or newly elected leader adopts); an
        ``Admitted`` Event on each waiting member."""
        if not self.leading:
            return "lost"
        text = f"admitted by {admission.by} as one gang: " + ", ".join(
            f"pod {i} on {s.node or '(not placed)'}" for i, s in enumerate(admission.slots))
        self.write_pod_events(self._group_pod_keys(uid, waiting=True), "Normal", "Admitted", text, series=admission.id)
        return "ok"

    def _group_pod_keys(self, uid: str, *, waiting: bool = False, live: bool = False) -> list[str]:
        with self._lock:
            return sorted(k for k, p in self._pods.items() if p.job_uid == uid
                          and (not waiting or (p.live and not p.node)) and (not live or p.live))

    def write_pod_events(self, keys: Sequence[str], kind: str, reason: str, message: str, series: str = "") -> str:
        """An Event on each of these pods (a pod group's members: why they wait, or that they were admitted);
        ``series``: :meth:`_event`."""
        if not self.leading:
            return "lost"
        for key in keys:
            namespace, _, name = key.partition("/")
            with self._lock:
                view = self._pods.get(key)
            uid = str((view.obj.get("metadata") or {}).get("uid") or "") if view is not None else ""
            self._event(("v1", "Pod"), namespace, name, uid, kind, reason, message, series)
        return "ok"

    def _event(self, involved: tuple[str, str], namespace: str, name: str, uid: str, kind: str, reason: str,
               message: str, series: str = "") -> None:
        """Write one Event about the object ``involved`` = (apiVersion, kind) ``namespace/name`` (its ``uid`` when
        known); an API error is logged at debug level and otherwise ignored (an Event is a courtesy). Idempotent:
        its name is made of the object, the reason and the message (and ``series``, e.g. the admission an
        ``Admitted`` Event is about), so the same Event written again (by a new leader that cannot know what the
        old one wrote before it died, or by a replica that decided the same while following) is the one already
        there, not a second."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        said = f"{uid or namespace + '/' + name}|{involved[1]}|{kind}|{reason}|{message[:1024]}|{series}"
        digest = hashlib.sha1(said.encode(), usedforsecurity=False).hexdigest()[:20]
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{name[:200].rstrip('-.')}.{digest}", "namespace": namespace},
            "involvedObject": {"apiVersion": involved[0], "kind": involved[1], "name": name, "namespace": namespace,
                               **({"uid": uid} if uid else {})},
            "reason": reason, "message": message[:1024], "type": kind,
            "source": {"component": self.scheduler_name}, "reportingComponent": self.scheduler_name,
            "reportingInstance": self.identity, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.core.create_namespaced_event(namespace, event)
        except ApiException as exc:  # 409: written already (by this replica or another)
            log.debug("event on %s %s/%s not written: %s", involved[1], namespace, name, exc.status)

    def write_delete_pods(self, keys: Sequence[str]) -> str:
        """Delete these pods (a pod group's members: cancelled, or the rest of a gang one of whose pods failed)."""
        for key in keys:
            namespace, _, name = key.partition("/")
            try:
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return "ok"

    def write_suspend(self, namespace: str, name: str, uid: str) -> str:
        """Suspend the Job again (preempted), drop its admission, delete its pods at once and release their
        ResourceClaims."""
        if not self.leading:
            return "lost"
        body = {"metadata": {"annotations": {ADMISSION_ANNOTATION: None}},
                "spec": self._suspend_body(namespace, name, True)}
        try:
            self._patch(namespace, name, body)
        except ApiException as exc:
            if exc.status == 404:
                return "gone"
            raise
        self._job_event(namespace, name, "Normal", "Preempted", "suspended to make room for another job; "
                                                               "re-queued")
        with self._lock:
            pods = [(k, str((p.obj.get("metadata") or {}).get("uid") or "")) for k, p in self._pods.items()
                    if p.job_uid == uid]
        for key, _uid in pods:
            ns, _, pod = key.partition("/")
            with contextlib.suppress(ApiException):
                self.core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)
        self._release_claims({u for _k, u in pods if u})
        return "ok"

    def _release_claims(self, pod_uids: set[str]) -> None:
        """The pods are gone (deleted with no grace): take them out of their claims' ``reservedFor`` and deallocate
        the claims nobody holds any more, now, before any later write of this thread (the bind of the pods that
        preempted them) gives their devices to another claim."""
        if not pod_uids:
            return
        with self.cluster.lock:
            held = [(c.namespace, c.name, ref[2]) for c in self.cluster.claims.values() for ref in c.reserved_for
                    if ref[2] in pod_uids]
        for namespace, name, pod_uid in held:
            try:
                self.binder.claims.release(namespace, name, pod_uid)
                log.info("claim %s/%s released (its pod was preempted)", namespace, name)
            except Exception as exc:  # kube-controller-manager's resourceclaim controller releases it later
                log.warning("claim %s/%s not released: %s", namespace, name, _api_error(exc))

    def write_create(self, body: dict[str, Any], spec: JobSpec | None = None) -> tuple[str, str]:
        """Create the Job (an existing one of the same name is ours already) and, for a ``spec`` with ``claims``,
        its ResourceClaimTemplates (owned by the Job); returns (uid, resourceVersion)."""
        meta = body["metadata"]
        try:
            made = self.batch.create_namespaced_job(meta["namespace"], body, _preload_content=False)
            obj = json.loads(made.data)
        except ApiException as exc:
            if exc.status != 409:
                raise
            obj = raw_get(self.batch.read_namespaced_job, meta["name"], meta["namespace"])
        m = obj.get("metadata") or {}
        uid = str(m.get("uid") or "")
        if spec is not None and spec.claims:
            for template in claim_templates(spec, meta["namespace"], uid):
                try:
                    self.resource.create_namespaced_resource_claim_template(meta["namespace"], template)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
        return uid, str(m.get("resourceVersion") or "")

    def write_delete(self, namespace: str, name: str) -> str:
        try:
            api = CUSTOM_KINDS.get(self._kind_of(namespace, name))
            if api is not None:
                group, version, plural = api
                self.custom.delete_namespaced_custom_object(group, version, namespace, plural, name,
                                                            propagation_policy="Background")
            else:
                self.batch.delete_namespaced_job(name, namespace, propagation_policy="Background",
                                                 grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
        return "ok"

    def write_bind(self, obj: Mapping[str, Any], alloc: Allocation, reservation: str,
                   plan: ClaimPlan | None = None) -> str:
        """Bind the pod into its reservation (``plan``: its ResourceClaims' allocations, written first)."""
        if not self.leading:
            return "lost"
        pod = parse_pod(obj, self.registry)
        if plan is not None:
            with self.cluster.lock:
                self.cluster.claim_plans[pod.key] = plan
        try:
            st = self.binder.bind(pod, replace(alloc, pod_key=pod.key, pod=pod),
                                  {RESERVATION_ANNOTATION: reservation})
        finally:
            if plan is not None:
                with self.cluster.lock:
                    self.cluster.claim_plans.pop(pod.key, None)
        if not st.ok:
            raise RuntimeError("; ".join(st.reasons))
        self.bound_count += 1
        self.binder.report_scheduled(pod, alloc.node, self.scheduler_name)
        return "ok"

    def write_note(self, namespace: str, name: str, kind: str, reason: str, message: str,
                   annotation: str) -> str:
        """An Event on the Job, and ``annotation`` (message or refused) set to ``message``."""
        if not self.leading:
            return "lost"
        with contextlib.suppress(ApiException):
            self._patch(namespace, name, {"metadata": {"annotations": {annotation: message}}})
        self._job_event(namespace, name, kind, reason, message)
        return "ok"

    def write_event(self, namespace: str, name: str, kind: str, reason: str, message: str) -> str:
        """An Event on the Job (JobSet, PyTorchJob), nothing else."""
        if not self.leading:
            return "lost"
        self._job_event(namespace, name, kind, reason, message)
        return "ok"

    def write_accepted(self, namespace: str, name: str, message: str) -> str:
        """A refused Job (JobSet, PyTorchJob) that is queued now: its ``gpucluster.io/refused`` taken off and a
        Normal ``Accepted`` Event saying why."""
        if not self.leading:
            return "lost"
        with contextlib.suppress(ApiException):
            self._patch(namespace, name, {"metadata": {"annotations": {REFUSED_ANNOTATION: None}}})
        self._job_event(namespace, name, "Normal", "Accepted", message)
        return "ok"

    def _job_event(self, namespace: str, name: str, kind: str, reason: str, message: str, series: str = "") -> None:
        uid = ""
        what = self._kind_of(namespace, name)
        with self._lock:
            objs = {"JobSet": self._sets.objs, "PyTorchJob": self._ptjs.objs}.get(what, self._job_objs)
            for u, obj in objs.items():
                m = obj.get("metadata") or {}
                if m.get("name") == name and m.get("namespace") == namespace:
                    uid = u
        api = CUSTOM_KINDS.get(what)
        involved = ("/".join(api[:2]), what) if api is not None else ("batch/v1", "Job")
        self._event(involved, namespace, name, uid, kind, reason, message, series)

    # ------------------------------------------------------------------ jobs: API side
    def validate(self, job: Job, quota: bool = True) -> None:
        """As every runtime's (``ValueError("where: why")``), on the devices a job with ``claims`` gets through
        DRA here: each claim's DeviceClass must exist and match devices (``claims[i].device_class``), and a
        memory request needs devices with consumable memory (``claims[i].memory_mib``)."""
        super().validate(Job(self._claims_spec(job.spec)) if job.spec.claims else job, quota)

    def _claims_spec(self, spec: JobSpec) -> JobSpec:
        """A job of the API with ``claims``: its task pod asks for each claim as the pod's ResourceClaim (made from
        the job's ResourceClaimTemplate) will, a ``dra-entry:claim-<i>`` pseudo container over the devices the
        DeviceClass matches (instead of the embedded backend's HAMi request), so admission places them, quota
        and fair share count them and each pod's claim gets the reserved devices when it binds.
        ``ValueError("claims[i].field: why")`` when the cluster cannot serve a claim."""
        if spec.template is None or not spec.claims:
            return spec
        base = tuple(c for c in spec.template.containers if not c.name.startswith(CLAIM_CONTAINER_PREFIX))
        extra = []
        for i, (claim, template) in enumerate(zip(spec.claims, claim_templates(spec, self.namespace, ""),
                                                  strict=True)):
            where = f"claims[{i}]"
            try:
                container = self.cluster.entry_container(f"{CLAIM_CONTAINER_PREFIX}{i}",
                                                         parse_claim_template(template), where)
            except (ClaimNotReadyError, DraInputError) as exc:
                why = str(exc).partition(": request gpu: ")[2] or str(exc)
                raise ValueError(f"{where}.device_class: {why}") from None
            if claim.memory_mib and all(r.memory_pct == 100 and not r.memory_mib for r in container.devices):
                raise ValueError(f"{where}.memory_mib: the devices of DeviceClass {claim.device_class} publish no "
                                 "consumable memory (they are allocated whole): omit memory_mib")
            extra.append(container)
        pod = replace(spec.template, containers=(*base, *extra))
        return replace(spec, template=pod, num_gpus=pod.device_count * spec.num_tasks)

    def submit(self, job: Job) -> Job:
        """Create the job's batch/v1 Job (suspended) on the writer thread; it is queued once it exists."""
        try:
            job.spec = user_submission(self._claims_spec(job.spec), self.engine.now)
        except ValueError as exc:  # validated when accepted; its DeviceClass went away since (a restore)
            job.spec = user_submission(job.spec, self.engine.now)
            self.engine.jobs[job.id] = job
            self._events.extend(transition(job, Fail(f"its claims cannot be served here: {exc}"), self.now))
            return job
        body = job_manifest(job.spec, self.namespace, self.scheduler_name, image=self.image,
                            registry=self.registry)
        self.recs[job.id] = _Rec(job.id, True, self.namespace, job.id)
        self._creating[job.id] = job
        self.submit_write("create", job.id, self.write_create, body, job.spec)
        return job

    def restore(self, job: Job, admitted: bool = False) -> None:
        """A job the store knows after a restart: the cluster's record wins (a running Job object is adopted as
        it runs, whatever the quota is now); a job whose Job object is missing is created again (nothing
        accepted is lost) and admitted again. A job found in the cluster (a Job, JobSet or PyTorchJob someone
        applied: ``k-`` and its uid) whose object is gone was deleted while this replica was down (or before a
        replica that follows saw it end): it is not made again (``LookupError``), nor is a pod group whose pods
        are gone."""
        if job.id in self.engine.jobs or job.id in self._creating or any(
                j.id == job.id for j in self._gathering.values()):
            return
        if job.id.startswith("g-"):  # a pod group's: nothing here can make its pods again
            raise LookupError("its pod group's pods are gone from the cluster")
        if job.id.startswith(NATIVE_ID_PREFIX):
            with self._lock:
                uids = {*self._job_objs, *self._sets.objs, *self._ptjs.objs}
            if any(native_id(u) == job.id for u in uids):
                return  # its object is there, not read yet (its claims are not ready): read when it is
            raise LookupError("its object (Job, JobSet or PyTorchJob) was deleted from the cluster")
        job.spec = restored_submission(job.spec, self.now)
        self.submit(job)

    def cancel(self, job_id: str) -> Job | None:
        job = self.engine.jobs.get(job_id) or self._creating.get(job_id)
        if job is None:
            return None
        rec = self.recs.get(job_id)
        if job_id in self._creating:
            del self._creating[job_id]
            transition(job, Cancel(), self.now)
            self.engine.jobs[job_id] = job  # held as an ended job (as one whose create failed): prunable
        else:
            self.quiet.add(job_id)
            try:
                with self._collect(None), self.cluster.lock:  # the service records the cancellation itself
                    self.engine.cancel(job_id)
            finally:
                self.quiet.discard(job_id)
        if rec is not None and rec.group:
            self.submit_write("delete", job_id, self.write_delete_pods, self._group_pod_keys(rec.uid, live=True))
        elif rec is not None:
            self.submit_write("delete", job_id, self.write_delete, rec.namespace, rec.name)
        return job

    def job(self, job_id: str) -> Job | None:
        return (self.engine.jobs.get(job_id) or self._creating.get(job_id)
                or next((j for j in self._gathering.values() if j.id == job_id), None))

    def jobs(self) -> list[Job]:
        return [*self.engine.jobs.values(), *self._creating.values(), *self._gathering.values()]

    def forget(self, job_id: str) -> bool:
        """Drop a finished job's record (the control plane's retention policy), and its events not taken yet (a
        finished job read again from its object after a restart). Its Job (JobSet, PyTorchJob) object may stay in
        the cluster until its ``ttlSecondsAfterFinished`` or a ``kubectl delete``, a pod group's ended pods until
        someone deletes them: until then a tombstone (:attr:`_pruned`) keeps the informer's views of it from
        being read as a new job; a job whose object is gone already leaves nothing."""
        if job_id in self._creating:
            return False
        with self.cluster.lock:
            if not super().forget(job_id):
                return False
            rec = self.recs.pop(job_id, None)
            if rec is not None and rec.uid and self.by_uid.get(rec.uid) == job_id:
                self._pruned.add(job_id)  # its object is still there (its deletion, if seen, not read yet)
                if rec.rejected:  # refused: a binding or label change re-checks it (:attr:`_refused_tombs`)
                    self._refused_tombs[job_id] = rec
            elif rec is not None and any(w == "create" and j == job_id for w, j, _ in self._writes):
                self._pruned.add(job_id)  # cancelled while its Job is being created: its uid comes with the reply
            if any(e.job_id == job_id for e in self._events):
                self._events = [e for e in self._events if e.job_id != job_id]
        return True

    def tombstones(self) -> int:
        """Pruned jobs whose object is still in the cluster (:attr:`_pruned`)."""
        return len(self._pruned)

    def _unbury(self, job_id: str) -> None:
        """The tombstone of ``job_id`` goes (its object is gone, or it is read again as a new workload)."""
        self._pruned.discard(job_id)
        self._refused_tombs.pop(job_id, None)

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        """The engine's counts, plus the jobs whose Job object is being created (pending: accepted, not yet in
        the engine), so a tenant's limit of queued jobs counts them too."""
        usage = super().usage_by_tenant()
        for job in list(self._creating.values()):
            if not job.done:
                u = usage.setdefault(job.tenant, {"gpus": 0.0, "pending_gpus": 0.0, "running": 0.0, "pending": 0.0})
                u["pending_gpus"] += job.gpus
                u["pending"] += 1
        return usage

    def take_discovered(self) -> list[Job]:
        """Jobs found in the cluster that no submission here made (``service.runtime.DiscoveredJobs``)."""
        out, self._discovered = self._discovered, []
        return out

    # ------------------------------------------------------------------ time
    def advance(self, t: float) -> list[JobEvent]:
        """Read what the writer did and what the informer saw, mirror or bind, then run the engine to ``t``."""
        if t < self.now:
            return []
        self._leadership()
        with self._lock:
            rebound, self._rebound = self._rebound, False
        with self.cluster.lock:
            self._check_writes()
            if rebound:
                self._recheck_tenancy()
        self._sync_jobs()
        self._sync_groups()
        with self._lock:
            pods = dict(self._pods)
        by_uid: dict[str, list[PodView]] = {}
        for p in pods.values():
            by_uid.setdefault(p.job_uid, []).append(p)
        with self.cluster.lock:
            self._mirror_slots()
            if self._leading:
                self._place_waiting_slots()
                self._bind(pods, by_uid)
            for job in self.engine.views.running():
                rec = self.recs.get(job.id)
                if rec is not None:
                    self._observe(job, rec, by_uid.get(rec.uid, []))
            self.engine.set_outside_use({**self._claims_outside(), **self._extras_outside(pods),
                                         **self._unmirrored_outside()})
            self.engine.run_until(t)
        with self._lock:
            regrouped, self._regrouped = self._regrouped, []
        for key, reason, message in regrouped:
            self._say(key, self.write_pod_events, [key], "Normal", reason, message)
        if self._leading:
            self._write_notes()
        else:
            self._owe_refusals()
        self._sample_due()
        return self._take_events()

    def _claims_outside(self) -> dict[str, tuple[str, dict[str, float]]]:
        """The allocated ResourceClaims that hold devices outside our jobs (kube-scheduler's DRA plugin, or a
        secondary scheduler, allocated them for some pod), each charged once to one tenant and never beyond the
        devices that exist (:mod:`gpucluster.kubernetes.outside`). Caller holds the cluster lock."""
        with self._lock:
            claimants = dict(self._claimants)
        return outside_use(self.cluster, claimants)

    def _leadership(self) -> None:
        leading = self.leading
        if leading == self._leading:
            return
        if leading and not self._tenancy_current():
            return  # leads (admits) once the newest shared tenant settings are applied: at a next tick
        if leading and not self._relist():
            return  # leads once it has read the workloads and pods from the API server: at a next tick
        self._leading = leading
        if leading:
            log.info("%s leads: admitting jobs", self.identity)
            with self.cluster.lock:
                self._write_owed()
            self.engine.resume()
            return
        log.warning("%s lost the lease: following, rebuilding every job from the cluster", self.identity)
        with self.cluster.lock:
            self.cluster.unreserve(list(self.cluster.reserved))
            old = self.engine
            self._new_engine()
            self.engine.kernel.advance(old.now)
            self.recs = {k: r for k, r in self.recs.items() if k in self._creating}
            self.by_uid = {u: j for u, j in self.by_uid.items() if j in self._pruned}  # tombstones stay
            self._gathering = {}
            self._group_ended = {}
        with self._lock:
            self._dirty = set(self._job_objs) | set(self._sets.objs) | set(self._ptjs.objs)  # JobSets, PyTorchJobs

    def _relist(self) -> bool:
        """This replica is about to lead: read the queued workloads (Jobs, JobSets, PyTorchJobs) and the pods from
        the API server now, as a relist of its watches, so its first admission pass (in this tick) counts every
        admission and bind of the old leader, even one its watches have not delivered yet (the leader killed
        right after writing it): a workload admitted there is adopted, charged to its tenant, before anything is
        admitted here. False when the API server cannot be read (it leads at a later tick)."""
        try:
            jobs = raw_list(self.batch.list_job_for_all_namespaces, label_selector=QUEUE_LABEL)
            customs = {kind: raw_list(functools.partial(self.custom.list_cluster_custom_object, *CUSTOM_KINDS[kind]),
                                      label_selector=QUEUE_LABEL)
                       for kind, name in (("JobSet", "jobsets"), ("PyTorchJob", "pytorchjobs"))
                       if self.informer.served.get(name)}
            pods = raw_list(self.core.list_pod_for_all_namespaces)
        except Exception as exc:
            log.warning("%s holds the lease but admits nothing until it has read the workloads and pods: %s",
                        self.identity, _api_error(exc))
            return False
        self._on_job_list(list(jobs.get("items") or []))
        if "JobSet" in customs:
            self._on_jobset_list(list(customs["JobSet"].get("items") or []))
        if "PyTorchJob" in customs:
            self._on_pytorchjob_list(list(customs["PyTorchJob"].get("items") or []))
        items = list(pods.get("items") or [])
        self._on_pod_resync({pod_key(o) for o in items})
        for obj in items:
            self._on_pod("MODIFIED", obj)
        return True

    def _tenancy_current(self) -> bool:
        """Whether the shared tenant settings this replica applied are the newest on the server (read now): a
        replica about to lead must admit under the quotas every replica holds, not under what its watch had
        delivered. When they are not (or cannot be read), the service applies them at the next tick and this
        replica leads after that."""
        if self.tenancy is None:
            return True
        try:
            read = self.tenancy.read_now()
        except Exception as exc:
            why = f"cannot read {self.tenancy.where}: {exc}"
            if why != self._tenancy_wait:
                log.warning("%s holds the lease but admits nothing until it %s", self.identity, why[:300])
                self._tenancy_wait = why
            return False
        if self.tenancy.needs_apply(read):
            assert read is not None
            why = f"has applied {self.tenancy.where} version {read.version}"
            if why != self._tenancy_wait:
                log.info("%s holds the lease and leads once it %s", self.identity, why)
                self._tenancy_wait = why
            return False
        self._tenancy_wait = ""
        return True

    def _tenancy_event(self, uid: str, reason: str, message: str) -> None:
        if self.tenancy is not None:
            self.writer.submit(self._event, ("v1", "ConfigMap"), self.tenancy.namespace, self.tenancy.name, uid,
                               "Warning", reason, message)

    # ------------------------------------------------------------------ protocol: SharedTenantSettings
    def shared_tenancy(self) -> SharedTenancy | None:
        return None if self.tenancy is None else self.tenancy.pending()

    def tenancy_applied(self, version: str) -> None:
        if self.tenancy is not None:
            self.tenancy.mark_applied(version)

    def seed_tenancy(self, local: Mapping[str, TenantSettings], synced_uid: str | None) -> str:
        if self.tenancy is None:
            return ""
        try:
            read = self.tenancy.read_now()
        except Exception as exc:
            raise TenancyWriteError(f"{self.tenancy.where} could not be read: {exc}") from None
        if read is not None and read.uid == synced_uid:
            return read.uid
        named = set() if read is None else {*read.tenants, *read.bad}
        missing = {n: s for n, s in local.items() if s != DEFAULTS and n not in named}
        if read is None or missing:
            if missing:
                log.info("adding this store's tenants %s to %s (it does not name them)", ", ".join(sorted(missing)),
                         self.tenancy.where)
            read = self.tenancy.publish(missing, local, only_missing=True)
        return read.uid

    def publish_tenant(self, name: str, settings: TenantSettings, local: Mapping[str, TenantSettings],
                       fields: Collection[str] | None = None) -> TenantSettings:
        if self.tenancy is None:
            return settings
        read = self.tenancy.publish({name: settings}, local, fields=fields)
        return read.tenants.get(name, settings)

    def _write_owed(self) -> None:
        """This replica leads now: write what only a leader writes about the verdicts it reached while it
        followed, where the workload's object does not show them (the leader that died may have frozen or died
        before writing them, e.g. a binding change it never saw): the refusal of a workload refused here (a
        Warning ``Refused`` Event and ``gpucluster.io/refused``), and the acceptance of one still carrying a
        refusal that is queued or running here (the annotation taken off, a Normal ``Accepted`` Event). Both are
        written before this replica's first admission (the writer keeps their order). Pod groups carry no
        annotation to compare with: the Events this replica decided on while following (a pod group's refusal or
        acceptance, a ``Relabelled``, a ``LeftGroup``: :meth:`_say`) are written, each once whoever wrote it
        before (:meth:`_event`). Caller holds the cluster lock."""
        owed, self._owed = list(self._owed), collections.deque(maxlen=OWED_MAX)
        for job_id, fn, args in owed:
            self.submit_write("note", job_id, fn, *args)
        with self._lock:
            objs = {**self._job_objs, **self._sets.objs, **self._ptjs.objs}
        for rec in self.recs.values():
            job = self.engine.jobs.get(rec.job_id)
            obj = objs.get(rec.uid)
            if job is None or obj is None or rec.group:
                continue
            notes = (obj.get("metadata") or {}).get("annotations") or {}
            refusal = notes.get(REFUSED_ANNOTATION)
            released = bool(notes.get(ADMISSION_ANNOTATION)) and not (obj.get("spec") or {}).get("suspend")
            if job.done and rec.rejected and not refusal and not released:  # released: the old leader admitted
                # it before the binding change; mirrored as it runs when this tick reads it (:meth:`_job_seen`)
                rec.refused = True
                self.submit_write("note", rec.job_id, self.write_note, rec.namespace, rec.name, "Warning", "Refused",
                                  job.message.removeprefix("refused: "), REFUSED_ANNOTATION)
            elif not job.done and refusal:
                with self._lock:
                    why = self.bindings.allowance(rec.namespace, job.tenant)
                self.submit_write("note", rec.job_id, self.write_accepted, rec.namespace, rec.name,
                                  f"accepted: queued for tenant {job.tenant}: {why}")

    def _check_writes(self) -> None:
        left = []
        for what, job_id, fut in self._writes:
            if not fut.done():
                left.append((what, job_id, fut))
                continue
            exc = fut.exception()
            try:
                self._written(what, job_id, None if exc is not None else fut.result(), exc)
            except Exception:
                log.exception("handling the outcome of %s for job %s failed", what, job_id)
        self._writes = left

    def _written(self, what: str, job_id: str, result: Any, exc: BaseException | None) -> None:
        rec = self.recs.get(job_id)
        if what == "create":
            job = self._creating.pop(job_id, None)
            if job is None:  # cancelled while its Job was being created (its deletion is written next)
                if exc is not None:
                    self.recs.pop(job_id, None)
                    self._unbury(job_id)
                elif job_id in self._pruned:  # and pruned since: a tombstone until its Job is gone
                    self.by_uid[result[0]] = job_id
                elif rec is not None:  # its object's views are the ended job's until it is gone
                    rec.uid, rec.rv = result
                    self.by_uid[rec.uid] = job_id
                return
            if job is None or rec is None:
                return
            if exc is not None:
                events = transition(job, Fail(f"its Job could not be created: {_api_error(exc)}"), self.now)
                self.engine.jobs[job_id] = job
                self._events.extend(events)
                return
            rec.uid, rec.rv = result
            self.by_uid[rec.uid] = job_id
            self.engine.submit(job)
        elif what == "admit":
            job = self.engine.jobs.get(job_id)
            if job is None or rec is None or job.state != JobState.RUNNING:
                return
            if exc is None and result == "ok":
                if rec.group:
                    rec.writing = False  # nothing more to see: its pods bind into the slots
                return  # writing ends when the informer shows the admission on the Job
            rec.writing = False
            if rec.admission is not None:
                rec.withdrawn.add(rec.admission.id)
            why = ("its Job was deleted" if result == "gone" else "this replica is no longer the leader"
                   if result == "lost" else "another replica admitted it first" if str(result).startswith("taken")
                   else f"the admission could not be written: {_api_error(exc) if exc else result}")
            self.quiet.add(job_id)
            try:
                if result == "gone":
                    self.engine.cancel(job_id, "its Job was deleted")
                else:
                    self.engine.withdraw(job_id, why)
            finally:
                self.quiet.discard(job_id)
            if rec.uid:
                with self._lock:
                    self._dirty.add(rec.uid)
        elif what == "bind":  # job_id is the pod's key
            self._binding.discard(job_id)
            if exc is not None or result != "ok":
                self.cluster.unalias(job_id)
                if exc is not None:
                    log.warning("pod %s not bound: %s", job_id, _api_error(exc))
        elif exc is not None:
            log.warning("%s for job %s failed: %s", what, job_id, _api_error(exc))

    # ------------------------------------------------------------------ Jobs -> records
    def _sync_jobs(self) -> None:
        now = time.monotonic()
        with self._lock:
            for uid, (_why, at) in self._claim_waits.items():
                if at <= now:
                    self._dirty.add(uid)
            dirty, self._dirty = self._dirty, set()
            gone = self._gone & dirty
            self._gone -= gone
            objs = [self._job_objs.get(u) or self._sets.objs.get(u) or self._ptjs.objs[u] for u in dirty
                    if u in self._job_objs or u in self._sets.objs or u in self._ptjs.objs]
        with self.cluster.lock:
            for uid in gone:
                self._claim_waits.pop(uid, None)
                self._accepted.pop(uid, None)
                self._rechecked.pop(uid, None)
                job_id = self.by_uid.pop(uid, None)
                if job_id is not None:
                    self._unbury(job_id)  # its object is gone: nothing can bring the record back
                    self._observed_end(job_id, Cancel("its Job was deleted"))
            for obj in sorted(objs, key=lambda o: str((o.get("metadata") or {}).get("creationTimestamp") or "")):
                try:
                    self._job_seen(obj)
                except Exception:
                    log.exception("Job %s could not be read", (obj.get("metadata") or {}).get("name"))

    def _observed_end(self, job_id: str, stimulus: Cancel | Fail | None, message: str = "") -> None:
        """The cluster ended the job (Job complete, failed or deleted): nothing to write back."""
        job = self.engine.jobs.get(job_id)
        if job is None or job.done:
            return
        self.quiet.add(job_id)
        try:
            if stimulus is None:
                if job.state != JobState.RUNNING:
                    self.engine.adopt(job, [], self.now)
                self.engine.finish(job_id, message)
            elif isinstance(stimulus, Cancel):
                self.engine.cancel(job_id, stimulus.why)
            else:
                self.engine.fail(job_id, stimulus.why)
        finally:
            self.quiet.discard(job_id)

    def _job_seen(self, obj: Mapping[str, Any]) -> None:
        q = parse_queue_job(obj, self.registry, self.scheduler_name, submit_s=self.now)
        if q.job_id in self._pruned:  # finished and dropped (:meth:`forget`): its object, still there, is not a new
            tomb = self._refused_tombs.get(q.job_id)  # job; but a refused one's new label is re-checked
            if (tomb is not None and tomb.label is not None and q.tenant != tomb.label and not q.finished
                    and not q.deleting):
                self._relabelled_tomb(tomb, q.tenant)
            return
        label = q.tenant  # as labelled (a refused one's is shown under its namespace's tenant below)
        rec = self.recs.get(q.job_id)
        job = self.engine.jobs.get(q.job_id)
        if rec is None or (job is None and q.job_id not in self._creating):
            # a Job of our REST API (made in the control plane's namespace for an authenticated tenant) is not
            # bound by namespace; every other workload must come from a namespace its tenant accepts, unless it
            # was admitted and runs (a binding change never stops a running workload, nor does a restart)
            foreign = ""
            running = q.admission is not None and not q.suspended
            if q.spec is not None and not (q.ours and q.namespace == self.namespace) and not running:
                bound, why = self._tenancy(q.namespace, q.tenant)
                if why is not None:  # not charged, not listed as the tenant's: shown under the namespace's
                    foreign, q.spec, q.error, q.tenant = q.tenant, None, why, bound or "default"
            if q.spec is not None and not q.finished:
                try:
                    q.spec = self._with_claims(q, obj)
                except ClaimNotReadyError as exc:
                    self._claims_wait(q, str(exc))
                    return
                except (KubeInputError, DraInputError) as exc:
                    q.spec, q.error = None, str(exc)
            self._claim_waits.pop(q.uid, None)
            rec = self.recs.setdefault(q.job_id, _Rec(q.job_id, q.ours))
            rec.namespace, rec.name, rec.uid, rec.rv = q.namespace, q.name, q.uid, q.resource_version
            rec.foreign, rec.label = foreign, label
            self.by_uid[q.uid] = q.job_id
            buried = self._rechecked.pop(q.uid, (None, False))[1]
            job = self._new_record(q, rec)
            if job is None:
                rec.rejected = True
                if buried:  # pruned while refused, re-checked and refused again: pruned again
                    self._rebury(q.job_id)
                return
        rec.namespace, rec.name, rec.uid, rec.rv = q.namespace, q.name, q.uid, q.resource_version
        self.by_uid[q.uid] = q.job_id
        rec.refused = rec.refused or bool(q.refused)
        if (job is not None and job.done and rec.foreign and q.admission is not None and not q.suspended
                and q.admission.id not in rec.withdrawn):
            # refused here for its namespace, but the leader admitted it before the binding changed (a follower
            # that saw the change first): mirror the leader, as a new record at the next tick
            self._reopen(rec)
            return
        if (job is not None and rec.label is not None and label != rec.label and not q.finished and not q.deleting
                and not (rec.ours and rec.namespace == self.namespace)):
            self._relabelled(rec, job, label)
        if job is None or job.done:
            return
        if q.finished == "Complete":
            self._observed_end(q.job_id, None, "the Job completed" + (f" ({q.finish_message})"
                                                                     if q.finish_message else ""))
        elif q.finished == "Failed":
            self._observed_end(q.job_id, Fail(self._failure(q)))
        elif q.deleting:
            self._observed_end(q.job_id, Cancel("its Job is being deleted"))
        elif q.spec is None:
            return
        elif q.admission is not None and not q.suspended:
            current = rec.admission
            if job.state == JobState.RUNNING and current is not None and current.id == q.admission.id:
                rec.writing = False  # our admission is on the Job
                return
            if q.admission.id in rec.withdrawn:
                return  # an old view: this replica took that admission back
            if job.state == JobState.RUNNING:
                self.quiet.add(q.job_id)
                try:
                    self.engine.withdraw(q.job_id, f"admitted by {q.admission.by}")
                finally:
                    self.quiet.discard(q.job_id)
            self._adopt(job, rec, q.admission)
        elif job.state == JobState.RUNNING and not rec.writing:
            self.quiet.add(q.job_id)
            try:
                self.engine.withdraw(q.job_id, "its Job was suspended")
            finally:
                self.quiet.discard(q.job_id)
        elif job.state == JobState.QUEUED and not self._leading and q.message and q.message != job.message:
            self._events.extend(transition(job, Note(q.message), self.now))
        elif job.state == JobState.NEW and not self._leading and q.message:
            # first seen with the leader's reason on it already: it arrives at this tick's run, told at the next
            with self._lock:
                self._dirty.add(q.uid)

    # ------------------------------------------------------------------ pod groups -> records
    def _sync_groups(self) -> None:
        """Pod groups (bare pods of a gang for our scheduler name, :mod:`.podgroups`): gathered until minMember
        members exist, then queued as one job; bound pods of a group nobody here queued are adopted (a restart,
        a new leader); a running group ends when its pods do."""
        with self._lock:
            members = dict(self._members)
            by_group: dict[str, list[PodView]] = {}
            for p in self._pods.values():
                if p.job_uid.startswith(GROUP_UID_PREFIX):
                    by_group.setdefault(p.job_uid, []).append(p)
            for uid in [u for u in members if u not in by_group]:
                del self._members[uid]
        with self.cluster.lock:
            for uid, member in members.items():
                pods = sorted(by_group.get(uid, []), key=lambda p: (p.created, p.key))
                try:
                    self._group_seen(uid, member, pods)
                except Exception:
                    log.exception("pod group %s could not be read", uid)

    def _group_seen(self, uid: str, member: Member, pods: list[PodView]) -> None:
        job_id = self.by_uid.get(uid)
        # ended and pruned (:meth:`forget`): its pods are read as an ended job's, only pods made since are new
        pruned = job_id if job_id is not None and job_id in self._pruned else ""
        job = self.engine.jobs.get(job_id) if job_id else None
        if not pods:  # every member is gone
            self._gathering.pop(uid, None)
            self._group_ended.pop(uid, None)
            if job is not None and not job.done:
                self._observed_end(job.id, Cancel("its pods were deleted"))
            self.by_uid.pop(uid, None)
            self._unbury(pruned)
            self._rechecked.pop(uid, None)
            return
        named = named_tenant([p.obj for p in pods if p.live])
        if job is not None and not job.done:
            rec = self.recs.get(job.id)
            if rec is not None:
                self._group_relabelled(rec, job, named)
            if job.state == JobState.RUNNING:
                self._group_running(job, uid, pods)
                return
            # queued here (a follower, or a new leader): the leader's binds, even of pods that already ended
            mine = [p for p in pods if p.node and p.reservation.partition("/")[2].startswith(f"{job.id}-")]
            if mine:
                self._adopt_group(uid, member, pods, mine, job)
                return
            waiting = [p for p in pods if p.live and not p.node]
            if len(waiting) >= job.spec.num_tasks:
                return
            self._unqueue_group(job, uid, member, len(waiting))  # members left it: gathered again, below
            job = None
        rec = self.recs.get(job.id) if job is not None else None
        if job is not None and rec is not None and rec.foreign and [
                p for p in pods if p.node and p.reservation.partition("/")[2].startswith(f"{job.id}-")]:
            # refused here for its namespace, but the leader admitted it before the binding changed (a follower
            # that saw the change first): adopted from its bound members below, as the leader runs it
            self._reopen(rec)
            job = None
        # refused (in memory, or pruned since) and its members name another tenant now: read again as a new one
        prior = rec if job is not None and rec is not None and rec.rejected else self._refused_tombs.get(pruned)
        if prior is not None and named is not None and named != prior.label:
            self._relabelled_group(prior, named)
            job, pruned = None, ""
        if job is not None or pruned:  # it ended: only pods made since make a new job of the group
            ended = self._group_ended.setdefault(uid, {p.key for p in pods})
            pods = [p for p in pods if p.key not in ended]
        # bound by a replica before (a restart, a new leader, a replica started later): that job, even when its
        # pods have ended since (it is then adopted and ends at once, as a finished Job is found finished)
        bound = [p for p in pods if p.node and p.reservation]
        if bound and job is None and not pruned:
            self._adopt_group(uid, member, pods, bound)
            return
        waiting = [p for p in pods if p.live and not p.node]
        if not waiting:
            self._gathering.pop(uid, None)
            return
        # named after its oldest waiting member: every replica names it alike, and a reused name gets a new id
        oldest = str((waiting[0].obj.get("metadata") or {}).get("uid") or "")
        new_id = group_job_id(member.namespace, member.gang, oldest)
        size, why = member.min_member, ""
        if not size and member.ref is not None:
            got = self.group_sizes.min_member(member.namespace, member.ref)
            if got is None:
                why = (f"waiting for its PodGroup {member.namespace}/{member.ref.name} (its size): not found "
                       f"({'/'.join(member.ref.api[:2])})")
            size = got or 0
        size = size or len(waiting)  # no size given: the members there now
        created = min((_epoch(p.created) for p in waiting), default=0.0)
        submit_s = self.engine_time(created) if created else self.now
        if why or len(waiting) < size:
            why = why or f"waiting for its pods: {len(waiting)} of {size} created (minMember {size})"
            shown = self._gathering.get(uid)
            if shown is None or shown.id != new_id:
                try:
                    spec = group_spec(new_id, member, [p.obj for p in waiting], len(waiting), self.registry,
                                      submit_s, created)
                    spec = replace(spec, replicas=max(size, 1), num_gpus=spec.num_gpus // len(waiting) * size)
                except ValueError:
                    spec = self._group_placeholder(new_id, member, waiting, submit_s, created)
                shown = Job(spec)
                self._gathering[uid] = shown
                shown.message = why
                self._discovered.append(shown)
            shown.message = why
            return
        self._gathering.pop(uid, None)
        self._group_ended.pop(uid, None)
        self._unbury(pruned)  # a new run of the group: a pruned one's tombstone goes with the uid
        prior, buried = self._rechecked.pop(uid, (None, False))
        accepted = self._accepted.pop(uid, "")
        rec = _Rec(new_id, False, member.namespace, member.name, uid, group=True, label=named)
        self.recs[new_id] = rec
        self.by_uid[uid] = new_id
        ns_tenant, _ = self._tenancy(member.namespace, "")
        foreign = ""
        try:
            spec = group_spec(new_id, member, [p.obj for p in waiting[:size]], size, self.registry, submit_s, created,
                              namespace_tenant=ns_tenant)
            refusal = self._tenancy(member.namespace, spec.tenant)[1]
            if refusal is not None:
                foreign = spec.tenant
                raise ValueError(f"pod group {member.namespace}/{member.name}: {refusal}")
        except ValueError as exc:
            rec.foreign, rec.rejected, rec.refusal = foreign, True, str(exc)
            job = Job(self._group_placeholder(new_id, member, waiting, submit_s, created,
                                              refused=ns_tenant or "default"))
            self.engine.jobs[new_id] = job
            self._events.extend(transition(job, Reject(f"refused: {exc}"), self.now))
            self._discovered.append(job)
            self._group_ended[uid] = {p.key for p in pods}
            # re-checked (a new label) and refused again: a new Event only when the reason changed; a pruned one
            # is a tombstone again at once (its Refused events dropped with it: said here when new)
            same = prior is not None and prior.refusal == rec.refusal
            rec.refused = same
            if buried:
                if not same:
                    self._say(new_id, self.write_pod_events, self._group_pod_keys(uid, waiting=True), "Warning",
                              "Refused", f"refused: {exc}")
                self._rebury(new_id)
            return
        job = Job(restored_submission(spec, self.now))
        self.engine.submit(job)
        self._discovered.append(job)
        if accepted:
            self._say(new_id, self.write_pod_events, self._group_pod_keys(uid, waiting=True), "Normal", "Accepted",
                      f"accepted: queued for tenant {spec.tenant}: {accepted}")

    # ------------------------------------------------------------------ bindings changed
    def _recheck_tenancy(self) -> None:
        """A Namespace binding changed: re-check the workloads not admitted (:meth:`NamespaceBindings.recheck`).
        A refused one its namespace may now use is dropped and seen again as new (queued; a Job's refusal taken
        off, :meth:`_new_record`; a pod group's members told); a queued one its namespace may no longer use is
        refused as a new one would be. Running and ended ones are left alone. Caller holds the cluster lock."""
        with self._lock:  # the workloads still there (a deleted one is not let in again)
            live = set(self._job_objs) | set(self._sets.objs) | set(self._ptjs.objs) | set(self._members)
        held = []
        for rec in self.recs.values():
            job = self.engine.jobs.get(rec.job_id)
            if job is None or rec.uid not in live or (rec.ours and rec.namespace == self.namespace):
                continue
            if rec.foreign and job.done:
                held.append(Held(rec.job_id, rec.namespace, rec.foreign, refused=True))
            elif job.state in (JobState.NEW, JobState.QUEUED):
                held.append(Held(rec.job_id, rec.namespace, job.tenant, refused=False))
        # pruned by the retention policy while refused for their namespace, their object still there: as above
        held.extend(Held(rec.job_id, rec.namespace, rec.foreign, refused=True)
                    for rec in self._refused_tombs.values() if rec.foreign and rec.uid in live)
        with self._lock:
            verdicts = self.bindings.recheck(held)
            recs = {v.key: self.recs.get(v.key) or self._refused_tombs[v.key] for v in verdicts}
            bound = {v.key: self.bindings.tenant_of(recs[v.key].namespace) for v in verdicts}
        for v in verdicts:
            rec = recs[v.key]
            log.info("%s %s/%s: %s", "accepting" if v.accept else "refusing", rec.namespace, rec.name, v.why)
            if v.accept:
                self._reopen(rec, v.why)
            else:
                self._refuse_queued(rec, v.why, bound[v.key] or "default")

    def _relabelled(self, rec: _Rec, job: Job, label: str) -> None:
        """The Job's ``gpucluster.io/queue`` label changed to ``label`` (:meth:`NamespaceBindings.relabel`): a
        refused one is read again as a new one (queued under ``label`` when its namespace may use it, the refusal
        taken off; else refused again, a new Event only when the reason changed); a queued or running one keeps
        its tenant until it ends, and a Normal ``Relabelled`` Event says so (once for each new label). Caller
        holds the cluster lock."""
        assert rec.label is not None
        if job.done and not rec.rejected:
            return  # it ran and ended: nothing to re-check
        if not job.done and label == rec.told:
            return
        held = Held(rec.job_id, rec.namespace, rec.label, refused=job.done)
        with self._lock:
            verdict = self.bindings.relabel(held, label, running=job.state == JobState.RUNNING)
        if verdict is None:
            return
        log.info("%s/%s relabelled %s -> %s: %s", rec.namespace, rec.name, rec.label, label, verdict.why)
        if verdict.recheck:
            self._reopen(rec, verdict.why if verdict.allowed else "")
            return
        rec.told = label
        self._say(rec.job_id, self.write_event, rec.namespace, rec.name, "Normal", "Relabelled", verdict.why)

    def _relabelled_tomb(self, tomb: _Rec, label: str) -> None:
        """A refused workload the retention policy pruned (:attr:`_refused_tombs`) whose ``gpucluster.io/queue``
        label changed to ``label``: read again as a new one, as :meth:`_relabelled` does for one in memory (let
        in when its namespace may use ``label``; else refused again, and a tombstone again at once). Caller holds
        the cluster lock."""
        assert tomb.label is not None
        with self._lock:
            verdict = self.bindings.relabel(Held(tomb.job_id, tomb.namespace, tomb.label, refused=True), label)
        if verdict is None:
            return
        log.info("%s/%s (pruned, refused) relabelled %s -> %s: %s", tomb.namespace, tomb.name, tomb.label, label,
                 verdict.why)
        self._reopen(tomb, verdict.why if verdict.allowed else "")

    def _group_relabelled(self, rec: _Rec, job: Job, named: str | None) -> None:
        """A queued or running pod group whose members now name the tenant ``named`` (their ``gpucluster.io/queue``
        label, else their ``gpucluster.io/tenant`` annotation: :func:`named_tenant`; None while they disagree):
        it keeps its tenant until it ends, as a Job does (:meth:`_relabelled`), and a Normal ``Relabelled`` Event
        on its live members says so, once for each new name. Caller holds the cluster lock."""
        if named is None or named in (rec.label, rec.told):
            return
        if rec.label is None:  # first seen here (adopted from its bound members): what they name now
            rec.label = named
            return
        effective = named or self._tenancy(rec.namespace, "")[0] or rec.namespace
        with self._lock:
            verdict = self.bindings.relabel(Held(rec.job_id, rec.namespace, job.tenant, refused=False), effective,
                                            running=job.state == JobState.RUNNING)
        rec.told = named
        if verdict is None:  # it names the tenant it is charged to: nothing to say
            return
        log.info("pod group %s/%s relabelled %s -> %s: %s", rec.namespace, rec.name, rec.label, named, verdict.why)
        self._say(rec.job_id, self.write_pod_events, self._group_pod_keys(rec.uid, live=True), "Normal", "Relabelled",
                  verdict.why)

    def _relabelled_group(self, prior: _Rec, named: str) -> None:
        """A refused pod group (in memory, or a tombstone of one the retention policy pruned) whose members now
        name ``named``: read again as a new one (:meth:`_reopen`), as a relabelled refused Job is; let in, its
        waiting members get a Normal ``Accepted`` Event; refused again, a ``Refused`` one only when the reason
        changed. Caller holds the cluster lock."""
        effective = named or self._tenancy(prior.namespace, "")[0] or prior.namespace
        with self._lock:
            refusal = self.bindings.refusal(prior.namespace, effective)
            allowed = "" if refusal is not None else self.bindings.allowance(prior.namespace, effective)
        said = (f"its members' label {QUEUE_LABEL} now names tenant {named}" if named else
                f"its members now name no tenant (charged to {effective})")
        log.info("pod group %s/%s (refused) relabelled %s -> %s: %s", prior.namespace, prior.name, prior.label,
                 named, refusal or allowed)
        self._reopen(prior, f"{said}: {allowed}" if allowed else "")

    def _rebury(self, job_id: str) -> None:
        """A pruned refused workload read again as new (:meth:`_reopen`) and refused again: a tombstone again at
        once, as the retention policy left it (its store record is its first refusal; a new reason is said on the
        object). Caller holds the cluster lock."""
        self._discovered = [j for j in self._discovered if j.id != job_id]
        self.forget(job_id)

    def _reopen(self, rec: _Rec, accepted: str = "") -> None:
        """Forget the ended record of a refused workload (in memory, or a tombstone of one the retention policy
        pruned): it is seen again as new (a Job at the next read of it, a pod group at the next
        :meth:`_sync_groups`). ``accepted``: why it is let in now (said on the Job or the group's waiting pods; ""
        when a follower mirrors its leader, or when a new label is re-checked)."""
        buried = rec.job_id in self._refused_tombs
        self.engine.forget(rec.job_id)
        self.recs.pop(rec.job_id, None)
        self.by_uid.pop(rec.uid, None)
        self._unbury(rec.job_id)
        self._rechecked[rec.uid] = (rec, buried)
        if rec.group:  # read again at the next :meth:`_group_seen`, which says ``accepted`` once it is queued
            self._group_ended.pop(rec.uid, None)
            if accepted:
                self._accepted[rec.uid] = accepted
            return
        with self._lock:
            if accepted:
                self._accepted[rec.uid] = accepted
            self._dirty.add(rec.uid)

    def _refuse_queued(self, rec: _Rec, why: str, shown: str) -> None:
        """Refuse a queued workload whose namespace may no longer use its tenant: ended as refused (it holds
        nothing), listed under ``shown`` (its namespace's tenant, else ``default``) as a workload refused on
        arrival is, the reason on it (a Job's Event and annotation, a pod group's members' Events)."""
        job = self.engine.jobs[rec.job_id]
        tenant = job.tenant
        self.quiet.add(rec.job_id)
        try:
            self.engine.fail(rec.job_id, f"refused: {why}")
        finally:
            self.quiet.discard(rec.job_id)
        job.spec = replace(job.spec, tenant=shown)
        if job.tally is not None:
            job.tally.moved(job)
        rec.foreign, rec.refused, rec.rejected = tenant, True, True
        self._discovered.append(job)  # the store files it under ``shown`` too
        if rec.group:
            rec.refusal = f"pod group {rec.namespace}/{rec.name}: {why}"
            self._group_ended[rec.uid] = set(self._group_pod_keys(rec.uid))
            self._say(rec.job_id, self.write_pod_events, self._group_pod_keys(rec.uid, waiting=True), "Warning",
                      "Refused", why)
        elif self._leading:
            self.submit_write("note", rec.job_id, self.write_note, rec.namespace, rec.name, "Warning", "Refused",
                              why, REFUSED_ANNOTATION)

    def _unqueue_group(self, job: Job, uid: str, member: Member, left: int) -> None:
        """A queued (never admitted) pod group that has fewer than its ``minMember`` members now (a member's pod
        group label was changed or removed, or it was deleted): it is not queued any more, it waits for its pods
        again as a group that never had them all (:meth:`_group_seen` gathers it at once). Under the same id while
        its oldest member stays (its listed job goes back to pending with the reason), else its job ends cancelled
        with why and the group is gathered under the id its members give it now. Caller holds the cluster lock."""
        why = (f"its members left the group: {left} of {job.spec.num_tasks} left (minMember {job.spec.num_tasks}); "
               "it waits for its pods again")
        log.info("pod group %s/%s: %s", member.namespace, member.name, why)
        with self._lock:
            oldest = min((p for p in self._pods.values() if p.job_uid == uid and p.live and not p.node),
                         key=lambda p: (p.created, p.key), default=None)
        first = str((oldest.obj.get("metadata") or {}).get("uid") or "") if oldest is not None else ""
        self.quiet.add(job.id)
        try:
            if oldest is not None and group_job_id(member.namespace, member.gang, first) == job.id:
                with self._collect(None):  # not an end: the same job waits for its pods again
                    self.engine.cancel(job.id, why)
                self.engine.forget(job.id)
                self.recs.pop(job.id, None)
            else:
                self.engine.cancel(job.id, why)
        finally:
            self.quiet.discard(job.id)
        self.by_uid.pop(uid, None)

    def _group_placeholder(self, job_id: str, member: Member, pods: Sequence[PodView], submit_s: float,
                           created: float, refused: str = "") -> JobSpec:
        labels = (pods[0].obj.get("metadata") or {}).get("labels") or {} if pods else {}
        tenant = str(labels.get(QUEUE_LABEL) or member.namespace)
        if refused and self._tenancy(member.namespace, tenant)[1] is not None:
            tenant = refused  # refused for its namespace: not listed as the tenant's it named
        return JobSpec(job_id, submit_s, 0, math.inf, tenant=tenant, name=member.name,
                       template=Pod(job_id, namespace=member.namespace), replicas=1, submitted_at=created)

    def _group_running(self, job: Job, uid: str, pods: list[PodView]) -> None:
        """A running pod group ends when its pods do: all succeeded, one failed (the rest are deleted: a gang
        runs whole or not at all), or all gone."""
        rec = self.recs.get(job.id)
        if rec is None:
            return
        self._fill_slots(rec, pods)
        slots = {s for s in rec.slots if s} | {rec.tasks[i].key for i in rec.unmirrored if i < len(rec.tasks)}
        ran = [p for p in pods if (self.cluster.aliases.get(p.key) or p.reservation) in slots]
        extras = [p for p in pods if p.node and p.reservation.partition("/")[2] == f"{job.id}{EXTRA_SUFFIX}"]
        failed = [p for p in [*ran, *extras] if p.phase == "Failed"]
        if failed:
            said = "; ".join(f"pod {p.key}: {p.reason or 'Failed'}" for p in failed[:3])
            rest = [p.key for p in pods if p.live]
            self._group_ended[uid] = {p.key for p in pods}
            self._observed_end(job.id, Fail(f"a pod of the group failed: {said}"))
            if rest and self._leading:
                self.submit_write("delete", job.id, self.write_delete_pods, rest)
        elif sum(1 for p in ran if p.phase == "Succeeded") >= job.spec.num_tasks and not any(p.live for p in extras):
            self._group_ended[uid] = {p.key for p in pods}
            done = len(extras) + job.spec.num_tasks
            self._observed_end(job.id, None, f"its {done} pod(s) succeeded" + (
                f" ({len(extras)} beyond minMember)" if extras else ""))
        elif not any(p.live for p in pods):
            self._group_ended[uid] = {p.key for p in pods}
            self._observed_end(job.id, Cancel("its pods were deleted"))

    def _fill_slots(self, rec: _Rec, pods: list[PodView]) -> None:
        """Slots of an adopted pod group with no place here (their member was not bound yet when this replica
        adopted the group) that another replica has bound a member into since (the new leader placed them): take
        them from that member (its reservation names the slot), so the gang is whole here too and a later leader
        never places them again."""
        if "" not in rec.slots:
            return
        for p in pods:
            if not p.node or not p.reservation:
                continue
            i = next((n for n, t in enumerate(rec.tasks) if t.key == p.reservation), -1)
            if not 0 <= i < len(rec.slots) or rec.slots[i] or i in rec.unmirrored:  # (tried by _mirror_slots)
                continue
            task = rec.tasks[i]
            if not p.live:  # it ran there and ended: nothing left to hold
                rec.slots[i] = task.key
                continue
            info = self.cluster.nodes.get(p.node)
            if info is None:
                continue
            devices = {k: str(v) for k, v in ((p.obj.get("metadata") or {}).get("annotations") or {}).items()
                       if k not in _NOT_SLOT}
            try:
                self.cluster.reserve([slot_allocation(task, Slot(p.node, devices), info.spec, self.registry)])
            except (KubeInputError, AllocationError) as exc:
                log.info("pod group %s: slot %d of pod %s not taken in: %s", rec.job_id, i, p.key, exc)
                continue
            job = self.engine.jobs.get(rec.job_id)
            if job is not None and job.state == JobState.RUNNING:
                self._hold_slot(job, rec, i)
            else:
                rec.slots[i] = task.key

    def _adopt_group(self, uid: str, member: Member, pods: list[PodView], bound: list[PodView],
                     queued: Job | None = None) -> None:
        """Bound members of a group no job here holds (a restart, a new leader, a follower mirroring the leader):
        the job they were admitted as, adopted running where they are (their ``gpucluster.io/reservation`` names
        the job, the run and the slot)."""
        runs: dict[tuple[str, int], dict[int, PodView]] = {}
        for p in bound:
            try:
                jid, run, index = p.reservation.partition("/")[2].rsplit("-", 2)
                if not jid.startswith(group_job_id(member.namespace, member.gang) + "-"):
                    continue  # bound as a member of another group (its label changed since): that group's
                runs.setdefault((jid, int(run)), {})[int(index)] = p
            except ValueError:
                continue
        if not runs:
            return
        # the run whose pods still live (a reused name's new run beside the pods of an ended one), the fullest
        (job_id, attempt), by_slot = max(runs.items(), key=lambda kv: (any(p.live for p in kv[1].values()),
                                                                       len(kv[1]), kv[0][1]))
        size = member.min_member or (self.group_sizes.min_member(member.namespace, member.ref) or 0
                                     if member.ref is not None else 0)
        size = max(size, max(by_slot) + 1)
        created = min((_epoch(p.created) for p in pods), default=0.0)
        try:
            spec = group_spec(job_id, member, [by_slot[i].obj for i in sorted(by_slot)], size, self.registry,
                              self.engine_time(created) if created else self.now, created)
        except ValueError as exc:
            log.warning("pod group %s: its bound pods cannot be adopted: %s", uid, exc)
            return
        rec = self.recs.get(job_id) if queued is not None else None
        if rec is None:
            rec = _Rec(job_id, False, member.namespace, member.name, uid, group=True)
            self.recs[job_id] = rec
        self.by_uid[uid] = job_id
        self._gathering.pop(uid, None)
        at = min((p.bind_time for p in by_slot.values() if p.bind_time is not None), default=time.time())
        slots = tuple(Slot(by_slot[i].node, {k: str(v) for k, v in ((by_slot[i].obj.get("metadata") or {}).get(
            "annotations") or {}).items() if k not in _NOT_SLOT}) if i in by_slot else Slot("")
                      for i in range(size))
        if queued is not None and queued.id == job_id:
            job = queued  # a follower mirroring the leader, or a leader finding its predecessor's binds
        else:
            job = Job(restored_submission(spec, self.now))
            self.engine.submit(job)
            self._discovered.append(job)
        # members of this run still waiting for their slot (created before it was bound: a leader died between
        # the binds) keep it running even when every bound member has ended already; pods made after a finished
        # run are a new run of the group (a reused name), not this one's
        unbound = [p for p in pods if p.live and not p.node and _epoch(p.created) <= at]
        failed = [p for p in by_slot.values() if p.phase == "Failed"]
        if not any(p.live for p in by_slot.values()) and (failed or len(by_slot) >= size or not unbound):
            # the run ended already: its devices are not held any more
            self._group_ended[uid] = {p.key for p in pods if not p.live}
            if failed:
                said = "; ".join(f"pod {p.key}: {p.reason or 'Failed'}" for p in failed[:3])
                self._observed_end(job.id, Fail(f"a pod of the group failed: {said}"))
            elif sum(1 for p in by_slot.values() if p.phase == "Succeeded") >= size:
                self._observed_end(job.id, None, f"its {size} pod(s) succeeded")
            else:
                self._observed_end(job.id, Cancel("its pods were deleted"))
            return
        self._adopt(job, rec, Admission(f"recovered-{job_id}-{attempt}", "", attempt, at, slots))

    # ------------------------------------------------------------------ DRA: Jobs whose pods use ResourceClaims
    def _claim_template(self, namespace: str, name: str, where: str) -> tuple[ClaimRequest, ...]:
        key = f"{namespace}/{name}"
        got = self._claim_templates.get(key)
        if got is None:
            try:
                obj = raw_get(self.resource.read_namespaced_resource_claim_template, name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    raise ClaimNotReadyError(f"{where}: ResourceClaimTemplate {key} does not exist (yet)") from None
                raise ClaimNotReadyError(f"{where}: ResourceClaimTemplate {key}: {_api_error(exc)}") from None
            got = parse_claim_template(obj)
            self._claim_templates[key] = got
        return got

    def _with_claims(self, q: QueueJob, obj: Mapping[str, Any]) -> JobSpec | None:
        """The Job's spec with one ``dra-entry:`` pseudo container per ``spec.resourceClaims`` entry of its pod
        template (the devices each pod's claim asks for: a ResourceClaimTemplate's requests, or the named
        claim's), so admission places them, quota and fair share count them, and each pod's claim is allocated
        with the reserved devices when the pod binds. Raises :class:`ClaimNotReadyError` while a template, claim
        or DeviceClass is missing, ``KubeInputError`` / ``DraInputError`` for what can never be run here."""
        spec = q.spec
        tspec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
        entries = tspec.get("resourceClaims") or []
        if spec is None or spec.template is None or not entries:
            return spec
        extra = []
        base = spec.template.containers
        if spec.claims:  # a job of our API: its claims' HAMi stand-ins give way to the claims themselves
            base = tuple(c for c in base if not c.name.startswith(CLAIM_CONTAINER_PREFIX))
        for i, entry in enumerate(entries):
            where = f"Job {q.key}: spec.template.spec.resourceClaims[{i}]"
            entry = entry if isinstance(entry, Mapping) else {}
            name = str(entry.get("name") or "")
            if entry.get("resourceClaimTemplateName"):
                reqs = self._claim_template(q.namespace, str(entry["resourceClaimTemplateName"]), where)
            elif entry.get("resourceClaimName"):
                key = f"{q.namespace}/{entry['resourceClaimName']}"
                if spec.num_tasks > 1:
                    raise KubeInputError(f"{where}: resourceClaimName {entry['resourceClaimName']}: one claim shared "
                                         f"by the Job's {spec.num_tasks} pods is not allocated by the queue (use "
                                         "resourceClaimTemplateName: a claim per pod)")
                with self.cluster.lock:
                    info = self.cluster.claims.get(key)
                if info is None:
                    raise ClaimNotReadyError(f"{where}: ResourceClaim {key} does not exist (yet)")
                if info.unreadable:
                    raise ClaimNotReadyError(f"{where}: ResourceClaim {key} cannot be read ({info.unreadable})")
                reqs = info.requests
            else:
                raise KubeInputError(f"{where}: resourceClaimName or resourceClaimTemplateName: required")
            extra.append(self.cluster.entry_container(name, reqs, where))
        pod = replace(spec.template, containers=(*base, *extra))
        return replace(spec, template=pod, num_gpus=pod.device_count * spec.num_tasks)

    def _claims_wait(self, q: QueueJob, why: str) -> None:
        """A new Job whose claims cannot be asked for yet: looked at again in a second; said once per reason (a
        log line, and on the Job an Event and ``gpucluster.io/message``)."""
        said = self._claim_waits.get(q.uid, ("", 0.0))[0]
        self._claim_waits[q.uid] = (why, time.monotonic() + 1.0)
        if why == said:
            return
        log.info("Job %s waits for its claims: %s", q.key, why)
        if self._leading:
            self.submit_write("note", q.job_id, self.write_note, q.namespace, q.name, "Normal", "Waiting",
                              f"waiting for its ResourceClaims: {why}", MESSAGE_ANNOTATION)

    def _failure(self, q: QueueJob) -> str:
        """Why the Job failed: its condition, and what its failed pods said."""
        with self._lock:
            pods = [p for p in self._pods.values() if p.job_uid == q.uid and p.phase == "Failed"]
        pods.sort(key=lambda p: p.key)
        said = "; ".join(f"pod {p.key}: {p.reason}" for p in pods[:3] if p.reason)
        return f"the Job failed: {q.finish_message or 'Failed'}" + (f"; {said}" if said else "")

    def _new_record(self, q: QueueJob, rec: _Rec) -> Job | None:
        """A Job this replica did not know: mirror it into the engine (queued, admitted or ended). A Job that
        carries a refusal (``gpucluster.io/refused``) is refused again if it still is (the annotation rewritten
        when the reason changed), else queued and the refusal taken off (a binding change let it in, or the
        control plane restarted since)."""
        submit_s = self.engine_time(q.created) if q.created else self.now
        accepted = self._accepted.pop(q.uid, "")
        if q.spec is None:
            job = Job(_placeholder(q, submit_s))
            self.engine.jobs[q.job_id] = job
            events = transition(job, Reject(f"refused: {q.error}"), self.now)
            self._events.extend(events)
            self._discovered.append(job)
            if self._leading and q.refused != q.error:
                rec.refused = True
                self.submit_write("note", q.job_id, self.write_note, q.namespace, q.name, "Warning", "Refused",
                                  q.error, REFUSED_ANNOTATION)
            return None
        if q.refused and self._leading and not q.finished:
            why = accepted or f"its refusal no longer holds (it was: {q.refused})"
            self.submit_write("note", q.job_id, self.write_accepted, q.namespace, q.name,
                              f"accepted: queued for tenant {q.tenant}: {why}")
        spec = restored_submission(replace(q.spec, submit_s=submit_s), self.now)
        job = Job(spec)
        if q.finished:
            self.engine.submit(job)
            self._discovered.append(job)
            self._observed_end(q.job_id, None if q.finished == "Complete" else Fail(self._failure(q)),
                               "the Job completed")
            return job
        self.engine.submit(job)
        if not q.ours or q.job_id not in self._creating:
            self._discovered.append(job)
        if q.admission is not None and not q.suspended:
            self._adopt(job, rec, q.admission)
        return job

    def _adopt(self, job: Job, rec: _Rec, adm: Admission) -> None:
        """Take the job as running where ``adm`` placed it (reserving its slots). It runs (its object says so):
        it is running here at once even when a slot cannot be held here yet (its node unknown, its devices held
        by another pod): such a slot is left out (:attr:`_Rec.unmirrored`), its bound pod accounted as any bound
        pod, the slot charged to the job's tenant (:meth:`_unmirrored_outside`), and it is tried again at each pass
        (:meth:`_mirror_slots`). Never queued: a running job queued here would be admitted a second time."""
        tasks = task_pods(job.spec, adm.attempt, self.namespace)
        slots: list[str] = []
        unmirrored: dict[int, str] = {}
        for i, (task, slot) in enumerate(zip(tasks, adm.slots, strict=False)):
            why = self._mirror(task, slot) if slot.node else ""
            slots.append(task.key if slot.node and not why else "")
            if why:
                unmirrored[i] = why
        if unmirrored and rec.note != f"mirror:{adm.id}":
            log.warning("job %s: %d slot(s) of the admission by %s cannot be held here yet (it runs; tried again at "
                        "each pass): %s", job.id, len(unmirrored), adm.by or "a previous leader",
                        "; ".join(f"slot {i}: {w}" for i, w in sorted(unmirrored.items())))
            rec.note = f"mirror:{adm.id}"
        rec.admission, rec.writing, rec.slots, rec.tasks, rec.unmirrored = adm, False, slots, tasks, unmirrored
        self.engine.adopt(job, [t for t in tasks if t.key in slots], self.engine_time(adm.at), attempt=adm.attempt)

    def _mirror(self, task: Pod, slot: Slot) -> str:
        """Reserve one slot of an admission (rebuilt from its annotations); "" when held, else why not."""
        info = self.cluster.nodes.get(slot.node)
        if info is None:
            return f"node {slot.node} is unknown"
        try:
            self.cluster.reserve([slot_allocation(task, slot, info.spec, self.registry)])
        except (KubeInputError, AllocationError) as exc:
            return str(exc)
        return ""

    def _mirror_slots(self) -> None:
        """Slots of running jobs that could not be held when the job was adopted (:meth:`_adopt`): tried again;
        one held now joins the job's pods (freed with them, charged to its tenant's quota from now on)."""
        for job in self.engine.views.running():
            rec = self.recs.get(job.id)
            if rec is None or not rec.unmirrored or rec.admission is None:
                continue
            for i in sorted(rec.unmirrored):
                if i >= len(rec.tasks) or i >= len(rec.admission.slots):
                    rec.unmirrored.pop(i)
                    continue
                task = rec.tasks[i]
                why = self._mirror(task, rec.admission.slots[i])
                if why:
                    rec.unmirrored[i] = why
                    continue
                rec.unmirrored.pop(i)
                self._hold_slot(job, rec, i)
                log.info("job %s: slot %d of its admission is held here now", job.id, i)

    def _hold_slot(self, job: Job, rec: _Rec, i: int) -> None:
        """Slot ``i`` of the running job, reserved only now (count-only admission placed it late, a follower or new
        leader held it late, or a new leader placed a slot its predecessor never bound): it joins the job's pods,
        so the job's status (placements, GPUs held, its tenant's use) counts it, its quota charge (made by the
        placement's Reserve, else here) is the tenant's, and the job's end or deletion frees it with the rest.
        Caller holds the cluster lock."""
        task = rec.tasks[i]
        rec.slots[i] = task.key
        if task.key not in job.pod_keys:  # (a count-only admission's unplaced slots are its pods already)
            job.pod_keys = (*job.pod_keys, task.key)
        job.held_gpus += allocation_gpus(self.cluster.state, self.cluster.reserved[task.key])
        if job.tally is not None:
            job.tally.moved(job)
        self.quota.charge(task.key, task.charged_tenant, pod_charge(task, self.cluster.state.snapshot()))

    def _unmirrored_outside(self) -> dict[str, tuple[str, dict[str, float]]]:
        """The slots of running jobs not held here (:meth:`_adopt`): each charged to its job's tenant as its task
        asks (the job runs there: its admission holds it), until the slot is held. Caller holds the cluster lock."""
        out: dict[str, tuple[str, dict[str, float]]] = {}
        snap = None
        for rec in self.recs.values():
            job = self.engine.jobs.get(rec.job_id) if rec.unmirrored else None
            if job is None or job.state != JobState.RUNNING:
                continue
            snap = snap or self.cluster.state.snapshot()
            for i in rec.unmirrored:
                if i < len(rec.tasks):
                    out[UNMIRRORED_KEY_PREFIX + rec.tasks[i].key] = (job.tenant, pod_charge(rec.tasks[i], snap))
        return out

    # ------------------------------------------------------------------ pods of admitted jobs
    def _place_waiting_slots(self) -> None:
        """Slots of a running job with no place: count-only admission's, and those of a pod group adopted from
        its bound members when a leader died before binding the rest (the dead leader's decision for them was
        never written anywhere): try them again, one at a time (as kube-scheduler does)."""
        for job in self.engine.views.running():
            rec = self.recs.get(job.id)
            if rec is None or "" not in rec.slots or (self.admission != "count" and not rec.group):
                continue
            for i, key in enumerate(rec.slots):
                if key or i >= len(rec.tasks) or i in rec.unmirrored:  # placed already, not held here (yet)
                    continue
                d = self.cluster.decide(solo(rec.tasks[i]))
                if d.ok and d.allocation is not None:
                    self.cluster.reserve([d.allocation])
                    self._hold_slot(job, rec, i)
                else:
                    rec.unplaced_why = d.message()

    def _bind(self, pods: Mapping[str, PodView], by_uid: Mapping[str, list[PodView]]) -> None:
        """Bind each unbound pod of an admitted Job into a free slot (its completion index's when free)."""
        for key in [k for k in self._binding if k not in pods or pods[k].node]:
            self._binding.discard(key)
        by_job: dict[str, list[PodView]] = {}
        for p in pods.values():
            if p.live and not p.node and p.scheduler_name == self.scheduler_name and p.key not in self._binding:
                by_job.setdefault(p.job_uid, []).append(p)
        for uid, waiting in by_job.items():
            job_id = self.by_uid.get(uid)
            rec = self.recs.get(job_id or "")
            job = self.engine.jobs.get(job_id or "")
            if rec is None or job is None or job.state != JobState.RUNNING or not rec.slots:
                continue
            taken = {self.cluster.aliases.get(p.key) for p in by_uid.get(uid, []) if p.live}
            taken |= {r for k, r in self.cluster.aliases.items() if k in self._binding}
            if rec.group:  # a member that ended keeps its slot: the gang's other members go to theirs
                taken |= {p.reservation for p in by_uid.get(uid, []) if p.node}
            free = [s for s in rec.slots if s and s not in taken and s in self.cluster.reserved]
            ordered = sorted(waiting, key=lambda p: (p.index is None, p.index or 0, p.created, p.key))
            for p in ordered:
                if not free:
                    break
                want = rec.slots[p.index] if p.index is not None and p.index < len(rec.slots) else ""
                slot = want if want in free else free[0]
                try:  # a pod with ResourceClaims binds once its claims exist: they get the slot's devices
                    alloc, plan = self.cluster.slot_claim_plan(p.obj, self.cluster.reserved[slot], slot)
                except KubeInputError as exc:
                    if rec.unplaced_why != str(exc):
                        rec.unplaced_why = str(exc)
                        log.info("pod %s waits: %s", p.key, exc)
                    continue
                free.remove(slot)
                self.cluster.alias(p.key, slot)
                self._binding.add(p.key)
                self.submit_write("bind", p.key, self.write_bind, p.obj, alloc, slot, plan)
            if rec.group and not free and "" not in rec.slots:  # the gang is bound (or being bound): the rest
                self._bind_extras(job, [p for p in ordered if p.key not in self._binding])

    def _bind_extras(self, job: Job, waiting: Sequence[PodView]) -> None:
        """Members of a running pod group beyond its ``minMember`` slots (coscheduling binds them once the group's
        minimum runs): each placed by its own request on free devices, when its tenant's quota has room, and bound
        under the reservation ``NAMESPACE/<job id>-extra`` (no slot of the gang: it is accounted as a bound pod);
        its GPUs are charged to the tenant while it holds them (:meth:`_extras_outside`). One that does not fit
        waits and is tried again at the next pass."""
        charged: dict[str, float] = {}
        for p in waiting:
            try:
                pod = parse_pod(p.obj, self.registry)
            except KubeInputError as exc:
                log.info("pod %s beyond minMember waits: %s", p.key, exc)
                continue
            pod = replace(pod, annotations={**pod.annotations, QUOTA_ADMITTED_ANNOTATION: "true"})
            charge = pod_charge(pod)
            ahead = {r: v + charged.get(r, 0.0) for r, v in charge.items()}
            if self.quota.blocked_by(job.tenant, ahead) is not None:
                continue
            d = self.cluster.decide(pod)
            self.quota.refund(pod.key)  # charged below as the tenant's use outside the gang, once bound
            if not d.ok or d.allocation is None:
                continue
            for r, v in charge.items():
                charged[r] = charged.get(r, 0.0) + v
            self._binding.add(p.key)
            self.submit_write("bind", p.key, self.write_bind, p.obj, d.allocation,
                              f"{p.key.partition('/')[0]}/{job.id}{EXTRA_SUFFIX}")

    def _extras_outside(self, pods: Mapping[str, PodView]) -> dict[str, tuple[str, dict[str, float]]]:
        """Bound members beyond ``minMember`` of the running pod groups: each charged to the group's tenant while
        it holds devices. Caller holds the cluster lock."""
        state = self.cluster.state
        out: dict[str, tuple[str, dict[str, float]]] = {}
        for p in pods.values():
            if not p.live or not p.node or not p.reservation.endswith(EXTRA_SUFFIX):
                continue
            job = self.engine.jobs.get(p.reservation.partition("/")[2][:-len(EXTRA_SUFFIX)])
            alloc = state.allocations.get(p.key)
            if job is None or alloc is None:
                continue
            out[EXTRA_KEY_PREFIX + p.key] = (job.tenant, {
                "gpu": allocation_gpus(state, alloc), "gpumem": float(sum(g.memory_mib for g in alloc.grants)),
                "gpucores": sum(g.core_milli for g in alloc.grants) / 10})
        return out

    def _observe(self, job: Job, rec: _Rec, pods: list[PodView]) -> None:
        """A running job's message and placements from its pods: phases, restarts, the last exit code."""
        mine = sorted(pods, key=lambda p: (p.index or 0, p.key))
        phases: dict[str, int] = {}
        for p in mine:
            phase = "Terminating" if p.deleting else ("Running" if p.phase == "Running" else
                                                      p.phase if p.phase in ("Succeeded", "Failed") else
                                                      "Bound" if p.node else "Waiting")
            phases[phase] = phases.get(phase, 0) + 1
        restarts = sum(p.restarts for p in mine) + sum(1 for p in mine if p.phase == "Failed")
        job.extra["restarts"] = float(restarts)
        rec.phases, rec.restarts = phases, restarts
        slot_pod: dict[str, PodView] = {}
        for p in mine:  # each slot's pod: the live one, else the last that ran there
            slot = self.cluster.aliases.get(p.key) or p.reservation
            held = slot_pod.get(slot)
            if slot and (held is None or (p.live, p.created) > (held.live, held.created)):
                slot_pod[slot] = p
        placements = []
        for i, slot in enumerate(rec.slots):
            alloc = self.cluster.reserved.get(slot) if slot else None
            pod = slot_pod.get(slot) if slot else None
            entry: dict[str, Any] = (views.placement(self.cluster.state, slot, alloc.node) if alloc is not None
                                     else {"pod": "", "node": "", "devices": []})
            entry.update(slot=i, pod=pod.key if pod is not None else entry["pod"],
                         phase=(pod.phase or "Pending") if pod is not None else "Waiting")
            placements.append(entry)
        job.placements = placements
        parts = [f"{n} {phase.lower()}" for phase, n in sorted(phases.items())]
        unplaced = sum(1 for i, s in enumerate(rec.slots) if not s and i not in rec.unmirrored)
        message = f"running on {', '.join(sorted({e['node'] for e in placements if e['node']})) or '-'}: " + (
            ", ".join(parts) or "waiting for the Job controller to make the pods")
        if rec.unmirrored:
            i, why = min(rec.unmirrored.items())
            message += (f"; {len(rec.unmirrored)} of {len(rec.slots)} slot(s) of its admission not held here yet "
                        f"(slot {i}: {why})")
        if unplaced:
            message = (f"admitted by GPU count; {unplaced} of {len(rec.slots)} pod(s) have no place on any node"
                       f"{': ' + rec.unplaced_why if rec.unplaced_why else ''} (the job hangs); " + ", ".join(parts))
        if restarts:
            message += f"; {restarts} restart(s)"
        last = next((p for p in reversed(mine) if p.exit_code is not None and p.reason), None)
        if last is not None:
            message += f"; last exit: {last.reason}"
        job.message = message

    def _write_notes(self) -> None:
        """On each waiting Job, why it waits (an annotation and an Event), when the kind of reason changes."""
        now = time.monotonic()
        for job in self.engine.views.queued():
            rec = self.recs.get(job.id)
            if rec is None or not rec.uid or not job.message:
                continue
            kind = job.message.split(":", 1)[0]
            if kind == rec.note.split(":", 1)[0] or now - rec.note_at < NOTE_EVERY_S:
                continue
            rec.note, rec.note_at = job.message, now
            if rec.group:
                self.submit_write("note", job.id, self.write_pod_events, self._group_pod_keys(rec.uid, waiting=True),
                                  "Normal", "Waiting", job.message)
                continue
            self.submit_write("note", job.id, self.write_note, rec.namespace, rec.name, "Normal", "Waiting",
                              job.message, MESSAGE_ANNOTATION)
        for ev in [e for e in self._events if e.kind == "rejected"]:
            rec = self.recs.get(ev.job_id)
            if rec is not None and rec.uid and not rec.refused:
                rec.refused = True
                if rec.group:
                    self._say(ev.job_id, self.write_pod_events, self._group_pod_keys(rec.uid, waiting=True),
                              "Warning", "Refused", ev.message)
                    continue
                self.submit_write("note", ev.job_id, self.write_note, rec.namespace, rec.name, "Warning",
                                  "Refused", ev.message, REFUSED_ANNOTATION)

    def _owe_refusals(self) -> None:
        """A follower's pod groups refused at this tick (on arrival): the ``Refused`` Events on their members are
        owed (:meth:`_say`), written if this replica comes to lead. A Job's refusal is found from its annotation
        instead (:meth:`_write_owed`)."""
        for ev in [e for e in self._events if e.kind == "rejected"]:
            rec = self.recs.get(ev.job_id)
            if rec is not None and rec.group and rec.uid and not rec.refused:
                rec.refused = True
                self._say(ev.job_id, self.write_pod_events, self._group_pod_keys(rec.uid, waiting=True), "Warning",
                          "Refused", ev.message)

    # ------------------------------------------------------------------ logs
    def log_pod(self, job_id: str, replica: int) -> tuple[str, str, str]:
        """(namespace, pod, container) whose log is replica ``replica``'s: the live pod of that completion index
        (else slot), else its newest. ``LookupError`` when there is none."""
        rec = self.recs.get(job_id)
        if rec is None or not rec.uid:
            raise LookupError(f"job {job_id} has no pods (it has no Job in the cluster yet)")
        with self._lock:
            mine = [p for p in self._pods.values() if p.job_uid == rec.uid]
        by_index = [p for p in mine if p.index == replica]
        if not by_index:
            slot = rec.slots[replica] if replica < len(rec.slots) else None
            by_index = [p for p in mine if slot and self.cluster.aliases.get(p.key) == slot]
        if not by_index:
            raise LookupError(f"job {job_id} has no pod for replica {replica} (yet)")
        best = max(by_index, key=lambda p: (p.live, p.created, p.key))
        containers = (best.obj.get("spec") or {}).get("containers") or [{}]
        namespace, _, name = best.key.partition("/")
        return namespace, name, str(containers[0].get("name") or "main")

    def logs(self, job_id: str, replica: int = 0, follow: bool = False, tail: int | None = None) -> Iterator[bytes]:
        """The log of one replica's container, read through the API server (streamed with ``follow``)."""
        namespace, name, container = self.log_pod(job_id, replica)
        kwargs: dict[str, Any] = {"container": container, "follow": follow, "_preload_content": False}
        if tail is not None:
            kwargs["tail_lines"] = tail
        try:
            resp = self.core.read_namespaced_pod_log(name, namespace, **kwargs)
        except ApiException as exc:
            raise LookupError(f"pod {namespace}/{name}: {_api_error(exc)}") from None

        def stream() -> Iterator[bytes]:
            try:
                yield from resp.stream(4096, decode_content=True)
            finally:
                resp.release_conn()

        return stream()

    # ------------------------------------------------------------------ views (the rest: EngineFront)
    @property
    def cluster_label(self) -> str:
        return self.cluster_name

    @contextlib.contextmanager
    def reading(self) -> Iterator[ClusterState]:
        with self.cluster.lock:
            yield self.cluster.state

    def _job_of(self, alloc: Allocation) -> str:
        """The pod's job label, else the job of the Job object that made the pod."""
        job_id = super()._job_of(alloc)
        if not job_id:
            with self._lock:
                view = self._pods.get(alloc.pod_key)
            job_id = self.by_uid.get(view.job_uid, "") if view is not None else ""
        return job_id

    def _placement_report(self) -> dict[str, Any]:
        return {"placement_in_use": self.recipe.placement_in_use}

    def _overview_extra(self) -> dict[str, Any]:
        summary = self.cluster.summary()
        return {
            "kubernetes": {
                "api_server": self.api.configuration.host,
                "version": self.server_version,
                "namespace": self.namespace,
                "scheduler_name": self.scheduler_name,
                "synced": self.informer.synced,
                "bound_by_us": self.bound_count,
                "unaccounted_pods": summary["unaccounted"],
                "stale_nodes": summary["stale_nodes"],
                "bad_nodes": summary["bad_nodes"],
                "bad_dra_objects": summary["bad_dra_objects"],
                "admission": self.admission,
                "identity": self.identity,
                "leader": self.leading,
                "leader_elect": self.elector is not None,
                "bound_namespaces": self._bound_count(),
                "tenancy": None if self.tenancy is None else self.tenancy.status(),
            },
        }

    def alerts(self) -> list[dict[str, Any]]:
        """No alert rules run against a real cluster here (Prometheus does that: ``docs/monitoring.md``)."""
        return []

    def remediations(self) -> list[dict[str, Any]]:
        return []


__all__ = ["JOB_LABEL", "MANAGED_BY", "MANAGED_BY_LABEL", "QUEUE_LABEL", "TENANT_LABEL", "KubeConfigError",
           "KubePlacer", "KubeRuntime"]
