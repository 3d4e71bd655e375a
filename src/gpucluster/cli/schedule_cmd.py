"""``gpucluster schedule``: place a file of Pod manifests on a cluster, in file order."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli.common import (
    DeviceConfigOpt,
    cluster_option_help,
    deprecated_option,
    fail,
    load_cluster_or_fail,
    print_json,
    registry_or_fail,
    renamed,
)
from gpucluster.cli.output import print_table, write
from gpucluster.cli.shown import Policy

if TYPE_CHECKING:  # the engine is imported where a command runs, never to build its parameters (cli/shown.py)
    from gpucluster.model import ClusterState
    from gpucluster.scheduler import Decision

EXIT_UNPLACED = 3
"""``schedule`` exits with this code when at least one pod was not placed (2 stays "bad input")."""


def _with_shares(state: ClusterState, d: Decision, init: bool = False) -> list[list[dict[str, Any]]]:
    """``Decision.devices_json`` plus, per device, its index on the node, the share held (0..1,
    ``model.share``) and whether that is the whole device."""
    from gpucluster.model import views

    out = d.devices_json(init)
    if d.allocation is None:
        return out
    i = state.node_index[d.allocation.node]
    grants = d.allocation.init_devices if init else d.allocation.devices
    for per_json, per in zip(out, grants, strict=True):
        for dj, g in zip(per_json, per, strict=True):
            dj.update(index=g.device_index, **views.grant_share(state, i, g))
    return out


def placement_json(d: Decision, state: ClusterState | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "pod": d.pod.key,
        "node": d.node,
        "devices": d.devices_json() if state is None else _with_shares(state, d),
        "reasons": d.reasons,
    }
    if d.pod.init_containers:
        out["init_devices"] = d.devices_json(init=True) if state is None else _with_shares(state, d, init=True)
    if not d.ok:
        out["why"] = d.message()
    return out


def device_text(dev: dict[str, Any]) -> str:
    """``gpu3 whole`` or ``gpu3 20000MiB 50%`` (a share: its memory and compute)."""
    name = f"gpu{dev['index']}" if "index" in dev else str(dev["id"])[:12]
    if dev.get("whole"):
        return f"{name} whole"
    cores = f" {dev['cores']}%" if dev["cores"] else ""
    return f"{name} {dev['memory_mib']}MiB{cores}"


def register(app: typer.Typer) -> None:
    @app.command("schedule")
    def schedule(
        pods: Annotated[Path, typer.Option("--pods", help="YAML stream of Pod manifests (HAMi resources).")],
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        policy: Annotated[str | None, typer.Option(
            "--placement-policy", help="Placement policy: default (speed-fgd), stranding-fgd, binpack, spread, fgd, "
                                       "bestfit, ... Used when neither --node-policy nor --gpu-policy is given.")]
        = None,
        old_policy: Annotated[str | None, deprecated_option("--policy", "--placement-policy")] = None,
        node_policy: Annotated[
            Policy | None, typer.Option("--node-policy", help="HAMi style: prefer fuller nodes (binpack) or emptier "
                                                              "(spread); selects the binpack/spread profile.")
        ] = None,
        gpu_policy: Annotated[
            Policy | None, typer.Option("--gpu-policy", help="HAMi style: inside a node, fuller devices (binpack) "
                                                             "or emptier (spread, default), by HAMi's device score.")
        ] = None,
        seed: Annotated[int, typer.Option("--seed", min=0, help="Tie-break seed between equal nodes (>= 0).")] = 0,
        json_out: Annotated[bool, typer.Option(
            "--json", help='Print {"placements": [...], "placed": n, "unplaced": m} as JSON.')] = False,
        device_config: DeviceConfigOpt = None,
    ) -> None:
        """Schedule pods one by one (file order) and print where each landed, or why it could not.

        Exit status: 0 when every pod was placed, 3 when at least one was not (the JSON says which: "node" is
        null and "why" holds the counted reasons), 2 for bad input."""
        from gpucluster.model import Policy as Preference
        from gpucluster.scheduler import (
            DEFAULT_PLACEMENT_POLICY,
            PROFILES,
            Scheduler,
            binpack_spread_profile,
            profile_for,
        )
        from gpucluster.scheduler.feasibility import unknown_resource
        from gpucluster.spec import SpecError, load_pods

        policy = renamed(policy, old_policy, "--placement-policy", "--policy")
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
                fail("--placement-policy cannot be combined with --node-policy/--gpu-policy")
            node_pref = Preference(node_policy or Policy.BINPACK)
            gpu_pref = Preference(gpu_policy or Policy.SPREAD)
            profile = binpack_spread_profile(node_pref, gpu_pref, seed)
            label = f"node {node_pref}, gpu {gpu_pref}"
        else:
            name = policy or "default"
            if name not in PROFILES:
                fail(f"--placement-policy {name!r}: unknown; known: {', '.join(sorted(PROFILES))}")
            profile = profile_for(name, seed)
            label = f"policy {DEFAULT_PLACEMENT_POLICY if name == 'default' else name}"
        state = c.state()
        for p in pod_list:  # a resource no node has (a typo) is bad input, not a pod that waits
            unknown = unknown_resource([p], state, registry.device_resources)
            if unknown is not None:
                fail(f"{pods}: pod {p.key}: {unknown.where}: {unknown.why}")
        sched = Scheduler(state, profile)
        decisions = [sched.schedule_and_bind(p) for p in pod_list]
        placed = sum(1 for d in decisions if d.ok)
        rows = [placement_json(d, sched.state) for d in decisions]
        if json_out:
            print_json({"placements": rows, "placed": placed, "unplaced": len(decisions) - placed})
        else:
            table = [(r["pod"], r["node"] or "-", "; ".join(", ".join(device_text(g) for g in per)
                                                             for per in r["devices"]), r.get("why", ""))
                     for r in rows]
            print_table(["POD", "NODE", "DEVICES", "WHY NOT"], table,
                        title=f"{len(decisions)} pods on {c.name} ({label})", wrap_last=True)
            write(f"{placed}/{len(decisions)} placed")
        if placed < len(decisions):
            raise typer.Exit(EXIT_UNPLACED)
