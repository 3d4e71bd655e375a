"""The Grafana dashboard's structure, without a Grafana (none is packaged in Debian or on PyPI): every field is
one Grafana's own dashboard schema knows (grafana-foundation-sdk's models, generated from it, keep every field
through a round trip), the types and layout hold (a JSON Schema of what Grafana 10/11 load), every variable a
query uses is defined, and every expression parses as PromQL. Which metrics the expressions read is checked
against the real exporters in tests/integration/test_dashboard_metrics.py."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import promql_parser
import pytest
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard

from gpucluster.monitoring.dashboard import dashboard, dashboard_json, expressions

REPO = Path(__file__).resolve().parents[2]
PANEL_TYPES = {"timeseries", "stat", "gauge", "bargauge", "table", "heatmap", "text", "row", "piechart"}

_INT = {"type": "integer", "minimum": 0}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["uid", "title", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "title": {"type": "string", "minLength": 1},
        "schemaVersion": {"type": "integer", "minimum": 36},
        "refresh": {"type": "string"},
        "time": {"type": "object", "required": ["from", "to"],
                 "properties": {"from": {"type": "string"}, "to": {"type": "string"}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "templating": {"type": "object", "required": ["list"], "properties": {"list": {"type": "array", "items": {
            "type": "object", "required": ["name", "type"],
            "properties": {"name": {"type": "string", "pattern": r"^\w+$"},
                           "type": {"enum": ["query", "datasource", "custom", "constant", "interval", "textbox"]}},
        }}}},
        "panels": {"type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["id", "type", "title", "gridPos", "datasource", "targets"],
            "properties": {
                "id": {"type": "integer", "minimum": 1},
                "type": {"enum": sorted(PANEL_TYPES)},
                "title": {"type": "string", "minLength": 1},
                "gridPos": {"type": "object", "required": ["x", "y", "w", "h"], "additionalProperties": False,
                            "properties": {"x": {**_INT, "maximum": 23}, "y": _INT,
                                           "w": {"type": "integer", "minimum": 1, "maximum": 24},
                                           "h": {"type": "integer", "minimum": 1}}},
                "datasource": {"type": "object", "required": ["type", "uid"],
                               "properties": {"type": {"const": "prometheus"}, "uid": {"type": "string"}}},
                "fieldConfig": {"type": "object", "required": ["defaults"],
                                "properties": {"defaults": {"type": "object", "properties": {"unit": {"type": "string"}}}}},
                "targets": {"type": "array", "minItems": 1, "items": {
                    "type": "object", "required": ["expr", "refId"],
                    "properties": {"expr": {"type": "string", "minLength": 1},
                                   "refId": {"type": "string", "pattern": "^[A-Z]$"},
                                   "legendFormat": {"type": "string"}}}},
            }}},
    },
}


def check(model: dict[str, Any]) -> list[str]:
    """Every problem of a dashboard model (empty when Grafana would load it as intended)."""
    problems = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}"
                for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(model)]
    if problems:
        return problems
    problems += [f"{p}: not in Grafana's dashboard schema" for p in _dropped(model, _round_trip(model))]
    panels = model["panels"]
    ids = [p["id"] for p in panels]
    problems += [f"panel id {i} used twice" for i in sorted({i for i in ids if ids.count(i) > 1})]
    cells: dict[tuple[int, int], int] = {}
    for p in panels:
        g = p["gridPos"]
        if g["x"] + g["w"] > 24:
            problems.append(f"panel {p['id']}: x + w = {g['x'] + g['w']} > 24 columns")
        for x in range(g["x"], min(g["x"] + g["w"], 24)):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    problems.append(f"panel {p['id']} overlaps panel {cells[(x, y)]} at ({x}, {y})")
                    break
                cells[(x, y)] = p["id"]
            else:
                continue
            break
        refs = [t["refId"] for t in p["targets"]]
        if len(set(refs)) != len(refs):
            problems.append(f"panel {p['id']}: refIds {refs} repeat")
    defined = {v["name"] for v in model["templating"]["list"]} | {"__all", "__interval", "__rate_interval", "__range"}
    for text in re.findall(r"\$\{?(\w+)", json.dumps(model)):
        if text not in defined:
            problems.append(f"${text}: no such dashboard variable")
    for expr in expressions(model):
        inner = re.sub(r"^label_values\((.+),\s*\w+\)$", r"\1", expr)
        try:
            promql_parser.parse(inner.replace("$node", ".*"))
        except ValueError as exc:
            problems.append(f"{expr!r}: not PromQL: {exc}")
    return problems


def _round_trip(model: dict[str, Any]) -> Any:
    return json.loads(json.dumps(Dashboard.from_json(model), cls=JSONEncoder))


def _dropped(a: Any, b: Any, path: str = "") -> list[str]:
    """Paths of ``a`` that the round trip lost or changed."""
    if isinstance(a, dict):
        if not isinstance(b, dict):
            return [path or "/"]
        return [p for k, v in a.items() for p in ([f"{path}/{k}"] if k not in b else _dropped(v, b[k], f"{path}/{k}"))]
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return [path]
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _dropped(x, y, f"{path}[{i}]")]
    return [] if a == b else [path]


def test_dashboard_is_well_formed() -> None:
    assert check(dashboard()) == []
    shipped = json.loads((REPO / "deploy" / "grafana" / "gpucluster.json").read_text())
    assert shipped == dashboard() and (REPO / "deploy" / "grafana" / "gpucluster.json").read_text() == dashboard_json()


def _broken(edit: Any) -> list[str]:
    model = copy.deepcopy(dashboard())
    edit(model)
    return check(model)


@pytest.mark.parametrize(("edit", "needle"), [
    (lambda d: d["panels"][0].update(gridpos=d["panels"][0].pop("gridPos")), "gridPos"),
    (lambda d: d["panels"][0]["gridPos"].update(x="0"), "gridPos/x"),
    (lambda d: d["panels"][0]["gridPos"].update(x=20, w=6), "> 24 columns"),
    (lambda d: d["panels"][1]["gridPos"].update(x=0, y=0), "overlaps panel"),
    (lambda d: d["panels"][1].update(id=d["panels"][0]["id"]), "used twice"),
    (lambda d: d["panels"][0].update(type="graph-v1"), "type"),
    (lambda d: d["panels"][0]["targets"].append(dict(d["panels"][0]["targets"][0])), "repeat"),
    (lambda d: d["panels"][0]["targets"][0].update(expr="sum(rate(x[5m])"), "not PromQL"),
    (lambda d: d["panels"][0]["targets"][0].update(expr='up{node=~"$nodes"}'), "$nodes: no such"),
    (lambda d: d["templating"]["list"][1].update(defintion="x"), "not in Grafana's dashboard schema"),
    (lambda d: d["panels"][0].update(datasource={"type": "loki", "uid": "x"}), "datasource"),
])
def test_check_catches(edit: Any, needle: str) -> None:
    problems = _broken(edit)
    assert any(needle in p for p in problems), problems
