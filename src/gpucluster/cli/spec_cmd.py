"""``gpucluster spec validate|show``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gpucluster.cli.common import console, load_cluster_or_fail, print_json
from gpucluster.spec import default_spec_text


def register(app: typer.Typer) -> None:
    spec = typer.Typer(help="Cluster specs: validate a file, or show what it describes.", no_args_is_help=True)
    app.add_typer(spec, name="spec")

    @spec.command("validate")
    def validate(
        file: Annotated[Path, typer.Argument(help="Cluster spec YAML or Kubernetes Node manifests.")],
        json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ) -> None:
        """Check a cluster file; exit 2 with FILE: field: why when it is wrong."""
        cluster = load_cluster_or_fail(file)
        summary = cluster.summary()
        if json_out:
            print_json({"valid": True, **summary})
        else:
            console.print(
                f"[green]valid[/]: {file}: {summary['nodes']} nodes, {summary['gpus']} devices "
                f"({', '.join(f'{n} x {m}' for m, n in summary['gpu_models'].items()) or 'none'})"
            )

    @spec.command("show")
    def show(
        file: Annotated[Path | None, typer.Argument(help="Cluster file (default: the built-in cluster).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
        raw: Annotated[bool, typer.Option("--raw", help="Print the built-in spec's YAML text.")] = False,
    ) -> None:
        """Summarise a cluster: nodes, devices by model, racks, leaves, fabric."""
        if raw and file is None:
            console.print(default_spec_text(), highlight=False, markup=False)
            return
        cluster = load_cluster_or_fail(file)
        summary = cluster.summary()
        if json_out:
            print_json(summary)
            return
        table = Table(title=f"cluster {summary['name']} ({summary['source']})")
        table.add_column("item")
        table.add_column("value", justify="right")
        for key in ("nodes", "gpus", "racks", "leaves", "spine_groups", "cpu_cores", "memory_gib"):
            table.add_row(key.replace("_", " "), str(summary[key]))
        for model, n in summary["gpu_models"].items():
            table.add_row(f"  {model}", str(n))
        fab = summary["fabric"]
        table.add_row("fabric", f"{fab['type']} {fab['link_gbps']:g} Gb/s, {fab['oversubscription']:g}:1")
        console.print(table)
