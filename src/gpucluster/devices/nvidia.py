"""NVIDIA GPUs shared through HAMi (``nvidia.com/gpu``, ``gpumem``, ``gpumem-percentage``, ``gpucores``).

Request semantics of HAMi v2.10 (``GenerateResourceRequests`` plus its admission webhook):

* no count but memory or cores: ``defaultGPUNum`` devices (1);
* ``gpumem`` (times ``memoryFactor``) wins over ``gpumem-percentage``; either at 0 means unset; neither means
  ``defaultMemory`` when set, else the whole device; a percentage above 100 is refused (HAMi's webhook does);
* no ``gpucores``: 100 (an exclusive device) when the container gets the whole device (percentage 100, or no
  memory resource at all; the webhook's rule since v2.7), else ``defaultCores``; above 100 is clamped to 100.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucluster.devices.base import HamiVendor, VendorNames, VendorSettings, _Reader
from gpucluster.model.resources import VENDOR_NVIDIA

NAMES = VendorNames(
    vendor=VENDOR_NVIDIA,
    resource_count="nvidia.com/gpu",
    resource_memory="nvidia.com/gpumem",
    resource_memory_pct="nvidia.com/gpumem-percentage",
    resource_cores="nvidia.com/gpucores",
    resource_priority="nvidia.com/priority",
    register_annotation="hami.io/node-nvidia-register",
    handshake_annotation="hami.io/node-handshake",
    use_type_annotation="nvidia.com/use-gputype",
    nouse_type_annotation="nvidia.com/nouse-gputype",
    use_uuid_annotation="nvidia.com/use-gpuuuid",
    nouse_uuid_annotation="nvidia.com/nouse-gpuuuid",
    allocate_annotation="hami.io/vgpu-devices-to-allocate",
    device_type_prefix="NVIDIA-",
)


class NvidiaVendor(HamiVendor):
    default_cores_pct = 0

    def _implicit_count(self) -> int:
        return self.settings.default_device_count

    def _memory(self, read: _Reader, limits: Mapping[str, object], problems: list[str],
                where: str) -> tuple[int, int | None]:
        mib = self._read_memory(read, problems, where)
        pct = read(self.names.resource_memory_pct, 100) if self.names.resource_memory_pct else None
        if mib > 0:
            return mib, None
        if pct:
            return 0, pct
        if self.settings.default_memory_mib > 0:
            return self.settings.default_memory_mib, None
        return 0, 100

    def _cores(self, read: _Reader, limits: Mapping[str, object], memory: tuple[int, int | None]) -> int:
        n = self.names
        explicit = read(n.resource_cores)
        if explicit is not None:
            return explicit
        # HAMi's admission webhook: a container that gets a whole device gets it exclusively (gpucores 100)
        if n.resource_memory_pct and n.resource_memory_pct in limits:
            exclusive = read(n.resource_memory_pct, 100) == 100
        else:
            exclusive = not n.resource_memory or n.resource_memory not in limits
        if exclusive:
            return 100
        default = self.settings.default_cores_pct
        return self.default_cores_pct if default is None else default


def make(settings: VendorSettings | None = None) -> HamiVendor:
    return NvidiaVendor(NAMES, settings)
