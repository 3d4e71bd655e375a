"""``KubeBinder``: the Bind plugin that carries a decision out on the API server, as HAMi does: first the
decision annotations on the pod, then the Binding. Also the writer of scheduling Events and conditions."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.convert import decision_annotations
from gpucluster.model import Allocation, Pod
from gpucluster.model.labels import SCHEDULED_BY_ANNOTATION
from gpucluster.scheduler.framework import Status

log = logging.getLogger(__name__)



def _rfc3339(when: float) -> str:
    return dt.datetime.fromtimestamp(when, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeBinder:
    """Bind plugin. ``bind`` patches the pod's annotations (``hami.io/vgpu-devices-to-allocate``,
    ``hami.io/vgpu-node``, ``hami.io/vgpu-time`` ...) and then creates its Binding. A 409 because the pod is
    already on the same node counts as success (a retried bind); anything else is an ERROR status."""

    name = "KubeBinder"

    def __init__(self, api: ApiClient, registry: VendorRegistry, clock: Callable[[], float] = time.time,
                 identity: str = "") -> None:
        self.core: Any = client.CoreV1Api(api)
        self.identity = identity
        """Written to ``gpucluster.io/scheduled-by`` on every pod this binder binds (audit)."""
        self.registry = registry
        self.clock = clock
        self.binds = 0
        self.failures = 0

    def bind(self, pod: Pod, allocation: Allocation) -> Status:
        annotations = decision_annotations(allocation, self.registry, self.clock())
        if self.identity:
            annotations[SCHEDULED_BY_ANNOTATION] = self.identity
        try:
            self.core.patch_namespaced_pod(pod.name, pod.namespace, {"metadata": {"annotations": annotations}})
            body = client.V1Binding(
                metadata=client.V1ObjectMeta(name=pod.name, uid=pod.uid or None),
                target=client.V1ObjectReference(api_version="v1", kind="Node", name=allocation.node),
            )
            resp = self.core.create_namespaced_binding(pod.namespace, body, _preload_content=False)
            resp.release_conn()
        except ApiException as exc:
            if exc.status == 409 and self._bound_to(pod, allocation.node):
                self.binds += 1
                return Status.success()
            self.failures += 1
            return Status.error(self.name, f"bind {pod.key} to {allocation.node}: {exc.status} {exc.reason}")
        except Exception as exc:  # network errors: the scheduler retries the pod
            self.failures += 1
            return Status.error(self.name, f"bind {pod.key} to {allocation.node}: {exc}")
        self.binds += 1
        return Status.success()

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
        stamp = _rfc3339(self.clock())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{pod.name}.", "namespace": pod.namespace},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": pod.name,
                               "namespace": pod.namespace, "uid": pod.uid or None},
            "reason": "Scheduled", "message": f"Successfully assigned {pod.key} to {node}", "type": "Normal",
            "source": {"component": component}, "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        }
        try:
            self.core.create_namespaced_event(pod.namespace, event)
        except ApiException as exc:
            log.debug("event for %s not written: %s", pod.key, exc.status)
