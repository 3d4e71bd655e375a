"""The kubectl-shaped verbs against a real ``gpucluster up`` on 127.0.0.1 (default remediation: disruptive
actions planned only; JSON logs): get (every resource, every format, --no-headers, -w), describe, cancel,
events (--follow), sinfo, contexts; machine formats on a 40-column terminal parsed back; the planned drain; silences;
the structured log lines."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpucluster.cli.main import app
from tests.cli.tty import run_tty
from tests.service.server import ADMIN, Server, start_server, submit_job, wait_for, wait_running

pytestmark = pytest.mark.integration
runner = CliRunner()
RESOURCES = ("jobs", "nodes", "tenants", "alerts", "remediations", "queue", "silences")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("verbs") / "data"
    srv = start_server(data, "--speed", "20", "--background", "0.5", "--faults-per-hour", "0",
                       "--log-format", "json")
    yield srv
    srv.stop()


def cli(server: Server, *args: str, token: str = ADMIN, columns: int = 80) -> tuple[int, str, str]:
    r = runner.invoke(app, [*args, "--server", server.url, "--token", token], env={"COLUMNS": str(columns)})
    return r.exit_code, r.stdout, r.stderr


def tty(server: Server, *args: str, token: str = ADMIN) -> Any:
    r = run_tty(*args, "--server", server.url, "--token", token, columns=40)
    assert r.code == 0, r.stderr
    assert "\x1b[" not in r.stdout and "…" not in r.stdout
    return r.stdout


def submit(server: Server, name: str, gpus: int = 1, replicas: int = 1, duration: float | None = 400.0,
           token: str = ADMIN) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "replicas": replicas, "resources": {"nvidia.com/gpu": gpus}}
    if duration is not None:
        body["duration_s"] = duration
    return submit_job(server, body, token)


def test_get_every_resource_in_every_format(server: Server) -> None:
    submit(server, "verbs-list", gpus=2)
    for res in RESOURCES:
        code, out, err = cli(server, "get", res)
        assert code == 0, err
        lines = out.splitlines()
        assert lines and lines[0] == lines[0].upper(), out  # the header line
        assert all(len(line) <= 80 for line in lines), out
        code, wide, _ = cli(server, "get", res, "-o", "wide")
        assert code == 0 and len(wide.splitlines()[0].split()) > len(lines[0].split())
        code, bare, _ = cli(server, "get", res, "--no-headers")
        assert code == 0 and (not bare or bare.splitlines()[0] != lines[0])
        as_json = json.loads(tty(server, "get", res, "-o", "json"))
        as_yaml = yaml.safe_load(tty(server, "get", res, "-o", "yaml"))
        assert isinstance(as_json, dict) and set(as_json) == set(as_yaml)
    code, out, _ = cli(server, "get", "jobs", "verbs-list")
    assert code == 0 and "verbs-list" in out and len(out.splitlines()) == 2
    assert json.loads(tty(server, "get", "job", "verbs-list", "-o", "json"))["name"] == "verbs-list"
    code, _, err = cli(server, "get", "pods")
    assert code == 2 and "expected one of jobs, nodes" in err


def test_old_list_commands_and_submit_keep_their_json(server: Server, tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: verbs-submit\nresources: {nvidia.com/gpu: 1, nvidia.com/gpucores: 50}\nduration_s: 30\n")
    assert json.loads(tty(server, "submit", str(job), "--json"))["name"] == "verbs-submit"
    assert json.loads(tty(server, "jobs", "--json"))["total"] >= 1
    assert json.loads(tty(server, "nodes", "--json"))["total"] == 240
    code, out, _ = cli(server, "nodes")
    assert code == 0 and out.splitlines()[1].split()[:2] == ["NAME", "STATUS"]  # STATUS is never dropped


def test_describe_a_job_by_name_and_its_node(server: Server) -> None:
    job = wait_running(server, submit(server, "verbs-describe", gpus=2)["id"])
    code, out, err = cli(server, "describe", "job", "verbs-describe")
    assert code == 0, err
    for text in ("Name:", job["id"], "Placements:", "whole", "Events:", "running"):
        assert text in out
    node = job["placements"][0]["node"]
    code, out, err = cli(server, "describe", "node", node, columns=120)
    assert code == 0, err
    assert f"Name:          {node}" in out and "UTIL" in out and "TEMP" in out and "verbs-describe" in out
    gpus = [line.split() for line in out.split("GPUs")[1].split("Pods:")[0].splitlines()[2:] if line.strip()]
    assert len(gpus) == 8 and all(row[-1] == "-" for row in gpus)  # no XID anywhere yet
    detail = json.loads(tty(server, "describe", "node", node, "-o", "json"))
    assert detail["usage"]["available"] is True and len(detail["usage"]["devices"]) == 8
    mine = [d for d in detail["devices"] if any(p["job_name"] == "verbs-describe" for p in d["pods"])]
    assert mine and all(p["whole"] for d in mine for p in d["pods"] if p["job_name"] == "verbs-describe")
    assert yaml.safe_load(tty(server, "describe", "job", job["id"], "-o", "yaml"))["id"] == job["id"]
    code, _, err = cli(server, "describe", "job", "no-such-job")
    assert code == 1 and "no job with that id or name" in err
    # a missing node exits as a missing job does (kubectl's NotFound: 1); on main it exited 2 through the API's 404
    code, _, err = cli(server, "describe", "node", "no-such-node")
    assert code == 1 and "node 'no-such-node': not found" in err


def test_free_text_from_the_server_is_printed_as_it_is(server: Server) -> None:
    """A job's command and args are free text: ``[/x]`` and ``a[bold]b`` come back verbatim in describe and get
    (human and JSON), never as rich markup (no markup error, no dropped brackets)."""
    body: dict[str, Any] = {"name": "verbs-brackets", "resources": {"nvidia.com/gpu": 1}, "duration_s": 400.0,
                            "command": ["python", "[/x]"], "args": ["a[bold]b", "run[old]"]}
    job = submit_job(server, body)
    code, out, err = cli(server, "describe", "job", job["id"], columns=200)
    assert code == 0 and "Traceback" not in err, err
    assert "python [/x] a[bold]b run[old]" in out, out
    code, out, err = cli(server, "get", "jobs", "verbs-brackets", "-o", "wide", columns=200)
    assert code == 0 and "verbs-brackets" in out, err
    detail = json.loads(tty(server, "get", "job", "verbs-brackets", "-o", "json"))
    assert detail["command"] == ["python", "[/x]"] and detail["args"] == ["a[bold]b", "run[old]"]


def test_a_name_two_jobs_share_is_never_picked_silently(server: Server, tmp_path: Path) -> None:
    """A name is unique among a tenant's live jobs (`up --job-names unique`, the default): `submit` of a second
    live job of a name exits 2 naming the live one's id (on main it was accepted). Two tenants may each have
    one; then `cancel NAME` and `describe job NAME` (admin) refuse and name both ids (on main before ea24c49 they
    took the newest). A finished job's name may be used again."""
    first = submit_job(server, {"name": "verbs-twin", "tenant": "twin-a", "resources": {"nvidia.com/gpu": 1}})
    job = tmp_path / "twin.yaml"
    job.write_text("name: verbs-twin\ntenant: twin-a\nresources: {nvidia.com/gpu: 1}\n")
    code, out, err = cli(server, "submit", str(job), columns=80)
    assert code == 2 and out == "", out
    assert re.search(rf"name: tenant twin-a already has a (pending|running) job named 'verbs-twin': {first['id']};"
                     r".*\(HTTP 409\)", err), err
    second = submit_job(server, {"name": "verbs-twin", "tenant": "twin-b", "resources": {"nvidia.com/gpu": 1}})
    for verb in (("cancel",), ("describe", "job")):
        code, out, err = cli(server, *verb, "verbs-twin", columns=200)
        assert code == 2 and out == ""
        assert "2 jobs have that name" in err and first["id"] in err and second["id"] in err
    code, out, err = cli(server, "cancel", first["id"])
    assert code == 0 and f"job {first['id']} (verbs-twin) cancelled" in out, err
    # the cancelled job's name is free again in its tenant
    code, out, err = cli(server, "submit", str(job), "--json")
    assert code == 0, err
    third = json.loads(out)
    assert third["name"] == "verbs-twin" and third["id"] not in (first["id"], second["id"])
    # three jobs of the name now: describe refuses; cancel takes live ones only, and two are live
    code, out, err = cli(server, "describe", "job", "verbs-twin", columns=200)
    assert code == 2 and "3 jobs have that name" in err and first["id"] in err
    code, out, err = cli(server, "cancel", "verbs-twin", columns=200)
    assert code == 2 and "2 jobs have that name" in err and second["id"] in err and third["id"] in err, err
    assert first["id"] not in err  # a finished job is no candidate for cancel
    code, out, err = cli(server, "cancel", second["id"])
    assert code == 0, err
    code, out, err = cli(server, "cancel", "verbs-twin")  # the one live job of the name
    assert code == 0 and f"job {third['id']} (verbs-twin) cancelled" in out, err


