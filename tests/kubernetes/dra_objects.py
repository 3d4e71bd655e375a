"""The test DRA driver's objects (test code only): ResourceSlices for fake GPUs the way NVIDIA's ``gpu.nvidia.com``
driver publishes them (whole GPUs: ``uuid``, ``productName``, ``architecture`` ... attributes, a ``memory``
capacity) and the way HAMi's DRA driver does (``allowMultipleAllocations`` with consumable ``memory`` and
``cores``), DeviceClasses that select them, and ResourceClaims. Plain JSON dicts, as the API server takes them;
``tests/integration/test_k8s_dra.py`` publishes them on a real API server."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

NVIDIA_DRIVER = "gpu.nvidia.com"
HAMI_DRIVER = "hami.dra.test"
GIB = 1 << 30


def gpu_uuid(node: str, j: int) -> str:
    return f"{node}-dev{j}"


def nvidia_device(node: str, j: int, model: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80,
                  taints: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    dev: dict[str, Any] = {
        "name": f"gpu-{j}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, j)},
            "productName": {"string": model},
            "brand": {"string": "Nvidia"},
            "architecture": {"string": "Ampere" if "A100" in model else "Hopper"},
            "cudaComputeCapability": {"version": "8.0.0" if "A100" in model else "9.0.0"},
            "driverVersion": {"version": "570.86.15"},
            "index": {"int": j},
        },
        "capacity": {"memory": {"value": f"{memory_gib}Gi"}},
    }
    if taints:
        dev["taints"] = [dict(t) for t in taints]
    return dev


def hami_device(node: str, j: int, model: str = "NVIDIA A100-SXM4-80GB", memory_gib: int = 80) -> dict[str, Any]:
    """A GPU as HAMi's DRA driver publishes it: shared by several claims, each consuming memory and cores."""
    return {
        "name": f"hami-gpu-{j}",
        "allowMultipleAllocations": True,
        "attributes": {
            "type": {"string": "hami-gpu"},
            "uuid": {"string": gpu_uuid(node, j)},
            "productName": {"string": model},
        },
        "capacity": {
            "memory": {"value": f"{memory_gib}Gi",
                       "requestPolicy": {"default": "1Gi", "validRange": {"min": "256Mi", "step": "256Mi"}}},
            "cores": {"value": "100", "requestPolicy": {"default": "10", "validRange": {"min": "1", "max": "100"}}},
        },
    }


def resource_slice(node: str, driver: str, devices: list[dict[str, Any]], generation: int = 1,
                   pool: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{driver.replace('.', '-')}"},
        "spec": {"driver": driver, "nodeName": node,
                 "pool": {"name": pool or node, "generation": generation, "resourceSliceCount": 1},
                 "devices": devices},
    }


def device_class(name: str, driver: str, extended: str = "", selector: str = "") -> dict[str, Any]:
    selectors = [{"cel": {"expression": f'device.driver == "{driver}"'}}]
    if selector:
        selectors.append({"cel": {"expression": selector}})
    spec: dict[str, Any] = {"selectors": selectors}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def claim(name: str, cls: str, count: int = 1, namespace: str = "default", capacity: Mapping[str, str] | None = None,
          selector: str = "") -> dict[str, Any]:
    exact: dict[str, Any] = {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count}
    if capacity:
        exact["capacity"] = {"requests": dict(capacity)}
    if selector:
        exact["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-claim-{name}", "resourceVersion": "1"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exact}]}}}


def allocated(obj: dict[str, Any], node: str, results: list[dict[str, Any]],
              reserved_for: Sequence[tuple[str, str]] = ()) -> dict[str, Any]:
    """The claim with ``status.allocation`` (results: request/driver/pool/device [+ consumedCapacity])."""
    return {**obj, "status": {
        "allocation": {"devices": {"results": results}, "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": n, "uid": u} for n, u in reserved_for],
    }}


def claim_pod(name: str, claims: Sequence[str], namespace: str = "default", scheduler: str = "gpucluster",
              extended: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod using ResourceClaims by name (and, with ``extended``, DRA-backed extended resources)."""
    container: dict[str, Any] = {"name": "main", "image": "busybox",
                                 "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}
    if claims:
        container["resources"]["claims"] = [{"name": c} for c in claims]
    if extended:
        container["resources"]["requests"].update(extended)
        container["resources"]["limits"] = dict(extended)
    spec: dict[str, Any] = {"schedulerName": scheduler, "containers": [container]}
    if claims:
        spec["resourceClaims"] = [{"name": c, "resourceClaimName": c} for c in claims]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"}, "spec": spec,
            "status": {"phase": "Pending"}}
