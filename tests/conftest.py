"""Suite-wide settings. With ``CI`` set (``.ci/run`` exports ``CI=1``; so does ``make mutation``), hypothesis runs
derandomized (the same examples on every run, so a CI failure reproduces) and without its example database."""

from __future__ import annotations

import os

import pytest
from hypothesis import Phase, settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("mutation", derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
"""``make mutation`` only asks whether a test fails: no shrinking of the failing example."""
if os.environ.get("GPUCLUSTER_MUTATION"):
    settings.load_profile("mutation")
elif os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Groups for ``pytest -n 2 --dist loadgroup`` (``make integration``): every test on one Kubernetes version
    (the session fixture ``kube_control_plane``'s parameter) runs in the same worker, so each worker starts at
    most one control plane per version it was given, and the two versions' suites run side by side, each on its
    own API server, as they would one after the other; any other test stays with the rest of its module, so a
    module-scoped fixture (a ``gpucluster up``, a browser) is started once. Without ``--dist loadgroup`` the marks
    do nothing."""
    for item in items:
        callspec = getattr(item, "callspec", None)
        version = callspec.params.get("kube_control_plane") if callspec is not None else None
        group = f"k8s-{version}" if version else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
