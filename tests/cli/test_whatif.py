"""`gpucluster whatif` through a local typer app: two small designs on one small synthetic trace."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from gpucluster.cli.whatif_cmd import register
from gpucluster.whatif import verdict

TRACE = "synthetic:120:helios:0.9"


@pytest.fixture
def app() -> typer.Typer:
    root = typer.Typer()

    @root.callback()
    def _root() -> None:
        """Test root."""

    register(root)
    return root


def _design(tmp_path: Path, name: str, gpu: str, servers: int) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(f"name: {name}\ngpu: {gpu}\nservers: {servers}\n", encoding="utf-8")
    return path


@pytest.fixture
def designs(tmp_path: Path) -> tuple[Path, Path]:
    return _design(tmp_path, "small", "H100", 4), _design(tmp_path, "large", "H100", 8)


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
        assert row["placement_in_use"] == "jobs"  # no --placement-policy: the queue policy's own
        assert "training_share_by_model" not in row  # one GPU model: no share to show
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
        ("missing", "synthetic:20", "missing.yaml: no such file"),
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


# ------------------------------------------------------------------ buyer units (issue 19)
@pytest.fixture
def gpu_designs(tmp_path: Path) -> tuple[Path, Path]:
    return _design(tmp_path, "h100", "H100", 4), _design(tmp_path, "l40s", "L40S", 4)


def _inference_trace(path: Path, model: str, n: int = 60) -> Path:
    """``n`` inference jobs of ``model`` (H100 work, a token count each) arriving over two hours."""
    lines = ["id,submit_s,gpus,duration_s,kind,model,ref_gpu,tokens"]
    for i in range(n):
        lines.append(f"i{i},{i * 120},{1 + i % 4},{900 + 60 * (i % 7)},infer,{model},H100,{5e6 * (1 + i % 3)}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _json(app: typer.Typer, *args: str) -> dict[str, Any]:
    code, out, err = _run(app, *args, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def test_training_is_not_sent_to_l40s(app: typer.Typer, gpu_designs: tuple[Path, Path]) -> None:
    """The issue's case: a training trace on the same GPU count. The L40S cluster takes the catalog's ratio longer
    and is not recommended within the default tolerance, whatever its cost per unit of work."""
    h100, l40s = gpu_designs
    data = _json(app, "--design", str(h100), "--design", str(l40s), "--trace", "synthetic:200:philly:0.6")
    h, lo = data["designs"]
    assert h["gpu_speed"] == 1.0 and 0.2 < lo["gpu_speed"] < 0.6  # H100 work; L40S 2-4x slower
    assert h["work_ref_gpu_h"] == pytest.approx(lo["work_ref_gpu_h"])
    assert lo["avg_jct_s"] > 1.5 * h["avg_jct_s"]
    v = data["verdict"]
    assert v["design"] == "h100"
    assert "l40s" not in v["within"]
    assert "H100" in v["text"] and f"{h['usd_per_ref_gpu_hour']:,.2f}" in v["text"]
    # only a tolerance wide enough lets L40S in, and then only if it costs less per unit of work
    wide = _json(app, "--design", str(h100), "--design", str(l40s), "--trace", "synthetic:200:philly:0.6",
                 "--jct-tolerance", "10000")["verdict"]
    assert wide["design"] == wide["cheapest_design"]


def test_buyer_units_are_owned_and_cloud_side_by_side(app: typer.Typer, gpu_designs: tuple[Path, Path]) -> None:
    h100, _ = gpu_designs
    [row] = _json(app, "--design", str(h100), "--trace", "synthetic:120:philly:0.5",
                  "--owned-utilization", "0.5")["designs"]
    costs = row["costs"]
    owned, od, spot = costs["owned"], costs["on_demand"], costs["spot"]
    # owned: (capex / 4 + power) / (GPUs x 8760 x 0.5) per GPU-hour, at 1.0x speed per reference-GPU-hour
    per_h = row["owned_usd_per_year"] / (row["gpus"] * 8760 * 0.5)
    assert owned["usd_per_ref_gpu_hour"] == pytest.approx(per_h, rel=1e-3)
    assert owned["usd_per_job"] == pytest.approx(owned["usd_total"] / row["jobs_completed"], rel=1e-3)
    assert od["usd_per_ref_gpu_hour"] == pytest.approx(od["usd_per_gpu_hour"], rel=1e-3)
    assert spot["usd_per_gpu_hour"] < od["usd_per_gpu_hour"]
    assert spot["usd_per_ref_gpu_hour"] > spot["usd_per_gpu_hour"]  # interruptions cost work
    assert 0 < spot["lost_work_share"] < 0.5 and spot["avg_jct_s"] > row["avg_jct_s"]
    assert {c["region"] for c in costs["cloud"]} >= {"us-east-1", "eu-west-1"}
    assert row["usd_per_ref_gpu_hour"] == owned["usd_per_ref_gpu_hour"]
    assert row["spot_region"] == f"{spot['provider']} {spot['region']}"
    only = _json(app, "--design", str(h100), "--trace", "synthetic:120:philly:0.5", "--region", "eu-west")
    assert {c["region"] for c in only["designs"][0]["costs"]["cloud"]} == {"eu-west-1"}
    # a --region no offer matches: the verdict said the catalog had no cloud offer for the GPU at all
    none = _json(app, "--design", str(h100), "--trace", "synthetic:120:philly:0.5", "--region", "mars-1")
    assert none["designs"][0]["costs"]["cloud"] == []
    assert "no cloud offer for H100-SXM5-80GB in a region or provider matching 'mars-1' (--region)" in (
        none["verdict"]["text"])


@pytest.mark.parametrize("model", ["llama-decode", "resnet-serve"])
def test_inference_follows_the_catalog_and_the_price_sheet(app: typer.Typer, gpu_designs: tuple[Path, Path],
                                                           tmp_path: Path, model: str) -> None:
    """At one utilisation, owned cost per unit of work = price per GPU-hour / the speed model's speed, so the
    verdict (cost decides at a wide tolerance) is whichever the catalog and the prices make cheaper."""
    from gpucluster.perf import SpeedModel

    h100, l40s = gpu_designs
    trace = _inference_trace(tmp_path / "infer.csv", model)
    data = _json(app, "--design", str(h100), "--design", str(l40s), "--trace", f"jobs:{trace}",
                 "--owned-utilization", "0.6", "--jct-tolerance", "10000")
    m = SpeedModel()
    job = m.job(kind="inference", model=model, ref_gpu="H100")
    expected = {}
    for row in data["designs"]:
        speed = m.factor(job, row["gpu"])
        assert row["gpu_speed"] == pytest.approx(speed, rel=1e-3)
        per_work = row["owned_usd_per_year"] / (row["gpus"] * 8760 * 0.6) / speed
        assert row["usd_per_ref_gpu_hour"] == pytest.approx(per_work, rel=1e-3)
        assert row["usd_per_million_tokens"] > 0
        expected[row["name"]] = per_work
    assert data["verdict"]["design"] == min(expected, key=lambda k: expected[k])


def test_plot_writes_png_or_svg_and_refuses_other_suffixes(app: typer.Typer, gpu_designs: tuple[Path, Path],
                                                           tmp_path: Path) -> None:
    h100, l40s = gpu_designs
    base = ("--design", str(h100), "--design", str(l40s), "--trace", "synthetic:60:philly:0.3")
    code, _, err = _run(app, *base, "--plot", str(tmp_path / "p.svg"))
    assert code == 0, err
    assert (tmp_path / "p.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    code, _, err = _run(app, *base, "--plot", str(tmp_path / "p.png"), "--json")
    assert code == 0 and (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    code, _, err = _run(app, *base, "--plot", str(tmp_path / "p.gif"))
    assert code == 2 and "--plot" in err and ".png or .svg" in err
    code, _, err = _run(app, *base, "--owned-utilization", "1.5")
    assert code == 2 and "--owned-utilization: must be within (0, 1]" in err


# ------------------------------------------------------------------ what `design` wrote (issue 32, minor)
def test_whatif_takes_the_spec_and_the_folder_design_wrote(app: typer.Typer, tmp_path: Path) -> None:
    """`design --out DIR` and `--export-spec FILE` write a ClusterSpec; whatif takes either (on main it refused
    the spec with one "unknown field" line per spec key). The spec is simulated as written and priced as the
    design of the same servers, so it costs what the requirements it came from cost."""
    from gpucluster.cli.main import app as root

    req = _design(tmp_path, "four", "H100", 4)
    made = CliRunner().invoke(root, ["design", str(req), "--out", str(tmp_path / "out"),
                                     "--export-spec", str(tmp_path / "spec.yaml")])
    assert made.exit_code == 0, made.stderr
    code, out, err = _run(app, "--design", str(tmp_path / "out"), "--design", str(tmp_path / "spec.yaml"),
                          "--design", str(req), "--trace", TRACE, "--json")
    assert code == 0, err
    folder, spec, original = json.loads(out)["designs"]
    assert folder["source"] == str(tmp_path / "out" / "cluster-spec.yaml")
    for row in (folder, spec):
        assert row["gpus"] == original["gpus"] == 32
        assert row["capex_usd"] == original["capex_usd"]
        assert row["jobs_completed"] == original["jobs_completed"]
        assert row["avg_jct_s"] == original["avg_jct_s"]


def test_whatif_refuses_a_spec_of_two_server_kinds(app: typer.Typer, tmp_path: Path) -> None:
    pool = ("- name: {n}\n  count: 2\n  cpuMilli: 128000\n  memoryMiB: 1048576\n"
            "  gpu: {{vendor: nvidia, model: {m}, count: 8, memoryMiB: {mem}}}\n")
    path = tmp_path / "mixed.yaml"
    path.write_text("apiVersion: gpucluster.io/v1alpha1\nkind: ClusterSpec\nname: mixed\nnodePools:\n"
                    + pool.format(n="a", m="H100-SXM5-80GB", mem=81559)
                    + pool.format(n="b", m="L40S", mem=46068), encoding="utf-8")
    code, out, err = _run(app, "--design", str(path), "--trace", TRACE)
    assert code == 2 and out == ""
    assert f"{path}: nodePools: GPU servers of 2 kinds" in err
    (tmp_path / "empty").mkdir()
    code, _, err = _run(app, "--design", str(tmp_path / "empty"), "--trace", TRACE)
    assert code == 2 and "without cluster-spec.yaml" in err
