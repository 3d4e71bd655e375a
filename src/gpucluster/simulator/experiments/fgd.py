"""The FGD experiment (USENIX ATC'23) on the openb trace: method, per-seed runs, the peer's CSV shapes, plots.

Method (as the FGD simulator runs it; see ``docs/fgd-reproduction.md``):

1. Cluster = the given nodes. Target workload for FGD = the most frequent pod shapes of the *original* pod
   list covering 95% of pods (CPU-only pods included).
2. Pods sorted by name, shuffled with the seed; then inflated to ``inflation`` x the cluster's GPU milli by
   appending pods sampled (with replacement, from the name-sorted list) until the next sample's per-GPU milli
   would overshoot (the simulator's check), or, when the list already asks for more, by removing random pods.
3. Each pod is tried once, in order; none leaves. After each pod: arrived GPU milli (failed pods too),
   allocated GPU milli, fragmented GPU milli.
4. Column k (0..130) = mean over the pods whose arrived load rounds to k % of the cluster's GPU milli (or,
   when none does, k +- 1) of allocation % (rounded to 2 places), fragmentation % and fragmentation ratio %.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import pickle
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from gpucluster.scheduler.plugins.baselines import node_rank
from gpucluster.scheduler.plugins.fragmentation.measure import TargetWorkload, build_target_workload
from gpucluster.simulator.experiments.fgd_engine import Chooser, NewOptions, PolicyName, RunLog, run
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod, load_nodes, load_pods

COLUMNS = tuple(range(131))
PEER_POLICY = {
    PolicyName.RANDOM: "01-Random", PolicyName.DOTPROD: "02-DotProd", PolicyName.CLUSTERING: "03-GpuClustering",
    PolicyName.PACKING: "04-GpuPacking", PolicyName.BESTFIT: "05-BestFit", PolicyName.FGD: "06-FGD",
    PolicyName.STRANDING_FGD: "07-StrandingFGD",
}
DEFAULT_SEEDS = tuple(range(42, 52))


MAX_SEEDS = 10_000
"""Seeds one experiment may run (the paper's is 10): a typo such as ``42-5100000000`` is refused before a set of
that many seeds is built (gigabytes), not run for years."""


def parse_seeds(text: str) -> list[int]:
    """``42-51`` or ``42,43,50`` (or a mix) -> sorted unique seeds (each >= 0, as numpy's generators take, at most
    :data:`MAX_SEEDS` of them); ValueError says why."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if part.startswith("-"):
            raise ValueError(f"seed {part!r} is negative; seeds are >= 0")
        if "-" in part:
            lo_s, hi_s = part.split("-", 1)
            if hi_s.startswith("-"):
                raise ValueError(f"seed range {part!r} ends in a negative seed; seeds are >= 0")
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo:
                raise ValueError(f"seed range {part!r} runs backwards")
            if hi - lo + 1 > MAX_SEEDS:
                raise ValueError(f"seed range {part!r} has {hi - lo + 1:,} seeds; at most {MAX_SEEDS:,}")
            out.update(range(lo, hi + 1))
        else:
            out.add(int(part))
        if len(out) > MAX_SEEDS:
            raise ValueError(f"{len(out):,} seeds; at most {MAX_SEEDS:,}")
    if not out:
        raise ValueError("no seeds given")
    return sorted(out)


def target_workload(pods: Sequence[OpenbPod], coverage: float = 0.95, memory: bool = False) -> TargetWorkload:
    """FGD's target workload; with ``memory`` each shape also carries its pods' median host memory."""
    tgt = build_target_workload((p.shape for p in pods), coverage)
    if not memory:
        return tgt
    mems: dict[tuple[int, int, int, str], list[int]] = {}
    for p in pods:
        mems.setdefault(p.shape, []).append(p.memory_mib)
    med = np.array([int(np.median(mems[s])) for s in tgt.shapes], np.int64)
    return TargetWorkload(tgt.shapes, tgt.weight, med)


def arrival_order(pods: Sequence[OpenbPod], total_gpu_milli: int, seed: int, inflation: float) -> list[OpenbPod]:
    """Sorted by name, shuffled by ``seed``, then tuned to ``inflation`` x the cluster's GPU milli."""
    rng = np.random.default_rng(seed)
    base = sorted(pods, key=lambda p: p.name)
    order = [base[i] for i in rng.permutation(len(base))]
    if inflation <= 0:
        return order
    target = inflation * total_gpu_milli
    asked = sum(p.total_gpu_milli for p in order)
    if asked > target:
        while asked > target and order:
            k = int(rng.integers(len(order)))
            asked -= order.pop(k).total_gpu_milli
        return order
    i = 0
    while True:
        src = base[int(rng.integers(len(base)))]
        if asked + src.gpu_milli > target:
            break
        asked += src.total_gpu_milli
        order.append(OpenbPod(f"{src.name}-tuned-{i}", src.cpu_milli, src.memory_mib, src.num_gpu, src.gpu_milli,
                              src.gpu_spec))
        i += 1
    return order


def _round_half_even(x: npt.NDArray[np.float64], digits: int) -> npt.NDArray[np.float64]:
    return np.asarray(np.round(x, digits), np.float64)


def discretise(log: RunLog, total_gpus: int) -> dict[str, dict[int, float]]:
    """Per arrived-load percentage 0..130: allocation %, fragmentation %, fragmentation ratio %."""
    arrive = _round_half_even(log.arrived_milli / total_gpus / 10.0, 0)
    alloc = _round_half_even(log.used_milli / total_gpus / 10.0, 2)
    frag = 100.0 * log.frag_milli / 1000.0 / total_gpus
    idle = np.maximum(log.idle_milli, 1)
    ratio = 100.0 * log.frag_milli / idle
    out: dict[str, dict[int, float]] = {"allocation": {}, "fragmentation": {}, "frag_ratio": {}}
    for k in COLUMNS:
        sel = arrive == k
        if not sel.any():
            sel = (arrive >= k - 1) & (arrive <= k + 1)
            if not sel.any():
                continue
        out["allocation"][k] = round(float(alloc[sel].mean()), 2)
        out["fragmentation"][k] = round(float(frag[sel].mean()), 2)
        out["frag_ratio"][k] = float(ratio[sel].mean())
    return out


@dataclass(slots=True)
class SeedResult:
    seed: int
    pods: int
    placed: int
    curves: dict[str, dict[int, float]]

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.seed, "pods": self.pods, "placed": self.placed,
            "allocation_pct": {str(k): v for k, v in self.curves["allocation"].items()},
            "fragmentation_pct": {str(k): v for k, v in self.curves["fragmentation"].items()},
            "frag_ratio_pct": {str(k): v for k, v in self.curves["frag_ratio"].items()},
        }


