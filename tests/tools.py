"""Where the binaries ``scripts/test-deps.sh install`` builds are (helm, kubectl, etcd, kube-*), for any test.

A missing one skips the test with the install hint, or fails it when the environment variable ``CI`` is set.
"""

from __future__ import annotations

import os
import subprocess
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TEST_DEPS_SH = REPO / "scripts" / "test-deps.sh"
INSTALL_HINT = "install it with: sudo scripts/test-deps.sh install (see docs/testing.md)"


@cache
def tool_path(name: str, version: str = "") -> Path:
    """The cached binary ``name`` (``helm``, ``etcd``, ``kubectl``, ``kube-apiserver`` ...); Kubernetes binaries of
    ``version`` (``v1.35.4``), default the first version the suite runs on."""
    args = [str(TEST_DEPS_SH), "path", name, *([version] if version else [])]
    out = subprocess.run(args, capture_output=True, text=True, check=True, timeout=30)
    return Path(out.stdout.strip())


def require_tool(name: str, version: str = "") -> Path:
    """:func:`tool_path`, skipping (or failing, with ``CI`` set) the calling test when it is not built."""
    path = tool_path(name, version)
    if not os.access(path, os.X_OK):
        msg = f"{name} missing ({path}); {INSTALL_HINT}"
        if os.environ.get("CI"):
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    return path
