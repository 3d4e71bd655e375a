"""Embedded mode: no Prometheus server. The monitor scrapes registries in-process into a :class:`SeriesDB`,
evaluates the same rules Prometheus would load, and hands firing alerts to a :class:`Remediator`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry

from gpucluster.monitoring.promql import SeriesDB
from gpucluster.monitoring.remediation import AuditRecord, Remediator
from gpucluster.monitoring.rules import Alert, AlertRule, RuleEngine, default_rules


def registry_samples(registry: CollectorRegistry) -> Iterator[tuple[str, Mapping[str, str], float]]:
    """Every sample a scrape of ``registry`` would return, without the text format round trip."""
    for family in registry.collect():
        for s in family.samples:
            yield s.name, s.labels, float(s.value)


@dataclass(slots=True)
class StepResult:
    t: float
    alerts: list[Alert]
    """Every active alert (pending and firing)."""
    actions: list[AuditRecord]

    @property
    def firing(self) -> list[Alert]:
        return [a for a in self.alerts if a.state == "firing"]


@dataclass(slots=True)
class EmbeddedMonitor:
    """``step(t)`` = scrape every target, evaluate the rules, remediate what fires.

    ``targets`` maps a target name (Prometheus' ``instance``) to its registry; call :meth:`step` once per
    scrape/evaluation interval with the simulated (or wall-clock) time in seconds.
    """

    targets: Mapping[str, CollectorRegistry]
    rules: Sequence[AlertRule] = field(default_factory=default_rules)
    remediator: Remediator | None = None
    db: SeriesDB = field(default_factory=SeriesDB)
    metrics: frozenset[str] | None = None
    """Only ingest these metric names (e.g. ``rules.rule_metrics(rules)``); None keeps every sample."""
    engine: RuleEngine = field(init=False)

    def __post_init__(self) -> None:
        self.engine = RuleEngine(self.rules)

    def scrape(self, t: float) -> None:
        keep = self.metrics
        for name, reg in self.targets.items():
            samples = registry_samples(reg)
            if keep is not None:
                samples = (s for s in samples if s[0] in keep)
            self.db.ingest(t, samples, target=name)

    def step(self, t: float) -> StepResult:
        self.scrape(t)
        alerts = self.engine.evaluate(self.db, t)
        firing = [a for a in alerts if a.state == "firing"]
        actions = self.remediator.handle(firing) if self.remediator is not None else []
        return StepResult(t, alerts, actions)
