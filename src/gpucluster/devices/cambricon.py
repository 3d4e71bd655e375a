"""Cambricon MLUs shared through HAMi (``cambricon.com/vmlu`` and the smlu memory/core resources)."""

from __future__ import annotations

from gpucluster.devices.base import HamiVendor, VendorNames, VendorSettings
from gpucluster.model.resources import VENDOR_CAMBRICON

NAMES = VendorNames(
    vendor=VENDOR_CAMBRICON,
    resource_count="cambricon.com/vmlu",
    resource_memory="cambricon.com/mlu.smlu.vmemory",
    resource_cores="cambricon.com/mlu.smlu.vcore",
    register_annotation="hami.io/node-mlu-register",
    handshake_annotation="hami.io/node-handshake-mlu",
    use_type_annotation="cambricon.com/use-mlutype",
    nouse_type_annotation="cambricon.com/nouse-mlutype",
    use_uuid_annotation="cambricon.com/use-gpuuuid",
    nouse_uuid_annotation="cambricon.com/nouse-gpuuuid",
    allocate_annotation="hami.io/cambricon-mlu-devices-to-allocate",
    device_type_prefix="MLU-",
)


def make(settings: VendorSettings | None = None) -> HamiVendor:
    return HamiVendor(NAMES, settings)
