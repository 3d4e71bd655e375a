"""What the ported HAMi cases share: HAMi's test fixtures (devices with usage, container requests, pods)
translated into our model, one scheduling run through the real scheduler, and HAMi's outcome in our terms.

A case names its HAMi test and case (``Test_calcScore/one node two device ...``); ``differs`` names the section of
``docs/hami-compatibility.md`` that explains a deliberate difference (the case then asserts our answer).
Source: HAMi v2.10.0, commit 4707fb02c91c545bc7343ce26dba4c32919f9a3e.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpucluster.devices import DeviceInputError, DeviceSettings, VendorRegistry, VendorSettings
from gpucluster.kubernetes.convert import decision_annotations
from gpucluster.model import ClusterState, ContainerRequest, DeviceRequest, DeviceSpec, NodeSpec, Pod, Policy
from gpucluster.model.labels import NODE_NAME_ANNOTATION as NODE_NAME
from gpucluster.scheduler import Decision, Scheduler, binpack_spread_profile
from gpucluster.scheduler.framework import PluginConfig

HAMI_COMMIT = "4707fb02c91c545bc7343ce26dba4c32919f9a3e"

# HAMi's reason words (pkg/device/common) -> ours (the ones a node is rejected for, see Reason)
HAMI_REASONS: Mapping[str, str] = {
    "CardInsufficientMemory": "InsufficientGPUMemory",
    "CardInsufficientCore": "InsufficientGPUCores",
    "CardComputeUnitsExhausted": "InsufficientGPUCores",
    "CardTypeMismatch": "GPUTypeMismatch",
    "CardUuidMismatch": "GPUUUIDMismatch",
    "CardTimeSlicingExhausted": "GPUTaskLimit",
    "ExclusiveDeviceAllocateConflict": "GPUExclusiveBusy",
    "CardNotHealth": "GPUUnhealthy",
    "CardCordoned": "GPUCordoned",
    "NumaNotFit": "NumaConstraint",
    "NodeInsufficientDevice": "InsufficientGPUCount",
    "AllocatedCardsInsufficientRequest": "InsufficientGPUCount",
}

VENDOR_OF_TYPE = {"NVIDIA": "nvidia", "MLU": "cambricon", "DCU": "hygon"}


@dataclass(frozen=True)
class Dev:
    """One HAMi ``DeviceUsage`` (capacity and what running pods use), in HAMi's units: cores in percent."""

    id: str
    used: int = 0
    count: int = 10
    usedmem: int = 0
    totalmem: int = 8000
    totalcore: int = 100
    usedcores: int = 0
    numa: int = 0
    type: str = "NVIDIA"
    health: bool = True
    mode: str = "hami-core"
    cordoned: bool = False
    kind: str = ""
    """Our vendor of the device; empty = read from ``type`` (NVIDIA, MLU, DCU)."""

    @property
    def vendor(self) -> str:
        if self.kind:
            return self.kind
        return next((v for t, v in VENDOR_OF_TYPE.items() if t in self.type.upper()), "nvidia")


def state_of(nodes: Mapping[str, Sequence[Dev]], pair_scores: Mapping[str, Mapping[str, Mapping[str, int]]]
             | None = None) -> ClusterState:
    """A cluster of these nodes with the devices' usage already booked (as HAMi's node usage would show it)."""
    specs = [
        NodeSpec(
            name=name, cpu_milli=256_000, memory_mib=1 << 20,
            devices=tuple(
                DeviceSpec(uuid=d.id, index=j, vendor=d.vendor, model=d.type, memory_mib=d.totalmem,
                           core_milli=d.totalcore * 10, numa=d.numa, max_tasks=d.count, healthy=d.health,
                           mode=d.mode, cordoned=d.cordoned)
                for j, d in enumerate(devs)
            ),
            pair_scores=(pair_scores or {}).get(name, {}),
        )
        for name, devs in nodes.items()
    ]
    state = ClusterState(specs)
    for i, devs in enumerate(nodes.values()):
        for j, d in enumerate(devs):
            _book(state, i, j, d.used, d.usedmem, d.usedcores * 10)
    return state


