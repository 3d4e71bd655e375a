"""Tenant settings shared between control-plane replicas, and how a replica applies them. Pure: no I/O.

On Kubernetes every replica of ``gpucluster up`` keeps its own store, but what decides admission must be the same on
all of them: each tenant's GPU quota, fair-share weight, highest priority and limit of queued jobs. Those settings
live in one shared object (``gpucluster.kubernetes.sharedtenants``: a ConfigMap, one data key per tenant whose
value is :meth:`TenantSettings.encode`'s JSON); every replica reads it (:func:`read_shared`) and applies it to its
store (:func:`apply_shared`). Tokens are not settings: they stay in each replica's store.

**Applying** a shared state ``S`` to a replica's settings ``current`` (:func:`apply_shared`):

* a tenant with a readable key in ``S`` gets exactly ``S``'s settings (created when new);
* a tenant whose key cannot be read (hand-edited: bad JSON, a value out of range, a key that is no tenant name)
  keeps what it had (``current``: the last good state), and the key is reported with why;
* a tenant ``S`` does not name is reset to the defaults (no quota, weight 1): removing its key deletes its
  settings everywhere (the tenant itself, its jobs and its tokens stay).

Applying is idempotent (applying ``S`` twice changes nothing the second time), depends only on ``current`` and
``S`` (every replica applying ``S`` ends with the same settings for every tenant ``S`` names), and never loses a
quota through an unreadable key.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gpucluster.model.limits import MAX_PRIORITY, MAX_TENANT_QUEUED

MAX_QUOTA_GPUS = 1_000_000.0
"""The largest quota a tenant may have (the REST API's bound too)."""
MAX_WEIGHT = 1000.0
TENANT_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
"""A tenant's name (the REST API's ``NAME_RE``): a DNS label, so also a valid ConfigMap key."""
FIELDS = ("quota_gpus", "weight", "max_priority", "max_queued_jobs")


@dataclass(frozen=True, slots=True)
class TenantSettings:
    """What decides a tenant's admission, the same on every replica."""

    quota_gpus: float | None = None
    """GPU-equivalents the tenant may hold; None: no quota."""
    weight: float = 1.0
    """Fair-share weight (> 0)."""
    max_priority: int | None = None
    """Highest job priority it may ask for; None: the default."""
    max_queued_jobs: int | None = None
    """Jobs it may have pending at once; None: the service's default."""

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> TenantSettings:
        """From a store row (``Store.tenants()``)."""
        quota = row.get("quota_gpus")
        most, queued = row.get("max_priority"), row.get("max_queued_jobs")
        return cls(None if quota is None else float(quota), float(row.get("weight", 1.0)),
                   None if most is None else int(most), None if queued is None else int(queued))

    def encode(self) -> str:
        """The shared object's value for this tenant (compact JSON, keys sorted)."""
        return json.dumps({f: getattr(self, f) for f in FIELDS}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def decode(cls, text: str) -> TenantSettings:
        """Read one value of the shared object; ValueError says what is wrong (the field and why)."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"not JSON: {exc}") from None
        if not isinstance(doc, dict):
            raise ValueError(f"not a JSON object but {type(doc).__name__}")
        unknown = sorted(set(doc) - set(FIELDS))
        if unknown:
            raise ValueError(f"unknown field(s) {', '.join(unknown)[:200]} (known: {', '.join(FIELDS)})")
        quota = _number(doc, "quota_gpus", 0.0, MAX_QUOTA_GPUS, none_ok=True)
        weight = _number(doc, "weight", 0.0, MAX_WEIGHT, none_ok=False, above=True)
        most = _whole(doc, "max_priority", MAX_PRIORITY)
        queued = _whole(doc, "max_queued_jobs", MAX_TENANT_QUEUED)
        return cls(quota, 1.0 if weight is None else weight, most, queued)


DEFAULTS = TenantSettings()
"""A tenant nobody set anything for (created on first use): no quota, weight 1."""


def _number(doc: Mapping[str, Any], name: str, low: float, high: float, *, none_ok: bool,
            above: bool = False) -> float | None:
    if name not in doc or (doc[name] is None and none_ok):
        return None
    value = doc[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}: expected a number, got {json.dumps(value)[:40]}")
    if value < low or value > high or (above and value == low):
        raise ValueError(f"{name}: {value:g} is out of range ({'>' if above else '>='} {low:g}, <= {high:g})")
    return float(value)


def _whole(doc: Mapping[str, Any], name: str, high: int) -> int | None:
    value = doc.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name}: expected a whole number, got {json.dumps(value)[:40]}")
    if not 0 <= value <= high:
        raise ValueError(f"{name}: {value} is out of range (0..{high})")
    return value


@dataclass(frozen=True, slots=True)
class SharedTenancy:
    """One read of the shared object."""

    version: str
    """Its ``resourceVersion`` (what a replica applied is said by it)."""
    uid: str = ""
    tenants: Mapping[str, TenantSettings] = field(default_factory=dict)
    """The tenants whose key could be read."""
    bad: Mapping[str, str] = field(default_factory=dict)
    """Key -> why it cannot be read (its tenant keeps its last good settings)."""


def read_shared(data: Mapping[str, str] | None, version: str, uid: str = "") -> SharedTenancy:
    """The shared object's ``data`` read key by key: a bad key is reported, never a reason to drop the others."""
    good: dict[str, TenantSettings] = {}
    bad: dict[str, str] = {}
    for key, text in sorted((data or {}).items()):
        if not TENANT_NAME_RE.match(key):
            bad[key] = "not a tenant name (a DNS label: lower-case letters, digits and '-', at most 63)"
            continue
        try:
            good[key] = TenantSettings.decode(str(text))
        except ValueError as exc:
            bad[key] = str(exc)
    return SharedTenancy(version, uid, good, bad)


def encode_all(tenants: Mapping[str, TenantSettings]) -> dict[str, str]:
    """The shared object's ``data`` for these tenants."""
    return {name: s.encode() for name, s in sorted(tenants.items())}


def apply_shared(current: Mapping[str, TenantSettings], shared: SharedTenancy) -> dict[str, TenantSettings]:
    """Every tenant's settings once ``shared`` is applied to ``current`` (see the module docstring)."""
    out = dict.fromkeys(current, DEFAULTS)
    for name in shared.bad:
        if name in current:
            out[name] = current[name]  # the last good state
    out.update(shared.tenants)
    return out


def changes(current: Mapping[str, TenantSettings], shared: SharedTenancy) -> dict[str, TenantSettings]:
    """The tenants whose settings :func:`apply_shared` changes (new ones included), with their new settings."""
    after = apply_shared(current, shared)
    return {name: s for name, s in after.items() if current.get(name) != s}


def patched(shared: str | None, change: TenantSettings, fields: Collection[str]) -> TenantSettings:
    """What a change of only ``fields`` writes over ``shared`` (the shared object's value for the tenant now):
    those fields from ``change``, every other field as the shared object has it, so a change made through one
    replica never undoes another replica's change of a different field that this one has not applied yet. When
    the shared value is missing or cannot be read, ``change`` whole (the replica's own settings with the change:
    the last good state)."""
    unknown = sorted(set(fields) - set(FIELDS))
    if unknown:
        raise ValueError(f"unknown field(s) {', '.join(unknown)} (known: {', '.join(FIELDS)})")
    if shared is None:
        return change
    try:
        base = TenantSettings.decode(shared)
    except ValueError:
        return change
    return replace(base, **{f: getattr(change, f) for f in fields})


def newer(version: str, than: str | None) -> bool:
    """Whether ``version`` (a ``resourceVersion``) comes after ``than``. Kubernetes calls resourceVersions opaque;
    every API server backed by etcd gives increasing integers, compared as such here (so a watch event older than
    a write this replica made is not taken for news); any other pair is news when it differs."""
    if than is None:
        return True
    if version.isdigit() and than.isdigit():
        return int(version) > int(than)
    return version != than


__all__ = ["DEFAULTS", "SharedTenancy", "TenantSettings", "apply_shared", "changes", "encode_all", "newer",
           "patched", "read_shared"]
