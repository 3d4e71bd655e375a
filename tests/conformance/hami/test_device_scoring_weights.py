"""HAMi ``pkg/util/device_scoring_weights_test.go`` (v2.10.0): the ``hami.io/device-scoring-weights`` pod
annotation (``slot=1,core=2,memory=3``)."""

from __future__ import annotations

import pytest

from gpucluster.devices import DeviceInputError
from gpucluster.devices.hami import ScoringWeights, parse_scoring_weights
from gpucluster.scheduler.plugins.devicefit import pod_options
from tests.conformance.hami.harness import Case, case, params, request_pod

KEY = "hami.io/device-scoring-weights"

BY_POD = [
    case("TestGetDeviceScoringWeightsByPod/missing annotation uses defaults", annotations={},
         want=ScoringWeights(1, 1, 1)),
    case("TestGetDeviceScoringWeightsByPod/valid annotation", annotations={KEY: "slot=1,core=2,memory=3"},
         want=ScoringWeights(1, 2, 3)),
    case("TestGetDeviceScoringWeightsByPod/invalid annotation", annotations={KEY: "slot=1,core=-1,memory=3"},
         error="must not be negative"),
]


@pytest.mark.parametrize("c", params(BY_POD))
def test_weights_by_pod(c: Case) -> None:
    if "error" in c.data:
        with pytest.raises(DeviceInputError, match=c["error"]):
            request_pod([], annotations=c["annotations"])
        return
    assert pod_options(request_pod([], annotations=c["annotations"])).weights == c["want"]


PARSE = [
    case("TestParseDeviceScoringWeights/valid ordered weights", value="slot=1,core=2,memory=3",
         want=ScoringWeights(1, 2, 3)),
    case("TestParseDeviceScoringWeights/valid reordered weights and whitespace", value=" memory = 3, slot = 1, core = 0 ",
         want=ScoringWeights(1, 0, 3)),
    case("TestParseDeviceScoringWeights/empty annotation", value="", error="expected slot, core, and memory weights"),
    case("TestParseDeviceScoringWeights/missing dimension", value="slot=1,memory=3",
         error="expected slot, core, and memory weights"),
    case("TestParseDeviceScoringWeights/malformed entry", value="slot=1,core,memory=3", error="expected key=value entries"),
    case("TestParseDeviceScoringWeights/non-integer", value="slot=1,core=high,memory=3",
         error='"core" weight must be an integer'),
    case("TestParseDeviceScoringWeights/negative", value="slot=1,core=-1,memory=3",
         error='"core" weight must not be negative'),
    case("TestParseDeviceScoringWeights/unknown key", value="slot=1,bandwidth=2,memory=3",
         error='unknown weight "bandwidth"'),
    case("TestParseDeviceScoringWeights/duplicate key", value="slot=1,slot=2,memory=3", error='duplicate "slot" weight'),
    case("TestParseDeviceScoringWeights/all zero", value="slot=0,core=0,memory=0",
         error="at least one weight must be positive"),
]


@pytest.mark.parametrize("c", params(PARSE))
def test_parse_weights(c: Case) -> None:
    if "error" in c.data:
        with pytest.raises(DeviceInputError, match=c["error"]):
            parse_scoring_weights(c["value"], "weights")
        return
    assert parse_scoring_weights(c["value"], "weights") == c["want"]
