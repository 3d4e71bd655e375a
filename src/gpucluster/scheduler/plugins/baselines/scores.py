"""The FGD paper's baseline policies as pure, vectorised node scores and GPU choices.

Each node score matches the FGD simulator's integer arithmetic (kube-scheduler scores are int64; the
truncation creates ties, which the caller breaks at random as kube-scheduler's ``selectHost`` does):

* DotProd (Tetris): ``int(100 * (1 - ((cpu_left/128000)(cpu/128000) + (gpu_left/8000)(gpu/8000)) / 2))``.
* GpuClustering: ``25 * (8000 - gpu_left) // 8000`` plus 75 (node runs only pods of the pod's GPU kind), 50
  (that kind among others), 25 (no GPU pods), 0 (only other kinds); 0 for CPU-only pods.
* GpuPacking: shared GPUs first (``100 - sum(left*100//1000)//10``, at least 50), then idle GPUs of a used
  node (``50 - idle GPUs taken``, at least 33), then an idle node (``max(33 - idle GPUs, idle GPUs)``).
* BestFit: ``int(100 * (1 - 0.5 (cpu_left - cpu)/128000 - 0.5 (gpu_left - gpu)/8000))``, then min-max
  normalised to 0..100 over the candidates with integer division.

GPU choice inside the node: best fit (the GPU with the least milli left that holds the pod, the first on ties)
for sharing pods; whole GPUs in index order for the others; Random picks a random GPU that holds the pod.
"""

from __future__ import annotations

import enum

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MILLI = 1000
MAX_SPEC_CPU = 128000
MAX_SPEC_GPU = 8000


class GpuKind(enum.IntEnum):
    """A pod's GPU kind (the FGD simulator's "GPU affinity" tag)."""

    SHARE = 0
    ONE = 1
    TWO = 2
    FOUR = 3
    EIGHT = 4
    OTHER = 5


N_KINDS = len(GpuKind)
_BY_COUNT = {1: GpuKind.ONE, 2: GpuKind.TWO, 4: GpuKind.FOUR, 8: GpuKind.EIGHT}


def gpu_kind(num: int, milli: int) -> GpuKind | None:
    """None for CPU-only pods."""
    if num <= 0 or milli <= 0:
        return None
    if num == 1 and milli < MILLI:
        return GpuKind.SHARE
    return _BY_COUNT.get(num, GpuKind.OTHER)


def dotprod_scores(cpu_left: IntArray, gpu_total_left: IntArray, cpu: int, gpu: int) -> IntArray:
    a = (cpu_left / MAX_SPEC_CPU) * (cpu / MAX_SPEC_CPU)
    b = (gpu_total_left / MAX_SPEC_GPU) * (gpu / MAX_SPEC_GPU)
    dot = (a + b) / 2.0
    return np.trunc(100.0 * (1.0 - dot)).astype(np.int64)


def clustering_scores(gpu_total_left: IntArray, kinds: IntArray, kind: GpuKind | None) -> IntArray:
    """``kinds`` [B, N_KINDS]: counts of GPU pods of each kind on the node."""
    if kind is None:
        return np.zeros(gpu_total_left.shape[0], np.int64)
    base = 25 * (MAX_SPEC_GPU - gpu_total_left) // MAX_SPEC_GPU
    distinct = (kinds > 0).sum(axis=1)
    has = kinds[:, int(kind)] > 0
    bonus = np.where(has, np.where(distinct == 1, 75, 50), np.where(distinct == 0, 25, 0))
    return np.asarray(base + bonus, np.int64)


def packing_scores(gpu_left: IntArray, gpu_count: IntArray, milli: int, num: int) -> IntArray:
    b = gpu_left.shape[0]
    if milli <= 0 or num <= 0:
        return np.zeros(b, np.int64)
    full = (gpu_left >= MILLI).sum(axis=1)
    idle_node = full == gpu_count
    case3 = np.maximum(33 - full, full)
    if num == 1 and milli < MILLI:
        fits = gpu_left >= milli
        tightest = np.where(fits, gpu_left, np.iinfo(np.int64).max).min(axis=1)
        uses_full = tightest >= MILLI
        case1 = np.maximum(100 - (tightest * 100 // MILLI) // 10, 50)
        other = np.where(uses_full, 49, case1)
    else:
        other = np.full(b, max(50 - num, 33), np.int64)
    return np.asarray(np.where(idle_node, case3, other), np.int64)


def bestfit_raw(cpu_left: IntArray, gpu_total_left: IntArray, cpu: int, gpu: int) -> IntArray:
    s = (cpu_left - cpu) / MAX_SPEC_CPU * 0.5
    s = s + (gpu_total_left - gpu) / MAX_SPEC_GPU * 0.5
    return np.trunc((1.0 - s) * 100.0).astype(np.int64)


def minmax_normalise(raw: IntArray) -> IntArray:
    """kube-scheduler style integer min-max normalisation to 0..100 (all 0 when every score is equal)."""
    if raw.size == 0:
        return raw
    lo, hi = int(raw.min()), int(raw.max())
    if hi == lo:
        return np.zeros_like(raw)
    return (raw - lo) * 100 // (hi - lo)


def best_fit_gpu(gpu_left_row: IntArray, milli: int) -> int:
    """The GPU with the least milli left that still holds ``milli`` (first on ties); -1 if none."""
    fits = gpu_left_row >= milli
    if not fits.any():
        return -1
    masked = np.where(fits, gpu_left_row, np.iinfo(np.int64).max)
    return int(np.argmin(masked))


def whole_gpus(gpu_left_row: IntArray, num: int) -> list[int]:
    """The first ``num`` idle GPUs by index."""
    return [int(j) for j in np.flatnonzero(gpu_left_row >= MILLI)[:num]]


def random_gpu(gpu_left_row: IntArray, milli: int, rng: np.random.Generator) -> int:
    fits = np.flatnonzero(gpu_left_row >= milli)
    if fits.size == 0:
        return -1
    return int(fits[rng.integers(fits.size)]) if fits.size > 1 else int(fits[0])
