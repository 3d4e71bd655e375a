"""Scheduling decisions per second, p99 decision latency and peak RSS as the cluster grows.

    .venv/bin/python bench/scale.py                                   # the whole table (about 10 min, quiet)
    .venv/bin/python bench/scale.py --nodes 9704 --policies binpack,default
    .venv/bin/python bench/scale.py --nodes 9704 --policies default --pods 5000 --profile 25

Cluster: the Alibaba openb GPU nodes (``openb_node_list_gpu_node.csv``, 1,213 nodes, 6,212 GPUs) replicated
until it has ``--nodes`` nodes (node names get ``-r<k>`` so names and device uuids stay unique; 1,213, 4,852,
9,704 and 19,408 are 1x, 4x, 8x and 16x). Pods: ``openb_pod_list_default.csv`` sampled with replacement
(seed 42), ``--pods`` of them, each through one full framework cycle (PreFilter, Filter over all nodes, Score,
Reserve with device choice, assume, bind) with the public API (``ClusterState``, ``Scheduler``, ``profile_for``);
failed placements count as decisions, nothing leaves.

Every (nodes, policy) runs in a fresh child process, one after the other, so that peak RSS is that config's
own and no run inherits another's caches; children run numpy's BLAS on one thread (one core). Per config:
decisions/s (wall), decisions per CPU second (``time.process_time``: less disturbed when other jobs share the
machine), p50/p99 decision latency, peak RSS (``ru_maxrss`` of the child, the cluster and pods included) and the
ratio of decisions/s to binpack's at the same size in the same run (the load-independent figure: both see the
same machine).

``--profile N`` instead runs each config in this process under cProfile and prints its N top entries by own
time. ``--json`` prints the rows as JSON; ``--markdown`` prints the table as docs/benchmarks.md records it.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.model import ClusterState, NodeSpec, Pod
from gpucluster.scheduler import Scheduler, profile_for
from gpucluster.simulator.traces import openb

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"
BASE_NODES = 1213
DEFAULT_NODES = (1 * BASE_NODES, 4 * BASE_NODES, 8 * BASE_NODES, 16 * BASE_NODES)
DEFAULT_POLICIES = ("binpack", "spread", "fgd", "default")
ONE_CORE = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Children run numpy's BLAS on one thread: the figures are per core."""


