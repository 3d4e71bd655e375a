"""All-reduce cost model (alpha-beta) per topology level, and the slowdown a placement causes.

Ring all-reduce of ``S`` bytes over ``p`` ranks takes ``T = 2(p-1) alpha + 2(p-1)/p * S / B`` where ``B`` is
the slowest link a rank uses: NVLink inside a domain, PCIe inside a node, the node's fabric port under one
leaf, the port divided by the oversubscription ratio across leaves (spine), and by its square across spine
groups (core). A training iteration is its compute time plus the part of the all-reduce that does not
overlap with compute (``1 - overlap``). A job's slowdown is the iteration time on its placement divided by
the iteration time on the best placement its size allows; the trace's duration is taken to be the latter.

Model figures (gradient bytes, compute time per iteration on a V100) are public approximations:
parameter counts of the reference models in fp32, and Gavel's measured single-V100 throughputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gpucluster.model import Fabric, TopologyLevel


@dataclass(frozen=True, slots=True)
class ModelProfile:
    gradient_bytes: float
    """Bytes all-reduced per iteration (parameters x 4 bytes)."""
    iteration_s: float
    """Compute time of one iteration on one GPU."""


MODEL_PROFILES: Mapping[str, ModelProfile] = {
    # prefix of the job type -> profile (Gavel's job types; iteration time = 1 / V100 steps per s)
    "ResNet-18": ModelProfile(11.7e6 * 4, 1 / 48.9),
    "ResNet-50": ModelProfile(25.6e6 * 4, 1 / 5.5),
    "Transformer": ModelProfile(60e6 * 4, 1 / 9.6),
    "LM": ModelProfile(20e6 * 4, 1 / 72.0),
    "Recommendation": ModelProfile(40e6 * 4, 1 / 0.57),
    "A3C": ModelProfile(1e6 * 4, 1 / 8.2),
    "CycleGAN": ModelProfile(28e6 * 4, 1 / 4.9),
    "vgg": ModelProfile(138e6 * 4, 1 / 4.0),
    "inception": ModelProfile(43e6 * 4, 1 / 4.0),
    "resnet": ModelProfile(25.6e6 * 4, 1 / 5.5),
    "alexnet": ModelProfile(61e6 * 4, 1 / 20.0),
    "googlenet": ModelProfile(7e6 * 4, 1 / 10.0),
    "bert": ModelProfile(340e6 * 2, 1 / 3.0),
    "gpt": ModelProfile(1.3e9 * 2, 1 / 1.0),
}
DEFAULT_PROFILE = ModelProfile(50e6 * 4, 0.25)
"""Used for job types the table does not know."""


def profile_of(model: str) -> ModelProfile:
    for prefix, prof in MODEL_PROFILES.items():
        if model.startswith(prefix):
            return prof
    return DEFAULT_PROFILE


@dataclass(frozen=True, slots=True)
class NetworkModel:
    """Alpha-beta all-reduce costs over a :class:`~gpucluster.model.Fabric`."""

    fabric: Fabric = field(default_factory=Fabric)
    alpha_s: Mapping[TopologyLevel, float] = field(default_factory=lambda: {
        TopologyLevel.NVLINK: 1e-6, TopologyLevel.NODE: 2e-6, TopologyLevel.LEAF: 2e-6,
        TopologyLevel.SPINE: 4e-6, TopologyLevel.CORE: 5e-6,
    })
    """Per-message latency at each level, seconds (reference facts: NVLink ~1 us, leaf 1-2, spine 3-5)."""
    overlap: float = 0.7
    """Fraction of the all-reduce hidden behind compute (bucketed gradients overlap backward passes)."""

    def bandwidth_bytes_s(self, level: TopologyLevel) -> float:
        f = self.fabric
        gbps = {
            TopologyLevel.NVLINK: f.nvlink_gbps_per_gpu,
            TopologyLevel.NODE: f.pcie_gbps_per_gpu,
            TopologyLevel.LEAF: f.link_gbps,
            TopologyLevel.SPINE: f.link_gbps / f.oversubscription,
            TopologyLevel.CORE: f.link_gbps / (f.oversubscription ** 2),
        }[level]
        return gbps * 1e9 / 8

    def allreduce_s(self, size_bytes: float, ranks: int, level: TopologyLevel) -> float:
        """Ring all-reduce time of ``size_bytes`` over ``ranks`` ranks spanning ``level``."""
        if ranks <= 1:
            return 0.0
        p = ranks
        return 2 * (p - 1) * self.alpha_s[level] + 2 * (p - 1) / p * size_bytes / self.bandwidth_bytes_s(level)

    def iteration_s(self, model: str, ranks: int, level: TopologyLevel) -> float:
        prof = profile_of(model)
        return prof.iteration_s + (1 - self.overlap) * self.allreduce_s(prof.gradient_bytes, ranks, level)

    def slowdown(self, model: str, ranks: int, level: TopologyLevel, ideal: TopologyLevel) -> float:
        """Iteration time at ``level`` over that at ``ideal`` (>= 1 when ``level`` is no closer)."""
        if ranks <= 1 or level <= ideal:
            return 1.0
        return self.iteration_s(model, ranks, level) / self.iteration_s(model, ranks, ideal)