def run_seed(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], policy: PolicyName, seed: int,
             inflation: float = 1.3, target: TargetWorkload | None = None,
             options: NewOptions | None = None, chooser_cls: type[Chooser] = Chooser) -> SeedResult:
    total_gpus = sum(n.gpus for n in nodes)
    tgt = target or target_workload(pods)
    opts = options or NewOptions()
    policy_target = target_workload(pods, memory=True) if policy is PolicyName.NEW and opts.memory else None
    order = arrival_order(pods, total_gpus * 1000, seed, inflation)
    # decisions draw from their own stream so that the workload of a seed is the same for every policy
    rank = node_rank(seed, len(nodes))
    log = run(nodes, order, policy, tgt, np.random.default_rng([seed, 1]), rank, opts, policy_target, chooser_cls)
    return SeedResult(seed, len(order), int(log.placed.sum()), discretise(log, total_gpus))


@dataclass(slots=True)
class ExperimentResult:
    workload: str
    policy: str
    inflation: float
    total_gpus: int
    seeds: list[SeedResult] = field(default_factory=list)

    def mean(self, metric: str) -> dict[int, float]:
        out: dict[int, float] = {}
        for k in COLUMNS:
            vals = [s.curves[metric][k] for s in self.seeds if k in s.curves[metric]]
            if vals:
                out[k] = round(float(np.mean(vals)), 4)
        return out

    def unallocated_gpus_at(self, k: int = 130) -> float:
        alloc = self.mean("allocation")
        if k not in alloc:
            return math.nan
        return round((100.0 - alloc[k]) * self.total_gpus / 100.0, 2)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "policy": self.policy, "seeds": [s.seed for s in self.seeds],
            "inflation": self.inflation, "total_gpus": self.total_gpus,
            "allocation_pct": {str(k): v for k, v in self.mean("allocation").items()},
            "fragmentation_pct": {str(k): v for k, v in self.mean("fragmentation").items()},
            "unallocated_gpus_at_130": self.unallocated_gpus_at(130),
            "per_seed": [s.to_json() for s in self.seeds],
        }


