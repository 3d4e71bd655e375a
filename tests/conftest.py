"""Suite-wide settings. With ``CI`` set (``.ci/run`` exports ``CI=1``; so does ``make mutation``), hypothesis runs
derandomized (the same examples on every run, so a CI failure reproduces) and without its example database."""

from __future__ import annotations

import os

from hypothesis import Phase, settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("mutation", derandomize=True, database=None, phases=[Phase.explicit, Phase.generate])
"""``make mutation`` only asks whether a test fails: no shrinking of the failing example."""
if os.environ.get("GPUCLUSTER_MUTATION"):
    settings.load_profile("mutation")
elif os.environ.get("CI"):
    settings.load_profile("ci")
