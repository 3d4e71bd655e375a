"""FGD reproduction benchmark: seconds per experiment (fast path) and decisions/s through the plugins.

    .venv/bin/python bench/fgd_experiment.py [--pods 2000 | 0] [--policies random,...,stranding-fgd]

Prints, for the ``default`` workload of the openb trace (1,213 nodes, ~10k pods after 1.3x inflation):
* one experiment (one policy, one seed) on one core, per policy, and the implied 780-run sweep time on the
  given number of cores;
* scheduling decisions per second through the generic framework with each policy's plugins (the path the
  online scheduler and the Kubernetes extender use), on the first ``--pods`` pods of that workload.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path

import numpy as np

from gpucluster.model import ClusterState
from gpucluster.scheduler.framework import Handle
from gpucluster.scheduler.profiles import FGD_PAPER_POLICIES, fgd_paper_profile, stranding_fgd_profile
from gpucluster.scheduler.scheduler import Scheduler
from gpucluster.simulator.experiments.fgd import arrival_order, run_seed, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName
from gpucluster.simulator.traces.openb import load_nodes, load_pods, to_node_specs, to_pod

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000,
                    help="pods scheduled through the plugins per policy (0 = the whole 1.3x arrival order)")
    ap.add_argument("--policies", default=",".join([*FGD_PAPER_POLICIES, "stranding-fgd"]))
    ap.add_argument("--sweep-cores", type=int, default=2)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    nodes = load_nodes(TRACES / "openb_node_list_gpu_node.csv")
    pods = load_pods(TRACES / "openb_pod_list_default.csv")
    tgt = target_workload(pods)
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    print(f"machine: {platform.node()} {platform.machine()} python {platform.python_version()}")
    print(f"nodes {len(nodes)}, GPUs {sum(n.gpus for n in nodes)}, pods {len(pods)}")
    per_run = []
    for p in policies:
        t0 = time.perf_counter()
        res = run_seed(nodes, pods, PolicyName(p), args.seed, 1.3, tgt)
        dt = time.perf_counter() - t0
        per_run.append(dt)
        print(f"experiment  {p:13s} seed {args.seed}: {dt:6.2f} s for {res.pods} pods "
              f"({res.pods / dt:7.0f} pods/s), allocation@130 {res.curves['allocation'][130]:.2f}%")
    runs = 13 * len(policies) * 10
    print(f"sweep estimate: {runs} runs x {np.mean(per_run):.2f} s / {args.sweep_cores} cores = "
          f"{runs * np.mean(per_run) / args.sweep_cores / 60:.1f} min")
    order = arrival_order(pods, sum(n.gpus for n in nodes) * 1000, args.seed, 1.3)
    order = order[: args.pods] if args.pods > 0 else order
    model_pods = [to_pod(p, name=f"p{i}") for i, p in enumerate(order)]
    for p in policies:
        state = ClusterState(to_node_specs(nodes))
        fgd_args = {"target": tgt.to_json()} if p in ("fgd", "stranding-fgd") else None
        profile = (stranding_fgd_profile(args.seed, fgd_args) if p == "stranding-fgd"
                   else fgd_paper_profile(p, args.seed, fgd_args))
        sched = Scheduler(state, profile,
                          handle=Handle(rng=np.random.default_rng([args.seed, 1])))
        t0, c0 = time.perf_counter(), time.process_time()
        ok = 0
        for mp in model_pods:
            ok += sched.schedule_and_bind(mp).ok
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        n = len(model_pods)
        print(f"plugins     {p:13s}: {n / dt:7.0f} decisions/s wall, {n / dc:7.0f} per CPU s "
              f"({n} pods, {ok} placed, {1000 * dt / n:.2f} ms each)")


if __name__ == "__main__":
    main()
