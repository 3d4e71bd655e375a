"""``gpucluster deploy``: nvkind-like kind config rendering and preflight checks."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from gpucluster.cli.common import fail, print_json


def register(app: typer.Typer) -> None:
    deploy = typer.Typer(help="Deploy onto a GPU kind cluster (nvkind-like).", no_args_is_help=True)
    app.add_typer(deploy, name="deploy")

    @deploy.command("kind-config")
    def kind_config_cmd(
        workers: Annotated[int, typer.Option("--workers", help="Worker nodes.")] = 1,
        gpus: Annotated[int, typer.Option("--gpus", help="GPUs on the host (indices 0..G-1).")] = 1,
        gpus_per_worker: Annotated[
            list[str] | None,
            typer.Option("--gpus-per-worker", help="Per worker, once each: GPU indices like '0', '1,2,3', "
                                                   "'4-7', 'all' or '' (default: an even split)."),
        ] = None,
        name: Annotated[str, typer.Option("--name", help="kind cluster name.")] = "gpucluster",
        image: Annotated[str | None, typer.Option("--image", help="kind node image.")] = None,
    ) -> None:
        """Print a kind cluster config that gives the host's GPUs to the workers."""
        from gpucluster.deploy.kind import KindConfigError, kind_config_yaml

        try:
            sys.stdout.write(kind_config_yaml(workers, gpus, gpus_per_worker, name, image))
        except KindConfigError as exc:
            fail(str(exc))

    @deploy.command("preflight")
    def preflight(json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False) -> None:
        """Check docker, kind, kubectl, helm, the NVIDIA driver, container runtime and Kubernetes version;
        print what is missing and how to fix it (exit 1 when something is missing)."""
        from gpucluster.deploy.preflight import run_preflight

        report = run_preflight()
        if json_out:
            print_json({"ok": report.ok, "checks": [
                {"name": c.name, "ok": c.ok, "found": c.found, "need": c.need, "fix": c.fix} for c in report.checks
            ]})
        else:
            typer.echo(report.text())
        if not report.ok:
            raise typer.Exit(1)
