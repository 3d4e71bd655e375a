"""``gpucluster experiment``: reproducible placement experiments (the FGD paper on the openb trace)."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from gpucluster.cli import common
from gpucluster.cli.common import deprecated_option, fail, print_json, renamed
from gpucluster.cli.output import print_table

if TYPE_CHECKING:  # rich and the engine are imported where a command runs, not to build its parameters
    from rich.progress import Progress

    from gpucluster.simulator.experiments.fgd_engine import PolicyName

app = typer.Typer(help="Placement experiments (FGD reproduction and policy comparisons).", no_args_is_help=True)


def _progress() -> Progress:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=common.err_console, transient=True)


def _seeds(text: str) -> list[int]:
    from gpucluster.simulator.experiments import fgd

    try:
        return fgd.parse_seeds(text)
    except ValueError as exc:
        fail(f"--seeds {text!r}: {exc} (use e.g. 42-51 or 42,43)")


def _policy(name: str, flag: str = "--placement-policy") -> PolicyName:
    from gpucluster.simulator.experiments import fgd

    try:
        return fgd.resolve_policy(name)
    except ValueError as exc:
        fail(f"{flag}: {exc}")


def _check_inflation(inflation: float) -> None:
    """``--inflation``: within (0, 10] (NaN is not; a NaN or huge one made ``fgd-sweep`` run for ever)."""
    if not 0 < inflation <= 10:
        fail(f"--inflation {inflation}: must be in (0, 10]")


INFLATION_HELP = "Arrived GPU request / cluster GPUs, in (0, 10]."


def _workload_name(path: Path) -> str:
    return path.stem.removeprefix("openb_pod_list_")


@app.command("fgd")
def fgd_cmd(
    nodes: Annotated[Path, typer.Option("--nodes", help="openb node list CSV (sn,cpu_milli,memory_mib,gpu,model).")],
    pods: Annotated[Path, typer.Option("--pods", help="openb pod list CSV (any variant).")],
    policy: Annotated[str | None, typer.Option(
        "--placement-policy", help="random, dotprod, clustering, packing, bestfit, fgd (default), or default (the "
                                   "scheduler's default policy).")] = None,
    old_policy: Annotated[str | None, deprecated_option("--policy", "--placement-policy")] = None,
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 42-51 or 42,43.")] = "42-51",
    inflation: Annotated[float, typer.Option("--inflation", help=INFLATION_HELP)] = 1.3,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write peer-shaped CSVs, PNG plots, result.json.")] = None,
) -> None:
    """Replay a pod list on a node list with one policy over seeds (the FGD paper's method)."""
    from gpucluster.simulator.experiments import fgd
    from gpucluster.simulator.traces import TraceError
    from gpucluster.simulator.traces.openb import load_nodes, load_pods

    pol = _policy(renamed(policy, old_policy, "--placement-policy", "--policy") or "fgd")
    seed_list = _seeds(seeds)
    _check_inflation(inflation)
    if out is not None:  # before the seeds run
        common.check_out_dir(out)
    try:
        node_list = load_nodes(nodes)
        pod_list = load_pods(pods)
    except TraceError as exc:
        fail(str(exc))
    workload = _workload_name(pods)
    tgt = fgd.target_workload(pod_list)
    result = fgd.ExperimentResult(workload, pol.value, inflation, sum(n.gpus for n in node_list))
    with _progress() as prog:
        task = prog.add_task(f"{common.plain(workload)} / {pol.value}", total=len(seed_list))
        for s in seed_list:
            result.seeds.append(fgd.run_seed(node_list, pod_list, pol, s, inflation, tgt))
            prog.advance(task)
    data = fgd.result_json(result)
    if out is not None:
        with common.staged_out(out) as stage:  # all of them or none
            fgd.write_peer_csvs([result], stage)
            fgd.plot_experiment(result, stage)
            (stage / "result.json").write_text(json.dumps(data, indent=2))
    if as_json:
        print_json(data)
        return
    alloc = result.mean("allocation")
    frag = result.mean("fragmentation")
    print_table(["arrived %", "allocation %", "fragmentation %"],
                [(str(k), f"{alloc[k]:.2f}", f"{frag.get(k, float('nan')):.2f}")
                 for k in (50, 80, 90, 100, 110, 120, 130) if k in alloc],
                title=f"{workload}: {pol.value}, seeds {seed_list[0]}..{seed_list[-1]} ({len(seed_list)})",
                right=(0, 1, 2))
    common.console.print(f"unallocated GPUs at 130%: {result.unallocated_gpus_at(130):.1f} of {result.total_gpus}")
    if out is not None:
        common.console.print(f"wrote {out}", markup=False)


@app.command("fgd-sweep")
def fgd_sweep_cmd(
    trace_dir: Annotated[Path, typer.Option("--trace-dir",
                                            help="Folder with openb_*.csv (and fgd-expected-results/).")],
    out: Annotated[Path, typer.Option("--out", help="Output folder (runs are resumed from it).")],
    policies: Annotated[str, typer.Option("--policies", help="Comma-separated policies.")] =
        "random,dotprod,clustering,packing,bestfit,fgd",
    workloads: Annotated[str, typer.Option("--workloads", help="Comma-separated workloads (default: the 13 "
                                                               "with published results).")] = "",
    seeds: Annotated[str, typer.Option("--seeds", help="Seeds, e.g. 42-51.")] = "42-51",
    inflation: Annotated[float, typer.Option("--inflation", help=INFLATION_HELP)] = 1.3,
    jobs: Annotated[int, typer.Option("--jobs", min=0, max=1024,
                                      help="Worker processes (default 0: all cores; at most 1024).")] = 0,
    ray_address: Annotated[str | None, typer.Option(
        "--ray-address", envvar="RAY_ADDRESS",
        help="Run on this Ray cluster instead of local processes (HOST:PORT of the head, ray://HOST:10001, or "
             "auto); needs pip install 'gpucluster[ray]' and gpucluster on the workers. Results are identical "
             "to a local sweep.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Every (workload, policy, seed) in parallel (local processes or a Ray cluster), resumable; then comparison
    figures and a summary table."""
    from gpucluster.simulator.experiments import fgd
    from gpucluster.simulator.experiments.executor import ExecutorError, executor_for
    from gpucluster.simulator.traces import TraceError
    from gpucluster.simulator.traces.openb import load_nodes, load_pods

    pols = [_policy(p.strip(), "--policies").value for p in policies.split(",") if p.strip()]
    wls = [w.strip() for w in workloads.split(",") if w.strip()] or list(fgd.PUBLISHED_WORKLOADS)
    seed_list = _seeds(seeds)
    _check_inflation(inflation)
    common.check_out_dir(out)
    if not (trace_dir / fgd.NODE_FILE).is_file():
        fail(f"--trace-dir {trace_dir}: no {fgd.NODE_FILE} there")
    missing = [w for w in wls if not (trace_dir / f"openb_pod_list_{w}.csv").is_file()]
    if missing:
        fail(f"--workloads: no pod list for {', '.join(missing)} in {trace_dir}")
    try:
        total_gpus = sum(n.gpus for n in load_nodes(trace_dir / fgd.NODE_FILE))
        for w in wls:
            load_pods(trace_dir / f"openb_pod_list_{w}.csv")
    except TraceError as exc:
        fail(str(exc))
    _keep_sweep_inflation(out, inflation)
    tasks = fgd.sweep_tasks(trace_dir, out, wls, pols, seed_list, inflation)
    todo = [t for t in tasks if not Path(t.out_file).is_file()]
    payload = fgd.sweep_payload(trace_dir, sorted({t.workload for t in todo}))
    try:
        executor = executor_for(jobs, ray_address, len(todo))
    except ExecutorError as exc:
        fail(f"--ray-address: {exc}")
    common.err_console.print(f"sweep: {len(todo)} runs to do ({len(tasks) - len(todo)} already done) on "
                      f"{executor.description}", highlight=False, markup=False)
    try:
        with _progress() as prog:
            bar = prog.add_task(f"sweep ({len(tasks) - len(todo)} already done)", total=len(todo))
            for task, text, _ in executor.map_unordered(fgd.compute_sweep_task, todo, (payload,)):
                fgd.write_sweep_result(task, text)
                prog.advance(bar)
    finally:
        executor.close()
    results = fgd.collect_sweep(out, wls, pols, seed_list, inflation, total_gpus)
    published_csv = trace_dir / "fgd-expected-results" / "analysis_allo_discrete.csv"
    published = fgd.load_published(published_csv) if published_csv.is_file() else None
    figures = out / "figures"
    for w, rs in results.items():
        fgd.plot_comparison(rs, w, figures / f"{w}_allocation.png")
    fgd.write_peer_csvs([r for rs in results.values() for r in rs], out)
    rows = fgd.summary_rows(results, published)
    _write_summary(rows, out)
    if as_json:
        print_json({"runs": len(tasks), "ran_now": len(todo), "summary": rows})
        return
    # the terminal gets the columns that answer "do we match the paper at 130 %?"; every column is in
    # summary.csv / summary.md and --json
    cols = {"workload": "WORKLOAD", "policy": "POLICY", "ours_130": "OURS@130", "published_130": "PAPER@130",
            "delta_130": "DELTA@130"}
    if any("vs_fgd_130" in r for r in rows):
        cols["vs_fgd_130"] = "VS-FGD@130"
    print_table(list(cols.values()), [[("" if r.get(c) is None else str(r.get(c))) for c in cols] for r in rows],
                title=f"mean GPU allocation %, seeds {seed_list[0]}..{seed_list[-1]}", right=range(2, len(cols)))
    common.console.print(f"wrote {out / 'summary.csv'}, {out / 'summary.md'} and {figures}/", markup=False)


SWEEP_META = "sweep.json"
"""In a sweep's ``--out``: ``{"inflation": X}``, what its runs were made with (their files do not say it)."""


def _keep_sweep_inflation(out: Path, inflation: float) -> None:
    """A sweep resumes from the runs in ``out``: only runs made at the same ``--inflation`` may be reused. The
    first sweep into ``out`` records its inflation; one with another exits 2 (its runs would have been reused
    as if made at the new inflation, and the summary labelled so)."""
    meta = out / SWEEP_META
    if meta.is_file():
        try:
            recorded = float(json.loads(meta.read_text(encoding="utf-8"))["inflation"])
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
            fail(f"--out {out}: {SWEEP_META} is unreadable ({type(exc).__name__}); it says which --inflation the "
                 "runs there were made with: remove the folder's runs/ with it, or give another --out")
        if recorded != inflation:
            fail(f"--inflation {inflation:g}: --out {out} holds a sweep at inflation {recorded:g}, whose runs "
                 f"would be reused as if made at {inflation:g}; give --inflation {recorded:g} to resume it, or "
                 "another --out")
        return
    if (out / "runs").is_dir():
        common.err_console.print(f"note: {out}/runs was made before sweeps recorded their inflation; its runs are "
                                 f"taken as made at --inflation {inflation:g}", highlight=False, markup=False)
    try:
        out.mkdir(parents=True, exist_ok=True)
        tmp = meta.with_suffix(".tmp")
        tmp.write_text(json.dumps({"inflation": inflation}) + "\n", encoding="utf-8")
        tmp.replace(meta)
    except OSError as exc:
        fail(f"--out {out}: {exc.strerror or exc}")


def _write_summary(rows: list[dict[str, Any]], out: Path) -> None:
    cols = ["workload", "policy", "seeds", "ours_100", "published_100", "delta_100", "ours_130", "published_130",
            "delta_130"]
    if any("vs_fgd_130" in r for r in rows):
        cols += ["fgd_published_100", "vs_fgd_100", "fgd_published_130", "vs_fgd_130"]
    with (out / "summary.csv").open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join("" if r.get(c) is None else str(r.get(c)) for c in cols) + " |" for r in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="experiment")
