"""Every client command (every command with ``--server``), pointed at a server that is not there, exits 2 saying
it cannot reach it: no traceback, nothing on stdout (a ``--json`` / ``-o json`` reader sees no partial document).

The commands come from the typer app itself: a new client command fails
:func:`test_every_client_command_is_listed` until it is added to :data:`ARGS`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer.main
import typer.testing
from typer.testing import CliRunner

from gpucluster.cli.main import app

pytestmark = pytest.mark.usefixtures("one_command_tree")

runner = CliRunner()
NOWHERE = "http://127.0.0.1:9"

ARGS: dict[str, list[str]] = {
    "submit": ["{job}", "--json"], "logs": ["j"], "jobs": ["--json"], "nodes": ["--json"],
    "get": ["jobs", "-o", "json"], "describe": ["job", "j", "-o", "json"], "cancel": ["j", "-o", "json"],
    "events": ["-o", "json"], "sinfo": ["-o", "json"], "cordon": ["n", "--json"], "uncordon": ["n", "--json"],
    "drain": ["n", "--json"], "top": ["nodes", "--json"], "remediation approve": ["r", "--json"],
    "remediation dismiss": ["r", "--json"], "tenants list": ["--json"], "tenants create": ["t", "--json"],
    "tenants set-quota": ["t", "4", "--json"],
}
"""Each client command's arguments (beyond ``--server`` and ``--token``)."""
EXTRA = {"describe node": ("describe", ["node", "n", "-o", "json"]), "logs -f": ("logs", ["j", "-f"])}
"""More command lines that reach the server another way."""


def _client_commands() -> Iterator[str]:
    def walk(cmd: Any, prefix: list[str]) -> Iterator[str]:
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, [*prefix, name])
        if any(p.name == "server" for p in getattr(cmd, "params", [])):
            yield " ".join(prefix)
    yield from walk(typer.main.get_command(app), [])


def test_every_client_command_is_listed() -> None:
    assert set(_client_commands()) - {"config set-context"} == set(ARGS)  # that one saves --server, calls no one


CASES = [*((name, name, args) for name, args in ARGS.items()), *((k, *v) for k, v in EXTRA.items())]


@pytest.mark.parametrize(("command", "args"), [(c, a) for _, c, a in CASES], ids=[c[0] for c in CASES])
def test_an_unreachable_server_exits_2_naming_it(tmp_path: Path, command: str, args: list[str]) -> None:
    job = tmp_path / "job.yaml"
    job.write_text("name: j\nresources: {nvidia.com/gpu: 1}\n")
    line = [*command.split(), *(a.format(job=job) for a in args), "--server", NOWHERE, "--token", "t"]
    res = runner.invoke(app, line, env={"GPUCLUSTER_CONFIG": str(tmp_path / "none.yaml")})
    assert res.exception is None or isinstance(res.exception, SystemExit), (line, repr(res.exception))
    assert res.exit_code == 2, (line, res.output)
    assert f"--server: cannot reach {NOWHERE}" in " ".join(res.stderr.split()), (line, res.output)
    assert res.stdout == ""


@pytest.mark.parametrize(("url", "why"), [
    ("http://[::1", "not a URL (Invalid IPv6 URL)"),  # was a ValueError out of httpx (exit 1, no flag named)
    ("http://127.0.0.1:99999", "not a URL (Port out of range"),
    ("http://", "no host in the URL"),
    ("notaurl", "expected an http:// or https:// URL"),  # was checked only after the token, if at all
])
@pytest.mark.parametrize("command", ["jobs", "tenants create", "get"])
def test_a_server_url_that_is_no_url_exits_2_naming_where_it_came_from(tmp_path: Path, command: str, url: str,
                                                                       why: str) -> None:
    args = ARGS[command]
    env = {"GPUCLUSTER_CONFIG": str(tmp_path / "none.yaml")}
    for line, where in (([*command.split(), *args, "--server", url, "--token", "t"], "--server"),
                        ([*command.split(), *args, "--token", "t"], "$GPUCLUSTER_SERVER")):
        res = runner.invoke(app, line, env={**env, "GPUCLUSTER_SERVER": url} if where != "--server" else env)
        assert res.exception is None or isinstance(res.exception, SystemExit), (line, repr(res.exception))
        assert res.exit_code == 2, (line, res.output)
        assert f"{where} {url!r}: {why}" in " ".join(res.stderr.split()), (line, res.output)
    res = runner.invoke(app, ["config", "set-context", "c", "--server", url], env=env)
    assert res.exit_code == 2 and f"--server {url!r}: {why}" in " ".join(res.stderr.split()), res.output
