"""Remediation on a real cluster: monitoring's :class:`~gpucluster.monitoring.RemediationTarget` through the API.

* cordon / uncordon: ``spec.unschedulable`` on the Node (what ``kubectl cordon`` does);
* drain: cordon, then an Eviction (``policy/v1``, so PodDisruptionBudgets are honoured) for every pod on
  the node; their controllers recreate them and the scheduler places them on other nodes, so the evicted pods
  are reported as ``pending``, never as lost;
* release: delete the pod (its allocation goes with it);
* migrate: evict the pod; the new node is not known until it is rescheduled, so it returns None;
* device health: the device plugin reports health in its register annotation, so this is a no-op here.

Every call is idempotent: a cordoned node, a gone pod or an empty node is not an error.
"""

from __future__ import annotations

import logging
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from gpucluster.devices import VendorRegistry
from gpucluster.kubernetes.client import is_status, raw_get, raw_list
from gpucluster.kubernetes.convert import KubeInputError, allocation_from_pod, node_info, parse_pod, pod_key
from gpucluster.model.actions import DrainResult

log = logging.getLogger(__name__)


class KubeRemediationTarget:
    def __init__(self, api: ApiClient, registry: VendorRegistry, grace_period_s: int | None = None) -> None:
        self.core = client.CoreV1Api(api)
        self.registry = registry
        self.grace_period_s = grace_period_s
        """Grace period of evictions and deletions; None = each pod's own (0 removes pods at once, which a
        node without a kubelet needs)."""

    # ------------------------------------------------------------------ nodes
    def _set_unschedulable(self, node: str, value: bool) -> None:
        try:
            self.core.patch_node(node, {"spec": {"unschedulable": value}})
        except ApiException as exc:
            if not is_status(exc, 404):
                raise
            log.warning("node %s is gone; nothing to %s", node, "cordon" if value else "uncordon")

    def cordon(self, node: str) -> None:
        self._set_unschedulable(node, True)
        log.info("cordoned node %s", node)

    def uncordon(self, node: str) -> None:
        self._set_unschedulable(node, False)
        log.info("uncordoned node %s", node)

    def set_device_health(self, node: str, gpu: int, healthy: bool) -> None:
        """The device plugin owns device health on Kubernetes (its register annotation); nothing to do."""

    # ------------------------------------------------------------------ pods
    def _pods(self, node: str) -> list[dict[str, Any]]:
        body = raw_list(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}")
        return [p for p in body.get("items", []) if p.get("status", {}).get("phase") not in ("Succeeded", "Failed")]

    def pods_on(self, node: str, gpu: int | None = None) -> list[str]:
        pods = self._pods(node)
        if gpu is None:
            return sorted(pod_key(p) for p in pods)
        try:
            spec = node_info(raw_get(self.core.read_node, node), self.registry).spec
        except ApiException as exc:
            if is_status(exc, 404):
                return []
            raise
        out = []
        for obj in pods:
            try:
                alloc = allocation_from_pod(parse_pod(obj, self.registry), spec, self.registry)
            except (KubeInputError, ValueError) as exc:
                log.warning("skipping pod %s: %s", pod_key(obj), exc)
                continue
            if any(g.device_index == gpu for g in alloc.grants):
                out.append(alloc.pod_key)
        return sorted(out)

    def _evict(self, key: str) -> bool:
        namespace, name = key.split("/", 1)
        # policy/v1 (GA since 1.22; policy/v1beta1 Evictions were removed in 1.25)
        body = client.V1Eviction(
            api_version="policy/v1", kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            delete_options=client.V1DeleteOptions(grace_period_seconds=self.grace_period_s),
        )
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, body, _preload_content=False)
        except ApiException as exc:
            if is_status(exc, 404):
                return False
            raise
        log.info("evicted pod %s", key)
        return True

    def drain(self, node: str) -> DrainResult:
        self.cordon(node)
        result = DrainResult()
        for key in self.pods_on(node):
            if self._evict(key):
                result.evicted.append(key)
                result.pending.append(key)
        return result

    def release(self, pod_key: str) -> bool:
        namespace, name = pod_key.split("/", 1)
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=self.grace_period_s,
                                            _preload_content=False)
        except ApiException as exc:
            if is_status(exc, 404):
                return False
            raise
        log.info("deleted pod %s to release its allocation", pod_key)
        return True

    def migrate(self, pod_key: str) -> str | None:
        self._evict(pod_key)
        return None
