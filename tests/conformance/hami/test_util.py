"""HAMi ``pkg/util/util_test.go`` (v2.10.0): the pod's GPU policy (``GetGPUSchedulerPolicyByPod``) and the
comma-separated policy list (``PolicyContains``). The rest of that file tests Kubernetes client helpers."""

from __future__ import annotations

import pytest

from gpucluster.devices.hami import parse_gpu_policy
from gpucluster.scheduler.plugins.devicefit import pod_options
from tests.conformance.hami.harness import Case, case, params, request_pod

POD_POLICY = [
    case("TestGetGPUSchedulerPolicyByPod/no annotation", annotations={}, want=("binpack",)),
    case("TestGetGPUSchedulerPolicyByPod/other annotations", annotations={"other-annotation": "value"},
         want=("binpack",)),
    case("TestGetGPUSchedulerPolicyByPod/with annotation", annotations={"hami.io/gpu-scheduler-policy": "spread"},
         want=("spread",)),
]


@pytest.mark.parametrize("c", params(POD_POLICY))
def test_pod_gpu_policy(c: Case) -> None:
    # the scheduler's default ("binpack" in HAMi's test) applies when the pod names none
    policy = pod_options(request_pod([], annotations=c["annotations"])).policy or ("binpack",)
    assert policy == c["want"]


CONTAINS = [
    case("TestPolicyContains/single value match", policy="mutex", target="mutex", want=True),
    case("TestPolicyContains/single value no match", policy="spread", target="mutex", want=False),
    case("TestPolicyContains/empty policy", policy="", target="mutex", want=False),
    case("TestPolicyContains/comma list match first", policy="mutex,spread", target="mutex", want=True),
    case("TestPolicyContains/comma list match last", policy="spread,numa,mutex", target="mutex", want=True),
    case("TestPolicyContains/comma list no match", policy="binpack,spread", target="mutex", want=False),
    case("TestPolicyContains/comma list with spaces", policy="mutex, spread, numa", target="numa", want=True),
    case("TestPolicyContains/chain of sort keys, no filter", policy="binpack,spread,numa", target="topology-aware",
         want=False),
]


@pytest.mark.parametrize("c", params(CONTAINS))
def test_policy_contains(c: Case) -> None:
    assert (c["target"] in parse_gpu_policy(c["policy"], "policy")) == c["want"]