def _book(state: ClusterState, i: int, j: int, tasks: int, mem: int, core: int) -> None:
    # HAMi's usage may exceed a device (its tests put 5 tasks on a 4-slot device): set the ledger directly
    state.dev_tasks[i, j] += tasks
    state.dev_mem_used[i, j] += mem
    state.dev_core_used[i, j] += core
    state.node_tasks[i] += tasks
    state.node_dmem_used[i] += mem
    state.node_core_used[i] += core
    state._touch(i)  # the derived free arrays and the node's generation follow the ledger


def hami_request(nums: int, memreq: int = 0, pct: int = 101, cores: int = 0, vendor: str = "nvidia") -> DeviceRequest:
    """HAMi's ``ContainerDeviceRequest`` as our request: Memreq wins when set; a percentage of 0 or 101 is
    unset; cores above 100 are clamped (as HAMi's Fit does)."""
    if memreq > 0:
        return DeviceRequest(vendor, nums, memory_mib=memreq, core_milli=min(cores, 100) * 10)
    memory_pct = pct if 0 < pct <= 100 else None
    return DeviceRequest(vendor, nums, memory_pct=memory_pct, core_milli=min(cores, 100) * 10)


def request_pod(*containers: Sequence[DeviceRequest], init: Sequence[Sequence[DeviceRequest]] = (),
                annotations: Mapping[str, str] | None = None, name: str = "test1") -> Pod:
    """A pod whose containers ask for these requests (HAMi's ``PodDeviceRequests``); its annotations are read
    by the real parser."""
    pod = registry().parse_pod(manifest([{}], annotations=annotations, name=name), "case")
    return dataclasses.replace(
        pod,
        containers=tuple(ContainerRequest(f"c{k}", devices=tuple(r)) for k, r in enumerate(containers)),
        init_containers=tuple(ContainerRequest(f"init{k}", devices=tuple(r)) for k, r in enumerate(init)),
    )


HAMI_TEST_NAMES = VendorSettings(resource_count="hami.io/gpu", resource_memory="hami.io/gpumem",
                                 resource_memory_pct="hami.io/gpumem-percentage", resource_cores="hami.io/gpucores",
                                 default_memory_mib=0, default_cores_pct=0, default_device_count=1)
"""The NVIDIA config of HAMi's scheduler tests (``TestMain`` in score_test.go): ``hami.io/*`` resource names."""


def registry(nvidia: VendorSettings | None = None, **vendors: VendorSettings) -> VendorRegistry:
    settings = {"nvidia": nvidia or VendorSettings(), "cambricon": VendorSettings(), "hygon": VendorSettings()}
    settings.update(vendors)
    return VendorRegistry.from_settings(DeviceSettings(settings))


def manifest(containers: Sequence[Mapping[str, Any]], init: Sequence[Mapping[str, Any]] = (),
             annotations: Mapping[str, str] | None = None, name: str = "test1") -> dict[str, Any]:
    """A Pod manifest; each container is its ``limits`` (or ``{"limits": ..., "requests": ...}``)."""

    def container(k: int, prefix: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        resources = dict(spec) if set(spec) <= {"limits", "requests"} and spec else {"limits": dict(spec)}
        return {"name": f"{prefix}{k}", "resources": resources}

    spec: dict[str, Any] = {"containers": [container(k, "c", c) for k, c in enumerate(containers)]}
    if init:
        spec["initContainers"] = [container(k, "init", c) for k, c in enumerate(init)]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default",
                                                              "annotations": dict(annotations or {})}, "spec": spec}


