"""Bare pods of a pod group as one job of the queue (issue 26), without a server: which pods are members, the
job a group is (tenant, size, GPUs), what is refused and why, and who binds what beside a secondary scheduler."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes.cluster import KubeCluster
from gpucluster.kubernetes.gangs import POD_GROUP_LABEL
from gpucluster.kubernetes.podgroups import (
    GROUP_UID_PREFIX,
    MIXED_SHAPES_WHY,
    group_job_id,
    group_spec,
    is_labelled,
    member_of,
)
from gpucluster.kubernetes.secondary import SecondaryScheduler
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION, QUEUE_LABEL, TENANT_ANNOTATION
from tests.kubernetes.helpers import pod_obj, registry


def member(name: str, *, group: str = "train", labels: dict[str, str] | None = None, count: int = 2,
           namespace: str = "research", annotations: dict[str, str] | None = None) -> dict[str, Any]:
    obj = pod_obj(name, count=count, mem=20000, cores=50, namespace=namespace, annotations=annotations)
    obj["metadata"]["labels"] = {POD_GROUP_LABEL: group, **(labels or {})}
    return obj


def test_a_pod_labelled_with_a_pod_group_is_a_member() -> None:
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    assert (m.namespace, m.gang, m.name, m.min_member) == ("research", "podgroup/train", "train", 0)
    assert m.ref is not None and m.uid == f"{GROUP_UID_PREFIX}research/podgroup/train"


def test_our_gang_annotations_make_a_member_with_its_size() -> None:
    obj = pod_obj("w0", annotations={GANG_ANNOTATION: "bert", GANG_MIN_ANNOTATION: "4"})
    m = member_of(obj, "gpucluster")
    assert m is not None and (m.gang, m.ref, m.min_member) == ("bert", None, 4)


def test_who_is_not_a_member() -> None:
    assert member_of(pod_obj("solo"), "gpucluster") is None  # no gang
    other = member("w0")
    other["spec"]["schedulerName"] = "default-scheduler"
    assert member_of(other, "gpucluster") is None  # another scheduler's
    of_job = member("w0", labels={"batch.kubernetes.io/controller-uid": "u-1"})
    assert member_of(of_job, "gpucluster") is None  # a Job's pod: queued as its Job
    assert member_of(member("w0"), "gpucluster", "none") is None
    # --pod-groups labelled: only the ones labelled gpucluster.io/queue (a secondary scheduler binds the rest)
    assert member_of(member("w0"), "gpucluster", "labelled") is None
    assert member_of(member("w0", labels={QUEUE_LABEL: "nlp"}), "gpucluster", "labelled") is not None


def test_a_group_is_one_job_of_min_member_tasks_charged_to_the_queue_label() -> None:
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    pods = [member(f"w{i}", labels={QUEUE_LABEL: "nlp"}) for i in range(4)]
    spec = group_spec("g-1", m, pods, 4, registry())
    assert (spec.tenant, spec.replicas, spec.num_tasks, spec.num_gpus, spec.name) == ("nlp", 4, 4, 8, "train")
    assert spec.preemptible is False  # nothing would make its pods again
    assert spec.template is not None and spec.template.gang == "" and spec.template.device_count == 2


def test_without_the_label_the_tenant_is_the_pods_tenant_annotation_else_its_namespace() -> None:
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    assert group_spec("g-1", m, [member("w0"), member("w1")], 2, registry()).tenant == "research"
    tagged = [member(f"w{i}", annotations={TENANT_ANNOTATION: "vision"}) for i in range(2)]
    assert group_spec("g-1", m, tagged, 2, registry()).tenant == "vision"


def test_what_a_group_cannot_be_is_refused_naming_where_and_why() -> None:
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    with pytest.raises(ValueError, match=r"pod group research/train: pod research/w1 asks for other resources"):
        group_spec("g-1", m, [member("w0"), member("w1", count=1)], 2, registry())
    with pytest.raises(ValueError, match=r"charged to different tenants: a, b"):
        group_spec("g-1", m, [member("w0", labels={QUEUE_LABEL: "a"}), member("w1", labels={QUEUE_LABEL: "b"})], 2,
                   registry())
    with pytest.raises(ValueError, match=r"'Bad_Tenant' is not a tenant name"):
        group_spec("g-1", m, [member("w0", labels={QUEUE_LABEL: "Bad_Tenant"})], 1, registry())
    with pytest.raises(ValueError, match=r"minMember: the gang must be 1\.\.256 pods, got 0"):
        group_spec("g-1", m, [member("w0")], 0, registry())
    with pytest.raises(ValueError, match=r"gpucluster.io/priority\]: not a number"):
        group_spec("g-1", m, [member("w0", annotations={"gpucluster.io/priority": "high"})], 1, registry())


def test_a_group_of_mixed_shapes_is_refused_saying_what_each_asks_for_and_why() -> None:
    """A launcher of 0 GPUs beside 2-GPU workers (what a training operator's MPIJob makes): the message names both
    pods, what each asks for, and why the queue refuses instead of placing them."""
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    launcher = member("w1")
    launcher["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1"}}
    with pytest.raises(ValueError) as err:
        group_spec("g-1", m, [member("w0"), launcher], 2, registry())
    w0 = member("w0")["spec"]["containers"][0]
    asked = ", ".join(f"{k}={v}" for k, v in sorted(w0["resources"]["limits"].items()))
    assert str(err.value) == (
        f"pod group research/train: pod research/w1 asks for other resources than pod research/w0 (container "
        f"{w0['name']}: cpu=1) where pod research/w0 asks for (container {w0['name']}: {asked}); {MIXED_SHAPES_WHY}")
    assert "no slot per member shape" in MIXED_SHAPES_WHY


def test_a_group_s_job_id_is_the_same_everywhere_and_new_for_a_later_generation() -> None:
    assert group_job_id("research", "podgroup/train") == group_job_id("research", "podgroup/train")
    assert group_job_id("research", "podgroup/train") != group_job_id("other", "podgroup/train")
    first, later = "0b6f3c1e-aaaa-4bbb-8ccc-000000000001", "0b6f3c1e-aaaa-4bbb-8ccc-000000000002"
    # from the oldest member's uid: the same whoever computes it, another one when new pods reuse the name
    assert group_job_id("research", "podgroup/train", first) == group_job_id("research", "podgroup/train", first)
    assert group_job_id("research", "podgroup/train", first) != group_job_id("research", "podgroup/train", later)
    assert group_job_id("research", "podgroup/train", first).startswith(group_job_id("research", "podgroup/train"))


@settings(max_examples=60, deadline=None)
@given(size=st.integers(1, 16), gpus=st.integers(1, 8), extra=st.integers(0, 4),
       tenant=st.sampled_from(["", "nlp", "vision-2"]))
def test_a_group_asks_for_min_member_times_one_members_gpus(size: int, gpus: int, extra: int, tenant: str) -> None:
    """Whatever its size and shape: the job is ``minMember`` tasks of one member, charged to the label's tenant
    (the namespace without one), and never preemptible."""
    labels = {QUEUE_LABEL: tenant} if tenant else {}
    pods = [member(f"w{i}", labels=labels, count=gpus) for i in range(size + extra)]
    m = member_of(pods[0], "gpucluster")
    assert m is not None
    spec = group_spec("g-x", m, pods[:size], size, registry())
    assert spec.num_gpus == gpus * size and spec.replicas == size
    assert spec.tenant == (tenant or "research") and not spec.preemptible


def test_the_secondary_scheduler_never_takes_a_pod_of_the_queue() -> None:
    sched = SecondaryScheduler(KubeCluster(registry()), binder=None, scheduler_name="gpucluster")  # type: ignore[arg-type]
    sched.on_pod("ADDED", member("theirs"))
    queued = member("ours", labels={QUEUE_LABEL: "nlp"})
    sched.on_pod("ADDED", queued)
    assert set(sched.pending) == {"research/theirs"}
    # a pod that was pending and gets the label is dropped
    later = copy.deepcopy(member("theirs"))
    later["metadata"]["labels"][QUEUE_LABEL] = "nlp"
    sched.on_pod("MODIFIED", later)
    assert sched.pending == {}
    assert is_labelled(queued) and not is_labelled(member("x"))
