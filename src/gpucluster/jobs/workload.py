"""What a job's containers run: image, command, environment, volumes, service account, tolerations.

A :class:`Workload` is the part of a job a scheduler never looks at but a cluster needs to run it. The
control plane's REST API, ``gpucluster submit`` and the dashboard take it with the job; on Kubernetes it becomes
the pod template of the job's batch/v1 Job (:mod:`gpucluster.kubernetes.workloads`); the embedded backend
keeps it with the job and simulates the run time as before (there is no image to run).

Field names follow the API (snake case); :meth:`Workload.from_dict` is the one parser, used for the API body,
the store and the annotation a Job carries, and reports a bad field as ``ValueError("where: why")`` with
``where`` the field's path in the request (``env.2.key``, ``volumes.0.mount_path``, as the API's other
422 answers name fields). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from gpucluster.model.limits import (
    MAX_ARG_CHARS,
    MAX_ARGS,
    MAX_ENV,
    MAX_ENV_FROM,
    MAX_ENV_VALUE_CHARS,
    MAX_IMAGE_CHARS,
    MAX_PATH_CHARS,
    MAX_TOLERATIONS,
    MAX_VOLUMES,
)

IMAGE_RE: Final = (r"^(?:[A-Za-z0-9][A-Za-z0-9.-]*(?::[0-9]{1,5})?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                   r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
                   r"(?:@sha256:[0-9a-f]{64})?$")
"""A container image reference: ``[registry[:port]/]path[:tag][@sha256:digest]`` (lower-case path)."""
ENV_NAME_RE: Final = r"^[-._a-zA-Z][-._a-zA-Z0-9]*$"
OBJECT_NAME_RE: Final = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
"""A Secret, ConfigMap, PersistentVolumeClaim or ServiceAccount name (DNS subdomain)."""
SECRET_KEY_RE: Final = r"^[-._a-zA-Z0-9]+$"
"""A key inside a Secret or ConfigMap."""
VOLUME_NAME_RE: Final = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
LABEL_KEY_RE: Final = r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$"
LABEL_VALUE_RE: Final = r"^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$"
OPERATORS: Final = ("Equal", "Exists")
EFFECTS: Final = ("", "NoSchedule", "PreferNoSchedule", "NoExecute")
SOURCES: Final = ("pvc", "config_map", "secret")
"""What a volume mount may mount, by name: a PersistentVolumeClaim, a ConfigMap or a Secret."""

_IMAGE = re.compile(IMAGE_RE)
_ENV_NAME = re.compile(ENV_NAME_RE)
_OBJECT = re.compile(OBJECT_NAME_RE)
_KEY = re.compile(SECRET_KEY_RE)
_VOLUME = re.compile(VOLUME_NAME_RE)
_LABEL_KEY = re.compile(LABEL_KEY_RE)
_LABEL_VALUE = re.compile(LABEL_VALUE_RE)


@dataclass(frozen=True, slots=True)
class EnvVar:
    """One environment variable: a literal ``value``, or the ``key`` of a Secret or ConfigMap named here."""

    name: str
    value: str = ""
    secret: str = ""
    config_map: str = ""
    key: str = ""
    optional: bool = False
    """With ``secret``/``config_map``: start even when the object or key is missing."""


@dataclass(frozen=True, slots=True)
class EnvFrom:
    """Every key of a Secret or ConfigMap as environment variables (each name prefixed by ``prefix``)."""

    secret: str = ""
    config_map: str = ""
    prefix: str = ""
    optional: bool = False


@dataclass(frozen=True, slots=True)
class VolumeMount:
    """A PersistentVolumeClaim, ConfigMap or Secret, by name, mounted at ``mount_path`` in every container."""

    mount_path: str
    pvc: str = ""
    config_map: str = ""
    secret: str = ""
    read_only: bool = False
    sub_path: str = ""
    name: str = ""
    """The pod's volume name (default ``vol-<index>``)."""

    @property
    def source(self) -> tuple[str, str]:
        """(kind, object name): ``("pvc", "data")``."""
        for kind in SOURCES:
            if getattr(self, kind):
                return kind, str(getattr(self, kind))
        raise AssertionError("a volume mount without a source passed validation")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A Kubernetes toleration (``operator`` Equal or Exists; ``effect`` empty = every effect)."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = None


