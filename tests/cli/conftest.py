"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import typer.main
import typer.testing

from gpucluster.cli.main import app


@pytest.fixture(scope="module")
def one_command_tree() -> Iterator[None]:
    """Typer builds the click command tree of the whole app on every ``CliRunner.invoke`` (about 1 s under load);
    a module that runs hundreds of invocations (``pytestmark = pytest.mark.usefixtures("one_command_tree")``)
    builds it once."""
    built = typer.main.get_command(app)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command", lambda _app: built)
        yield
