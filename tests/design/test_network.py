"""Fabric planner against NVIDIA's DGX SuperPOD tables and fat-tree limits."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.design import DesignError, max_hosts_three_tier, max_hosts_two_tier, plan_clos
from gpucluster.design.cabling import build_schedule

# (SU, nodes, GPUs, leaf, spine, node+UFM cables, spine-leaf cables) from reference-facts.md
H100_SUPERPOD = [
    (1, 31, 248, 8, 4, 252, 256),
    (2, 63, 504, 16, 8, 508, 512),
    (3, 95, 760, 24, 16, 764, 768),
    (4, 127, 1016, 32, 16, 1020, 1024),
]

# (SU, tiers, leaf, spine, core); cables per tier = GPUs
B200_SUPERPOD = [
    (2, 2, 16, 8, 0),
    (4, 2, 32, 16, 0),
    (8, 2, 64, 32, 0),
    (16, 3, 128, 128, 64),
    (32, 3, 256, 256, 128),
    (64, 3, 512, 512, 256),
]


@pytest.mark.parametrize("row", H100_SUPERPOD, ids=lambda row: f"SU{row[0]}")
def test_dgx_h100_superpod_table(row: tuple[int, int, int, int, int, int, int]) -> None:
    su, nodes, gpus, leaf, spine, node_cables, spine_cables = row
    servers = 32 * su - 1  # one node slot of the first SU holds the UFM
    plan = plan_clos(servers=servers, ports_per_server=8, radix=64, rail_optimized=True,
                     reserved_slots=1, extra_ports=4)
    assert (servers, servers * 8) == (nodes, gpus)
    assert plan.tiers == 2
    assert (plan.leaves, plan.spines, plan.cores) == (leaf, spine, 0)
    assert plan.node_to_leaf == node_cables
    assert plan.leaf_to_spine == spine_cables
    assert plan.oversubscription == 1.0


@pytest.mark.parametrize(("su", "tiers", "leaf", "spine", "core"), B200_SUPERPOD)
def test_dgx_b200_superpod_table(su: int, tiers: int, leaf: int, spine: int, core: int) -> None:
    gpus = 32 * su * 8
    plan = plan_clos(servers=32 * su, ports_per_server=8, radix=64, rail_optimized=True)
    assert plan.tiers == tiers
    assert (plan.leaves, plan.spines, plan.cores) == (leaf, spine, core)
    assert plan.node_to_leaf == gpus
    assert plan.leaf_to_spine == gpus
    assert plan.spine_to_core == (gpus if tiers == 3 else 0)


@pytest.mark.parametrize("k", [32, 40, 64])
def test_fat_tree_limits(k: int) -> None:
    two = max_hosts_two_tier(k)
    three = max_hosts_three_tier(k)
    assert two == k * k // 2
    assert three == k**3 // 4
    full2 = plan_clos(servers=two, ports_per_server=1, radix=k)
    assert (full2.tiers, full2.leaves, full2.spines) == (2, k, k // 2)
    assert plan_clos(servers=two + 1, ports_per_server=1, radix=k).tiers == 3
    full3 = plan_clos(servers=three, ports_per_server=1, radix=k)
    assert full3.tiers == 3
    assert (full3.leaves, full3.spines, full3.cores) == (k * k // 2, k * k // 2, k * k // 4)
    assert full3.switches == 5 * k * k // 4
    with pytest.raises(DesignError) as err:
        plan_clos(servers=three + 1, ports_per_server=1, radix=k)
    assert err.value.field == "fabric.switch_ports"


def test_seed_1600_gpus_fit_two_tiers_of_64_port_switches() -> None:
    plan = plan_clos(servers=200, ports_per_server=8, radix=64, rail_optimized=True)
    assert plan.tiers == 2
    assert plan.leaves == 56  # 7 SUs x 8 rails
    assert plan.spines == 32  # 28 spines' worth of ports, spread evenly over 32 uplinks
    assert plan.spines * 64 >= plan.leaf_to_spine
    assert plan.bisection_tbps == pytest.approx(1600 / 2 * 400 / 1000)


def test_oversubscription_splits_leaf_ports() -> None:
    plan = plan_clos(servers=64, ports_per_server=8, radix=64, oversubscription=3.0)
    assert (plan.leaf_down, plan.leaf_up) == (48, 16)
    assert plan.oversubscription == 3.0
    assert plan.leaves == 11
    assert plan.bisection_tbps == pytest.approx(512 / 2 * 400 / 3 / 1000, rel=1e-3)


def test_single_switch_when_everything_fits() -> None:
    plan = plan_clos(servers=4, ports_per_server=8, radix=64)
    assert (plan.tiers, plan.leaves, plan.spines, plan.leaf_to_spine) == (1, 1, 0, 0)


def test_bad_radix_names_field() -> None:
    with pytest.raises(DesignError) as err:
        plan_clos(servers=4, ports_per_server=8, radix=33)
    assert err.value.field == "fabric.switch_ports"


def _check_schedule(servers: int, nics: int, k: int, rail: bool, r: float) -> None:
    plan = plan_clos(servers=servers, ports_per_server=nics, radix=k, rail_optimized=rail,
                     oversubscription=r)
    cables, _ = build_schedule(plan, servers=servers, per_server=nics, servers_per_rack=4,
                               reserved_slots=0, extra_ports=0)
    counts = {"node_to_leaf": 0, "leaf_to_spine": 0, "spine_to_core": 0}
    seen: set[tuple[str, str]] = set()
    for c in cables:
        counts[c.tier] += 1
        for dev, port in ((c.a_device, c.a_port), (c.b_device, c.b_port)):
            assert (dev, port) not in seen, f"port used twice: {dev} {port}"
            seen.add((dev, port))
            if port.startswith("p"):
                assert 1 <= int(port[1:]) <= k
    assert counts == {"node_to_leaf": plan.node_to_leaf, "leaf_to_spine": plan.leaf_to_spine,
                      "spine_to_core": plan.spine_to_core}


@settings(max_examples=40, deadline=None)
@given(servers=st.integers(1, 300), nics=st.sampled_from([1, 2, 4, 8]),
       k=st.sampled_from([8, 16, 32, 40, 64]), rail=st.booleans(),
       r=st.sampled_from([1.0, 2.0, 3.0]))
def test_schedule_matches_plan_and_never_reuses_a_port(servers: int, nics: int, k: int, rail: bool,
                                                       r: float) -> None:
    field = ""
    try:
        _check_schedule(servers, nics, k, rail, r)
    except DesignError as exc:
        field = exc.field
    assert field == "" or field.startswith("fabric.")


def test_b200_three_tier_schedule_is_consistent() -> None:
    _check_schedule(512, 8, 64, True, 1.0)
