"""The tenants' settings the replicas share (``gpucluster.model.tenants``): reading the shared object key by key,
and applying it to a replica's settings (idempotent, the same on every replica, never losing a quota through an
unreadable key)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.model.tenants import (
    DEFAULTS,
    SharedTenancy,
    TenantSettings,
    apply_shared,
    changes,
    encode_all,
    newer,
    patched,
    read_shared,
)

names = st.sampled_from(["a", "b", "ml", "team-x", "default", "z9"])
settings = st.builds(TenantSettings,
                     quota_gpus=st.none() | st.floats(0, 1000, allow_nan=False).map(lambda q: round(q, 2)),
                     weight=st.floats(0.01, 1000, allow_nan=False).map(lambda w: max(round(w, 2), 0.01)),
                     max_priority=st.none() | st.integers(0, 1000), max_queued_jobs=st.none() | st.integers(0, 10))
tenant_maps = st.dictionaries(names, settings, max_size=5)
bad_values = st.sampled_from(["{", "[1]", '{"quota_gpus": -1}', '{"quota_gpus": "2"}', '{"weight": 0}',
                              '{"weight": null}', '{"max_priority": 1.5}', '{"quota": 2}', '{"quota_gpus": true}'])


@st.composite
def shared_states(draw: st.DrawFn) -> SharedTenancy:
    data = encode_all(draw(tenant_maps))
    for name in draw(st.lists(names, max_size=3)):
        data[name] = draw(bad_values)
    return read_shared(data, str(draw(st.integers(1, 10**6))), "uid-1")


def test_a_value_reads_back_as_written() -> None:
    s = TenantSettings(2.0, 3.0, 50, 7)
    assert TenantSettings.decode(s.encode()) == s
    assert json.loads(s.encode()) == {"quota_gpus": 2.0, "weight": 3.0, "max_priority": 50, "max_queued_jobs": 7}
    assert TenantSettings.decode("{}") == DEFAULTS
    assert TenantSettings.decode('{"quota_gpus": 4}') == TenantSettings(quota_gpus=4.0)


@pytest.mark.parametrize(("text", "why"), [
    ("{", "not JSON"), ("[1]", "not a JSON object"), ('{"quota_gpus": -1}', "quota_gpus: -1 is out of range"),
    ('{"quota_gpus": "2"}', "quota_gpus: expected a number"), ('{"weight": 0}', "weight: 0 is out of range"),
    ('{"max_priority": 1.5}', "max_priority: expected a whole number"), ('{"quota": 2}', "unknown field(s) quota"),
    ('{"quota_gpus": true}', "quota_gpus: expected a number"), ('{"max_queued_jobs": -3}', "max_queued_jobs: -3"),
])
def test_a_bad_value_says_which_field_and_why(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        TenantSettings.decode(text)
    assert why in str(err.value)


def test_a_bad_key_is_reported_and_the_others_read() -> None:
    shared = read_shared({"ml": '{"quota_gpus": 2}', "broken": "{", "Not_A_Name": "{}"}, "7")
    assert shared.tenants == {"ml": TenantSettings(quota_gpus=2.0)}
    assert set(shared.bad) == {"broken", "Not_A_Name"}
    assert "not JSON" in shared.bad["broken"] and "not a tenant name" in shared.bad["Not_A_Name"]


def test_applying_sets_named_tenants_keeps_bad_ones_and_resets_removed_ones() -> None:
    current = {"ml": TenantSettings(quota_gpus=2.0), "cv": TenantSettings(quota_gpus=4.0, weight=2.0),
               "old": TenantSettings(quota_gpus=1.0)}
    shared = read_shared({"ml": '{"quota_gpus": 3}', "cv": "{", "new": '{"quota_gpus": 1}'}, "8")
    assert apply_shared(current, shared) == {"ml": TenantSettings(quota_gpus=3.0), "cv": current["cv"],
                                             "old": DEFAULTS, "new": TenantSettings(quota_gpus=1.0)}
    assert changes(current, shared) == {"ml": TenantSettings(quota_gpus=3.0), "old": DEFAULTS,
                                        "new": TenantSettings(quota_gpus=1.0)}


@given(tenant_maps, shared_states())
def test_applying_the_same_state_twice_changes_nothing_the_second_time(current: dict[str, TenantSettings],
                                                                       shared: SharedTenancy) -> None:
    once = apply_shared(current, shared)
    assert apply_shared(once, shared) == once
    assert changes(once, shared) == {}
    assert {**current, **changes(current, shared)} == once


@given(tenant_maps, tenant_maps, shared_states())
def test_every_replica_ends_with_the_shared_settings_of_every_tenant_it_names(
        one: dict[str, TenantSettings], other: dict[str, TenantSettings], shared: SharedTenancy) -> None:
    a, b = apply_shared(one, shared), apply_shared(other, shared)
    for name, s in shared.tenants.items():
        assert a[name] == s == b[name]
    for name in set(a) & set(b) - set(shared.bad):
        assert a[name] == b[name]


@given(tenant_maps, st.lists(shared_states(), min_size=1, max_size=4))
def test_no_tenant_loses_its_quota_through_an_unreadable_key(current: dict[str, TenantSettings],
                                                            states: list[SharedTenancy]) -> None:
    """Whatever sequence of shared states (each with some hand-broken keys) is applied, a tenant's settings are
    always the last ones a readable key gave it (or what it had before any), never the defaults because its key
    broke."""
    last_good = dict(current)
    now = dict(current)
    for shared in states:
        now = apply_shared(now, shared)
        for name in list(last_good):
            if name not in shared.tenants and name not in shared.bad:
                last_good[name] = DEFAULTS  # removed from the shared object: deleted on purpose
        last_good.update(shared.tenants)
        for name in shared.bad:
            if name in last_good:
                assert now[name] == last_good[name]
        assert {n: s for n, s in now.items() if n in last_good} == last_good


@given(settings, settings, st.sets(st.sampled_from(["quota_gpus", "weight", "max_priority", "max_queued_jobs"])))
def test_a_patch_writes_its_fields_and_keeps_every_other_as_shared(shared: TenantSettings, change: TenantSettings,
                                                                   fields: set[str]) -> None:
    out = patched(shared.encode(), change, fields)
    for f in ("quota_gpus", "weight", "max_priority", "max_queued_jobs"):
        assert getattr(out, f) == getattr(change if f in fields else shared, f)
    assert patched(None, change, fields) == change  # nothing shared yet: the replica's settings with the change
    assert patched("{", change, fields) == change  # unreadable: the same


def test_a_patch_of_an_unknown_field_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown field.*quota"):
        patched(None, DEFAULTS, {"quota"})


def test_resource_versions_compare_as_numbers_when_they_are() -> None:
    assert newer("10", "9") and not newer("9", "10") and not newer("9", "9")
    assert newer("a", None) and newer("b", "a") and not newer("a", "a")
