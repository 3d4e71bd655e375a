"""NVIDIA GPUs shared through HAMi (``nvidia.com/gpu``, ``gpumem``, ``gpumem-percentage``, ``gpucores``)."""

from __future__ import annotations

from gpucluster.devices.base import HamiVendor, VendorNames, VendorSettings
from gpucluster.model.resources import VENDOR_NVIDIA

NAMES = VendorNames(
    vendor=VENDOR_NVIDIA,
    resource_count="nvidia.com/gpu",
    resource_memory="nvidia.com/gpumem",
    resource_memory_pct="nvidia.com/gpumem-percentage",
    resource_cores="nvidia.com/gpucores",
    register_annotation="hami.io/node-nvidia-register",
    handshake_annotation="hami.io/node-handshake",
    use_type_annotation="nvidia.com/use-gputype",
    nouse_type_annotation="nvidia.com/nouse-gputype",
    use_uuid_annotation="nvidia.com/use-gpuuuid",
    nouse_uuid_annotation="nvidia.com/nouse-gpuuuid",
    allocate_annotation="hami.io/vgpu-devices-to-allocate",
    device_type_prefix="NVIDIA-",
)


def make(settings: VendorSettings | None = None) -> HamiVendor:
    return HamiVendor(NAMES, settings)