def test_get_nodes_shows_the_cpu_and_memory_its_pods_requested(server: Server) -> None:
    """Issue 32: on main `get nodes -o wide` showed `0/224` CPU on nodes whose GPUs were all allocated (the
    background jobs asked for no CPU or memory). Each background task now asks 4 cores and 16 GiB per
    GPU-equivalent, as a trace's job does, and the columns say what they are: what the pods requested."""

    def full_rows() -> list[dict[str, str]] | None:
        code, out, err = cli(server, "get", "nodes", "-o", "wide", columns=80)
        assert code == 0, err
        lines = out.splitlines()
        head = lines[0].split()
        rows = [dict(zip(head, line.split(), strict=True)) for line in lines[1:]]
        return [r for r in rows if r["ALLOC"] == "100%"] or None

    full = wait_for(full_rows, "a node whose GPUs are all allocated", timeout=60)
    for row in full:
        cpu_used, cpu_cap = (float(x) for x in row["CPU-REQ"].split("/"))
        mem_used, mem_cap = (float(x) for x in row["MEM-REQ"].removesuffix("Gi").split("/"))
        assert 0 < cpu_used <= cpu_cap and 0 < mem_used <= mem_cap, row
    code, out, err = cli(server, "describe", "node", full[0]["NAME"], columns=80)
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("CPU:"))
    assert len(line) <= 80 and re.search(r"CPU: +[0-9.]+ of [0-9.]+ cores requested by its pods$", line), line
    assert line.split()[1] != "0", line


