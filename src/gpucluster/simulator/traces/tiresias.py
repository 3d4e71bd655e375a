"""Tiresias' simulator CSV traces (``60_job.csv``, ``tf_job.csv``): one job per row.

Columns used: ``job_id``, ``num_gpu``, ``submit_time`` (s), ``duration`` (s), and ``model_name`` when present.
Rows with the same ``job_id`` (``tf_job.csv`` repeats them) are kept once. Cluster shape files
(``n256g8.csv``: switches, nodes per switch, GPUs per node, CPUs, memory GB) load with :func:`load_shape`.
The traces are Philly-derived training jobs: kind ``train``, work in V100 seconds (``ref_gpu`` :data:`REF_GPU`,
docs/gpu-speed.md).
"""

from __future__ import annotations

import csv
from pathlib import Path

from gpucluster import inputfile
from gpucluster.jobs import JobSpec
from gpucluster.model.limits import MAX_TRACE_GPUS
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import decoded, seconds, whole

_NEED = ("job_id", "num_gpu", "submit_time", "duration")
REF_GPU = "V100"


def load_tiresias(path: Path) -> list[JobSpec]:
    jobs: list[JobSpec] = []
    seen: set[str] = set()
    with decoded(path) as reading, inputfile.open_text(path, newline="") as fh:
        reader = reading.reader = csv.DictReader(fh)
        missing = [c for c in _NEED if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: missing column {missing[0]!r} (need {', '.join(_NEED)})")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            jid = (row["job_id"] or "").strip()
            if not jid:
                raise TraceError(f"{where}: job_id: required")
            if jid in seen:
                continue
            seen.add(jid)
            gpus = whole(row["num_gpu"], where, "num_gpu", MAX_TRACE_GPUS)
            submit = seconds(row["submit_time"], where, "submit_time")
            duration = seconds(row["duration"], where, "duration")
            try:
                jobs.append(JobSpec(job_id=f"tiresias-{jid}", submit_s=submit, num_gpus=gpus, duration_s=duration,
                                    model=(row.get("model_name") or "").strip(), ref_gpu=REF_GPU))
            except ValueError as exc:
                raise TraceError(f"{where}: {exc}") from None
    jobs.sort(key=lambda j: j.submit_s)
    return jobs


def load_shape(path: Path) -> dict[str, int]:
    """A Tiresias cluster shape: ``{switches, nodes_per_switch, gpus_per_node, cpus_per_node, mem_gb}``."""
    with decoded(path), inputfile.open_text(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    if len(rows) != 1:
        raise TraceError(f"{path}:2: expected exactly one shape row")
    r = rows[0]
    try:
        return {"switches": int(r["num_switch"]), "nodes_per_switch": int(r["num_node_p_switch"]),
                "gpus_per_node": int(r["num_gpu_p_node"]), "cpus_per_node": int(r["num_cpu_p_node"]),
                "mem_gb": int(r["mem_p_node"])}
    except (KeyError, ValueError):
        raise TraceError(f"{path}:2: bad shape row {r}") from None
