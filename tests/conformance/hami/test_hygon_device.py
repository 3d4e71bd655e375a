"""HAMi ``pkg/device/hygon/device_test.go`` (v2.10.0): the ``use-dcutype`` / ``nouse-dcutype`` check against the
full registered type, DCUs from the ``hami.io/node-dcu-register`` annotation, container requests (``dcucores``
100 when absent), the annotations written on the pod, and ``Fit``."""

from __future__ import annotations

import pytest

from gpucluster.devices import DeviceInputError, VendorSettings
from gpucluster.model import DeviceRequest
from gpucluster.scheduler import Scheduler, binpack_spread_profile
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
    registry,
    request_pod,
    schedule,
    state_of,
    vgpu_annotation,
)
from tests.conformance.hami.vendor_fit import fit_table

COUNT, MEM, CORE = "hygon.com/dcunum", "hygon.com/dcumem", "hygon.com/dcucores"
USE, NOUSE = "hygon.com/use-dcutype", "hygon.com/nouse-dcutype"
REG = registry()

TYPES = [
    case("Test_checkDCUtype/exist one dcu in use type", annotations={USE: "dcu"}, type="dcu", fits=True),
    case("Test_checkDCUtype/the different of dcu in use type", annotations={USE: "dcu"}, type="test", fits=False),
    case("Test_checkDCUtype/no dcu in use annotation", annotations={}, type="dcu", fits=True),
    case("Test_checkDCUtype/exist multi dcu in use type", annotations={USE: "dcu,test"}, type="dcu", fits=True),
    case("Test_checkDCUtype/exist one dcu no use type", annotations={NOUSE: "dcu"}, type="dcu", fits=False),
    case("Test_checkDCUtype/exist multi dcu no use type", annotations={NOUSE: "test,dcu"}, type="test", fits=False),
    case("Test_checkDCUtype/the different of dcu no use type", annotations={NOUSE: "dcu"}, type="test", fits=True),
    case("Test_checkDCUtype/empty use type annotation is no constraint", annotations={USE: ""}, type="dcu",
         fits=True),
    case("Test_checkDCUtype/empty nouse type annotation excludes nothing", annotations={NOUSE: ""}, type="dcu",
         fits=True),
    case("Test_checkDCUtype/whitespace-only nouse type annotation excludes nothing", annotations={NOUSE: "   "},
         type="dcu", fits=True),
    case("Test_checkType/the same type", annotations={USE: "DCU"}, type="DCU", fits=True),
]


@pytest.mark.parametrize("c", params(TYPES))
def test_dcu_type(c: Case) -> None:
    state = state_of({"n": [Dev("dcu-0", type=c["type"], kind="hygon")]})
    d = schedule(state, request_pod([hami_request(1, 100, cores=10, vendor="hygon")], annotations=c["annotations"]))
    if c["fits"]:
        assert d.ok, d.message()
    else:
        assert_rejected_for(d, ["CardTypeMismatch"])


def test_request_of_another_type() -> None:
    """Test_checkType/the different type: a request that is not a DCU's takes no DCU."""
    d = schedule(state_of({"n": [Dev("dcu-0", type="DCU")]}), request_pod([hami_request(1, 100, vendor="nvidia")]))
    assert not d.ok and "no node has nvidia devices" in d.message()


REGISTER = [
    case("Test_GetNodeDevices/no annotation", annotations={}, want=[]),
    case("Test_GetNodeDevices/exist dcu device", annotations={"hami.io/node-dcu-register": "test-0,1,1024,100,DCU,0,true,0,test:"},
         want=[("test-0", 1, 1024, 1000, "DCU", 0, True, "test")]),
    case("Test_GetNodeDevices/no dcu device", annotations={"hami.io/node-dcu-register": ":"}, want=[]),
    case("Test_GetNodeDevices/node annotations not decode successfully", annotations={"hami.io/node-dcu-register": ""},
         want=[]),
    case("Test_GetNodeDevices/dcu device length less than 7", differs="bad-register-annotation",
         annotations={"hami.io/node-dcu-register": "test-0,1,1024,100,DCU:"}, error="expected 'uuid,count,devmem"),
]


