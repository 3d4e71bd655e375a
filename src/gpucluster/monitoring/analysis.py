"""Job analysis: classify what holds a job back from its devices' metrics, and say what would help.

The verdict is the first of these that holds (means over all of the job's samples; utilisation is taken
relative to the job's compute share of a shared device; thresholds are the fields of :class:`Thresholds`):

1. ``idle``: GPU utilisation below ``idle_util_pct`` - the job holds devices it does not use.
2. ``memory-bound``: device memory busy (``dram_active``) at least ``dram_busy`` while tensor pipes stay
   below ``tensor_low`` - bandwidth, not arithmetic, is the limit.
3. ``compute-bound``: utilisation at least ``busy_util_pct`` - the devices are the limit (good: buy or
   borrow more, or use mixed precision).
4. ``communication-bound``: utilisation below ``busy_util_pct`` with heavy traffic both ways
   (PCIe tx and rx each at least ``comm_bytes_per_s``, roughly balanced) or heavy NVLink traffic - the
   gradient exchange waits on the network; when the job spans several nodes it is put down to placement.
5. ``input-bound``: utilisation below ``busy_util_pct`` with host->device traffic dominating (rx at least
   ``rx_over_tx`` times tx), or low utilisation with no traffic to explain it - the devices wait for data.
6. ``balanced``: none of the above.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from gpucluster import inputfile


class MetricsInputError(ValueError):
    """Bad metrics file; the message names the file, the record and the field."""


@dataclass(frozen=True, slots=True)
class JobSample:
    """One device of one job at one instant."""

    job: str
    gpu_util: float
    """GPU utilisation, %."""
    time: float = 0.0
    node: str = ""
    gpu: int = 0
    sm_active: float | None = None
    """0..1 (DCGM_FI_PROF_GR_ENGINE_ACTIVE)."""
    tensor_active: float | None = None
    dram_active: float | None = None
    pcie_rx_bytes: float = 0.0
    """PCIe receive rate, bytes/s."""
    pcie_tx_bytes: float = 0.0
    nvlink_bytes: float = 0.0
    """NVLink rate, bytes/s."""
    fb_used_mib: float | None = None
    fb_total_mib: float | None = None
    core_share: float = 1.0
    """Share of the device's compute the job holds (HAMi gpucores / 100); utilisation is judged against it."""


_FIELDS = {f.name: f for f in fields(JobSample)}
_REQUIRED = ("job", "gpu_util")


def _coerce(raw: Mapping[str, Any], where: str) -> JobSample:
    unknown = set(raw) - set(_FIELDS)
    if unknown:
        raise MetricsInputError(f"{where}: unknown field(s) {', '.join(sorted(unknown))}; "
                                f"known: {', '.join(_FIELDS)}")
    values: dict[str, Any] = {}
    for name in _REQUIRED:
        if raw.get(name) in (None, ""):
            raise MetricsInputError(f"{where}: {name}: required")
    for name, value in raw.items():
        if value is None or value == "":
            continue
        if name in ("job", "node"):
            values[name] = str(value)
            continue
        try:
            num = float(value)
        except (TypeError, ValueError):
            raise MetricsInputError(f"{where}: {name}: not a number: {value!r}") from None
        if not math.isfinite(num) or num < 0:
            raise MetricsInputError(f"{where}: {name}: must be a finite number >= 0, got {value!r}")
        if name == "core_share" and not 0 < num <= 1:
            raise MetricsInputError(f"{where}: core_share: must be within (0, 1], got {value!r}")
        if name in ("sm_active", "tensor_active", "dram_active") and num > 1:
            raise MetricsInputError(f"{where}: {name}: is a ratio 0..1, got {value!r}")
        if name == "gpu_util" and num > 100:
            raise MetricsInputError(f"{where}: gpu_util: is a percentage 0..100, got {value!r}")
        values[name] = int(num) if name == "gpu" else num
    return JobSample(**values)


def load_metrics(path: Path) -> dict[str, list[JobSample]]:
    """Samples by job from a CSV (header = field names) or JSON (a list of records, or ``{"samples": [...]}``)
    file."""
    try:
        text = inputfile.read_text(path)
    except inputfile.InputFileError as exc:
        raise MetricsInputError(str(exc)) from None
    samples: list[JobSample] = []
    if path.suffix.lower() == ".json":
        try:
            doc = inputfile.parse_json(text, path)
        except inputfile.InputFileError as exc:
            raise MetricsInputError(str(exc)) from None
        records = doc.get("samples") if isinstance(doc, dict) else doc
        if not isinstance(records, list):
            raise MetricsInputError(f"{path}: expected a list of samples or {{\"samples\": [...]}}")
        for k, rec in enumerate(records):
            if not isinstance(rec, dict):
                raise MetricsInputError(f"{path}: samples[{k}]: expected an object")
            samples.append(_coerce(rec, f"{path}: samples[{k}]"))
    else:
        reader = csv.DictReader(text.splitlines())
        try:
            if reader.fieldnames is None:
                raise MetricsInputError(f"{path}: empty file")
            for row in reader:
                if None in row:
                    raise MetricsInputError(f"{path}:{reader.line_num}: more values than header columns")
                samples.append(_coerce(row, f"{path}:{reader.line_num}"))
        except csv.Error as exc:
            raise MetricsInputError(f"{path}:{reader.line_num}: not a readable CSV file: {exc}") from None
    by_job: dict[str, list[JobSample]] = {}
    for s in samples:
        by_job.setdefault(s.job, []).append(s)
    return by_job


