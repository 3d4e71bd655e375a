"""The service's side of tenant settings shared by replicas (``SharedTenantSettings``; on Kubernetes a ConfigMap,
tested against a real API server in ``tests/integration/test_k8s_tenancy_ha.py``): two services, each with its own
store, over one shared object held in memory here. A tenant made through one replica's API holds on the other
from its next tick (before its scheduling pass), a change is written to the shared object first (503 and nothing
changed when it cannot be), applying twice changes nothing, an unreadable key keeps the last good quota, and a
store that never applied the shared object adds its own tenants to it at the start."""

from __future__ import annotations

import sqlite3
from collections.abc import Collection, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from gpucluster.model.tenants import DEFAULTS, SharedTenancy, TenantSettings, encode_all, patched, read_shared
from gpucluster.service import EmbeddedRuntime, ServiceConfig, create_app, open_service
from gpucluster.service.factory import RuntimeUnavailableError
from gpucluster.service.runtime import SharedTenantSettings
from tests.service.inproc import ADMIN, InProc, small_cluster

GPU2 = {"nvidia.com/gpu": 2, "nvidia.com/gpucores": 100}


class SharedObject:
    """The shared object (a ConfigMap's data and resourceVersion) in memory."""

    def __init__(self) -> None:
        self.data: dict[str, str] = {}
        self.version = 1
        self.fail = ""
        self.uid = "uid-1"

    def read(self) -> SharedTenancy:
        return read_shared(self.data, str(self.version), self.uid)

    def write(self, changes: Mapping[str, TenantSettings], only_missing: bool = False,
              fields: Collection[str] | None = None) -> None:
        if self.fail:
            raise RuntimeError(self.fail)
        if fields is not None:
            changes = {n: patched(self.data.get(n), s, fields) for n, s in changes.items()}
        new = encode_all(changes)
        self.data.update({k: v for k, v in new.items() if not (only_missing and k in self.data)})
        self.version += 1


class Replica(EmbeddedRuntime):
    """The embedded runtime plus the shared object, as ``KubeRuntime`` has it (its watch: a read at each call)."""

    def __init__(self, shared: SharedObject) -> None:
        super().__init__(small_cluster(), background=0.0, fault_rate_per_hour=0.0)
        self.shared = shared
        self.applied: str | None = None

    def shared_tenancy(self) -> SharedTenancy | None:
        read = self.shared.read()
        return None if read.version == self.applied else read

    def tenancy_applied(self, version: str) -> None:
        self.applied = version

    def seed_tenancy(self, local: Mapping[str, TenantSettings], synced_uid: str | None) -> str:
        if synced_uid != self.shared.uid:
            self.shared.write({n: s for n, s in local.items() if s != DEFAULTS}, only_missing=True)
        return self.shared.uid

    def publish_tenant(self, name: str, settings: TenantSettings, local: Mapping[str, TenantSettings],
                       fields: Collection[str] | None = None) -> TenantSettings:
        self.shared.write({name: settings}, fields=fields)
        return self.shared.read().tenants[name]


@contextmanager
def replica(data_dir: Path, shared: SharedObject) -> Iterator[InProc]:
    runtime = Replica(shared)
    assert isinstance(runtime, SharedTenantSettings)
    config = ServiceConfig(data_dir=data_dir, speed=0.0, admin_token=ADMIN, tenants_on_first_use=True)
    service, _ = open_service(runtime, config)
    client = TestClient(create_app(service), headers={"Authorization": f"Bearer {ADMIN}"},
                        raise_server_exceptions=False)
    try:
        yield InProc(service, client, data_dir)
    finally:
        service.close()


def _quota(ip: InProc, tenant: str) -> Any:
    row = next((t for t in ip.client.get("/api/v1/tenants").json()["tenants"] if t["name"] == tenant), None)
    return False if row is None else row["quota_gpus"]


def _audit(ip: InProc, action: str) -> list[Any]:
    return [e for e in ip.client.get("/api/v1/audit").json()["entries"] if e["action"] == action]


