"""Device vendors (one module each) behind one protocol, and the explicit registry of them."""

from gpucluster.devices.base import (
    DeviceInputError,
    DeviceVendor,
    HamiVendor,
    RegisteredDevice,
    VendorNames,
    VendorSettings,
)
from gpucluster.devices.registry import (
    FACTORIES,
    GANG_ANNOTATION,
    GANG_MIN_ANNOTATION,
    GPU_POLICY_ANNOTATION,
    NODE_POLICY_ANNOTATION,
    TENANT_ANNOTATION,
    DeviceSettings,
    VendorRegistry,
)

__all__ = [
    "FACTORIES",
    "GANG_ANNOTATION",
    "GANG_MIN_ANNOTATION",
    "GPU_POLICY_ANNOTATION",
    "NODE_POLICY_ANNOTATION",
    "TENANT_ANNOTATION",
    "DeviceInputError",
    "DeviceSettings",
    "DeviceVendor",
    "HamiVendor",
    "RegisteredDevice",
    "VendorNames",
    "VendorRegistry",
    "VendorSettings",
]