@pytest.mark.parametrize("c", params(REGISTER))
def test_register_annotation(c: Case) -> None:
    if "error" in c.data:
        with pytest.raises(DeviceInputError, match=c["error"]):
            REG.node_devices("n", c["annotations"], "node n")
        return
    devs = REG.node_devices("n", c["annotations"], "node n")
    assert [(d.uuid, d.max_tasks, d.memory_mib, d.core_milli, d.type_name, d.numa, d.healthy, d.mode)
            for d in devs] == c["want"]


def dcu(count: int, mem: int = 0, pct: int | None = None, cores: int = 100) -> DeviceRequest:
    return DeviceRequest("hygon", count, memory_mib=mem, memory_pct=pct, core_milli=cores * 10)


REQUESTS = [
    case("Test_GenerateResourceRequests/don't set to limits and request", resources={"limits": {}, "requests": {}},
         want=None),
    case("Test_GenerateResourceRequests/dcuResourceCount,dcuesourceMem and dcuResourceCores set to limits and request",
         resources={"limits": {COUNT: "1", CORE: "1", MEM: "1024"}, "requests": {COUNT: "1", CORE: "1", MEM: "1024"}},
         want=dcu(1, 1024, cores=1)),
    case("Test_GenerateResourceRequests/dcuResourceMem,dcuResourceCores don't set limit and dcuResourceCount set to "
         "limits and request", resources={"limits": {COUNT: "1"}, "requests": {COUNT: "1", CORE: "1", MEM: "1024"}},
         want=dcu(1, 1024, cores=1)),
    case("Test_GenerateResourceRequests/dcuResourceMem don't set limit and request,dcuResourceCores don't set limit "
         "and dcuResourceCount set to limits and request",
         resources={"limits": {COUNT: "1"}, "requests": {COUNT: "1", CORE: "1"}}, want=dcu(1, pct=100, cores=1)),
    case("Test_GenerateResourceRequests/oversized dcu memory request exceeds int32 range",
         differs="memory-out-of-range", resources={"limits": {COUNT: "1", MEM: "16Gi"}}, error="not bytes"),
    case("Test_GenerateResourceRequests_OutOfRangeValues/oversized dcu count exceeds int32 range",
         differs="memory-out-of-range", resources={"limits": {COUNT: "2200000000"}}, error="must be at most 128"),
    case("Test_GenerateResourceRequests_OutOfRangeValues/negative dcu cores", differs="memory-out-of-range",
         resources={"limits": {COUNT: "1", CORE: "-1"}}, error="must not be negative"),
    case("Test_GenerateResourceRequests_MemoryFactorOverflow/3000000 x 1024 overflows int32",
         differs="memory-out-of-range", settings={"memory_factor": 1024},
         resources={"limits": {COUNT: "1", MEM: "3000000"}}, error="must be at most 16,384"),
]


@pytest.mark.parametrize("c", params(REQUESTS))
def test_container_request(c: Case) -> None:
    check_request(c, registry(hygon=VendorSettings(**c.get("settings", {}))))


PATCH = [
    case("Test_PatchAnnotations/exist device", pod=[{COUNT: 1, MEM: 2048, CORE: 1}],
         want={"hami.io/dcu-devices-to-allocate": "test1,DCU,2048,1:;",
               "hami.io/dcu-devices-allocated": "test1,DCU,2048,1:;"}),
    case("Test_PatchAnnotations/no device", pod=[{"cpu": "1"}], want={}),
]


@pytest.mark.parametrize("c", params(PATCH))
def test_pod_annotations(c: Case) -> None:
    state = state_of({"node-1": [Dev("test1", type="DCU", totalmem=4096)]})
    d = schedule(state, REG.parse_pod(manifest(c["pod"]), "case"))
    assert vgpu_annotation(d, REG) == c["want"]


FIT = fit_table("TestDevices_Fit", "DCU", "hygon", mutex_count=2, uuid_key="hygon.com")


@pytest.mark.parametrize("c", params(FIT))
def test_fit(c: Case) -> None:
    check_fit(c)


def test_add_resource_usage() -> None:
    """TestDevices_AddResourceUsage: a placed pod adds one task, its cores and memory to the DCU."""
    state = state_of({"n": [Dev("dev-0", type="DCU", totalmem=8192, usedcores=15, usedmem=2000)]})
    assert Scheduler(state, binpack_spread_profile()).schedule_and_bind(
        request_pod([hami_request(1, 1024, 0, 50, "hygon")])).ok
    assert (state.dev_tasks[0, 0], state.dev_core_used[0, 0], state.dev_mem_used[0, 0]) == (1, 650, 3024)
