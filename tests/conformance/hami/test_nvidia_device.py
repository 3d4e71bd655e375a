"""HAMi ``pkg/device/nvidia/device_test.go`` (v2.10.0): how an NVIDIA container's resources become a request
(``GenerateResourceRequests`` after the admission webhook's ``MutateAdmission``), the type, mode and NUMA
annotations, and ``Fit`` (device choice, rejection reasons, cordon, mutex, NUMA binding, topology-aware).

A pod reaches HAMi's scheduler after its webhook, so requests are compared as the webhook leaves them: a
container given a whole device and no ``gpucores`` gets 100 (``TestMutateAdmissionDefaultsExclusiveCore``).
"""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.devices import DeviceInputError, VendorSettings
from gpucluster.model import DeviceRequest
from tests.conformance.hami.harness import (
    Case,
    Dev,
    assert_rejected_for,
    case,
    check_fit,
    check_request,
    hami_request,
    manifest,
    params,
    placed,
    registry,
    request_pod,
    schedule,
    state_of,
)

GPU, MEM, PCT, CORES = "nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"


def nv(count: int, mem: int = 0, pct: int | None = None, cores: int = 0) -> DeviceRequest:
    return DeviceRequest("nvidia", count, memory_mib=mem, memory_pct=pct, core_milli=cores * 10)


