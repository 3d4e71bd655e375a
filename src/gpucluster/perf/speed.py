"""The speed model: how fast a job runs on one GPU model compared with its reference GPU. Pure, no I/O.

A job's work is given in seconds on its reference GPU (``ref_gpu``). Its run time on another model follows from
its work class, a roofline-style blend of three shares of its run time on the class's *anchor* GPU at the
class's precision (docs/gpu-speed.md):

    T(gpu, p) = compute * peak(anchor, p0) / peak(gpu, p)     compute-bound kernels scale with the peak
              + memory  * bw(anchor) / bw(gpu)                memory-bound kernels scale with bandwidth
              + host                                          host-bound time (input, CPU) does not change

``peak`` is the GPU's dense throughput at the precision (falling back fp8 -> bf16 -> fp32, int8 -> bf16 -> fp32,
tf32 -> fp32 where a GPU lacks the path) times its ``sustained`` fraction. The speed on ``gpu`` relative to the
reference is ``T(ref, p) / T(gpu, p)``; a per-job measured speed (``measured``) overrides it. The network model's
slowdown stacks on top of this (it is applied by the job engine, not here).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Precision = Literal["fp32", "tf32", "bf16", "fp8", "int8"]
PRECISIONS: tuple[Precision, ...] = ("fp32", "tf32", "bf16", "fp8", "int8")
FALLBACK: Mapping[str, tuple[Precision, ...]] = {
    "fp32": ("fp32",),
    "tf32": ("tf32", "fp32"),
    "bf16": ("bf16", "fp32"),
    "fp8": ("fp8", "bf16", "fp32"),
    "int8": ("int8", "bf16", "fp32"),
}
"""Which path a GPU without the asked precision runs instead (first one it has)."""


@dataclass(frozen=True, slots=True)
class GpuPerf:
    """One GPU model's performance figures (dense peaks; units as in the catalog)."""

    name: str
    vendor: str
    architecture: str
    fp32: float  # TFLOPS
    tf32: float | None
    bf16: float | None  # BF16, or FP16 where the GPU has no BF16
    fp8: float | None
    int8: float | None  # TOPS
    memory_gb: float
    memory_bw_gbs: float
    nvlink_gbs: float
    pcie_gbs: float
    tdp_w: float
    sustained: float = 1.0  # fraction of the peak kept up under long load

    def precision_used(self, precision: Precision) -> Precision:
        """The path this GPU runs for ``precision`` (itself, or the fallback it has)."""
        for p in FALLBACK[precision]:
            if getattr(self, p) is not None:
                return p
        return "fp32"

    def peak(self, precision: Precision) -> float:
        """Sustained dense throughput for ``precision`` (after fallback), TFLOPS or TOPS."""
        value = getattr(self, self.precision_used(precision))
        return float(value) * self.sustained


@dataclass(frozen=True, slots=True)
class WorkClass:
    """Where a kind of job spends its time, as shares of its run time on ``anchor`` at ``precision``."""

    name: str
    kind: str  # training | inference
    anchor: GpuPerf
    precision: Precision
    compute: float
    memory: float
    host: float

    def __post_init__(self) -> None:
        shares = (self.compute, self.memory, self.host)
        if min(shares) < 0 or abs(sum(shares) - 1.0) > 1e-6:
            raise ValueError(f"work class {self.name}: shares must be >= 0 and add up to 1, not {shares}")

    def time_units(self, gpu: GpuPerf, precision: Precision | None = None) -> float:
        """Run time on ``gpu`` in units of the run time on the anchor at the class precision."""
        p = precision or self.precision
        return (self.compute * self.anchor.peak(self.precision) / gpu.peak(p)
                + self.memory * self.anchor.memory_bw_gbs / gpu.memory_bw_gbs
                + self.host)

    def speed(self, ref: GpuPerf, gpu: GpuPerf, precision: Precision | None = None) -> float:
        """How many times faster than on ``ref`` a job of this class runs on ``gpu``."""
        return self.time_units(ref, precision) / self.time_units(gpu, precision)

    def shares_on(self, gpu: GpuPerf, precision: Precision | None = None) -> tuple[float, float, float]:
        """(compute, memory, host) shares of the run time on ``gpu`` (what bounds the job there)."""
        p = precision or self.precision
        c = self.compute * self.anchor.peak(self.precision) / gpu.peak(p)
        m = self.memory * self.anchor.memory_bw_gbs / gpu.memory_bw_gbs
        total = c + m + self.host
        return c / total, m / total, self.host / total


def custom_class(anchor: GpuPerf, precision: Precision, compute: float, memory: float, host: float,
                 kind: str = "training", name: str = "custom") -> WorkClass:
    """A job's own split of its run time on ``anchor`` (usually its reference GPU)."""
    return WorkClass(name, kind, anchor, precision, compute, memory, host)


@dataclass(frozen=True, slots=True)
class JobSpeed:
    """How one job's speed depends on the GPU model it runs on.

    ``ref`` is None for work that is the same on every GPU (the behaviour before the speed model: a job's
    duration is its run time wherever it lands). ``measured`` maps canonical GPU names to the job's measured speed
    relative to ``ref`` (a per-job override, like Gavel's throughput table); it wins over the model.
    """

    ref: GpuPerf | None
    work_class: WorkClass
    precision: Precision
    measured: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name, v in self.measured.items():
            if not v > 0:
                raise ValueError(f"measured speed on {name} must be > 0, not {v}")

    def factor(self, gpu: GpuPerf) -> float:
        """Speed on ``gpu`` relative to the reference (2.0 = the job finishes in half its work seconds)."""
        if gpu.name in self.measured:
            return self.measured[gpu.name]
        if self.ref is None or gpu.name == self.ref.name:
            return 1.0
        return self.work_class.speed(self.ref, gpu, self.precision)

    def gang_factor(self, gpus: Iterable[GpuPerf]) -> float:
        """A synchronous job spread over several models runs at the pace of its slowest member."""
        return min((self.factor(g) for g in gpus), default=1.0)

    def run_s(self, work_s: float, gpu: GpuPerf) -> float:
        """Seconds ``work_s`` reference-GPU seconds take on ``gpu`` (before any network slowdown)."""
        return work_s / self.factor(gpu)