def test_cancel_by_name_and_the_queue(server: Server) -> None:
    big = submit(server, "verbs-queued", gpus=8, replicas=208, duration=None)  # all 208 H100 nodes: fits the empty cluster, not now

    def queued() -> dict[str, Any] | None:
        rows = json.loads(tty(server, "get", "queue", "-o", "json"))["jobs"]
        mine = [r for r in rows if r["id"] == big["id"]]
        return mine[0] if mine and mine[0]["why"].startswith(("unschedulable", "waiting for")) else None

    row = wait_for(queued, "the big job in the queue with a reason", timeout=60)
    # the engine says why: a pass that tried it ("0/N nodes are available") or did not (too few free GPUs)
    assert row["position"] >= 1 and ("nodes are available" in row["why"] or "needs 1664 GPU(s)" in row["why"])
    code, out, _ = cli(server, "get", "queue", columns=120)
    assert code == 0 and "verbs-queued" in out and row["why"][:20] in out
    code, out, err = cli(server, "cancel", "verbs-queued")
    assert code == 0 and f"job {big['id']} (verbs-queued) cancelled" in out, err
    code, _, err = cli(server, "cancel", big["id"])
    assert code == 2 and "already cancelled" in err


def test_events_and_follow(server: Server) -> None:
    job = submit(server, "verbs-events", duration=40.0)
    body = json.loads(tty(server, "events", "--job", "verbs-events", "-o", "json"))
    assert [e["kind"] for e in body["events"]][:1] == ["submitted"]
    assert all(e["object"] == f"job/{job['id']}" for e in body["events"])
    code, out, _ = cli(server, "events", "--follow", "--job", job["id"], "--timeout", "6", "--interval", "0.3",
                       "-o", "json")
    kinds = [json.loads(line)["kind"] for line in out.splitlines()]
    assert code == 0 and "submitted" in kinds and "succeeded" in kinds  # 40 clock-s = 2 s at x20
    code, out, _ = cli(server, "events", "--limit", "5")
    assert code == 0 and out.splitlines()[0].split()[:4] == ["AGE", "TYPE", "REASON", "OBJECT"]


