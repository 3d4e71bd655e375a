"""Pure data: resources, devices, nodes, topology, workloads, cluster state and snapshots. No I/O."""

from gpucluster.model.device import DeviceSpec
from gpucluster.model.node import NodeSpec
from gpucluster.model.resources import (
    CORE_MILLI_PER_DEVICE,
    KNOWN_VENDORS,
    PERCENT_TO_CORE_MILLI,
    VENDOR_CAMBRICON,
    VENDOR_HYGON,
    VENDOR_NVIDIA,
)
from gpucluster.model.state import Allocation, AllocationError, ClusterState, DeviceGrant, Snapshot
from gpucluster.model.topology import Fabric, FabricType, TopologyLevel
from gpucluster.model.workload import ContainerRequest, DeviceConstraints, DeviceRequest, Pod, Policy

__all__ = [
    "CORE_MILLI_PER_DEVICE",
    "KNOWN_VENDORS",
    "PERCENT_TO_CORE_MILLI",
    "VENDOR_CAMBRICON",
    "VENDOR_HYGON",
    "VENDOR_NVIDIA",
    "Allocation",
    "AllocationError",
    "ClusterState",
    "ContainerRequest",
    "DeviceConstraints",
    "DeviceGrant",
    "DeviceRequest",
    "DeviceSpec",
    "Fabric",
    "FabricType",
    "NodeSpec",
    "Pod",
    "Policy",
    "Snapshot",
    "TopologyLevel",
]
