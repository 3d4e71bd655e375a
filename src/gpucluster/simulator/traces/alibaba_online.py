"""Alibaba openb pod lists replayed online: each GPU pod arrives at ``creation_time`` and runs for
``deletion_time - creation_time`` seconds (its observed lifetime), as a one-task job.

Fractional pods (``num_gpu`` 1 with ``gpu_milli`` < 1000) share a GPU (HAMi-style core and memory share);
``gpu_spec`` (``|``-separated models) becomes the job's ``gpu_type``.
CPU-only pods (``num_gpu`` 0) and pods that never ran (deletion <= creation) are skipped, counted in the
returned :class:`OpenbSkipped`. A pod with an empty ``deletion_time`` was not deleted within the trace's window
(it was still there when the trace ended): it runs until the trace's end, the latest creation, deletion or
scheduled time in the file (a right-censored lifetime, counted in :attr:`OpenbSkipped.ran_to_end`); one created
at the end itself never ran. (The published v2023 lists have no such pod; before, one was counted as never ran.)
Columns: ``name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ..., creation_time, deletion_time``.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
from pathlib import Path

from gpucluster import inputfile
from gpucluster.jobs import JobKind, JobSpec
from gpucluster.model.limits import MAX_TRACE_GPUS
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import decoded, seconds, whole

_NEED = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "creation_time", "deletion_time")


@dataclass(slots=True)
class OpenbSkipped:
    """What a load left out, and what it cut short: counted so that the caller can say so."""

    cpu_only: int = 0
    never_ran: int = 0
    ran_to_end: int = 0
    """GPU pods with an empty ``deletion_time`` (still there when the trace ended), run until :attr:`end_s`."""
    end_s: float = 0.0
    """The trace's end: the latest creation, deletion or scheduled time in the file."""


def load_openb_jobs(path: Path, skipped: OpenbSkipped | None = None) -> list[JobSpec]:
    skipped = skipped if skipped is not None else OpenbSkipped()
    jobs: list[JobSpec] = []
    still_there: list[int] = []
    end = 0.0
    first: dict[str, str] = {}
    with decoded(path) as reading, inputfile.open_text(path, newline="") as fh:
        reader = reading.reader = csv.DictReader(fh)
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
            open_ended = not (row["deletion_time"] or "").strip()
            deleted = created if open_ended else seconds(row["deletion_time"], where, "deletion_time")
            scheduled = (row.get("scheduled_time") or "").strip()
            end = max(end, created, deleted, seconds(scheduled, where, "scheduled_time") if scheduled else 0.0)
            if gpus == 0:
                skipped.cpu_only += 1
                continue
            if deleted <= created and not open_ended:
                skipped.never_ran += 1
                continue
            if not 0 < milli <= 1000:
                raise TraceError(f"{where}: gpu_milli must be within 1..1000, not {milli}")
            seen = first.setdefault(row["name"], where)
            if seen != where:
                raise TraceError(f"{where}: name: {row['name']!r} is already the name of the pod at {seen}")
            if open_ended:
                still_there.append(len(jobs))
            jobs.append(JobSpec(
                job_id=row["name"], submit_s=created, num_gpus=gpus,
                duration_s=math.inf if open_ended else deleted - created,  # open: set once the end is known
                tenant=row.get("qos") or "default", kind=JobKind.INFER, gpus_per_task=gpus,
                cpu_milli_per_gpu=cpu // gpus, memory_mib_per_gpu=mem // gpus, gpu_milli=milli,
                checkpoint_interval_s=0.0, gpu_type=",".join(t for t in (row.get("gpu_spec") or "").split("|") if t),
            ))
    skipped.end_s = end
    gone: set[int] = set()
    for i in still_there:  # the trace's end is known once the file is read
        if end > jobs[i].submit_s:
            jobs[i] = replace(jobs[i], duration_s=end - jobs[i].submit_s)
            skipped.ran_to_end += 1
        else:  # created at the trace's end: it never ran
            gone.add(i)
            skipped.never_ran += 1
    if gone:
        jobs = [j for i, j in enumerate(jobs) if i not in gone]
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs
