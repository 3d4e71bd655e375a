"""Writes the promtool unit-test files in this folder from the scenarios below (run it after changing the
rules' wording: ``.venv/bin/python tests/monitoring/promtool/generate.py``).

The scenarios (input series, and which alerts with which labels fire when) are stated here by hand; only the
annotations are filled in from the rules' templates. ``promtool test rules`` then checks them against real
Prometheus semantics, and ``tests/monitoring/test_rules.py`` checks the in-process evaluator on the same files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpucluster.monitoring.rules import default_rules, render

HERE = Path(__file__).resolve().parent
RULE_FILE = "../../../src/gpucluster/monitoring/rules/gpucluster-alerts.yml"
RULES = {r.name: r for r in default_rules()}


def gpu(i: int, host: str = "node-a") -> dict[str, str]:
    return {"gpu": str(i), "UUID": f"GPU-{host}-{i}", "Hostname": host, "modelName": "H100-SXM5-80GB"}


def dev(i: int, host: str = "node-a") -> dict[str, str]:
    return {"node": host, "Hostname": host, "gpu": str(i), "UUID": f"GPU-{host}-{i}",
            "modelName": "H100-SXM5-80GB", "vendor": "nvidia"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def expect(alert: str, at: str, *label_sets: dict[str, str]) -> dict[str, Any]:
    rule = RULES[alert]
    exp = []
    for labels in label_sets:
        full = {**labels, **rule.labels}
        ann = {"summary": render(rule.summary, {**full, "alertname": alert})}
        if rule.description:
            ann["description"] = render(rule.description, {**full, "alertname": alert})
        exp.append({"exp_labels": full, "exp_annotations": ann})
    return {"eval_time": at, "alertname": alert, "exp_alerts": exp}


SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "xid": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_XID_ERRORS", gpu(0), "0 0 79 79 0"),
            series("DCGM_FI_DEV_XID_ERRORS", gpu(1), "13x4"),
            series("DCGM_FI_DEV_XID_ERRORS", gpu(2), "0 48x3"),
        ],
        "alert_rule_test": [
            expect("GpuXidCritical", "0m"),
            expect("GpuXidCritical", "1m", gpu(2)),
            expect("GpuXidCritical", "2m", gpu(0), gpu(2)),
            expect("GpuXidCritical", "4m", gpu(2)),
            expect("GpuXidError", "0m", gpu(1)),
            expect("GpuXidError", "2m", gpu(0), gpu(1), gpu(2)),
        ],
    }],
    "ecc": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(0), "0 0 0 1x8"),
            series("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", gpu(1), "7x11"),
            series("DCGM_FI_DEV_ROW_REMAP_FAILURE", gpu(1), "0 0 1 1"),
        ],
        "alert_rule_test": [
            expect("GpuEccDoubleBit", "2m"),
            expect("GpuEccDoubleBit", "3m", gpu(0)),
            expect("GpuEccDoubleBit", "7m", gpu(0)),
            expect("GpuEccDoubleBit", "8m"),
            expect("GpuRowRemapFailure", "1m"),
            expect("GpuRowRemapFailure", "2m", gpu(1)),
        ],
    }],
    "temperature": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_GPU_TEMP", gpu(0), "80 90 90 90 90 80"),
            series("DCGM_FI_DEV_GPU_TEMP", gpu(1), "86x5"),
        ],
        "alert_rule_test": [
            expect("GpuTemperatureHigh", "2m"),
            expect("GpuTemperatureHigh", "3m", gpu(0)),
            expect("GpuTemperatureHigh", "4m", gpu(0)),
            expect("GpuTemperatureHigh", "5m"),
        ],
    }],
    "framebuffer": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_FB_USED", gpu(0), "78000x10"),
            series("DCGM_FI_DEV_FB_FREE", gpu(0), "1000x10"),
            series("DCGM_FI_DEV_FB_USED", gpu(1), "40000x10"),
            series("DCGM_FI_DEV_FB_FREE", gpu(1), "40000x10"),
        ],
        "alert_rule_test": [
            expect("GpuFramebufferFull", "4m"),
            expect("GpuFramebufferFull", "5m", gpu(0)),
        ],
    }],
    "idle": [{
        "interval": "1m",
        "input_series": [
            series("gpucluster_device_tasks", dev(0), "1x40"),
            series("DCGM_FI_DEV_GPU_UTIL", {**gpu(0), "namespace": "ml", "pod": "job-1"}, "2x40"),
            series("gpucluster_device_tasks", dev(1), "1x40"),
            series("DCGM_FI_DEV_GPU_UTIL", gpu(1), "90x40"),
            series("gpucluster_device_tasks", dev(2), "0x40"),
            series("DCGM_FI_DEV_GPU_UTIL", gpu(2), "0x40"),
        ],
        "alert_rule_test": [
            expect("GpuAllocatedIdle", "29m"),
            expect("GpuAllocatedIdle", "30m", dev(0)),
        ],
    }],
    "missing": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_GPU_TEMP", gpu(0), "40x15"),
            series("DCGM_FI_DEV_GPU_TEMP", gpu(1), "40 40 40 stale"),
            series("DCGM_FI_DEV_GPU_TEMP", gpu(2), "40 40 40"),
        ],
        "alert_rule_test": [
            expect("GpuMissing", "2m"),
            expect("GpuMissing", "3m", gpu(1)),
            expect("GpuMissing", "6m", gpu(1)),
            expect("GpuMissing", "7m", gpu(1)),
            expect("GpuMissing", "8m", gpu(1), gpu(2)),
            expect("GpuMissing", "12m", gpu(1), gpu(2)),
            expect("GpuMissing", "13m"),
        ],
    }],
    "nvlink": [{
        "interval": "1m",
        "input_series": [
            series("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", gpu(0), "0 0 5x7"),
        ],
        "alert_rule_test": [
            expect("GpuNvlinkErrors", "1m"),
            expect("GpuNvlinkErrors", "2m", gpu(0)),
            expect("GpuNvlinkErrors", "6m", gpu(0)),
            expect("GpuNvlinkErrors", "7m"),
        ],
    }],
    "fragmentation": [{
        "interval": "1m",
        "input_series": [
            series("gpucluster_node_fragmentation_ratio", {"node": "node-a"}, "0.7x20"),
            series("gpucluster_node_fragmentation_ratio", {"node": "node-b"}, "0.5x20"),
        ],
        "alert_rule_test": [
            expect("NodeFragmentationHigh", "14m"),
            expect("NodeFragmentationHigh", "15m", {"node": "node-a"}),
        ],
    }],
    "pending": [{
        "interval": "1m",
        "input_series": [series("gpucluster_scheduler_oldest_pending_seconds", {}, "0+60x20")],
        "alert_rule_test": [
            expect("PodsPendingTooLong", "11m"),
            expect("PodsPendingTooLong", "12m", {}),
        ],
    }],
}


def main() -> None:
    for name, tests in SCENARIOS.items():
        doc = {"rule_files": [RULE_FILE], "evaluation_interval": "1m", "tests": tests}
        text = "# Generated by generate.py from hand-written scenarios; edit those, then rerun it.\n"
        text += yaml.safe_dump(doc, sort_keys=False, width=1000)
        (HERE / f"{name}_test.yml").write_text(text)


if __name__ == "__main__":
    main()
