"""HAMi's pod and node annotations that are not tied to one vendor, and how HAMi v2.10 reads them.

Each reader takes the raw annotation text and returns a value or raises :class:`DeviceInputError` (HAMi
would silently fall back to a default; we tell the user instead, see ``docs/hami-compatibility.md``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gpucluster.devices.base import DeviceInputError

NODE_POLICY_ANNOTATION = "hami.io/node-scheduler-policy"
GPU_POLICY_ANNOTATION = "hami.io/gpu-scheduler-policy"
SCORING_WEIGHTS_ANNOTATION = "hami.io/device-scoring-weights"
"""Per-pod weights of the device score's slot, core and memory terms (``slot=1,core=1,memory=3``)."""
NUMA_BIND_ANNOTATION = "nvidia.com/numa-bind"
"""``true``: every GPU of a container on one NUMA node."""
VGPU_MODE_ANNOTATION = "nvidia.com/vgpu-mode"
"""Only devices whose sharing mode (``hami-core``, ``mig``, ``mps``) appears in the value."""
DEVICE_CORDON_ANNOTATION = "hami.io/device-cordon"
"""Node annotation: comma-separated UUIDs that take no new pods (running pods stay)."""
PAIR_SCORE_ANNOTATION = "hami.io/node-nvidia-score"
"""Node annotation: JSON list ``[{"uuid": ..., "score": {peer uuid: score}}]`` for ``topology-aware``."""

POLICY_BINPACK = "binpack"
POLICY_SPREAD = "spread"
POLICY_NUMA = "numa"
POLICY_MUTEX = "mutex"
POLICY_TOPOLOGY = "topology-aware"
GPU_POLICY_TOKENS = (POLICY_BINPACK, POLICY_SPREAD, POLICY_NUMA, POLICY_MUTEX, POLICY_TOPOLOGY)
"""What ``hami.io/gpu-scheduler-policy`` may name, alone or as a comma-separated chain (HAMi v2.10)."""

_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def parse_bool(value: str, where: str) -> bool:
    """A boolean as Go's ``strconv.ParseBool`` reads it; anything else is an error naming ``where``."""
    text = value.strip()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise DeviceInputError(f"{where}: must be true or false, got {value!r}")


def parse_gpu_policy(value: str, where: str) -> tuple[str, ...]:
    """``hami.io/gpu-scheduler-policy`` -> its tokens in order (``"binpack, numa"`` -> ``("binpack", "numa")``).

    An empty value means no preference (``()``). Unknown tokens are an error."""
    tokens = tuple(t.strip().lower() for t in value.split(",") if t.strip())
    bad = [t for t in tokens if t not in GPU_POLICY_TOKENS]
    if bad:
        raise DeviceInputError(
            f"{where}: unknown policy {bad[0]!r}; use one or a comma-separated chain of {', '.join(GPU_POLICY_TOKENS)}"
        )
    return tokens


@dataclass(frozen=True, slots=True)
class ScoringWeights:
    """Weights of HAMi's device score terms (``hami.io/device-scoring-weights``); all 1 by default."""

    slot: int = 1
    core: int = 1
    memory: int = 1


DEFAULT_WEIGHTS = ScoringWeights()


def parse_scoring_weights(value: str, where: str) -> ScoringWeights:
    """``slot=1,core=2,memory=3`` (each exactly once, any order, integers >= 0, not all 0), as HAMi checks it."""
    parts = value.split(",")
    if len(parts) != 3:
        raise DeviceInputError(f"{where}: expected slot, core, and memory weights, got {value!r}")
    got: dict[str, int] = {}
    for part in parts:
        key, sep, raw = part.strip().partition("=")
        key = key.strip()
        if not sep:
            raise DeviceInputError(f"{where}: expected key=value entries, got {value!r}")
        if key in got:
            raise DeviceInputError(f'{where}: duplicate "{key}" weight')
        try:
            weight = int(raw.strip())
        except ValueError:
            raise DeviceInputError(f'{where}: "{key}" weight must be an integer') from None
        if weight < 0:
            raise DeviceInputError(f'{where}: "{key}" weight must not be negative')
        if key not in ("slot", "core", "memory"):
            raise DeviceInputError(f'{where}: unknown weight "{key}" (slot, core, memory)')
        got[key] = weight
    if not any(got.values()):
        raise DeviceInputError(f"{where}: at least one weight must be positive")
    return ScoringWeights(got["slot"], got["core"], got["memory"])


def split_list(value: str) -> tuple[str, ...]:
    """A comma-separated annotation value, trimmed, without empty entries."""
    return tuple(dict.fromkeys(s.strip() for s in value.split(",") if s.strip()))


def parse_pair_scores(value: str, where: str) -> dict[str, dict[str, int]]:
    """``hami.io/node-nvidia-score`` -> ``{uuid: {peer uuid: score}}``."""
    try:
        raw = json.loads(value)
    except json.JSONDecodeError as exc:
        raise DeviceInputError(f"{where}: not valid JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(raw, list):
        raise DeviceInputError(f"{where}: must be a JSON list of {{uuid, score}} objects")
    out: dict[str, dict[str, int]] = {}
    for i, item in enumerate(raw):
        if not isinstance(item, Mapping) or not isinstance(item.get("uuid"), str):
            raise DeviceInputError(f"{where}[{i}].uuid: missing")
        scores = item.get("score") or {}
        if not isinstance(scores, Mapping) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in scores.values()
        ):
            raise DeviceInputError(f"{where}[{i}].score: must map peer UUIDs to integers")
        out[item["uuid"]] = {str(k): int(v) for k, v in scores.items()}
    return out
