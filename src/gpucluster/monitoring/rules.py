"""Alert rules: defined once as expression objects, written out as a Prometheus rule file and evaluated
in-process (embedded mode) with the same semantics as Prometheus' rule manager (pending -> firing after
``for``; an alert whose expression stops returning its series resolves)."""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import yaml

from gpucluster.monitoring import metrics as m
from gpucluster.monitoring.promql import Expr, Labels, RangeFn, Sel, SeriesDB, any_of, format_duration, metric_names


class Action(enum.StrEnum):
    """What remediation does about an alert (the rule's ``action`` label)."""

    NONE = "none"
    CORDON = "cordon"
    """Stop placing new pods on the node."""
    DRAIN = "drain"
    """Cordon, evict the node's pods and reschedule them elsewhere."""
    RELEASE = "release"
    """Free an allocation nobody uses (policy-gated)."""
    DEFRAGMENT = "defragment"
    """Move shared pods off partly used devices so whole devices come free."""


class Severity(enum.StrEnum):
    CRITICAL = "critical"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class AlertThresholds:
    """Tunable thresholds of the default rules."""

    gpu_temp_c: float = 87.0
    """GPU temperature above which a device is too hot (dcgm guidance: 85-90 C)."""
    gpu_temp_for_s: float = 120.0
    """How long it must stay hot before the alert fires."""
    fb_used_ratio: float = 0.95
    """Framebuffer use (used / total) above which a device is nearly out of memory."""
    fb_for_s: float = 300.0
    idle_util_pct: float = 5.0
    """Utilisation below which an allocated device counts as idle."""
    idle_for_s: float = 1800.0
    """How long an allocated device must stay idle."""
    fragmentation_ratio: float = 0.6
    """Node fragmentation above which defragmentation is worth it."""
    fragmentation_for_s: float = 900.0
    pending_s: float = 600.0
    """Wait of the oldest pending pod above which the queue is stuck."""
    pending_for_s: float = 60.0
    missing_window_s: float = 600.0
    """A GPU seen within this window but not now is missing."""
    error_window_s: float = 300.0
    """Window over which new ECC / NVLink errors are counted."""


@dataclass(frozen=True, slots=True)
class AlertRule:
    name: str
    expr: Expr
    for_s: float
    severity: Severity
    action: Action
    summary: str
    """May use ``{{ $labels.NAME }}``."""
    description: str = ""

    @property
    def labels(self) -> dict[str, str]:
        return {"severity": str(self.severity), "action": str(self.action)}

    def to_prometheus(self) -> dict[str, object]:
        out: dict[str, object] = {"alert": self.name, "expr": self.expr.promql()}
        if self.for_s:
            out["for"] = format_duration(self.for_s)
        out["labels"] = self.labels
        ann = {"summary": self.summary}
        if self.description:
            ann["description"] = self.description
        out["annotations"] = ann
        return out


def default_rules(th: AlertThresholds | None = None) -> list[AlertRule]:
    th = th or AlertThresholds()
    xid = Sel(m.DCGM_XID_ERRORS)
    temp = Sel(m.DCGM_GPU_TEMP)
    used, free = Sel(m.DCGM_FB_USED), Sel(m.DCGM_FB_FREE)
    gpu = "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }}"
    return [
        AlertRule(
            "GpuXidCritical", any_of(xid, m.CRITICAL_XIDS), 0, Severity.CRITICAL, Action.DRAIN,
            f"{gpu} reported a critical XID",
            "XID 46/48/64/79/94/95: the GPU is unusable until reset; drain the node.",
        ),
        AlertRule(
            "GpuXidError", xid > 0, 0, Severity.WARNING, Action.NONE,
            f"{gpu} reported an XID error",
            "Any XID; see NVIDIA's XID catalogue for the meaning of the value.",
        ),
        AlertRule(
            "GpuEccDoubleBit", RangeFn("increase", Sel(m.DCGM_ECC_DBE_VOL_TOTAL), th.error_window_s) > 0, 0,
            Severity.CRITICAL, Action.DRAIN, f"{gpu} had double-bit ECC errors",
            "Uncorrectable memory errors: the running jobs' results are suspect; drain the node.",
        ),
        AlertRule(
            "GpuRowRemapFailure", Sel(m.DCGM_ROW_REMAP_FAILURE) > 0, 0, Severity.CRITICAL, Action.DRAIN,
            f"{gpu} failed to remap a memory row", "The device needs service; drain the node.",
        ),
        AlertRule(
            "GpuTemperatureHigh", temp > th.gpu_temp_c, th.gpu_temp_for_s, Severity.WARNING, Action.CORDON,
            f"{gpu} is hotter than {th.gpu_temp_c:g} C",
            "Check cooling; no new work is placed on the node until it cools down.",
        ),
        AlertRule(
            "GpuFramebufferFull", used / (used + free) > th.fb_used_ratio, th.fb_for_s, Severity.WARNING,
            Action.NONE, f"{gpu} uses more than {th.fb_used_ratio:.0%} of its memory",
            "Jobs on it are close to out-of-memory errors.",
        ),
        AlertRule(
            "GpuAllocatedIdle",
            (Sel(m.DEVICE_TASKS) > 0).and_(Sel(m.DCGM_GPU_UTIL) < th.idle_util_pct, on=("Hostname", "UUID")),
            th.idle_for_s, Severity.INFO, Action.RELEASE,
            "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) on {{ $labels.Hostname }} is allocated but idle",
            f"Utilisation below {th.idle_util_pct:g} % for {format_duration(th.idle_for_s)} with tasks on it.",
        ),
        AlertRule(
            "GpuMissing",
            RangeFn("max_over_time", temp, th.missing_window_s).unless(temp, on=("Hostname", "UUID")),
            0, Severity.CRITICAL, Action.DRAIN, f"{gpu} stopped reporting (fell off the bus?)",
            "Its series disappeared while the node's other devices still report.",
        ),
        AlertRule(
            "GpuNvlinkErrors", RangeFn("increase", Sel(m.DCGM_NVLINK_CRC_FLIT_ERRORS), th.error_window_s) > 0, 0,
            Severity.WARNING, Action.NONE, f"{gpu} has NVLink CRC errors",
            "Collective communication on this node may slow down or fail.",
        ),
        AlertRule(
            "NodeFragmentationHigh", Sel(m.NODE_FRAGMENTATION) > th.fragmentation_ratio, th.fragmentation_for_s,
            Severity.INFO, Action.DEFRAGMENT, "Node {{ $labels.node }} has its free GPU compute scattered",
            "Whole-GPU jobs cannot use the node's free capacity; migrate shared pods to free whole devices.",
        ),
        AlertRule(
            "PodsPendingTooLong", Sel(m.QUEUE_OLDEST_PENDING) > th.pending_s, th.pending_for_s, Severity.WARNING,
            Action.NONE, f"A pod has waited more than {format_duration(th.pending_s)} to be scheduled",
            "Check quota, fragmentation and the reasons reported by the scheduler.",
        ),
    ]


