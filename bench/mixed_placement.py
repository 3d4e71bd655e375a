"""Placements on mixed H100 + L40S clusters: stranding-fgd, gavel and the default (speed-fgd), per trace and queue
policy. Prints one markdown table (and ``--json`` rows).

    .venv/bin/python bench/mixed_placement.py [--jobs 800] [--clusters reference,half] \
        [--traces philly,synthetic,inference] [--queues fifo,default] [--seeds 0,1,2,3,4] [--json]

Clusters: ``reference`` = the built-in reference cluster (208 x 8 H100 + 32 x 8 L40S, 1,920 GPUs); ``half`` = the
same servers, 120 x 8 H100 + 120 x 8 L40S (1,920 GPUs).

Traces (``--jobs`` N jobs each, for each seed of ``--seeds``; default seed 0 only):

* ``philly``: N consecutive jobs by arrival of the Philly-derived trace (``../shared/traces/gavel-philly-derived/
  seed=0``, all 13 VC files merged, 15k jobs; training, work in V100 seconds, Gavel's job types): seed k takes
  the k-th window of N, jobs k x N .. (k + 1) x N - 1 by arrival (seed 0 = the first N), so the seeds are
  disjoint stretches of the same real arrival process (the trace has one Gavel seed, so there is nothing else
  to vary without inventing jobs); arrivals compressed so that the GPUs the jobs would keep busy over the
  arrival window (run times at their H100 speed, cut at the window's end) are 1.1 x the cluster's GPUs.
* ``synthetic``: ``synthetic:N:philly:1.1`` with the generator's seed k (training, work in H100 seconds).
* ``inference``: the same generator, every job of at most 2 GPUs turned into an inference job (work classes
  ``inference/llm-decode``, ``inference/mixed``, ``inference/llm-prefill`` in turn; about 3 in 4 jobs), the
  rest training; load 1.1.

Columns: average and p99 JCT of the completed jobs, GPU-hours of reference work done per hour (``work_ref_gpu_h``
over the makespan; it follows the last job's finish), the same over the arrival window only (``ref_work_per_h_
window``: reference GPU-hours of work done between the first and the last submission, per hour of that window;
the work of a job still running at the window's end counts up to there), idle GPUs (GPUs x (1 - utilisation over
the arrival window)), idle GPUs while work waits (``idle_gpus_while_waiting``: the GPUs no job holds, averaged
over the part of the arrival window in which a queued job waits for GPUs; a job held back only by its tenant's
quota does not count) and the GPU-hours they come to per hour of the window (``idle_gpu_h_while_waiting_per_h``;
``--json`` also keeps ``waiting_share_window``, the share of the window with a job waiting), and the share of
training work run on H100. Idle GPUs count the GPUs a placement frees by finishing work sooner; the two
while-waiting columns count only those that queued work could not get (stranded, or left by the admission
order). Every run is one :class:`gpucluster.simulator.Simulation` with the network model, to the end.

With several seeds (``--seeds 0,1,2,3,4``) the text output is one row per cluster, trace and queue: each column's
mean over the seeds for stranding-fgd / gavel / speed-fgd, the spread of speed-fgd's figure (min..max over the
seeds), the columns where speed-fgd's mean is more than 2 % from the best mean (lower is better except the
GPU-hours per hour), and those where its mean is better than stranding-fgd's. ``--json`` keeps one row per run
(with its ``seed``). One seed (the default) prints the per-run table as before.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from gpucluster.jobs import JobKind, JobSpec, default_speed_model
from gpucluster.jobs.speed import describe
from gpucluster.simulator import Simulation
from gpucluster.simulator.load import arrival_window
from gpucluster.simulator.traces.formats import main_gpu_model
from gpucluster.simulator.traces.philly import load_philly
from gpucluster.simulator.traces.synthetic import generate
from gpucluster.spec import Cluster, default_spec_text, load_cluster

PHILLY = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "gavel-philly-derived" / "seed=0"
PLACEMENTS = ("stranding-fgd", "gavel", "default")
LOAD = 1.1
INFER_CLASSES = ("inference/llm-decode", "inference/mixed", "inference/llm-prefill")


def cluster(name: str) -> Cluster:
    if name == "reference":
        return load_cluster(None)
    if name == "half":
        text = default_spec_text().replace("count: 208", "count: 120").replace("count: 32", "count: 120")
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as fh:
            fh.write(text.replace("name: seed-reference", "name: half-h100-half-l40s"))
        return load_cluster(fh.name)
    raise SystemExit(f"--clusters: unknown cluster {name!r} (reference, half)")


def _fast_work(job: JobSpec, model: str) -> float:
    """Reference GPU-seconds of ``job`` converted to seconds on ``model``."""
    d = describe(job)
    speed = default_speed_model().factor(d, model) if d is not None else 1.0
    return job.gpu_share * job.duration_s / speed


def _compress(jobs: list[JobSpec], gpus: int, model: str, load: float) -> list[JobSpec]:
    """Scale arrival times so that the GPUs the jobs would keep busy over the arrival window (each job's GPUs x its
    run time on ``model``, cut at the window) are ``load`` x the cluster's GPUs (bisection on the window)."""
    jobs = sorted(jobs, key=lambda j: j.submit_s)
    t0 = jobs[0].submit_s
    span = jobs[-1].submit_s - t0
    runs = [(j.gpu_share, _fast_work(j, model) / max(j.gpu_share, 1e-9)) for j in jobs]

    def busy(window: float) -> float:
        return sum(g * min(d, window) for g, d in runs) / window

    lo, hi = 1.0, max(span, 1.0) * 10.0
    for _ in range(60):  # busy() falls as the window grows
        mid = (lo * hi) ** 0.5
        lo, hi = (mid, hi) if busy(mid) > load * gpus else (lo, mid)
    k = hi / span if span > 0 else 1.0
    return [replace(j, submit_s=(j.submit_s - t0) * k) for j in jobs]


