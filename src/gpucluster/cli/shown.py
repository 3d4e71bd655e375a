"""Engine values that commands' signatures show (defaults and choices in ``--help``), held here as plain data.

Building a command's parameters (its ``--help``, Tab completion of its options) must not import the engine
(numpy, pydantic, the scheduler, the simulator ...): command modules import only typer, the standard library and
the CLI's light modules at their top, and everything else inside the command's body (``cli/main.py`` says why).
A value a signature needs from the engine is therefore copied here; ``tests/cli/test_startup.py`` checks that
each copy equals the engine's, so the two cannot drift apart.
"""

from __future__ import annotations

import enum

DEFAULT_QUEUE_POLICY = "default"
"""``gpucluster.jobs.DEFAULT_QUEUE_POLICY``: the queue policy when ``--queue-policy`` is not given."""

DESIGN_PRESETS = ("dgx-h100-superpod", "dgx-b200-superpod")
"""``gpucluster.design.PRESETS``: the reference designs ``design --preset`` knows."""

WHATIF_YEARS = 4.0
"""``gpucluster.whatif.DEFAULT_YEARS``: years ``whatif`` amortises capex over."""

WHATIF_JCT_TOLERANCE_PCT = 10.0
"""``gpucluster.whatif.DEFAULT_TOLERANCE_PCT``: how far above the best average JCT the verdict's design may be."""


class Policy(enum.StrEnum):
    """``gpucluster.model.Policy`` (``schedule --node-policy / --gpu-policy``): the same values; a command turns
    it into the model's with ``gpucluster.model.Policy(value)``."""

    BINPACK = "binpack"
    SPREAD = "spread"
