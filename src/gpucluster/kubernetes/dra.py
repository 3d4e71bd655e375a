"""Dynamic Resource Allocation (``resource.k8s.io/v1``) objects in the scheduler's terms. Pure: plain JSON dicts in
(camelCase, as the API server sends them), model values out; no client import.

* **ResourceSlice** -> :class:`SliceDevice` per GPU a driver publishes (NVIDIA's ``gpu.nvidia.com`` shape:
  attributes ``uuid``, ``productName``, ``architecture`` ..., capacity ``memory``; HAMi's DRA driver's shape:
  ``allowMultipleAllocations: true`` with consumable ``memory`` and ``cores``). A device without a ``memory``
  capacity, or a MIG / VFIO partition (attribute ``type``), is not a GPU to us and is left out.
* **DeviceClass** -> :class:`DeviceClassInfo`: its CEL selectors and the extended resource it maps to DRA
  (``spec.extendedResourceName``, and always ``deviceclass.resource.kubernetes.io/<class>``).
* **ResourceClaim** -> :class:`ClaimInfo`: its requests and, once allocated, the devices it holds
  (``status.allocation.devices.results``, with ``consumedCapacity`` for shared devices) and ``reservedFor``.
* :class:`Selectors` evaluates DeviceClass and request CEL selectors against a device (``device.driver``,
  ``device.attributes["domain"].name``, ``device.capacity["domain"].name``, ``quantity("40Gi")`` with
  ``compareTo`` / ``isGreaterThan`` / ``isLessThan`` / ``asInteger``), results kept per expression and device.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel

from gpucluster.devices.quantity import parse_quantity
from gpucluster.model import DeviceSpec, NodeSpec

log = logging.getLogger(__name__)

GROUP = "resource.k8s.io"
VERSION = "v1"
FINALIZER = "resource.kubernetes.io/delete-protection"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_EXTENDED_PREFIX = "deviceclass.resource.kubernetes.io/"
CLAIM_KEY_PREFIX = "claim:"
"""Prefix of the state's allocation keys for claims (``claim:<namespace>/<name>``)."""
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
NVIDIA_DRIVERS = frozenset({"gpu.nvidia.com"})
MIB = 1 << 20


class DraInputError(ValueError):
    """A DRA object that cannot be understood; the message names the object and the field."""


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _mib(value: object, where: str) -> int:
    try:
        return math.ceil(parse_quantity(value) / MIB)
    except ValueError as exc:
        raise DraInputError(f"{where}: {exc}") from None


def _number(value: object, where: str) -> Decimal:
    try:
        return parse_quantity(value)
    except ValueError as exc:
        raise DraInputError(f"{where}: {exc}") from None


def _qualify(name: str, driver: str) -> tuple[str, str]:
    """``"productName"`` -> (driver, "productName"); ``"example.com/x"`` -> ("example.com", "x")."""
    domain, sep, short = name.rpartition("/")
    return (domain, short) if sep else (driver, name)


# ------------------------------------------------------------------------------------------------ slices
@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """A consumable capacity's ``requestPolicy`` (all in the capacity's base unit)."""

    default: Decimal | None = None
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None
    valid: tuple[Decimal, ...] = ()

    def consume(self, requested: Decimal | None, total: Decimal) -> Decimal | None:
        """What a request consumes (rounded up as the API says), or None when the policy refuses it."""
        want = requested if requested is not None else (self.default if self.default is not None else total)
        if self.valid:
            fits = [v for v in self.valid if v >= want]
            return min(fits) if fits else None
        if self.minimum is not None:
            want = max(want, self.minimum)
            if self.step:
                steps = math.ceil((want - self.minimum) / self.step)
                want = self.minimum + steps * self.step
        if self.maximum is not None and want > self.maximum:
            return None
        return want


