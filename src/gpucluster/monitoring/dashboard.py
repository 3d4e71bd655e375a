"""The Grafana dashboard (``deploy/grafana/gpucluster.json``, also in the Helm chart): cluster allocation
against utilisation, fragmentation, queue and pending age, per-tenant use, per-GPU utilisation / memory /
temperature / power / XID (dcgm-exporter's names), HAMi's allocation view and scheduler latency.

Every expression reads only families this package exports (the agent, ``gpucluster up`` and the extender /
secondary scheduler); a test scrapes them and checks. ``gpucluster monitor dashboard`` prints it.
"""

from __future__ import annotations

import json
from typing import Any

from gpucluster.monitoring import hami
from gpucluster.monitoring import metrics as m

UID = "gpucluster-overview"
DS = {"type": "prometheus", "uid": "${datasource}"}

EXTENDER_LATENCY = "gpucluster_extender_request_duration_seconds"
"""The extender's request histogram (``gpucluster.kubernetes.extender``)."""


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(pid: int, title: str, targets: list[tuple[str, str]], x: int, y: int, w: int = 12, h: int = 8,
           unit: str = "short", kind: str = "timeseries", description: str = "") -> dict[str, Any]:
    return {
        "id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}}
        if kind == "timeseries" else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [_target(e, lg, chr(ord("A") + i)) for i, (e, lg) in enumerate(targets)],
    }


NODE = 'node=~"$node"'
HOST = 'Hostname=~"$node"'


