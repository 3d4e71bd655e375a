"""The speed model bound to a catalog: names in, speeds out.

:class:`SpeedModel` turns what a job file or trace says (kind, model name, ``ref_gpu``, precision, a per-job
override) into a :class:`JobSpeed`, and answers "how fast is this job on that GPU model" by the names that node
specs and device plugins use. Unknown job-side names are errors (``ValueError`` naming the field); a node whose
GPU model the catalog does not know runs jobs at their reference speed (factor 1.0) and is listed in
:attr:`SpeedModel.unknown` so that callers can warn about it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import get_args

import numpy as np
import numpy.typing as npt

from gpucluster.perf.catalog import PerfCatalog, load_perf_catalog
from gpucluster.perf.speed import GpuPerf, JobSpeed, Precision, custom_class


class SpeedModel:
    """Speeds of jobs on GPU models, from a :class:`PerfCatalog` (the bundled one by default)."""

    def __init__(self, catalog: PerfCatalog | None = None) -> None:
        self.catalog = catalog if catalog is not None else load_perf_catalog()
        self.unknown: set[str] = set()
        """GPU model names asked about that the catalog does not know (they ran at reference speed)."""

    def job(
        self,
        *,
        kind: str = "training",
        model: str = "",
        ref_gpu: str | None = None,
        work_class: str | None = None,
        precision: str | None = None,
        measured: Mapping[str, float] | None = None,
        shares: tuple[float, float, float] | None = None,
    ) -> JobSpeed:
        """A job's speed description. Raises ValueError naming the field at fault.

        ``kind`` training | inference; ``model`` the ML model name (picks the work class by the catalog's
        ``match`` rules unless ``work_class`` names one); ``ref_gpu`` the GPU the job's work seconds were
        measured on (None = the same speed on every GPU); ``precision`` fp32 | tf32 | bf16 | fp8 | int8
        (default: the class's); ``measured`` GPU name -> measured speed relative to ``ref_gpu`` (override);
        ``shares`` (compute, memory, host) of the job's run time on ``ref_gpu`` (override of the class).
        """
        ref = None
        if ref_gpu is not None:
            ref = self.catalog.find(ref_gpu)
            if ref is None:
                raise ValueError(f"ref_gpu: unknown GPU model {ref_gpu!r}; known: {self._known()}")
        try:
            cls = self.catalog.work_class(work_class) if work_class else self.catalog.classify(kind, model)
        except KeyError as exc:
            raise ValueError(f"{'work_class' if work_class else 'kind'}: {exc.args[0]}") from None
        if precision is not None and precision not in get_args(Precision):
            raise ValueError(f"precision: {precision!r} is not one of {', '.join(get_args(Precision))}")
        prec: Precision = precision if precision is not None else cls.precision  # type: ignore[assignment]
        if shares is not None:
            if ref is None:
                raise ValueError("shares: need a ref_gpu (the shares are of the run time on it)")
            try:
                cls = custom_class(ref, prec, *shares, kind=cls.kind)
            except ValueError as exc:
                raise ValueError(f"shares: {exc}") from None
        speeds: dict[str, float] = {}
        for name, value in (measured or {}).items():
            canonical = self.catalog.resolve(name)
            if canonical is None:
                raise ValueError(f"speed.{name}: unknown GPU model; known: {self._known()}")
            if not value > 0:
                raise ValueError(f"speed.{name}: must be > 0, not {value}")
            speeds[canonical] = float(value)
        if speeds and ref is None:
            raise ValueError("speed: measured speeds need a ref_gpu (they are relative to it)")
        return JobSpeed(ref, cls, prec, speeds)

    def _known(self) -> str:
        return ", ".join(sorted(self.catalog.gpus))

    def gpu(self, name: str) -> GpuPerf | None:
        """The catalog entry for a node's GPU model name, or None (recorded in :attr:`unknown`)."""
        found = self.catalog.find(name)
        if found is None:
            self.unknown.add(name)
        return found

    def factor(self, job: JobSpeed, gpu_name: str) -> float:
        """Speed of ``job`` on GPU model ``gpu_name`` relative to its reference; 1.0 for unknown models."""
        gpu = self.gpu(gpu_name)
        return 1.0 if gpu is None else job.factor(gpu)

    def gang_factor(self, job: JobSpeed, gpu_names: Sequence[str]) -> float:
        """Pace of a job spread over these models: its slowest member's speed."""
        return min((self.factor(job, n) for n in gpu_names), default=1.0)

    def matrix(self, jobs: Sequence[JobSpeed], gpu_names: Sequence[str]) -> npt.NDArray[np.float64]:
        """``jobs x models`` speeds (1.0 where a model is unknown)."""
        cols = [self.gpu(n) for n in gpu_names]
        out = np.ones((len(jobs), len(cols)), np.float64)
        for j, gpu in enumerate(cols):
            if gpu is not None:
                out[:, j] = [job.factor(gpu) for job in jobs]
        return out
