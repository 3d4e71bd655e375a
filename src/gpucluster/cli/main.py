"""The root ``gpucluster`` app; each command group registers itself here."""

from __future__ import annotations

import logging
import os

import typer

from gpucluster import __version__
from gpucluster.cli import (
    config_cmd,
    demo_cmd,
    deploy_cmd,
    design_cmd,
    experiment_cmd,
    get_cmd,
    k8s_cmd,
    monitor_cmd,
    node_cmd,
    schedule_cmd,
    service_cmd,
    simulate_cmd,
    spec_cmd,
    top_cmd,
    whatif_cmd,
)

app = typer.Typer(
    name="gpucluster",
    help="GPU-cluster control plane: plan, schedule, watch and replay GPU clusters.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

for module in (
    spec_cmd, schedule_cmd, demo_cmd, design_cmd, whatif_cmd, experiment_cmd, simulate_cmd, k8s_cmd, deploy_cmd,
    monitor_cmd, service_cmd, get_cmd, node_cmd, top_cmd, config_cmd,
):
    module.register(app)


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
