"""Suite-wide settings. With ``CI`` set (``.ci/run`` exports ``CI=1``; so does ``make mutation``), hypothesis runs
derandomized (the same examples on every run, so a CI failure reproduces) and without its example database."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from hypothesis import Phase, settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("mutation", derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
"""``make mutation`` only asks whether a test fails: no shrinking of the failing example."""
if os.environ.get("GPUCLUSTER_MUTATION"):
    settings.load_profile("mutation")
elif os.environ.get("CI"):
    settings.load_profile("ci")


_K8S_VERSION_ID = re.compile(r"^v1\.\d+\.\d+$")


def integration_scope(nodeid: str) -> str:
    """The unit of work of a test under ``pytest -n 2 --dist loadscope`` (``make integration``): a test that runs
    on a Kubernetes version (the session fixture ``kube_control_plane``'s parameter, ``v1.37.2`` among the ids in
    brackets) belongs to that version, so all of one version's tests run in one worker on one control plane, and
    the two versions run side by side, each on its own API server, as they would one after the other; any other
    test stays with its module, so a module-scoped fixture (a ``gpucluster up``, a browser) starts once."""
    path, _, rest = nodeid.partition("::")
    if rest.endswith("]") and "[" in rest:
        for part in rest[rest.index("[") + 1:-1].split("-"):
            if _K8S_VERSION_ID.match(part):
                return f"k8s-{part}"
    return path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadscope`` with :func:`integration_scope` as the scope. (pytest-xdist's ``loadgroup`` marks do not
    take effect with pytest 9.2: xdist renames ``item._nodeid``, which ``nodeid`` no longer reads.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class KubernetesVersionScope(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return integration_scope(nodeid)

    return KubernetesVersionScope(config, log)
