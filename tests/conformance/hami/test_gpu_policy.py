"""HAMi ``pkg/scheduler/policy/gpu_policy_test.go`` (v2.10.0): the order HAMi's ``Fit`` tries devices in
(``DeviceUsageList.Less`` under each GPU policy, NUMA binding and policy chains) and the device score
(``ComputeScore``, with per-pod weights).

``TestDeviceUsageList_Less``: ``Less(0, 1)`` true means device 0 sorts first, so Fit (which walks the sorted list
from its end) tries device 1 first; false means device 0 is tried first (every false case here is strict).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.devices.hami import ScoringWeights
from gpucluster.scheduler.plugins.policy import hami_device_scores, hami_try_order
from tests.conformance.hami.harness import (
    Case,
    Dev,
    case,
    hami_request,
    params,
    placed,
    request_pod,
    schedule,
    state_of,
)


def d(score: float, numa: int = 0, used: int = 0, index: int = 0) -> dict[str, float]:
    return {"score": score, "numa": numa, "used": used, "index": index}


LESS = [
    case("TestDeviceUsageList_Less/Binpack policy with same Numa", policy="binpack",
         devs=[d(10, 0, 10), d(20, 0, 20)], less=True),
    case("TestDeviceUsageList_Less/Binpack: score primary, lower score sorts first across NUMA", policy="binpack",
         devs=[d(10, 1, 10), d(20, 0, 20)], less=True),
    case("TestDeviceUsageList_Less/Binpack: score primary, higher score sorts last even on lower NUMA",
         policy="binpack", devs=[d(10, 0, 10), d(20, 1, 20)], less=True),
    case("TestDeviceUsageList_Less/Binpack: NUMA tiebreaker when scores equal", policy="binpack",
         devs=[d(15, 0), d(15, 1)], less=True),
    case("TestDeviceUsageList_Less/Binpack: score primary over NUMA, high-NUMA high-score sorts last",
         policy="binpack", devs=[d(20, 1), d(10, 0)], less=False),
    case("TestDeviceUsageList_Less/Spread: score primary, higher score sorts first", policy="spread",
         devs=[d(10, 0, 10), d(20, 0, 20)], less=False),
    case("TestDeviceUsageList_Less/Spread: score primary, lower score sorts last across NUMA", policy="spread",
         devs=[d(10, 1, 10), d(20, 0, 20)], less=False),
    case("TestDeviceUsageList_Less/Spread: score primary over NUMA, high-NUMA high-score sorts first",
         policy="spread", devs=[d(20, 1), d(10, 0)], less=True),
    case("TestDeviceUsageList_Less/Spread: NUMA tiebreaker when scores equal", policy="spread",
         devs=[d(15, 0), d(15, 1)], less=True),
    case("TestDeviceUsageList_Less/Binpack+NumaBind: NUMA primary, higher NUMA sorts first regardless of Score",
         policy="binpack", numa_bind=True, devs=[d(5, 1), d(99, 0)], less=True),
    case("TestDeviceUsageList_Less/Binpack+NumaBind: same NUMA falls back to lower Score first", policy="binpack",
         numa_bind=True, devs=[d(10, 0), d(20, 0)], less=True),
    case("TestDeviceUsageList_Less/Spread+NumaBind: NUMA primary, lower NUMA sorts first regardless of Score",
         policy="spread", numa_bind=True, devs=[d(5, 0), d(99, 1)], less=True),
    case("TestDeviceUsageList_Less/Spread+NumaBind: same NUMA falls back to higher Score first", policy="spread",
         numa_bind=True, devs=[d(20, 0), d(10, 0)], less=True),
    case("TestDeviceUsageList_Less/Mutex: busy GPU sorts before idle GPU", policy="mutex",
         devs=[d(0, 0, 2), d(0, 0, 0)], less=True),
    case("TestDeviceUsageList_Less/Mutex: idle GPU sorts after busy GPU", policy="mutex",
         devs=[d(0, 0, 0), d(0, 0, 1)], less=False),
    case("TestDeviceUsageList_Less/Mutex: NUMA tiebreaker when both idle", policy="mutex",
         devs=[d(0, 0, 0), d(0, 1, 0)], less=True),
    case("TestDeviceUsageList_Less/Bare numa: NUMA is the sort key regardless of score", policy="numa",
         devs=[d(99, 0), d(5, 1)], less=True),
    case("TestDeviceUsageList_Less/Bare numa: same NUMA falls to deterministic Index tiebreak", policy="numa",
         devs=[d(10, 0, index=3), d(20, 0, index=1)], less=False),
    case("TestDeviceUsageList_Less/Chain binpack,numa: score primary, numa tiebreak when scores equal",
         policy="binpack,numa", devs=[d(15, 0), d(15, 1)], less=True),
    case("TestDeviceUsageList_Less/Chain spread,numa: score primary, numa tiebreak when scores equal",
         policy="spread,numa", devs=[d(15, 0), d(15, 1)], less=True),
    case("TestDeviceUsageList_Less/Chain numa,spread: numa primary regardless of score", policy="numa,spread",
         devs=[d(5, 1), d(99, 0)], less=False),
    case("TestDeviceUsageList_Less/Chain numa,spread: same NUMA falls back to spread (higher score first)",
         policy="numa,spread", devs=[d(20, 0), d(10, 0)], less=True),
    case("TestDeviceUsageList_Less/Chain mutex,spread: mutex is a Fit() filter, not a sort key; spread decides order",
         policy="mutex,spread", devs=[d(10, 0, 5), d(20, 0, 0)], less=False),
    case("TestDeviceUsageList_Less/Chain with only filter tokens (mutex,topology-aware) falls back to spread",
         policy="mutex,topology-aware", devs=[d(10, 0), d(20, 0)], less=False),
    case("TestDeviceUsageList_Less/Chain binpack,numa: deterministic Index tiebreak when score and numa both tie",
         policy="binpack,numa", devs=[d(10, 0, index=5), d(10, 0, index=2)], less=False),
    case("TestDeviceUsageList_Less/Chain binpack,spread + NumaBind: numa forced primary to keep groups contiguous",
         policy="binpack,spread", numa_bind=True, devs=[d(99, 0), d(5, 1)], less=True),
    case("TestDeviceUsageList_Less/Chain spread,numa + NumaBind: numa moved to front, spread breaks same-NUMA ties",
         policy="spread,numa", numa_bind=True, devs=[d(20, 0), d(10, 0)], less=True),
]


@pytest.mark.parametrize("c", params(LESS))
def test_try_order(c: Case) -> None:
    devs = c["devs"]
    order = hami_try_order(np.array([x["score"] for x in devs], np.float32), [int(x["numa"]) for x in devs],
                           [int(x["used"]) for x in devs], [int(x["index"]) for x in devs],
                           tuple(c["policy"].split(",")), numa_bind=c.get("numa_bind", False))
    assert order == ([1, 0] if c["less"] else [0, 1])


def score(count: int, used: int, totalcore: int, usedcores: int, totalmem: int, usedmem: int, core_ask: int = 0,
          mem_ask: int = 0, asks: int = 1, weights: ScoringWeights | None = None) -> float:
    one = np.array
    return float(hami_device_scores(one([count]), one([used]), one([totalcore]), one([usedcores]), one([totalmem]),
                                    one([usedmem]), core_ask, mem_ask, asks, weights or ScoringWeights())[0])


SCORES = [
    case("TestComputeScore/Zero capacity device returns score 0 without panic",
         args=(0, 0, 0, 0, 0, 0), kw={"asks": 0}, want=0.0),
    case("TestComputeScore/Partial zero capacity (Count=0) returns score 0 without panic",
         args=(0, 0, 8, 0, 4096, 0), kw={"asks": 0}, want=0.0),
    case("TestComputeScore/ContainerDeviceRequests has no data", args=(10, 2, 4, 1, 8192, 2048), kw={"asks": 0},
         want=7.0),
    case("TestComputeScore/Filter other device types and ignore Nums for slots", args=(10, 2, 4, 1, 8192, 2048),
         kw={"core_ask": 1, "mem_ask": 1024}, want=11.75),
    case("TestComputeScore/MemPercentagereq calculation evaluates correctly", args=(10, 0, 10, 0, 10000, 0),
         kw={"core_ask": 2, "mem_ask": 10000 * 50 // 100}, want=8.0),
    case("TestComputeScore/Filter other device types and aggregate same device types", args=(10, 0, 10, 0, 10000, 0),
         kw={"core_ask": 1 + 2, "mem_ask": 10000 * 10 // 100 + 10000 * 20 // 100, "asks": 2}, want=8.0),
    case("TestComputeScoreWithResourceWeights/default weights preserve current score (gpu-a)",
         args=(10, 1, 100, 90, 100, 10), kw={"mem_ask": 40}, want=16.0),
    case("TestComputeScoreWithResourceWeights/default weights preserve current score (gpu-b)",
         args=(10, 7, 100, 10, 100, 20), kw={"mem_ask": 40}, want=15.0),
    case("TestComputeScoreWithResourceWeights/memory weight changes the device preference (gpu-a)",
         args=(10, 1, 100, 90, 100, 10), kw={"mem_ask": 40, "weights": ScoringWeights(1, 1, 3)}, want=26.0),
    case("TestComputeScoreWithResourceWeights/memory weight changes the device preference (gpu-b)",
         args=(10, 7, 100, 10, 100, 20), kw={"mem_ask": 40, "weights": ScoringWeights(1, 1, 3)}, want=27.0),
    case("TestComputeScoreWithResourceWeights/core weight can independently change the device preference (gpu-a)",
         args=(10, 1, 100, 90, 100, 10), kw={"mem_ask": 40, "weights": ScoringWeights(1, 3, 1)}, want=34.0),
    case("TestComputeScoreWithResourceWeights/core weight can independently change the device preference (gpu-b)",
         args=(10, 7, 100, 10, 100, 20), kw={"mem_ask": 40, "weights": ScoringWeights(1, 3, 1)}, want=17.0),
]


@pytest.mark.parametrize("c", params(SCORES))
def test_device_score(c: Case) -> None:
    assert score(*c["args"], **c["kw"]) == np.float32(c["want"])


GPU_A = Dev("gpu-a", used=1, usedcores=90, totalmem=100, usedmem=10)
GPU_B = Dev("gpu-b", used=7, usedcores=10, totalmem=100, usedmem=20)

WEIGHTED_CHOICE = [
    case("TestComputeScoreWithResourceWeights/memory weight changes the device preference (binpack)",
         devs=[GPU_A, GPU_B], policy="binpack", weights="slot=1,core=1,memory=3", want="gpu-b"),
    case("TestComputeScoreWithResourceWeights/memory weight changes the device preference (spread)",
         devs=[GPU_A, GPU_B], policy="spread", weights="slot=1,core=1,memory=3", want="gpu-a"),
    case("TestComputeScoreWithResourceWeights/core weight can independently change the device preference",
         devs=[GPU_A, GPU_B], policy="binpack", weights="slot=1,core=3,memory=1", want="gpu-a"),
    case("TestComputeScoreWithResourceWeights/NUMA ordering remains independent from weighted score",
         devs=[GPU_A, Dev("gpu-b", used=7, usedcores=10, totalmem=100, usedmem=20, numa=1)], policy="binpack",
         weights="slot=1,core=1,memory=3", numa_bind=True, want="gpu-a"),
]


@pytest.mark.parametrize("c", params(WEIGHTED_CHOICE))
def test_weighted_choice(c: Case) -> None:
    annotations = {"hami.io/gpu-scheduler-policy": c["policy"], "hami.io/device-scoring-weights": c["weights"]}
    if c.get("numa_bind"):
        annotations["nvidia.com/numa-bind"] = "true"
    pod = request_pod([hami_request(1, pct=40)], annotations=annotations)
    assert placed(schedule(state_of({"n": c["devs"]}), pod))[0][0][0] == c["want"]