def schedule(state: ClusterState, pod: Pod, node_policy: str = "binpack", gpu_policy: str = "spread",
             node: str | None = None) -> Decision:
    """One scheduling cycle with HAMi's model (node policy, then GPU policy), on ``node`` alone if given."""
    profile = binpack_spread_profile(Policy(node_policy), Policy(gpu_policy), seed=0)
    plugins = [PluginConfig(name="NodeName"), *profile.plugins]
    profile = profile.model_copy(update={"tie_break": "first", "plugins": plugins})
    if node is not None:
        pod = dataclasses.replace(pod, annotations={**pod.annotations, NODE_NAME: node})
    sched = Scheduler(state, profile)
    decision = sched.schedule(pod)
    if decision.allocation is not None:
        sched.delete(pod.key)  # leave the state as it was, for the next question about it
    return decision


Placed = list[list[tuple[str, int, int]]]
"""Per container (init containers first): ``(uuid, MiB, cores %)`` per device, in the order chosen."""


def placed(d: Decision) -> Placed:
    assert d.allocation is not None, d.message()
    return [[(g.uuid, g.memory_mib, g.core_milli // 10) for g in c]
            for c in (*d.allocation.init_devices, *d.allocation.devices)]


def reasons_of(d: Decision) -> set[str]:
    return set(d.reasons) | set(d.status.reasons)


def assert_rejected_for(d: Decision, hami_reasons: Iterable[str]) -> None:
    """Unschedulable, for a reason HAMi gives (any of them when it lists several per card)."""
    assert not d.ok, f"placed on {d.node}: {placed(d)}"
    ours = reasons_of(d)
    wanted = {HAMI_REASONS[r] for r in hami_reasons}
    assert ours & wanted, f"we say {sorted(ours)}, HAMi says {sorted(hami_reasons)} (= {sorted(wanted)})"


def check_fit(c: Case) -> ClusterState:
    """A ``TestDevices_Fit``-style case: ``devices`` on one node, one container ``request`` (and pod
    ``annotations``); ``want`` the UUIDs chosen in order, or ``fails`` HAMi's reasons. Returns the state."""
    state = state_of({"node-1": c["devices"]})
    d = schedule(state, request_pod([c["request"]], annotations=c.get("annotations")))
    if "want" in c.data:
        assert [g[0] for g in placed(d)[0]] == c["want"]
    else:
        assert_rejected_for(d, c["fails"])
    return state


def check_request(c: Case, reg: VendorRegistry) -> None:
    """A ``GenerateResourceRequests``-style case: one container's ``resources`` read by ``reg`` give ``want``
    (a :class:`DeviceRequest`, or None for none), or fail with ``error``."""
    doc = manifest([c["resources"]])
    if "error" in c.data:
        with pytest.raises(DeviceInputError, match=c["error"]):
            reg.parse_pod(doc, "case")
        return
    devices = reg.parse_pod(doc, "case").containers[0].devices
    assert devices == ((c["want"],) if c["want"] is not None else ())


def vgpu_annotation(d: Decision, reg: VendorRegistry | None = None) -> dict[str, str]:
    assert d.allocation is not None
    out = decision_annotations(d.allocation, reg or registry(), 0.0)
    return {k: v for k, v in out.items() if "devices" in k or k.startswith("CAMBRICON")}


@dataclass(frozen=True)
class Case:
    """One ported HAMi test case: ``hami`` is ``TestName/case name``; the rest is the case's data."""

    hami: str
    data: Mapping[str, Any] = field(default_factory=dict)
    differs: str = ""
    """Anchor of the ``docs/hami-compatibility.md`` section that explains why we answer differently."""

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.data.get(key, default)


def case(hami: str, differs: str = "", **data: Any) -> Case:
    return Case(hami, data, differs)


def params(cases: Iterable[Case]) -> list[Any]:
    """pytest params named after the HAMi case; deliberate differences carry the ``hami_differs`` mark."""
    out = []
    for c in cases:
        marks = [pytest.mark.hami_differs] if c.differs else []
        out.append(pytest.param(c, id=c.hami, marks=marks))
    return out
