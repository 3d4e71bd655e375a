"""``KubeRuntime``: the control plane's Runtime (``gpucluster up --kubeconfig FILE``) over a real API server.

* **Cluster view.** The :class:`Informer` lists and watches Nodes and Pods into a :class:`KubeCluster`: devices
  from HAMi's register annotations, usage from every bound pod's HAMi decision annotations (ours or anyone's).
  ``nodes``/``node``/``overview``/``topology`` read that state (``views``).
* **Jobs become Pods.** A job of ``replicas`` pods is admitted in priority, then arrival order (a tenant over its
  GPU quota waits), then its pods are created in ``namespace``: ``<job id>-<replica>``, the job's resources as
  container limits, ``schedulerName: <scheduler_name>``, labels ``gpucluster.io/job``, ``gpucluster.io/tenant``,
  ``app.kubernetes.io/managed-by: gpucluster``, annotations ``gpucluster.io/tenant`` (quota accounting) and, for
  more than one replica, ``gpucluster.io/gang`` / ``gang-min-member`` so they bind all or none.
* **Placement.** This process runs a :class:`SecondaryScheduler` for ``scheduler_name`` (no leader election:
  do not also deploy ``gpucluster k8s scheduler`` under the same name); it binds with the :class:`KubeBinder`.
* **Status from pods.** All replicas bound -> running (bound counts as running: without a kubelet, pods on
  registered nodes stay Pending-but-bound). ``duration_s`` after that the control plane ends the job: it deletes
  the pods and reports succeeded (on a cluster with kubelets the placeholder container sleeps just as long, so
  both agree; a pod that ends first decides). Any pod Failed -> failed (the rest deleted); every pod Succeeded
  -> succeeded; a pod of a started job deleted by someone else -> failed. Cancel deletes the pods.
* **Restart.** Pods outlive the control plane. A job restored from the store is admitted again; its pods that
  still exist are adopted (409 on create), and its run time counts from their ``hami.io/bind-time``.

Threads: the informer's, the scheduler's, and one worker for API writes (creates and deletes, in order), so
the service's event loop never waits on the API server. Job objects are touched only by the service's calls
(the Runtime contract); what the informer reports is kept under ``_lock`` and read by :meth:`advance`.

``kubernetes`` sits below ``service`` in the layers, so the service hands its job vocabulary in:
``status_type`` (its ``JobStatus``: ``status_type("running")``) and ``event_type`` (its ``JobEvent``:
``event_type(job_id, t, kind, status, message)``).
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kubernetes import client, config

from gpucluster.devices import (
    GANG_ANNOTATION,
    GANG_MIN_ANNOTATION,
    TENANT_ANNOTATION,
    DeviceInputError,
    DeviceSettings,
    VendorRegistry,
)
from gpucluster.kubernetes.client import ApiException, KubeConfigError, api_client
from gpucluster.kubernetes.convert import BIND_TIME_ANNOTATION, pod_key, pod_node, pod_phase
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.kubernetes.secondary import SecondaryScheduler
from gpucluster.model import Allocation, Pod, views
from gpucluster.model.share import largest_devices, pod_gpus_at_least

log = logging.getLogger(__name__)

JOB_LABEL = "gpucluster.io/job"
TENANT_LABEL = "gpucluster.io/tenant"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "gpucluster"
JOB_NAME_ANNOTATION = "gpucluster.io/job-name"
DEFAULT_IMAGE = "busybox:1.36"
USER_PRIORITY = 10
"""As the embedded backend: user jobs keep at least this priority."""
HISTORY_POINTS = 240
HISTORY_EVERY_S = 5.0
DELETE_RETRY_S = 5.0


class JobLike(Protocol):
    """The fields of the service's ``Job`` this runtime reads and writes."""

    id: str
    name: str
    tenant: str
    replicas: int
    resources: Mapping[str, Any]
    duration_s: float | None
    status: Any
    message: str
    priority: int
    synthetic: bool
    submitted_t: float
    started_t: float | None
    finished_t: float | None
    placements: list[dict[str, Any]]
    attempts: int
    gpus: float


@dataclass(slots=True)
class _PodSeen:
    """What the informer last reported about one of our pods."""

    job_id: str
    node: str
    phase: str
    bind_time: float | None
    """``hami.io/bind-time`` (epoch seconds) once bound."""
    unschedulable: str
    """``PodScheduled=False`` message (our scheduler's counted reasons)."""
    failure: str


