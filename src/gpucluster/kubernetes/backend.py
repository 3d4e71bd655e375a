"""``KubeRuntime``: the control plane's Runtime (``gpucluster up --kubeconfig FILE``) over a real API server.

It feeds the one job engine (:class:`gpucluster.jobs.JobEngine`) and carries out its decisions with real pods;
queue order, quota, gang placement (all of a job's pods or none, one GPU model) and preemption are the engine's,
as in the simulator and the embedded control plane.

* **Cluster view.** The :class:`Informer` lists and watches Nodes and Pods into a :class:`KubeCluster`: devices
  from HAMi's register annotations, usage from every bound pod's HAMi decision annotations (ours or anyone's).
  ``nodes``/``node``/``overview``/``topology`` read that state (``views``).
* **Placement.** The engine's scheduling pass decides each job's pods through the cluster's scheduler (the
  engine's profile plus the node gate and the Kubernetes binder) under the cluster lock; the
  :class:`KubePlacer` then creates the pods (``<job id>-<attempt>-<replica>`` in ``namespace``, the job's
  resources as container limits, ``nodeSelector``, ``nvidia.com/use-gputype``, ``schedulerName:
  <scheduler_name>``, labels ``gpucluster.io/job``, ``gpucluster.io/tenant``, ``app.kubernetes.io/managed-by:
  gpucluster``, annotations ``gpucluster.io/tenant`` and, for more than one replica, ``gpucluster.io/gang`` /
  ``gang-min-member``) and binds them with ``Scheduler.bind_group`` (every Binding checked by a dry run first,
  then the :class:`KubeBinder`'s HAMi annotations and Binding per pod), on one writer thread so the service's
  event loop never waits on the API server. A group that does not bind whole is rolled back (its bound pods are
  deleted) and the job queued again; nothing of it stays bound. A job that does not fit has no pods; its
  message says why.
* **Status from pods.** Bound counts as running (without a kubelet, pods on registered nodes stay
  Pending-but-bound). ``duration_s`` after the start the engine ends the job: its pods are deleted and it
  succeeded (on a cluster with kubelets the placeholder container sleeps just as long, so both agree; a pod that
  ends first decides). Any pod Failed -> failed (the rest deleted); every pod Succeeded -> succeeded; a pod of a
  running job deleted by someone else, or pods that could not be created -> failed. Cancel, preemption
  and the end of a job delete its pods.
* **Restart.** Pods outlive the control plane. A job restored from the store whose pods are all still bound is
  adopted as running (its run time counts from their ``hami.io/bind-time``); otherwise what is left of its pods
  is deleted and it is queued again.

Threads: the informer's and the writer; job records are touched only by the service's calls (the Runtime
contract); what the informer reports is kept under ``_lock`` and read by :meth:`advance`.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config

from gpucluster.devices import (
    GANG_ANNOTATION,
    GANG_MIN_ANNOTATION,
    TENANT_ANNOTATION,
    DeviceSettings,
    VendorRegistry,
)
from gpucluster.jobs import (
    DEFAULT_QUEUE_POLICY,
    EngineFront,
    EngineOptions,
    Job,
    JobEngine,
    JobEvent,
    JobSpec,
    JobState,
    Kernel,
    job_profile,
    make_policy,
    restored_submission,
)
from gpucluster.kubernetes.client import ApiException, KubeConfigError, api_client
from gpucluster.kubernetes.convert import BIND_TIME_ANNOTATION, pod_key, pod_node, pod_phase
from gpucluster.kubernetes.runtime import RunOptions, build
from gpucluster.model import Allocation, ClusterState, Pod, views
from gpucluster.model.labels import JOB_LABEL, JOB_NAME_ANNOTATION, MANAGED_BY, MANAGED_BY_LABEL
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY, Decision, GroupDecision
from gpucluster.scheduler.plugins.quota import QuotaTree

log = logging.getLogger(__name__)

DEFAULT_IMAGE = "busybox:1.36"
HISTORY_POINTS = 240
HISTORY_EVERY_S = 5.0
DELETE_RETRY_S = 5.0


class GroupNotBoundError(RuntimeError):
    """A job's pods did not all bind; the group was rolled back (nothing of it is bound) and is queued again."""


