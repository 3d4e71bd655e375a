"""Decision hashes: one SHA-256 per workload over every placement decision, to show a refactor kept decisions.

    .venv/bin/python bench/decision_hash.py [--pods 4000] [--fgd-pods 3000] [--json]

Three families, each printed as ``name  sha256``:

* ``scale/<policy>``: ``bench/scale.py``'s run (the openb GPU nodes, ``--pods`` pods sampled with seed 42,
  one framework cycle each through ``Scheduler.schedule_and_bind``) for binpack, spread, fgd and default; the
  hash covers every pod's node and per-container device grants (index, memory, cores), or its failure reasons.
  ``scale/default+speeds`` runs the default with the job engine's speed service (``GpuSpeeds``) attached: the
  trace's pods carry no work to speed up, so it must equal ``scale/stranding-fgd``.
* ``fgd-fast/<policy>`` and ``fgd-plugins/<policy>``: the FGD sweep's seed 42 on the ``default`` workload (1.3x
  inflation): the fast path's chosen node and GPUs for every pod (the sweep's whole run), and the first
  ``--fgd-pods`` pods of the same arrival order through the policy's plugins in the framework;
  ``fgd-plugins/speed-fgd`` (the default, with the speed service) must equal ``fgd-plugins/stranding-fgd``.
* ``simulate/<queue policy>``: a 2,000-job synthetic Philly trace on the built-in cluster through
  ``Simulation`` (the job engine), with node failures, a device failure and repairs on the clock; the hash
  covers every job event (time, job, state, nodes) and the summary.

Before and after a refactor the lines must be identical (same machine not needed: the decisions are
deterministic).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.jobs import GpuSpeeds
from gpucluster.model import ClusterState
from gpucluster.scheduler import Scheduler, profile_for
from gpucluster.scheduler.framework import Handle
from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.scheduler.profiles import (
    FGD_PAPER_POLICIES,
    fgd_paper_profile,
    speed_fgd_profile,
    stranding_fgd_profile,
)
from gpucluster.simulator import JobEvent, Simulation, generate
from gpucluster.simulator.experiments.fgd import arrival_order, target_workload
from gpucluster.simulator.experiments.fgd_engine import PolicyName, run
from gpucluster.simulator.traces.openb import load_nodes, load_pods, to_node_specs, to_pod
from gpucluster.spec import load_cluster

TRACES = Path(__file__).resolve().parents[1] / ".." / "shared" / "traces" / "alibaba-gpu-v2023"


def _decision_line(d: Any) -> str:
    if d.allocation is None:
        return f"{d.pod.key} - {d.outcome.name} {sorted(d.reasons.items()) if d.reasons else ''}"
    grants = [[(g.device_index, g.memory_mib, g.core_milli) for g in c] for c in d.allocation.devices]
    return f"{d.pod.key} {d.allocation.node} {grants}"


def scale_hashes(n_pods: int, traces: Path) -> dict[str, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import scale  # bench/scale.py: its cluster and workload

    out: dict[str, str] = {}
    for policy in ("binpack", "spread", "fgd", "default"):
        state = ClusterState(scale.cluster(scale.BASE_NODES, traces))
        sched = Scheduler(state, profile_for(policy, 42))
        h = hashlib.sha256()
        for pod in scale.workload(n_pods, 42, traces):
            h.update(_decision_line(sched.schedule_and_bind(pod)).encode())
        out[f"scale/{policy}"] = h.hexdigest()
    for policy, speeds in (("stranding-fgd", False), ("default", True)):
        state = ClusterState(scale.cluster(scale.BASE_NODES, traces))
        services: dict[str, Any] = {"gpu_speeds": GpuSpeeds(state)} if speeds else {}
        sched = Scheduler(state, profile_for(policy, 42), handle=Handle(rng=np.random.default_rng(42),
                                                                        services=services))
        h = hashlib.sha256()
        for pod in scale.workload(n_pods, 42, traces):
            h.update(_decision_line(sched.schedule_and_bind(pod)).encode())
        out[f"scale/{policy}{'+speeds' if speeds else ''}"] = h.hexdigest()
    return out


def fgd_hashes(n_pods: int, traces: Path, seed: int = 42) -> dict[str, str]:
    nodes = load_nodes(traces / "openb_node_list_gpu_node.csv")
    pods = load_pods(traces / "openb_pod_list_default.csv")
    tgt = target_workload(pods)
    total = sum(n.gpus for n in nodes)
    order = arrival_order(pods, total * 1000, seed, 1.3)
    out: dict[str, str] = {}
    for name in [*FGD_PAPER_POLICIES, "stranding-fgd"]:
        policy = PolicyName(name)
        log = run(nodes, order, policy, tgt, np.random.default_rng([seed, 1]), node_rank(seed, len(nodes)))
        h = hashlib.sha256(log.node.tobytes())
        h.update(repr(log.gpus).encode())
        out[f"fgd-fast/{name}"] = h.hexdigest()
    model_pods = [to_pod(p, name=f"p{i}") for i, p in enumerate(order[:n_pods])]
    for name in [*FGD_PAPER_POLICIES, "stranding-fgd"]:
        state = ClusterState(to_node_specs(nodes))
        fgd_args = {"target": tgt.to_json()} if name in ("fgd", "stranding-fgd") else None
        profile = (stranding_fgd_profile(seed, fgd_args) if name == "stranding-fgd"
                   else fgd_paper_profile(name, seed, fgd_args))
        sched = Scheduler(state, profile, handle=Handle(rng=np.random.default_rng([seed, 1])))
        h = hashlib.sha256()
        for mp in model_pods:
            h.update(_decision_line(sched.schedule_and_bind(mp)).encode())
        out[f"fgd-plugins/{name}"] = h.hexdigest()
    state = ClusterState(to_node_specs(nodes))
    sched = Scheduler(state, speed_fgd_profile(seed, {"target": tgt.to_json()}),
                      handle=Handle(rng=np.random.default_rng([seed, 1]), services={"gpu_speeds": GpuSpeeds(state)}))
    h = hashlib.sha256()
    for mp in model_pods:
        h.update(_decision_line(sched.schedule_and_bind(mp)).encode())
    out["fgd-plugins/speed-fgd"] = h.hexdigest()
    return out


def _record(sim: Simulation) -> list[str]:
    events: list[str] = []

    def on(ev: JobEvent) -> None:
        events.append(f"{ev.t:.6f} {ev.job_id} {ev.kind} {ev.state.value if ev.state else ''} {ev.node}")

    sim.listeners.append(on)
    return events


def _fail_device(sim: Simulation, node: str, device: int) -> None:
    sim.fail_device(node, device, repair_after_s=1800.0)


def simulate_hashes(n_jobs: int = 2000) -> dict[str, str]:
    cluster = load_cluster(None)
    out: dict[str, str] = {}
    for queue_policy in ("fifo", "default", "drf", "tiresias", "offers"):
        state = cluster.state()
        sim = Simulation(state, queue_policy, seed=7)
        gpus = int(state.dev_valid.sum())
        jobs = generate(n_jobs, gpus, profile="philly", load=0.9, seed=3)
        events = _record(sim)
        sim.submit_many(jobs)
        names = [n.name for n in state.nodes]
        t_mid = max(j.submit_s for j in jobs) / 2
        sim.at(t_mid * 0.5, partial(sim.fail_node, names[3], repair_after_s=3600.0))
        sim.at(t_mid, partial(_fail_device, sim, names[10], 2))
        sim.at(t_mid * 1.5, partial(sim.fail_node, names[40], repair_after_s=7200.0))
        sim.run()
        h = hashlib.sha256("\n".join(events).encode())
        h.update(json.dumps(sim.summary(), sort_keys=True, default=str).encode())
        out[f"simulate/{queue_policy}"] = h.hexdigest()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--pods", type=int, default=4000, help="pods per scale policy")
    ap.add_argument("--fgd-pods", type=int, default=3000, help="pods per FGD policy through the plugins")
    ap.add_argument("--only", default="scale,fgd,simulate", help="comma-separated families")
    ap.add_argument("--traces", type=Path, default=TRACES, help="the alibaba-gpu-v2023 trace directory")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if not (args.traces / "openb_node_list_gpu_node.csv").is_file():
        raise SystemExit(f"traces not found at {args.traces} (--traces DIR)")
    only = {x.strip() for x in args.only.split(",")}
    out: dict[str, str] = {}
    for fam, fn in (("scale", lambda: scale_hashes(args.pods, args.traces)),
                    ("fgd", lambda: fgd_hashes(args.fgd_pods, args.traces)),
                    ("simulate", simulate_hashes)):
        if fam in only:
            got = fn()
            out.update(got)
            if not args.json:
                for k, v in got.items():
                    print(f"{k:28s} {v}", flush=True)
    if args.json:
        print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