def _second_waits_for_quota(ip: InProc) -> None:
    """Two 2-GPU jobs of ``ml`` (quota 2) submitted and a pass run: the first runs, the second waits."""
    for name in ("one", "two"):
        assert ip.client.post("/api/v1/jobs", json={"name": name, "tenant": "ml",
                                                    "resources": GPU2}).status_code == 201
    ip.tick()
    jobs = {j["name"]: j["status"] for j in ip.client.get("/api/v1/jobs").json()["jobs"]}
    assert jobs == {"one": "running", "two": "pending"}, jobs


def test_a_tenant_made_on_one_replica_holds_on_the_other_from_its_next_pass(tmp_path: Path) -> None:
    shared = SharedObject()
    with ExitStack() as stack:
        a = stack.enter_context(replica(tmp_path / "a", shared))
        b = stack.enter_context(replica(tmp_path / "b", shared))
        token = a.tenant("ml", quota_gpus=2, weight=3)
        assert _quota(b, "ml") is False
        first = b.client.post("/api/v1/jobs", json={"name": "one", "tenant": "ml", "resources": GPU2})
        second = b.client.post("/api/v1/jobs", json={"name": "two", "tenant": "ml", "resources": GPU2})
        assert first.status_code == 201 and second.status_code == 201
        b.tick()  # applies the shared settings, then runs its pass under them: one job runs, the other waits
        assert _quota(b, "ml") == 2 and b.client.get("/api/v1/tenants").json()["tenants"][-1]["weight"] == 3
        jobs = {j["name"]: j for j in b.client.get("/api/v1/jobs").json()["jobs"]}
        assert jobs["one"]["status"] == "running" and jobs["two"]["status"] == "pending", jobs
        assert "quota" in jobs["two"]["message"]
        [line] = _audit(b, "tenant.shared")
        assert line["actor"] == "cluster" and line["target"] == "ml"
        b.tick()
        b.tick()  # the same shared state again: nothing changes, nothing is audited again
        assert len(_audit(b, "tenant.shared")) == 1 and _quota(b, "ml") == 2
        assert token not in str(shared.data)  # tokens stay in each replica's store
        # a quota removed through b reaches a: removed everywhere
        assert b.client.patch("/api/v1/tenants/ml", json={"quota_gpus": None}).status_code == 200
        a.tick()
        assert _quota(a, "ml") is None and _quota(b, "ml") is None


def test_patches_of_different_fields_through_two_replicas_keep_both_changes(tmp_path: Path) -> None:
    """b changes the weight before it applied a's quota change: the quota a wrote stays (a PATCH writes only the
    fields it names, over the shared value), on both replicas, and b's answer shows the tenant as it is now."""
    shared = SharedObject()
    with ExitStack() as stack:
        a = stack.enter_context(replica(tmp_path / "a", shared))
        b = stack.enter_context(replica(tmp_path / "b", shared))
        a.tenant("ml", quota_gpus=2, weight=1, max_priority=5)
        b.tick()
        assert _quota(b, "ml") == 2
        assert a.client.patch("/api/v1/tenants/ml", json={"quota_gpus": 6}).status_code == 200
        r = b.client.patch("/api/v1/tenants/ml", json={"weight": 4})  # b still holds quota 2
        assert r.status_code == 200 and r.json()["quota_gpus"] == 6 and r.json()["weight"] == 4, r.json()
        assert TenantSettings.decode(shared.data["ml"]) == TenantSettings(6.0, 4.0, 5, None)
        assert a.client.patch("/api/v1/tenants/ml", json={"max_priority": None}).status_code == 200
        a.tick()
        b.tick()
        for ip in (a, b):
            row = next(t for t in ip.client.get("/api/v1/tenants").json()["tenants"] if t["name"] == "ml")
            assert (row["quota_gpus"], row["weight"]) == (6, 4), row
        assert TenantSettings.decode(shared.data["ml"]) == TenantSettings(6.0, 4.0, None, None)


