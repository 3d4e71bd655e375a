"""Executors: local ones give what running in order gives; without ``--ray-address`` nothing imports Ray."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpucluster.simulator.experiments.executor import (
    ExecutorError,
    ProcessExecutor,
    RayExecutor,
    SerialExecutor,
    executor_for,
)


def _power(x: int, k: int, offset: int) -> tuple[int, int]:
    return x, x**k + offset


@pytest.mark.parametrize("executor", [SerialExecutor(), ProcessExecutor(2)], ids=["serial", "processes"])
def test_local_executors_map_every_item_with_the_shared_arguments(executor: SerialExecutor | ProcessExecutor) -> None:
    try:
        got = sorted(executor.map_unordered(_power, list(range(20)), (3, 7)))
        again = sorted(executor.map_unordered(_power, [5, 6], (2, 0)))  # a second map gets its own arguments
    finally:
        executor.close()
    assert got == [(x, x**3 + 7) for x in range(20)]
    assert again == [(5, 25), (6, 36)]


def test_executor_choice() -> None:
    assert isinstance(executor_for(jobs=1), SerialExecutor)
    assert isinstance(executor_for(jobs=4, tasks=1), SerialExecutor)
    pool = executor_for(jobs=2, tasks=10)
    assert isinstance(pool, ProcessExecutor) and pool.description == "2 local processes"
    # never more processes than tasks (--jobs 10**20 forked without end)
    assert executor_for(jobs=10**20, tasks=3).description == "3 local processes"


@pytest.mark.parametrize("address", ["127.0.0.1:notaport", "127.0.0.1:1"])
def test_bad_ray_address_fails_fast_with_why(address: str) -> None:
    with pytest.raises(ExecutorError, match=re.escape(address)):
        RayExecutor(address)


def test_nothing_imports_ray_without_the_flag(tmp_path: Path) -> None:
    (tmp_path / "openb_node_list_gpu_node.csv").write_text("sn,cpu_milli,memory_mib,gpu,model\n"
                                                         "n0,32000,131072,2,G2\nn1,32000,131072,4,G2\n")
    (tmp_path / "openb_pod_list_tiny.csv").write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"
                                                      "p0,2000,4096,1,500\np1,4000,4096,0,0\np2,1000,4096,1,1000\n")
    design = tmp_path / "d.yaml"
    design.write_text("name: d\ngpu: H100\nservers: 2\n")
    script = textwrap.dedent(f"""
        import sys
        from typer.testing import CliRunner
        from gpucluster.cli.main import app
        r = CliRunner().invoke(app, ["experiment", "fgd-sweep", "--trace-dir", {str(tmp_path)!r}, "--workloads",
                                     "tiny", "--policies", "fgd", "--seeds", "1-2", "--out", {str(tmp_path / "o")!r},
                                     "--jobs", "2", "--json"])
        assert r.exit_code == 0, r.output
        r = CliRunner().invoke(app, ["whatif", "--design", {str(design)!r}, "--design", {str(design)!r},
                                     "--trace", "synthetic:10", "--json"])
        assert r.exit_code == 0, r.output
        print(sorted(m for m in sys.modules if m == "ray" or m.startswith("ray.")))
    """)
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
