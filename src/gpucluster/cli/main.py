"""The root ``gpucluster`` app; each command group registers itself here."""

from __future__ import annotations

import logging
import os

import typer

from gpucluster import __version__
from gpucluster.cli import demo_cmd, schedule_cmd, spec_cmd

app = typer.Typer(
    name="gpucluster",
    help="GPU-cluster control plane: plan, schedule, watch and replay GPU clusters.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

for module in (spec_cmd, schedule_cmd, demo_cmd):
    module.register(app)

_OPTIONAL = (
    "gpucluster.cli.design_cmd",
    "gpucluster.cli.experiment_cmd",
    "gpucluster.cli.simulate_cmd",
    "gpucluster.cli.k8s_cmd",
    "gpucluster.cli.deploy_cmd",
    "gpucluster.cli.monitor_cmd",
    "gpucluster.cli.service_cmd",
)


def _register_optional() -> None:
    import importlib

    for name in _OPTIONAL:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(app)


_register_optional()


@app.command("version")
def version() -> None:
    """Print the version."""
    typer.echo(__version__)


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("GPUCLUSTER_LOG", "WARNING").upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    app()


if __name__ == "__main__":
    main()