def test_a_change_the_shared_object_does_not_take_answers_503_and_changes_nothing(tmp_path: Path) -> None:
    shared = SharedObject()
    with replica(tmp_path / "a", shared) as a:
        a.tenant("ml", quota_gpus=2)
        shared.fail = "ConfigMap default/x-tenants could not be written: 403 Forbidden"
        r = a.client.patch("/api/v1/tenants/ml", json={"quota_gpus": 8})
        assert r.status_code == 503 and r.json()["where"] == "tenancy" and "403 Forbidden" in r.json()["error"]
        assert r.headers["retry-after"] == "5"
        r = a.client.post("/api/v1/tenants", json={"name": "cv", "quota_gpus": 1})
        assert r.status_code == 503
        a.tick()
        assert _quota(a, "ml") == 2 and _quota(a, "cv") is False


def test_an_unreadable_key_keeps_the_last_good_quota(tmp_path: Path) -> None:
    shared = SharedObject()
    with replica(tmp_path / "a", shared) as a:
        a.tenant("ml", quota_gpus=2)
        shared.data["ml"] = '{"quota_gpus": "lots"}'
        shared.data["Bad_Key"] = "{}"
        shared.version += 1
        a.tick()
        assert _quota(a, "ml") == 2
        shared.data["ml"] = '{"quota_gpus": 3}'
        shared.version += 1
        a.tick()
        assert _quota(a, "ml") == 3
        del shared.data["ml"]  # removed by hand: its settings are deleted (no quota)
        shared.version += 1
        a.tick()
        assert _quota(a, "ml") is None


def test_a_store_that_never_applied_the_shared_object_adds_its_tenants_at_the_start(tmp_path: Path) -> None:
    shared = SharedObject()
    shared.data["cv"] = TenantSettings(quota_gpus=5.0).encode()
    with replica(tmp_path / "a", shared) as a:  # no shared settings applied yet: made here, before sharing
        a.service.store.upsert_tenant("ml", 2.0, 1.0)
        a.service.store.upsert_tenant("cv", 1.0, 1.0)
        a.service.store.set_meta("shared_tenancy_uid", "")
    with replica(tmp_path / "a", shared) as a:
        assert TenantSettings.decode(shared.data["ml"]).quota_gpus == 2.0  # added: an upgrade loses no quota
        assert _quota(a, "ml") == 2 and _quota(a, "cv") == 5  # the shared object wins where it names a tenant
    db = sqlite3.connect(tmp_path / "a" / "gpucluster.db")
    try:
        assert db.execute("SELECT value FROM meta WHERE key='shared_tenancy_uid'").fetchone() == ("uid-1",)
    finally:
        db.close()


class Racing(Replica):
    """A replica whose scheduling pass runs while a REST write of it waits for the shared object's answer (the
    handler awaits a worker thread; the event loop runs ticks meanwhile): ``meanwhile`` runs after the write, as
    another replica's change and this replica's tick would."""

    meanwhile: Any = None

    def publish_tenant(self, name: str, settings: TenantSettings, local: Mapping[str, TenantSettings],
                       fields: Collection[str] | None = None) -> TenantSettings:
        self.shared.write({name: settings}, fields=fields)
        written = self.shared.read().tenants[name]  # what this write wrote (the API server's answer)
        if self.meanwhile is not None:
            self.meanwhile()
        return written


def test_a_rest_write_answered_after_a_newer_shared_state_was_applied_does_not_undo_it(tmp_path: Path) -> None:
    """a's PATCH of the weight is written; before its handler stores it, another replica sets a quota and a's
    pass applies that newer state. The handler's store write (the weight's write: no quota) must not leave a
    holding no quota while it counts the newer state applied: the quota holds on a from then on."""
    shared = SharedObject()
    runtime = Racing(shared)
    config = ServiceConfig(data_dir=tmp_path / "a", speed=0.0, admin_token=ADMIN, tenants_on_first_use=True)
    service, _ = open_service(runtime, config)
    client = TestClient(create_app(service), headers={"Authorization": f"Bearer {ADMIN}"},
                        raise_server_exceptions=False)
    a = InProc(service, client, tmp_path / "a")
    try:
        a.tenant("ml")  # no quota
        a.tick()

        def other_replica_sets_a_quota_and_a_ticks() -> None:
            shared.write({"ml": TenantSettings(quota_gpus=2.0)}, fields={"quota_gpus"})
            a.tick()
            runtime.meanwhile = None

        runtime.meanwhile = other_replica_sets_a_quota_and_a_ticks
        assert a.client.patch("/api/v1/tenants/ml", json={"weight": 3}).status_code == 200
        assert TenantSettings.decode(shared.data["ml"]) == TenantSettings(2.0, 3.0)
        a.tick()
        assert _quota(a, "ml") == 2
        _second_waits_for_quota(a)
    finally:
        service.close()


