"""HAMi ``pkg/scheduler/score_test.go`` (v2.10.0): node scoring and device fitting through ``calcScore``,
``Fit`` of one container request, ``fitInDevices``, per-pod scoring weights and topology-aware fitting.

Each case runs the pod through our scheduler with HAMi's model (node binpack, the GPU policy of the case's
device list), once per node HAMi scored, and compares which devices it gets, with how much memory and compute,
and the node's HAMi score; or that the node is rejected, for HAMi's reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.devices import DeviceInputError
from gpucluster.scheduler.plugins.policy import hami_node_scores
from tests.conformance.hami.harness import (
    HAMI_TEST_NAMES,
    Case,
    Dev,
    assert_rejected_for,
    case,
    hami_request,
    manifest,
    params,
    placed,
    registry,
    request_pod,
    schedule,
    state_of,
    vgpu_annotation,
)

REG = registry(HAMI_TEST_NAMES)


def gpu(mem: int, cores: int, n: int = 1) -> dict[str, int]:
    return {"hami.io/gpu": n, "hami.io/gpucores": cores, "hami.io/gpumem": mem}


BUSY = {"used": 5, "usedmem": 4000, "usedcores": 50}
"""A device half used by earlier pods (the cases' "having use 50%")."""

CALC_SCORE = [
    case("Test_calcScore/one node one device one pod one container use one device.",
         nodes={"node1": [Dev("uuid1")]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid1", 1000, 30)]], 0.0)}),
    case("Test_calcScore/one node one device one pod one container use one device,but this device before having use.",
         nodes={"node1": [Dev("uuid1", **BUSY)]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid1", 1000, 30)]], 15.0)}),
    case("Test_calcScore/one node two device one pod one container use one device",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2")]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid2", 1000, 30)]], 0.0)}),
    case("Test_calcScore/init container requests more memory than any single device has (should filter node)",
         nodes={"node1": [Dev("uuid1", usedmem=7500), Dev("uuid2", usedmem=7500)]}, gpu_policy="binpack",
         init=[gpu(4000, 30)], pod=[gpu(100, 30)], fails={"node1": ["CardInsufficientMemory"]}),
    case("Test_calcScore/one node two device one pod one container use one device,but having use 50%",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2", **BUSY)]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid1", 1000, 30)]], 7.5)}),
    case("Test_calcScore/one node two device one pod one container use two device",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2")]}, pod=[gpu(1000, 30, n=2)],
         want={"node1": ([[("uuid2", 1000, 30), ("uuid1", 1000, 30)]], 0.0)}),
    case("Test_calcScore/one node two device one pod one container use two device,but this two device before having use.",
         nodes={"node1": [Dev("uuid1", **BUSY), Dev("uuid2", **BUSY)]}, pod=[gpu(1000, 30, n=2)],
         want={"node1": ([[("uuid2", 1000, 30), ("uuid1", 1000, 30)]], 15.0)}),
    case("Test_calcScore/two node per node having one device one pod one container use one device",
         nodes={"node1": [Dev("uuid1")], "node2": [Dev("uuid2")]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid1", 1000, 30)]], 0.0), "node2": ([[("uuid2", 1000, 30)]], 0.0)}),
    case("Test_calcScore/two node per node having one device one pod one container use one device,one device having use 50%",
         nodes={"node1": [Dev("uuid1", **BUSY)], "node2": [Dev("uuid2")]}, pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid1", 1000, 30)]], 15.0), "node2": ([[("uuid2", 1000, 30)]], 0.0)},
         chosen="node1"),
    case("Test_calcScore/one node two device one pod two container use two device",
         nodes={"node1": [Dev("uuid1")]}, gpu_policy="binpack", pod=[gpu(1000, 30), {}],
         want={"node1": ([[("uuid1", 1000, 30)], []], 0.0)}),
    case("Test_calcScore/one node one device one pod two container, the second container use device",
         nodes={"node1": [Dev("uuid1")]}, gpu_policy="binpack", pod=[{}, gpu(1000, 30)],
         want={"node1": ([[], [("uuid1", 1000, 30)]], 0.0)}),
    case("Test_calcScore/one node one device one pod with three containers, middle container uses one device.",
         nodes={"node1": [Dev("uuid1")]}, pod=[{}, gpu(1000, 30), {}],
         want={"node1": ([[], [("uuid1", 1000, 30)], []], 0.0)}),
    case("Test_calcScore/one node two device one pod two containers use two device with spread,should not in same device.",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2")]}, pod=[gpu(8000, 30), gpu(1000, 30)],
         want={"node1": ([[("uuid2", 8000, 30)], [("uuid1", 1000, 30)]], 0.0)}),
    case("Test_calcScore/one node one device one pod one container use one device and not enough resource,node should be failed.",
         nodes={"node1": [Dev("uuid1", totalmem=50)]}, pod=[gpu(1000, 30)],
         fails={"node1": ["CardInsufficientMemory"]}),
    case("Test_calcScore/race condition test for failedNodes map with two nodes failing",
         nodes={"node1": [Dev("uuid1", totalmem=50)], "node2": [Dev("uuid2", totalmem=50)]}, pod=[gpu(1000, 30)],
         fails={"node1": ["CardInsufficientMemory"], "node2": ["CardInsufficientMemory"]}),
    case("Test_calcScore/two init containers, first has no device request, second does - tests slot alignment (issue #1667)",
         nodes={"node1": [Dev("uuid1")]}, gpu_policy="binpack", init=[{}, gpu(1000, 30)], pod=[gpu(1000, 30)],
         want={"node1": ([[], [("uuid1", 1000, 30)], [("uuid1", 1000, 30)]], 0.0)}),
    case("Test_calcScore/one node two devices, pod has one init container (uses 1 device) and one regular container "
         "(uses 1 device) - tests InitContainer capacity reset",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2")]}, gpu_policy="binpack", init=[gpu(1000, 30)],
         pod=[gpu(1000, 30)], want={"node1": ([[("uuid2", 1000, 30)], [("uuid2", 1000, 30)]], 0.0)}),
    case("Test_calcScore/init container requests MORE than app container - needsInitClone=true path",
         nodes={"node1": [Dev("uuid1"), Dev("uuid2")]}, gpu_policy="binpack", init=[gpu(1000, 30, n=2)],
         pod=[gpu(1000, 30)],
         want={"node1": ([[("uuid2", 1000, 30), ("uuid1", 1000, 30)], [("uuid2", 1000, 30)]], 0.0)}),
    case("Test_calcScore/init container requests more cores than any single device has (should filter node)",
         nodes={"node1": [Dev("uuid1", usedcores=80), Dev("uuid2", usedcores=80)]}, gpu_policy="binpack",
         init=[gpu(1000, 30)], pod=[gpu(1000, 10)], fails={"node1": ["CardInsufficientCore"]}),
    case("Test_calcScore/two node per node having one device one pod two container use one device",
         nodes={"node1": [Dev("uuid1")], "node2": [Dev("uuid2")]}, pod=[gpu(1000, 30), gpu(1000, 40)],
         want={"node1": ([[("uuid1", 1000, 30)], [("uuid1", 1000, 40)]], 0.0),
               "node2": ([[("uuid2", 1000, 30)], [("uuid2", 1000, 40)]], 0.0)}),
]


@pytest.mark.parametrize("c", params(CALC_SCORE))
def test_calc_score(c: Case) -> None:
    pod = REG.parse_pod(manifest(c["pod"], init=c.get("init", ())), "case")
    state = state_of(c["nodes"])
    policy = c.get("gpu_policy", "spread")
    for node, (devices, score) in c.get("want", {}).items():
        d = schedule(state, pod, gpu_policy=policy, node=node)
        assert d.ok, d.message()
        assert placed(d) == devices
        i = state.node_index[node]
        assert hami_node_scores(state.snapshot(), np.array([i]))[0] == np.float32(score)
    for node, hami_reasons in c.get("fails", {}).items():
        assert_rejected_for(schedule(state, pod, gpu_policy=policy, node=node), hami_reasons)
    if "chosen" in c.data:
        assert schedule(state, pod, gpu_policy=policy).node == c["chosen"]


def dev(id_: str, numa: int, used: int, count: int, totalmem: int, usedmem: int, usedcores: int,
        totalcore: int, type_: str = "NVIDIA") -> Dev:
    """HAMi's ``makeDevice(id, numa, Type, used, count, totalmem, usedmem, usedcores, totalcore)``."""
    return Dev(id_, used=used, count=count, totalmem=totalmem, usedmem=usedmem, usedcores=usedcores,
               totalcore=totalcore, numa=numa, type=type_)


SMALL = {"numa": 1, "used": 1, "count": 4, "totalmem": 8192, "usedmem": 2048, "usedcores": 1, "totalcore": 4}

FIT_ONE = [
    case("Test_fitInCertainDevice/allocated device", devices=[Dev("test-0", **SMALL)],
         request=hami_request(1, 1024, 100, 1), want=[("test-0", 1024, 1)]),
    case("Test_fitInCertainDevice/device count less than device used", devices=[Dev("test-0", **{**SMALL, "used": 5})],
         request=hami_request(1, 1024, 100, 1), fails=["CardTimeSlicingExhausted"]),
    case("Test_fitInCertainDevice/core limit exceed 100", devices=[Dev("test-0", **SMALL)],
         request=hami_request(1, 1024, 100, 200), fails=["CardInsufficientCore"]),
    case("Test_fitInCertainDevice/card insufficient remaining memory",
         devices=[Dev("test-0", **{**SMALL, "totalmem": 8000, "usedmem": 8000})],
         request=hami_request(1, 0, 100, 100), fails=["CardInsufficientMemory"]),
    case("Test_fitInCertainDevice/the container wants exclusive access to an entire card, but the card is already in use",
         devices=[Dev("test-0", **{**SMALL, "usedcores": 0, "totalcore": 100})],
         request=hami_request(1, 100, 100, 100), fails=["ExclusiveDeviceAllocateConflict"]),
    case("Test_fitInCertainDevice/can't allocate core=0 job to an already full GPU",
         devices=[Dev("test-0", **{**SMALL, "totalcore": 1})], request=hami_request(1, 1024, 100, 0),
         fails=["CardComputeUnitsExhausted"]),
    case("Test_fitInCertainDevice/card uuid don't match", devices=[Dev("test-0", **SMALL)],
         request=hami_request(1, 1024, 100, 1), annotations={"nvidia.com/use-gpuuuid": "abc"},
         fails=["CardUuidMismatch"]),
    case("Test_fitInCertainDevice/numa not fit",
         devices=[dev("test-0", 0, 1, 4, 8192, 2048, 1, 4), dev("test-1", 1, 1, 4, 8192, 2048, 1, 4)],
         request=hami_request(2, 1024, 100, 1),
         annotations={"nvidia.com/use-gputype": "NVIDIA", "nvidia.com/numa-bind": "true"},
         fails=["NumaNotFit", "AllocatedCardsInsufficientRequest"]),
    case("Test_fitInCertainDevice/test device kind of not fit reason",
         # HAMi's list also holds a Hygon and a MetaX device; getNodeResources leaves them out of NVIDIA's Fit
         devices=[dev("a", 0, 1, 4, 8192, 2048, 1, 100, "DCU"), dev("b", 1, 1, 4, 8192, 2048, 1, 100),
                  dev("q", 1, 1, 4, 8192, 2048, 1, 100), dev("i", 1, 1, 4, 8192, 2048, 1, 100),
                  dev("c", 1, 4, 4, 8192, 2048, 1, 100), dev("j", 1, 4, 4, 8192, 2048, 1, 100),
                  dev("u", 1, 4, 4, 8192, 2048, 1, 100), dev("l", 1, 4, 4, 8192, 2048, 1, 100),
                  dev("d", 1, 1, 4, 8192, 8048, 1, 100), dev("m", 1, 1, 4, 8192, 8048, 1, 100),
                  dev("e", 1, 1, 4, 8192, 2048, 90, 100)],
         request=hami_request(2, 1024, 100, 20), annotations={"nvidia.com/use-gpuuuid": "a,f,c,d,e,g,h,j,l,u,m"},
         fails=["CardUuidMismatch", "CardTimeSlicingExhausted", "CardInsufficientMemory", "CardInsufficientCore"]),
    case("Test_fitInDevices/all device score for one node",
         devices=[Dev("test-1", **SMALL), Dev("test-2", **SMALL)], request=hami_request(1, 1024, 100, 1),
         want=[("test-2", 1024, 1)]),
    case("Test_fitInDevices/request devices nums cannot exceed the total number of devices on the node",
         devices=[Dev("test-1", **SMALL)], request=hami_request(2, 1024, 100, 1), fails=["NodeInsufficientDevice"]),
]


@pytest.mark.parametrize("c", params(FIT_ONE))
def test_fit_one_request(c: Case) -> None:
    state = state_of({"node-1": c["devices"]})
    d = schedule(state, request_pod([c["request"]], annotations=c.get("annotations")))
    if "want" in c.data:
        assert placed(d) == [c["want"]]
    else:
        assert_rejected_for(d, c["fails"])


TYPE_NOT_FOUND = [
    case("Test_fitInCertainDevice/card type don't match"),
    case("Test_fitInDevices/device type the different from request type"),
]


@pytest.mark.parametrize("c", params(TYPE_NOT_FOUND))
def test_request_for_a_device_type_the_node_lacks(c: Case) -> None:
    # HAMi's request of type "test": ours is a request of a vendor the cluster has no device of
    state = state_of({"node-1": [Dev("test-0", **SMALL)]})
    d = schedule(state, request_pod([hami_request(1, 1024, 100, 1, vendor="hygon")]))
    assert not d.ok and "no node has hygon devices" in d.message()


def test_fit_in_devices_multi_type_partition() -> None:
    """Test_fitInDevices_MultiTypePartition: one container asking for two device types gets one device of each,
    each type's entry holding only its own device."""
    state = state_of({"node-1": [Dev("uuid-a", count=4, totalmem=8192), Dev("uuid-b", count=4, totalmem=8192,
                                                                           type="DCU")]})
    pod = request_pod([hami_request(1, 1024, 101, 1), hami_request(1, 1024, 101, 1, vendor="hygon")])
    d = schedule(state, pod)
    assert vgpu_annotation(d) == {
        "hami.io/vgpu-devices-to-allocate": "uuid-a,NVIDIA,1024,1:;",
        "hami.io/vgpu-devices-allocated": "uuid-a,NVIDIA,1024,1:;",
        "hami.io/dcu-devices-to-allocate": "uuid-b,DCU,1024,1:;",
        "hami.io/dcu-devices-allocated": "uuid-b,DCU,1024,1:;",
    }


WEIGHT_NODES = {"node1": [Dev("gpu-a", used=1, usedcores=90, totalmem=100, usedmem=10),
                          Dev("gpu-b", used=7, usedcores=10, totalmem=100, usedmem=20)]}
WEIGHTED = "slot=1,core=1,memory=3"

WEIGHTS = [
    case("TestCalcScoreUsesPodDeviceScoringWeights/default weights", init=False, weights="", policy="binpack",
         want="gpu-a"),
    case("TestCalcScoreUsesPodDeviceScoringWeights/slot=1,core=1,memory=3", init=False, weights=WEIGHTED,
         policy="binpack", want="gpu-b"),
    case("TestCalcScoreUsesPodDeviceScoringWeightsForInitContainers/default weights", init=True, weights="",
         policy="binpack", want="gpu-a"),
    case("TestCalcScoreUsesPodDeviceScoringWeightsForInitContainers/slot=1,core=1,memory=3", init=True,
         weights=WEIGHTED, policy="binpack", want="gpu-b"),
    case("TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker/default weights", init=False, weights="",
         policy="topology-aware", want="gpu-b"),
    case("TestCalcScoreUsesDeviceScoringWeightsAsTopologyTieBreaker/slot=1,core=1,memory=3", init=False,
         weights=WEIGHTED, policy="topology-aware", want="gpu-a"),
]


@pytest.mark.parametrize("c", params(WEIGHTS))
def test_device_scoring_weights(c: Case) -> None:
    pairs = {"node1": {"gpu-a": {"gpu-b": 1}, "gpu-b": {"gpu-a": 1}}}
    state = state_of(WEIGHT_NODES, pair_scores=pairs)
    annotations = {"hami.io/gpu-scheduler-policy": c["policy"]}
    if c["weights"]:
        annotations["hami.io/device-scoring-weights"] = c["weights"]
    request = [hami_request(1, pct=40)]
    pod = request_pod([], init=[request], annotations=annotations) if c["init"] else \
        request_pod(request, annotations=annotations)
    got = placed(schedule(state, pod))
    assert got[0] == [(c["want"], 40, 0)]
    if c["init"]:
        assert got[1] == []


def test_invalid_device_scoring_weights_are_refused() -> None:
    """TestCalcScoreRejectsInvalidDeviceScoringWeights: the pod is refused, naming the negative weight."""
    with pytest.raises(DeviceInputError, match='"core" weight must not be negative'):
        REG.parse_pod(manifest([gpu(1000, 30)], annotations={"hami.io/device-scoring-weights": "slot=1,core=-1,memory=3"}),
                      "case")


TOPOLOGY = [
    case("Test_Nvidia_GPU_Topology/test nvidia gpu topology-aware", nums=3,
         scores={"a": {"b": 1, "c": 1, "d": 1, "e": 1, "f": 100}, "b": {"a": 1, "c": 1, "d": 1, "e": 1, "f": 1},
                 "c": {"a": 1, "b": 1, "d": 1, "e": 1, "f": 100}, "d": {"a": 1, "b": 1, "c": 1, "e": 1, "f": 1},
                 "e": {"a": 1, "b": 1, "c": 1, "d": 1, "f": 1}, "f": {"a": 100, "b": 1, "c": 100, "d": 1, "e": 1}},
         want=["f", "c", "a"]),
    case("Test_Nvidia_GPU_Topology/test Single Card Topology ", nums=1,
         scores={k: {p: (1 if "f" in (k, p) else 100) for p in "abcdef" if p != k} for k in "abcdef"},
         want=["f"]),
]


@pytest.mark.parametrize("c", params(TOPOLOGY))
def test_topology_aware(c: Case) -> None:
    devices = [dev(x, 0 if x in "ab" else 1, 1, 4, 8192, 2048, 1, 100) for x in "abcdef"]
    state = state_of({"node-1": devices}, pair_scores={"node-1": c["scores"]})
    pod = request_pod([hami_request(c["nums"], 1024, 100, 20)],
                      annotations={"hami.io/gpu-scheduler-policy": "topology-aware"})
    assert placed(schedule(state, pod)) == [[(x, 1024, 20) for x in c["want"]]]
