"""HAMi ``pkg/scheduler/policy/node_policy_test.go`` (v2.10.0): the node score (``ComputeDefaultScore``: the
node's device usage before the pod) and which node binpack and spread prefer (``NodeScoreList.Less``)."""

from __future__ import annotations

import numpy as np
import pytest

from gpucluster.scheduler.plugins.policy import hami_node_scores
from tests.conformance.hami.harness import Case, Dev, case, hami_request, params, request_pod, schedule, state_of

# node scores 20 and 10: 10 x (tasks/slots + cores/cores + memory/memory)
SCORE_20 = Dev("busy", used=9, count=10, usedcores=55, totalmem=1000, usedmem=550)
SCORE_10 = Dev("half", used=5, count=10, usedcores=25, totalmem=1000, usedmem=250)

LESS = [
    case("TestLess/Spread strategy, i score higher", policy="spread", nodes=[SCORE_20, SCORE_10], want="node2"),
    case("TestLess/Spread strategy,j score higher", policy="spread", nodes=[SCORE_10, SCORE_20], want="node1"),
    case("TestLess/Default strategy (Binpack), i score lower", policy="binpack", nodes=[SCORE_10, SCORE_20],
         want="node2"),
    case("TestLess/Default strategy (Binpack), j score lower", policy="binpack", nodes=[SCORE_20, SCORE_10],
         want="node1"),
]


@pytest.mark.parametrize("c", params(LESS))
def test_node_choice(c: Case) -> None:
    # the pod fits both nodes, so only the node score decides
    state = state_of({"node1": [c["nodes"][0]], "node2": [c["nodes"][1]]})
    scores = hami_node_scores(state.snapshot(), np.arange(2))
    want = [20.0, 10.0] if c["nodes"][0] is SCORE_20 else [10.0, 20.0]
    assert np.allclose(scores, want)
    d = schedule(state, request_pod([hami_request(1, 100, cores=10)]), node_policy=c["policy"])
    assert d.node == c["want"]


DEVICE1 = Dev("device1", used=50, count=100, usedmem=100, totalmem=100, totalcore=100, usedcores=100, numa=0)
DEVICE2 = Dev("device2", used=75, count=150, usedmem=200, totalmem=200, totalcore=200, usedcores=200, numa=1,
              health=False)

DEFAULT_SCORE = [
    case("TestComputeDefaultScore/Empty device list returns score 0 without panic", devs=[], want=0.0),
    case("TestComputeDefaultScore/Test with no devices", devs=[DEVICE1, DEVICE2], want=25.0),
    case("TestComputeDefaultScore/Test with devices", devs=[DEVICE1, DEVICE2], want=25.0),
]


@pytest.mark.parametrize("c", params(DEFAULT_SCORE))
def test_node_score(c: Case) -> None:
    state = state_of({"node": c["devs"]})
    assert hami_node_scores(state.snapshot(), np.array([0]))[0] == np.float32(c["want"])