def rule_file(rules: Sequence[AlertRule] | None = None, group: str = "gpucluster") -> str:
    """The Prometheus rule file (YAML) for ``rules``."""
    rules = default_rules() if rules is None else rules
    doc = {"groups": [{"name": group, "rules": [r.to_prometheus() for r in rules]}]}
    header = "# Generated by `gpucluster monitor rules`; do not edit (change monitoring/rules.py instead).\n"
    return header + yaml.safe_dump(doc, sort_keys=False, width=1000, default_flow_style=False)


_TEMPLATE = re.compile(r"\{\{\s*\$labels\.([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def render(text: str, labels: Mapping[str, str]) -> str:
    """Expand ``{{ $labels.NAME }}`` (missing labels expand to nothing, as in Prometheus)."""
    return _TEMPLATE.sub(lambda mt: labels.get(mt.group(1), ""), text)


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    labels: dict[str, str]
    """Series labels plus ``alertname``, ``severity`` and ``action``."""
    annotations: dict[str, str]
    state: str
    """``pending`` or ``firing``."""
    active_since: float
    value: float

    @property
    def action(self) -> Action:
        return Action(self.labels.get("action", "none"))

    @property
    def node(self) -> str:
        return self.labels.get("Hostname") or self.labels.get("node", "")

    def key(self) -> tuple[str, Labels]:
        return self.name, tuple(sorted(self.labels.items()))

    def to_json(self) -> dict[str, object]:
        return {"alert": self.name, "state": self.state, "labels": self.labels, "annotations": self.annotations,
                "active_since": self.active_since, "value": self.value}


@dataclass(slots=True)
class RuleEngine:
    """Evaluates rules over a :class:`SeriesDB`, keeping each alert's pending/firing state between calls."""

    rules: Sequence[AlertRule] = field(default_factory=default_rules)
    _active: dict[tuple[str, Labels], float] = field(default_factory=dict)

    def evaluate(self, db: SeriesDB, t: float) -> list[Alert]:
        """All active alerts at ``t`` (pending and firing), rules in order, series sorted by labels."""
        out: list[Alert] = []
        still: dict[tuple[str, Labels], float] = {}
        for rule in self.rules:
            for lab, value in sorted(rule.expr.eval(db, t).items()):
                key = (rule.name, lab)
                since = self._active.get(key, t)
                still[key] = since
                labels = {**dict(lab), **rule.labels, "alertname": rule.name}
                ann = {"summary": render(rule.summary, labels)}
                if rule.description:
                    ann["description"] = render(rule.description, labels)
                state = "firing" if t - since >= rule.for_s else "pending"
                out.append(Alert(rule.name, labels, ann, state, since, value))
        self._active = still
        return out

    def firing(self, db: SeriesDB, t: float) -> list[Alert]:
        return [a for a in self.evaluate(db, t) if a.state == "firing"]


def rule_metrics(rules: Iterable[AlertRule]) -> frozenset[str]:
    """Every metric name the rules read (an embedded monitor need ingest nothing else)."""
    out: frozenset[str] = frozenset()
    for r in rules:
        out |= metric_names(r.expr)
    return out


def rules_by_name(rules: Iterable[AlertRule]) -> dict[str, AlertRule]:
    return {r.name: r for r in rules}
