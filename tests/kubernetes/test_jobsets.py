"""A JobSet (``jobset.x-k8s.io/v1alpha2``) read as one gang of the queue (issue 26), without a server."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes.workloads import QUEUE_LABEL, jobset_as_job, native_id, parse_queue_job
from tests.kubernetes.helpers import registry


def jobset(replicated: list[tuple[int, int, int]], *, suspend: bool = True, tenant: str = "nlp") -> dict[str, Any]:
    """``replicated``: (replicas, parallelism, GPUs per pod) per replicated Job."""
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": "llm", "namespace": "research", "uid": "0a1b2c3d-4e5f-6789-abcd-ef0123456789",
                     "labels": {QUEUE_LABEL: tenant}, "creationTimestamp": "2026-12-04T10:00:00Z"},
        "spec": {"suspend": suspend, "replicatedJobs": [
            {"name": f"rj{i}", "replicas": replicas, "template": {"spec": {
                "parallelism": par, "completions": par, "template": {"spec": {
                    "schedulerName": "gpucluster", "restartPolicy": "Never",
                    "containers": [{"name": "train", "image": "x:1",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]}}}}}
            for i, (replicas, par, gpus) in enumerate(replicated)]},
    }


def test_a_jobset_is_one_gang_of_its_replicated_jobs_pods() -> None:
    q = parse_queue_job(jobset_as_job(jobset([(2, 2, 2), (1, 3, 2)])), registry(), "gpucluster")
    assert q.error == "" and q.spec is not None
    assert (q.kind, q.tenant, q.job_id, q.suspended) == ("JobSet", "nlp", native_id(q.uid), True)
    assert q.spec.num_tasks == 7 and q.spec.num_gpus == 14 and q.key == "research/llm"


def test_its_completed_and_failed_conditions_end_it() -> None:
    obj = jobset([(1, 1, 1)], suspend=False)
    obj["status"] = {"conditions": [{"type": "Completed", "status": "True", "reason": "AllJobsCompleted"}]}
    assert parse_queue_job(jobset_as_job(obj), registry(), "gpucluster").finished == "Complete"
    obj["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "job rj0-0 failed"}]}
    q = parse_queue_job(jobset_as_job(obj), registry(), "gpucluster")
    assert q.finished == "Failed" and "rj0-0 failed" in q.finish_message


def test_a_jobset_of_unlike_pods_or_none_is_refused_naming_where() -> None:
    q = parse_queue_job(jobset_as_job(jobset([(1, 1, 1), (2, 2, 4)])), registry(), "gpucluster")
    assert q.spec is None
    assert q.error.startswith("JobSet research/llm: spec.replicatedJobs[1].template.spec.template: asks for other")
    q = parse_queue_job(jobset_as_job(jobset([])), registry(), "gpucluster")
    assert q.spec is None and "spec.replicatedJobs: at least one" in q.error
    other = jobset([(1, 1, 1)])
    other["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["schedulerName"] = "volcano"
    q = parse_queue_job(jobset_as_job(other), registry(), "gpucluster")
    assert q.spec is None and q.error.startswith("JobSet research/llm: ") and "'volcano'" in q.error


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 4), st.integers(1, 4)), min_size=1, max_size=4), st.integers(1, 8))
def test_the_gang_is_the_sum_of_replicas_times_parallelism(shape: list[tuple[int, int]], gpus: int) -> None:
    obj = jobset([(r, p, gpus) for r, p in shape])
    before = copy.deepcopy(obj)
    q = parse_queue_job(jobset_as_job(obj), registry(), "gpucluster")
    total = sum(r * p for r, p in shape)
    assert q.spec is not None and q.spec.num_tasks == total and q.spec.num_gpus == total * gpus
    assert obj == before  # the object is only read


@pytest.mark.parametrize("bad", [{"replicas": "two"}, {"replicas": None}])
def test_a_replica_count_that_is_no_integer_is_refused(bad: dict[str, Any]) -> None:
    obj = jobset([(1, 1, 1)])
    obj["spec"]["replicatedJobs"][0].update(bad)
    q = parse_queue_job(jobset_as_job(obj), registry(), "gpucluster")
    assert q.spec is None and "replicas and parallelism must be integers" in q.error
