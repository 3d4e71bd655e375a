"""Alerts and automatic remediation for the embedded runtime, done by ``gpucluster.monitoring``.

:class:`ClusterMonitor` is the glue, not a second implementation: the simulated collector
(``monitoring.SimSource``) produces dcgm-exporter device metrics from the runtime's ClusterState (and is where
faults are injected), ``monitoring.EmbeddedMonitor`` scrapes them with the allocation and queue metrics and
evaluates the project's alert rules (``monitoring.default_rules``) with Prometheus semantics, and one
``monitoring.Remediator`` acts on the firing alerts through the runtime's ``RemediationTarget``.

Cost: a scrape and rule evaluation of the whole 1,920-GPU reference cluster takes a few hundred milliseconds of
Python, which would stall the API if done in one scheduling tick. So, as Prometheus spreads its scrapes of
many targets over the interval, the nodes are split into shards of :data:`NODES_PER_SHARD` (one
``EmbeddedMonitor`` each, ingesting only the series the rules read) whose evaluations are staggered across
:data:`EVAL_INTERVAL_S`, and one tick spends about :data:`EVAL_BUDGET_S` on them at most. The rules only
relate series of one device or one node, so a shard sees everything its alerts need; the queue gauge is a
second target of shard 0. All shards' alerts go to the one remediator, so its brakes (cooldown, at most 25 %
of the nodes out of service) are cluster-wide.
"""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client import CollectorRegistry

from gpucluster.model import ClusterState
from gpucluster.monitoring import (
    Alert,
    AlertRule,
    AllocationCollector,
    AuditLog,
    AuditRecord,
    ControlPlaneMetrics,
    DeviceCollector,
    EmbeddedMonitor,
    QueueStats,
    RemediationPolicy,
    RemediationTarget,
    Remediator,
    SimSource,
    default_rules,
)
from gpucluster.monitoring.collectors import DeviceSample
from gpucluster.monitoring.promql import SeriesDB
from gpucluster.monitoring.remediation import describe_record
from gpucluster.monitoring.rules import rule_metrics

EVAL_INTERVAL_S = 30.0
"""Clock seconds between two evaluations of one shard (Prometheus' scrape and evaluation interval)."""
NODES_PER_SHARD = 4
"""Nodes per shard: one evaluation (a scrape of 4 nodes of 8 GPUs and the rules) is the longest the scheduling tick
holds the event loop for the monitor, ~25-35 ms of Python on the project's machine (8 nodes took ~55-110 ms: the
overview's p99 during a queue flood, issue 28); the work per interval is the same, in more, shorter slices."""
EVAL_BUDGET_S = 0.010
"""Wall time one ``advance`` may spend starting further shard evaluations after the first."""
RETENTION_S = 900.0
"""Series history kept per shard: the rules' longest range (``GpuMissing``, 10 min) plus margin."""
KEEP_RESOLVED = 100
KEEP_REMEDIATIONS = 200
KEEP_UNSAVED = 10_000
"""Audit records waiting for the service to persist them (bounded for a runtime used without a service)."""
SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
USAGE_POINTS = 40
"""Evaluations of each device kept for the dashboard's sparklines (40 x 30 clock-s = 20 clock minutes)."""
USAGE_FIELDS = ("util", "mem_used_mib", "temp_c", "power_w", "xid")
"""Per device per evaluation: GPU utilisation %, framebuffer used MiB, temperature, power and the last XID."""
KEEP_TRANSITIONS = 1000
IDLE_UTIL_PCT = 5.0
"""An allocated GPU below this utilisation at the last scrape is "allocated but idle" (``GpuAllocatedIdle``'s
threshold)."""
KEEP_IDLE_LIST = 50
"""Most allocated-but-idle GPUs the overview lists (the count is always the full one)."""