REQUESTS = [
    case("TestGenerateResourceRequests/gpu count only — defaults to 100% memory",
         limits={GPU: 1}, want=nv(1, pct=100, cores=100)),
    case("TestGenerateResourceRequests/gpu count + explicit memory", limits={GPU: 2, MEM: 4096}, want=nv(2, 4096)),
    case("TestGenerateResourceRequests/gpu count + memory percentage", limits={GPU: 1, PCT: 50},
         want=nv(1, pct=50)),
    case("TestGenerateResourceRequests/gpu count + memory percentage above 100 — clamped to 100",
         differs="percentage-above-100", limits={GPU: 1, PCT: 150}, error="must be at most 100"),
    case("TestGenerateResourceRequests/gpu count + memory percentage beyond int32 range — clamped to 100 without "
         "wrapping", differs="percentage-above-100", limits={GPU: 1, PCT: (1 << 32) + 50}, error="must be at most 100"),
    case("TestGenerateResourceRequests/gpu count + memory percentage equal to sentinel 101 — clamped to 100",
         differs="percentage-above-100", limits={GPU: 1, PCT: 101}, error="must be at most 100"),
    case("TestGenerateResourceRequests/gpu count + explicit cores", limits={GPU: 1, CORES: 50},
         want=nv(1, pct=100, cores=50)),
    case("TestGenerateResourceRequests/no gpu resource — returns empty request", limits={}, want=None),
    case("TestGenerateResourceRequests/gpu in Requests (not Limits) — falls back to Requests",
         resources={"requests": {GPU: 1}}, want=nv(1, pct=100, cores=100)),
    case("TestGenerateResourceRequests/gpu count + memory percentage of 0 — treated as unset",
         limits={GPU: 1, PCT: 0}, want=nv(1, pct=100)),
    case("TestGenerateResourceRequests/memory percentage of 0 in Requests — treated as unset",
         resources={"requests": {GPU: 1, PCT: 0}}, want=nv(1, pct=100)),
    case("TestGenerateResourceRequests/negative memory percentage — treated as unset", differs="percentage-above-100",
         limits={GPU: 1, PCT: -1}, error="must not be negative"),
    case("TestGenerateResourceRequests/memory percentage of 0 + explicit memory — explicit memory wins",
         limits={GPU: 1, MEM: 2000, PCT: 0}, want=nv(1, 2000)),
    case("TestGenerateResourceRequests/byte-scale memory quantity that overflows int32 is rejected",
         differs="memory-out-of-range", limits={GPU: 1, MEM: "16Gi"}, error="the unit is MiB, not bytes"),
    case("TestGenerateResourceRequests/decimal-form memory request is rejected, not treated as zero",
         differs="memory-out-of-range", limits={GPU: 1, MEM: "16.0Gi"}, error="the unit is MiB, not bytes"),
    case("TestGenerateResourceRequests_MemoryFactor/memoryFactor 2 doubles gpumem", settings={"memory_factor": 2},
         limits={GPU: 1, MEM: 1024}, want=nv(1, 2048)),
    case("TestGenerateResourceRequests_MemoryFactor/1Gi with memoryFactor 2 is rejected", differs="memory-out-of-range",
         settings={"memory_factor": 2}, limits={GPU: 1, MEM: "1Gi"}, error="not bytes"),
    case("TestGenerateResourceRequests_DefaultMemory/count only takes defaultMemory",
         settings={"default_memory_mib": 512}, limits={GPU: 1}, want=nv(1, 512, cores=100)),
    case("TestGenerateResourceRequests_DefaultMemory/percentage 0 is unset and takes defaultMemory",
         settings={"default_memory_mib": 512}, limits={GPU: 1, PCT: 0}, want=nv(1, 512)),
    case("TestGenerateResourceRequests_DefaultMemory/gpumem 0 is unset and takes defaultMemory",
         settings={"default_memory_mib": 512}, limits={GPU: 1, MEM: 0}, want=nv(1, 512)),
    # the webhook's default cores (TestMutateAdmissionDefaultsExclusiveCore): 100 when given a whole device
    case("TestMutateAdmissionDefaultsExclusiveCore/exclusive via percentage", limits={GPU: 1, PCT: 100},
         want=nv(1, pct=100, cores=100)),
    case("TestMutateAdmissionDefaultsExclusiveCore/exclusive via percentage in requests only",
         resources={"requests": {GPU: 1, PCT: 100}}, want=nv(1, pct=100, cores=100)),
    case("TestMutateAdmissionDefaultsExclusiveCore/non-exclusive percentage", limits={GPU: 1, PCT: 50},
         want=nv(1, pct=50, cores=0)),
    case("TestMutateAdmissionDefaultsExclusiveCore/no memory fields defaults to exclusive", limits={GPU: 1},
         want=nv(1, pct=100, cores=100)),
    case("TestMutateAdmissionDefaultsExclusiveCore/explicit cores remains unchanged", limits={GPU: 1, CORES: 70},
         want=nv(1, pct=100, cores=70)),
    case("TestMutateAdmissionDefaultsExclusiveCore/explicit cores in requests remains unchanged",
         resources={"requests": {GPU: 1, CORES: 55}}, want=nv(1, pct=100, cores=55)),
    case("TestMutateAdmissionDefaultsExclusiveCore/memory size present treated as shareable",
         limits={GPU: 1, MEM: 8192}, want=nv(1, 8192, cores=0)),
    # HAMi's config here has no memory resource name; ours always has one: the pod names none either way
    case("TestMutateAdmissionDefaultsExclusiveCore/memory name empty treated as exclusive", limits={GPU: 1},
         want=nv(1, pct=100, cores=100)),
    case("TestMutateAdmissionDefaultsExclusiveCore/custom resource names",
         settings={"resource_count": "hami.io/gpu", "resource_memory": "hami.io/gpumem",
                   "resource_memory_pct": "hami.io/gpumem-percentage", "resource_cores": "hami.io/gpucores"},
         limits={"hami.io/gpu": 1, "hami.io/gpumem-percentage": 100}, want=nv(1, pct=100, cores=100)),
    case("Test_MutateAdmission_MemoryPercentageValidation/percentage of 0 is accepted", limits={GPU: 1, PCT: 0},
         want=nv(1, pct=100)),
    case("Test_MutateAdmission_MemoryPercentageValidation/percentage of 100 is accepted", limits={GPU: 1, PCT: 100},
         want=nv(1, pct=100, cores=100)),
    case("Test_MutateAdmission_MemoryPercentageValidation/percentage of 101 is rejected", limits={GPU: 1, PCT: 101},
         error="must be at most 100"),
    case("Test_MutateAdmission_MemoryPercentageValidation/percentage above 100 is rejected",
         limits={GPU: 1, PCT: 150}, error="must be at most 100"),
]


@pytest.mark.parametrize("c", params(REQUESTS))
def test_container_request(c: Case) -> None:
    resources: dict[str, Any] = c.get("resources") or {"limits": c["limits"]}
    check_request(Case(c.hami, {**c.data, "resources": resources}, c.differs),
                  registry(VendorSettings(**c.get("settings", {}))))


def test_zero_memory_percentage_is_accounted_as_whole_card() -> None:
    """TestZeroMemoryPercentageIsAccountedAsWholeCard: a percentage of 0 books the whole card, and an almost
    full card does not take it."""
    pod = registry().parse_pod(manifest([{GPU: 1, PCT: 0}]), "case")
    empty = schedule(state_of({"n": [Dev("dev-0", totalmem=11264)]}), pod)
    assert placed(empty) == [[("dev-0", 11264, 0)]]
    full = schedule(state_of({"n": [Dev("dev-0", totalmem=11264, usedmem=11260)]}), pod)
    assert_rejected_for(full, ["CardInsufficientMemory"])


