"""FGD reproduction benchmark: seconds per experiment (fast path) and decisions/s through the plugins.

    .venv/bin/python bench/fgd_experiment.py [--pods 2000] [--policies random,...,fgd] [--sweep-cores 2]

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
from gpucluster.scheduler.profiles import FGD_PAPER_POLICIES, fgd_paper_profile
from gpucluster.scheduler.scheduler import Scheduler
from gpucluster.simulator.experiments.fgd import arrival_order, run_seed, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName
from gpucluster.simulator.traces.openb import load_nodes, load_pods, to_node_specs, to_pod

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=2000, help="pods scheduled through the plugins per policy")
    ap.add_argument("--policies", default=",".join(FGD_PAPER_POLICIES))
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
        print(f"experiment  {p:10s} seed {args.seed}: {dt:6.2f} s for {res.pods} pods "
              f"({res.pods / dt:7.0f} pods/s), allocation@130 {res.curves['allocation'][130]:.2f}%")
    runs = 13 * 6 * 10
    print(f"sweep estimate: {runs} runs x {np.mean(per_run):.2f} s / {args.sweep_cores} cores = "
          f"{runs * np.mean(per_run) / args.sweep_cores / 60:.1f} min")
    order = arrival_order(pods, sum(n.gpus for n in nodes) * 1000, args.seed, 1.3)[: args.pods]
    model_pods = [to_pod(p, name=f"p{i}") for i, p in enumerate(order)]
    for p in policies:
        state = ClusterState(to_node_specs(nodes))
        fgd_args = {"target": tgt.to_json()} if p == "fgd" else None
        sched = Scheduler(state, fgd_paper_profile(p, args.seed, fgd_args),
                          handle=Handle(rng=np.random.default_rng([args.seed, 1])))
        t0 = time.perf_counter()
        ok = 0
        for mp in model_pods:
            ok += sched.schedule_and_bind(mp).ok
        dt = time.perf_counter() - t0
        print(f"plugins     {p:10s}: {len(model_pods) / dt:7.0f} decisions/s ({len(model_pods)} pods, {ok} placed, "
              f"{1000 * dt / len(model_pods):.2f} ms each)")


if __name__ == "__main__":
    main()
