"""The ``gpucluster`` command line (typer + rich); one module per command group.

Help is click's plain layout (``TYPER_USE_RICH=0`` unless the caller set it): it wraps the descriptions and
never cuts a flag name at 80 columns, and a flag shows no ``<bool>`` placeholder (typer's rich tables did both).
"""

import os

os.environ.setdefault("TYPER_USE_RICH", "0")