def cluster(n_nodes: int, traces: Path = TRACES) -> list[NodeSpec]:
    """The openb GPU nodes replicated to ``n_nodes`` (names ``<sn>-r<k>``, so device uuids are unique too)."""
    base = openb.load_nodes(traces / "openb_node_list_gpu_node.csv")
    out: list[openb.OpenbNode] = []
    k = 0
    while len(out) < n_nodes:
        out += [openb.OpenbNode(f"{n.name}-r{k}", n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in base]
        k += 1
    return openb.to_node_specs(out[:n_nodes])


def workload(n_pods: int, seed: int = 42, traces: Path = TRACES) -> list[Pod]:
    """``n_pods`` pods sampled with replacement from the default mix."""
    pods = openb.load_pods(traces / "openb_pod_list_default.csv")
    picks = np.random.default_rng(seed).integers(0, len(pods), size=n_pods)
    return [openb.to_pod(pods[k], name=f"p{i:06d}") for i, k in enumerate(picks)]


def measure(n_nodes: int, policy: str, n_pods: int, seed: int = 42) -> dict[str, Any]:
    """One config in this process: build, schedule ``n_pods``, return the figures."""
    state = ClusterState(cluster(n_nodes))
    pods = workload(n_pods, seed)
    sched = Scheduler(state, profile_for(policy, seed))
    lat = np.empty(n_pods, np.int64)
    placed = 0
    clock = time.perf_counter_ns
    cpu0, t0 = time.process_time(), clock()
    for i, pod in enumerate(pods):
        s = clock()
        placed += sched.schedule_and_bind(pod).ok
        lat[i] = clock() - s
    wall = (clock() - t0) / 1e9
    cpu = time.process_time() - cpu0
    tot = state.totals()
    return {
        "nodes": n_nodes, "gpus": tot["devices"], "policy": policy, "pods": n_pods, "placed": placed,
        "seconds": round(wall, 3), "cpu_seconds": round(cpu, 3),
        "decisions_per_s": round(n_pods / wall, 1), "decisions_per_cpu_s": round(n_pods / cpu, 1) if cpu else None,
        "p50_ms": round(float(np.percentile(lat, 50)) / 1e6, 3),
        "p99_ms": round(float(np.percentile(lat, 99)) / 1e6, 3),
        "max_ms": round(float(lat.max()) / 1e6, 3),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "gpu_allocated_pct": round(100 * tot["core_used_milli"] / tot["core_milli"], 2),
    }


def run_child(n_nodes: int, policy: str, n_pods: int, seed: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", "--nodes", str(n_nodes), "--policies", policy,
           "--pods", str(n_pods), "--seed", str(seed)]
    env = {**os.environ, **ONE_CORE}
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{n_nodes} nodes / {policy}: child failed ({done.returncode}):\n{done.stderr}")
    row: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return row


def profile(n_nodes: int, policy: str, n_pods: int, seed: int, top: int) -> None:
    state = ClusterState(cluster(n_nodes))
    pods = workload(n_pods, seed)
    sched = Scheduler(state, profile_for(policy, seed))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    for pod in pods:
        sched.schedule_and_bind(pod)
    prof.disable()
    wall = time.perf_counter() - t0
    print(f"== {n_nodes} nodes, {policy}, {n_pods} pods: {wall:.1f} s under cProfile ({n_pods / wall:.0f}/s)")
    pstats.Stats(prof).strip_dirs().sort_stats("tottime").print_stats(top)


def _int_list(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers") from None
    if not out or min(out) <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: node counts must be positive")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--nodes", type=_int_list, default=list(DEFAULT_NODES), help="comma-separated node counts")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES), help="comma-separated policies")
    ap.add_argument("--pods", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--profile", type=int, default=0, metavar="N", help="cProfile each config, print N entries")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    ap.add_argument("--markdown", action="store_true", help="print a markdown table")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if not (TRACES / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {TRACES}")
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.child:
        print(json.dumps(measure(args.nodes[0], policies[0], args.pods, args.seed)))
        return
    if args.profile:
        for n in args.nodes:
            for p in policies:
                profile(n, p, args.pods, args.seed, args.profile)
        return
    load0 = os.getloadavg()[0]
    if not args.json:
        print(f"machine: {os.cpu_count()} cores {platform.machine()}, python {platform.python_version()}, "
              f"numpy {np.__version__}, load average {load0:.1f} at start", flush=True)
    rows: list[dict[str, Any]] = []
    for n in args.nodes:
        at_size: dict[str, dict[str, Any]] = {}
        for p in policies:
            row = run_child(n, p, args.pods, args.seed)
            row["load_avg"] = round(os.getloadavg()[0], 1)
            at_size[p] = row
            rows.append(row)
            if not args.json and not args.markdown:
                print(f"{n:>6} nodes {p:<8} {row['decisions_per_s']:>8.0f}/s  "
                      f"{row['decisions_per_cpu_s']:>8.0f}/cpu-s  "
                      f"p99 {row['p99_ms']:>7.2f} ms  RSS {row['peak_rss_mib']:>6.0f} MiB  placed {row['placed']}  "
                      f"(load {row['load_avg']})", flush=True)
        base = at_size.get("binpack")
        for row in at_size.values():
            row["vs_binpack"] = round(row["decisions_per_s"] / base["decisions_per_s"], 3) if base else None
            row["vs_binpack_cpu"] = (round(row["decisions_per_cpu_s"] / base["decisions_per_cpu_s"], 3)
                                     if base and base["decisions_per_cpu_s"] else None)
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print()
    print("| nodes | GPUs | policy | placed | decisions/s | per CPU-s | vs binpack | p50 ms | p99 ms | peak RSS MiB "
          "| load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        vs = "" if r["vs_binpack"] is None else f"{r['vs_binpack']:.2f}"
        print(f"| {r['nodes']:,} | {r['gpus']:,} | {r['policy']} | {r['placed']:,} | {r['decisions_per_s']:,.0f} | "
              f"{r['decisions_per_cpu_s']:,.0f} | {vs} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
              f"{r['peak_rss_mib']:,.0f} | {r['load_avg']} |")


if __name__ == "__main__":
    main()