@dataclass(frozen=True, slots=True)
class SliceDevice:
    """One GPU a DRA driver publishes."""

    driver: str
    pool: str
    name: str
    node: str
    uuid: str
    """The ``uuid`` attribute (``GPU-...``), or ``driver/pool/name`` when the driver gives none."""
    model: str
    memory_mib: int
    cores_pct: int = 100
    """The ``cores`` capacity (HAMi's DRA driver: percent of the SMs), 100 when not published."""
    shared: bool = False
    """``allowMultipleAllocations``: several claims may share it, each consuming capacity."""
    taints: tuple[tuple[str, str, str], ...] = ()
    """``(key, value, effect)``."""
    numa: int = 0
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict, compare=False)
    """Domain -> attribute name -> value (str, int, bool, or a version string), for CEL."""
    capacity: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict, compare=False)
    """Domain -> capacity name -> value (base units: bytes, cores ...)."""
    policies: Mapping[str, CapacityPolicy] = field(default_factory=dict, compare=False)
    """Capacity name (driver's domain) -> its request policy."""

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"

    @property
    def blocked(self) -> bool:
        """A taint with effect NoSchedule or NoExecute: no new allocation gets it."""
        return any(effect in BLOCKING_EFFECTS for _, _, effect in self.taints)

    @property
    def vendor(self) -> str:
        if self.driver in NVIDIA_DRIVERS or self.model.upper().startswith("NVIDIA") or self.uuid.startswith("GPU-"):
            return "nvidia"
        return self.driver

    def capacity_value(self, name: str) -> Decimal | None:
        domain, short = _qualify(name, self.driver)
        return (self.capacity.get(domain) or {}).get(short)


@dataclass(frozen=True, slots=True)
class SliceInfo:
    name: str
    driver: str
    pool: str
    generation: int
    node: str
    devices: tuple[SliceDevice, ...]


def _attribute_value(raw: Mapping[str, Any]) -> Any:
    for k in ("string", "int", "bool", "version"):
        if k in raw:
            return raw[k]
    for k in ("strings", "ints", "bools", "versions"):
        if k in raw:
            return list(raw[k])
    return None


