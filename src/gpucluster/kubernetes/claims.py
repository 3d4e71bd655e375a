"""Writing a pod's ResourceClaims before its Binding (secondary scheduler, control plane): what kube-scheduler's
DRA plugin does in PreBind, with our choice of devices.

For each claim of a :class:`~gpucluster.kubernetes.cluster.ClaimPlan`: add the ``resource.kubernetes.io/
delete-protection`` finalizer, then one status update with ``allocation`` (driver, pool and device per result;
``shareID`` and ``consumedCapacity`` on shared devices; a node selector for the chosen node) and the pod in
``reservedFor``. The update carries the claim's resourceVersion, so a claim someone else allocated meanwhile
fails with 409 instead of being overwritten. The claim of DRA-backed extended resources is created first
(``<pod>-extended-resources-*``, owned by the pod, annotated ``resource.kubernetes.io/extended-resource-claim``)
and the pod's ``status.extendedResourceClaimStatus`` names it afterwards. Every write is undone, last first,
when a later step fails: no claim stays allocated for a pod that is not bound.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client import ApiClient, ApiException

from gpucluster.kubernetes.client import discard
from gpucluster.kubernetes.cluster import ClaimPlan, ClaimResult
from gpucluster.kubernetes.dra import EXTENDED_CLAIM_ANNOTATION, FINALIZER, GROUP, VERSION, consumed_capacity
from gpucluster.model import Pod

log = logging.getLogger(__name__)

Undo = Callable[[], None]


def _body(resp: Any) -> dict[str, Any]:
    try:
        out: dict[str, Any] = json.loads(resp.data)
    finally:
        resp.release_conn()
    return out


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def allocation_body(results: list[ClaimResult], node: str) -> dict[str, Any]:
    """``status.allocation`` for the chosen devices on ``node``."""
    out = []
    for r in results:
        item: dict[str, Any] = {"request": r.request, "driver": r.device.driver, "pool": r.device.pool,
                                "device": r.device.name}
        if r.device.shared:
            item["shareID"] = str(uuid.uuid4())
            consumed = consumed_capacity(r.device, r.memory_mib, r.core_milli)
            if consumed:
                item["consumedCapacity"] = consumed
        out.append(item)
    return {
        "devices": {"results": out},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]},
        "allocationTimestamp": _now(),
    }


class ClaimWriter:
    """Carries out a :class:`ClaimPlan` on the API server (see the module docstring)."""

    def __init__(self, api: ApiClient) -> None:
        self.resource: Any = client.ResourceV1Api(api)
        self.core: Any = client.CoreV1Api(api)

    def write(self, pod: Pod, plan: ClaimPlan, written: Callable[[str, dict[str, Any]], None]) -> list[Undo]:
        """Write every claim of the plan; returns how to undo each write (call them last first). Raises
        ``ApiException`` / ``RuntimeError`` after undoing what it wrote itself."""
        undo: list[Undo] = []
        try:
            for claim_key, results in plan.claims.items():
                if claim_key:
                    namespace, _, name = claim_key.partition("/")
                else:
                    namespace, name = pod.namespace, self._create_extended(pod, plan, undo)
                obj = self._allocate(pod, namespace, name, results, plan.node, undo)
                written(claim_key, obj)
                if not claim_key:
                    self._pod_status(pod, name, plan)
        except BaseException:
            self.undo(undo)
            raise
        return undo

    @staticmethod
    def undo(steps: list[Undo]) -> None:
        for step in reversed(steps):
            try:
                step()
            except Exception as exc:  # the claim controller / next pass cleans up what is left
                log.warning("undoing a claim write failed: %s", exc)

    def _create_extended(self, pod: Pod, plan: ClaimPlan, undo: list[Undo]) -> str:
        self._drop_unallocated_extended(pod)
        body = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceClaim",
            "metadata": {"generateName": f"{pod.name}-extended-resources-", "namespace": pod.namespace,
                         "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid,
                                              "controller": True}]},
            "spec": {"devices": {"requests": plan.extended_requests}},
        }
        created = _body(self.resource.create_namespaced_resource_claim(pod.namespace, body, _preload_content=False))
        name = str(created["metadata"]["name"])
        undo.append(lambda: self.resource.delete_namespaced_resource_claim(name, pod.namespace))
        return name

    def _drop_unallocated_extended(self, pod: Pod) -> None:
        """Delete the extended-resource claims owned by this pod (this incarnation) that hold nothing: a
        scheduler that died between creating one and allocating it left it behind, and the claim about to be
        made replaces it (before, the pod ended up bound with two, one of them never allocated). A claim some
        allocation was written to is left alone."""
        if not pod.uid:
            return
        items = _body(self.resource.list_namespaced_resource_claim(pod.namespace, _preload_content=False))
        for obj in items.get("items") or []:
            meta = obj.get("metadata") or {}
            if ((meta.get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) != "true"
                    or not any(ref.get("uid") == pod.uid for ref in meta.get("ownerReferences") or [])
                    or (obj.get("status") or {}).get("allocation") or meta.get("deletionTimestamp")):
                continue
            try:
                self.resource.delete_namespaced_resource_claim(str(meta.get("name")), pod.namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise
            log.info("claim %s/%s deleted: an extended-resource claim of pod %s never allocated (its scheduler "
                     "stopped between creating and allocating it)", pod.namespace, meta.get("name"), pod.key)

    def _allocate(self, pod: Pod, namespace: str, name: str, results: list[ClaimResult], node: str,
                  undo: list[Undo]) -> dict[str, Any]:
        claim = _body(self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False))
        meta = claim.setdefault("metadata", {})
        if meta.get("deletionTimestamp"):
            raise RuntimeError(f"claim {namespace}/{name} is being deleted")
        status = claim.setdefault("status", {})
        if results and status.get("allocation"):
            raise RuntimeError(f"claim {namespace}/{name} got allocated elsewhere in the meantime")
        if not results and not status.get("allocation"):
            raise RuntimeError(f"claim {namespace}/{name} is no longer allocated")
        if results and FINALIZER not in (meta.get("finalizers") or []):
            meta["finalizers"] = [*(meta.get("finalizers") or []), FINALIZER]
            claim = _body(self.resource.replace_namespaced_resource_claim(name, namespace, claim,
                                                                          _preload_content=False))
            status = claim.setdefault("status", {})
        ref = {"resource": "pods", "name": pod.name, "uid": pod.uid}
        if results:
            status["allocation"] = allocation_body(results, node)
        reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod.uid]
        status["reservedFor"] = [*reserved, ref]
        out = _body(self.resource.replace_namespaced_resource_claim_status(name, namespace, claim,
                                                                          _preload_content=False))
        undo.append(lambda: self._release(namespace, name, pod.uid, deallocate=bool(results)))
        return out

    def _release(self, namespace: str, name: str, uid: str, deallocate: bool) -> None:
        """Take ``uid`` out of the claim's ``reservedFor``; with ``deallocate`` (we allocated it) and nobody
        else reserved, clear the allocation and our finalizer."""
        for _ in range(5):
            claim = _body(self.resource.read_namespaced_resource_claim(name, namespace, _preload_content=False))
            status = claim.setdefault("status", {})
            status["reservedFor"] = [r for r in status.get("reservedFor") or [] if r.get("uid") != uid]
            if deallocate and not status["reservedFor"]:
                status.pop("allocation", None)
            try:
                claim = _body(self.resource.replace_namespaced_resource_claim_status(name, namespace, claim,
                                                                                    _preload_content=False))
                if deallocate and not claim.get("status", {}).get("allocation"):
                    meta = claim["metadata"]
                    if FINALIZER in (meta.get("finalizers") or []):
                        meta["finalizers"] = [f for f in meta["finalizers"] if f != FINALIZER]
                        discard(self.resource.replace_namespaced_resource_claim(name, namespace, claim,
                                                                                _preload_content=False))
                return
            except ApiException as exc:
                if exc.status == 404:
                    return
                if exc.status != 409:
                    raise
        raise RuntimeError(f"claim {namespace}/{name}: could not release it (conflicts)")

    def list_all(self) -> list[dict[str, Any]]:
        """Every ResourceClaim, read from the server (not from a cache)."""
        body = _body(self.resource.list_resource_claim_for_all_namespaces(_preload_content=False))
        items: list[dict[str, Any]] = body.get("items") or []
        return items

    def release(self, namespace: str, name: str, uid: str) -> None:
        """A pod that held the claim is gone: drop it from ``reservedFor``, deallocating when nobody is left."""
        try:
            self._release(namespace, name, uid, deallocate=True)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def _pod_status(self, pod: Pod, claim_name: str, plan: ClaimPlan) -> None:
        self.core.patch_namespaced_pod_status(pod.name, pod.namespace, {"status": {"extendedResourceClaimStatus": {
            "requestMappings": plan.extended_mappings, "resourceClaimName": claim_name}}})