class Unreachable(Replica):
    """A replica that cannot read (nor write) the shared object at its start."""

    def seed_tenancy(self, local: Mapping[str, TenantSettings], synced_uid: str | None) -> str:
        raise RuntimeError("ConfigMap default/x-tenants could not be read: 503 Service Unavailable")


def test_a_replica_that_cannot_add_its_tenants_at_the_start_does_not_start(tmp_path: Path) -> None:
    """A store that never applied the shared object (an upgrade from per-replica tenants) whose start cannot read
    it: applying the shared object (read by the watch) at the first pass would reset the tenants it does not name
    to no quota, and they would never be added. The start fails instead, saying why; the next one adds them."""
    shared = SharedObject()
    shared.data["cv"] = TenantSettings(quota_gpus=5.0).encode()
    with replica(tmp_path / "a", shared) as a:
        a.service.store.upsert_tenant("ml", 2.0, 1.0)
        a.service.store.set_meta("shared_tenancy_uid", "")
    config = ServiceConfig(data_dir=tmp_path / "a", speed=0.0, admin_token=ADMIN, tenants_on_first_use=True)
    with pytest.raises(RuntimeUnavailableError, match="503 Service Unavailable"):
        open_service(Unreachable(shared), config)  # (it started: its first pass left ml with no quota)
    assert "ml" not in shared.data
    with replica(tmp_path / "a", shared) as a:  # the data directory was given back; this start adds ml
        assert TenantSettings.decode(shared.data["ml"]).quota_gpus == 2.0
        a.tick()
        assert _quota(a, "ml") == 2


def test_a_replica_with_no_good_value_of_a_broken_key_admits_none_of_its_tenants_jobs(tmp_path: Path) -> None:
    """ml's key broke before this replica applied a good value of it (it started later): ml gets no GPUs here
    (a quota of 0: a job is refused at submission, saying so) until the key can be read (the replicas that
    applied its quota keep it), never no quota."""
    shared = SharedObject()
    shared.data["ml"] = '{"quota_gpus": "2"}'
    with replica(tmp_path / "b", shared) as b:
        b.tick()
        r = b.client.post("/api/v1/jobs", json={"name": "one", "tenant": "ml", "resources": GPU2})
        assert r.status_code == 422 and "quota is 0 GPUs" in r.json()["error"], r.text
        assert _quota(b, "ml") == 0
        shared.data["ml"] = '{"quota_gpus": 2}'
        shared.version += 1
        b.tick()
        assert _quota(b, "ml") == 2
        r = b.client.post("/api/v1/jobs", json={"name": "one", "tenant": "ml", "resources": GPU2})
        assert r.status_code == 201, r.text
        b.tick()
        assert b.client.get("/api/v1/jobs").json()["jobs"][0]["status"] == "running"


def test_a_shared_object_made_anew_without_a_replicas_tenants_does_not_reset_them(tmp_path: Path) -> None:
    """The ConfigMap deleted, then made anew by a replica whose store holds no tenant (a new replica's start):
    another uid, naming no tenant. A running replica that holds ml's quota adds ml to it (as its start would)
    instead of resetting ml to no quota: ml's second job waits, and the shared object names ml again."""
    shared = SharedObject()
    with replica(tmp_path / "a", shared) as a:
        a.tenant("ml", quota_gpus=2)
        a.tick()
        shared.data, shared.uid = {}, "uid-2"
        shared.version += 1
        a.tick()
        assert _quota(a, "ml") == 2
        assert TenantSettings.decode(shared.data["ml"]).quota_gpus == 2.0
        _second_waits_for_quota(a)
