"""Folded-Clos (fat-tree) fabric planning: tiers, switch counts, cable counts, bisection.

General rules (no lookup tables):

* A leaf has ``k`` ports: ``up = ceil(k / (1 + r))`` uplinks and ``down = k - up`` downlinks for
  oversubscription ``r`` (at 1:1 both are ``k/2``).
* Rail-optimised: a scalable unit (SU) is ``down`` node slots; NIC ``i`` of every node in an SU
  goes to that SU's leaf ``i``, so leaves per SU = NICs (rails) per server.
  Otherwise leaves = ceil(endpoints / down).
* One tier: a single switch holds every endpoint (not rail-optimised only).
* Two tiers when leaves <= k (a spine port per leaf). Every leaf spreads its uplinks evenly over
  all spines, so the spine count is the smallest divisor of ``up`` that is at least
  ``ceil(leaves * up / k)``. This is the rule behind NVIDIA's 16 spines for 3 SUs (24 leaves
  need 12 spines' worth of ports, 12 does not divide 32 uplinks, 16 does); with 32 uplinks the
  divisors are the powers of two, hence "rounded up to a power-of-two group".
* Three tiers: pods of ``k/2`` leaves and ``up`` spines (each spine: ``k/2`` ports down to its
  pod's leaves, ``k/2`` up); cores = ceil(spines * k/2 / k). At most ``k`` pods, i.e.
  ``k * k/2 * down`` endpoints (``k^3/4`` at 1:1). All uplinks are cabled.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpucluster.design.requirements import DesignError


@dataclass(frozen=True, slots=True)
class ClosPlan:
    """Switch and cable counts of one folded-Clos fabric."""

    tiers: int
    radix: int
    leaf_down: int
    leaf_up: int
    leaves: int
    spines: int
    cores: int
    pods: int  # spine groups (1 in a 2-tier fabric)
    leaves_per_pod: int  # 0 = one spine group
    links_per_leaf_spine: int  # parallel links between a leaf and each of its spines
    endpoints: int  # leaf ports used by servers and appliances
    node_to_leaf: int
    leaf_to_spine: int
    spine_to_core: int
    oversubscription: float
    rail_optimized: bool
    rails: int
    scalable_units: int
    nodes_per_su: int
    link_gbps: int
    bisection_tbps: float

    @property
    def switches(self) -> int:
        return self.leaves + self.spines + self.cores


def max_hosts_two_tier(k: int) -> int:
    """Non-blocking 2-tier fat tree of k-port switches: k^2/2 hosts."""
    return k * k // 2


def max_hosts_three_tier(k: int) -> int:
    """Non-blocking 3-tier fat tree of k-port switches: k^3/4 hosts."""
    return k * k * k // 4


def leaf_split(k: int, oversubscription: float) -> tuple[int, int]:
    """(down, up) ports of a leaf for the given oversubscription."""
    up = math.ceil(k / (1.0 + oversubscription) - 1e-9)
    return k - up, up


def _smallest_divisor_at_least(n: int, at_least: int) -> int:
    for d in range(max(1, at_least), n + 1):
        if n % d == 0:
            return d
    return n


def plan_clos(
    *,
    servers: int,
    ports_per_server: int,
    radix: int,
    oversubscription: float = 1.0,
    rail_optimized: bool = False,
    reserved_slots: int = 0,
    extra_ports: int = 0,
    link_gbps: int = 400,
    field: str = "fabric",
) -> ClosPlan:
    """Plan a fabric for ``servers`` x ``ports_per_server`` endpoints plus ``extra_ports``.

    ``reserved_slots`` (rail-optimised only) are node slots in the first SU given to appliances
    whose ``extra_ports`` land there (NVIDIA's UFM slot). Raises DesignError naming ``field``.
    """
    k = radix
    if k < 4 or k % 2:
        raise DesignError(f"{field}.switch_ports", f"must be an even number >= 4 (got {k})")
    if servers < 0 or ports_per_server < 0 or extra_ports < 0:
        raise DesignError(field, "counts must be >= 0")
    down, up = leaf_split(k, oversubscription)
    if up < 1 or down < 1:
        raise DesignError(f"{field}.oversubscription",
                          f"leaves of {k} ports cannot split {oversubscription}:1")
    gpu_ports = servers * ports_per_server
    endpoints = gpu_ports + extra_ports
    actual_r = round(down / up, 3)
    rails = ports_per_server if rail_optimized else 0
    sus = 0
    nodes_per_su = 0
    if endpoints == 0:
        return ClosPlan(0, k, down, up, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, actual_r, rail_optimized,
                        rails, 0, 0, link_gbps, 0.0)
    if rail_optimized:
        if ports_per_server > k:
            raise DesignError(f"{field}.nics_per_server", f"{ports_per_server} rails exceed a {k}-port leaf")
        if extra_ports > reserved_slots * max(ports_per_server, 1):
            raise DesignError(
                f"{field}.ufm_ports",
                f"{extra_ports} appliance ports need reserved_slots >= "
                f"{math.ceil(extra_ports / max(ports_per_server, 1))} in a rail-optimised fabric",
            )
        nodes_per_su = down
        sus = math.ceil((servers + reserved_slots) / down)
        leaves = sus * ports_per_server
    else:
        leaves = math.ceil(endpoints / down)

    if not rail_optimized and endpoints <= k:
        # one switch holds everything: no uplinks, nothing oversubscribed
        return ClosPlan(1, k, k, 0, 1, 0, 0, 1, 0, 0, endpoints, endpoints, 0, 0, 1.0, False,
                        0, 0, 0, link_gbps, round(gpu_ports / 2 * link_gbps / 1000.0, 3))

    bisection = round(gpu_ports / 2 * link_gbps / actual_r / 1000.0, 3)
    if leaves <= k:
        needed = math.ceil(leaves * up / k)
        spines = _smallest_divisor_at_least(up, needed)
        return ClosPlan(
            tiers=2, radix=k, leaf_down=down, leaf_up=up, leaves=leaves, spines=spines, cores=0,
            pods=1, leaves_per_pod=0, links_per_leaf_spine=up // spines, endpoints=endpoints,
            node_to_leaf=endpoints, leaf_to_spine=leaves * up, spine_to_core=0,
            oversubscription=actual_r, rail_optimized=rail_optimized, rails=rails,
            scalable_units=sus, nodes_per_su=nodes_per_su, link_gbps=link_gbps,
            bisection_tbps=bisection,
        )
    half = k // 2
    pods = math.ceil(leaves / half)
    if pods > k:
        limit = k * half * down
        raise DesignError(
            f"{field}.switch_ports",
            f"{k}-port switches reach at most {limit:,} endpoints in 3 tiers at "
            f"{actual_r:g}:1 (k^3/4 = {max_hosts_three_tier(k):,} at 1:1); this design needs "
            f"{endpoints:,}: use a larger radix, more oversubscription or fewer GPUs",
        )
    spines = pods * up
    cores = math.ceil(spines * half / k)
    return ClosPlan(
        tiers=3, radix=k, leaf_down=down, leaf_up=up, leaves=leaves, spines=spines, cores=cores,
        pods=pods, leaves_per_pod=half, links_per_leaf_spine=1, endpoints=endpoints,
        node_to_leaf=endpoints, leaf_to_spine=leaves * up, spine_to_core=spines * half,
        oversubscription=actual_r, rail_optimized=rail_optimized, rails=rails,
        scalable_units=sus, nodes_per_su=nodes_per_su, link_gbps=link_gbps,
        bisection_tbps=bisection,
    )
