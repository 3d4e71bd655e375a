"""HAMi ``pkg/scheduler/scheduler_test.go`` (v2.10.0): ``Test_Filter``, the extender's filter end to end: which
node the pod goes to and which device HAMi's annotation names, under the four node x GPU policy pairs and with an
init container. (The same cases run on a real API server in ``tests/integration/test_k8s_extender.py``.)"""

from __future__ import annotations

import pytest

from tests.conformance.hami.harness import (
    HAMI_TEST_NAMES,
    Case,
    Dev,
    case,
    manifest,
    params,
    registry,
    schedule,
    state_of,
    vgpu_annotation,
)

REG = registry(HAMI_TEST_NAMES)

# node1: device1 holds pod1 (2000 MiB, 25 %); node2: device4 holds pod2 (6000 MiB, 75 %)
NODES = {
    "node1": [Dev("device1", used=1, usedmem=2000, usedcores=25), Dev("device2")],
    "node2": [Dev("device3"), Dev("device4", used=1, usedmem=6000, usedcores=75)],
}


def gpu(mem: int, cores: int) -> dict[str, int]:
    return {"hami.io/gpu": 1, "hami.io/gpucores": cores, "hami.io/gpumem": mem}


def policies(node: str, gpu_policy: str) -> dict[str, str]:
    return {"hami.io/node-scheduler-policy": node, "hami.io/gpu-scheduler-policy": gpu_policy}


FILTER = [
    case("Test_Filter/node use binpack gpu use binpack policy", annotations=policies("binpack", "binpack"),
         pod=[gpu(1000, 20)], node="node2", devices=["device4"]),
    case("Test_Filter/pod with init containers fits correctly using max resource logic (Binpack)",
         annotations=policies("binpack", "binpack"), init=[gpu(5000, 20)], pod=[gpu(4000, 20)], node="node2",
         devices=["device3"]),
    case("Test_Filter/node use binpack gpu use spread policy", annotations=policies("binpack", "spread"),
         pod=[gpu(1000, 20)], node="node2", devices=["device3", "device4"]),
    case("Test_Filter/node use spread gpu use binpack policy", annotations=policies("spread", "binpack"),
         pod=[gpu(1000, 20)], node="node1", devices=["device1"]),
    case("Test_Filter/node use spread gpu use spread policy", annotations=policies("spread", "spread"),
         pod=[gpu(1000, 20)], node="node1", devices=["device2"]),
]


@pytest.mark.parametrize("c", params(FILTER))
def test_filter(c: Case) -> None:
    pod = REG.parse_pod(manifest(c["pod"], init=c.get("init", ()), annotations=c["annotations"]), "case")
    d = schedule(state_of(NODES), pod)
    assert d.node == c["node"]
    text = vgpu_annotation(d, REG)["hami.io/vgpu-devices-to-allocate"]
    first = text.split(";")[0].split(":")[0].split(",")[0]  # HAMi's test reads the first container's device
    assert first in c["devices"]
