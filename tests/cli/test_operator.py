"""Issue 32 (the operator's console, CLI and API part) against a real ``gpucluster up`` on 127.0.0.1 (default
remediation: disruptive actions planned only; no background load, no random faults): the node verbs and
remediation approve/dismiss; what a user sees at 80 columns."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gpucluster.cli.main import app
from tests.service.server import ADMIN, Server, start_server, submit_job, wait_for, wait_running

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("operator") / "data"
    srv = start_server(data, "--speed", "20", "--background", "0", "--faults-per-hour", "0", tenants=None)
    yield srv
    srv.stop()


def cli(server: Server, *args: str, token: str = ADMIN, columns: int = 80) -> tuple[int, str, str]:
    r = runner.invoke(app, [*args, "--server", server.url, "--token", token], env={"COLUMNS": str(columns)})
    return r.exit_code, r.stdout, r.stderr


def submit(server: Server, name: str, gpus: int = 1, replicas: int = 1, duration: float | None = None,
           **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "replicas": replicas, "resources": {"nvidia.com/gpu": gpus}, **extra}
    if duration is not None:
        body["duration_s"] = duration
    return submit_job(server, body)


def test_cordon_uncordon_drain_a_node(server: Server) -> None:
    job = wait_running(server, submit(server, "op-drain", gpus=8)["id"])
    node = job["placements"][0]["node"]
    code, out, err = cli(server, "cordon", node)
    assert code == 0, err
    assert f"node {node} cordoned" in out
    code, _, err = cli(server, "cordon", node)
    assert code == 2 and "already cordoned" in err and "409" in err
    code, out, _ = cli(server, "uncordon", node, "--json")
    assert code == 0 and json.loads(out)["schedulable"] is True
    code, out, err = cli(server, "drain", node, "--json")
    assert code == 0, err
    body = json.loads(out)
    assert body["action"] == "drain" and [j["id"] for j in body["jobs"]] == [job["id"]]
    code, _, err = cli(server, "drain", "no-such-node")
    assert code == 2 and "no node 'no-such-node'" in err and "404" in err

    def moved() -> bool:
        with server.client() as c:
            j = c.get(f"/api/v1/jobs/{job['id']}").json()
        return j["status"] == "running" and node not in {p["node"] for p in j["placements"]}

    wait_for(moved, "the drained job running elsewhere")
    code, out, _ = cli(server, "uncordon", node)
    assert code == 0 and "back in service" in out
    with server.client() as c:
        actions = [e["action"] for e in c.get("/api/v1/audit").json()["entries"] if e["target"] == node]
        c.delete(f"/api/v1/jobs/{job['id']}")
    assert {"node.cordon", "node.uncordon", "node.drain"} <= set(actions)


def test_approve_and_dismiss_a_planned_remediation(server: Server) -> None:
    jobs, planned = [], []
    with server.client() as c:
        for k in range(2):  # the first fault cordons its node: the second job lands on another
            job = wait_running(server, submit(server, f"op-rem-{k}")["id"])
            jobs.append(job)
            place = job["placements"][0]
            node, gpu = place["node"], place["devices"][0]["index"]
            assert c.post(f"/api/v1/nodes/{node}/devices/{gpu}/fault").status_code == 200
            plan = c.get("/api/v1/remediations").json()["planned"]
            planned.append(next(p for p in plan if p["target"] == f"{node}/gpu{gpu}" and p["action"] == "drain"))
    code, out, _ = cli(server, "get", "remediations", "--planned", columns=200)
    assert code == 0 and all(p["id"] in out for p in planned)  # the ID column says what to approve
    first, second = planned
    code, out, err = cli(server, "remediation", "approve", first["id"])
    assert code == 0, err
    assert f"remediation {first['id']} (drain {first['target']}) approved" in out and "approved by admin" in out
    code, out, err = cli(server, "remediation", "dismiss", second["id"], "--json")
    assert code == 0, err
    assert json.loads(out)["outcome"] == "dismissed"
    code, _, err = cli(server, "remediation", "approve", second["id"])
    assert code == 2 and "already dismissed" in err
    code, _, err = cli(server, "remediation", "approve", "rem-does-not-exist")
    assert code == 2 and "no planned remediation" in err
    node = first["target"].split("/")[0]

    def drained() -> bool:
        with server.client() as c:
            j = c.get(f"/api/v1/jobs/{jobs[0]['id']}").json()
        return node not in {p["node"] for p in j["placements"]}

    wait_for(drained, "the approved drain's job off the node")
    with server.client() as c:
        assert c.get(f"/api/v1/jobs/{jobs[1]['id']}").json()["status"] == "running"  # dismissed: left alone
        for job in jobs:
            c.delete(f"/api/v1/jobs/{job['id']}")


def test_a_resource_no_node_has_is_refused_at_submission(server: Server, tmp_path: Path) -> None:
    """Item 1: ``nvidia.com/gpumemory`` beside ``nvidia.com/gpu`` used to be accepted and wait forever."""
    body = {"name": "op-typo", "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpumemory": 8000}}
    with server.client() as c:
        r = c.post("/api/v1/jobs", json=body)
    assert r.status_code == 422 and r.json()["where"] == "resources.nvidia.com/gpumemory"
    assert "did you mean nvidia.com/gpumem" in r.json()["error"]
    job = tmp_path / "typo.yaml"
    job.write_text("name: op-typo\nresources: {nvidia.com/gpu: 1, nvidia.com/gpumemory: 8000}\n")
    code, _, err = cli(server, "submit", str(job))
    assert code == 2 and "did you mean nvidia.com/gpumem" in err and "resources.nvidia.com/gpumemory" in err


def _tenant(server: Server, name: str, quota: float) -> str:
    with server.client() as c:
        r = c.post("/api/v1/tenants", json={"name": name, "quota_gpus": quota})
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def _row(out: str, job_id: str) -> str:
    return next(line for line in out.splitlines() if job_id in line)


def test_queue_eta_never_says_now_for_a_blocked_job(server: Server) -> None:
    """Item 4: a quota-blocked job and one that can never start used to show EST-START "now"."""
    tok = _tenant(server, "op-quota", 8)
    first = wait_running(server, submit_job(server, {"name": "op-q-run", "resources": {"nvidia.com/gpu": 8}},
                                            tok)["id"])
    held = submit_job(server, {"name": "op-q-held", "resources": {"nvidia.com/gpu": 4}}, tok)
    never = submit_job(server, {"name": "op-q-never", "resources": {"nvidia.com/gpu": 8}}, tok)

    def queued() -> dict[str, Any] | None:
        with server.client() as c:
            q = c.get("/api/v1/queue").json()
        rows = {r["id"]: r for r in q["jobs"]}
        return rows if held["id"] in rows and never["id"] in rows else None

    rows = wait_for(queued, "both jobs queued")
    assert rows[held["id"]]["blocked"] == "quota" and rows[held["id"]]["est_start_t"] is None
    assert rows[held["id"]]["why"].startswith("blocked by quota")
    _tenant(server, "op-quota", 4)  # lowered below what op-q-never needs: it can never start now
    with server.client() as c:
        rows = {r["id"]: r for r in c.get("/api/v1/queue").json()["jobs"]}
    assert rows[never["id"]]["blocked"] == "never" and rows[never["id"]]["est_start_t"] is None
    assert rows[never["id"]]["why"].startswith("never: quota")
    code, out, err = cli(server, "get", "queue")
    assert code == 0, err
    assert "blocked by quota" in _row(out, held["id"]) and " now " not in _row(out, held["id"]) + " "
    assert "never" in _row(out, never["id"]) and " now " not in _row(out, never["id"]) + " "
    with server.client() as c:
        for job in (first, held, never):
            c.delete(f"/api/v1/jobs/{job['id']}")


def test_tenants_are_explicit_and_over_quota_is_flagged(server: Server, tmp_path: Path) -> None:
    """Item 10: an unknown tenant used to be created, unlimited, by its first job; a tenant holding 8 GPUs
    under a quota of 4 showed as "2 % of share" with no warning; there was no tenants verb."""
    job = tmp_path / "job.yaml"
    job.write_text("name: op-nobody\ntenant: op-nobody\nresources: {nvidia.com/gpu: 1}\n")
    code, _, err = cli(server, "submit", str(job))
    assert code == 2 and "no tenant 'op-nobody'" in err and "gpucluster tenants create op-nobody" in err
    code, out, err = cli(server, "tenants", "create", "op-team", "--quota-gpus", "8")
    assert code == 0, err
    assert "tenant op-team (quota 8 GPUs" in out
    tok = out.strip().splitlines()[-1]
    running = wait_running(server, submit_job(server, {"name": "op-team-8", "resources": {"nvidia.com/gpu": 8}},
                                              tok)["id"])
    code, out, err = cli(server, "tenants", "set-quota", "op-team", "4")
    assert code == 0, err
    assert "op-team: 8/4 GPUs, over quota" in out
    code, out, _ = cli(server, "get", "tenants")
    row = _row(out, "op-team")
    assert "8/4 GPUs, over quota" in row and all(len(line) <= 80 for line in out.splitlines())
    code, out, _ = cli(server, "tenants", "list", "--json")
    mine = next(t for t in json.loads(out)["tenants"] if t["name"] == "op-team")
    assert mine["over_quota"] is True and mine["quota_gpus"] == 4
    code, _, err = cli(server, "tenants", "set-quota", "op-missing", "4")
    assert code == 2 and "no tenant 'op-missing'" in err
    with server.client() as c:
        c.delete(f"/api/v1/jobs/{running['id']}")
