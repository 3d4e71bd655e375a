"""``gpucluster spec validate|show``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpucluster.cli import common
from gpucluster.cli.common import fail, load_cluster_or_fail, print_json
from gpucluster.cli.output import print_table, write


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
            common.console.print(
                f"[green]valid[/]: {common.plain(file)}: {summary['nodes']} nodes, {summary['gpus']} devices "
                f"({', '.join(f'{n} x {m}' for m, n in summary['gpu_models'].items()) or 'none'})"
            )

    @spec.command("show")
    def show(
        file: Annotated[Path | None, typer.Argument(help="Cluster file (default: the built-in cluster).")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
        raw: Annotated[bool, typer.Option(
            "--raw", help="Print the spec's YAML text (the built-in one without FILE), unwrapped: ready to save "
                          "and edit.")] = False,
    ) -> None:
        """Summarise a cluster: nodes, devices by model, racks, leaves, fabric."""
        from gpucluster import inputfile
        from gpucluster.spec import default_spec_text

        if raw:  # the text itself, unwrapped whatever the terminal: `spec show --raw > f.yaml` round-trips
            if file is None:
                write(default_spec_text())
                return
            load_cluster_or_fail(file)
            try:
                write(inputfile.read_text(file))
            except inputfile.InputFileError as exc:
                fail(str(exc))
            return
        cluster = load_cluster_or_fail(file)
        summary = cluster.summary()
        if json_out:
            print_json(summary)
            return
        rows: list[tuple[str, str]] = [(key.replace("_", " "), str(summary[key])) for key in
                                       ("nodes", "gpus", "racks", "leaves", "spine_groups", "cpu_cores", "memory_gib")]
        rows += [(f"  {model}", str(n)) for model, n in summary["gpu_models"].items()]
        fab = summary["fabric"]
        rows.append(("fabric", f"{fab['type']} {fab['link_gbps']:g} Gb/s, {fab['oversubscription']:g}:1"))
        print_table(["item", "value"], rows, title=f"cluster {summary['name']} ({summary['source']})")