@dataclass(slots=True)
class _Tracked:
    """Bookkeeping of one live (non-terminal) job; service thread only."""

    job: JobLike
    pods: list[str]
    """Pod keys ``namespace/name``, one per replica."""
    arrival: int
    admitted: bool = False
    create: cf.Future[None] | None = None
    seen: set[str] = field(default_factory=set)
    """Pod keys the informer has reported at least once."""
    restored: bool = False
    last_message: str = ""


def _pod_name(job_id: str, replica: int) -> str:
    return f"{job_id}-{replica}"


def _observe(obj: Mapping[str, Any], job_id: str) -> _PodSeen:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    raw_bind = (meta.get("annotations") or {}).get(BIND_TIME_ANNOTATION)
    try:
        bind_time = float(raw_bind) if raw_bind is not None else None
    except ValueError:
        bind_time = None
    unschedulable = ""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            unschedulable = str(cond.get("message") or cond.get("reason") or "")
    failure = ""
    if pod_phase(obj) == "Failed":
        failure = str(status.get("message") or status.get("reason") or "")
        for cs in status.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term and not failure:
                failure = f"container {cs.get('name')}: {term.get('reason', '')} (exit {term.get('exitCode')})"
    return _PodSeen(job_id, pod_node(obj), pod_phase(obj), bind_time, unschedulable, failure)


def _api_error(exc: ApiException) -> str:
    """``422 Unprocessable Entity: Pod "x" is invalid: ...`` (the Status message when the body has one)."""
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