def test_watch_prints_what_changes(server: Server) -> None:
    # 160 s at --speed 20: about 8 s of wall clock, so the first read sees it before it ends even on a loaded
    # machine (at 40 s, 2 s of wall clock, it had sometimes ended before the watch began: one line, no change)
    job = submit(server, "verbs-watch", duration=160.0)
    code, out, _ = cli(server, "get", "jobs", job["id"], "-w", "--timeout", "30", "--interval", "0.3", "-o", "json")
    seen = [json.loads(line)["status"] for line in out.splitlines()]
    assert code == 0 and seen[-1] == "succeeded" and len(seen) >= 2  # the first state, then the changes


def test_sinfo(server: Server) -> None:
    code, out, _ = cli(server, "sinfo", columns=200)
    assert code == 0 and out.splitlines()[0].split() == ["POOL", "MODEL", "NODES", "STATE", "GPUS(A/I/O/T)",
                                                         "ALLOC", "NODELIST"]
    parts = json.loads(tty(server, "sinfo", "-o", "json"))["partitions"]
    assert sum(p["nodes"] for p in parts) == 240 and sum(p["gpus"]["total"] for p in parts) == 1920
    assert {p["pool"] for p in parts} == {"train", "infer"}


def test_contexts_replace_flags(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCLUSTER_CONFIG", str(tmp_path / "config.yaml"))
    monkeypatch.delenv("GPUCLUSTER_SERVER", raising=False)
    monkeypatch.delenv("GPUCLUSTER_TOKEN", raising=False)
    r = runner.invoke(app, ["config", "set-context", "test", "--server", server.url, "--token", ADMIN])
    assert r.exit_code == 0 and (tmp_path / "config.yaml").stat().st_mode & 0o777 == 0o600
    r = runner.invoke(app, ["get", "nodes", "-o", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["total"] == 240
    r = runner.invoke(app, ["config", "get-contexts"])
    assert r.exit_code == 0 and "test" in r.stdout and ADMIN not in r.stdout  # tokens redacted
    r = runner.invoke(app, ["get", "nodes", "--context", "nope"])
    assert r.exit_code == 2 and "no context 'nope'" in r.stderr
    r = runner.invoke(app, ["get", "nodes", "--token", "wrong"])
    assert r.exit_code == 2 and "unknown token" in r.stderr  # the flag wins over the context


def test_a_fault_plans_the_drain_but_moves_nothing(server: Server) -> None:
    job = wait_running(server, submit(server, "verbs-fault", gpus=1, duration=None)["id"])
    place = job["placements"][0]
    node, gpu = place["node"], place["devices"][0]["index"]
    with server.client() as c:
        assert c.post(f"/api/v1/nodes/{node}/devices/{gpu}/fault").json()["evicted_user_jobs"] == 0
        after = c.get(f"/api/v1/jobs/{job['id']}").json()
        assert after["status"] == "running" and after["placements"] == job["placements"]  # nothing moved
        assert c.get(f"/api/v1/nodes/{node}").json()["schedulable"] is False  # but nothing new lands there
    plan = json.loads(tty(server, "get", "remediations", "--planned", "-o", "json"))
    assert plan["modes"]["drain"] == "dry-run" and plan["modes"]["cordon"] == "on"
    drains = [r for r in plan["log"] if r["target"] == f"{node}/gpu{gpu}"]
    assert [(r["action"], r["outcome"]) for r in drains] == [("drain", "dry-run")]
    assert re.search(r"would evict [1-9]\d* pod\(s\); cordoned the node and marked GPU \d+ unusable",
                     drains[0]["detail"])
    code, out, _ = cli(server, "get", "remediations", columns=200)
    assert code == 0 and "planned" in out and f"{node}/gpu{gpu}" in out
    usage = json.loads(tty(server, "describe", "node", node, "-o", "json"))["usage"]["devices"]
    assert usage[gpu]["xid"] == 79
    with server.client() as c:
        c.delete(f"/api/v1/jobs/{job['id']}")


def test_silences_mute_an_alert_and_are_listed(server: Server) -> None:
    with server.client() as c:
        c.post("/api/v1/nodes/infer-0007/devices/2/fault", params={"xid": 13})

        def firing() -> dict[str, Any] | None:
            a = c.get("/api/v1/alerts").json()
            hit = [x for x in a["alerts"] if x["name"] == "GpuXidError" and x["target"] == "infer-0007/gpu2"
                   and x["state"] == "firing"]
            return a if hit else None

        before = wait_for(firing, "GpuXidError firing")
        r = c.post("/api/v1/silences", json={"alert": "GpuXidError", "target": "infer-0007", "duration_s": 3600,
                                             "comment": "known bad card"})
        assert r.status_code == 201, r.text
        sid = r.json()["id"]
        after = c.get("/api/v1/alerts").json()
        mine = [x for x in after["alerts"] if x["target"] == "infer-0007/gpu2" and x["name"] == "GpuXidError"]
        assert mine[0]["silenced"] is True and mine[0]["silence"] == sid
        assert before["firing"] >= 1 and after["counts"]["silenced"] >= 1
        assert after["firing"] == sum(1 for x in after["alerts"] if x["state"] == "firing" and not x["silenced"])
        code, out, _ = cli(server, "get", "silences")
        assert code == 0 and sid in out and "GpuXidError" in out
        code, out, _ = cli(server, "get", "alerts", "--state", "firing", columns=200)
        assert "firing,silenced" in out
        tenant = c.post("/api/v1/tenants", json={"name": "verbs-t"}).json()["token"]
        assert c.post("/api/v1/silences", json={"alert": "x"}, headers={"Authorization": f"Bearer {tenant}"}) \
            .status_code == 403
        assert c.delete(f"/api/v1/silences/{sid}").status_code == 200
        assert c.delete(f"/api/v1/silences/{sid}").status_code == 404


def test_a_tenant_sees_its_own_job_events_only(server: Server) -> None:
    with server.client() as c:
        tok = c.post("/api/v1/tenants", json={"name": "verbs-events-t"}).json()["token"]
    submit(server, "verbs-tenant-job", token=tok, duration=20.0)
    body = json.loads(tty(server, "events", "--limit", "200", "-o", "json", token=tok))
    jobs = [e for e in body["events"] if e["type"] == "job"]
    assert jobs and {e["tenant"] for e in jobs} == {"verbs-events-t"}


def test_structured_log_lines(server: Server) -> None:
    submit(server, "verbs-log", duration=20.0)
    with server.client() as c:  # an alert and a (planned) remediation of our own
        assert c.post("/api/v1/nodes/infer-0011/devices/0/fault").status_code == 200

    def lines() -> list[dict[str, Any]] | None:
        out = [json.loads(line) for line in server.output().splitlines() if line.startswith("{")]
        kinds = {x.get("event") for x in out}
        mine = any(x.get("event") == "job" and x.get("name") == "verbs-log" and x.get("kind") == "running"
                   for x in out)
        return out if mine and {"http", "job", "remediation", "alert"} <= kinds else None

    got = wait_for(lines, "access, job, remediation and alert lines", timeout=60)
    http = [x for x in got if x.get("event") == "http"]
    assert all({"ts", "level", "method", "path", "status", "ms", "actor"} <= set(x) for x in http)
    assert not any(ADMIN in json.dumps(x) for x in got)  # the token is never logged
    job = [x for x in got if x.get("event") == "job" and x.get("name") == "verbs-log"]
    assert {x["kind"] for x in job} >= {"running"}
    assert any(x.get("event") == "remediation" and x.get("outcome") == "dry-run" for x in got)
    assert "test-admin-token" not in server.output()
