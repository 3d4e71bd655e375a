from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.server import Server, start_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One control plane for a module: fast clock, light background load, no random faults; drains and
    defragmentation switched on (the default only plans them: tests/cli/test_verbs.py)."""
    data = tmp_path_factory.mktemp("svc") / "data"
    srv = start_server(data, "--speed", "20", "--background", "0.3", "--faults-per-hour", "0",
                       "--remediate", "drain,defragment")
    yield srv
    srv.stop()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"
