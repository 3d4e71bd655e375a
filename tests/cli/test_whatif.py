"""`gpucluster whatif` through a local typer app: two small designs on one small synthetic trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from gpucluster.cli.whatif_cmd import register, verdict

TRACE = "synthetic:120:helios:0.9"


@pytest.fixture
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Test root."""

    register(root)
    return root


@pytest.fixture
def designs(tmp_path: Path) -> tuple[Path, Path]:
    small = tmp_path / "small.yaml"
    small.write_text("name: small\ngpu: H100\nservers: 4\n", encoding="utf-8")
    large = tmp_path / "large.yaml"
    large.write_text("name: large\ngpu: H100\nservers: 8\n", encoding="utf-8")
    return small, large


def _run(app: typer.Typer, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, ["whatif", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_larger_design_is_faster_and_dearer(app: typer.Typer, designs: tuple[Path, Path]) -> None:
    small, large = designs
    code, out, err = _run(app, "--design", str(small), "--design", str(large), "--trace", TRACE, "--json")
    assert code == 0, err
    data = json.loads(out)  # stdout is JSON only
    assert {"designs", "verdict"} <= set(data)
    s, lg = data["designs"]
    for row in (s, lg):
        for key in ("name", "servers", "gpus", "capex_usd", "power_usd_per_year", "owned_usd_per_year",
                    "usd_per_gpu_hour", "jobs", "jobs_completed", "avg_jct_s", "p99_jct_s", "avg_queue_s",
                    "gpu_utilization", "makespan_s"):
            assert key in row, key
        assert row["jobs"] == 120  # the same workload on both
    assert (s["name"], s["servers"], s["gpus"]) == ("small", 4, 32)
    assert (lg["name"], lg["servers"], lg["gpus"]) == ("large", 8, 64)
    assert lg["avg_jct_s"] <= s["avg_jct_s"]
    assert lg["capex_usd"] > s["capex_usd"]
    assert lg["power_usd_per_year"] > s["power_usd_per_year"]
    assert lg["gpu_utilization"] < s["gpu_utilization"]
    # owned per year = capex / 4 years + power; $ per delivered GPU-hour = owned / (GPUs x 8760 x util)
    assert s["owned_usd_per_year"] == pytest.approx(s["capex_usd"] / 4 + s["power_usd_per_year"], abs=0.01)
    assert s["usd_per_gpu_hour"] == pytest.approx(
        s["owned_usd_per_year"] / (s["gpus"] * 8760 * s["gpu_utilization"]), rel=1e-3)
    v = data["verdict"]
    assert v["design"] in {"small", "large"}
    assert v["best_design"] == "large" or v["best_avg_jct_s"] == s["avg_jct_s"]
    assert v["text"].startswith(v["design"] + ":")


def test_tolerance_decides_the_verdict(app: typer.Typer, designs: tuple[Path, Path]) -> None:
    small, large = designs
    args = ("--design", str(small), "--design", str(large), "--trace", TRACE, "--json")
    code, out, _ = _run(app, *args, "--jct-tolerance", "1000")
    assert code == 0
    assert json.loads(out)["verdict"]["design"] == "small"  # cheaper, and "close enough" at +1000 %
    code, out, _ = _run(app, *args, "--jct-tolerance", "0")
    assert code == 0
    data = json.loads(out)
    fastest = min(data["designs"], key=lambda r: (r["avg_jct_s"], r["owned_usd_per_year"]))
    assert data["verdict"]["design"] == fastest["name"]


def test_verdict_ignores_designs_that_complete_fewer_jobs() -> None:
    rows = [
        {"name": "tiny", "jobs_completed": 8, "avg_jct_s": 10.0, "owned_usd_per_year": 1.0, "gpus": 8,
         "usd_per_ref_gpu_hour": 0.5},
        {"name": "mid", "jobs_completed": 10, "avg_jct_s": 100.0, "owned_usd_per_year": 5.0, "gpus": 16,
         "usd_per_ref_gpu_hour": 1.0},
        {"name": "big", "jobs_completed": 10, "avg_jct_s": 95.0, "owned_usd_per_year": 9.0, "gpus": 32,
         "usd_per_ref_gpu_hour": 1.8},
    ]
    v = verdict(rows, 10.0)
    assert v["design"] == "mid"
    assert v["best_design"] == "big"
    assert v["excluded"] == ["tiny"]


def test_table_and_out_bundle(app: typer.Typer, designs: tuple[Path, Path], tmp_path: Path) -> None:
    small, large = designs
    out_dir = tmp_path / "out"
    code, out, err = _run(app, "--design", str(small), "--design", str(large), "--trace", TRACE,
                          "--out", str(out_dir))
    assert code == 0, err
    assert "small" in out and "large" in out
    assert "verdict:" in out
    rows = list(csv.DictReader((out_dir / "whatif.csv").open(encoding="utf-8")))
    assert [r["name"] for r in rows] == ["small", "large"]
    assert sum(1 for r in rows if r["verdict"] == "yes") == 1
    assert (out_dir / "whatif.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_duplicate_names_are_told_apart(app: typer.Typer, designs: tuple[Path, Path]) -> None:
    small, _ = designs
    code, out, err = _run(app, "--design", str(small), "--design", str(small), "--trace", "synthetic:20", "--json")
    assert code == 0, err
    names = [r["name"] for r in json.loads(out)["designs"]]
    assert len(set(names)) == 2


@pytest.mark.parametrize(
    ("which", "trace", "message"),
    [
        ("missing", "synthetic:20", "missing.yaml: cannot read"),
        ("bad", "synthetic:20", "bad.yaml: servers: must be > 0"),
        ("notmap", "synthetic:20", "notmap.yaml: requirements: must be a mapping"),
        ("small", "bogus:x", "--trace 'bogus:x': unknown format 'bogus'"),
        ("small", "jobs:/no/such/trace.csv", "--trace: /no/such/trace.csv: no such file"),
        ("small", "synthetic:x", "--trace 'synthetic:x'"),
    ],
)
def test_errors_exit_2_with_where_and_why(app: typer.Typer, designs: tuple[Path, Path], tmp_path: Path,
                                          which: str, trace: str, message: str) -> None:
    small, _ = designs
    (tmp_path / "bad.yaml").write_text("gpu: H100\nservers: -1\n", encoding="utf-8")
    (tmp_path / "notmap.yaml").write_text("- 1\n- 2\n", encoding="utf-8")
    path = small if which == "small" else tmp_path / f"{which}.yaml"
    code, out, err = _run(app, "--design", str(path), "--trace", trace)
    assert code == 2
    assert message in err
    assert out == ""


def test_bad_policy_exits_2(app: typer.Typer, designs: tuple[Path, Path]) -> None:
    small, large = designs
    code, _, err = _run(app, "--design", str(small), "--design", str(large), "--trace", "synthetic:20",
                        "--policy", "nope")
    assert code == 2
    assert "--queue-policy: unknown queue policy 'nope'" in err