def parse_slice(obj: Mapping[str, Any]) -> SliceInfo:
    """A ResourceSlice -> its GPUs. Raises :class:`DraInputError` naming the slice and field."""
    name = str(_meta(obj).get("name") or "")
    where = f"resourceslice {name}"
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        raise DraInputError(f"{where}: spec: missing")
    driver = str(spec.get("driver") or "")
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name") or "") if isinstance(pool, Mapping) else ""
    if not driver or not pool_name:
        raise DraInputError(f"{where}: spec.driver and spec.pool.name: required")
    try:
        generation = int(pool.get("generation") or 0)
    except (TypeError, ValueError):
        raise DraInputError(f"{where}: spec.pool.generation: must be an integer") from None
    node = str(spec.get("nodeName") or "")
    out: list[SliceDevice] = []
    for i, dev in enumerate(spec.get("devices") or []):
        dwhere = f"{where}: spec.devices[{i}]"
        if not isinstance(dev, Mapping) or not dev.get("name"):
            raise DraInputError(f"{dwhere}.name: missing")
        attrs: dict[str, dict[str, Any]] = {}
        for aname, raw in (dev.get("attributes") or {}).items():
            if isinstance(raw, Mapping):
                domain, short = _qualify(str(aname), driver)
                attrs.setdefault(domain, {})[short] = _attribute_value(raw)
        caps: dict[str, dict[str, Decimal]] = {}
        policies: dict[str, CapacityPolicy] = {}
        for cname, raw in (dev.get("capacity") or {}).items():
            if not isinstance(raw, Mapping):
                continue
            domain, short = _qualify(str(cname), driver)
            caps.setdefault(domain, {})[short] = _number(raw.get("value", 0), f"{dwhere}.capacity[{cname}].value")
            pol = raw.get("requestPolicy")
            if isinstance(pol, Mapping):
                rng = pol.get("validRange") or {}
                pw = f"{dwhere}.capacity[{cname}].requestPolicy"

                def opt(v: object, w: str) -> Decimal | None:
                    return None if v is None else _number(v, w)

                policies[short if domain == driver else f"{domain}/{short}"] = CapacityPolicy(
                    default=opt(pol.get("default"), f"{pw}.default"),
                    minimum=opt(rng.get("min"), f"{pw}.validRange.min"),
                    maximum=opt(rng.get("max"), f"{pw}.validRange.max"),
                    step=opt(rng.get("step"), f"{pw}.validRange.step"),
                    valid=tuple(_number(v, f"{pw}.validValues") for v in pol.get("validValues") or ()),
                )
        mine = attrs.get(driver, {})
        kind = str(mine.get("type") or "gpu").lower()
        memory = caps.get(driver, {}).get("memory")
        if memory is None or kind in ("mig", "vfio"):
            continue  # not a whole GPU (a NIC, a MIG or VFIO partition): not ours to place
        taints = tuple((str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
                       for t in dev.get("taints") or () if isinstance(t, Mapping))
        cores = caps.get(driver, {}).get("cores")
        dev_node = str(dev.get("nodeName") or node)
        numa_raw = mine.get("numa", mine.get("numaNode", 0))
        out.append(SliceDevice(
            driver=driver, pool=pool_name, name=str(dev["name"]), node=dev_node,
            uuid=str(mine.get("uuid") or f"{driver}/{pool_name}/{dev['name']}"),
            model=str(mine.get("productName") or mine.get("model") or driver),
            memory_mib=math.ceil(memory / MIB),
            cores_pct=int(cores) if cores is not None else 100,
            shared=bool(dev.get("allowMultipleAllocations")),
            taints=taints,
            numa=int(numa_raw) if isinstance(numa_raw, int) else 0,
            attributes=attrs, capacity=caps, policies=policies,
        ))
    return SliceInfo(name, driver, pool_name, generation, node, tuple(out))


# ------------------------------------------------------------------------------------------------ classes
@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    selectors: tuple[str, ...] = ()
    extended_resource: str = ""
    """``spec.extendedResourceName`` (empty when not set)."""
    unreadable: str = ""
    """Why the class's current version cannot be read (empty when it can): nothing is allocated through it
    (its selectors are not known) until it is fixed; the extended resource it mapped stays mapped, so pods
    asking for it wait instead of being taken for HAMi pods."""

    @property
    def extended_names(self) -> tuple[str, ...]:
        """Extended resource names a pod may ask for to get devices of this class."""
        implicit = IMPLICIT_EXTENDED_PREFIX + self.name
        return (self.extended_resource, implicit) if self.extended_resource else (implicit,)


def _selectors(raw: object, where: str) -> tuple[str, ...]:
    out = []
    items: list[Any] = list(raw) if isinstance(raw, list) else []
    for i, sel in enumerate(items):
        expr = ((sel or {}).get("cel") or {}).get("expression") if isinstance(sel, Mapping) else None
        if not isinstance(expr, str) or not expr.strip():
            raise DraInputError(f"{where}[{i}].cel.expression: missing")
        out.append(expr)
    return tuple(out)


def parse_class(obj: Mapping[str, Any]) -> DeviceClassInfo:
    name = str(_meta(obj).get("name") or "")
    spec = obj.get("spec") or {}
    where = f"deviceclass {name}: spec.selectors"
    return DeviceClassInfo(name, _selectors(spec.get("selectors"), where), str(spec.get("extendedResourceName") or ""))


def unreadable_class(obj: Mapping[str, Any], previous: DeviceClassInfo | None, why: str) -> DeviceClassInfo:
    """A DeviceClass whose current version :func:`parse_class` refused (``why``): marked unreadable (no
    allocation through it), mapping the extended resource its spec names if that much can be read, else the one
    its last readable version (``previous``) mapped."""
    meta = _meta(obj)
    spec = obj.get("spec")
    ext = spec.get("extendedResourceName") if isinstance(spec, Mapping) else None
    if not isinstance(ext, str):
        ext = previous.extended_resource if previous is not None else ""
    return DeviceClassInfo(str(meta.get("name") or ""), (), ext, unreadable=why)


# ------------------------------------------------------------------------------------------------ claims
@dataclass(frozen=True, slots=True)
class ClaimRequest:
    name: str
    class_name: str
    selectors: tuple[str, ...] = ()
    count: int = 1
    all_devices: bool = False
    """``allocationMode: All``."""
    capacity: Mapping[str, Decimal] = field(default_factory=dict)
    """``capacity.requests`` (capacity name -> amount in base units)."""
    admin: bool = False


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    request: str
    driver: str
    pool: str
    device: str
    consumed: Mapping[str, Decimal] = field(default_factory=dict)
    share_id: str = ""
    admin: bool = False

    @property
    def key(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    namespace: str
    name: str
    uid: str
    requests: tuple[ClaimRequest, ...]
    allocated: tuple[AllocatedDevice, ...] | None
    """None while not allocated."""
    reserved_for: tuple[tuple[str, str, str], ...] = ()
    """``(resource, name, uid)`` of the consumers."""
    extended: bool = False
    """The claim kube-scheduler (or we) made for a pod's DRA-backed extended resources."""
    resource_version: str = ""
    deleting: bool = False
    raw: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    unreadable: str = ""
    """Why the claim's current version cannot be read (empty when it can; see :func:`unreadable_claim`): it
    is never allocated by us nor given to a pod, but the devices it holds stay held."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def state_key(self) -> str:
        return CLAIM_KEY_PREFIX + self.key


def _request(raw: Mapping[str, Any], where: str) -> ClaimRequest:
    name = str(raw.get("name") or "")
    exact = raw.get("exactly")
    if not isinstance(exact, Mapping):
        first = raw.get("firstAvailable")
        if isinstance(first, list) and first and isinstance(first[0], Mapping):
            exact = first[0]  # we try the first alternative only (see docs/kubernetes.md "DRA")
            where = f"{where}.firstAvailable[0]"
        else:
            raise DraInputError(f"{where}: exactly or firstAvailable: required")
    else:
        where = f"{where}.exactly"
    mode = str(exact.get("allocationMode") or "ExactCount")
    if mode not in ("ExactCount", "All"):
        raise DraInputError(f"{where}.allocationMode: {mode!r} is not known (ExactCount, All)")
    try:
        raw_count = exact.get("count")
        count = 1 if raw_count is None else int(raw_count)
    except (TypeError, ValueError):
        raise DraInputError(f"{where}.count: must be an integer") from None
    if count < 1:
        raise DraInputError(f"{where}.count: must be at least 1")
    caps = {str(k): _number(v, f"{where}.capacity.requests[{k}]")
            for k, v in ((exact.get("capacity") or {}).get("requests") or {}).items()}
    return ClaimRequest(name=name, class_name=str(exact.get("deviceClassName") or ""),
                        selectors=_selectors(exact.get("selectors"), f"{where}.selectors"), count=count,
                        all_devices=mode == "All", capacity=caps, admin=bool(exact.get("adminAccess")))


def parse_claim_template(obj: Mapping[str, Any]) -> tuple[ClaimRequest, ...]:
    """The device requests of a ResourceClaimTemplate (``spec.spec.devices.requests``): what each claim made
    from it asks for."""
    meta = _meta(obj)
    where = f"resourceclaimtemplate {meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    reqs = (((obj.get("spec") or {}).get("spec") or {}).get("devices") or {}).get("requests") or []
    if not isinstance(reqs, list):
        raise DraInputError(f"{where}: spec.spec.devices.requests: must be a list")
    return tuple(_request(r, f"{where}: spec.spec.devices.requests[{i}]") for i, r in enumerate(reqs)
                 if isinstance(r, Mapping))


def parse_claim(obj: Mapping[str, Any]) -> ClaimInfo:
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    where = f"resourceclaim {namespace}/{name}"
    spec = obj.get("spec") or {}
    reqs = ((spec.get("devices") or {}).get("requests")) or []
    requests = tuple(_request(r, f"{where}: spec.devices.requests[{i}]") for i, r in enumerate(reqs)
                     if isinstance(r, Mapping))
    status = obj.get("status") or {}
    alloc = status.get("allocation")
    allocated: tuple[AllocatedDevice, ...] | None = None
    if isinstance(alloc, Mapping):
        results = []
        for i, r in enumerate((alloc.get("devices") or {}).get("results") or []):
            rw = f"{where}: status.allocation.devices.results[{i}]"
            if not isinstance(r, Mapping) or not r.get("device"):
                raise DraInputError(f"{rw}.device: missing")
            consumed = {str(k): _number(v, f"{rw}.consumedCapacity[{k}]")
                        for k, v in (r.get("consumedCapacity") or {}).items()}
            results.append(AllocatedDevice(str(r.get("request") or ""), str(r.get("driver") or ""),
                                           str(r.get("pool") or ""), str(r["device"]), consumed,
                                           str(r.get("shareID") or ""), bool(r.get("adminAccess"))))
        allocated = tuple(results)
    reserved = tuple((str(c.get("resource") or ""), str(c.get("name") or ""), str(c.get("uid") or ""))
                     for c in status.get("reservedFor") or () if isinstance(c, Mapping))
    annotations = meta.get("annotations") or {}
    return ClaimInfo(namespace, name, str(meta.get("uid") or ""), requests, allocated, reserved,
                     str(annotations.get(EXTENDED_CLAIM_ANNOTATION, "")) == "true",
                     str(meta.get("resourceVersion") or ""), bool(meta.get("deletionTimestamp")), obj)


def _lenient_results(alloc: object) -> tuple[list[AllocatedDevice], bool]:
    """The allocation results of ``status.allocation`` that can be read (a device named by strings; a
    ``consumedCapacity`` that cannot be read is taken as the whole device), and whether every result could."""
    devices = alloc.get("devices") if isinstance(alloc, Mapping) else None
    results = devices.get("results") if isinstance(devices, Mapping) else None
    if not isinstance(results, list):
        return [], False
    out = []
    complete = True
    for r in results:
        ids = [r.get(k) for k in ("driver", "pool", "device")] if isinstance(r, Mapping) else []
        if not ids or not all(isinstance(x, str) for x in ids) or not ids[2]:
            complete = False
            continue
        consumed: dict[str, Decimal] = {}
        raw = r.get("consumedCapacity")
        try:
            consumed = {str(k): _number(v, "") for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        except DraInputError:
            consumed = {}  # the whole device: holding more than the share keeps it from being given twice
        out.append(AllocatedDevice(str(r.get("request") or ""), str(ids[0]), str(ids[1]), str(ids[2]), consumed,
                                   str(r.get("shareID") or ""), r.get("adminAccess") is True))
    return out, complete


def unreadable_claim(obj: Mapping[str, Any], previous: ClaimInfo | None, why: str) -> ClaimInfo:
    """A ResourceClaim whose current version :func:`parse_claim` refused (``why``), kept so that the devices it
    holds are never given to another claim: the allocation results that can be read (a share that cannot is the
    whole device), and, where the allocation cannot be read whole, also what its last readable version
    (``previous``) held. A claim without ``status.allocation`` holds nothing (it was deallocated). No
    requests: we never allocate it, and no pod is given it, until it can be read again."""
    meta = _meta(obj)
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    status = obj.get("status")
    allocated: tuple[AllocatedDevice, ...] | None
    if status is None or (isinstance(status, Mapping) and status.get("allocation") is None):
        allocated = None  # no allocation (a status that is not a mapping says nothing: below)
    else:
        found, complete = _lenient_results(status.get("allocation") if isinstance(status, Mapping) else None)
        if not complete and previous is not None and previous.allocated:
            keys = {d.key for d in found}
            found += [d for d in previous.allocated if d.key not in keys]
        allocated = tuple(found) if found or complete else None
    refs = status.get("reservedFor") if isinstance(status, Mapping) else None
    if isinstance(refs, list):
        reserved = tuple((str(c.get("resource") or ""), str(c.get("name") or ""), str(c.get("uid") or ""))
                         for c in refs if isinstance(c, Mapping))
    else:
        reserved = previous.reserved_for if previous is not None else ()
    annotations = meta.get("annotations")
    extended = isinstance(annotations, Mapping) and str(annotations.get(EXTENDED_CLAIM_ANNOTATION, "")) == "true"
    return ClaimInfo(namespace, name, str(meta.get("uid") or ""), (), allocated, reserved, extended,
                     str(meta.get("resourceVersion") or ""), bool(meta.get("deletionTimestamp")), obj, why)


# ------------------------------------------------------------------------------------------------ CEL
def _cel_quantity(text: Any) -> celtypes.IntType:
    return celtypes.IntType(int(parse_quantity(str(text))))


def _cel_compare(a: Any, b: Any) -> celtypes.IntType:
    x, y = int(a), int(b)
    return celtypes.IntType((x > y) - (x < y))


_CEL_FUNCTIONS: dict[str, Any] = {
    "quantity": _cel_quantity,
    "compareTo": _cel_compare,
    "isGreaterThan": lambda a, b: celtypes.BoolType(int(a) > int(b)),
    "isLessThan": lambda a, b: celtypes.BoolType(int(a) < int(b)),
    "asInteger": lambda a: celtypes.IntType(int(a)),
    "asApproximateFloat": lambda a: celtypes.DoubleType(float(a)),
}


def _cel_value(v: Any) -> Any:
    if isinstance(v, Decimal):
        return int(v)
    if isinstance(v, Mapping):
        return {str(k): _cel_value(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_cel_value(x) for x in v]
    return v


class Selectors:
    """CEL selectors over devices, compiled once per expression and evaluated once per (expression, device).

    An expression that does not compile, or fails on a device (a missing attribute), does not match it; the
    reason is kept in :attr:`errors` (expression -> message) and logged once."""

    def __init__(self) -> None:
        self._env = celpy.Environment()
        self._programs: dict[str, Any] = {}
        self._results: dict[tuple[str, str], bool] = {}
        self.errors: dict[str, str] = {}

    def _program(self, expr: str) -> Any:
        prog = self._programs.get(expr)
        if prog is None and expr not in self.errors:
            try:
                prog = self._env.program(self._env.compile(expr), functions=_CEL_FUNCTIONS)
            except Exception as exc:
                self.errors[expr] = f"does not compile: {exc}"
                log.warning("CEL selector %r %s", expr, self.errors[expr])
                return None
            self._programs[expr] = prog
        return prog

    def match(self, expr: str, dev: SliceDevice) -> bool:
        key = (expr, dev.key + "#" + str(id(dev.attributes)))
        found = self._results.get(key)
        if found is not None:
            return found
        prog = self._program(expr)
        ok = False
        if prog is not None:
            activation = {"device": json_to_cel({
                "driver": dev.driver,
                "attributes": _cel_value(dev.attributes),
                "capacity": _cel_value(dev.capacity),
                "allowMultipleAllocations": dev.shared,
            })}
            try:
                ok = bool(prog.evaluate(activation))
            except Exception as exc:
                msg = f"fails on device {dev.key}: {exc}".split("\n")[0][:300]
                if expr not in self.errors:
                    log.info("CEL selector %r %s", expr, msg)
                self.errors.setdefault(expr, msg)
        if len(self._results) > 200_000:
            self._results.clear()
        self._results[key] = ok
        return ok

    def match_all(self, exprs: Iterable[str], dev: SliceDevice) -> bool:
        return all(self.match(e, dev) for e in exprs)


# ------------------------------------------------------------------------------------------------ amounts
def consumption(dev: SliceDevice, req: ClaimRequest) -> tuple[int, int] | None:
    """``(memory MiB, core milli)`` one device of ``req`` takes from ``dev``, or None when it cannot serve it.

    An unshared device is taken whole (when each capacity the request names is at least as large). A shared one
    gives what the request asks for each capacity (its request policy's default, else the whole capacity, when
    the request names none), rounded up as the policy says."""
    for cname, amount in req.capacity.items():
        total = dev.capacity_value(cname)
        if total is None or amount > total:
            return None
    whole = (dev.memory_mib, dev.cores_pct * 10)
    if not dev.shared:
        return whole
    out: list[int] = []
    for cname, total_mib_or_pct in (("memory", dev.memory_mib), ("cores", dev.cores_pct)):
        total = dev.capacity_value(cname)
        if total is None:  # a shared device that does not publish cores: shares them freely
            out.append(total_mib_or_pct if cname == "memory" else 0)
            continue
        policy = dev.policies.get(cname, CapacityPolicy())
        got = policy.consume(req.capacity.get(cname), total)
        if got is None or got > total:
            return None
        out.append(math.ceil(got / MIB) if cname == "memory" else int(got) * 10)
    return out[0], out[1]


def consumed_capacity(dev: SliceDevice, memory_mib: int, core_milli: int) -> dict[str, str]:
    """``consumedCapacity`` of an allocation result on a shared device (the capacities it publishes)."""
    out: dict[str, str] = {}
    if dev.capacity_value("memory") is not None:
        out["memory"] = f"{memory_mib}Mi"
    if dev.capacity_value("cores") is not None:
        out["cores"] = str(core_milli // 10)
    return out


def held(dev: SliceDevice, result: AllocatedDevice) -> tuple[int, int]:
    """``(memory MiB, core milli)`` an allocation result holds on ``dev`` (all of it unless it consumed a share)."""
    if not result.consumed:
        return dev.memory_mib, dev.cores_pct * 10
    mem = result.consumed.get("memory")
    cores = result.consumed.get("cores")
    return (math.ceil(mem / MIB) if mem is not None else 0, int(cores) * 10 if cores is not None else 0)


# ------------------------------------------------------------------------------------------------ nodes
def merge_devices(spec: NodeSpec, devices: Iterable[SliceDevice], nvlink_domain_size: int = 8) -> NodeSpec:
    """The node with the GPUs DRA drivers publish on it: a device whose UUID HAMi's annotations already list is
    the same GPU (marked DRA-published, counted once); the others are appended as DRA-only devices. A device
    with a NoSchedule / NoExecute taint is cordoned."""
    rows = list(spec.devices)
    by_uuid = {d.uuid: i for i, d in enumerate(rows)}
    for dev in sorted(devices, key=lambda d: (d.driver, d.pool, d.name)):
        i = by_uuid.get(dev.uuid)
        if i is not None:
            old = rows[i]
            rows[i] = DeviceSpec(
                uuid=old.uuid, index=old.index, vendor=old.vendor, model=old.model, memory_mib=old.memory_mib,
                core_milli=old.core_milli, numa=old.numa, nvlink_domain=old.nvlink_domain,
                max_tasks=old.max_tasks, healthy=old.healthy, physical_memory_mib=old.physical_memory_mib,
                mode=old.mode, type_name=old.type_name, cordoned=old.cordoned or dev.blocked, dra=dev.key,
                hami=True)
            continue
        index = len(rows)
        by_uuid[dev.uuid] = index
        rows.append(DeviceSpec(
            uuid=dev.uuid, index=index, vendor=dev.vendor, model=dev.model, memory_mib=dev.memory_mib,
            core_milli=max(dev.cores_pct, 1) * 10, numa=dev.numa,
            nvlink_domain=(index // nvlink_domain_size) if nvlink_domain_size > 0 else -1,
            max_tasks=64 if dev.shared else 1, type_name=dev.model, cordoned=dev.blocked, dra=dev.key,
            hami=False))
    if len(rows) == len(spec.devices) and all(a is b for a, b in zip(rows, spec.devices, strict=True)):
        return spec
    return NodeSpec(name=spec.name, cpu_milli=spec.cpu_milli, memory_mib=spec.memory_mib, devices=tuple(rows),
                    labels=spec.labels, rack=spec.rack, leaf=spec.leaf, spine=spec.spine, pool=spec.pool,
                    extended=spec.extended, pair_scores=spec.pair_scores)
