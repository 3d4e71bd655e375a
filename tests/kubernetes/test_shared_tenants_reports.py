"""``SharedTenants``'s reports of what cannot be read (a Warning ``TenancyUnreadable`` Event, an error line): once
per key and reason while it lasts, and again when it happens again after it was mended (a key broken a second
time, the ConfigMap deleted a second time)."""

from __future__ import annotations

from typing import Any

from gpucluster.kubernetes.sharedtenants import DELETED, SharedTenants


def _cm(version: int, data: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "cp-tenants", "resourceVersion": str(version), "uid": "u1"}, "data": data}


def test_a_breakage_is_reported_once_while_it_lasts_and_again_when_it_happens_again() -> None:
    said: list[tuple[str, str]] = []
    shared = SharedTenants(None, "default", "cp-tenants", event=lambda uid, reason, message: said.append(
        (reason, message)))
    shared.on_event("ADDED", _cm(1, {"ml": "{"}))
    shared.pending()
    shared.on_event("MODIFIED", _cm(2, {"ml": "{", "cv": "{}"}))
    shared.pending()
    assert len(said) == 1 and "key 'ml'" in said[0][1]  # the same breakage: told once
    shared.on_event("MODIFIED", _cm(3, {"ml": "{}"}))
    shared.pending()
    shared.on_event("MODIFIED", _cm(4, {"ml": "{"}))
    shared.pending()
    assert len(said) == 2 and "key 'ml'" in said[1][1]  # broken again after it was mended: told again
    shared.on_event("DELETED", _cm(4, {}))
    shared.pending()
    shared.on_event("ADDED", {**_cm(6, {}), "metadata": {**_cm(6, {})["metadata"], "uid": "u2"}})
    shared.pending()
    shared.on_event("DELETED", _cm(6, {}))
    shared.pending()
    deletions = [m for _, m in said if "was deleted" in m]
    assert len(deletions) == 2, said  # each deletion is told
    assert shared.status()["errors"].keys() == {DELETED}


def _of(uid: str, version: int, data: dict[str, str]) -> dict[str, Any]:
    cm = _cm(version, data)
    return {**cm, "metadata": {**cm["metadata"], "uid": uid}}


def test_a_read_of_a_configmap_deleted_or_replaced_never_becomes_the_newest_again() -> None:
    """The ConfigMap deleted and made anew (uid u2): a late read of the old one (the answer to a write that raced
    the deletion, a watch event in flight) must not bring its settings back; before, any other uid counted as
    newer, so the old quota held until the next change."""
    shared = SharedTenants(None, "default", "cp-tenants")
    shared.on_event("ADDED", _of("u1", 1, {"ml": '{"quota_gpus": 2}'}))
    shared.on_event("ADDED", _of("u2", 9, {"ml": '{"quota_gpus": 8}'}))
    shared.on_event("MODIFIED", _of("u1", 5, {"ml": '{"quota_gpus": 2}'}))
    assert shared.latest is not None and shared.latest.uid == "u2" and shared.latest.tenants["ml"].quota_gpus == 8
    shared.on_event("DELETED", _of("u2", 9, {}))
    shared.on_event("MODIFIED", _of("u2", 10, {"ml": '{"quota_gpus": 1}'}))  # a late event of the deleted one
    shared.on_event("ADDED", _of("u3", 12, {"ml": '{"quota_gpus": 4}'}))
    assert shared.latest.uid == "u3" and shared.latest.tenants["ml"].quota_gpus == 4
    shared.on_event("MODIFIED", _of("u3", 13, {"ml": '{"quota_gpus": 5}'}))  # the live object still moves on
    assert shared.latest.tenants["ml"].quota_gpus == 5
