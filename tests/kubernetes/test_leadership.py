"""A Kubernetes runtime that loses the lease rebuilds every job from the cluster with a fresh engine
(:meth:`KubeRuntime._leadership`): the tenants' quotas and fair-share weights carry over, the old engine's quota
charges do not (the new engine charges the jobs it finds running; one that ended meanwhile holds nothing).

No API server (the stub informer of ``test_retention_records``); the same on a real kube-apiserver, with two
replicas, is ``tests/integration/test_k8s_tenancy_ha.py``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from types import SimpleNamespace

from gpucluster.kubernetes import backend

from .test_retention_records import _job_obj, new_runtime  # noqa: F401 (a fixture)


def test_a_replica_that_lost_the_lease_keeps_quotas_and_weights_and_drops_the_old_charges(
        new_runtime: Callable[[], contextlib.AbstractContextManager[backend.KubeRuntime]]) -> None:  # noqa: F811
    with new_runtime() as rt:
        rt.set_quotas({"team": 2.0}, {"team": 3.0})
        rt.quota.charge("default/ended-0", "team", {"gpu": 2.0})  # what the old engine charged for a job now ended
        rt._leading = True  # it led ...
        rt.elector = SimpleNamespace(is_leader=False, stop=lambda: None)  # type: ignore[assignment]
        old = rt.engine
        rt._leadership()  # ... and lost the lease
        assert rt.engine is not old and rt.engine.paused
        assert rt.quota.queues["team"].limit == {"gpu": 2.0}
        assert rt.quota.used["team"]["gpu"] == 0.0
        assert rt.quota.blocked_by("team", {"gpu": 2.0}) is None
        assert rt.engine.ledger.weights == {"team": 3.0}

