"""``gpucluster schedule``: place a file of Pod manifests on a cluster, in file order."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from gpucluster.cli.common import (
    DeviceConfigOpt,
    cluster_option_help,
    console,
    fail,
    load_cluster_or_fail,
    print_json,
    registry_or_fail,
)
from gpucluster.model import Policy
from gpucluster.scheduler import DEFAULT_POLICY, PROFILES, Decision, Scheduler, binpack_spread_profile, profile_for
from gpucluster.spec import SpecError, load_pods


def placement_json(d: Decision) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pod": d.pod.key,
        "node": d.node,
        "devices": d.devices_json(),
        "reasons": d.reasons,
    }
    if d.pod.init_containers:
        out["init_devices"] = d.devices_json(init=True)
    return out


def register(app: typer.Typer) -> None:
    @app.command("schedule")
    def schedule(
        pods: Annotated[Path, typer.Option("--pods", help="YAML stream of Pod manifests (HAMi resources).")],
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        policy: Annotated[str | None, typer.Option(
            "--policy", help="Placement policy: default (stranding-fgd), binpack, spread, fgd, bestfit, ... "
                             "Used when neither --node-policy nor --gpu-policy is given.")] = None,
        node_policy: Annotated[
            Policy | None, typer.Option("--node-policy", help="HAMi style: prefer fuller nodes (binpack) or emptier "
                                                              "(spread); selects the binpack/spread profile.")
        ] = None,
        gpu_policy: Annotated[
            Policy | None, typer.Option("--gpu-policy", help="HAMi style: inside a node, fuller devices (binpack) "
                                                             "or emptier (spread, default), by HAMi's device score.")
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed for tie-breaking between equal nodes.")] = 0,
        json_out: Annotated[bool, typer.Option("--json", help='Print {"placements": [...]} as JSON.')] = False,
        device_config: DeviceConfigOpt = None,
    ) -> None:
        """Schedule pods one by one (file order) and print where each landed, or why it could not."""
        registry = registry_or_fail(device_config)
        c = load_cluster_or_fail(cluster, registry)
        try:
            pod_list = load_pods(pods, registry)
        except SpecError as exc:
            fail(str(exc))
        except OSError as exc:
            fail(f"{pods}: {exc.strerror}")
        if node_policy is not None or gpu_policy is not None:
            if policy is not None:
                fail("--policy cannot be combined with --node-policy/--gpu-policy")
            node_policy, gpu_policy = node_policy or Policy.BINPACK, gpu_policy or Policy.SPREAD
            profile = binpack_spread_profile(node_policy, gpu_policy, seed)
            label = f"node {node_policy}, gpu {gpu_policy}"
        else:
            name = policy or "default"
            if name not in PROFILES:
                fail(f"--policy {name!r}: unknown; known: {', '.join(sorted(PROFILES))}")
            profile = profile_for(name, seed)
            label = f"policy {DEFAULT_POLICY if name == 'default' else name}"
        sched = Scheduler(c.state(), profile)
        decisions = [sched.schedule_and_bind(p) for p in pod_list]
        if json_out:
            print_json({"placements": [placement_json(d) for d in decisions]})
            return
        table = Table(title=f"{len(decisions)} pods on {c.name} ({label})")
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