def run_experiment(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], policy: PolicyName, seeds: Sequence[int],
                   inflation: float = 1.3, workload: str = "workload") -> ExperimentResult:
    tgt = target_workload(pods)
    res = ExperimentResult(workload, policy.value, inflation, sum(n.gpus for n in nodes))
    for s in seeds:
        res.seeds.append(run_seed(nodes, pods, policy, s, inflation, tgt))
    return res


# ------------------------------------------------------------------------------------------ peer CSV shape
_METRIC_FILES = {"allocation": "analysis_allo_discrete.csv", "fragmentation": "analysis_frag_discrete.csv",
                 "frag_ratio": "analysis_frag_ratio_discrete.csv"}


def peer_policy_name(policy: str) -> str:
    try:
        return PEER_POLICY.get(PolicyName(policy), policy)
    except ValueError:
        return policy


def write_peer_csvs(results: Sequence[ExperimentResult], out_dir: Path) -> list[Path]:
    """``analysis_{allo,frag,frag_ratio}_discrete.csv`` in the peer simulator's shape (one row per seed)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric, name in _METRIC_FILES.items():
        path = out_dir / name
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            head = ["workload", "sc_policy", "tune", "seed"]
            if metric == "allocation":
                head.append("total_gpus")
            w.writerow(head + [str(k) for k in COLUMNS])
            for r in results:
                for s in r.seeds:
                    row: list[object] = [f"openb_pod_list_{r.workload}", peer_policy_name(r.policy), r.inflation,
                                         s.seed]
                    if metric == "allocation":
                        row.append(r.total_gpus)
                    row += [s.curves[metric].get(k, "") for k in COLUMNS]
                    w.writerow(row)
        paths.append(path)
    return paths


def load_published(path: Path) -> dict[tuple[str, str], dict[int, dict[int, float]]]:
    """``(workload, policy) -> seed -> {k: value}`` from a peer ``analysis_*_discrete.csv``."""
    out: dict[tuple[str, str], dict[int, dict[int, float]]] = {}
    with path.open(newline="") as fh:
        for row in csv.DictReader(fh):
            wl = row["workload"].removeprefix("openb_pod_list_")
            curve = {k: float(row[str(k)]) for k in COLUMNS if row.get(str(k)) not in (None, "")}
            out.setdefault((wl, row["sc_policy"]), {})[int(row["seed"])] = curve
    return out


# ------------------------------------------------------------------------------------------ plots
def plot_experiment(result: ExperimentResult, out_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for metric, label in (("allocation", "GPU allocation (%)"), ("fragmentation", "Fragmented GPUs (% of all)")):
        fig, ax = plt.subplots(figsize=(6, 4))
        mean = result.mean(metric)
        xs = sorted(mean)
        for s in result.seeds:
            c = s.curves[metric]
            kx = sorted(c)
            ax.plot(kx, [c[k] for k in kx], color="0.8", linewidth=0.7)
        ax.plot(xs, [mean[k] for k in xs], color="C0", linewidth=2,
                label=f"{result.policy} (mean of {len(result.seeds)})")
        if metric == "allocation":
            ax.plot([0, 100, 130], [0, 100, 100], "k:", linewidth=0.8, label="ideal")
        ax.set_xlabel("Arrived GPU request (% of cluster GPU capacity)")
        ax.set_ylabel(label)
        ax.set_title(f"{result.workload}: {label.split(' (')[0]} vs arrived load")
        ax.grid(alpha=0.3)
        ax.legend(loc="best")
        path = out_dir / f"{result.workload}_{result.policy}_{metric}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_comparison(results: Sequence[ExperimentResult], workload: str, path: Path) -> Path:
    """Allocation vs arrived load, one line per policy (the paper's figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11, 4.2))
    for i, r in enumerate(results):
        mean = r.mean("allocation")
        xs = sorted(mean)
        for a in (ax, zoom):
            a.plot(xs, [mean[k] for k in xs], color=f"C{i}", linewidth=1.6,
                   label=f"{r.policy} ({mean.get(130, float('nan')):.2f}% @130)")
    for a in (ax, zoom):
        a.plot([0, 100, 130], [0, 100, 100], "k:", linewidth=0.8)
        a.set_xlabel("Arrived GPU request (% of cluster GPU capacity)")
        a.grid(alpha=0.3)
    ax.set_ylabel("GPU allocation (%)")
    ax.set_title(f"{workload}: allocation vs arrived load")
    zoom.set_xlim(80, 131)
    zoom.set_ylim(75, 100)
    zoom.set_title("zoom: 80-130% arrived")
    zoom.legend(loc="lower right", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ------------------------------------------------------------------------------------------ sweep
PUBLISHED_WORKLOADS = (
    "cpu050", "cpu100", "cpu200", "default", "gpushare100", "gpushare40", "gpushare80", "gpuspec10", "gpuspec20",
    "gpuspec25", "multigpu20", "multigpu30", "multigpu40",
)
NODE_FILE = "openb_node_list_gpu_node.csv"


@dataclass(frozen=True, slots=True)
class SweepTask:
    trace_dir: str
    workload: str
    policy: str
    seed: int
    inflation: float
    out_file: str


@functools.lru_cache(maxsize=4)
def _load_trace(trace_dir: str, workload: str) -> tuple[tuple[OpenbNode, ...], tuple[OpenbPod, ...], TargetWorkload]:
    nodes = tuple(load_nodes(Path(trace_dir) / NODE_FILE))
    pods = tuple(load_pods(Path(trace_dir) / f"openb_pod_list_{workload}.csv"))
    return nodes, pods, target_workload(pods)


def run_sweep_task(task: SweepTask) -> tuple[SweepTask, float]:
    """Run one (workload, policy, seed) from the trace files and write its JSON; returns the task and its
    seconds."""
    t0 = time.perf_counter()
    nodes, pods, tgt = _load_trace(task.trace_dir, task.workload)
    write_sweep_result(task, _seed_json(task, nodes, pods, tgt))
    return task, time.perf_counter() - t0


def _seed_json(task: SweepTask, nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], tgt: TargetWorkload) -> str:
    return json.dumps(run_seed(nodes, pods, PolicyName(task.policy), task.seed, task.inflation, tgt).to_json())


def sweep_payload(trace_dir: Path, workloads: Sequence[str]) -> dict[str, bytes]:
    """Per workload, its nodes, pods and target workload packed for workers that may not see ``trace_dir``
    (a Ray cluster): sent once, unpacked once per worker."""
    nodes = tuple(load_nodes(trace_dir / NODE_FILE))
    out = {}
    for w in workloads:
        pods = tuple(load_pods(trace_dir / f"openb_pod_list_{w}.csv"))
        out[w] = pickle.dumps((nodes, pods, target_workload(pods)), protocol=pickle.HIGHEST_PROTOCOL)
    return out


@functools.lru_cache(maxsize=4)
def _unpack(blob: bytes) -> tuple[tuple[OpenbNode, ...], tuple[OpenbPod, ...], TargetWorkload]:
    data: tuple[tuple[OpenbNode, ...], tuple[OpenbPod, ...], TargetWorkload] = pickle.loads(blob)
    return data


def compute_sweep_task(task: SweepTask, payload: dict[str, bytes]) -> tuple[SweepTask, str, float]:
    """Run one (workload, policy, seed) on its :func:`sweep_payload`; returns the task, the run's JSON (what
    :func:`write_sweep_result` keeps) and its seconds. Writes nothing: it may run on another machine."""
    t0 = time.perf_counter()
    nodes, pods, tgt = _unpack(payload[task.workload])
    return task, _seed_json(task, nodes, pods, tgt), time.perf_counter() - t0


def write_sweep_result(task: SweepTask, text: str) -> None:
    """Keep one finished run (atomically: a sweep stopped half-way resumes from the runs on disk)."""
    out = Path(task.out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(out)


def sweep_tasks(trace_dir: Path, out_dir: Path, workloads: Sequence[str], policies: Sequence[str],
                seeds: Sequence[int], inflation: float) -> list[SweepTask]:
    return [
        SweepTask(str(trace_dir), w, p, s, inflation, str(out_dir / "runs" / w / p / f"{s}.json"))
        for w in workloads for p in policies for s in seeds
    ]


def load_seed_result(path: Path) -> SeedResult:
    data = json.loads(path.read_text())
    curves = {
        metric: {int(k): float(v) for k, v in data[key].items()}
        for metric, key in (("allocation", "allocation_pct"), ("fragmentation", "fragmentation_pct"),
                            ("frag_ratio", "frag_ratio_pct"))
    }
    return SeedResult(int(data["seed"]), int(data["pods"]), int(data["placed"]), curves)


def collect_sweep(out_dir: Path, workloads: Sequence[str], policies: Sequence[str], seeds: Sequence[int],
                  inflation: float, total_gpus: int) -> dict[str, list[ExperimentResult]]:
    out: dict[str, list[ExperimentResult]] = {}
    for w in workloads:
        for p in policies:
            r = ExperimentResult(w, p, inflation, total_gpus)
            for s in seeds:
                f = out_dir / "runs" / w / p / f"{s}.json"
                if f.is_file():
                    r.seeds.append(load_seed_result(f))
            if r.seeds:
                out.setdefault(w, []).append(r)
    return out


def summary_rows(results: dict[str, list[ExperimentResult]],
                 published: dict[tuple[str, str], dict[int, dict[int, float]]] | None) -> list[dict[str, Any]]:
    """One row per (workload, policy): ours and published mean allocation at 100 % and 130 % (``published_k``,
    ``delta_k``); for a policy without published numbers, the paper's FGD instead (``fgd_published_k``,
    ``vs_fgd_k``)."""
    rows = []
    for w, rs in results.items():
        for r in rs:
            mean = r.mean("allocation")
            row: dict[str, Any] = {"workload": w, "policy": r.policy, "seeds": len(r.seeds)}
            for k in (100, 130):
                row[f"ours_{k}"] = round(mean[k], 2) if k in mean else None
            pub = (published or {}).get((w, peer_policy_name(r.policy)))
            # a policy the paper did not run (ours) is compared with the paper's FGD on the same seeds
            prefix, ref = ("published", pub) if pub else ("fgd_published", (published or {}).get((w, "06-FGD")))
            if ref:
                seeds = [s.seed for s in r.seeds if s.seed in ref]
                for k in (100, 130):
                    vals = [ref[s][k] for s in seeds if k in ref[s]]
                    row[f"{prefix}_{k}"] = round(float(np.mean(vals)), 2) if vals else None
                    if vals and row[f"ours_{k}"] is not None:
                        delta = "delta" if pub else "vs_fgd"
                        row[f"{delta}_{k}"] = round(row[f"ours_{k}"] - row[f"{prefix}_{k}"], 2)
            rows.append(row)
    return rows


def resolve_policy(name: str) -> PolicyName:
    """A policy name as users write it; ``default`` is the scheduler's default policy."""
    from gpucluster.scheduler.profiles import DEFAULT_PLACEMENT_POLICY

    key = DEFAULT_PLACEMENT_POLICY if name == "default" else name
    if key == "speed-fgd":  # the trace's pods carry no work to speed up: speed-fgd places them as stranding-fgd
        key = PolicyName.STRANDING_FGD.value
    try:
        policy = PolicyName(key)
    except ValueError:
        policy = None
    if policy is None or policy is PolicyName.NEW:
        known = ", ".join([p.value for p in PolicyName if p is not PolicyName.NEW] + ["default"])
        if name == "default":
            raise ValueError(f"the scheduler's default policy {key!r} has no experiment fast path; known: {known}")
        raise ValueError(f"unknown policy {name!r}; known: {known}")
    return policy


def result_json(result: ExperimentResult) -> dict[str, Any]:
    """The ``experiment fgd --json`` document (means over seeds; keys are arrived-load percentages)."""
    full = result.to_json()
    return {k: full[k] for k in ("workload", "policy", "seeds", "allocation_pct", "fragmentation_pct",
                                 "unallocated_gpus_at_130", "per_seed")}
