"""Cambricon MLUs shared through HAMi (``cambricon.com/vmlu`` and the smlu memory/core resources).

HAMi v2.10: one ``cambricon.com/mlu.smlu.vmemory`` unit is 256 MiB (none or 0 = the whole device); no
``mlu.smlu.vcore`` = 100; the MLUs of a node come from its capacity (``mlu.smlu.vcore`` / 100 devices, each
with ``vmemory x 256 x 100 / vcore`` MiB, split 100 ways, type ``MLU``, id ``<node>-cambricon-mlu-<i>``), not
from a register annotation (we still read ``hami.io/node-mlu-register`` when the capacity has no vcore). HAMi's
Cambricon backend does not check ``cambricon.com/use-mlutype`` / ``nouse-mlutype``; neither do we.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucluster.devices.base import HamiVendor, RegisteredDevice, VendorNames, VendorSettings, quantity
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

MEMORY_UNIT_MIB = 256
"""MiB per ``cambricon.com/mlu.smlu.vmemory`` unit (HAMi's ``MemoryFactor``)."""
MLU_TYPE = "MLU"
PROFILE_ANNOTATION = "CAMBRICON_DSMLU_PROFILE"
"""Pod annotation HAMi writes for the Cambricon device plugin: ``<index>_<cores>_<memory units>`` of the first
MLU the pod got."""
ASSIGNED_ANNOTATION = "CAMBRICON_DSMLU_ASSIGNED"


class CambriconVendor(HamiVendor):
    default_memory_factor = MEMORY_UNIT_MIB

    @property
    def type_annotations_apply(self) -> bool:
        return False

    def capacity_devices(self, node: str, capacity: Mapping[str, object], where: str) -> list[RegisteredDevice]:
        cores_name, mem_name = self.names.resource_cores, self.names.resource_memory
        if cores_name not in capacity:
            return []
        cards = quantity(capacity[cores_name], where, f"status.capacity[{cores_name}]")
        if cards == 0:
            return []
        units = quantity(capacity.get(mem_name, 0), where, f"status.capacity[{mem_name}]")
        per_device = units * MEMORY_UNIT_MIB * 100 // cards
        return [
            RegisteredDevice(uuid=f"{node}-cambricon-mlu-{i}", index=i, split_count=100, memory_mib=per_device,
                             cores_pct=100, model=MLU_TYPE, numa=0, healthy=True)
            for i in range(-(-cards // 100))
        ]


def make(settings: VendorSettings | None = None) -> HamiVendor:
    return CambriconVendor(NAMES, settings)
