"""`gpucluster design` through a local typer app."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from gpucluster.cli.design_cmd import register


@pytest.fixture
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Test root."""

    register(root)
    return root


def _run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["design", *args])
    return result.exit_code, result.stdout, result.stderr


REQUIRED_JSON = [
    ("servers",), ("gpus",), ("racks",), ("network", "tiers"), ("network", "leaf_switches"),
    ("network", "spine_switches"), ("network", "core_switches"),
    ("network", "cables", "node_to_leaf"), ("network", "cables", "leaf_to_spine"),
    ("network", "cables", "spine_to_core"), ("network", "oversubscription"),
    ("network", "bisection_tbps"), ("power", "server_max_w"), ("power", "psu_sufficient"),
    ("power", "warnings"), ("power", "facility_kw"), ("cost", "capex_usd"),
]


def test_flags_json_has_the_contract_keys(app: typer.Typer) -> None:
    code, out, _ = _run(app, "--servers", "200", "--gpus-per-server", "8", "--gpu", "H100",
                        "--fabric", "ib", "--switch-ports", "64", "--oversubscription", "1",
                        "--psu", "2x2200", "--json")
    assert code == 0
    data = json.loads(out)
    for path in REQUIRED_JSON:
        node = data
        for key in path:
            node = node[key]
    assert data["power"]["psu_sufficient"] is False
    assert isinstance(data["power"]["warnings"], list)
    assert data["power"]["warnings"]
    assert data["network"]["tiers"] == 2


def test_preset_json(app: typer.Typer) -> None:
    code, out, _ = _run(app, "--preset", "dgx-b200-superpod", "--scalable-units", "32", "--json")
    assert code == 0
    n = json.loads(out)["network"]
    assert (n["leaf_switches"], n["spine_switches"], n["core_switches"]) == (256, 256, 128)


def test_roce_fabric_flag(app: typer.Typer) -> None:
    code, out, _ = _run(app, "--servers", "16", "--gpu", "L40S", "--fabric", "roce", "--json")
    assert code == 0
    assert json.loads(out)["network"]["fabric"] == "roce"


def test_human_output(app: typer.Typer) -> None:
    code, out, _ = _run(app, "--servers", "200", "--gpu", "H100", "--psu", "2x2200")
    assert code == 0
    assert "do not carry the server" in out
    assert "Cluster design" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--servers", "-3", "--gpu", "H100"], "--servers: must be > 0"),
        (["--servers", "3", "--gpu", "X100"], "--gpu: unknown GPU model 'X100'"),
        (["--servers", "30000", "--gpu", "H100", "--switch-ports", "32"], "--switch-ports: 32-port"),
        (["--servers", "3", "--gpu", "H100", "--switch-ports", "33"], "--switch-ports: must be even"),
        (["--servers", "3", "--gpu", "H100", "--fabric", "token-ring"], "--fabric: must be ib or roce"),
        (["--servers", "3", "--gpu", "H100", "--psu", "big"], "--psu: 'big' is not"),
        (["--servers", "3"], "--gpu: required"),
        (["--preset", "dgx-a1-superpod"], "--preset: unknown preset"),
    ],
)
def test_bad_flags_exit_2_and_name_the_flag(app: typer.Typer, args: list[str], message: str) -> None:
    code, out, err = _run(app, *args)
    assert code == 2
    assert message in err
    assert out == ""


def test_bad_file_names_file_and_field(app: typer.Typer, tmp_path: Path) -> None:
    req = tmp_path / "req.yaml"
    req.write_text("gpu: H100\nservers: -1\nfabric:\n  switch_ports: 63\n", encoding="utf-8")
    code, _, err = _run(app, str(req))
    assert code == 2
    assert f"{req}: servers: must be > 0" in err
    assert f"{req}: fabric.switch_ports: must be even" in err


def test_out_bundle_and_export_spec(app: typer.Typer, tmp_path: Path) -> None:
    req = tmp_path / "req.yaml"
    req.write_text("name: seed\ngpu: H100\nservers: 200\npower: {psu: 2x2200}\n", encoding="utf-8")
    out_dir = tmp_path / "out"
    spec = tmp_path / "spec.yaml"
    code, out, _ = _run(app, str(req), "--json", "--out", str(out_dir), "--export-spec", str(spec))
    assert code == 0
    json.loads(out)  # stdout is JSON only
    report = (out_dir / "report.md").read_text(encoding="utf-8")
    assert "NOT sufficient" in report
    assert "6x3300 W (4+2)" in report
    csv_rows = (out_dir / "cables.csv").read_text(encoding="utf-8").strip().splitlines()
    assert len(csv_rows) == 1 + 1600 + 56 * 32
    assert (out_dir / "topology.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = (out_dir / "topology.svg").read_text(encoding="utf-8")
    assert "<svg" in svg
    data = yaml.safe_load(spec.read_text(encoding="utf-8"))
    assert data["kind"] == "ClusterSpec"
    assert data["nodePools"][0]["count"] == 200
    assert data["fabric"]["type"] == "infiniband"


def test_power_budget_and_gpus_flags(app: typer.Typer) -> None:
    code, out, _ = _run(app, "--power-budget-kw", "2000", "--gpu", "H100", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["power"]["facility_kw"] <= 2000
    code, out, _ = _run(app, "--gpus", "100", "--gpu", "L40S", "--json")
    assert code == 0
    assert json.loads(out)["servers"] == 13
    code, _, err = _run(app, "--servers", "3", "--gpus", "8", "--gpu", "H100")
    assert code == 2
    assert "--servers: give exactly one" in err
