from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "hami_differs: a ported HAMi case where we answer differently on purpose "
                   "(docs/hami-compatibility.md says why)")
