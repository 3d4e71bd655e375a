"""``gpucluster demo``: schedule a synthetic GPU-sharing workload on the built-in cluster and summarise it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli import common
from gpucluster.cli.common import cluster_option_help, deprecated_option, load_cluster_or_fail, print_json, renamed
from gpucluster.cli.output import print_table

if TYPE_CHECKING:  # the engine is imported where a command runs, never to build its parameters (cli/shown.py)
    from gpucluster.model import Pod

# Shares of pod shapes in Alibaba's 2023 GPU-sharing trace (default pod list: 8,152 pods): 13% CPU-only,
# 38% sharing a fraction of one GPU, 48% one whole GPU, 1% 2-8 whole GPUs.
_SHAPES = (
    (0.13, 0, 0),
    (0.38, 1, -1),  # fractional: cores drawn below
    (0.48, 1, 1000),
    (0.006, 2, 1000),
    (0.004, 4, 1000),
    (0.006, 8, 1000),
)
_FRACTIONS = (100, 250, 300, 500, 500, 800)


def synthetic_pods(n: int, seed: int) -> list[Pod]:
    import numpy as np

    from gpucluster.model import ContainerRequest, DeviceRequest, Pod

    rng = np.random.default_rng(seed)
    weights = np.array([s[0] for s in _SHAPES])
    picks = rng.choice(len(_SHAPES), size=n, p=weights / weights.sum())
    pods = []
    for i, k in enumerate(picks):
        _, count, cores = _SHAPES[k]
        if cores < 0:
            cores = int(rng.choice(_FRACTIONS))
        cpu = int(rng.choice([2000, 4000, 8000, 12000])) * max(count, 1)
        mem = cpu * 4
        devices = (DeviceRequest("nvidia", count, memory_mib=int(cores * 40), core_milli=cores),) if count else ()
        pods.append(Pod(f"demo-{i:05d}", containers=(ContainerRequest("main", cpu, mem, devices),)))
    return pods


def register(app: typer.Typer) -> None:
    @app.command("demo")
    def demo(
        cluster: Annotated[Path | None, typer.Option("--cluster", help=cluster_option_help())] = None,
        pod_count: Annotated[int | None, typer.Option(
            "--pod-count", min=1, max=1_000_000,
            help="How many synthetic pods to place (default 12000; at most 1,000,000).")] = None,
        old_pods: Annotated[int | None, deprecated_option("--pods", "--pod-count")] = None,
        seed: Annotated[int, typer.Option("--seed", min=0, help="Workload and tie-break seed (>= 0).")] = 1,
        policies: Annotated[
            list[str] | None, typer.Option("--placement-policy", help="Placement policies to compare "
                                                                     "(repeatable; default: every one).")
        ] = None,
        old_policies: Annotated[list[str] | None, deprecated_option("--policy", "--placement-policy")] = None,
        json_out: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
    ) -> None:
        """Place a synthetic GPU-sharing workload on the cluster with each policy; print a summary table."""
        from rich.progress import Progress

        from gpucluster.scheduler import PROFILES, Scheduler, profile_for

        console = common.console
        pods: int = renamed(pod_count, old_pods, "--pod-count", "--pods") or 12000
        policies = renamed(policies, old_policies, "--placement-policy", "--policy")
        c = load_cluster_or_fail(cluster)
        chosen = policies or sorted(PROFILES)
        workload = synthetic_pods(pods, seed)
        rows: list[dict[str, Any]] = []
        # the bar goes to stderr (shown where stderr is a terminal): stdout carries the result only
        with Progress(console=common.err_console, transient=True) as progress:
            for name in chosen:
                try:
                    profile = profile_for(name, seed)
                except ValueError as exc:
                    from gpucluster.cli.common import fail

                    fail(f"--placement-policy: {exc}")
                state = c.state()
                sched = Scheduler(state, profile)
                task = progress.add_task(common.plain(name), total=len(workload))
                placed = 0
                t0 = time.perf_counter()
                for pod in workload:
                    placed += sched.schedule_and_bind(pod).ok
                    progress.advance(task)
                elapsed = time.perf_counter() - t0
                tot = state.totals()
                rows.append({
                    "policy": name,
                    "pods": len(workload),
                    "placed": placed,
                    "gpu_allocation_pct": round(100 * tot["core_used_milli"] / max(tot["core_milli"], 1), 2),
                    "cpu_allocation_pct": round(100 * tot["cpu_used_milli"] / max(tot["cpu_milli"], 1), 2),
                    "decisions_per_s": round(len(workload) / elapsed, 1),
                })
        if json_out:
            print_json({"cluster": c.summary(), "results": rows})
            return
        s = c.summary()
        console.print(f"[bold]{common.plain(s['name'])}[/]: {s['nodes']} nodes, {s['gpus']} GPUs, "
                      f"{pods} synthetic pods")
        print_table(["policy", "placed", "GPU allocated %", "CPU allocated %", "decisions/s"],
                    [(str(r["policy"]), f"{r['placed']}/{r['pods']}", f"{r['gpu_allocation_pct']:.2f}",
                      f"{r['cpu_allocation_pct']:.2f}", f"{r['decisions_per_s']:.0f}") for r in rows],
                    title="placement of a synthetic GPU-sharing workload", right=(1, 2, 3, 4))