class RecordingSource:
    """A device source that keeps what its inner source reported at each scrape: the last
    :data:`USAGE_POINTS` samples of every device of a shard, in one numpy ring (``[device, point, field]``), so
    the dashboard can show per-GPU usage beside allocation without a second scrape."""

    def __init__(self, inner: SimSource, devices: Sequence[tuple[str, int]], points: int = USAGE_POINTS) -> None:
        self.inner = inner
        self.name = inner.name
        self.row = {d: k for k, d in enumerate(devices)}
        self.values = np.full((len(devices), points, len(USAGE_FIELDS)), np.nan, np.float32)
        self.owner: list[str] = [""] * len(devices)
        """Per device, the pod the last scrape saw on it (``namespace/name``; empty when none)."""
        self.times = np.full(points, np.nan)
        self.next = 0

    def sample(self) -> list[DeviceSample]:
        samples = self.inner.sample()
        k = self.next % self.times.size
        self.times[k] = self.inner.clock()
        self.values[:, k, :] = np.nan  # a device that vanished (fell off the bus) has no point this time
        self.owner = [""] * len(self.owner)
        for s in samples:
            r = self.row.get((s.hostname, s.gpu))
            if r is not None:
                self.owner[r] = f"{s.namespace}/{s.pod}" if s.pod else ""
                self.values[r, k] = (_or_nan(s.gpu_util_pct), _or_nan(s.fb_used_mib), _or_nan(s.gpu_temp_c),
                                     _or_nan(s.power_w), float(s.xid))
        self.next += 1
        return samples

    def history(self, node: str, gpu: int) -> tuple[list[float], list[list[float | None]]]:
        """(times, points oldest first) of one device; a point is ``USAGE_FIELDS`` (None where unknown)."""
        r = self.row.get((node, gpu))
        n = min(self.next, self.times.size)
        if r is None or n == 0:
            return [], []
        order = [(self.next - n + j) % self.times.size for j in range(n)]
        vals = self.values[r, order]
        pts = [[None if math.isnan(v) else round(float(v), 2) for v in row] for row in vals.tolist()]
        return [float(x) for x in self.times[order]], pts

    def latest(self) -> np.ndarray[Any, np.dtype[np.float32]]:
        """``[device, field]``: the last scrape's values (NaN where the device did not report or before any)."""
        if self.next == 0:
            return np.full((len(self.row), len(USAGE_FIELDS)), np.nan, np.float32)
        out: np.ndarray[Any, np.dtype[np.float32]] = self.values[:, (self.next - 1) % self.times.size, :]
        return out

    def close(self) -> None:
        self.inner.close()


def _or_nan(v: float | None) -> float:
    return math.nan if v is None else float(v)


class RuntimeAuditLog(AuditLog):
    """The remediator's audit log inside a runtime: the newest records for the dashboard, and the records the
    service has not yet written to its SQLite audit table (:meth:`take_unsaved`). Keeps no unbounded list."""

    def __init__(self) -> None:
        super().__init__(None)
        self.recent: deque[AuditRecord] = deque(maxlen=KEEP_REMEDIATIONS)
        self.unsaved: deque[AuditRecord] = deque(maxlen=KEEP_UNSAVED)

    def write(self, rec: AuditRecord) -> None:
        self.recent.appendleft(rec)
        self.unsaved.append(rec)

    def take_unsaved(self) -> list[AuditRecord]:
        out = list(self.unsaved)
        self.unsaved.clear()
        return out


def remediation_row(rec: AuditRecord) -> dict[str, Any]:
    """An audit record as ``GET /api/v1/alerts`` lists it under ``remediations``."""
    return {"t": rec.time, "action": rec.action, "target": rec.target, "detail": describe_record(rec),
            "alert": rec.alert, "outcome": rec.outcome}


def _target(a: Alert) -> str:
    node = a.node
    gpu = a.labels.get("gpu", "")
    if node and gpu:
        return f"{node}/gpu{gpu}"
    return node or "cluster"