@dataclass(slots=True)
class _PodSeen:
    """What the informer last reported about one of our pods."""

    job_id: str
    node: str
    phase: str
    bind_time: float | None
    """``hami.io/bind-time`` (epoch seconds) once bound."""
    failure: str


def _observe(obj: Mapping[str, Any], job_id: str) -> _PodSeen:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    raw_bind = (meta.get("annotations") or {}).get(BIND_TIME_ANNOTATION)
    try:
        bind_time = float(raw_bind) if raw_bind is not None else None
    except ValueError:
        bind_time = None
    failure = ""
    if pod_phase(obj) == "Failed":
        failure = str(status.get("message") or status.get("reason") or "")
        for cs in status.get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated") or {}
            if term and not failure:
                failure = f"container {cs.get('name')}: {term.get('reason', '')} (exit {term.get('exitCode')})"
    return _PodSeen(job_id, pod_node(obj), pod_phase(obj), bind_time, failure)


def _api_error(exc: BaseException) -> str:
    """``422 Unprocessable Entity: Pod "x" is invalid: ...`` (the Status message when the body has one)."""
    if not isinstance(exc, ApiException):
        return str(exc)
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


def pod_manifest(spec: JobSpec, pod: Pod, scheduler_name: str, image: str = DEFAULT_IMAGE,
                 registry: VendorRegistry | None = None) -> dict[str, Any]:
    """The Pod object for one task of a job (see the module docstring)."""
    annotations = {TENANT_ANNOTATION: spec.tenant, JOB_NAME_ANNOTATION: spec.display_name}
    if spec.num_tasks > 1:
        annotations[GANG_ANNOTATION] = spec.job_id
        annotations[GANG_MIN_ANNOTATION] = str(spec.num_tasks)
    if spec.gpu_type and registry is not None:
        for vendor in dict.fromkeys(r.vendor for _, r in pod.device_requests):
            annotations[registry[vendor].names.use_type_annotation] = spec.gpu_type
    if math.isfinite(spec.duration_s):
        command = ["sleep", str(math.ceil(spec.duration_s))]
    else:
        command = ["sh", "-c", "while true; do sleep 3600; done"]
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod.name,
            "namespace": pod.namespace,
            "labels": {JOB_LABEL: spec.job_id, TENANT_ANNOTATION: spec.tenant, MANAGED_BY_LABEL: MANAGED_BY},
            "annotations": annotations,
        },
        "spec": {
            "schedulerName": scheduler_name,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main", "image": image, "command": command,
                "resources": {"limits": {k: str(v) for k, v in spec.resources.items()}},
            }],
        },
    }
    if spec.node_selector:
        body["spec"]["nodeSelector"] = dict(spec.node_selector)
    return body


