"""Whole designs: the seed's 200 servers, the SuperPOD presets, power, cost, spec export."""

from __future__ import annotations

from typing import Any

import pytest

from gpucluster.design import DesignError, design, parse_requirements, preset, to_dict
from gpucluster.design.cabling import to_csv
from gpucluster.design.spec_export import cluster_spec


def _seed(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {"name": "seed-200", "gpu": "H100", "servers": 200, "gpus_per_server": 8,
                            "power": {"psu": "2x2200"}}
    data.update(extra)
    return data


def test_seed_design_flags_psu_and_says_what_would_carry_it() -> None:
    d = design(parse_requirements(_seed()))
    out = to_dict(d)
    assert out["servers"] == 200
    assert out["gpus"] == 1600
    p = out["power"]
    assert p["server_max_w"] == 10200
    assert p["psu_sufficient"] is False
    assert p["psu_usable_w"] == 2200
    assert len(p["warnings"]) == 1
    warning = p["warnings"][0]
    assert "2x2200 W (1+1)" in warning
    assert "10,200 W" in warning
    assert "6x3300 W (4+2)" in warning  # the DGX H100 configuration carries it
    assert "10x2200 W (5+5)" in p["psu_suggestions"]


def test_seed_design_network_is_consistent() -> None:
    out = to_dict(design(parse_requirements(_seed())))
    n = out["network"]
    assert n["tiers"] == 2
    assert (n["leaf_switches"], n["spine_switches"], n["core_switches"]) == (56, 32, 0)
    assert n["cables"]["node_to_leaf"] == 1600
    assert n["cables"]["leaf_to_spine"] == n["leaf_switches"] * 32
    assert n["cables"]["spine_to_core"] == 0
    assert n["spine_switches"] * 64 >= n["cables"]["leaf_to_spine"]
    assert n["oversubscription"] == 1.0
    assert n["bisection_tbps"] == 320.0
    by_type = n["cables"]["by_type"]
    assert sum(by_type["node_to_leaf"].values()) == 1600
    assert out["racks"] >= 50  # 4 x 10.2 kW servers per 42 kW rack -> 50 compute racks
    assert out["racks_detail"]["compute"] == 50


def test_dgx_h100_preset_four_su_matches_reference_bill_of_materials() -> None:
    d = design(preset("dgx-h100-superpod", 4))
    assert d.servers == 127
    assert d.psu.sufficient  # six 3.3 kW PSUs, 4+2, carry 10.2 kW
    assert d.compute_racks == 32
    assert d.racks == 38
    assert d.management.ufm_appliances == 4
    assert d.management.servers == 5
    ufm = [c for c in d.cables if c.a_device.startswith("ufm-")]
    assert len(ufm) == 4


def test_dgx_b200_preset_sixteen_su() -> None:
    d = design(preset("dgx-b200-superpod", 16))
    out = to_dict(d)
    assert out["gpus"] == 4096
    n = out["network"]
    assert (n["tiers"], n["leaf_switches"], n["spine_switches"], n["core_switches"]) == (3, 128, 128, 64)
    assert n["cables"] == {**n["cables"], "node_to_leaf": 4096, "leaf_to_spine": 4096,
                           "spine_to_core": 4096}
    assert out["power"]["psu_sufficient"] is True


def test_gpus_and_power_budget_modes() -> None:
    d = design(parse_requirements({"gpu": "L40S", "gpus": 100, "gpus_per_server": 8}))
    assert d.servers == 13
    assert d.nvlink_domain_size == 0
    budget = parse_requirements({"gpu": "H100", "power_budget_kw": 1000.0})
    b = design(budget, with_cables=False)
    assert b.power.facility_kw <= 1000.0
    bigger = parse_requirements({"gpu": "H100", "servers": b.servers + 1})
    assert design(bigger, with_cables=False).power.facility_kw > 1000.0


def test_power_budget_too_small_names_field() -> None:
    with pytest.raises(DesignError) as err:
        design(parse_requirements({"gpu": "H100", "power_budget_kw": 5.0}))
    assert err.value.field == "power_budget_kw"


def test_rack_too_small_names_field() -> None:
    with pytest.raises(DesignError) as err:
        design(parse_requirements({"gpu": "H100", "servers": 4, "power": {"rack_power_kw": 8}}))
    assert err.value.field == "power.rack_power_kw"


def test_racks_limited_by_power_and_space() -> None:
    d = design(parse_requirements({"gpu": "H100", "servers": 10, "power": {"rack_power_kw": 25}}))
    assert (d.servers_per_rack, d.rack_limit) == (2, "power")
    d = design(parse_requirements({"gpu": "A10", "servers": 10, "gpus_per_server": 4}))
    assert d.rack_limit == "space"
    assert d.servers_per_rack == (42 - 4) // 4


def test_storage_sized_by_capacity_or_bandwidth() -> None:
    d = design(parse_requirements(_seed(storage={"capacity_tb": 1000, "read_gbs_per_gpu": 2.0})))
    # 1,600 GPUs x 2 GB/s = 3,200 GB/s -> 64 nodes of 50 GB/s; capacity alone needs 2
    assert d.storage.nodes == 64
    assert d.storage.network.leaves > 0
    assert d.storage_racks > 0


def test_cost_has_capex_power_and_cloud_per_region() -> None:
    out = to_dict(design(parse_requirements(_seed())))
    c = out["cost"]
    assert c["capex_usd"] == pytest.approx(sum(c["capex_breakdown"].values()))
    assert c["capex_usd"] > 200 * 8 * 20000
    assert c["power_usd_per_year"] > 0
    regions = {(x["provider"], x["region"]) for x in c["cloud"]}
    assert ("aws", "us-east-1") in regions
    for x in c["cloud"]:
        assert x["spot_usd_per_year"] < x["on_demand_usd_per_year"]
        assert x["instances"] == 200


def test_facility_power_includes_pue() -> None:
    out = to_dict(design(parse_requirements(_seed(power={"psu": "2x2200", "pue": 1.5}))))
    p = out["power"]
    assert p["facility_kw"] == pytest.approx(p["it_kw"] * 1.5, rel=1e-3)
    assert p["it_kw"] > 200 * 10.2


def test_cable_schedule_csv() -> None:
    d = design(preset("dgx-h100-superpod", 1))
    text = to_csv(list(d.cables))
    rows = text.strip().splitlines()
    assert rows[0].startswith("cable_id,tier,a_device,a_port,a_rack,b_device,b_port")
    assert len(rows) == 1 + 252 + 256
    assert "gpu-0001,nic1,R001,leaf-su01-r1,p1" in text


def test_cluster_spec_export() -> None:
    spec = cluster_spec(design(parse_requirements(_seed())))
    assert spec["apiVersion"] == "gpucluster.io/v1alpha1"
    assert spec["kind"] == "ClusterSpec"
    assert spec["name"] == "seed-200"
    assert spec["fabric"] == {"type": "infiniband", "linkGbps": 400, "nodesPerLeaf": 32,
                              "leavesPerSpineGroup": 0, "oversubscription": 1.0}
    (pool,) = spec["nodePools"]
    assert pool["count"] == 200
    assert pool["nodesPerRack"] == 4
    assert pool["gpu"]["model"] == "H100-SXM5-80GB"
    assert pool["gpu"]["count"] == 8
    assert pool["gpu"]["memoryMiB"] == 81559
    assert pool["gpu"]["nvlinkDomainSize"] == 8
    three = cluster_spec(design(preset("dgx-b200-superpod", 16), with_cables=False))
    assert three["fabric"]["nodesPerLeaf"] == 32
    assert three["fabric"]["leavesPerSpineGroup"] == 4  # 4 SUs (32 leaves) per pod


def test_exported_spec_loads_with_the_cluster_loader(tmp_path: Any) -> None:
    from gpucluster import spec as spec_mod
    from gpucluster.design.spec_export import write_cluster_spec

    path = tmp_path / "spec.yaml"
    write_cluster_spec(design(parse_requirements(_seed()), with_cables=False), path)
    cluster = spec_mod.load_cluster(path)
    assert len(cluster.nodes) == 200


def test_inference_defaults_not_rail_optimised_and_psus_carry_the_server() -> None:
    d = design(parse_requirements({"gpu": "L40S", "servers": 2}))
    assert not d.fabric.rail_optimized
    assert d.fabric.tiers == 1
    assert d.psu.sufficient
    d = design(parse_requirements({"gpu": "L40S", "servers": 2, "power": {"psu": "2x2200"}}))
    assert not d.psu.sufficient  # 8 x 350 W + platform > 2,200 W
