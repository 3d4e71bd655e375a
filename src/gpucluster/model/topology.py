"""Fabric description and topology levels (NVLink inside a node, leaf, spine group, core)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FabricType(enum.StrEnum):
    INFINIBAND = "infiniband"
    ROCE = "roce"


class TopologyLevel(enum.IntEnum):
    """How far apart two ranks are; lower is closer. Ordered so ``max`` gives the spanning level."""

    NVLINK = 0
    """Same node, same NVLink domain."""
    NODE = 1
    """Same node over PCIe (different NVLink domains, or no NVLink)."""
    LEAF = 2
    """Different nodes under the same leaf (group)."""
    SPINE = 3
    """Different leaves under the same spine group."""
    CORE = 4
    """Different spine groups (through the core tier)."""


@dataclass(frozen=True, slots=True)
class Fabric:
    """The compute fabric's parameters as far as placement and the network cost model need them."""

    type: FabricType = FabricType.INFINIBAND
    link_gbps: float = 400.0
    """Speed of one node port (per GPU on rail-optimised designs), Gbit/s."""
    oversubscription: float = 1.0
    """Leaf downlinks / uplinks (1.0 = non-blocking)."""
    nvlink_gbps_per_gpu: float = 3600.0
    """NVLink bandwidth per GPU, one direction, Gbit/s (450 GB/s for NVLink4)."""
    pcie_gbps_per_gpu: float = 512.0
    """PCIe bandwidth per GPU, Gbit/s (PCIe Gen5 x16 ~ 64 GB/s)."""
