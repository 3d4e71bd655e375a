"""``gpucluster schedule``: place a file of Pod manifests on a cluster, in file order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpucluster.cli.common import cluster_option_help, console, fail, load_cluster_or_fail, print_json
from gpucluster.model import Policy
from gpucluster.scheduler import Decision, Scheduler, binpack_spread_profile
from gpucluster.spec import SpecError, load_pods


def placement_json(d: Decision) -> dict[str, Any]:
    return {
        "pod": d.pod.key,
        "node": d.node,
        "devices": d.devices_json(),
        "reasons": d.reasons,
    }


def register(app: typer.Typer) -> None:
    @app.command("schedule")
    def schedule(
        pods: Annotated[Path, typer.Option("--pods", help="YAML stream of Pod manifests (HAMi resources).")],
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        node_policy: Annotated[
            Policy, typer.Option("--node-policy", help="Prefer fuller nodes (binpack) or emptier (spread).")
        ] = Policy.BINPACK,
        gpu_policy: Annotated[
            Policy, typer.Option("--gpu-policy", help="Inside a node: fuller devices, or fewest tasks first.")
        ] = Policy.SPREAD,
        seed: Annotated[int, typer.Option("--seed", help="Seed for tie-breaking between equal nodes.")] = 0,
        json_out: Annotated[bool, typer.Option("--json", help='Print {"placements": [...]} as JSON.')] = False,
    ) -> None:
        """Schedule pods one by one (file order) and print where each landed, or why it could not."""
        c = load_cluster_or_fail(cluster)
        try:
            pod_list = load_pods(pods)
        except SpecError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{pods}: {exc.strerror}")
        sched = Scheduler(c.state(), binpack_spread_profile(node_policy, gpu_policy, seed))
        decisions = [sched.schedule_and_bind(p) for p in pod_list]
        if json_out:
            print_json({"placements": [placement_json(d) for d in decisions]})
            return
        table = Table(title=f"{len(decisions)} pods on {c.name} (node {node_policy}, gpu {gpu_policy})")
        for col in ("pod", "node", "devices (memory MiB / cores %)", "why not"):
            table.add_column(col)
        for d in decisions:
            devs = "; ".join(
                ", ".join(f"{g['id'][:12]} {g['memory_mib']}/{g['cores']}" for g in per) for per in d.devices_json()
            )
            table.add_row(d.pod.key, d.node or "[red]-[/]", devs, "" if d.ok else d.message())
        console.print(table)
        placed = sum(1 for d in decisions if d.ok)
        console.print(f"{placed}/{len(decisions)} placed")
