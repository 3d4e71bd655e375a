"""What tenants hold outside the engine's jobs (``JobEngine.set_outside_use``: on Kubernetes, the claims another
scheduler allocated for a tenant's pods) counts in the tenant's quota, fair share and usage."""

from __future__ import annotations

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs import Job, job_spec
from gpucluster.jobs.engine import OUTSIDE_KEY_PREFIX
from gpucluster.service import EmbeddedRuntime
from tests.simulator.conftest import make_cluster


def _runtime() -> EmbeddedRuntime:
    return EmbeddedRuntime(make_cluster(nodes=2, gpus=4), background=0.0, fault_rate_per_hour=0.0)


def _job(tenant: str, gpus: int) -> Job:
    return Job(job_spec(f"j-{tenant}-{gpus}", name="j", tenant=tenant, replicas=1, duration_s=1000.0, submit_s=0.0,
                        submitted_at=time.time(), resources={"nvidia.com/gpu": gpus}))


def test_a_tenant_whose_outside_devices_hold_its_quota_waits_saying_so_and_runs_once_they_are_gone() -> None:
    rt = _runtime()
    rt.set_quotas({"ml": 2.0})
    rt.engine.set_outside_use({"claim:default/a": ("ml", {"gpu": 1.0, "gpumem": 81920.0, "gpucores": 100.0}),
                               "claim:default/b": ("ml", {"gpu": 1.0, "gpumem": 81920.0, "gpucores": 100.0})})
    assert rt.usage_by_tenant()["ml"]["gpus"] == 2.0
    assert rt.engine.tenant_share("ml") == 2 / 8
    job = rt.submit(_job("ml", 1))
    rt.advance(1.0)
    assert job.status == "pending"
    assert job.message.startswith("waiting for quota: tenant ml holds 2 of 2 GPUs, the job needs 1"), job.message
    other = rt.submit(_job("cv", 1))  # another tenant is not held back
    rt.advance(2.0)
    assert other.status == "running"
    rt.engine.set_outside_use({"claim:default/a": ("ml", {"gpu": 1.0, "gpumem": 81920.0, "gpucores": 100.0})})
    rt.advance(3.0)
    assert job.status == "running"
    assert rt.usage_by_tenant()["ml"]["gpus"] == 2.0  # one claim and one job
    rt.engine.set_outside_use({})
    assert rt.usage_by_tenant()["ml"]["gpus"] == 1.0
    assert rt.engine.quota is not None and rt.engine.quota.used["ml"]["gpu"] == 1.0


def test_a_claim_that_changes_tenant_is_charged_to_the_new_one_only() -> None:
    rt = _runtime()
    rt.set_quotas({"a": 4.0, "b": 4.0})
    rt.engine.set_outside_use({"claim:x": ("a", {"gpu": 1.5})})
    rt.engine.set_outside_use({"claim:x": ("b", {"gpu": 1.5})})
    tree = rt.engine.quota
    assert tree is not None
    assert (tree.used["a"]["gpu"], tree.used["b"]["gpu"]) == (0.0, 1.5)
    assert "a" not in rt.usage_by_tenant() and rt.usage_by_tenant()["b"]["gpus"] == 1.5


uses = st.dictionaries(st.sampled_from([f"claim:c{i}" for i in range(5)]),
                       st.tuples(st.sampled_from(["a", "b", "c"]), st.fixed_dictionaries(
                           {"gpu": st.sampled_from([0.25, 0.5, 1.0, 2.0])})), max_size=5)


@settings(max_examples=60, deadline=None)
@given(st.lists(uses, min_size=1, max_size=6))
def test_after_any_sequence_of_updates_only_the_last_set_is_charged(seq: list[dict[str, tuple[str, dict[str, float]]]]
                                                                   ) -> None:
    rt = _runtime()
    rt.set_quotas({"a": 100.0, "b": 100.0})  # "c" has no queue: counted in usage, charged to no limit
    for u in seq:
        rt.engine.set_outside_use(u)
    last = seq[-1]
    tree = rt.engine.quota
    assert tree is not None
    usage = rt.usage_by_tenant()
    for tenant in ("a", "b", "c"):
        want = sum(c["gpu"] for t, c in last.values() if t == tenant)
        assert abs(usage.get(tenant, {}).get("gpus", 0.0) - want) < 1e-9
        if tenant in tree.queues:
            assert abs(tree.used[tenant]["gpu"] - want) < 1e-9
    assert {k for k in tree._charged if k.startswith(OUTSIDE_KEY_PREFIX)} == {OUTSIDE_KEY_PREFIX + k for k in last}
