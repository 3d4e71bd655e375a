"""Monitoring: device-metric sources (NVML, simulated), the Prometheus exporter, alert rules (a rule file for
Prometheus and the same rules evaluated in-process), remediation with an audit log, and job analysis."""

from gpucluster.model.actions import DrainResult
from gpucluster.model.views import node_fragmentation
from gpucluster.monitoring.analysis import JobAnalysis, JobSample, MetricsInputError, analyze, load_metrics
from gpucluster.monitoring.collectors import (
    PROFILES,
    ActivityProfile,
    DeviceSample,
    DeviceSource,
    NvmlSource,
    NvmlUnavailableError,
    Phase,
    SimSource,
)
from gpucluster.monitoring.embedded import EmbeddedMonitor, StepResult
from gpucluster.monitoring.exporter import (
    AllocationCollector,
    ControlPlaneMetrics,
    DeviceCollector,
    QueueStats,
    build_registry,
    control_plane_registry,
)
from gpucluster.monitoring.exposition import MetricsServer, TextRenderer
from gpucluster.monitoring.remediation import (
    DISRUPTIVE,
    AuditLog,
    AuditRecord,
    JobSimulatorTarget,
    PlannedAction,
    RemediationConflictError,
    RemediationPolicy,
    RemediationTarget,
    Remediator,
    SimTarget,
    describe_record,
    lost_pods,
)
from gpucluster.monitoring.rules import (
    Action,
    Alert,
    AlertRule,
    AlertThresholds,
    RuleEngine,
    Severity,
    default_rules,
    rule_file,
)

__all__ = [
    "DISRUPTIVE",
    "PROFILES",
    "Action",
    "ActivityProfile",
    "Alert",
    "AlertRule",
    "AlertThresholds",
    "AllocationCollector",
    "AuditLog",
    "AuditRecord",
    "ControlPlaneMetrics",
    "DeviceCollector",
    "DeviceSample",
    "DeviceSource",
    "DrainResult",
    "EmbeddedMonitor",
    "JobAnalysis",
    "JobSample",
    "JobSimulatorTarget",
    "MetricsInputError",
    "MetricsServer",
    "NvmlSource",
    "NvmlUnavailableError",
    "Phase",
    "PlannedAction",
    "QueueStats",
    "RemediationConflictError",
    "RemediationPolicy",
    "RemediationTarget",
    "Remediator",
    "RuleEngine",
    "Severity",
    "SimSource",
    "SimTarget",
    "StepResult",
    "TextRenderer",
    "analyze",
    "build_registry",
    "control_plane_registry",
    "default_rules",
    "describe_record",
    "load_metrics",
    "lost_pods",
    "node_fragmentation",
    "rule_file",
]