TYPES = [
    case("Test_checkType/use set GPUInUse don't set GPUNoUse annotation,device match",
         annotations={"nvidia.com/use-gputype": "A10"}, type="NVIDIA A100", fits=True),
    case("Test_checkType/use set GPUInUse set GPUNoUse annotation,device don't match",
         annotations={"nvidia.com/use-gputype": "A10", "nvidia.com/nouse-gputype": "A100"}, type="NVIDIA A100",
         fits=False),
    case("Test_checkType/use set GPUInUse set GPUNoUse annotation,device match",
         annotations={"nvidia.com/use-gputype": "A10", "nvidia.com/nouse-gputype": "A100"}, type="NVIDIA A10",
         fits=True),
    case("TestCheckGPUtype_NoUse/A100 excluded", annotations={"nvidia.com/nouse-gputype": "A100"},
         type="NVIDIA-A100", fits=False),
    case("TestCheckGPUtype_NoUse/V100 not excluded", annotations={"nvidia.com/nouse-gputype": "A100"},
         type="NVIDIA-V100", fits=True),
    case("TestCheckGPUtype_EmptyAnnotation/empty use", annotations={"nvidia.com/use-gputype": ""},
         type="NVIDIA-A100", fits=True),
    case("TestCheckGPUtype_EmptyAnnotation/blank use", annotations={"nvidia.com/use-gputype": "   "},
         type="NVIDIA-A100", fits=True),
    case("TestCheckGPUtype_EmptyAnnotation/empty nouse", annotations={"nvidia.com/nouse-gputype": ""},
         type="NVIDIA-A100", fits=True),
    case("TestCheckGPUtype_EmptyAnnotation/blank nouse", annotations={"nvidia.com/nouse-gputype": "   "},
         type="NVIDIA-A100", fits=True),
    case("TestCheckGPUtype_InUseMismatch/A100 wanted, V100 offered", annotations={"nvidia.com/use-gputype": "A100"},
         type="NVIDIA-V100", fits=False),
    case("TestCheckType_AllocateMode/mode not in vgpu-mode", annotations={"nvidia.com/vgpu-mode": "mps"},
         type="NVIDIA-A100", fits=False),
    case("TestCheckType_AllocateMode/mode in vgpu-mode", annotations={"nvidia.com/vgpu-mode": "hami-core"},
         type="NVIDIA-A100", fits=True),
]


@pytest.mark.parametrize("c", params(TYPES))
def test_device_type_and_mode(c: Case) -> None:
    state = state_of({"n": [Dev("dev-0", type=c["type"])]})
    d = schedule(state, request_pod([hami_request(1, 100, cores=10)], annotations=c["annotations"]))
    if c["fits"]:
        assert placed(d) == [[("dev-0", 100, 10)]]
    else:
        assert_rejected_for(d, ["CardTypeMismatch"])


NUMA = [
    case("TestAssertNuma/NumaBind=true enforces numa", value="true", enforced=True),
    case("TestAssertNuma/NumaBind=false does not enforce", value="false", enforced=False),
    case("TestAssertNuma/NumaBind invalid value", differs="invalid-annotation", value="notabool", enforced=None),
    case("TestAssertNuma/NumaBind key absent", value=None, enforced=False),
]


@pytest.mark.parametrize("c", params(NUMA))
def test_numa_bind_annotation(c: Case) -> None:
    # two GPUs on two NUMA nodes: a 2-GPU request fits only when NUMA binding is off
    annotations = {} if c["value"] is None else {"nvidia.com/numa-bind": c["value"]}
    if c["enforced"] is None:
        with pytest.raises(DeviceInputError, match=r"nvidia\.com/numa-bind.*must be true or false"):
            request_pod([hami_request(2, 100)], annotations=annotations)
        return
    state = state_of({"n": [Dev("dev-0", numa=0), Dev("dev-1", numa=1)]})
    d = schedule(state, request_pod([hami_request(2, 100, cores=10)], annotations=annotations))
    if c["enforced"]:
        assert_rejected_for(d, ["NumaNotFit"])
    else:
        assert d.ok


CARD = {"count": 100, "totalmem": 128}