@dataclass(frozen=True, slots=True)
class Thresholds:
    idle_util_pct: float = 5.0
    busy_util_pct: float = 80.0
    dram_busy: float = 0.6
    tensor_low: float = 0.2
    comm_bytes_per_s: float = 5e9
    """Per device, each direction."""
    nvlink_heavy_bytes_per_s: float = 100e9
    rx_over_tx: float = 3.0
    fb_full_ratio: float = 0.95


@dataclass(frozen=True, slots=True)
class JobAnalysis:
    job: str
    verdict: str
    """``idle``, ``memory-bound``, ``compute-bound``, ``communication-bound``, ``input-bound`` or ``balanced``."""
    why: str
    advice: list[str]
    evidence: dict[str, float]
    nodes: list[str] = field(default_factory=list)
    gpus: int = 0
    samples: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _mean(vals: Iterable[float | None]) -> float | None:
    xs = [v for v in vals if v is not None]
    return sum(xs) / len(xs) if xs else None


def analyze(job: str, samples: Sequence[JobSample], th: Thresholds | None = None) -> JobAnalysis:
    if not samples:
        raise ValueError(f"job {job!r}: no samples")
    th = th or Thresholds()
    nodes = sorted({s.node for s in samples if s.node})
    gpus = len({(s.node, s.gpu) for s in samples})
    util = _mean(min(100.0, s.gpu_util / s.core_share) for s in samples) or 0.0
    tensor = _mean(s.tensor_active for s in samples)
    dram = _mean(s.dram_active for s in samples)
    rx = _mean(s.pcie_rx_bytes for s in samples) or 0.0
    tx = _mean(s.pcie_tx_bytes for s in samples) or 0.0
    nvl = _mean(s.nvlink_bytes for s in samples) or 0.0
    fb = _mean(
        s.fb_used_mib / s.fb_total_mib for s in samples
        if s.fb_used_mib is not None and s.fb_total_mib
    )
    ev: dict[str, float] = {"gpu_util_pct": round(util, 2), "pcie_rx_gbps": round(rx * 8 / 1e9, 2),
                            "pcie_tx_gbps": round(tx * 8 / 1e9, 2), "nvlink_gbps": round(nvl * 8 / 1e9, 2)}
    if tensor is not None:
        ev["tensor_active"] = round(tensor, 3)
    if dram is not None:
        ev["dram_active"] = round(dram, 3)
    if fb is not None:
        ev["fb_used_ratio"] = round(fb, 3)
    advice: list[str] = []
    multi = len(nodes) > 1
    if util < th.idle_util_pct:
        verdict = "idle"
        why = f"GPU utilisation averages {util:.1f} % (< {th.idle_util_pct:g} %)"
        advice = ["release the devices or scale the job to zero while it waits",
                  "check that the job is not stuck (deadlock, waiting on a service)"]
    elif dram is not None and dram >= th.dram_busy and (tensor or 0.0) < th.tensor_low:
        verdict = "memory-bound"
        why = f"device memory busy {dram:.0%} of cycles while tensor pipes run {(tensor or 0.0):.0%}"
        advice = ["fuse kernels / use a memory-efficient attention kernel to cut memory traffic",
                  "use bf16/fp8 to halve bytes moved; larger batches raise arithmetic intensity",
                  "prefer devices with more memory bandwidth (H100/H200 HBM3 over L40S GDDR6)"]
    elif util >= th.busy_util_pct:
        verdict = "compute-bound"
        why = f"GPU utilisation averages {util:.1f} % (>= {th.busy_util_pct:g} %)"
        advice = ["the devices are the limit: more GPUs (data parallel) or faster ones shorten it",
                  "mixed precision / tensor-core friendly shapes raise throughput per device"]
    elif (min(rx, tx) >= th.comm_bytes_per_s and tx >= rx / th.rx_over_tx) or nvl >= th.nvlink_heavy_bytes_per_s:
        verdict = "communication-bound"
        if multi:
            why = (f"utilisation {util:.1f} % with {min(rx, tx) * 8 / 1e9:.0f} Gb/s each way per GPU while the job "
                   f"spans {len(nodes)} nodes: gradient exchange leaves the NVLink domain")
            advice = ["place the job inside one NVLink domain / node (topology-aware placement, gang on one leaf)",
                      "if it cannot fit one node, keep its nodes under one leaf switch",
                      "overlap communication with compute (bucketed all-reduce), or compress gradients"]
        else:
            why = f"utilisation {util:.1f} % with heavy device-to-device traffic ({nvl * 8 / 1e9:.0f} Gb/s NVLink)"
            advice = ["overlap communication with compute; larger per-GPU batches cut sync frequency",
                      "check that the GPUs used share one NVLink domain"]
    elif rx >= th.rx_over_tx * max(tx, 1.0) or rx < th.comm_bytes_per_s:
        verdict = "input-bound"
        why = (f"utilisation {util:.1f} % while host->device traffic ({rx * 8 / 1e9:.1f} Gb/s) dominates: "
               "devices wait for data")
        advice = ["more data-loader workers, pinned memory and prefetching",
                  "cache or pre-stage the dataset on the node's NVMe (data-locality placement)",
                  "move decoding/augmentation to the GPU (e.g. DALI)"]
    else:
        verdict = "balanced"
        why = f"utilisation {util:.1f} % with no single dominant limit"
        advice = ["profile a step (Nsight Systems) to see where time goes"]
    if fb is not None and fb >= th.fb_full_ratio:
        advice.append(f"device memory is {fb:.0%} full: expect OOM on larger inputs")
    return JobAnalysis(job, verdict, why, advice, ev, nodes, gpus, len(samples))