@contextlib.contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """A scrape allocates thousands of short-lived containers (samples, label dicts) that reference counting
    frees at once. Left on, the cyclic collector runs in the middle of it, promotes them to the old
    generations and so triggers full collections of the whole heap (~100-300 ms on the reference cluster,
    a stall of every request in flight); paused for the scrape, it never sees them."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(slots=True)
class _Shard:
    nodes: tuple[str, ...]
    source: SimSource
    recorder: RecordingSource
    monitor: EmbeddedMonitor
    due: float
    alerts: list[Alert] = field(default_factory=list)


class ClusterMonitor:
    """Simulated device metrics, the alert rules and remediation over one ClusterState (single-threaded)."""

    def __init__(
        self,
        state: ClusterState,
        target: RemediationTarget,
        queue_stats: Callable[[], QueueStats],
        clock: Callable[[], float],
        policy: RemediationPolicy | None = None,
        rules: Sequence[AlertRule] | None = None,
        interval_s: float = EVAL_INTERVAL_S,
        nodes_per_shard: int = NODES_PER_SHARD,
        start_t: float = 0.0,
        budget_s: float = EVAL_BUDGET_S,
    ) -> None:
        self.state = state
        self.clock = clock
        self.interval_s = interval_s
        self.budget_s = budget_s
        self.rules = list(default_rules() if rules is None else rules)
        needed = rule_metrics(self.rules)
        self.audit = RuntimeAuditLog()
        self.remediator = Remediator(target, policy, self.audit, node_count=lambda: int(state.present.sum()),
                                     clock=clock)
        names = [n.name for n in state.nodes]
        chunks = [tuple(names[i:i + nodes_per_shard]) for i in range(0, len(names), nodes_per_shard)] or [()]
        self.shards: list[_Shard] = []
        self._shard_of: dict[str, _Shard] = {}
        for k, chunk in enumerate(chunks):
            source = SimSource(state, nodes=chunk, clock=clock, name=f"sim-{k}")
            recorder = RecordingSource(source, [(n, d.index) for n in chunk
                                                for d in state.nodes[state.node_index[n]].devices])
            reg = CollectorRegistry(auto_describe=False)
            reg.register(DeviceCollector(recorder, fields=needed))
            reg.register(AllocationCollector(state, chunk, pods=False))
            targets = {f"nodes-{k:03d}": reg}
            if k == 0:
                cp = CollectorRegistry(auto_describe=False)
                ControlPlaneMetrics(cp, queue_stats)
                targets["control-plane"] = cp
            mon = EmbeddedMonitor(targets, rules=self.rules, db=SeriesDB(retention_s=RETENTION_S), metrics=needed)
            shard = _Shard(chunk, source, recorder, mon, due=start_t + interval_s * k / len(chunks))
            self.shards.append(shard)
            for n in chunk:
                self._shard_of[n] = shard
        self._since: dict[tuple[str, str], float] = {}
        """(alert, target) -> when it became active, kept while it stays active under changing labels."""
        self._view: list[dict[str, Any]] = []
        self._resolved: deque[dict[str, Any]] = deque(maxlen=KEEP_RESOLVED)
        self._transitions: deque[dict[str, Any]] = deque(maxlen=KEEP_TRANSITIONS)
        """Alerts that started firing or resolved since :meth:`take_transitions` was last called."""
        self.firing = 0
        self.scrapes = 0
        """Shard evaluations so far: what :meth:`utilisation` reads of the devices changes only with it."""

    # ------------------------------------------------------------------ faults (through the collector)
    def source(self, node: str) -> SimSource:
        """The simulated collector serving ``node`` (inject faults there)."""
        return self._shard_of[node].source

    def inject_xid(self, node: str, gpu: int, xid: int) -> None:
        self.source(node).inject_xid(node, gpu, xid)

    def clear(self, node: str, gpu: int) -> None:
        self.source(node).clear(node, gpu)

    # ------------------------------------------------------------------ evaluation
    def advance(self, t: float) -> list[AuditRecord]:
        """Evaluate the shards due at ``t``, most overdue first, and remediate; returns the audit records written.

        At least one due shard is evaluated per call; more only while the call has spent less than
        ``budget_s`` of wall time. A shard left over stays due and is evaluated on a later call (at that
        call's ``t``), so when the clock runs faster than the machine can evaluate, shards skip evaluation
        slots (as Prometheus records missed iterations) instead of stalling the API."""
        due = sorted((sh for sh in self.shards if sh.due <= t), key=lambda sh: sh.due)
        if not due:
            return []
        start = time.perf_counter()
        for k, sh in enumerate(due):
            if k and time.perf_counter() - start >= self.budget_s:
                break
            self._evaluate(sh, t)
            sh.due += self.interval_s * (math.floor((t - sh.due) / self.interval_s) + 1)
        return self._remediate(t)

    def evaluate_node(self, node: str, t: float) -> list[AuditRecord]:
        """Evaluate ``node``'s shard now (a fault drill wants its answer at once) and remediate."""
        self._evaluate(self._shard_of[node], t)
        return self._remediate(t)

    def _evaluate(self, sh: _Shard, t: float) -> None:
        with _no_cyclic_gc():
            sh.alerts = sh.monitor.step(t).alerts
        self.scrapes += 1


    def _remediate(self, t: float) -> list[AuditRecord]:
        active = [a for sh in self.shards for a in sh.alerts]
        records = self.remediator.handle([a for a in active if a.state == "firing"])
        self._rebuild_view(active, t)
        return records

    def _rebuild_view(self, active: list[Alert], t: float) -> None:
        """Alert rows keyed by (alert, target): a series whose labels change (a drained device loses its
        ``pod`` label) is the same alert to a person; a row that was firing and is gone is resolved."""
        rows: dict[tuple[str, str], dict[str, Any]] = {}
        for a in active:
            key = (a.name, _target(a))
            row = rows.get(key)
            if row is None:
                since = min(self._since.get(key, a.active_since), a.active_since)
                rows[key] = {"name": a.name, "severity": a.labels.get("severity", ""), "target": key[1],
                             "summary": a.annotations.get("summary", ""), "since": since, "state": a.state}
            elif a.state == "firing":
                row["state"] = "firing"
        was_firing = {(old["name"], old["target"]) for old in self._view if old["state"] == "firing"}
        for old in self._view:
            key = (old["name"], old["target"])
            if key not in rows and old["state"] == "firing":
                self._resolved.appendleft({**old, "state": "resolved", "resolved": t})
                self._transitions.append({**old, "state": "resolved", "resolved": t})
        for key, row in rows.items():
            if row["state"] == "firing" and key not in was_firing:
                self._transitions.append(dict(row))
        self._since = {k: r["since"] for k, r in rows.items()}
        self._view = sorted(rows.values(), key=lambda r: (r["state"] != "firing",
                                                          SEVERITY_ORDER.get(r["severity"], 3), -r["since"]))
        self.firing = sum(1 for r in self._view if r["state"] == "firing")

    # ------------------------------------------------------------------ views and audit
    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (firing first, then pending), then the recently resolved ones, newest first."""
        return [dict(a) for a in self._view] + [dict(a) for a in self._resolved]

    def remediations(self) -> list[dict[str, Any]]:
        return [remediation_row(r) for r in self.audit.recent]

    def planned(self) -> list[dict[str, Any]]:
        """Actions planned but not carried out (dry-run, not opted in) whose alert still fires."""
        return [{"id": self.remediator.planned_id(r), **remediation_row(r)} for r in self.remediator.planned()]

    def approve(self, rid: str, actor: str) -> dict[str, Any]:
        """Carry out the planned action ``rid`` now (``Remediator.approve``; its errors pass through)."""
        return remediation_row(self.remediator.approve(rid, actor))

    def dismiss(self, rid: str, actor: str) -> dict[str, Any]:
        """Drop the planned action ``rid`` (``Remediator.dismiss``; its errors pass through)."""
        return remediation_row(self.remediator.dismiss(rid, actor))

    def modes(self) -> dict[str, str]:
        """Each remediation action: ``on``, ``dry-run`` or ``off``."""
        return self.remediator.policy.modes()

    def take_transitions(self) -> list[dict[str, Any]]:
        """Alert rows that started firing or resolved since the last call (each handed out once)."""
        out = list(self._transitions)
        self._transitions.clear()
        return out

    def device_usage(self, node: str) -> list[dict[str, Any]] | None:
        """Per device of ``node``: what the collector reports now (utilisation %, memory used, temperature,
        power, last XID) and its recent history (``USAGE_FIELDS`` per point); None for an unknown node."""
        sh = self._shard_of.get(node)
        if sh is None:
            return None
        now = {s.gpu: s for s in sh.source.sample() if s.hostname == node}
        out = []
        for dev in self.state.nodes[self.state.node_index[node]].devices:
            s = now.get(dev.index)
            times, points = sh.recorder.history(node, dev.index)
            out.append({
                "index": dev.index, "reporting": s is not None,
                "util_pct": None if s is None else s.gpu_util_pct,
                "mem_used_mib": None if s is None else s.fb_used_mib,
                "mem_total_mib": None if s is None else (s.fb_used_mib or 0.0) + (s.fb_free_mib or 0.0),
                "temp_c": None if s is None else s.gpu_temp_c, "power_w": None if s is None else s.power_w,
                "xid": None if s is None else s.xid, "history": {"t": times, "fields": list(USAGE_FIELDS),
                                                                  "points": points}})
        return out

    def utilisation(self, describe: Callable[[str], dict[str, Any]] | None = None) -> dict[str, Any]:
        """What the GPUs do, beside what they hold, as of each shard's last scrape (at most ``interval_s`` old):
        ``gpu_utilisation`` (mean SM utilisation of the reporting GPUs, 0..1), ``gpu_memory_used_fraction``
        (framebuffer in use / physical framebuffer), ``allocated_idle_gpus`` (GPUs with a pod on them at the
        last scrape, still allocated now, below :data:`IDLE_UTIL_PCT`) and ``allocated_idle`` (the first
        :data:`KEEP_IDLE_LIST` of them, emptiest first: node, gpu, util_pct, pod and what ``describe(pod)``
        adds, e.g. job and tenant). ``per_node``: node -> per device ``[util %, memory used %, temp °C]``, util None
        for a GPU allocated since its last scrape (what it measured was someone else's, or nobody's, work)."""
        st = self.state
        util_sum, reporting, mem_used, mem_total, idle = 0.0, 0, 0.0, 0.0, []
        per_node: dict[str, list[list[float | None]]] = {}
        util_k, mem_k, temp_k = (USAGE_FIELDS.index(f) for f in ("util", "mem_used_mib", "temp_c"))
        for sh in self.shards:
            rec = sh.recorder
            last = rec.latest()
            for (node, gpu), r in rec.row.items():
                i = st.node_index[node]
                if not st.present[i]:
                    continue
                dev = st.nodes[i].devices[gpu]
                physical = float(dev.physical_memory_mib or dev.memory_mib)
                util, used, temp = (float(last[r, util_k]), float(last[r, mem_k]), float(last[r, temp_k]))
                row = per_node.setdefault(node, [])
                if math.isnan(util):
                    row.append([None, None, None])
                    continue
                reporting += 1
                util_sum += util
                mem_used += 0.0 if math.isnan(used) else used
                mem_total += physical
                pod = rec.owner[r]
                held = int(st.dev_tasks[i, gpu]) > 0
                seen = bool(pod) and pod in st.allocations  # the pod the scrape measured is still there
                # a GPU allocated since its last scrape has no utilisation of its own yet (not "idle")
                row.append([round(util, 1) if seen or not held else None,
                            round(100.0 * used / physical, 1) if physical else None,
                            None if math.isnan(temp) else round(temp, 1)])
                if seen and held and util < IDLE_UTIL_PCT:
                    idle.append({"node": node, "gpu": gpu, "util_pct": round(util, 1), "pod": pod,
                                 **(describe(pod) if describe else {})})
        idle.sort(key=lambda x: (x["util_pct"], x["node"], x["gpu"]))
        return {"gpu_utilisation": util_sum / reporting / 100.0 if reporting else None,
                "gpu_memory_used_fraction": mem_used / mem_total if mem_total else None,
                "gpus_reporting": reporting,
                "allocated_idle_gpus": len(idle), "allocated_idle": idle[:KEEP_IDLE_LIST],
                "idle_util_pct": IDLE_UTIL_PCT, "per_node": per_node}

    def record(self, rec: AuditRecord) -> None:
        """Log something the backend did on its own (a repaired GPU back in service) with the remediation."""
        self.audit.write(rec)

    def node_restored(self, node: str) -> None:
        self.remediator.node_restored(node)

    def take_unsaved(self) -> list[AuditRecord]:
        return self.audit.take_unsaved()
