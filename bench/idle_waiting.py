"""Where idle GPUs while work waits come from, on the mixed-table runs of ``bench/mixed_placement.py``.

    .venv/bin/python bench/idle_waiting.py [--cluster reference] [--trace philly] [--jobs 1200] [--seeds 0,1,2,3,4]
        [--queues fifo,default] [--placements stranding-fgd,gavel,default] [--tier-args '{"reserve_whole": false}']
        [--step 10] [--heads 3] [--json]

For each run (the same jobs and cluster as ``mixed_placement.py``: ``mixed_placement.trace`` and ``.cluster``), one
simulation gives the engine's ``idle_gpus_while_waiting`` and the periods of the arrival window when a job waits for
GPUs; a second, identical simulation probes the cluster every ``--step`` seconds inside those periods (a probe only
reads; the engine's figure and the probes' estimate agree to the sampling step) and splits the idle GPUs, per probe:

* ``whole``: on nodes with every GPU idle (a whole node no waiting job could take: a gang of several whole nodes
  waiting for more of one model, or a job held behind the queue's head);
* ``usable``: on partly used nodes with at least as many idle GPUs as the smallest task of a queued job (a queued
  job's task could start there: under ``fifo`` they wait behind the head, head-of-line blocking);
* ``stranded``: on partly used nodes with fewer idle GPUs than any queued task;
* ``reserved`` (overlaps the three): the idle GPUs in the holes that ``GpuSpeedTier``'s reserve
  (``reserve_long``/``reserve_whole``) counts for the queued long jobs -- per GPU model, for the jobs whose fastest
  model it is, ``min(k x tasks, sum over the model's nodes of k x (idle // k))`` per task size ``k``; counted under
  every placement (gavel and stranding-fgd hold no reserve: theirs is what the same holes come to without one).

Each is given as GPUs averaged over the arrival window (GPU-seconds / window seconds; ``idle_gpu_h_while_waiting_per_h``
is the engine's figure on the same scale). With ``--heads N`` it also prints, per run, the N queue heads (first queued
job) under which the most idle GPU-seconds passed. ``--tier-args`` runs speed-fgd with those ``GpuSpeedTier``
arguments (e.g. a rule off) as placement ``speed-fgd{args}``: the ablation that says whether a rule causes them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mixed_placement as mp

from gpucluster.jobs import JobSpec, make_policy
from gpucluster.jobs.placement import job_profile
from gpucluster.scheduler.plugins.gpuspeed import DEFAULT_LONG
from gpucluster.simulator import Simulation
from gpucluster.simulator.load import arrival_window
from gpucluster.spec import Cluster

KINDS = ("whole", "usable", "stranded", "reserved")


def simulation(c: Cluster, queue: str, placement: str, tier_args: dict[str, Any]) -> Simulation:
    if placement not in ("default", "speed-fgd") or not tier_args:
        return Simulation(c, queue, placement_policy=placement)
    prof = job_profile("speed-fgd", make_policy(queue), 0)
    plugins = [p.model_copy(update={"args": {**p.args, **tier_args}}) if p.name == "GpuSpeedTier" else p
               for p in prof.plugins]
    return Simulation(c, queue, profile=prof.model_copy(update={"plugins": plugins}))


def probe_times(sim: Simulation, w0: float, w1: float, step: float) -> list[float]:
    """Every ``step`` s inside the periods of [w0, w1] when a job waits for GPUs (from the run's series)."""
    t = np.array([p.time for p in sim.series], np.float64)
    wait = np.array([p.waiting_jobs for p in sim.series])
    edges = np.clip(np.append(t, np.inf), w0, w1)
    out: set[float] = set()
    for i in range(len(t)):
        if edges[i + 1] > edges[i] and wait[i] > 0:
            out.update(np.arange(np.ceil(edges[i] / step) * step, edges[i + 1], step).tolist())
    return sorted(out)


def split(sim: Simulation) -> tuple[dict[str, float], str]:
    """The idle GPUs now, by kind, and the queue's head (job id, GPUs, model)."""
    snap = sim.state.snapshot()
    idle = snap.node_idle.astype(np.float64)
    whole = idle >= snap.node_usable
    queued = sim.engine.views.queued()
    tasks = [j.spec.task_gpus for j in queued if j.spec.gpu_share > 0]
    least = min(tasks, default=0)
    part = idle[~whole]
    out = {"whole": float(idle[whole].sum()), "usable": float(part[part >= least].sum()),
           "stranded": float(part[part < least].sum()), "reserved": 0.0}
    node_model = snap.dev_model[:, 0]
    want = sim.speeds.queued_long_tasks(snap.models, DEFAULT_LONG)
    for m, per_size in enumerate(want or []):
        on = idle[node_model == m]
        for k, n in per_size.items():
            size = max(int(k), 1)
            out["reserved"] += min(float(np.floor_divide(on, size).sum()) * size, n * size)
    head: JobSpec | None = queued[0].spec if queued else None
    return out, (f"{head.job_id} ({head.num_gpus} GPUs, {head.model})" if head else "-")


def measure(c: Cluster, jobs: list[JobSpec], queue: str, placement: str, tier_args: dict[str, Any],
            step: float) -> dict[str, Any]:
    w0, w1 = arrival_window(jobs)
    first = simulation(c, queue, placement, tier_args)
    first.submit_many(jobs)
    first.run()
    s = first.summary()
    sim = simulation(c, queue, placement, tier_args)
    sim.submit_many(jobs)
    acc = dict.fromkeys(KINDS, 0.0)
    heads: dict[str, float] = {}

    def probe() -> None:
        if not sim.engine.waiting_for_gpus():
            return
        kinds, head = split(sim)
        for k, v in kinds.items():
            acc[k] += v * step
        heads[head] = heads.get(head, 0.0) + (kinds["whole"] + kinds["usable"] + kinds["stranded"]) * step

    for t in probe_times(first, w0, w1, step):
        sim.at(t, probe)
    sim.run()
    span = max(w1 - w0, 1e-9)
    return {
        "idle_gpus_while_waiting": float(s.get("idle_gpus_while_waiting", 0.0)),
        "idle_gpu_h_while_waiting_per_h": float(s.get("idle_gpu_h_while_waiting_per_h", 0.0)),
        "waiting_share_window": float(s.get("waiting_share_window", 0.0)),
        "probed_per_h": sum(acc[k] for k in ("whole", "usable", "stranded")) / span,
        **{f"{k}_per_h": v / span for k, v in acc.items()},
        "avg_jct_s": s["avg_jct_s"],
        "heads": sorted(((round(v / span, 3), h) for h, v in heads.items()), reverse=True),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--cluster", default="reference")
    ap.add_argument("--trace", default="philly")
    ap.add_argument("--jobs", type=int, default=1200)
    ap.add_argument("--seeds", default="0,1,2,3,4")
    ap.add_argument("--queues", default="fifo,default")
    ap.add_argument("--placements", default=",".join(mp.PLACEMENTS))
    ap.add_argument("--tier-args", default="{}", help="GpuSpeedTier arguments for speed-fgd (JSON)")
    ap.add_argument("--philly", type=Path, default=mp.PHILLY)
    ap.add_argument("--step", type=float, default=10.0, help="seconds between probes")
    ap.add_argument("--heads", type=int, default=0, help="print the N heads with the most idle GPU-seconds")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    tier_args = json.loads(a.tier_args)
    c = mp.cluster(a.cluster)
    rows: list[dict[str, Any]] = []
    if not a.json:
        print("| seed | queue | placement | idle GPUs while work waits | idle GPU-h while waiting / h (probes) | "
              "whole nodes | usable by a queued task | stranded | in reserved holes | top heads |")
        print("|---|---|---|---|---|---|---|---|---|---|")
    for seed in (int(x) for x in a.seeds.split(",")):
        jobs = mp.trace(a.trace, c, a.jobs, a.philly, seed)
        for queue in a.queues.split(","):
            for placement in a.placements.split(","):
                r = measure(c, jobs, queue, placement, tier_args, a.step)
                name = "speed-fgd" if placement == "default" else placement
                if tier_args and name == "speed-fgd":
                    name += json.dumps(tier_args, sort_keys=True)
                r.update(cluster=a.cluster, trace=a.trace, seed=seed, queue=queue, placement=name)
                rows.append(r)
                if not a.json:
                    top = "; ".join(f"{h} {v:.2f}" for v, h in r["heads"][:a.heads])
                    print(f"| {seed} | {queue} | {name} | {r['idle_gpus_while_waiting']:.2f} | "
                          f"{r['idle_gpu_h_while_waiting_per_h']:.3f} ({r['probed_per_h']:.3f}) | "
                          f"{r['whole_per_h']:.3f} | {r['usable_per_h']:.3f} | {r['stranded_per_h']:.3f} | "
                          f"{r['reserved_per_h']:.3f} | {top or '-'} |", flush=True)
    if a.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
