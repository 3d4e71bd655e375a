"""HAMi ``pkg/device/cambricon/device_test.go`` (v2.10.0): MLUs from node capacity, container requests
(``vmemory`` in 256 MiB units, ``vcore`` 100 when absent), the annotations written on the pod, and ``Fit``."""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.devices import VendorSettings
from gpucluster.model import DeviceRequest
from gpucluster.scheduler import Scheduler, binpack_spread_profile
from tests.conformance.hami.harness import (
    Case,
    Dev,
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

COUNT, MEM, CORE = "cambricon.com/mlu", "cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore"
# HAMi's tests name the count resource cambricon.com/mlu (the chart's default is cambricon.com/vmlu)
REG = registry(cambricon=VendorSettings(resource_count=COUNT))


def test_node_devices_from_capacity() -> None:
    """Test_GetNodeDevices/test with valid configuration: 1 vcore unit and 1 vmemory unit of capacity."""
    devs = REG.node_devices("test", {}, "node test", capacity={CORE: 1, MEM: 1})
    assert [(d.uuid, d.index, d.max_tasks, d.memory_mib, d.core_milli, d.model, d.numa, d.healthy, d.vendor)
            for d in devs] == [("test-cambricon-mlu-0", 0, 100, 25600, 1000, "MLU", 0, True, "cambricon")]


def mlu(count: int, mem: int = 0, pct: int | None = None, cores: int = 100) -> DeviceRequest:
    return DeviceRequest("cambricon", count, memory_mib=mem, memory_pct=pct, core_milli=cores * 10)


REQUESTS = [
    case("Test_MutateAdmission/set to resources limits", resources={"limits": {COUNT: "1"}}, want=mlu(1, pct=100)),
    case("Test_GenerateResourceRequests/don't set to limits and request", resources={"limits": {}, "requests": {}},
         want=None),
    case("Test_GenerateResourceRequests/resourcecoresname,resourcecountname and resourcememoryname set to limits "
         "and request", resources={"limits": {COUNT: "1", MEM: "1000", CORE: "2"},
                                   "requests": {COUNT: "1", MEM: "1000", CORE: "2"}}, want=mlu(1, 256000, cores=2)),
    case("Test_GenerateResourceRequests/resourcememoryname don't set to limits and requests",
         resources={"limits": {COUNT: "1", MEM: "1000"}, "requests": {COUNT: "1", MEM: "1000"}},
         want=mlu(1, 256000)),
    case("Test_GenerateResourceRequests/resourcecoresname don't set to limits and requests",
         resources={"limits": {COUNT: "1", CORE: "2"}, "requests": {COUNT: "1", CORE: "2"}},
         want=mlu(1, pct=100, cores=2)),
    case("Test_GenerateResourceRequests/memory overflowing int32 is rejected, not truncated to zero",
         differs="memory-out-of-range", resources={"limits": {COUNT: "1", MEM: "16Gi"}}, error="not bytes"),
    case("Test_GenerateResourceRequests/decimal-form memory request is rejected, not treated as zero",
         differs="memory-out-of-range", resources={"limits": {COUNT: "1", MEM: "16.0Gi"}}, error="not bytes"),
]


@pytest.mark.parametrize("c", params(REQUESTS))
def test_container_request(c: Case) -> None:
    check_request(c, REG)


PATCH = [
    case("Test_PatchAnnotations/exist device", pod=[{COUNT: 1, MEM: 1000, CORE: 1}],
         want={"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
               "hami.io/cambricon-mlu-devices-to-allocate": "device-0,MLU,256000,1:;",
               "hami.io/cambricon-mlu-devices-allocated": "device-0,MLU,256000,1:;"}),
    case("Test_PatchAnnotations/no device", pod=[{"cpu": "1"}], want={}),
    case("Test_PatchAnnotations/leading container without device", pod=[{}, {COUNT: 1, MEM: 1000, CORE: 1}],
         want={"CAMBRICON_DSMLU_ASSIGNED": "false", "CAMBRICON_DSMLU_PROFILE": "0_1_1000",
               "hami.io/cambricon-mlu-devices-to-allocate": ";device-0,MLU,256000,1:;",
               "hami.io/cambricon-mlu-devices-allocated": ";device-0,MLU,256000,1:;"}),
]


@pytest.mark.parametrize("c", params(PATCH))
def test_pod_annotations(c: Case) -> None:
    state = state_of({"node-1": [Dev("device-0", type="MLU", count=100, totalmem=512000)]})
    d = schedule(state, REG.parse_pod(manifest(c["pod"]), "case"))
    assert vgpu_annotation(d, REG) == c["want"]


TYPES = [
    case("Test_checkType/the same type", vendor="cambricon", fits=True),
    case("Test_checkType/the different type", vendor="hygon", fits=False),
]


@pytest.mark.parametrize("c", params(TYPES))
def test_request_type(c: Case) -> None:
    d = schedule(state_of({"n": [Dev("dev-0", type="MLU", count=100, totalmem=1024)]}),
                 request_pod([hami_request(1, 64, 0, 10, c["vendor"])]))
    assert d.ok == c["fits"]


FIT = fit_table("TestDevices_Fit", "MLU", "cambricon", mutex_count=100, uuid_key="cambricon.com")


@pytest.mark.parametrize("c", params(FIT))
def test_fit(c: Case) -> None:
    check_fit(c)


def test_use_mlutype_is_not_checked() -> None:
    """HAMi's Cambricon ``checkType`` accepts every MLU whatever ``cambricon.com/use-mlutype`` says
    (Test_checkType/the same type holds for any annotation); so does ours."""
    pod = request_pod([hami_request(1, 64, 0, 10, "cambricon")], annotations={"cambricon.com/use-mlutype": "370"})
    assert schedule(state_of({"n": [Dev("dev-0", type="MLU", count=100, totalmem=1024)]}), pod).ok


def test_add_resource_usage() -> None:
    """TestDevices_AddResourceUsage/test add resource usage: a placed pod adds one task, its cores and memory."""
    state = state_of({"n": [Dev("dev-0", type="MLU", count=100, totalmem=8192, usedcores=15, usedmem=2000)]})
    pod: Any = request_pod([hami_request(1, 1024, 0, 50, "cambricon")])
    assert Scheduler(state, binpack_spread_profile()).schedule_and_bind(pod).ok
    assert (state.dev_tasks[0, 0], state.dev_core_used[0, 0], state.dev_mem_used[0, 0]) == (1, 650, 3024)
