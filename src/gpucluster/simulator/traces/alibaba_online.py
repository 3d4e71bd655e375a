"""Alibaba openb pod lists replayed online: each GPU pod arrives at ``creation_time`` and runs for
``deletion_time - creation_time`` seconds (its observed lifetime), as a one-task job.

Fractional pods (``num_gpu`` 1 with ``gpu_milli`` < 1000) share a GPU (HAMi-style core and memory share);
``gpu_spec`` (``|``-separated models) becomes the job's ``gpu_type``.
CPU-only pods (``num_gpu`` 0) and pods that never ran (deletion <= creation) are skipped, counted in the
returned :class:`OpenbSkipped`. Columns: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...,
creation_time, deletion_time``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gpucluster import inputfile
from gpucluster.jobs import JobKind, JobSpec
from gpucluster.model.limits import MAX_TRACE_GPUS
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import decoded, seconds, whole

_NEED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time")


@dataclass(slots=True)
class OpenbSkipped:
    cpu_only: int = 0
    never_ran: int = 0


def load_openb_jobs(path: Path, skipped: OpenbSkipped | None = None) -> list[JobSpec]:
    skipped = skipped if skipped is not None else OpenbSkipped()
    jobs: list[JobSpec] = []
    first: dict[str, str] = {}
    with decoded(path), inputfile.open_text(path, newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in _NEED if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{path}:1: missing column {missing[0]!r}")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            gpus = whole(row["num_gpu"], where, "num_gpu", MAX_TRACE_GPUS)
            milli = whole(row["gpu_milli"] or 0, where, "gpu_milli")
            cpu = whole(row["cpu_milli"], where, "cpu_milli")
            mem = whole(row["memory_mib"], where, "memory_mib")
            created = seconds(row["creation_time"], where, "creation_time")
            deleted = seconds(row["deletion_time"], where, "deletion_time") if row["deletion_time"] else created
            if gpus == 0:
                skipped.cpu_only += 1
                continue
            if deleted <= created:
                skipped.never_ran += 1
                continue
            if not 0 < milli <= 1000:
                raise TraceError(f"{where}: gpu_milli must be within 1..1000, not {milli}")
            seen = first.setdefault(row["name"], where)
            if seen != where:
                raise TraceError(f"{where}: name: {row['name']!r} is already the name of the pod at {seen}")
            jobs.append(JobSpec(
                job_id=row["name"], submit_s=created, num_gpus=gpus, duration_s=deleted - created,
                tenant=row.get("qos") or "default", kind=JobKind.INFER, gpus_per_task=gpus,
                cpu_milli_per_gpu=cpu // gpus, memory_mib_per_gpu=mem // gpus, gpu_milli=milli,
                checkpoint_interval_s=0.0, gpu_type=",".join(t for t in (row.get("gpu_spec") or "").split("|") if t),
            ))
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs
