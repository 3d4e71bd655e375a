"""The Kubernetes runtime's per-job records stay bounded under the control plane's retention policy
(:meth:`KubeRuntime.forget`): whatever Jobs come, finish, change and go, ``recs`` holds only the jobs in the
engine, ``by_uid`` only objects still in the cluster, and the tombstones (:attr:`KubeRuntime._pruned`) only pruned
jobs whose Job object is still there; a pruned job is never read again as a new one while its object exists.

No API server: the informer is a stub and the test feeds the watch events (``_on_job``, ``_on_job_list``) as the
informer would; the runtime follows (no writes). The same behaviour on a real kube-apiserver is
``tests/integration/test_k8s_retention.py``.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes import backend
from gpucluster.kubernetes.workloads import QUEUE_LABEL, native_id


def _job_obj(name: str, uid: str, rv: int, finished: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": str(rv),
                     "creationTimestamp": "2026-12-05T20:00:00Z", "labels": {QUEUE_LABEL: "team"}},
        "spec": {"suspend": True, "parallelism": 1, "completions": 1, "template": {"spec": {
            "schedulerName": "gpucluster", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}},
        "status": {"conditions": [{"type": finished, "status": "True"}]} if finished else {},
    }


OPS = st.lists(st.tuples(st.sampled_from(["add", "complete", "fail", "touch", "delete", "relist", "prune"]),
                         st.integers(0, 2)), max_size=30)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)  # the fixture only patches; rt is per example
@given(ops=OPS)
@example(ops=[("add", 0), ("complete", 0), ("prune", 0), ("touch", 0), ("relist", 0), ("delete", 0)])
@example(ops=[("add", 0), ("delete", 0), ("prune", 0)])  # gone before it was pruned: no tombstone
def test_records_hold_live_jobs_and_tombstones_of_objects_still_there(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]],
        ops: list[tuple[str, int]]) -> None:
    with new_runtime() as rt:
        _play(rt, ops)


def _play(rt: backend.KubeRuntime, ops: list[tuple[str, int]]) -> None:
    present: dict[int, dict[str, Any]] = {}  # slot -> its Job object now in the "cluster"
    pruned_uids: set[str] = set()  # objects whose job was pruned (forgotten)
    for rv, (op, k) in enumerate(ops, 1):
        obj = present.get(k)
        if op == "add" and obj is None:
            present[k] = _job_obj(f"j{k}", str(uuid.uuid4()), rv)
            rt._on_job("ADDED", present[k])
        elif op in ("complete", "fail", "touch") and obj is not None:
            finished = {"complete": "Complete", "fail": "Failed"}.get(op, "")
            was = next((c["type"] for c in obj["status"].get("conditions", [])), "")
            present[k] = _job_obj(obj["metadata"]["name"], obj["metadata"]["uid"], rv, finished or was)
            rt._on_job("MODIFIED", present[k])
        elif op == "delete" and obj is not None:
            rt._on_job("DELETED", present.pop(k))
        elif op == "relist":
            rt._on_job_list(list(present.values()))
        elif op == "prune":  # the control plane's retention policy with --max-finished-jobs 0
            for job in [j for j in rt.jobs() if j.done]:
                assert rt.forget(job.id)
                pruned_uids |= {u for u, o in rt._job_objs.items() if native_id(u) == job.id}
        # between ticks the runtime may lag the cluster; after one it has read every event
        rt.advance(rt.now + 1.0)
        uids = {o["metadata"]["uid"] for o in present.values()}
        held = set(rt.engine.jobs)
        assert set(rt.recs) <= held
        assert set(rt.by_uid) <= uids  # only objects still in the cluster
        assert set(rt.by_uid.values()) <= held | rt._pruned
        assert rt._pruned <= {native_id(u) for u in uids} and not rt._pruned & held
        assert len(rt.recs) + rt.tombstones() <= len(held) + len(uids)
        # a pruned job is not read again while its object is there
        assert not {native_id(u) for u in pruned_uids & uids} & {j.id for j in rt.jobs()}
        assert all(j.id not in rt._pruned for j in rt.take_discovered())
    for k in list(present):
        rt._on_job("DELETED", present.pop(k))
    rt.advance(rt.now + 1.0)
    for job in [j for j in rt.jobs() if j.done]:
        rt.forget(job.id)
    assert rt.recs == {} and rt.by_uid == {} and rt.tombstones() == 0  # nothing left of any job ever seen
