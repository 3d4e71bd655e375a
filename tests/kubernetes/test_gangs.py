"""Gang conventions of other tools (scheduler-plugins coscheduling, Kubernetes' PodGroup): which pods are members,
what size a PodGroup declares, and how long a read size is kept."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gpucluster.kubernetes.gangs import GangRef, GroupSizes, gang_ref, min_member_of


def _pod(labels: Mapping[str, str] | None = None, group: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c"}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"metadata": {"name": "p", "labels": dict(labels or {})}, "spec": spec}


def test_gang_ref_reads_the_label_first_then_the_scheduling_group() -> None:
    assert gang_ref(_pod()) is None
    assert gang_ref(_pod({"app": "x"})) is None
    ref = gang_ref(_pod({"scheduling.x-k8s.io/pod-group": "train"}))
    assert ref == GangRef("coscheduling", "train")
    assert ref.gang == "podgroup/train"
    assert ref.api == ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
    ref = gang_ref(_pod(group="train"))
    assert ref == GangRef("kubernetes", "train")
    assert ref.gang == "k8s-podgroup/train"  # never merged with a coscheduling group of the same name
    assert ref.api == ("scheduling.k8s.io", "v1alpha3", "podgroups")
    assert gang_ref(_pod({"scheduling.x-k8s.io/pod-group": "a"}, group="b")) == GangRef("coscheduling", "a")


def test_min_member_of_each_convention() -> None:
    assert min_member_of(GangRef("coscheduling", "g"), {"spec": {"minMember": 4}}) == 4
    assert min_member_of(GangRef("coscheduling", "g"), {"spec": {}}) == 0
    gang = {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}}
    assert min_member_of(GangRef("kubernetes", "g"), gang) == 3
    basic = {"spec": {"schedulingPolicy": {"basic": {}}}}
    assert min_member_of(GangRef("kubernetes", "g"), basic) == 0


def test_group_sizes_are_kept_for_ttl_and_missing_groups_are_none() -> None:
    now = [0.0]
    objects: dict[str, Any] = {"g": {"spec": {"minMember": 4}}}
    calls: list[str] = []

    def fetch(ref: GangRef, namespace: str) -> Mapping[str, Any] | None:
        calls.append(f"{namespace}/{ref.name}")
        return objects.get(ref.name)

    sizes = GroupSizes(fetch, ttl=2.0, clock=lambda: now[0])
    ref = GangRef("coscheduling", "g")
    assert sizes.min_member("ns", ref) == 4
    objects["g"] = {"spec": {"minMember": 6}}
    now[0] = 1.0
    assert sizes.min_member("ns", ref) == 4  # cached
    now[0] = 2.5
    assert sizes.min_member("ns", ref) == 6  # read again after ttl
    assert sizes.min_member("ns", GangRef("coscheduling", "missing")) is None
    assert calls == ["ns/g", "ns/g", "ns/missing"]


def test_group_sizes_keep_the_last_answer_on_an_api_error() -> None:
    now = [0.0]
    fail = [False]

    def fetch(ref: GangRef, namespace: str) -> Mapping[str, Any] | None:
        if fail[0]:
            raise RuntimeError("connection refused")
        return {"spec": {"minMember": 2}}

    sizes = GroupSizes(fetch, ttl=1.0, clock=lambda: now[0])
    ref = GangRef("coscheduling", "g")
    assert sizes.min_member("ns", ref) == 2
    fail[0] = True
    now[0] = 5.0
    assert sizes.min_member("ns", ref) == 2
    assert sizes.min_member("ns", GangRef("coscheduling", "other")) is None


def test_group_sizes_do_not_keep_every_group_ever_asked_about() -> None:
    """Every training job names a new PodGroup: a scheduler that runs for months asks about millions. Groups
    nobody asks about any more are dropped; one still asked about keeps its last answer for an API error."""
    from gpucluster.kubernetes.gangs import KEEP_UNASKED_S, MAX_GROUPS

    now = [0.0]
    fail = [False]

    def fetch(ref: GangRef, namespace: str) -> Mapping[str, Any] | None:
        if fail[0]:
            raise RuntimeError("connection refused")
        return {"spec": {"minMember": 3}}

    sizes = GroupSizes(fetch, ttl=2.0, clock=lambda: now[0])
    steady = GangRef("coscheduling", "steady")
    for i in range(20 * MAX_GROUPS):  # a new gang every second, one asked about all along
        now[0] = float(i)
        assert sizes.min_member("ns", GangRef("coscheduling", f"job-{i}")) == 3
        assert sizes.min_member("ns", steady) == 3
    kept = len(sizes._cache)
    assert kept <= 2 * max(MAX_GROUPS, int(KEEP_UNASKED_S) + 1) + 1, kept  # (was every one: 20,481)
    fail[0] = True
    now[0] += 1.0
    assert sizes.min_member("ns", steady) == 3
