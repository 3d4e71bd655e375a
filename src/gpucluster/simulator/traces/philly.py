"""Gavel's Philly-derived traces: one tab-separated file per Philly virtual cluster (VC).

Fields: ``job_type, command, num_steps_arg, needs_data_dir, total_steps, arrival_time_s, scale_factor``.
Duration on a V100 = ``total_steps / oracle_throughputs["v100"][job_type]["null"]`` (steps per second on one
GPU; the same whatever the GPU count, as Gavel's simulator of that time counts steps once). The VC (file
name) becomes the job's tenant.

GPU speed (docs/gpu-speed.md): the work is V100 seconds, so every job has ``ref_gpu`` ``V100`` (:data:`REF_GPU`)
and kind ``train``; its ``speedup`` carries Gavel's measured throughput on the P100 and the K80 relative to the
V100 for its job type (the per-job override of the speed model; other models follow the model).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucluster import inputfile
from gpucluster.jobs import JobSpec
from gpucluster.model.limits import MAX_TRACE_GPUS
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.fields import decoded, seconds, whole

THROUGHPUTS = "oracle_throughputs.json"
REF_GPU = "V100"
"""The GPU the Philly/Gavel work is measured on (Gavel's V100 worker)."""
MEASURED = {"v100": "V100-SXM2-16GB", "p100": "P100-PCIe-16GB", "k80": "K80"}
"""Gavel's worker types -> catalog GPU models (``speedup`` keys)."""


def find_throughputs(path: Path) -> Path:
    for d in (path if path.is_dir() else path.parent, *path.resolve().parents):
        cand = d / THROUGHPUTS
        if cand.is_file():
            return cand
    raise TraceError(f"{path}: no {THROUGHPUTS} found next to the trace or in a parent folder")


def _read_table(path: Path) -> dict[str, Any]:
    try:
        table = inputfile.load_json(path)
    except inputfile.InputFileError as exc:
        raise TraceError(f"cannot read the throughput table: {exc}") from None
    if not isinstance(table, dict) or not all(isinstance(v, dict) for v in table.values()):
        raise TraceError(f"{path}: the throughput table must map worker types to job types")
    return dict(table)


def load_throughputs(path: Path, worker: str = "v100", table: dict[str, Any] | None = None) -> dict[str, float]:
    table = _read_table(path) if table is None else table
    if worker not in table:
        raise TraceError(f"{path}: no worker type {worker!r} (have {', '.join(sorted(table))})")
    out: dict[str, float] = {}
    for job_type, row in table[worker].items():
        if isinstance(row, dict) and isinstance(row.get("null"), int | float) and row["null"] > 0:
            out[job_type] = float(row["null"])
    return out


def trace_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise TraceError(f"{path}: no such file or folder")
    files = sorted(path.glob("*.trace")) or sorted(path.glob("*/*.trace"))
    if not files:
        raise TraceError(f"{path}: no *.trace files in it")
    return files


def load_philly(path: Path, throughputs: Path | None = None, worker: str = "v100",
                limit: int | None = None) -> list[JobSpec]:
    """All jobs of one ``.trace`` file or of every ``.trace`` file in a folder, sorted by arrival."""
    table_path = throughputs or find_throughputs(path)
    raw = _read_table(table_path)
    table = load_throughputs(table_path, worker, raw)
    speedups = _speedups(raw, worker, table)
    ref_gpu = (REF_GPU if worker == "v100" else MEASURED[worker]) if worker in MEASURED else ""
    jobs: list[JobSpec] = []
    files: dict[str, Path] = {}
    for f in trace_files(path):
        vc = f.stem
        if files.setdefault(vc, f) != f:  # a job's id is VC-LINE: two files of one VC would give jobs one id
            raise TraceError(f"{path}: {files[vc]} and {f} are both VC {vc!r} (another seed's copy of the trace?); "
                             "give the folder of one of them")
        with decoded(f), inputfile.open_text(f) as fh:
            for lineno, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                jobs.append(_parse(line, f, lineno, vc, table, speedups, ref_gpu))
    jobs.sort(key=lambda j: (j.submit_s, j.job_id))
    return jobs[:limit] if limit is not None else jobs


def _speedups(raw: dict[str, Any], worker: str, table: dict[str, float]) -> dict[str, dict[str, float]]:
    """Job type -> measured speed relative to ``worker`` on each of Gavel's GPUs (catalog names)."""
    if worker not in MEASURED:
        return {}
    out: dict[str, dict[str, float]] = {}
    for job_type, ref in table.items():
        row = {}
        for w, gpu in MEASURED.items():
            v = raw.get(w, {}).get(job_type, {})
            if isinstance(v, dict) and isinstance(v.get("null"), int | float) and v["null"] > 0:
                row[gpu] = float(v["null"]) / ref
        out[job_type] = row
    return out


def _parse(line: str, f: Path, lineno: int, vc: str, table: dict[str, float],
           speedups: dict[str, dict[str, float]], ref_gpu: str) -> JobSpec:
    where = f"{f}:{lineno}"
    parts = line.rstrip("\n").split("\t")
    if len(parts) != 7:
        raise TraceError(f"{where}: expected 7 tab-separated fields, got {len(parts)}")
    job_type = parts[0]
    rate = table.get(job_type)
    if rate is None:
        raise TraceError(f"{where}: job type {job_type!r} has no throughput in the table")
    steps = whole(parts[4], where, "total_steps")
    arrival = seconds(parts[5], where, "arrival_time_s")
    gpus = whole(parts[6], where, "scale_factor", MAX_TRACE_GPUS)
    if steps <= 0 or gpus <= 0 or arrival < 0:
        raise TraceError(f"{where}: total_steps and scale_factor must be > 0, arrival >= 0")
    return JobSpec(
        job_id=f"{vc}-{lineno:05d}", submit_s=arrival, num_gpus=gpus, duration_s=steps / rate,
        tenant=vc, model=job_type, dataset=job_type.split(" ")[0] if parts[3] == "1" else "",
        ref_gpu=ref_gpu, speedup=speedups.get(job_type, {}),
    )
