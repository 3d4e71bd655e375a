"""The work behind the design and experiment endpoints (run by :class:`~gpucluster.service.tasks.TaskManager`).

* design: ``gpucluster.design`` (requirements -> checked design, report and topology diagram).
* experiment: a placement sweep on a fresh copy of the cluster: the same synthetic job stream placed under each
  scheduling policy until the cluster is full, recording allocation and fragmentation as it fills. When the
  simulator's experiments (``gpucluster.simulator.experiments``) land, this is where they plug in.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from gpucluster.devices import VendorRegistry
from gpucluster.embedded import SHAPES
from gpucluster.model import ClusterState
from gpucluster.scheduler import PROFILES, Scheduler, profile_for
from gpucluster.service.tasks import Report, Task, TaskError
from gpucluster.spec import Cluster


def design_available() -> bool:
    try:
        import gpucluster.design  # noqa: F401
    except ImportError:  # pragma: no cover - the design package ships with the project
        return False
    return True


def parse_design_input(body: dict[str, Any]) -> Any:
    """Requirements from ``{"preset", "scalable_units"}`` or ``{"requirements": {...}}``; TaskError if bad."""
    from gpucluster.design import DesignError, RequirementsError, parse_requirements
    from gpucluster.design.presets import preset_data

    preset = body.get("preset")
    data: Any
    if preset:
        units = body.get("scalable_units", 1)
        if not isinstance(units, int) or isinstance(units, bool):
            raise TaskError("scalable_units", "must be an integer")
        try:
            data = preset_data(str(preset), units)
        except DesignError as exc:
            raise TaskError("preset" if exc.field == "--preset" else "scalable_units", exc.why) from None
    else:
        data = body.get("requirements")
        if data is None:
            raise TaskError("requirements", "give requirements (a mapping) or a preset")
    try:
        return parse_requirements(data)
    except RequirementsError as exc:
        field, why = exc.problems[0]
        raise TaskError(f"requirements.{field}", why) from None


def run_design(req: Any, report: Report, task: Task) -> dict[str, Any]:
    from gpucluster.design import DesignError, design, to_dict
    from gpucluster.design import diagram as design_diagram
    from gpucluster.design import report as design_report

    report(0.1, "sizing compute, network, storage and power")
    try:
        d = design(req)
    except DesignError as exc:
        raise TaskError(f"requirements.{exc.field}", exc.why) from None
    from markdown_it import MarkdownIt

    from gpucluster.design.cabling import to_csv
    from gpucluster.design.spec_export import cluster_spec

    report(0.5, "writing the report")
    result = to_dict(d)
    result["report_md"] = design_report.markdown(d)
    # the dashboard shows it as HTML: markdown-it's "js-default" preset (tables, no raw HTML passed through)
    result["report_html"] = MarkdownIt("js-default").render(result["report_md"])
    task.files["cables.csv"] = to_csv(list(d.cables)).encode()
    task.files["cluster-spec.yaml"] = yaml.safe_dump(cluster_spec(d), sort_keys=False).encode()
    report(0.7, "drawing the topology diagram")
    with tempfile.TemporaryDirectory() as tmp:
        png, svg = Path(tmp) / "topology.png", Path(tmp) / "topology.svg"
        design_diagram.draw(d, png, svg)
        task.files["topology.svg"] = svg.read_bytes()
        task.files["topology.png"] = png.read_bytes()
    return result


def _fragmentation(state: ClusterState) -> float:
    free = np.where(state.dev_valid, state.dev_core_free, 0)
    partial = free[state.dev_tasks > 0].sum()
    total = free.sum()
    return float(partial / total) if total else 0.0


def run_placement_sweep(cluster: Cluster, policies: list[str], jobs: int, seed: int, report: Report,
                        task: Task) -> dict[str, Any]:
    """Place the same seeded job stream under each policy; record how the cluster fills."""
    unknown = [p for p in policies if p not in PROFILES]
    if unknown:
        raise TaskError("policies", f"unknown policy {unknown[0]!r}; known: {', '.join(sorted(PROFILES))}")
    rng = random.Random(seed)
    weights = [s.weight for s in SHAPES]
    stream = [rng.choices(SHAPES, weights)[0] for _ in range(jobs)]
    registry = VendorRegistry.from_settings()
    out: dict[str, Any] = {"jobs": jobs, "seed": seed, "cluster": cluster.name, "policies": {}}
    checkpoint = max(1, jobs // 40)
    for k, policy in enumerate(policies):
        state = cluster.state()
        sched = Scheduler(state, profile_for(policy, seed))
        series: list[dict[str, float]] = []
        placed = 0
        first_failure: int | None = None
        for n, shape in enumerate(stream, start=1):
            pods = [registry.parse_pod({"metadata": {"name": f"j{n}-{r}", "namespace": "exp"}, "spec": {
                "containers": [{"name": "main", "resources": {"limits": shape.resources}}]}}, "experiment")
                for r in range(shape.replicas)]
            done: list[str] = []
            for pod in pods:
                if sched.schedule_and_bind(pod).ok:
                    done.append(pod.key)
                else:
                    for key in done:
                        sched.delete(key)
                    done = []
                    break
            if done:
                placed += 1
            elif first_failure is None:
                first_failure = n
            if n % checkpoint == 0 or n == jobs:
                tot = state.totals()
                series.append({"jobs": n, "placed": placed,
                               "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
                               "fragmentation": _fragmentation(state)})
                report((k + n / jobs) / len(policies), f"{policy}: {n}/{jobs} jobs")
        tot = state.totals()
        out["policies"][policy] = {
            "placed": placed, "rejected": jobs - placed, "first_rejection": first_failure,
            "gpu_alloc": tot["core_used_milli"] / max(tot["core_milli"], 1),
            "fragmentation": _fragmentation(state), "series": series,
        }
    return out
