"""Issue 32, item 2 in the CLI: ``gpucluster top nodes|jobs`` (utilisation beside allocation, allocated-but-idle
first, --json, 80 columns) and the utilisation columns of ``get nodes -o wide``, against a real ``gpucluster up``
with the demo's background load (on main there was no ``top`` and no utilisation column)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from gpucluster.cli.top_cmd import IDLE_UTIL_PCT, SortBy, _sort, job_rows, node_rows
from tests.service.server import ADMIN, Server, start_server, submit_job, wait_for

runner = CliRunner()


def _node(name: str, core: list[int], util: list[float | None]) -> dict[str, Any]:
    return {"name": name, "gpus": len(core), "dev_core_used": core, "dev_util": util,
            "dev_fb_pct": [50.0] * len(core), "dev_temp": [40.0] * len(core), "schedulable": True}


def test_node_rows_count_allocated_idle_gpus_and_sort_them_first() -> None:
    nodes = [_node("a", [1000, 1000], [90.0, 95.0]), _node("b", [1000, 0], [1.0, 0.0]),
             _node("c", [1000, 1000], [0.5, 2.0]), _node("d", [0, 0], [None, None])]
    rows = node_rows(nodes)
    by = {r["name"]: r for r in rows}
    assert by["b"]["allocated_idle_gpus"] == 1  # the free GPU at 0 % is not "allocated but idle"
    assert by["c"]["allocated_idle_gpus"] == 2 and by["a"]["allocated_idle_gpus"] == 0
    assert by["d"]["util_pct"] is None and by["a"]["alloc_pct"] == 100.0
    assert [r["name"] for r in _sort(rows, SortBy.IDLE, "allocated_idle_gpus")] == ["c", "b", "a", "d"]
    assert [r["name"] for r in _sort(rows, SortBy.UTIL, "allocated_idle_gpus")] == ["a", "c", "b", "d"]


def test_job_rows_take_the_gpus_the_job_holds() -> None:
    nodes = [_node("a", [1000, 1000], [90.0, 1.0])]
    jobs = [{"id": "j1", "name": "x", "tenant": "t", "gpus": 2.0,
             "placements": [{"node": "a", "devices": [{"index": 0}, {"index": 1}]}]}]
    (row,) = job_rows(jobs, nodes)
    assert row["util_pct"] == 45.5 and row["idle_devices"] == 1 and row["devices"] == 2 and row["nodes"] == ["a"]
    assert IDLE_UTIL_PCT == 5.0


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("top") / "data"
    srv = start_server(data, "--speed", "20", "--background", "0.6", "--faults-per-hour", "0")
    yield srv
    srv.stop()


def cli(server: Server, *args: str, columns: int = 80) -> tuple[int, str, str]:
    r = runner.invoke(app, [*args, "--server", server.url, "--token", ADMIN], env={"COLUMNS": str(columns)})
    return r.exit_code, r.stdout, r.stderr


def _scraped(server: Server) -> None:
    def ready() -> bool:
        with server.client() as c:
            o = c.get("/api/v1/overview").json()
        return bool(o.get("gpus_reporting") == o["devices"] and o.get("allocated_idle_gpus"))

    wait_for(ready, "every GPU scraped", timeout=60)


@pytest.mark.integration
def test_top_nodes_puts_allocated_but_idle_first_in_80_columns(server: Server) -> None:
    _scraped(server)
    code, out, err = cli(server, "top", "nodes")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["NAME", "GPUS", "ALLOC", "UTIL", "FB-USED", "TEMP", "IDLE-GPUS"]
    assert len(lines) == 241 and all(len(x) <= 80 for x in lines) and "…" not in out  # nothing cut
    idle = [int(x.split()[-1]) for x in lines[1:]]
    assert idle == sorted(idle, reverse=True) and idle[0] > 0
    code, out, _ = cli(server, "top", "nodes", "--json")
    rows = json.loads(out)
    assert len(rows) == 240 and rows[0]["allocated_idle_gpus"] == idle[0]
    with server.client() as c:
        total = c.get("/api/v1/overview").json()["allocated_idle_gpus"]
    assert abs(sum(r["allocated_idle_gpus"] for r in rows) - total) <= max(16, total // 5)  # read a moment apart
    code, out, _ = cli(server, "top", "nodes", "--sort-by", "util", "--json", "--limit", "10")
    utils = [r["util_pct"] for r in json.loads(out)]
    assert len(utils) == 10 and utils == sorted(utils, reverse=True)


@pytest.mark.integration
def test_top_jobs_and_the_wide_node_list(server: Server) -> None:
    _scraped(server)
    job = submit_job(server, {"name": "top-mine", "resources": {"nvidia.com/gpu": 1}, "duration_s": 3000})
    wait_for(lambda: cli(server, "top", "jobs", "--json")[1].count(job["id"]) == 1, "the job in top", timeout=30)
    code, out, err = cli(server, "top", "jobs", "-A")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["ID", "NAME", "TENANT", "GPUS", "UTIL", "IDLE", "NODES"]
    assert all(len(x) <= 80 for x in lines), [x for x in lines if len(x) > 80]
    ids = [x.split()[0] for x in lines[1:]]
    assert job["id"] in ids and all("…" not in i for i in ids)  # the id you need for describe/cancel is whole
    rows = json.loads(cli(server, "top", "jobs", "-A", "--json")[1])
    idle = [r["idle_devices"] for r in rows]
    assert idle == sorted(idle, reverse=True) and idle[0] > 0
    assert {r["tenant"] for r in rows} >= {"synthetic"}
    code, out, _ = cli(server, "get", "nodes", "-o", "wide")
    head = out.splitlines()[0].split()
    assert head[:9] == ["NAME", "STATUS", "MODEL", "GPUS", "ALLOC", "MEM", "PODS", "UTIL", "FB-USED"]
    utils = [x.split()[7] for x in out.splitlines()[1:]]
    # "-" only for a node whose every GPU was allocated since its last scrape (no reading of that work yet)
    assert all(u.endswith("%") or u == "-" for u in utils) and sum(u.endswith("%") for u in utils) > 200, utils
    code, _, err = cli(server, "top", "pods")
    assert code == 2 and "nodes" in err
