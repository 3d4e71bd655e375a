"""Storage layer (NVMe nodes + parallel file system) and the management networks."""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucluster.design.network import ClosPlan, plan_clos
from gpucluster.design.prices import PriceCatalog
from gpucluster.design.requirements import ManagementReq, StorageReq


@dataclass(frozen=True, slots=True)
class StoragePlan:
    """Storage nodes and their network."""

    nodes: int
    capacity_tb: float
    read_gbs: float  # aggregate read bandwidth the nodes serve
    required_read_gbs: float
    per_server_link_gbs: float  # what one GPU server's storage ports carry
    per_server_need_gbs: float
    network: ClosPlan
    warnings: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ManagementPlan:
    """In-band (K8s, SSH, images) and out-of-band (BMC) networks."""

    servers: int
    ufm_appliances: int
    inband: ClosPlan
    oob_ports: int
    oob_switches: int


def plan_storage(req: StorageReq, servers: int, gpus: int, gpus_per_server: int,
                 prices: PriceCatalog) -> StoragePlan:
    node = prices.storage_node
    need_gbs = gpus * req.read_gbs_per_gpu
    nodes = 0
    if req.capacity_tb > 0 or need_gbs > 0:
        nodes = max(1, math.ceil(req.capacity_tb / node.usable_tb), math.ceil(need_gbs / node.read_gbs))
    warnings: list[str] = []
    link_gbs = req.ports_per_server * req.link_gbps / 8.0
    server_need = gpus_per_server * req.read_gbs_per_gpu
    if server_need > link_gbs:
        warnings.append(
            f"storage: each server needs {server_need:g} GB/s but its {req.ports_per_server} x "
            f"{req.link_gbps} Gb/s storage ports carry {link_gbs:g} GB/s"
        )
    net = plan_clos(servers=servers if nodes else 0, ports_per_server=req.ports_per_server,
                    radix=req.switch_ports, extra_ports=nodes * node.ports,
                    link_gbps=req.link_gbps, field="storage")
    return StoragePlan(nodes, nodes * node.usable_tb, nodes * node.read_gbs, need_gbs, link_gbs,
                       server_need, net, tuple(warnings))


def plan_management(req: ManagementReq, *, servers: int, storage_nodes: int, ufm: int,
                    switches: int, racks: int) -> ManagementPlan:
    inband = plan_clos(servers=servers, ports_per_server=1, radix=req.inband_switch_ports,
                       extra_ports=req.servers + storage_nodes + ufm, link_gbps=100,
                       field="management")
    # BMCs of every server, switch management ports, two PDUs per rack
    oob_ports = servers + storage_nodes + req.servers + ufm + switches + inband.switches + 2 * racks
    oob_switches = math.ceil(oob_ports / req.oob_switch_ports)
    return ManagementPlan(req.servers, ufm, inband, oob_ports, oob_switches)