@dataclass(frozen=True, slots=True)
class Workload:
    """What a job's containers run (see the module docstring). Empty fields mean "the image's own"."""

    image: str = ""
    command: tuple[str, ...] = ()
    args: tuple[str, ...] = ()
    env: tuple[EnvVar, ...] = ()
    env_from: tuple[EnvFrom, ...] = ()
    working_dir: str = ""
    volumes: tuple[VolumeMount, ...] = ()
    service_account: str = ""
    tolerations: tuple[Toleration, ...] = field(default=())

    @property
    def empty(self) -> bool:
        return self == _EMPTY

    def to_dict(self) -> dict[str, Any]:
        """The API's view (and what :meth:`from_dict` reads back): every field, defaults left out inside items."""
        return {
            "image": self.image,
            "command": list(self.command),
            "args": list(self.args),
            "env": [_compact(e) for e in self.env],
            "env_from": [_compact(e) for e in self.env_from],
            "working_dir": self.working_dir,
            "volumes": [_compact(v) for v in self.volumes],
            "service_account": self.service_account,
            "tolerations": [_compact(t) for t in self.tolerations],
        }

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any] | None) -> Workload:
        """Parse and check (``ValueError("where: why")``); None or ``{}`` is the empty workload."""
        if not raw:
            return _EMPTY
        if not isinstance(raw, Mapping):
            raise ValueError("workload: must be a mapping")
        unknown = sorted(set(raw) - set(WORKLOAD_FIELDS))
        if unknown:
            raise ValueError(f"{unknown[0]}: unknown field (known: {', '.join(WORKLOAD_FIELDS)})")
        image = _text(raw.get("image"), "image", MAX_IMAGE_CHARS)
        if image and not _IMAGE.match(image):
            raise ValueError(f"image: {image!r} is not an image reference (registry/path:tag, lower-case path)")
        command = _strings(raw.get("command"), "command")
        args = _strings(raw.get("args"), "args")
        env = tuple(_env(item, f"env.{i}") for i, item in enumerate(_items(raw.get("env"), "env", MAX_ENV)))
        names = [e.name for e in env]
        dup = next((n for i, n in enumerate(names) if n in names[:i]), None)
        if dup is not None:
            raise ValueError(f"env.{names.index(dup, names.index(dup) + 1)}.name: {dup!r} is given twice")
        env_from = tuple(_env_from(item, f"env_from.{i}")
                         for i, item in enumerate(_items(raw.get("env_from"), "env_from", MAX_ENV_FROM)))
        working_dir = _text(raw.get("working_dir"), "working_dir", MAX_PATH_CHARS)
        if working_dir and not working_dir.startswith("/"):
            raise ValueError(f"working_dir: must be an absolute path, got {working_dir!r}")
        volumes = tuple(_volume(item, f"volumes.{i}")
                        for i, item in enumerate(_items(raw.get("volumes"), "volumes", MAX_VOLUMES)))
        seen_paths: dict[str, int] = {}
        seen_names: dict[str, int] = {}
        for i, v in enumerate(volumes):
            if v.mount_path in seen_paths:
                raise ValueError(f"volumes.{i}.mount_path: {v.mount_path!r} is already volumes."
                                 f"{seen_paths[v.mount_path]}'s")
            seen_paths[v.mount_path] = i
            name = v.name or f"vol-{i}"
            if name in seen_names:
                raise ValueError(f"volumes.{i}.name: {name!r} is already volumes.{seen_names[name]}'s")
            seen_names[name] = i
        account = _text(raw.get("service_account"), "service_account", 253)
        if account and not _OBJECT.match(account):
            raise ValueError(f"service_account: {account!r} is not a valid name (lower-case DNS subdomain)")
        tolerations = tuple(_toleration(item, f"tolerations.{i}")
                            for i, item in enumerate(_items(raw.get("tolerations"), "tolerations",
                                                            MAX_TOLERATIONS)))
        return cls(image, command, args, env, env_from, working_dir, volumes, account, tolerations)


