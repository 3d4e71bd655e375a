"""``KubeBinder``: the Bind plugin that carries a decision out on the API server, as HAMi does: first the
decision annotations on the pod, then the Binding. Also its BindCheck (a dry-run Binding) and Unbind (a bound
pod cannot be unbound in Kubernetes: it is deleted and, unless a controller owns it, created again unbound) for
:meth:`gpucluster.scheduler.Scheduler.bind_group`'s rollback, and the writer of scheduling Events and
conditions."""

from __future__ import annotations

import datetime as dt
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.claims import ClaimWriter, allocation_body
from gpucluster.kubernetes.client import discard
from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.convert import decision_annotations
from gpucluster.model import Allocation, Pod
from gpucluster.model.labels import SCHEDULED_BY_ANNOTATION
from gpucluster.scheduler.framework import Status

log = logging.getLogger(__name__)



def _reason(exc: ApiException) -> str:
    """The API server's message (an admission webhook's denial says why there), else the HTTP reason."""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = ""
    return str(message or exc.reason)


def _claim_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def _rfc3339(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeBinder:
    """Bind plugin. ``bind`` patches the pod's annotations (``hami.io/vgpu-devices-to-allocate``,
    ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` ...) and then creates its Binding. A 409 because the pod is
    already on the same node counts as success (a retried bind); anything else is an ERROR status."""

    name = "KubeBinder"

    def __init__(self, api: ApiClient, registry: VendorRegistry, clock: Callable[[], float] = time.time,
                 identity: str = "", recreate: bool = True) -> None:
        self.core: Any = client.CoreV1Api(api)
        self.recreate = recreate
        """Unbind creates the deleted pod again, unbound (users' pods: the secondary scheduler); False: it only
        deletes it (the control plane's own pods, which its engine places again as a new attempt)."""
        self.unbinds = 0
        self.identity = identity
        """Written to ``gpucluster.io/scheduled-by`` on every pod this binder binds (audit)."""
        self.registry = registry
        self.clock = clock
        self.binds = 0
        self.failures = 0
        self.claims = ClaimWriter(api)
        self.conflicts = 0
        """Binds refused because a device their claims were given is held by another claim on the server."""
        self.cluster: KubeCluster | None = None
        """Set by whoever builds the cluster: its :attr:`KubeCluster.claim_plans` say which ResourceClaims a
        bind writes first."""
        self._events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._event_writer: threading.Thread | None = None
        self._event_lock = threading.Lock()
        self.events_pending = 0
        """``Scheduled`` Events queued and not written yet (:meth:`report_scheduled` writes them in the
        background)."""

    def write_claims(self, pod: Pod) -> Status:
        """Write the pod's ResourceClaims (its :class:`ClaimPlan`) now, before the Binding (idempotent: a plan
        written already is left as it is). SUCCESS when there is nothing to write."""
        cluster = self.cluster
        plan = cluster.claim_plans.get(pod.key) if cluster is not None else None
        if plan is None or cluster is None or plan.written is not None:
            return Status.success()
        names: list[str] = []

        def written(key: str, obj: dict[str, Any]) -> None:
            meta = obj.get("metadata") or {}
            names.append(f"{meta.get('namespace')}/{meta.get('name')}")
            cluster.claim_written(pod.key, key, obj)

        try:
            plan.undo = self.claims.write(pod, plan, written)
        except ApiException as exc:
            self.failures += 1
            return Status.error(self.name, f"claims of {pod.key}: {exc.status} {exc.reason}")
        except Exception as exc:
            self.failures += 1
            return Status.error(self.name, f"claims of {pod.key}: {exc}")
        plan.written = names
        return Status.success()

    def undo_claims(self, pod_key: str) -> None:
        """Take back what :meth:`write_claims` wrote for the pod (its bind will not happen)."""
        cluster = self.cluster
        plan = cluster.claim_plans.get(pod_key) if cluster is not None else None
        if plan is not None and plan.written is not None:
            self.claims.undo(plan.undo)
            plan.written, plan.undo, plan.checked = None, [], False

    def check_claims(self, pod: Pod, planned: bool = False) -> Status:
        """Read every ResourceClaim from the API server (not the informer's cache) and look for a device of the
        pod's claims that another claim also holds beyond the device's capacity: a preempted pod's claim whose
        release failed, another scheduler's allocation of the same moment. ``planned``: before
        :meth:`write_claims`, the plan's devices are checked as if written (nothing is written when one is
        held already); else the claims written are checked as the server has them, and writing first and
        reading after is what makes it safe: of two allocations of one device, the later writer reads the
        earlier one. An ERROR naming the device and the other claim (the caller takes any writes back and does
        not bind); SUCCESS when there is nothing to check."""
        cluster = self.cluster
        plan = cluster.claim_plans.get(pod.key) if cluster is not None else None
        if plan is None or cluster is None or plan.checked:
            return Status.success()
        if planned and plan.written is None:
            mine = {(k or f"{pod.namespace}/{pod.name}-extended-resources-(planned)"): allocation_body(r, plan.node)
                    for k, r in plan.claims.items() if r}
        elif not planned and plan.written:
            mine = {}
        else:
            return Status.success()
        if planned and not mine:
            return Status.success()
        try:
            objs = self.claims.list_all()
        except Exception as exc:  # the bind cannot be proven safe: not now
            self.failures += 1
            return Status.error(self.name, f"claims of {pod.key} could not be checked: {exc}")
        if mine:
            objs = [o for o in objs if _claim_key(o) not in mine]
            for key, alloc in mine.items():
                namespace, _, name = key.partition("/")
                objs.append({"metadata": {"namespace": namespace, "name": name}, "status": {"allocation": alloc}})
        conflicts = cluster.claim_conflicts(objs, mine or plan.written or ())
        if conflicts:
            self.failures += 1
            self.conflicts += 1
            why = "; ".join(f"claim {k}: {v}" for k, v in sorted(conflicts.items()))
            log.warning("pod %s not bound: %s", pod.key, why)
            return Status.error(self.name, f"claims of {pod.key} not allocated: {why}")
        if not planned:
            plan.checked = True
        return Status.success()

    def bind(self, pod: Pod, allocation: Allocation, extra: Mapping[str, str] | None = None) -> Status:
        """``extra``: more annotations to write with the decision's (the control plane's reservation). The pod's
        claims are checked against every claim on the server, written, checked again (:meth:`check_claims`,
        unless the caller checked them already), then the Binding is made; a failure of any step takes the
        claim writes back: no claim stays allocated and nothing is bound."""
        st = self.check_claims(pod, planned=True)
        if not st.ok:
            return st
        st = self.write_claims(pod)
        if not st.ok:
            return st
        st = self.check_claims(pod)
        if not st.ok:
            self.undo_claims(pod.key)
            return st
        st = self._bind(pod, allocation, extra)
        if not st.ok:
            self.undo_claims(pod.key)
        return st

    def _bind(self, pod: Pod, allocation: Allocation, extra: Mapping[str, str] | None = None) -> Status:
        annotations = decision_annotations(allocation, self.registry, self.clock())
        if self.identity:
            annotations[SCHEDULED_BY_ANNOTATION] = self.identity
        annotations.update(extra or {})
        try:
            # the API server copies a Binding's annotations onto the pod in the same write that sets its node:
            # one round trip instead of a patch and a Binding, and no moment where the pod is on a node without
            # its device decision (or carries a decision for a node it never reached). The pod's ``binding``
            # subresource, not the namespace's ``bindings``: the same write, and what our least-privilege role grants
            # (``pods/binding``; only kube-scheduler's own role grants ``bindings``, so the secondary scheduler
            # under the chart's ServiceAccount was refused 403 before: tests/integration/test_k8s_helm.py)
            discard(self.core.create_namespaced_pod_binding(
                pod.name, pod.namespace, self._binding(pod, allocation.node, annotations), _preload_content=False))
        except ApiException as exc:
            if exc.status == 409 and self._bound_to(pod, allocation.node):
                self.binds += 1
                return Status.success()
            self.failures += 1
            return Status.error(self.name, f"bind {pod.key} to {allocation.node}: {exc.status} {_reason(exc)}")
        except Exception as exc:  # network errors: the scheduler retries the pod
            self.failures += 1
            return Status.error(self.name, f"bind {pod.key} to {allocation.node}: {exc}")
        self.binds += 1
        return Status.success()

    def _binding(self, pod: Pod, node: str, annotations: Mapping[str, str] | None = None) -> dict[str, Any]:
        """The Binding as JSON (a plain dict: the client sends it as it is, no model to validate and convert)."""
        meta: dict[str, Any] = {"name": pod.name}
        if pod.uid:
            meta["uid"] = pod.uid
        if annotations:
            meta["annotations"] = dict(annotations)
        return {"apiVersion": "v1", "kind": "Binding", "metadata": meta,
                "target": {"apiVersion": "v1", "kind": "Node", "name": node}}

    def check_bind(self, pod: Pod, allocation: Allocation) -> Status:
        """A dry-run Binding: the pod (this incarnation) exists and is unbound, and admission allows the bind."""
        try:
            discard(self.core.create_namespaced_pod_binding(pod.name, pod.namespace,
                                                            self._binding(pod, allocation.node), dry_run="All",
                                                            _preload_content=False))
        except ApiException as exc:
            if exc.status == 409 and self._bound_to(pod, allocation.node):
                return Status.success()  # bound there already (a retried bind)
            return Status.error(self.name, f"bind {pod.key} to {allocation.node} (dry run): "
                                           f"{exc.status} {_reason(exc)}")
        except Exception as exc:  # network errors: the group is retried
            return Status.error(self.name, f"bind {pod.key} to {allocation.node} (dry run): {exc}")
        return Status.success()

    def unbind(self, pod: Pod, allocation: Allocation) -> Status:
        """Undo our bind of ``pod`` (see the module docstring), and the claim writes of its bind. Only the
        incarnation we bound is touched (a uid precondition); a pod already gone or not bound there is done."""
        self.undo_claims(pod.key)
        try:
            current = self.core.read_namespaced_pod(pod.name, pod.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return Status.success()
            return Status.error(self.name, f"unbind {pod.key}: {exc.status} {exc.reason}")
        except Exception as exc:
            return Status.error(self.name, f"unbind {pod.key}: {exc}")
        meta, spec = current.metadata, current.spec
        if (pod.uid and meta.uid != pod.uid) or not spec or spec.node_name != allocation.node:
            return Status.success()
        owned = any(ref.controller for ref in meta.owner_references or [])
        body = None
        if self.recreate and not owned:
            body = self._unbound_copy(current, allocation)
        try:
            self.core.delete_namespaced_pod(pod.name, pod.namespace, grace_period_seconds=0,
                                            body=client.V1DeleteOptions(grace_period_seconds=0,
                                                                        preconditions=client.V1Preconditions(
                                                                            uid=meta.uid)))
        except ApiException as exc:
            if exc.status not in (404, 409):  # 409: the precondition failed, another incarnation
                return Status.error(self.name, f"unbind {pod.key}: delete: {exc.status} {exc.reason}")
        if body is not None:
            st = self._create_again(pod, body)
            if not st.ok:
                return st
        self.unbinds += 1
        log.info("unbound %s from %s (%s)", pod.key, allocation.node,
                 "created again unbound" if body is not None else "deleted")
        return Status.success()

    def _unbound_copy(self, current: Any, allocation: Allocation) -> dict[str, Any]:
        """The pod as it was asked for: its metadata without what the API server and our bind wrote, its spec
        without ``nodeName``."""
        obj = self.core.api_client.sanitize_for_serialization(current)
        meta = obj.get("metadata") or {}
        ours = set(decision_annotations(allocation, self.registry, 0.0)) | {SCHEDULED_BY_ANNOTATION}
        keep = {k: meta[k] for k in ("name", "namespace", "labels", "ownerReferences", "finalizers")
                if meta.get(k)}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in ours}
        if annotations:
            keep["annotations"] = annotations
        spec = dict(obj.get("spec") or {})
        spec.pop("nodeName", None)
        return {"apiVersion": "v1", "kind": "Pod", "metadata": keep, "spec": spec}

    def _create_again(self, pod: Pod, body: dict[str, Any], timeout: float = 30.0) -> Status:
        """Create the pod again once its deleted incarnation is gone (a 409 until then)."""
        deadline = time.monotonic() + timeout
        delay = 0.05
        while True:
            try:
                self.core.create_namespaced_pod(pod.namespace, body)
                return Status.success()
            except ApiException as exc:
                if exc.status != 409 or time.monotonic() >= deadline:
                    return Status.error(self.name, f"unbind {pod.key}: create again: {exc.status} {exc.reason}")
            except Exception as exc:
                return Status.error(self.name, f"unbind {pod.key}: create again: {exc}")
            time.sleep(delay)  # the deletion is still being carried out; poll with a deadline
            delay = min(delay * 2, 1.0)

    def _bound_to(self, pod: Pod, node: str) -> bool:
        try:
            current = self.core.read_namespaced_pod(pod.name, pod.namespace)
        except ApiException:
            return False
        return bool(current.spec and current.spec.node_name == node)

    # ------------------------------------------------------------------------------------------ reporting
    def report_unschedulable(self, pod: Pod, message: str, component: str) -> None:
        """A ``FailedScheduling`` Warning Event and a ``PodScheduled=False`` condition with ``message``."""
        now = self.clock()
        stamp = _rfc3339(now)
        try:
            self.core.patch_namespaced_pod_status(
                pod.name, pod.namespace,
                {"status": {"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message, "lastTransitionTime": stamp, "lastProbeTime": None,
                }]}},
            )
        except ApiException as exc:
            log.warning("condition on %s not written: %s %s", pod.key, exc.status, exc.reason)
        event: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                               "namespace": pod.namespace, "uid": pod.uid or None},
            "reason": "FailedScheduling",
            "message": message,
            "type": "Warning",
            "source": {"component": component},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
            "reportingComponent": component,
        }
        try:
            self.core.create_namespaced_event(pod.namespace, event)
        except ApiException as exc:
            log.warning("event for %s not written: %s %s", pod.key, exc.status, exc.reason)

    def report_scheduled(self, pod: Pod, node: str, component: str) -> None:
        """A ``Scheduled`` Event, written by a background thread (as kube-scheduler's event broadcaster does):
        an Event is a note for people, so the next pod's decision and bind do not wait for its round trip."""
        stamp = _rfc3339(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                               "namespace": pod.namespace, "uid": pod.uid or None},
            "reason": "Scheduled", "message": f"Successfully assigned {pod.key} to {node}", "type": "Normal",
            "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        self._enqueue_event(event)

    def report_unreadable(self, obj: Mapping[str, Any], why: str, component: str) -> None:
        """A Warning Event ``Unreadable`` on an object we could not read (a DRA DeviceClass, ResourceSlice or
        ResourceClaim), saying why; written by the background writer, as an Event is a note for people. A
        cluster-scoped object's Event goes to the ``default`` namespace, as kubectl's do."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        name = str(meta.get("name") or "")
        if not name:
            return
        namespace = str(meta.get("namespace") or "")
        stamp = _rfc3339(self.clock())
        involved: dict[str, Any] = {"apiVersion": str(obj.get("apiVersion") or "resource.k8s.io/v1"),
                                    "kind": str(obj.get("kind") or ""), "name": name}
        if namespace:
            involved["namespace"] = namespace
        if meta.get("uid"):
            involved["uid"] = str(meta["uid"])
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{name[:200]}.", "namespace": namespace or "default"},
            "involvedObject": involved, "reason": "Unreadable", "type": "Warning",
            "message": f"{component} cannot read this object: {why}"[:1024],
            "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        self._enqueue_event(event)

    def _enqueue_event(self, event: dict[str, Any]) -> None:
        with self._event_lock:
            self.events_pending += 1
            if self._event_writer is None or not self._event_writer.is_alive():
                self._event_writer = threading.Thread(target=self._write_events, name="scheduled-events",
                                                      daemon=True)
                self._event_writer.start()
        self._events.put(event)

    def _write_events(self) -> None:
        while True:
            event = self._events.get()
            meta = {**event["involvedObject"], "namespace": event["metadata"]["namespace"]}
            try:
                discard(self.core.create_namespaced_event(meta["namespace"], event, _preload_content=False))
            except ApiException as exc:
                log.debug("event for %s/%s not written: %s", meta["namespace"], meta["name"], exc.status)
            except Exception as exc:  # network errors: an Event is best effort
                log.debug("event for %s/%s not written: %s", meta["namespace"], meta["name"], exc)
            finally:
                with self._event_lock:
                    self.events_pending -= 1