FIT = [
    case("TestDevices_Fit/fit success", devices=[Dev("dev-0", **CARD), Dev("dev-1", **CARD)],
         request=hami_request(1, 64, 0, 50), want=["dev-1"]),
    case("TestDevices_Fit/fit fail: memory not enough", devices=[Dev("dev-0", **CARD)],
         request=hami_request(1, 512, 0, 50), fails=["CardInsufficientMemory"]),
    case("TestDevices_Fit/fit fail: core not enough", devices=[Dev("dev-0", count=100, totalmem=1024, usedcores=100)],
         request=hami_request(1, 512, 0, 50), fails=["CardInsufficientCore"]),
    case("TestDevices_Fit/fit fail: user assign use uuid mismatch", devices=[Dev("dev-1", count=100, totalmem=1280)],
         request=hami_request(2, 512, 0, 50), annotations={"nvidia.com/use-gpuuuid": "dev-0"},
         fails=["CardUuidMismatch", "NodeInsufficientDevice"]),
    case("TestDevices_Fit/fit fail: user assign no use uuid match", devices=[Dev("dev-0", count=100, totalmem=1280)],
         request=hami_request(2, 512, 0, 50), annotations={"nvidia.com/nouse-gpuuuid": "dev-0"},
         fails=["CardUuidMismatch", "NodeInsufficientDevice"]),
    case("TestDevices_Fit/fit fail: card overused", devices=[Dev("dev-0", used=100, count=100, totalmem=1280)],
         request=hami_request(1, 512, 0, 50), fails=["CardTimeSlicingExhausted"]),
    case("TestDevices_Fit/fit success: but core limit can't exceed 100", devices=[Dev("dev-0", count=100, totalmem=1280)],
         request=hami_request(1, 512, 0, 120), want=["dev-0"]),
    case("TestDevices_Fit/fit fail:  card exclusively", devices=[Dev("dev-0", used=20, count=100, totalmem=1280)],
         request=hami_request(1, 512, 0, 100), fails=["ExclusiveDeviceAllocateConflict"]),
    case("TestDevices_Fit/fit fail:  CardComputeUnitsExhausted",
         devices=[Dev("dev-0", used=20, count=100, totalmem=1280, usedcores=100)],
         request=hami_request(1, 512, 0, 0), fails=["CardComputeUnitsExhausted"]),
    case("TestDevices_Fit/fit fail:  AllocatedCardsInsufficientRequest",
         devices=[Dev("dev-0", used=20, count=100, totalmem=1280, usedcores=10)],
         request=hami_request(2, 512, 0, 20), fails=["AllocatedCardsInsufficientRequest"]),
    case("TestDevices_Fit/fit fail: partial allocation AllocatedCardsInsufficientRequest for multiple cards",
         devices=[Dev("dev-0", count=100, totalmem=1280), Dev("dev-1", count=100, totalmem=1280)],
         request=hami_request(3, 512, 0, 20), fails=["AllocatedCardsInsufficientRequest"]),
    case("TestDevices_Fit/fit success:  memory percentage",
         devices=[Dev("dev-0", used=20, count=100, totalmem=1280, usedcores=10)],
         request=hami_request(1, 0, 10, 20), want=["dev-0"]),
    case("TestDevices_Fit/fit fail:  CardNotHealth",
         devices=[Dev("dev-0", used=20, count=100, totalmem=1280, usedcores=10, health=False)],
         request=hami_request(1, 0, 10, 20), fails=["CardNotHealth"]),
    case("TestFit_DeviceCordon/cordoned device is skipped, healthy sibling still fits",
         devices=[Dev("dev-0", **CARD), Dev("dev-1", **CARD, cordoned=True)], request=hami_request(1, 64, 0, 50),
         want=["dev-0"]),
    case("TestFit_DeviceCordon/all devices cordoned fails with CardCordoned reason",
         devices=[Dev("dev-0", **CARD, cordoned=True), Dev("dev-1", **CARD, cordoned=True)],
         request=hami_request(1, 64, 0, 50), fails=["CardCordoned"]),
    case("TestFit_DeviceCordon/running pods on a cordoned device are unaffected",
         devices=[Dev("dev-0", **CARD), Dev("dev-1", **CARD, cordoned=True, used=1, usedcores=50, usedmem=64)],
         request=hami_request(1, 64, 0, 50), want=["dev-0"], keeps={"dev-1": (1, 64, 500)}),
    case("TestFit_DeviceCordon/no annotation or no node info means nothing cordoned",
         devices=[Dev("dev-0", **CARD), Dev("dev-1", **CARD)], request=hami_request(1, 64, 0, 50), want=["dev-1"]),
    case("TestFit_NumaSwitching/numa-bind takes the first NUMA node with enough GPUs",
         devices=[Dev("dev-0", numa=1, totalmem=8192), Dev("dev-1", numa=1, totalmem=8192),
                  Dev("dev-2", numa=0, totalmem=8192)],
         request=hami_request(2, 100, cores=10), annotations={"nvidia.com/numa-bind": "true"},
         want=["dev-1", "dev-0"]),
    case("TestFit_MutexPolicy/mutex skips the used device",
         devices=[Dev("used", used=1, totalmem=8192), Dev("idle", totalmem=8192)],
         request=hami_request(1, 100, cores=10), annotations={"hami.io/gpu-scheduler-policy": "mutex"},
         want=["idle"]),
    case("TestFit_MutexPolicy/mutex cannot satisfy 2 cards when only one device is idle",
         devices=[Dev("used", used=1, totalmem=8192), Dev("idle", totalmem=8192)],
         request=hami_request(2, 100, cores=10), annotations={"hami.io/gpu-scheduler-policy": "mutex"},
         fails=["ExclusiveDeviceAllocateConflict"]),
]


