"""Every machine format the offline commands write (``--json``, ``--raw``, YAML to stdout), written by a real
process on a 40-column terminal and parsed back: nothing wrapped, folded, coloured or cut. (The client verbs'
``-o json|yaml`` are checked the same way against a real ``gpucluster up`` in ``tests/cli/test_verbs.py``.)"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.spec import default_spec_text
from tests.cli.tty import run_tty

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT / "src" / "gpucluster" / "data" / "philly-500.yaml"
NARROW = 40

PODS = """
apiVersion: v1
kind: Pod
metadata: {name: whole-two, labels: {gpucluster.io/job: whole-two}}
spec:
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: 2}}
---
apiVersion: v1
kind: Pod
metadata: {name: a-rather-long-pod-name-that-is-wider-than-forty-columns}
spec:
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: 1, nvidia.com/gpucores: 30, nvidia.com/gpumem: 10000}}
---
apiVersion: v1
kind: Pod
metadata: {name: never}
spec:
  containers:
  - name: main
    resources: {limits: {nvidia.com/gpu: 64}}
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("formats")
    out = {"pods": d / "pods.yaml", "small": d / "small.yaml", "large": d / "large.yaml",
           "nodes": d / "openb_node_list_gpu_node.csv", "openb": d / "openb_pod_list_tiny.csv",
           "metrics": d / "metrics.csv"}
    out["pods"].write_text(PODS)
    out["small"].write_text("name: small\ngpu: H100\nservers: 4\n")
    out["large"].write_text("name: large\ngpu: H100\nservers: 8\n")
    out["nodes"].write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                            + "".join(f"node-{i},64000,262144,8,V100M32\n" for i in range(6)))
    out["openb"].write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                            + "".join(f"pod-{i},4000,8192,1,{500 if i % 2 else 1000}\n" for i in range(40)))
    out["metrics"].write_text("job,gpu_util,dram_active,tensor_active\nj1,40,0.9,0.05\nj1,42,0.8,0.05\n")
    return out


def _json(text: str) -> Any:
    return json.loads(text)


def _yaml(text: str) -> Any:
    return yaml.safe_load(text)


def _yaml_docs(text: str) -> Any:
    return [d for d in yaml.safe_load_all(text) if d is not None]


Case = tuple[str, Callable[[dict[str, Path]], list[str]], Callable[[str], Any], Callable[[Any], bool], int]
CASES: list[Case] = [
    ("spec show --raw", lambda f: ["spec", "show", "--raw"], _yaml,
     lambda d: d == yaml.safe_load(default_spec_text()), 0),
    ("spec show --json", lambda f: ["spec", "show", "--json"], _json, lambda d: d["gpus"] == 1920, 0),
    ("spec validate --json", lambda f: ["spec", "validate", str(PHILLY), "--json"], _json,
     lambda d: d["valid"] is True, 0),
    ("schedule --json", lambda f: ["schedule", "--pods", str(f["pods"]), "--json"], _json,
     lambda d: d["unplaced"] == 1 and d["placements"][0]["devices"][0][0]["whole"] is True
     and d["placements"][1]["pod"].endswith("wider-than-forty-columns"), 3),
    ("demo --json", lambda f: ["demo", "--pods", "200", "--policy", "binpack", "--json"], _json,
     lambda d: d["results"][0]["pods"] == 200, 0),
    ("design --json", lambda f: ["design", "--gpu", "H100", "--servers", "16", "--json"], _json,
     lambda d: d["gpus"] == 128, 0),
    ("simulate --json", lambda f: ["simulate", "--cluster", str(PHILLY), "--trace", "synthetic:400", "--json"],
     _json, lambda d: d["jobs"] == 400, 0),
    ("whatif --json", lambda f: ["whatif", "--design", str(f["small"]), "--design", str(f["large"]), "--trace",
                                 "synthetic:40", "--json"], _json, lambda d: len(d["designs"]) == 2, 0),
    ("experiment fgd --json", lambda f: ["experiment", "fgd", "--nodes", str(f["nodes"]), "--pods", str(f["openb"]),
                                         "--seeds", "42", "--json"], _json, lambda d: d["policy"] == "fgd", 0),
    ("monitor rules", lambda f: ["monitor", "rules"], _yaml,
     lambda d: any(r["alert"] == "GpuXidCritical" for g in d["groups"] for r in g["rules"]), 0),
    ("monitor rules --json", lambda f: ["monitor", "rules", "--json"], _json,
     lambda d: any(r["alert"] == "GpuXidCritical" for r in d["rules"]), 0),
    ("monitor fault --json", lambda f: ["monitor", "fault", "--pods", str(f["pods"]), "--json"], _json,
     lambda d: d["lost"] == [], 0),
    ("analyze job --json", lambda f: ["analyze", "job", "j1", "--metrics", str(f["metrics"]), "--json"], _json,
     lambda d: d["verdict"] == "memory-bound", 0),
    ("k8s manifests", lambda f: ["k8s", "manifests", "--mode", "scheduler"], _yaml_docs,
     lambda d: any(doc.get("kind") == "Deployment" for doc in d), 0),
    ("deploy preflight --json", lambda f: ["deploy", "preflight", "--json"], _json, lambda d: "checks" in d, None),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_machine_format_at_40_columns_parses_back(case: Case, files: dict[str, Path]) -> None:
    _, args, parse, check, code = case
    r = run_tty(*args(files), columns=NARROW)
    if code is not None:
        assert r.code == code, r.stderr
    assert "\x1b[" not in r.stdout, "colour codes in a machine format"
    assert "…" not in r.stdout, "a truncated cell in a machine format"
    data = parse(r.stdout)
    assert check(data), r.stdout[:2000]


def test_spec_show_raw_saved_at_40_columns_validates(tmp_path: Path) -> None:
    """The defect of issue 20: `spec show --raw > f.yaml` at a narrow terminal, then `spec validate f.yaml`."""
    r = run_tty("spec", "show", "--raw", columns=NARROW)
    saved = tmp_path / "f.yaml"
    saved.write_text(r.stdout)
    assert r.stdout == default_spec_text() if default_spec_text().endswith("\n") else default_spec_text() + "\n"
    check = run_tty("spec", "validate", str(saved), "--json", columns=NARROW)
    assert check.code == 0 and json.loads(check.stdout)["nodes"] == 240


PROGRESS = [
    ("simulate", ["simulate", "--trace", "synthetic:300:philly:0.1"], " jobs"),
    ("demo", ["demo", "--pod-count", "300", "--placement-policy", "binpack"], "binpack"),
]


@pytest.mark.parametrize(("args", "bar"), [(a, b) for _, a, b in PROGRESS], ids=[c[0] for c in PROGRESS])
def test_progress_bars_go_to_stderr(args: list[str], bar: str) -> None:
    """simulate and demo drew their progress bar on stdout: a terminal showed it, but ``> out.txt`` lost it (and a
    ``--json`` run had none at all); a bar is stderr's, drawn there whatever stdout is."""
    to_terminal = run_tty(*args, columns=100)
    assert to_terminal.code == 0, to_terminal.stderr
    assert "\x1b[?25l" not in to_terminal.stdout, "a live progress display drawn on stdout"
    for extra in ([], ["--json"]):
        redirected = run_tty(*args, *extra, columns=100, on_tty="stderr")
        assert redirected.code == 0, redirected.stderr
        assert "\x1b[?25l" in redirected.stderr and bar in redirected.stderr, redirected.stderr[:500]
        assert "\x1b[" not in redirected.stdout
        if extra:
            assert json.loads(redirected.stdout)
