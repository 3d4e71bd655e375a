"""The table renderer (never drops a column, fits the width when it can), the Slurm host list, kubectl ages,
sinfo's grouping and ``up --remediate`` parsing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.cli.get_cmd import age, hostlist, sinfo_rows, slurm_state
from gpucluster.cli.output import MIN_COLUMN, SEPARATOR, fit_widths, render_table, yaml_text
from gpucluster.cli.service_cmd import parse_remediate
from gpucluster.monitoring import Action

cell = st.text(alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 8).flatmap(lambda n: st.tuples(
    st.lists(cell, min_size=n, max_size=n), st.lists(st.lists(cell, min_size=n, max_size=n), max_size=6),
    st.integers(10, 200))))
def test_tables_keep_every_column_and_fit_when_they_can(data: tuple[list[str], list[list[str]], int]) -> None:
    headers, rows, width = data
    text = render_table(headers, rows, width)
    lines = text.splitlines()
    assert len(lines) == len(rows) + 1
    natural = [max(len(r[k]) for r in [headers, *rows]) for k in range(len(headers))]
    widths = fit_widths(natural, width)
    floors = sum(min(w, MIN_COLUMN) for w in natural) + len(SEPARATOR) * (len(natural) - 1)
    if floors <= width:
        assert all(len(line) <= width for line in lines)
    # every cell is there, whole or as a prefix ending in "…", at its column's offset
    for row, line in zip([headers, *rows], lines, strict=True):
        pos = 0
        for k, (value, w) in enumerate(zip(row, widths, strict=True)):
            shown = line[pos:pos + w].rstrip() if k < len(row) - 1 else line[pos:]
            assert shown == value or (shown.endswith("…") and value.startswith(shown[:-1])), (value, shown)
            pos += w + len(SEPARATOR)


def test_without_a_width_nothing_is_cut_and_the_last_column_gives_way_first() -> None:
    rows = [["j-0123456789ab", "train", "running", "running on train-0001, train-0002, train-0003"]]
    whole = render_table(["ID", "NAME", "STATUS", "MESSAGE"], rows)
    assert "…" not in whole and "train-0003" in whole
    narrow = render_table(["ID", "NAME", "STATUS", "MESSAGE"], rows, width=50)
    assert "j-0123456789ab" in narrow and "running on" in narrow and "…" in narrow  # the id stays whole
    wrapped = render_table(["ID", "WHY"], [["p", "0/240 nodes are available: 240 InsufficientGPUCount."]], width=30,
                           wrap_last=True)
    assert " ".join(wrapped.split()).endswith("240 InsufficientGPUCount.") and "…" not in wrapped
    assert all(len(line) <= 30 for line in wrapped.splitlines())


def test_yaml_is_never_folded() -> None:
    long = "word " * 60
    assert yaml_text({"k": long}).count("\n") == 1


@given(st.sets(st.integers(0, 300), min_size=1, max_size=40))
def test_hostlist_names_every_node_once(nums: set[int]) -> None:
    names = [f"train-{n:04d}" for n in nums]
    text = hostlist(names)
    got: set[str] = set()
    for prefix, body in re.findall(r"(train-)\[?([0-9,\-]+)\]?", text):
        for part in body.split(","):
            lo, _, hi = part.partition("-")
            got |= {f"{prefix}{k:04d}" for k in range(int(lo), int(hi or lo) + 1)}
    assert got == set(names)


def test_hostlist_shape() -> None:
    assert hostlist(["a-0001", "a-0002", "a-0003", "a-0007", "b-1", "x"]) == "a-[0001-0003,0007],b-1,x"


@pytest.mark.parametrize(("s", "text"), [(5, "5s"), (119, "119s"), (200, "3m20s"), (600, "10m"), (7200, "120m"),
                                         (4 * 3600 + 60, "4h1m"), (30 * 3600, "30h"), (5 * 86400, "5d")])
def test_age_is_kubectl_shaped(s: float, text: str) -> None:
    assert age(s) == text


def _node(name: str, used: list[int], schedulable: bool = True, healthy: bool = True) -> dict[str, object]:
    return {"name": name, "pool": "train", "model": "H100", "gpus": len(used), "pods": sum(1 for u in used if u),
            "schedulable": schedulable, "dev_core_used": used, "dev_mem_pct": [u / 10 for u in used],
            "dev_healthy": [healthy, *([True] * (len(used) - 1))]}


def test_sinfo_groups_by_state_and_counts_gpus() -> None:
    nodes = [_node("n-01", [0, 0]), _node("n-02", [1000, 1000]), _node("n-03", [500, 0]),
             _node("n-04", [0, 0], schedulable=False), _node("n-05", [0, 0], healthy=False)]
    assert [slurm_state(n) for n in nodes] == ["idle", "alloc", "mix", "drain", "idle"]
    rows = {r["state"]: r for r in sinfo_rows(nodes)}
    assert rows["idle"]["nodelist"] == "n-[01,05]" and rows["idle"]["gpus"] == {"allocated": 0, "idle": 3,
                                                                                "other": 1, "total": 4}
    assert rows["alloc"]["gpus"]["allocated"] == 2 and rows["drain"]["gpus"]["other"] == 2
    assert rows["mix"]["gpu_alloc"] == 0.25


def test_remediate_flag() -> None:
    assert parse_remediate("").modes() == {"cordon": "on", "drain": "dry-run", "defragment": "dry-run",
                                           "release": "dry-run"}
    assert parse_remediate("drain,migrate").modes()["defragment"] == "on"
    assert set(parse_remediate("all").modes().values()) == {"on"}
    assert set(parse_remediate("none").modes().values()) == {"dry-run"}
    assert Action.DRAIN not in parse_remediate("drain").dry_run
    with pytest.raises(ValueError, match="unknown action 'evict'"):
        parse_remediate("drain,evict")


def test_shell_completion_is_on() -> None:
    import os
    import subprocess
    import sys

    base = [sys.executable, "-c", "from gpucluster.cli.main import app; app(prog_name='gpucluster')"]
    shown = subprocess.run([*base, "--show-completion", "bash"], capture_output=True, text=True, check=False,
                           env={**os.environ, "SHELL": "/bin/bash"})
    assert shown.returncode == 0 and "_gpucluster_completion" in shown.stdout
    env = {**os.environ, "_GPUCLUSTER_COMPLETE": "complete_bash", "COMP_WORDS": "gpucluster get no", "COMP_CWORD": "2"}
    got = subprocess.run(base, capture_output=True, text=True, check=False, env=env)
    assert got.stdout.split() == ["nodes"]
    env["COMP_WORDS"], env["COMP_CWORD"] = "gpucluster describe ", "2"
    got = subprocess.run(base, capture_output=True, text=True, check=False, env=env)
    assert got.stdout.split() == ["job", "node"]


def test_port_from_the_environment_and_make_demo_port(tmp_path: object) -> None:
    import os
    import shutil
    import socket
    import subprocess
    import sys
    from pathlib import Path

    with socket.socket() as s:  # a busy port: `up` must say it is the one it was given
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        env = {**os.environ, "GPUCLUSTER_PORT": str(port)}
        r = subprocess.run([sys.executable, "-m", "gpucluster.cli.main", "up", "--data-dir", str(tmp_path)],
                           capture_output=True, text=True, check=False, env=env, timeout=120)
    assert r.returncode == 2 and f"127.0.0.1:{port} is already in use" in r.stderr
    if shutil.which("make"):
        root = Path(__file__).resolve().parents[2]
        clean = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
        dry = subprocess.run(["make", "-n", "--no-print-directory", "demo", "PORT=8091"], cwd=root,
                             capture_output=True, text=True, check=False, env=clean)
        assert any(line.endswith("gpucluster up --speed 10 --port 8091") for line in dry.stdout.splitlines())