@pytest.mark.parametrize("c", params(FIT))
def test_fit(c: Case) -> None:
    state = check_fit(c)
    for uuid, (tasks, mem, core) in c.get("keeps", {}).items():
        j = state.dev_uuid[0].index(uuid)
        assert (state.dev_tasks[0, j], state.dev_mem_used[0, j], state.dev_core_used[0, j]) == (tasks, mem, core)


def test_request_type_the_node_lacks() -> None:
    """TestDevices_Fit/fit fail: type mismatch: a request of another device type fits no NVIDIA card."""
    d = schedule(state_of({"node-1": [Dev("dev-0", **CARD)]}), request_pod([hami_request(1, 512, 0, 50, "hygon")]))
    assert not d.ok and "no node has hygon devices" in d.message()


THREE = [Dev(f"dev-{k}", totalmem=8192) for k in range(3)]
PAIRS_3 = {"dev-0": {"dev-1": 100, "dev-2": 200}, "dev-1": {"dev-0": 100, "dev-2": 150},
           "dev-2": {"dev-0": 200, "dev-1": 150}}

TOPOLOGY = [
    case("TestFit_TopologyExactMatch/two GPUs, two candidates", devices=THREE[:2], pairs={}, nums=2,
         want={"dev-0", "dev-1"}),
    case("TestFit_TopologyWorstSingleCard/one GPU takes the worst linked", devices=THREE, pairs=PAIRS_3, nums=1,
         want={"dev-1"}),
    case("TestFit_TopologyBestCombination/two GPUs take the best linked pair", devices=THREE, pairs=PAIRS_3, nums=2,
         want={"dev-0", "dev-2"}),
    case("TestFit_TopologyBestCombinationZeroScores/any pair", devices=THREE,
         pairs={k: {p: 0 for p in PAIRS_3 if p != k} for k in PAIRS_3}, nums=2, count=2),
    case("TestFit_TopologyNegativeScores/SingleGPU", devices=THREE,
         pairs={"dev-0": {"dev-1": -5, "dev-2": -3}, "dev-1": {"dev-0": -5, "dev-2": -1},
                "dev-2": {"dev-0": -3, "dev-1": -1}}, nums=1, want={"dev-0"}),
    case("TestFit_TopologyNegativeScores/MultiGPU", devices=THREE,
         pairs={"dev-0": {"dev-1": -5, "dev-2": -3}, "dev-1": {"dev-0": -5, "dev-2": -1},
                "dev-2": {"dev-0": -3, "dev-1": -1}}, nums=2, want={"dev-1", "dev-2"}),
]


@pytest.mark.parametrize("c", params(TOPOLOGY))
def test_topology_aware_fit(c: Case) -> None:
    state = state_of({"n": c["devices"]}, pair_scores={"n": c["pairs"]})
    pod = request_pod([hami_request(c["nums"], 100, cores=10)],
                      annotations={"hami.io/gpu-scheduler-policy": "topology-aware"})
    got = {u for u, _, _ in placed(schedule(state, pod))[0]}
    if "want" in c.data:
        assert got == c["want"]
    else:
        assert len(got) == c["count"]
