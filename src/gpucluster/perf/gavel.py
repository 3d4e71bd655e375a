"""The speed model against Gavel's measured throughputs (OSDI'20, ``oracle_throughputs.json``).

Gavel measured each of its 26 job types alone on one V100, one P100 and one K80 (steps per second). The Philly
traces derived from Gavel are V100-era work: ``ref_gpu`` V100, FP32 (PyTorch of 2019 trained in FP32).
:func:`gavel_check` predicts every P100/V100 and K80/V100 ratio with the speed model and pairs it with the
measurement; :func:`error_summary` condenses the errors. docs/gpu-speed.md shows the table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from gpucluster.perf.model import SpeedModel

GAVEL_GPUS: Mapping[str, str] = {"v100": "V100-SXM2-16GB", "p100": "P100-PCIe-16GB", "k80": "K80"}
"""Gavel's worker types -> our catalog models (the cloud parts Gavel measured on)."""
GAVEL_REF = "v100"
GAVEL_PRECISION = "fp32"


@dataclass(frozen=True, slots=True)
class GavelRow:
    job_type: str
    work_class: str
    gpu: str  # catalog name
    measured: float  # throughput on gpu / throughput on the V100
    predicted: float

    @property
    def error(self) -> float:
        """Relative error of the prediction (+0.10 = predicted 10 % too fast)."""
        return self.predicted / self.measured - 1.0


def load_oracle(path: str | Path) -> dict[str, Any]:
    """Read Gavel's ``oracle_throughputs.json`` (worker type -> job type -> {"null": steps/s, ...})."""
    with Path(path).open(encoding="utf-8") as fh:
        data: dict[str, Any] = json.load(fh)
    return data


def measured_ratios(oracle: Mapping[str, Any], job_type: str) -> dict[str, float]:
    """A Gavel job type's measured speed on each of Gavel's GPUs relative to the V100 (catalog names): the
    per-job ``measured`` override a Philly/Gavel trace can carry."""
    ref = float(oracle[GAVEL_REF][job_type]["null"])
    return {GAVEL_GPUS[w]: float(oracle[w][job_type]["null"]) / ref
            for w in GAVEL_GPUS if job_type in oracle.get(w, {})}


def gavel_check(model: SpeedModel, oracle: Mapping[str, Any]) -> list[GavelRow]:
    """One row per (job type, non-reference GPU) of the table."""
    rows = []
    for job_type in oracle[GAVEL_REF]:
        job = model.job(kind="training", model=job_type, ref_gpu=GAVEL_GPUS[GAVEL_REF], precision=GAVEL_PRECISION)
        for worker, measured in measured_ratios(oracle, job_type).items():
            if worker == GAVEL_GPUS[GAVEL_REF]:
                continue
            rows.append(GavelRow(job_type, job.work_class.name, worker, measured, model.factor(job, worker)))
    return rows


def error_summary(rows: Sequence[GavelRow]) -> dict[str, float]:
    """Median, mean, 90th percentile and largest absolute relative error; the share within 25 % and 50 %; and the
    geometric-mean bias (predicted / measured) per GPU."""
    err = np.abs(np.asarray([r.error for r in rows], np.float64))
    out = {
        "rows": float(err.size),
        "median_abs_error": float(np.median(err)),
        "mean_abs_error": float(err.mean()),
        "p90_abs_error": float(np.percentile(err, 90)),
        "max_abs_error": float(err.max()),
        "within_25pct": float(np.mean(err <= 0.25)),
        "within_50pct": float(np.mean(err <= 0.50)),
    }
    for gpu in sorted({r.gpu for r in rows}):
        logs = [np.log(r.predicted / r.measured) for r in rows if r.gpu == gpu]
        out[f"bias_{gpu}"] = float(np.exp(np.mean(logs)))
    return out
