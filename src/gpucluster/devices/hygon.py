"""Hygon DCUs shared through HAMi (``hygon.com/dcunum``, ``dcumem``, ``dcucores``).

HAMi v2.10: memory times ``memoryFactor`` (1), none or 0 = the whole device; no cores = 100; devices come
from the ``hami.io/node-dcu-register`` annotation (``uuid,count,devmem,devcore,type,numa,health[,index,mode]:``).
"""

from __future__ import annotations

from gpucluster.devices.base import HamiVendor, VendorNames, VendorSettings
from gpucluster.model.resources import VENDOR_HYGON

NAMES = VendorNames(
    vendor=VENDOR_HYGON,
    resource_count="hygon.com/dcunum",
    resource_memory="hygon.com/dcumem",
    resource_cores="hygon.com/dcucores",
    register_annotation="hami.io/node-dcu-register",
    handshake_annotation="hami.io/node-handshake-dcu",
    use_type_annotation="hygon.com/use-dcutype",
    nouse_type_annotation="hygon.com/nouse-dcutype",
    use_uuid_annotation="hygon.com/use-gpuuuid",
    nouse_uuid_annotation="hygon.com/nouse-gpuuuid",
    allocate_annotation="hami.io/dcu-devices-to-allocate",
    device_type_prefix="DCU-",
)


def make(settings: VendorSettings | None = None) -> HamiVendor:
    return HamiVendor(NAMES, settings)
