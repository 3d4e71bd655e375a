"""Our own job file format: YAML (a list, or ``{jobs: [...]}``) or CSV with a header.

Fields per job (CSV columns / YAML keys): ``id`` (required), ``submit_s`` (required), ``gpus`` (required),
``duration_s`` (required), ``tenant``, ``model``, ``priority``, ``kind`` (train|infer), ``gpus_per_task``,
``gpu_type``, ``dataset``, ``checkpoint_interval_s``, ``cpu_milli_per_gpu``, ``memory_mib_per_gpu``, and the
GPU speed fields (docs/gpu-speed.md): ``ref_gpu`` (the GPU model ``duration_s`` was measured on; empty = the job
runs the same on every model), ``work_class`` (speed-model class, default from ``kind`` and ``model``),
``speedup`` (measured speed relative to ``ref_gpu`` per model: a YAML mapping, or ``H100=2.9;L40S=1.2`` in CSV)
and ``tokens`` (tokens an inference job processes, for cost per million tokens).

Example (CSV)::

    id,submit_s,gpus,duration_s,tenant,model
    a,0,8,3600,team-a,ResNet-50
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gpucluster import inputfile
from gpucluster.jobs import JobKind, JobSpec, describe_speed
from gpucluster.model.limits import MAX_JOB_SPEEDUP, MAX_JOB_TOKENS, MAX_TRACE_GPUS, MAX_WHOLE_NUMBER
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import Reading, amount, decoded, seconds, whole

_REQUIRED = ("id", "submit_s", "gpus", "duration_s")
_FLOATS = ("submit_s", "duration_s", "checkpoint_interval_s", "tokens")
_INTS = ("gpus", "priority", "gpus_per_task", "cpu_milli_per_gpu", "memory_mib_per_gpu")
_STRS = ("id", "tenant", "model", "kind", "gpu_type", "dataset", "ref_gpu", "work_class")
_KNOWN = set(_FLOATS) | set(_INTS) | set(_STRS) | {"speedup"}


def load_jobs(path: Path) -> list[JobSpec]:
    with decoded(path) as reading:
        if path.suffix.lower() in (".yaml", ".yml"):
            return _from_yaml(path)
        return _from_csv(path, reading)


def _from_csv(path: Path, reading: Reading) -> list[JobSpec]:
    with inputfile.open_text(path, newline="") as fh:
        reader = reading.reader = csv.DictReader(fh)
        if reader.fieldnames is None:
            raise TraceError(f"{path}:1: empty file (expected a header line)")
        unknown = [c for c in reader.fieldnames if c not in _KNOWN]
        if unknown:
            raise TraceError(f"{path}:1: unknown column {unknown[0]!r}")
        out: list[JobSpec] = []
        first: dict[str, str] = {}
        for row in reader:
            where = f"{path}:{reader.line_num}"
            if None in row:  # csv.DictReader keeps the cells past the header's under the key None
                raise TraceError(f"{where}: {len(reader.fieldnames) + len(row[None])} fields, but the header "
                                 f"(line 1) names {len(reader.fieldnames)}")
            out.append(_once(job_from_record(row, where), where, first))
        return out


def _from_yaml(path: Path) -> list[JobSpec]:
    text = inputfile.read_text(path)
    doc = inputfile.parse_yaml(text, path)
    if isinstance(doc, Mapping):
        doc = doc.get("jobs")
    if not isinstance(doc, list):
        raise TraceError(f"{path}:1: expected a list of jobs (or a mapping with a 'jobs' list)")
    lines = _item_lines(text)
    out = []
    first: dict[str, str] = {}
    for k, item in enumerate(doc):
        where = f"{path}:{lines[k] if k < len(lines) else 1}"
        if not isinstance(item, Mapping):
            raise TraceError(f"{where}: job {k} must be a mapping")
        out.append(_once(job_from_record({str(a): b for a, b in item.items()}, where), where, first))
    return out


def _once(spec: JobSpec, where: str, first: dict[str, str]) -> JobSpec:
    """``spec``, whose id no job before it had (``first``: id -> where it was given); a job id names one job."""
    seen = first.setdefault(spec.job_id, where)
    if seen != where:
        raise TraceError(f"{where}: id: {spec.job_id!r} is already the id of the job at {seen}")
    return spec


def _item_lines(text: str) -> list[int]:
    """Line numbers of top-level list items (``- `` at the smallest indent that has them)."""
    rows = [(n, len(line) - len(line.lstrip())) for n, line in enumerate(text.splitlines(), 1)
            if line.lstrip().startswith("- ")]
    if not rows:
        return []
    indent = min(i for _, i in rows)
    return [n for n, i in rows if i == indent]


def job_from_record(rec: Mapping[str, Any], where: str) -> JobSpec:
    for key in rec:
        if key not in _KNOWN:
            raise TraceError(f"{where}: unknown field {key!r}")
    for key in _REQUIRED:
        if rec.get(key) in (None, ""):
            raise TraceError(f"{where}: {key}: required")
    vals: dict[str, Any] = {}
    for key, raw in rec.items():
        if raw in (None, ""):
            continue
        if key == "speedup":
            vals[key] = _speedup(raw, where)
        elif key == "tokens":
            vals[key] = amount(raw, where, key, MAX_JOB_TOKENS)
        elif key in _FLOATS:
            vals[key] = seconds(raw, where, key)
        elif key in _INTS:
            vals[key] = whole(raw, where, key, MAX_TRACE_GPUS if key in ("gpus", "gpus_per_task") else MAX_WHOLE_NUMBER)
        else:
            vals[key] = str(raw)
    kind = vals.get("kind", "train")
    if kind not in ("train", "infer"):
        raise TraceError(f"{where}: kind: must be train or infer, not {kind!r}")
    try:
        spec = JobSpec(
            job_id=vals["id"], submit_s=vals["submit_s"], num_gpus=vals["gpus"], duration_s=vals["duration_s"],
            tenant=vals.get("tenant", "default"), model=vals.get("model", ""), priority=vals.get("priority", 0),
            kind=JobKind(kind), gpus_per_task=vals.get("gpus_per_task", 0), gpu_type=vals.get("gpu_type", ""),
            dataset=vals.get("dataset", ""), checkpoint_interval_s=vals.get("checkpoint_interval_s", 1800.0),
            cpu_milli_per_gpu=vals.get("cpu_milli_per_gpu", 4000),
            memory_mib_per_gpu=vals.get("memory_mib_per_gpu", 16384),
            ref_gpu=vals.get("ref_gpu", ""), work_class=vals.get("work_class", ""),
            speedup=vals.get("speedup", {}), tokens=vals.get("tokens", 0.0),
        )
    except ValueError as exc:
        raise TraceError(f"{where}: {exc}") from None
    try:
        describe_speed(spec)
    except ValueError as exc:
        raise TraceError(f"{where}: {exc}") from None
    return spec


def _speedup(raw: Any, where: str) -> dict[str, float]:
    """``{model: speed}`` from a YAML mapping or a CSV cell ``H100=2.9;L40S=1.2``."""
    if isinstance(raw, Mapping):
        items = [(str(k), v) for k, v in raw.items()]
    elif isinstance(raw, str):
        items = []
        for part in raw.split(";"):
            if not part.strip():
                continue
            name, sep, value = part.partition("=")
            if not sep:
                raise TraceError(f"{where}: speedup: expected MODEL=SPEED[;MODEL=SPEED...], got {part.strip()!r}")
            items.append((name.strip(), value.strip()))
    else:
        raise TraceError(f"{where}: speedup: expected a mapping of GPU model to speed, not {raw!r}")
    out: dict[str, float] = {}
    for name, value in items:
        out[name] = amount(value, where, f"speedup.{name}", MAX_JOB_SPEEDUP)
    return out


def write_jobs_csv(specs: list[JobSpec], path: Path) -> None:
    """Write specs in this format (e.g. a generated synthetic trace)."""
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "submit_s", "gpus", "duration_s", "tenant", "model", "priority", "kind", "ref_gpu"])
        for s in specs:
            w.writerow([s.job_id, s.submit_s, s.num_gpus, round(s.duration_s, 3), s.tenant, s.model, s.priority,
                        s.kind.value, s.ref_gpu])