WORKLOAD_FIELDS: Final = ("image", "command", "args", "env", "env_from", "working_dir", "volumes", "service_account",
                 "tolerations")
"""The job fields a :class:`Workload` is made of (the API takes them at the top level of a job)."""
NO_WORKLOAD: Final = Workload()
"""The empty workload (a job that says nothing about what it runs)."""
_EMPTY: Final = NO_WORKLOAD


def workload_fields(body: Mapping[str, Any]) -> dict[str, Any]:
    """The workload's fields of a job body (the others left out)."""
    return {k: body[k] for k in WORKLOAD_FIELDS if k in body and body[k] not in (None, "", [], ())}


# ---------------------------------------------------------------------------------------------- parsing
def _compact(item: Any) -> dict[str, Any]:
    """A dataclass item as a dict without the fields left at their default (its required ones always)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(item):
        value = getattr(item, f.name)
        if f.default is dataclasses.MISSING or value != f.default:
            out[f.name] = value
    return out


def _text(value: Any, where: str, most: int) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where}: must be a string, got {type(value).__name__}")
    if len(value) > most:
        raise ValueError(f"{where}: at most {most} characters, got {len(value)}")
    if any(ord(c) < 32 and c not in "\t\n" for c in value):
        raise ValueError(f"{where}: control characters are not allowed")
    return value


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: must be a list of strings")
    if len(value) > MAX_ARGS:
        raise ValueError(f"{where}: at most {MAX_ARGS} items, got {len(value)}")
    return tuple(_text(v, f"{where}.{i}", MAX_ARG_CHARS) for i, v in enumerate(value))


def _items(value: Any, where: str, most: int) -> list[Mapping[str, Any]]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{where}: must be a list")
    if len(value) > most:
        raise ValueError(f"{where}: at most {most} items, got {len(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ValueError(f"{where}[{i}]: must be a mapping")
    return list(value)


def _keys(item: Mapping[str, Any], where: str, allowed: tuple[str, ...]) -> None:
    unknown = sorted(set(item) - set(allowed))
    if unknown:
        raise ValueError(f"{where}.{unknown[0]}: unknown field (known: {', '.join(allowed)})")


def _object(value: Any, where: str) -> str:
    name = _text(value, where, 253)
    if name and not _OBJECT.match(name):
        raise ValueError(f"{where}: {name!r} is not a valid name (lower-case DNS subdomain)")
    return name


def _flag(value: Any, where: str) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ValueError(f"{where}: must be true or false")
    return value


def _one_source(item: Mapping[str, Any], where: str, kinds: tuple[str, ...]) -> tuple[str, str]:
    given = [(k, _object(item.get(k), f"{where}.{k}")) for k in kinds if item.get(k) not in (None, "")]
    if len(given) != 1:
        raise ValueError(f"{where}: give exactly one of {', '.join(kinds)}" +
                         (f" (got {', '.join(k for k, _ in given)})" if given else ""))
    return given[0]


def _env(item: Mapping[str, Any], where: str) -> EnvVar:
    _keys(item, where, ("name", "value", "secret", "config_map", "key", "optional"))
    name = _text(item.get("name"), f"{where}.name", 253)
    if not _ENV_NAME.match(name):
        raise ValueError(f"{where}.name: {name!r} is not an environment variable name")
    refs = [k for k in ("secret", "config_map") if item.get(k) not in (None, "")]
    if not refs:
        if item.get("key") not in (None, "") or item.get("optional") is not None:
            raise ValueError(f"{where}: key and optional go with secret or config_map")
        return EnvVar(name, _text(item.get("value"), f"{where}.value", MAX_ENV_VALUE_CHARS))
    if item.get("value") not in (None, ""):
        raise ValueError(f"{where}: give value or {refs[0]}, not both")
    kind, obj = _one_source(item, where, ("secret", "config_map"))
    key = _text(item.get("key"), f"{where}.key", 253)
    if not key or not _KEY.match(key):
        raise ValueError(f"{where}.key: the key inside {kind} {obj!r} is required (letters, digits, - _ .)")
    optional = _flag(item.get("optional"), f"{where}.optional")
    return EnvVar(name, secret=obj if kind == "secret" else "", config_map=obj if kind == "config_map" else "",
                  key=key, optional=optional)


def _env_from(item: Mapping[str, Any], where: str) -> EnvFrom:
    _keys(item, where, ("secret", "config_map", "prefix", "optional"))
    kind, obj = _one_source(item, where, ("secret", "config_map"))
    prefix = _text(item.get("prefix"), f"{where}.prefix", 253)
    if prefix and not _ENV_NAME.match(prefix):
        raise ValueError(f"{where}.prefix: {prefix!r} does not start an environment variable name")
    return EnvFrom(secret=obj if kind == "secret" else "", config_map=obj if kind == "config_map" else "",
                   prefix=prefix, optional=_flag(item.get("optional"), f"{where}.optional"))


def _volume(item: Mapping[str, Any], where: str) -> VolumeMount:
    _keys(item, where, ("mount_path", *SOURCES, "read_only", "sub_path", "name"))
    path = _text(item.get("mount_path"), f"{where}.mount_path", MAX_PATH_CHARS)
    if not path.startswith("/"):
        raise ValueError(f"{where}.mount_path: must be an absolute path, got {path!r}")
    kind, obj = _one_source(item, where, SOURCES)
    sub = _text(item.get("sub_path"), f"{where}.sub_path", MAX_PATH_CHARS)
    if sub and (sub.startswith("/") or ".." in sub.split("/")):
        raise ValueError(f"{where}.sub_path: must be a relative path without '..', got {sub!r}")
    name = _text(item.get("name"), f"{where}.name", 63)
    if name and not _VOLUME.match(name):
        raise ValueError(f"{where}.name: {name!r} is not a volume name (lower-case DNS label)")
    return VolumeMount(path, **{kind: obj}, read_only=_flag(item.get("read_only"), f"{where}.read_only"),
                       sub_path=sub, name=name)


def _toleration(item: Mapping[str, Any], where: str) -> Toleration:
    _keys(item, where, ("key", "operator", "value", "effect", "toleration_seconds"))
    key = _text(item.get("key"), f"{where}.key", 317)
    if key and not _LABEL_KEY.match(key):
        raise ValueError(f"{where}.key: {key!r} is not a taint key")
    operator = _text(item.get("operator"), f"{where}.operator", 16) or "Equal"
    if operator not in OPERATORS:
        raise ValueError(f"{where}.operator: must be Equal or Exists, got {operator!r}")
    value = _text(item.get("value"), f"{where}.value", 63)
    if value and not _LABEL_VALUE.match(value):
        raise ValueError(f"{where}.value: {value!r} is not a taint value")
    if operator == "Exists" and value:
        raise ValueError(f"{where}.value: must be empty with operator Exists")
    if not key and operator != "Exists":
        raise ValueError(f"{where}.key: an empty key tolerates every taint only with operator Exists")
    effect = _text(item.get("effect"), f"{where}.effect", 32)
    if effect not in EFFECTS:
        raise ValueError(f"{where}.effect: must be NoSchedule, PreferNoSchedule or NoExecute (or empty), "
                         f"got {effect!r}")
    seconds = item.get("toleration_seconds")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= 2**31 - 1:
            raise ValueError(f"{where}.toleration_seconds: must be a whole number of seconds >= 0")
        if effect != "NoExecute":
            raise ValueError(f"{where}.toleration_seconds: only with effect NoExecute")
    return Toleration(key, operator, value, effect, seconds)


__all__ = ["ENV_NAME_RE", "NO_WORKLOAD", "OBJECT_NAME_RE", "SECRET_KEY_RE", "VOLUME_NAME_RE", "WORKLOAD_FIELDS",
           "EnvFrom", "EnvVar", "Toleration", "VolumeMount", "Workload", "workload_fields"]
