"""``PATCH /api/v1/tenants/{name}`` (``gpucluster tenants set-quota``) changes only the fields it is given: every
other setting of the tenant keeps its value, and the admission checks go on using them.

On main before this test, a PATCH reset the tenant's own ``max_queued_jobs`` to the service default (1000): an
admin who raised a tenant's quota with ``tenants set-quota`` lifted its limit of queued jobs with it, silently.
"""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.model.limits import DEFAULT_TENANT_MAX_PRIORITY, DEFAULT_TENANT_MAX_QUEUED
from gpucluster.service.store import Store
from tests.service.inproc import in_process

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}
SETTINGS = ("quota_gpus", "weight", "max_priority", "max_queued_jobs")


def test_setting_a_quota_keeps_the_tenants_limit_of_queued_jobs(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        tenant = ip.as_(ip.tenant("busy", quota_gpus=1, max_queued_jobs=2, max_priority=7, weight=2.5))
        codes = [tenant.post("/api/v1/jobs", json={"name": f"j{i}", "resources": GPU}).status_code for i in range(2)]
        assert codes == [201, 201]
        r = ip.client.patch("/api/v1/tenants/busy", json={"quota_gpus": 0})  # what tenants set-quota sends
        assert r.status_code == 200, r.text
        row = r.json()
        assert (row["quota_gpus"], row["max_queued_jobs"], row["max_priority"], row["weight"]) == (0.0, 2, 7, 2.5)
        r = tenant.post("/api/v1/jobs", json={"name": "third", "resources": GPU})
        assert r.status_code == 429 and "limit of queued jobs is 2" in r.json()["error"], r.text
        # and after a restart, from the store
    with in_process(tmp_path / "d") as ip:
        row = next(t for t in ip.client.get("/api/v1/tenants").json()["tenants"] if t["name"] == "busy")
        assert (row["quota_gpus"], row["max_queued_jobs"], row["max_priority"]) == (0.0, 2, 7)


def test_the_limit_of_queued_jobs_can_be_patched_alone(tmp_path: Path) -> None:
    with in_process(tmp_path / "d") as ip:
        tenant = ip.as_(ip.tenant("busy", quota_gpus=1, max_queued_jobs=1))
        assert tenant.post("/api/v1/jobs", json={"name": "a", "resources": GPU}).status_code == 201
        assert tenant.post("/api/v1/jobs", json={"name": "b", "resources": GPU}).status_code == 429
        r = ip.client.patch("/api/v1/tenants/busy", json={"max_queued_jobs": 2})
        assert r.status_code == 200 and r.json()["max_queued_jobs"] == 2 and r.json()["quota_gpus"] == 1.0, r.text
        assert tenant.post("/api/v1/jobs", json={"name": "b", "resources": GPU}).status_code == 201  # same token
        r = ip.client.patch("/api/v1/tenants/busy", json={"max_queued_jobs": -1})
        assert r.status_code == 422 and r.json()["where"] == "max_queued_jobs", r.text
        r = ip.client.patch("/api/v1/tenants/busy", json={"max_queued_jobs": None})  # back to the default
        assert r.status_code == 200 and r.json()["max_queued_jobs"] == DEFAULT_TENANT_MAX_QUEUED, r.text


def _shown(settings_: dict[str, Any]) -> dict[str, Any]:
    """A tenant's settings as ``GET /api/v1/tenants`` shows them (a null limit is the default)."""
    out = dict(settings_)
    if out["max_priority"] is None:
        out["max_priority"] = DEFAULT_TENANT_MAX_PRIORITY
    if out["max_queued_jobs"] is None:
        out["max_queued_jobs"] = DEFAULT_TENANT_MAX_QUEUED
    return out


eighths = st.integers(0, 800).map(lambda n: n / 8)
value = {
    "quota_gpus": st.none() | eighths,
    "weight": st.none() | st.integers(1, 800).map(lambda n: n / 8),  # null: unchanged
    "max_priority": st.none() | st.integers(0, 1000),
    "max_queued_jobs": st.none() | st.integers(0, 5000),
}
patch = st.fixed_dictionaries({}, optional=value)
created = st.fixed_dictionaries({"quota_gpus": eighths, "weight": st.integers(1, 80).map(lambda n: n / 8),
                                 "max_priority": st.integers(0, 1000), "max_queued_jobs": st.integers(0, 5000)})


def test_a_patch_changes_exactly_the_fields_it_names(tmp_path: Path) -> None:
    """Property: after any sequence of PATCHes, each with any subset of the settings, the tenant shows what it
    was created with, updated by the fields given (``weight: null`` leaves the weight as it was); a bystander
    tenant shows exactly what it was created with."""
    with in_process(tmp_path / "d") as ip:
        ip.tenant("bystander", quota_gpus=3.5, weight=1.5, max_priority=11, max_queued_jobs=9)
        names = (f"t{i}" for i in itertools.count())

        def rows() -> dict[str, dict[str, Any]]:
            return {t["name"]: {k: t[k] for k in SETTINGS} for t in ip.client.get("/api/v1/tenants").json()["tenants"]}

        @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(created, st.lists(patch, max_size=4))
        def check(first: dict[str, Any], patches: list[dict[str, Any]]) -> None:
            name = next(names)
            ip.tenant(name, **first)
            expected = dict(first)
            for body in patches:
                r = ip.client.patch(f"/api/v1/tenants/{name}", json=body)
                assert r.status_code == 200, r.text
                expected.update({k: v for k, v in body.items() if not (k == "weight" and v is None)})
                assert {k: r.json()[k] for k in SETTINGS} == _shown(expected), body
            seen = rows()
            assert seen[name] == _shown(expected)
            assert seen["bystander"] == {"quota_gpus": 3.5, "weight": 1.5, "max_priority": 11, "max_queued_jobs": 9}

        check()


class AuditFailsStore(Store):
    """A fake for a fault not caused for real here: the disk fills up between a change and its audit line (every
    audit line fails as SQLite fails a write on a full disk; the real store code handles the error)."""

    def _audit(self, *args: Any, **kwargs: Any) -> None:
        raise sqlite3.OperationalError("database or disk is full")


def test_a_change_whose_audit_line_the_store_did_not_take_is_not_stored_either(tmp_path: Path) -> None:
    """The change and its audit line are one transaction: 507 and nothing changed, in the store as in memory. On
    main before this test the change was committed first and the audit line failed after it: a 507 "nothing was
    changed" for a quota that was changed in the store (and not in memory until a restart)."""
    data = tmp_path / "d"
    with in_process(data) as ip:
        ip.tenant("team", quota_gpus=4)
        real = ip.service.store
        real.close()
        ip.service.store = AuditFailsStore(real.path)
        r = ip.client.patch("/api/v1/tenants/team", json={"quota_gpus": 0.5})
        assert r.status_code == 507 and "nothing was changed" in r.json()["error"], r.text
        assert ip.service.store.tenant("team")["quota_gpus"] == 4  # type: ignore[index]
        ip.service.store.close()
        ip.service.store = Store(real.path)
    with in_process(data) as ip:
        assert ip.service.store.tenant("team")["quota_gpus"] == 4  # type: ignore[index]