class KubePlacer:
    """The engine's :class:`~gpucluster.jobs.placement.Placer` on Kubernetes: decide under the cluster lock,
    then create and bind the pods on the writer thread; ``release`` frees the resources at once and deletes the
    pods (retried until the API server agrees)."""

    def __init__(self, runtime: KubeRuntime) -> None:
        self.rt = runtime

    @property
    def state(self) -> ClusterState:
        return self.rt.cluster.state

    def place(self, job: Job, pods: Sequence[Pod]) -> GroupDecision:
        rt = self.rt
        group = rt.cluster.decide_group(pods)
        if group.ok:
            manifests = [pod_manifest(job.spec, p, rt.scheduler_name, rt.image, rt.registry) for p in pods]
            rt.creating[job.id] = rt.writer.submit(rt.create_and_bind, manifests, group.decisions)
        return group

    def release(self, job: Job, pod_keys: Sequence[str]) -> None:
        rt = self.rt
        for key in pod_keys:
            rt.cluster.delete_pod(key)
        rt.creating.pop(job.id, None)
        if pod_keys:
            rt.delete(job.id, list(pod_keys))


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
    ) -> None:
        self.kubeconfig = Path(kubeconfig)
        self.placement_policy = placement_policy
        self.queue_policy = queue_policy
        self.namespace = namespace
        self.scheduler_name = scheduler_name
        self.image = image
        self.registry = VendorRegistry.from_settings(devices)
        self.api = api_client(self.kubeconfig)
        self.core: Any = client.CoreV1Api(self.api)
        self.cluster_name = _cluster_name(self.kubeconfig)
        self.server_version = self._probe()
        queue = make_policy(queue_policy)
        self.quota = QuotaTree([])
        opts = RunOptions(placement_policy=placement_policy, scheduler_name=scheduler_name,
                          handshake_timeout=handshake_timeout, sync_timeout=sync_timeout)
        self.cluster, self.binder, self.informer = build(
            self.api, self.registry, opts, identity=f"control-plane@{self.cluster_name}",
            profile=job_profile(placement_policy, queue, quota=True), services={"quota": self.quota},
            recreate_unbound=False)
        self._lock = threading.Lock()
        self._seen: dict[str, _PodSeen] = {}
        """Our pods (label ``gpucluster.io/job``) as the informer last reported them."""
        self.informer.pod_listeners.append(self._on_pod)
        self.informer.pod_resync_listeners.append(self._on_resync)
        self.informer.start()
        if not self.informer.wait_synced(sync_timeout):
            self.informer.stop()
            raise ConnectionError(f"{self.kubeconfig}: the API server at {self.api.configuration.host} did not "
                                  f"answer a list of nodes and pods within {sync_timeout:g} s")
        self.writer = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kube-writes")
        self.creating: dict[str, cf.Future[None]] = {}
        """Job id -> the pending creation and binding of its pods."""
        self.bound_count = 0
        self._events: list[JobEvent] = []
        with self.cluster.lock:
            self.engine = JobEngine(KubePlacer(self), queue, quota=self.quota, kernel=Kernel(time.time()),
                                    options=EngineOptions(describe=True, namespace=namespace, record_series=False))
        self.engine.listeners.append(self._report)
        self._deletes: dict[str, tuple[list[str], cf.Future[list[str]]]] = {}
        """Job id -> (pod keys, the pending delete); failed deletes are retried."""
        self._delete_retry: dict[str, tuple[float, list[str]]] = {}
        self._watched: dict[str, set[str]] = {}
        """Running job id -> its pods the informer has reported at least once."""
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
        """Stop the informer and the writer (pods stay: they are the cluster's state)."""
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

    # ------------------------------------------------------------------ API writes (writer thread)
    def create_and_bind(self, manifests: list[dict[str, Any]], decisions: list[Decision]) -> None:
        """Create the pods, then bind them where the engine placed them, whole or not at all
        (``Scheduler.bind_group``; a group that does not bind whole is rolled back: :class:`GroupNotBoundError`).
        Raises what went wrong."""
        for body in manifests:
            try:
                self.core.create_namespaced_pod(self.namespace, body)
            except ApiException as exc:
                if exc.status != 409:  # 409: it exists already
                    raise
        result = self.cluster.scheduler.bind_group(decisions)
        if not result.ok:
            raise GroupNotBoundError(result.message())
        for d in result.bound:
            assert d.node is not None
            self.bound_count += 1
            self.binder.report_scheduled(d.pod, d.node, self.scheduler_name)

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

    def delete(self, job_id: str, keys: list[str]) -> None:
        self._deletes[job_id] = (keys, self.writer.submit(self._delete_pods, keys))

    def _check_deletes(self) -> None:
        for job_id, (keys, fut) in list(self._deletes.items()):
            if not fut.done():
                continue
            del self._deletes[job_id]
            left = keys if fut.exception() is not None else fut.result()
            if left:
                self._delete_retry[job_id] = (self.now + DELETE_RETRY_S, left)
        for job_id, (when, keys) in list(self._delete_retry.items()):
            if when <= self.now:
                del self._delete_retry[job_id]
                self.delete(job_id, keys)

    # ------------------------------------------------------------------ jobs
    def restore(self, job: Job) -> None:
        """Adopt the job's pods when all of them are still bound; else delete what is left and queue it."""
        job.spec = restored_submission(job.spec, self.now)
        with self._lock:
            mine = {k: p for k, p in self._seen.items() if p.job_id == job.id}
        with self.cluster.lock:
            bound = [self.cluster.bound[k][0] for k, p in sorted(mine.items())
                     if p.node and p.phase not in ("Succeeded", "Failed") and k in self.cluster.bound]
            if mine and len(bound) == job.spec.num_tasks and len(bound) == len(mine):
                binds = [p.bind_time for p in mine.values() if p.bind_time is not None]
                started = self.now - max(0.0, time.time() - max(binds)) if binds else self.now
                self.engine.adopt(job, bound, started)
                self._watched[job.id] = set(mine)
                return
            self.engine.submit(job)
        if mine:
            self.delete(job.id, sorted(mine))

    # ------------------------------------------------------------------ time
    def advance(self, t: float) -> list[JobEvent]:
        """Observe our pods (failed, succeeded, deleted, not created), then run the engine to ``t``."""
        if t < self.now:
            return []
        self._check_deletes()
        with self._lock:
            seen = dict(self._seen)
        with self.cluster.lock:
            for job in self.engine.running():
                self._observe_job(job, seen)
            self.engine.run_until(t)
        if t - self._last_sample >= HISTORY_EVERY_S:
            self._sample()
        return self._take_events()

    def _observe_job(self, job: Job, seen: Mapping[str, _PodSeen]) -> None:
        fut = self.creating.get(job.id)
        if fut is not None and fut.done():
            del self.creating[job.id]
            exc = fut.exception()
            if isinstance(exc, GroupNotBoundError):  # rolled back: nothing of it is bound; place it again
                self.engine.requeue(job.id, f"its pods did not all bind, none is held: {exc}")
                return
            if exc is not None:
                self.engine.fail(job.id, f"its pods could not be created or bound: {_api_error(exc)}")
                return
        present = {k: seen[k] for k in job.pod_keys if k in seen}
        watched = self._watched.setdefault(job.id, set())
        watched.update(present)
        failed = [(k, p) for k, p in present.items() if p.phase == "Failed"]
        if failed:
            key, p = failed[0]
            self.engine.fail(job.id, f"pod {key} failed: {p.failure or 'no reason given'}")
        elif len(present) == len(job.pod_keys) and all(p.phase == "Succeeded" for p in present.values()):
            self.engine.finish(job.id, "every pod completed")
        elif job.id not in self.creating and (gone := sorted(k for k in watched if k not in present)):
            self.engine.fail(job.id, f"pod {gone[0]} was deleted outside the control plane")
        if job.state != JobState.RUNNING:
            self._watched.pop(job.id, None)

    # ------------------------------------------------------------------ views
    def _sample(self) -> None:
        with self.cluster.lock:
            self._history.append(views.sample(self.cluster.state, self.now, len(self.engine.queued())))
        self._last_sample = self.now

    def _describe(self, alloc: Allocation) -> dict[str, Any]:
        with self._lock:
            seen = self._seen.get(alloc.pod_key)
        job = self.engine.jobs.get(seen.job_id) if seen is not None else None
        return {"job": job.id if job else "", "job_name": job.name if job else "",
                "tenant": alloc.tenant or (job.tenant if job else "")}

    def nodes(self) -> list[dict[str, Any]]:
        with self.cluster.lock:
            return views.present_rows(self.cluster.state)

    def node(self, name: str) -> dict[str, Any] | None:
        with self.cluster.lock:
            return views.node_detail(self.cluster.state, name, self._describe)

    def overview(self) -> dict[str, Any]:
        counts, user = self.engine.status_counts()
        with self.cluster.lock:
            figures = views.figures(self.cluster.state)
            summary = self.cluster.summary()
        return {
            "backend": self.backend,
            "cluster": self.cluster_name,
            "policy": self.placement_policy,
            "queue_policy": self.queue_policy,
            "t": self.now,
            **figures,
            "queue": len(self.engine.queued()),
            "jobs": counts,
            "user_jobs": user,
            "alerts_firing": 0,
            "history": list(self._history),
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


__all__ = ["JOB_LABEL", "MANAGED_BY", "MANAGED_BY_LABEL", "TENANT_ANNOTATION", "KubeConfigError", "KubePlacer",
           "KubeRuntime", "pod_manifest"]