def panels() -> list[dict[str, Any]]:
    alloc_mem = f"sum({m.DEVICE_ALLOCATED_MEMORY}{{{NODE}}}) / sum({m.DEVICE_MEMORY_CAPACITY}{{{NODE}}})"
    alloc_core = f"avg({m.DEVICE_ALLOCATED_CORES}{{{NODE}}})"
    util = f"avg({m.DCGM_GPU_UTIL}{{{HOST}}}) / 100"
    return [
        _panel(1, "GPU memory allocated", [(alloc_mem, "allocated")], 0, 0, 6, 5, "percentunit", "stat"),
        _panel(2, "GPU compute allocated", [(alloc_core, "allocated")], 6, 0, 6, 5, "percentunit", "stat"),
        _panel(3, "GPU utilisation", [(util, "used")], 12, 0, 6, 5, "percentunit", "stat"),
        _panel(4, "Pending pods", [(m.QUEUE_PENDING, "pending")], 18, 0, 6, 5, "short", "stat"),
        _panel(5, "Allocation vs utilisation", [(alloc_mem, "memory allocated"), (alloc_core, "compute allocated"),
                                                (util, "compute used (DCGM)"),
                                                (f"sum({m.DCGM_FB_USED}{{{HOST}}}) * 1048576 / "
                                                 f"sum({m.DEVICE_MEMORY_CAPACITY}{{{NODE}}})", "memory used (DCGM)")],
               0, 5, 12, 8, "percentunit",
               description="What the scheduler has handed out against what the GPUs actually do: a wide gap is "
                           "allocated-but-idle capacity."),
        _panel(6, "Fragmentation", [(f"avg({m.NODE_FRAGMENTATION}{{{NODE}}})", "cluster"),
                                    (f"topk(5, {m.NODE_FRAGMENTATION}{{{NODE}}})", "{{node}}")],
               12, 5, 12, 8, "percentunit",
               description="Free compute stranded on partly used GPUs, as a share of all free compute."),
        _panel(7, "Queue and pending age", [(m.QUEUE_PENDING, "pending pods"),
                                            (m.QUEUE_OLDEST_PENDING, "oldest pending (s)")], 0, 13, 12, 8, "short"),
        _panel(8, "Per-tenant use", [(f"sum by (tenant) ({m.TENANT_QUOTA_USED_DEVICES})", "{{tenant}} vGPUs"),
                                     (f"sum by (tenant) ({m.TENANT_QUOTA_USED_CORES})", "{{tenant}} GPUs of compute")],
               12, 13, 12, 8, "short"),
        _panel(9, "Namespace quota use (HAMi)",
               [(f'sum by (namespace, quota_name, limit) ({hami.RESOURCE_QUOTA_USED}{{zone="vGPU"}})',
                 "{{namespace}} {{quota_name}} (limit {{limit}})")], 0, 21, 12, 8, "short",
               description="HAMi's hami_resource_quota_used: MiB for *mem, percent of a GPU for *cores."),
        _panel(10, "GPU memory allocated per device (HAMi)",
               [(f'{hami.GPU_MEMORY_ALLOCATED}{{{NODE},zone="vGPU"}} / '
                 f'ignoring(device_cores) {hami.GPU_MEMORY_LIMIT}{{{NODE},zone="vGPU"}}',
                 "{{node}}/{{device_index}}")], 12, 21, 12, 8, "percentunit"),
        _panel(11, "GPU utilisation", [(f"{m.DCGM_GPU_UTIL}{{{HOST}}}", "{{Hostname}}/{{gpu}}")], 0, 29, 12, 8,
               "percent"),
        _panel(12, "GPU memory used", [(f"{m.DCGM_FB_USED}{{{HOST}}} * 1048576", "{{Hostname}}/{{gpu}}")],
               12, 29, 12, 8, "bytes"),
        _panel(13, "GPU temperature", [(f"{m.DCGM_GPU_TEMP}{{{HOST}}}", "{{Hostname}}/{{gpu}}")], 0, 37, 8, 8,
               "celsius"),
        _panel(14, "GPU power", [(f"{m.DCGM_POWER_USAGE}{{{HOST}}}", "{{Hostname}}/{{gpu}}")], 8, 37, 8, 8,
               "watt"),
        _panel(15, "XID errors (last value)", [(f"{m.DCGM_XID_ERRORS}{{{HOST}}} > 0", "{{Hostname}}/{{gpu}} XID")],
               16, 37, 8, 8, "short"),
        _panel(16, "Scheduling latency",
               [(f"histogram_quantile(0.5, sum by (le) (rate({m.SCHEDULING_LATENCY}_bucket[5m])))", "p50"),
                (f"histogram_quantile(0.99, sum by (le) (rate({m.SCHEDULING_LATENCY}_bucket[5m])))", "p99"),
                (f"histogram_quantile(0.99, sum by (le, verb) (rate({EXTENDER_LATENCY}_bucket[5m])))",
                 "extender {{verb}} p99")], 0, 45, 12, 8, "s"),
        _panel(17, "Scheduling decisions", [(f"sum by (result) (rate({m.SCHEDULING_DECISIONS}_total[5m]))",
                                             "{{result}}")], 12, 45, 12, 8, "ops"),
    ]


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard model (schemaVersion 39, Grafana 10/11)."""
    return {
        "uid": UID, "title": "gpucluster", "tags": ["gpucluster", "gpu", "hami", "dcgm"],
        "timezone": "browser", "editable": True, "schemaVersion": 39, "version": 1, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"}, "graphTooltip": 1,
        "annotations": {"list": []}, "links": [],
        "templating": {"list": [
            {"name": "datasource", "label": "Data source", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0, "refresh": 1},
            {"name": "node", "label": "Node", "type": "query", "datasource": DS,
             "query": {"query": f"label_values({m.NODE_SCHEDULABLE}, node)", "refId": "node"},
             "includeAll": True, "multi": True,
             "allValue": ".*", "current": {"text": "All", "value": "$__all"}, "refresh": 2, "hide": 0,
             "sort": 1},
        ]},
        "panels": panels(),
    }


def dashboard_json() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=True) + "\n"


def expressions(model: dict[str, Any] | None = None) -> list[str]:
    """Every PromQL expression in the dashboard (panel targets and query variables)."""
    model = model or dashboard()
    out = [t["expr"] for p in model["panels"] for t in p.get("targets", [])]
    for v in model["templating"]["list"]:
        q = v.get("query")
        if isinstance(q, dict):
            out.append(q["query"])
    return out
