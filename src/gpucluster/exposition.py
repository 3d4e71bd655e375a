"""The one Prometheus exposition path: every ``/metrics`` we serve renders a ``prometheus_client`` registry here
(the control plane's, the monitoring agent's, the scheduler extender's). A leaf module (it imports only
``prometheus_client``) so that every package that serves metrics can use it.

* :class:`TextRenderer`: the text format (0.0.4). prometheus_client's ``generate_latest`` validates and escapes
  every label of every sample on every scrape; the agent's label sets barely change between scrapes (one set per
  device, shared by ~30 families), so this renderer escapes each distinct label set once and reuses the text.
  Output is the same format, label names sorted as ``generate_latest`` writes them, so a sample line reads the
  same whichever renders it (checked against prometheus_client in the tests).
* :class:`Exposition`: a registry and its renderer, safe to call from several request threads; what the control
  plane's ``GET /metrics`` (``service.api.meta``), the agent (``monitoring.exposition.metrics_app``) and the
  extender (``kubernetes.extender``) serve.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import ClassVar

from prometheus_client import CollectorRegistry

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape_value(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if math.isnan(v):
        return "NaN"
    return repr(float(v))


class TextRenderer:
    """Renders a registry; keeps the escaped text of label sets seen before (bounded)."""

    _TYPES: ClassVar[dict[str, str]] = {
        "counter": "counter", "gauge": "gauge", "histogram": "histogram", "summary": "summary",
        "info": "gauge", "stateset": "gauge", "gaugehistogram": "histogram", "unknown": "untyped",
    }

    def __init__(self, max_cached: int = 200_000) -> None:
        self._labels: dict[tuple[tuple[str, str], ...], str] = {}
        self.max_cached = max_cached

    def _label_text(self, labels: Mapping[str, str]) -> str:
        if not labels:
            return ""
        key = tuple(labels.items())
        text = self._labels.get(key)
        if text is None:
            if len(self._labels) >= self.max_cached:
                self._labels.clear()
            inner = ",".join(f'{k}="{_escape_value(v)}"' for k, v in sorted(key))  # generate_latest's order
            text = self._labels[key] = "{" + inner + "}"
        return text

    def render(self, registry: CollectorRegistry) -> bytes:
        out: list[str] = []
        for fam in registry.collect():
            name = fam.name
            typ = self._TYPES.get(fam.type, "untyped")
            if fam.type == "counter" and not any(s.name == name for s in fam.samples):
                name = f"{name}_total"  # prometheus_client's counters; dcgm-exporter's keep their bare name
            out.append(f"# HELP {name} {_escape_help(fam.documentation)}\n# TYPE {name} {typ}\n")
            if fam.type == "info":
                out.extend(f"{s.name}{self._label_text(s.labels)} {_value(s.value)}\n" for s in fam.samples)
                continue
            skip_created = fam.type in ("counter", "histogram", "summary")
            for s in fam.samples:
                if skip_created and s.name.endswith("_created"):
                    continue  # prometheus_client's creation timestamps: not needed in the 0.0.4 format
                out.append(f"{s.name}{self._label_text(s.labels)} {_value(s.value)}\n")
        return "".join(out).encode()


class Exposition:
    """A registry and the renderer of its text: :meth:`render` is the body of ``GET /metrics`` (the renderer's
    label cache is shared, so calls are serialised)."""

    content_type = CONTENT_TYPE

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._renderer = TextRenderer()
        self._lock = threading.Lock()

    def render(self) -> bytes:
        with self._lock:
            return self._renderer.render(self.registry)