def trace(name: str, c: Cluster, n: int, philly: Path = PHILLY, seed: int = 0) -> list[JobSpec]:
    gpus = sum(len(x.devices) for x in c.nodes)
    model = main_gpu_model(c)
    if name == "philly":
        jobs = sorted(load_philly(philly), key=lambda j: j.submit_s)
        jobs = [j for j in jobs if j.num_gpus * max(j.replicas, 1) <= gpus][seed * n:(seed + 1) * n]
        if len(jobs) < n:
            raise SystemExit(f"--seeds: the Philly-derived trace has no {n} jobs for seed {seed}")
        return _compress(jobs, gpus, model, LOAD)
    base = generate(n, gpus, profile="philly", load=LOAD, seed=seed, ref_gpu=model)
    if name == "synthetic":
        return base
    if name == "inference":
        out, k = [], 0
        for j in base:
            if j.gpu_share <= 2:
                j = replace(j, kind=JobKind.INFER, work_class=INFER_CLASSES[k % len(INFER_CLASSES)])
                k += 1
            out.append(j)
        return out
    raise SystemExit(f"--traces: unknown trace {name!r} (philly, synthetic, inference)")


def measure(c: Cluster, jobs: list[JobSpec], queue: str, placement: str) -> dict[str, Any]:
    start = time.perf_counter()
    sim = Simulation(c, queue, placement_policy=placement)
    sim.submit_many(jobs)
    w0, w1 = arrival_window(jobs)
    in_window: list[float] = []

    def probe() -> None:  # the reference work kept by the window's end (what is done, or done so far)
        in_window.append(sum(j.spec.gpu_share * j.progress_at(sim.now) for j in sim.jobs.values()))

    sim.at(w1, probe)
    sim.run()
    s = sim.summary()
    gpus = sim.totals.gpus
    rep = sim.placement_report()
    share = rep.get("training_share_by_model", {})
    h100 = sum(v for m, v in share.items() if m.startswith("H100"))
    return {
        "placement": rep["placement_in_use"], "avg_jct_s": s["avg_jct_s"], "p99_jct_s": s["p99_jct_s"],
        "ref_work_per_h": s["work_ref_gpu_h"] / (s["makespan_s"] / 3600.0) if s["makespan_s"] > 0 else 0.0,
        "idle_gpus": gpus * (1.0 - float(s.get("gpu_utilization_window", s["gpu_utilization"]))),
        "idle_gpus_while_waiting": float(s.get("idle_gpus_while_waiting", 0.0)),
        "idle_gpu_h_while_waiting_per_h": float(s.get("idle_gpu_h_while_waiting_per_h", 0.0)),
        "waiting_share_window": float(s.get("waiting_share_window", 0.0)),
        "training_on_h100": h100, "completed": s["jobs_completed"], "jobs": s["jobs"],
        "wall_s": round(time.perf_counter() - start, 1),
        "ref_work_per_h_window": in_window[0] / (w1 - w0) if in_window and w1 > w0 else 0.0,
    }


# (key, header, higher is better, format)
COLUMNS = (("avg_jct_s", "avg JCT s", False, "{:,.0f}"), ("p99_jct_s", "p99 JCT s", False, "{:,.0f}"),
           ("ref_work_per_h", "ref GPU-h / h", True, "{:,.1f}"),
           ("ref_work_per_h_window", "ref GPU-h / h in window", True, "{:,.1f}"),
           ("idle_gpus", "idle GPUs", False, "{:,.1f}"),
           ("idle_gpus_while_waiting", "idle GPUs while work waits", False, "{:,.1f}"),
           ("idle_gpu_h_while_waiting_per_h", "idle GPU-h while waiting / h", False, "{:,.1f}"))


