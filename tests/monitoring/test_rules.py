"""Alert rules: the checked-in rule file is what the code generates, promtool accepts it and its unit tests
pass, and the in-process evaluator gives the same alerts as promtool on the same test files."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.monitoring import Action, AlertThresholds, RuleEngine, default_rules, rule_file
from gpucluster.monitoring.promql import SeriesDB, expand_values, labels_of, parse_duration, parse_series

REPO = Path(__file__).resolve().parents[2]
RULE_FILE = REPO / "src/gpucluster/monitoring/rules/gpucluster-alerts.yml"
PROMTOOL_DIR = Path(__file__).resolve().parent / "promtool"
TEST_FILES = sorted(PROMTOOL_DIR.glob("*_test.yml"))


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing (apt package prometheus); CI must run these checks")
        pytest.skip("promtool not installed (apt-get install prometheus)")
    return found


def test_checked_in_rule_file_is_generated() -> None:
    assert RULE_FILE.read_text() == rule_file(), "run: gpucluster monitor rules --out " + str(RULE_FILE)


def test_every_rule_has_a_promtool_unit_test() -> None:
    tested = set()
    for path in TEST_FILES:
        for t in yaml.safe_load(path.read_text())["tests"]:
            tested |= {a["alertname"] for a in t["alert_rule_test"] if a["exp_alerts"]}
    assert tested == {r.name for r in default_rules()}


def test_rules_have_issue_8_coverage_and_actions() -> None:
    rules = {r.name: r for r in default_rules()}
    assert rules["GpuXidCritical"].action == Action.DRAIN and rules["GpuXidCritical"].for_s == 0
    assert "== 79" in rules["GpuXidCritical"].expr.promql()
    assert rules["GpuAllocatedIdle"].action == Action.RELEASE
    assert rules["NodeFragmentationHigh"].action == Action.DEFRAGMENT
    custom = {r.name: r for r in default_rules(AlertThresholds(gpu_temp_c=80, idle_for_s=600))}
    assert custom["GpuTemperatureHigh"].expr.promql() == "DCGM_FI_DEV_GPU_TEMP > 80"
    assert custom["GpuAllocatedIdle"].for_s == 600


def test_promtool_check_rules() -> None:
    out = subprocess.run(  # noqa: PLW1510 - the return code is the check
        [promtool(), "check", "rules", str(RULE_FILE)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(default_rules())} rules found" in out.stdout


def test_promtool_test_rules() -> None:
    out = subprocess.run(  # noqa: PLW1510 - the return code is the check
        [promtool(), "test", "rules", *[p.name for p in TEST_FILES]], cwd=PROMTOOL_DIR,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("SUCCESS") == len(TEST_FILES)


def test_promtool_catches_a_wrong_expectation(tmp_path: Path) -> None:
    """The promtool run above can fail: a scenario that expects the wrong alert does."""
    doc = yaml.safe_load((PROMTOOL_DIR / "xid_test.yml").read_text())
    doc["rule_files"] = [str(RULE_FILE)]
    doc["tests"][0]["alert_rule_test"][0]["exp_alerts"] = [{"exp_labels": {"gpu": "0"}}]
    bad = tmp_path / "bad_test.yml"
    bad.write_text(yaml.safe_dump(doc))
    out = subprocess.run(  # noqa: PLW1510 - the return code is the check
        [promtool(), "test", "rules", str(bad)], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0


def _run_promtool_file_in_process(path: Path) -> list[tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]]:
    """Evaluate a promtool test file with our RuleEngine; returns (alert, time, expected, got) per check."""
    doc = yaml.safe_load(path.read_text())
    eval_interval = parse_duration(doc.get("evaluation_interval", "1m"))
    results = []
    for test in doc["tests"]:
        interval = parse_duration(test.get("interval", "1m"))
        db = SeriesDB(retention_s=1e9)
        for item in test["input_series"]:
            name, labels = parse_series(item["series"])
            for k, v in enumerate(expand_values(item["values"])):
                if v is None:
                    continue
                db.add(name, labels_of(labels), k * interval, None if v == "stale" else float(v))
        checks = test["alert_rule_test"]
        end = max(parse_duration(c["eval_time"]) for c in checks)
        engine = RuleEngine(default_rules())
        firing_at: dict[float, list[Any]] = {}
        t = 0.0
        while t <= end:
            firing_at[t] = [a for a in engine.evaluate(db, t) if a.state == "firing"]
            t += eval_interval
        for c in checks:
            at = parse_duration(c["eval_time"])
            got = [{"exp_labels": {k: v for k, v in a.labels.items() if k != "alertname"},
                    "exp_annotations": a.annotations}
                   for a in firing_at[at] if a.name == c["alertname"]]
            results.append((c["alertname"], c["eval_time"], c["exp_alerts"], got))
    return results


@pytest.mark.parametrize("path", TEST_FILES, ids=[p.stem for p in TEST_FILES])
def test_in_process_evaluator_agrees_with_promtool_scenarios(path: Path) -> None:
    for alert, at, expected, got in _run_promtool_file_in_process(path):
        key = lambda a: sorted(a["exp_labels"].items())  # noqa: E731
        assert sorted(got, key=key) == sorted(expected, key=key), f"{path.name}: {alert} at {at}"


def test_pending_then_firing_then_resolved() -> None:
    db = SeriesDB()
    lab = labels_of({"gpu": "0", "UUID": "u", "Hostname": "h"})
    engine = RuleEngine([r for r in default_rules() if r.name == "GpuTemperatureHigh"])
    states = []
    for k, temp in enumerate([95, 95, 95, 95, 60]):
        db.add("DCGM_FI_DEV_GPU_TEMP", lab, 60.0 * k, temp)
        states.append([a.state for a in engine.evaluate(db, 60.0 * k)])
    assert states == [["pending"], ["pending"], ["firing"], ["firing"], []]
