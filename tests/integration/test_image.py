"""The image recipe built for real: ``scripts/build-image.sh`` makes a Debian 12 base from Debian's packages
(mmdebstrap), builds ``Containerfile`` on it with podman and runs gpucluster inside, as the chart runs it (uid
65532, read-only root file system, no network). The base and the image are cached outside the repository
(``$GPUCLUSTER_CACHE/image``, podman's store): about 4 min the first time on 2 cores, about 30 s after a source
change (the dependencies' layer is reused), seconds when nothing changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "scripts" / "build-image.sh"


def _build(*args: str) -> str:
    for tool in ("podman", "mmdebstrap"):
        if not shutil.which(tool):
            msg = f"{tool} not found; install it with: sudo scripts/test-deps.sh install"
            if os.environ.get("CI"):
                pytest.fail(msg, pytrace=False)
            pytest.skip(msg)
    proc = subprocess.run([str(BUILD), *args], capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, f"{BUILD.name} {' '.join(args)} failed:\n{proc.stderr[-4000:]}\n{proc.stdout[-2000:]}"
    return proc.stdout


def test_image_from_debian_packages_runs_gpucluster_as_non_root() -> None:
    top = _build("--", "--help")  # builds (or reuses) the image, checks both commands, then runs --help
    assert "Usage: gpucluster" in top and "k8s" in top and "agent" in top
    extender = _build("--no-check", "--", "k8s", "extender", "--help")
    assert "Usage: gpucluster k8s extender" in extender
    assert "--listen" in extender and "/preempt" in extender
    tag = _build("--no-check").strip().splitlines()[-1]
    info = json.loads(subprocess.run(["podman", "image", "inspect", tag], capture_output=True, text=True,
                                     check=True, timeout=60).stdout)[0]
    config = info["Config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["/opt/gpucluster/bin/gpucluster"]
    assert info["Labels"]["io.gpucluster.source"] == tag.rsplit("-", 1)[-1]