class KubeRuntime:
    """A ``service.runtime.Runtime`` whose cluster is a real Kubernetes API server (see the module docstring)."""

    def __init__(
        self,
        kubeconfig: Path,
        policy: str = "default",
        *,
        status_type: Callable[[str], Any],
        event_type: Callable[[str, float, str, Any, str], Any],
        namespace: str = "default",
        scheduler_name: str = "gpucluster",
        image: str = DEFAULT_IMAGE,
        handshake_timeout: float = 60.0,
        sync_timeout: float = 30.0,
        devices: DeviceSettings | None = None,
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.policy = policy
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.image = image
        self._status = status_type
        self._event = event_type
        self.registry = VendorRegistry.from_settings(devices)
        self.api = api_client(self.kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.cluster_name = _cluster_name(self.kubeconfig)
        self.server_version = self._probe()
        opts = RunOptions(policy=policy, scheduler_name=scheduler_name, handshake_timeout=handshake_timeout,
                          sync_timeout=sync_timeout)
        self.cluster, self.binder, self.informer = build(self.api, self.registry, opts,
                                                         identity=f"control-plane@{self.cluster_name}")
        self.scheduler = SecondaryScheduler(self.cluster, self.binder, scheduler_name)
        self._lock = threading.Lock()
        self._seen: dict[str, _PodSeen] = {}
        """Our pods (label ``gpucluster.io/job``) as the informer last reported them."""
        self.informer.pod_listeners.extend([self.scheduler.on_pod, self._on_pod])
        self.informer.pod_resync_listeners.append(self._on_resync)
        self.informer.node_listeners.append(self.scheduler.on_nodes)
        self.informer.start()
        if not self.informer.wait_synced(sync_timeout):
            self.informer.stop()
            raise ConnectionError(f"{self.kubeconfig}: the API server at {self.api.configuration.host} did not "
                                  f"answer a list of nodes and pods within {sync_timeout:g} s")
        self.scheduler.start()
        self._writer = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kube-writes")
        self._now = time.time()
        self._jobs: dict[str, JobLike] = {}
        self._live: dict[str, _Tracked] = {}
        self._arrival = 0
        self._quotas: dict[str, float] = {}
        self._deletes: dict[str, tuple[list[str], cf.Future[list[str]]]] = {}
        """Job id -> (pod keys, the pending delete); failed deletes are retried."""
        self._delete_retry: dict[str, tuple[float, list[str]]] = {}
        self._history: deque[dict[str, float]] = deque(maxlen=HISTORY_POINTS)
        self._last_sample = -math.inf
        self._sample()

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
        meta = obj.get("metadata") or {}
        labels = meta.get("labels") or {}
        job_id = labels.get(JOB_LABEL)
        if not job_id or labels.get(MANAGED_BY_LABEL) != MANAGED_BY:
            return
        key = pod_key(obj)
        with self._lock:
            if kind == "DELETED":
                self._seen.pop(key, None)
            else:
                self._seen[key] = _observe(obj, str(job_id))

    def _on_resync(self, keys: set[str]) -> None:
        with self._lock:
            for key in [k for k in self._seen if k not in keys]:
                del self._seen[key]

    def close(self) -> None:
        """Stop the scheduler, the informer and the writer (pods stay: they are the cluster's state)."""
        self.scheduler.stop()
        self.informer.stop()
        self._writer.shutdown(wait=True, cancel_futures=False)

    # ------------------------------------------------------------------ protocol: properties
    @property
    def now(self) -> float:
        return self._now

    @property
    def backend(self) -> str:
        return "kubernetes"

    # ------------------------------------------------------------------ pods of a job
    def pod_manifest(self, job: JobLike, replica: int) -> dict[str, Any]:
        """The Pod for one replica of ``job``."""
        annotations = {TENANT_ANNOTATION: job.tenant, JOB_NAME_ANNOTATION: job.name}
        if job.replicas > 1:
            annotations[GANG_ANNOTATION] = job.id
            annotations[GANG_MIN_ANNOTATION] = str(job.replicas)
        if job.duration_s is None:
            command = ["sh", "-c", "while true; do sleep 3600; done"]
        else:
            command = ["sleep", str(math.ceil(job.duration_s))]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": _pod_name(job.id, replica),
                "namespace": self.namespace,
                "labels": {JOB_LABEL: job.id, TENANT_LABEL: job.tenant, MANAGED_BY_LABEL: MANAGED_BY},
                "annotations": annotations,
            },
            "spec": {
                "schedulerName": self.scheduler_name,
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [{
                    "name": "main", "image": self.image, "command": command,
                    "resources": {"limits": {k: str(v) for k, v in job.resources.items()}},
                }],
            },
        }

    def _parse(self, job: JobLike) -> Pod:
        return self.registry.parse_pod(self.pod_manifest(job, 0), "resources")

    def validate(self, job: JobLike) -> None:
        try:
            pod = self._parse(job)
        except DeviceInputError as exc:
            text = str(exc).replace("resources: spec.containers[0].resources.limits: ", "resources: ")
            raise ValueError(text) from None
        if not pod.device_requests and pod.cpu_milli == 0 and pod.memory_mib == 0:
            raise ValueError("resources: asks for nothing (give nvidia.com/gpu, cpu or memory)")

    def _gpus(self, job: JobLike) -> float:
        """GPU-equivalents the job holds at least (``model.share``: each device counts max(compute share,
        memory share), on the largest device of its vendor), over its replicas."""
        try:
            pod = self._parse(job)
        except DeviceInputError:  # a restored job from an older version: its pods will be refused instead
            return 0.0
        with self.cluster.lock:
            largest = largest_devices(self.cluster.state)
        return pod_gpus_at_least(pod, largest) * job.replicas

    # ------------------------------------------------------------------ jobs
    def _add(self, job: JobLike, message: str, restored: bool) -> JobLike:
        job.gpus = self._gpus(job)
        job.status = self._status("pending")
        job.message = message
        job.placements = []
        job.started_t = None
        job.finished_t = None
        self._arrival += 1
        keys = [f"{self.namespace}/{_pod_name(job.id, r)}" for r in range(job.replicas)]
        self._jobs[job.id] = job
        self._live[job.id] = _Tracked(job, keys, self._arrival, restored=restored)
        return job

    def submit(self, job: JobLike) -> JobLike:
        job.submitted_t = self._now
        job.priority = max(job.priority, USER_PRIORITY)
        return self._add(job, "waiting to be scheduled", restored=False)

    def restore(self, job: JobLike) -> None:
        job.priority = max(job.priority, USER_PRIORITY)
        self._add(job, "re-queued after a control-plane restart (its pods are adopted if they still exist)",
                  restored=True)

    def cancel(self, job_id: str) -> JobLike | None:
        job = self._jobs.get(job_id)
        if job is None:
            return None
        tracked = self._live.get(job_id)
        if tracked is not None:
            self._end(tracked, "cancelled", self._now, "cancelled by request")
        return job

    def job(self, job_id: str) -> JobLike | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[JobLike]:
        return list(self._jobs.values())

    def set_quotas(self, quotas: Mapping[str, float]) -> None:
        self._quotas = dict(quotas)

    # ------------------------------------------------------------------ API writes (worker thread)
    def _create_pods(self, manifests: list[dict[str, Any]]) -> None:
        for body in manifests:
            try:
                self.core.create_namespaced_pod(self.namespace, body)
            except ApiException as exc:
                if exc.status != 409:  # 409: it exists already (a restored job): adopt it
                    raise

    def _delete_pods(self, keys: list[str]) -> list[str]:
        """Delete the pods; returns the keys that could not be deleted."""
        failed = []
        for key in keys:
            namespace, _, name = key.partition("/")
            try:
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    log.warning("pod %s not deleted: %s %s", key, exc.status, exc.reason)
                    failed.append(key)
            except Exception as exc:  # network: retried by the next advance
                log.warning("pod %s not deleted: %s", key, exc)
                failed.append(key)
        return failed

    def _delete(self, job_id: str, keys: list[str]) -> None:
        self._deletes[job_id] = (keys, self._writer.submit(self._delete_pods, keys))

    def _check_deletes(self) -> None:
        for job_id, (keys, fut) in list(self._deletes.items()):
            if not fut.done():
                continue
            del self._deletes[job_id]
            left = keys if fut.exception() is not None else fut.result()
            if left:
                self._delete_retry[job_id] = (self._now + DELETE_RETRY_S, left)
        for job_id, (when, keys) in list(self._delete_retry.items()):
            if when <= self._now:
                del self._delete_retry[job_id]
                self._delete(job_id, keys)

    # ------------------------------------------------------------------ time
    def _end(self, tracked: _Tracked, status: str, t: float, message: str,
             events: list[Any] | None = None) -> None:
        """Make the job terminal and delete whatever pods it has (or may be creating)."""
        job = tracked.job
        self._live.pop(job.id, None)
        job.status = self._status(status)
        job.finished_t = t
        job.message = message
        if tracked.admitted:
            self._delete(job.id, tracked.pods)
        if events is not None:
            events.append(self._event(job.id, t, status, job.status, message))

    def advance(self, t: float) -> list[Any]:
        events: list[Any] = []
        if t < self._now:
            return events
        self._now = t
        self._check_deletes()
        with self._lock:
            seen = {key: self._seen.get(key) for tr in self._live.values() for key in tr.pods}
        for tracked in sorted(self._live.values(), key=lambda tr: tr.arrival):
            self._update(tracked, seen, events)
        self._admit(events)
        if t - self._last_sample >= HISTORY_EVERY_S:
            self._sample()
        return events

    def _update(self, tracked: _Tracked, seen: Mapping[str, _PodSeen | None], events: list[Any]) -> None:
        job = tracked.job
        if not tracked.admitted:
            return
        if tracked.create is not None and tracked.create.done():
            exc = tracked.create.exception()
            tracked.create = None
            if exc is not None:
                why = _api_error(exc) if isinstance(exc, ApiException) else str(exc)
                self._end(tracked, "failed", self._now, f"its pods could not be created: {why}", events)
                return
        pods = {key: seen.get(key) for key in tracked.pods}
        present = {key: p for key, p in pods.items() if p is not None}
        tracked.seen.update(present)
        failed = [(key, p) for key, p in present.items() if p.phase == "Failed"]
        if failed:
            key, p = failed[0]
            self._end(tracked, "failed", self._now, f"pod {key} failed: {p.failure or 'no reason given'}", events)
            return
        if len(present) == len(pods) and all(p.phase == "Succeeded" for p in present.values()):
            self._end(tracked, "succeeded", self._now, "every pod completed", events)
            return
        gone = sorted(k for k in tracked.seen if k not in present)
        if gone and tracked.create is None:
            self._end(tracked, "failed", self._now,
                      f"pod {gone[0]} was deleted outside the control plane", events)
            return
        running = job.status == self._status("running")
        if len(present) == len(pods) and all(p.node for p in present.values()):
            if not running:
                self._start(tracked, present, events)
            assert job.started_t is not None
            if job.duration_s is not None and self._now >= job.started_t + job.duration_s:
                self._end(tracked, "succeeded", job.started_t + job.duration_s,
                          f"completed after {job.duration_s:g} s", events)
            return
        if len(present) < len(pods):
            return  # still being created: nothing to report yet
        reasons = sorted({p.unschedulable for p in present.values() if p.unschedulable and not p.node})
        if reasons:
            self._note(tracked, f"unschedulable: {reasons[0]}", events)

    def _start(self, tracked: _Tracked, pods: Mapping[str, _PodSeen], events: list[Any]) -> None:
        job = tracked.job
        started = self._now
        bind_times = [p.bind_time for p in pods.values() if p.bind_time is not None]
        if tracked.restored and bind_times:  # adopted pods: their run time began at their binding
            started = self._now - max(0.0, time.time() - max(bind_times))
        job.status = self._status("running")
        job.started_t = started
        job.attempts += 1
        with self.cluster.lock:
            state = self.cluster.state
            job.placements = [views.placement(state, key, pods[key].node) for key in tracked.pods]
        nodes = sorted({p["node"] for p in job.placements})
        job.message = f"running on {', '.join(nodes[:4])}{' ...' if len(nodes) > 4 else ''}"
        tracked.last_message = ""
        events.append(self._event(job.id, self._now, "running", job.status, job.message))

    def _note(self, tracked: _Tracked, message: str, events: list[Any]) -> None:
        job = tracked.job
        job.message = message
        if tracked.last_message != message:
            tracked.last_message = message
            events.append(self._event(job.id, self._now, "unschedulable", job.status, message))

    def _admit(self, events: list[Any]) -> None:
        """Create the pods of waiting jobs, by priority then arrival, within each tenant's GPU quota."""
        waiting = [tr for tr in self._live.values() if not tr.admitted]
        if not waiting:
            return
        usage: dict[str, float] = {}
        for tr in self._live.values():
            if tr.admitted:
                usage[tr.job.tenant] = usage.get(tr.job.tenant, 0.0) + tr.job.gpus
        for tr in sorted(waiting, key=lambda tr: (-tr.job.priority, tr.arrival)):
            job = tr.job
            quota = self._quotas.get(job.tenant)
            held = usage.get(job.tenant, 0.0)
            if quota is not None and held + job.gpus > quota + 1e-9:
                self._note(tr, f"waiting for quota: tenant {job.tenant} holds {held:g} of {quota:g} GPUs, "
                               f"the job needs {job.gpus:g}", events)
                continue
            usage[job.tenant] = held + job.gpus
            tr.admitted = True
            tr.create = self._writer.submit(self._create_pods,
                                            [self.pod_manifest(job, r) for r in range(job.replicas)])
            job.message = f"pods created in namespace {self.namespace}, waiting for {self.scheduler_name} to bind them"

    # ------------------------------------------------------------------ views
    def _sample(self) -> None:
        pending = sum(1 for tr in self._live.values() if tr.job.status != self._status("running"))
        with self.cluster.lock:
            self._history.append(views.sample(self.cluster.state, self._now, pending))
        self._last_sample = self._now

    def _describe(self, alloc: Allocation) -> dict[str, Any]:
        with self._lock:
            seen = self._seen.get(alloc.pod_key)
        job = self._jobs.get(seen.job_id) if seen is not None else None
        return {"job": job.id if job else "", "job_name": job.name if job else "",
                "tenant": alloc.tenant or (job.tenant if job else "")}

    def nodes(self) -> list[dict[str, Any]]:
        with self.cluster.lock:
            return views.present_rows(self.cluster.state)

    def node(self, name: str) -> dict[str, Any] | None:
        with self.cluster.lock:
            return views.node_detail(self.cluster.state, name, self._describe)

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        running = self._status("running")
        for tr in self._live.values():
            job = tr.job
            u = out.setdefault(job.tenant, {"gpus": 0.0, "pending_gpus": 0.0, "running": 0.0, "pending": 0.0})
            if job.status == running:
                u["gpus"] += job.gpus
                u["running"] += 1
            else:
                u["pending_gpus"] += job.gpus
                u["pending"] += 1
        return out

    def overview(self) -> dict[str, Any]:
        counts: dict[str, int] = {}
        for job in self._jobs.values():
            value = str(job.status.value)
            counts[value] = counts.get(value, 0) + 1
        for value in ("pending", "running", "succeeded", "failed", "cancelled"):
            counts.setdefault(value, 0)
        running = self._status("running")
        with self.cluster.lock:
            figures = views.figures(self.cluster.state)
            summary = self.cluster.summary()
        return {
            "backend": self.backend,
            "cluster": self.cluster_name,
            "policy": self.policy,
            "t": self._now,
            **figures,
            "queue": sum(1 for tr in self._live.values() if tr.job.status != running),
            "jobs": counts,
            "user_jobs": dict(counts),
            "alerts_firing": 0,
            "history": list(self._history),
            "kubernetes": {
                "api_server": self.api.configuration.host,
                "version": self.server_version,
                "namespace": self.namespace,
                "scheduler_name": self.scheduler_name,
                "synced": self.informer.synced,
                "bound_by_us": self.scheduler.bound_count,
                "unaccounted_pods": summary["unaccounted"],
                "stale_nodes": summary["stale_nodes"],
                "bad_nodes": summary["bad_nodes"],
            },
        }

    def topology(self) -> dict[str, Any]:
        with self.cluster.lock:
            return views.topology(self.cluster.state)

    def alerts(self) -> list[dict[str, Any]]:
        """No alert rules run against a real cluster here (Prometheus does that: ``docs/monitoring.md``)."""
        return []

    def remediations(self) -> list[dict[str, Any]]:
        return []


__all__ = ["JOB_LABEL", "MANAGED_BY", "MANAGED_BY_LABEL", "TENANT_LABEL", "KubeConfigError", "KubeRuntime"]
