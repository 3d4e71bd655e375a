"""Every command, group, option and argument a person sees in ``--help`` says what it is: no empty help text.

The commands come from the typer app itself, so a new command or flag without help fails here."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main

from gpucluster.cli.main import app


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, (*path, name))


def test_every_command_and_parameter_has_help() -> None:
    missing: list[str] = []
    for path, cmd in _walk(typer.main.get_command(app)):
        where = " ".join(("gpucluster", *path))
        if cmd.hidden:
            continue
        if not (cmd.help or "").strip():
            missing.append(f"{where}: the command")
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            if not (getattr(param, "help", None) or "").strip():
                missing.append(f"{where}: {'/'.join(param.opts) if param.param_type_name == 'option' else param.name}")
    assert missing == [], "no help text: " + ", ".join(missing)
