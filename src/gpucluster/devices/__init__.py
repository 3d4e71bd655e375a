"""Device vendors (one module each) behind one protocol, and the explicit registry of them."""

from gpucluster.devices.base import (
    DeviceInputError,
    DeviceVendor,
    HamiVendor,
    RegisteredDevice,
    VendorNames,
    VendorSettings,
)
from gpucluster.devices.config import DeviceConfig, DeviceConfigError, load_device_config, parse_device_config
from gpucluster.devices.hami import (
    GPU_POLICY_ANNOTATION,
    NODE_POLICY_ANNOTATION,
    ScoringWeights,
)
from gpucluster.devices.registry import (
    FACTORIES,
    DeviceSettings,
    VendorRegistry,
    device_type_string,
)
from gpucluster.model.labels import GANG_ANNOTATION, GANG_MIN_ANNOTATION, TENANT_ANNOTATION

__all__ = [
    "FACTORIES",
    "GANG_ANNOTATION",
    "GANG_MIN_ANNOTATION",
    "GPU_POLICY_ANNOTATION",
    "NODE_POLICY_ANNOTATION",
    "TENANT_ANNOTATION",
    "DeviceConfig",
    "DeviceConfigError",
    "DeviceInputError",
    "DeviceSettings",
    "DeviceVendor",
    "HamiVendor",
    "RegisteredDevice",
    "ScoringWeights",
    "VendorNames",
    "VendorRegistry",
    "VendorSettings",
    "device_type_string",
    "load_device_config",
    "parse_device_config",
]
