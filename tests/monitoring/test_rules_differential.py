"""Differential test: random metric histories are evaluated by our in-process rule engine, and its alerts are
handed to ``promtool test rules`` as the expectation. promtool (real Prometheus semantics) must agree."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.monitoring import RuleEngine, default_rules
from gpucluster.monitoring.promql import SeriesDB, labels_of

from .test_rules import RULE_FILE, promtool

STEPS = 14
ALERTS = ("GpuXidCritical", "GpuXidError", "GpuTemperatureHigh", "GpuEccDoubleBit", "GpuMissing",
          "GpuFramebufferFull", "GpuNvlinkErrors")

Value = float | str | None  # number, "stale", or None for "no sample"


def gpu(i: int) -> dict[str, str]:
    return {"gpu": str(i), "UUID": f"GPU-{i}", "Hostname": "h", "modelName": "H100"}


def _series(draw: Any, values: Any) -> list[Value]:
    vals: list[Value] = draw(st.lists(values, min_size=STEPS, max_size=STEPS))
    # a device may fall off the bus: from some step on, no samples (stale marker first, or just gone)
    cut = draw(st.one_of(st.none(), st.integers(1, STEPS - 1)))
    if cut is not None:
        vals = [*vals[:cut], *(["stale"] if draw(st.booleans()) else [None]), *([None] * (STEPS - cut - 1))]
    return vals


@st.composite
def histories(draw: Any) -> dict[tuple[str, int], list[Value]]:
    out: dict[tuple[str, int], list[Value]] = {}
    for i in range(2):
        out[("DCGM_FI_DEV_XID_ERRORS", i)] = draw(st.lists(st.sampled_from([0.0, 0.0, 13.0, 79.0, 48.0]),
                                                           min_size=STEPS, max_size=STEPS))
        out[("DCGM_FI_DEV_GPU_TEMP", i)] = _series(draw, st.sampled_from([60.0, 86.0, 88.0, 95.0]))
        used = draw(st.lists(st.sampled_from([1000.0, 79000.0]), min_size=STEPS, max_size=STEPS))
        out[("DCGM_FI_DEV_FB_USED", i)] = list(used)
        out[("DCGM_FI_DEV_FB_FREE", i)] = [81000.0 - u for u in used]
        incs = draw(st.lists(st.sampled_from([0, 0, 0, 1]), min_size=STEPS, max_size=STEPS))
        counter = [float(sum(incs[: k + 1])) for k in range(STEPS)]
        out[("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", i)] = list(counter)
        out[("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", i)] = list(counter)
    return out


def _values_text(vals: list[Value]) -> str:
    return " ".join("_" if v is None else "stale" if v == "stale" else repr(v) for v in vals)


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_promtool_agrees_with_the_in_process_evaluator(tmp_path_factory: pytest.TempPathFactory,
                                                       hist: dict[tuple[str, int], list[Value]]) -> None:
    tool = promtool()
    db = SeriesDB(retention_s=1e9)
    for (name, i), vals in hist.items():
        for k, v in enumerate(vals):
            if v is not None:
                db.add(name, labels_of(gpu(i)), 60.0 * k, None if v == "stale" else float(v))
    engine = RuleEngine(default_rules())
    checks: list[dict[str, Any]] = []
    for k in range(STEPS):
        firing = [a for a in engine.evaluate(db, 60.0 * k) if a.state == "firing"]
        for name in ALERTS:
            checks.append({"eval_time": f"{k}m", "alertname": name, "exp_alerts": [
                {"exp_labels": {x: y for x, y in a.labels.items() if x != "alertname"},
                 "exp_annotations": a.annotations}
                for a in firing if a.name == name]})
    inner = lambda i: ",".join(f'{k}="{v}"' for k, v in gpu(i).items())  # noqa: E731
    doc = {
        "rule_files": [str(RULE_FILE)],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [{"series": f"{name}{{{inner(i)}}}", "values": _values_text(vals)}
                             for (name, i), vals in hist.items()],
            "alert_rule_test": checks,
        }],
    }
    path = tmp_path_factory.mktemp("diff") / "random_test.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
    out = subprocess.run([tool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]

