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
