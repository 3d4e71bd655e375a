"""Hardware facts the calculators use: GPUs, server platforms, switches.

Every figure here is a vendor-published fact, or is marked as an estimate in its ``source``
note. Prices are not here: they live in the user-editable price catalog (``data/prices.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class FormFactor(StrEnum):
    """How the GPU attaches to the server."""

    SXM = "sxm"  # baseboard module with NVSwitch (HGX / DGX)
    PCIE = "pcie"  # add-in card


@dataclass(frozen=True, slots=True)
class GpuModel:
    """One GPU model and the facts a design needs."""

    name: str  # canonical name used in cluster specs, e.g. "H100-SXM5-80GB"
    vendor: str  # nvidia | cambricon | hygon
    memory_gb: int  # marketed memory size (GB)
    memory_mib: int  # memory as the device reports it (MiB); nominal where no report was at hand
    tdp_w: int  # board power limit (W)
    nvlink_gbs: int  # NVLink bandwidth per GPU, both directions (GB/s); 0 = none
    form_factor: FormFactor
    max_per_server: int  # most GPUs of this model one server platform takes
    nvlink_domain: int  # GPUs in one NVLink domain inside a server; 0 = PCIe only
    platform: str  # key into PLATFORMS
    use: str  # "training" | "inference"
    source: str


@dataclass(frozen=True, slots=True)
class Platform:
    """A server platform: what a server adds on top of its GPUs.

    ``base_overhead_w`` is everything but the GPUs and the NICs at full load (CPUs, memory,
    drives, fans, NVSwitch baseboard); ``per_nic_w`` is added per network port card. For DGX
    platforms the overhead is the vendor's system maximum minus the GPUs' TDP, so NICs are
    already inside it and ``per_nic_w`` is 0.
    """

    name: str
    description: str
    max_gpus: int
    height_u: int
    base_overhead_w: float
    per_nic_w: float
    default_psu: str  # "COUNTxWATTS:ACTIVE+REDUNDANT"
    cpu_milli: int  # CPU cores x 1000 offered to workloads
    memory_mib: int  # host memory
    source: str


@dataclass(frozen=True, slots=True)
class SwitchModel:
    """A switch model (facts). Power and price are estimates in the price catalog."""

    name: str
    ports: int
    port_gbps: int
    height_u: int
    source: str


_H100_SRC = "NVIDIA H100 Tensor Core GPU datasheet (SXM5: 80 GB HBM3, 700 W, NVLink 900 GB/s)"

GPUS: dict[str, GpuModel] = {
    g.name: g
    for g in (
        GpuModel("H100-SXM5-80GB", "nvidia", 80, 81559, 700, 900, FormFactor.SXM, 8, 8,
                 "dgx-h100", "training", _H100_SRC),
        GpuModel("H100-PCIe-80GB", "nvidia", 80, 81559, 350, 600, FormFactor.PCIE, 8, 2,
                 "pcie-4u", "training",
                 "NVIDIA H100 datasheet (PCIe: 350 W, NVLink bridge 600 GB/s between pairs)"),
        GpuModel("H800-SXM5-80GB", "nvidia", 80, 81559, 700, 400, FormFactor.SXM, 8, 8,
                 "dgx-h100", "training",
                 "NVIDIA H800 (export variant of H100 SXM5: 700 W, NVLink 400 GB/s)"),
        GpuModel("H200-SXM-141GB", "nvidia", 141, 143771, 700, 900, FormFactor.SXM, 8, 8,
                 "dgx-h100", "training",
                 "NVIDIA H200 datasheet (141 GB HBM3e, up to 700 W, NVLink 900 GB/s); "
                 "DGX H200 max 10.2 kW like DGX H100"),
        GpuModel("A100-SXM4-80GB", "nvidia", 80, 81920, 400, 600, FormFactor.SXM, 8, 8,
                 "dgx-a100", "training",
                 "NVIDIA A100 datasheet (SXM4 80 GB: 400 W, NVLink 600 GB/s)"),
        GpuModel("A800-SXM4-80GB", "nvidia", 80, 81920, 400, 400, FormFactor.SXM, 8, 8,
                 "dgx-a100", "training",
                 "NVIDIA A800 (export variant of A100 SXM4: 400 W, NVLink 400 GB/s)"),
        GpuModel("B200-SXM-180GB", "nvidia", 180, 184320, 1000, 1800, FormFactor.SXM, 8, 8,
                 "dgx-b200", "training",
                 "NVIDIA DGX B200 datasheet (8 GPUs, 1,440 GB total, NVLink 5 1.8 TB/s per GPU); "
                 "1,000 W per GPU in HGX B200; MiB figure nominal (180 x 1024)"),
        GpuModel("L40S-48GB", "nvidia", 48, 49152, 350, 0, FormFactor.PCIE, 10, 0,
                 "pcie-4u", "inference",
                 "NVIDIA L40S datasheet (48 GB GDDR6, 350 W, no NVLink, dual slot); MiB nominal"),
        GpuModel("RTX-4000-Ada-20GB", "nvidia", 20, 20480, 130, 0, FormFactor.PCIE, 16, 0,
                 "pcie-4u", "inference",
                 "NVIDIA RTX 4000 Ada datasheet (20 GB GDDR6, 130 W, single slot); MiB nominal"),
        GpuModel("A10-24GB", "nvidia", 24, 23028, 150, 0, FormFactor.PCIE, 10, 0,
                 "pcie-4u", "inference",
                 "NVIDIA A10 datasheet (24 GB GDDR6, 150 W); 23028 MiB as HAMi reports it"),
    )
}

# Short names people type, lower case -> canonical name.
GPU_ALIASES: dict[str, str] = {
    "h100": "H100-SXM5-80GB",
    "h100-sxm": "H100-SXM5-80GB",
    "h100-sxm5": "H100-SXM5-80GB",
    "h100-pcie": "H100-PCIe-80GB",
    "h800": "H800-SXM5-80GB",
    "h200": "H200-SXM-141GB",
    "a100": "A100-SXM4-80GB",
    "a800": "A800-SXM4-80GB",
    "b200": "B200-SXM-180GB",
    "l40s": "L40S-48GB",
    "rtx4000": "RTX-4000-Ada-20GB",
    "rtx-4000": "RTX-4000-Ada-20GB",
    "rtx-4000-ada": "RTX-4000-Ada-20GB",
    "r4000": "RTX-4000-Ada-20GB",  # the seed's "R4000"
    "a10": "A10-24GB",
}

PLATFORMS: dict[str, Platform] = {
    p.name: p
    for p in (
        Platform("dgx-h100", "DGX/HGX H100-class 8-GPU server (also H800, H200)", 8, 8,
                 10200 - 8 * 700, 0.0, "6x3300:4+2", 224_000, 2_097_152,
                 "NVIDIA DGX H100 datasheet: 10.2 kW max, six 3.3 kW PSUs (4+2), 8U, "
                 "2x 56-core CPUs, 2 TB memory; overhead = 10,200 W - 8 x 700 W"),
        Platform("dgx-b200", "DGX/HGX B200 8-GPU server", 8, 10,
                 14300 - 8 * 1000, 0.0, "6x3300:5+1", 224_000, 4_194_304,
                 "NVIDIA DGX B200 datasheet: ~14.3 kW max, six 3.3 kW PSUs, 10U, "
                 "2x 56-core CPUs, up to 4 TB memory; overhead = 14,300 W - 8 x 1,000 W; "
                 "5+1 redundancy is our assumption (4+2 would not carry 14.3 kW)"),
        Platform("dgx-a100", "DGX/HGX A100-class 8-GPU server (also A800)", 8, 6,
                 6500 - 8 * 400, 0.0, "6x3000:3+3", 256_000, 1_048_576,
                 "NVIDIA DGX A100 datasheet: 6.5 kW max, six 3 kW PSUs (3+3), 6U, "
                 "2x 64-core CPUs, 1 TB memory; overhead = 6,500 W - 8 x 400 W"),
        Platform("pcie-4u", "Generic 4U dual-socket PCIe GPU server", 16, 4,
                 2 * 350 + 32 * 8 + 8 * 20 + 400, 25.0, "4x3000:2+2", 128_000, 1_048_576,
                 "Estimate: 2 CPUs x 350 W (Xeon 8480+ TDP) + 32 DIMMs x 8 W + 8 NVMe x 20 W "
                 "+ 400 W fans; 25 W per 200/400G NIC; 4 x 3 kW PSUs (2+2) as common in 4U GPU servers"),
    )
}

SWITCHES: dict[str, SwitchModel] = {
    s.name: s
    for s in (
        SwitchModel("QM9700", 64, 400, 1, "NVIDIA Quantum-2 QM9700: 64 x NDR 400 Gb/s ports, 1U"),
        SwitchModel("QM8700", 40, 200, 1, "NVIDIA Quantum QM8700: 40 x HDR 200 Gb/s ports, 1U"),
        SwitchModel("SN5600", 64, 800, 2, "NVIDIA Spectrum-4 SN5600: 64 x 800 GbE ports, 2U"),
        SwitchModel("SN4600C", 64, 100, 2, "NVIDIA Spectrum-2 SN4600C: 64 x 100 GbE ports, 2U"),
        SwitchModel("SN2201", 48, 1, 1,
                    "NVIDIA Spectrum SN2201: 48 x 1 GbE RJ45 + 4 x 100 GbE uplinks, 1U"),
    )
}


def lookup_gpu(name: str) -> GpuModel:
    """Find a GPU by canonical name or alias (case-insensitive). Raises KeyError."""
    key = name.strip().lower()
    for canonical, model in GPUS.items():
        if canonical.lower() == key:
            return model
    if key in GPU_ALIASES:
        return GPUS[GPU_ALIASES[key]]
    raise KeyError(name)


def known_gpu_names() -> list[str]:
    """Canonical names, for error messages."""
    return sorted(GPUS)


def compute_switch_model(fabric: str, radix: int) -> str:
    """Catalog switch for a compute fabric of this type and radix, or a generic name."""
    if fabric == "infiniband":
        for name in ("QM9700", "QM8700"):
            if SWITCHES[name].ports == radix:
                return name
    elif radix == 64:
        return "SN5600"
    return f"generic-{radix}p-{'ib' if fabric == 'infiniband' else 'eth'}"