def summarise(rows: list[dict[str, Any]]) -> list[str]:
    """Markdown lines: per cluster, trace and queue, the means over seeds (and speed-fgd's spread), speed-fgd's
    misses (> 2 % from the best mean) and the columns where its mean beats stranding-fgd's."""
    groups: dict[tuple[str, str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["cluster"], r["trace"], r["queue"]), {}).setdefault(r["placement"], []).append(r)
    seeds = sorted({r["seed"] for r in rows})
    present = {r["placement"] for r in rows}
    order = " / ".join(("**speed-fgd**" if p == "speed-fgd" else p.replace("stranding-fgd", "sfgd"))
                       for p in ("stranding-fgd", "gavel", "speed-fgd") if p in present)
    head = ["cluster", "trace", "queue"]
    for _, title, _, _ in COLUMNS:
        head += [f"{title}: {order} (speed-fgd min..max)"]
    head += ["training on H100", "speed-fgd misses on the mean (> 2 % from best)", "better than stranding-fgd on"]
    out = [f"Means over seeds {','.join(map(str, seeds))}.", "", "| " + " | ".join(head) + " |",
           "|" + "---|" * len(head)]
    for (cname, tname, queue), by in groups.items():
        names = [p for p in ("stranding-fgd", "gavel", "speed-fgd") if p in by]
        cells = [cname, tname, queue]
        misses, better = [], []
        for key, title, up, fmt in COLUMNS:
            mean = {p: sum(r[key] for r in by[p]) / len(by[p]) for p in names}
            txt = " / ".join((f"**{fmt.format(mean[p])}**" if p == "speed-fgd" else fmt.format(mean[p]))
                             for p in names)
            if "speed-fgd" in by:
                vals = [r[key] for r in by["speed-fgd"]]
                txt += f" ({fmt.format(min(vals))}..{fmt.format(max(vals))})"
                me = mean["speed-fgd"]
                best = max(mean.values()) if up else min(mean.values())
                if best:
                    gap = (me - best) / best
                    if (-gap if up else gap) > 0.02:
                        misses.append(f"{title} {100 * gap:+.0f} %")
                elif me != best:  # the best is 0: any other figure misses (no percentage of 0)
                    misses.append(f"{title} {fmt.format(me)} against 0")
                if "stranding-fgd" in mean and (me > mean["stranding-fgd"] if up else me < mean["stranding-fgd"]):
                    better.append(title)
            cells.append(txt)
        cells.append(" / ".join(f"{100 * sum(r['training_on_h100'] for r in by[p]) / len(by[p]):.0f}%"
                                for p in names))
        cells += [", ".join(misses) or "-", ", ".join(better) or "-"]
        out.append("| " + " | ".join(cells) + " |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--jobs", type=int, default=800)
    ap.add_argument("--clusters", default="reference,half")
    ap.add_argument("--traces", default="philly,synthetic,inference")
    ap.add_argument("--queues", default="fifo,default")
    ap.add_argument("--placements", default=",".join(PLACEMENTS))
    ap.add_argument("--philly", type=Path, default=PHILLY, help="the Philly-derived trace folder (seed=0)")
    ap.add_argument("--seeds", default="0", help="comma-separated seeds (generator seed; Philly window)")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    seeds = [int(x) for x in a.seeds.split(",")]
    if "philly" in a.traces and not a.philly.is_dir():
        raise SystemExit(f"Philly-derived trace not found at {a.philly}")
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        for cname in a.clusters.split(","):
            c = cluster(cname)
            for tname in a.traces.split(","):
                jobs = trace(tname, c, a.jobs, a.philly, seed)
                for queue in a.queues.split(","):
                    for placement in a.placements.split(","):
                        r = {"cluster": cname, "trace": tname, "queue": queue,
                             **measure(c, jobs, queue, placement), "seed": seed}
                        rows.append(r)
                        print(json.dumps(r), file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))
        return
    if len(seeds) > 1:
        print("\n".join(summarise(rows)))
        return
    print("| cluster | trace | queue | placement | avg JCT s | p99 JCT s | ref GPU-h / h | idle GPUs | "
          "idle GPUs while work waits | idle GPU-h while waiting / h | training on H100 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['cluster']} | {r['trace']} | {r['queue']} | {r['placement']} | {r['avg_jct_s']:,.0f} | "
              f"{r['p99_jct_s']:,.0f} | {r['ref_work_per_h']:,.1f} | {r['idle_gpus']:,.1f} | "
              f"{r['idle_gpus_while_waiting']:,.1f} | {r['idle_gpu_h_while_waiting_per_h']:,.1f} | "
              f"{100 * r['training_on_h100']:.1f}% |")


if __name__ == "__main__":
    main()
