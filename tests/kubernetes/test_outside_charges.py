"""What claims allocated outside the control plane's jobs are charged, and to whom
(:mod:`gpucluster.kubernetes.outside`): a claim once, whatever number of pods reserve it, to one tenant whatever
the order of ``reservedFor``; a device never charged beyond itself, however the claims on it add up (the
cluster view already refuses claims beyond a device's memory or cores; their shares, each the larger of
compute and memory, can still add up to more than the device)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.kubernetes.dra import CLAIM_KEY_PREFIX
from gpucluster.kubernetes.outside import HeldShare, OutsideClaim, claim_charge_tenant, claim_charges, outside_use

from .dra_objects import HAMI_DRIVER, NVIDIA_DRIVER, allocated, claim
from .test_dra import cluster

WHOLE = {"request": "gpu", "driver": NVIDIA_DRIVER, "pool": "n0", "device": "gpu-0"}


def _shared(memory: str, cores: int, j: int = 0) -> dict[str, Any]:
    return {"request": "gpu", "driver": HAMI_DRIVER, "pool": "n0", "device": f"hami-gpu-{j}",
            "shareID": f"s-{memory}-{cores}", "consumedCapacity": {"memory": memory, "cores": str(cores)}}


def test_shares_whose_larger_sides_add_up_beyond_one_device_are_charged_one_device() -> None:
    """90 % of the memory and 10 % of the cores, and the other way round: both fit on one shared GPU, and each
    is charged the larger side (0.9); together they hold the one device, not 1.8 of them (main: 1.8)."""
    c = cluster(nodes=1, gpus=1, dra="hami", hami_gpus=0)
    c.set_claims([allocated(claim("a", "hami-gpu"), "n0", [_shared("72Gi", 10)]),
                  allocated(claim("b", "hami-gpu"), "n0", [_shared("8Gi", 90)])])
    use = outside_use(c, {})
    assert [round(v["gpu"], 9) for _t, v in use.values()] == [0.5, 0.5]
    assert sum(v["gpu"] for _t, v in use.values()) == 1.0
    assert sum(v["gpumem"] for _t, v in use.values()) == 80 * 1024  # within capacity: as held
    assert sum(v["gpucores"] for _t, v in use.values()) == 100


def test_a_claim_shared_by_pods_is_charged_once_to_their_tenant_or_else_to_its_namespace() -> None:
    """Three pods of one tenant reserve one claim: charged once (one GPU) to that tenant. Pods of two tenants
    share it: charged once to the claim's namespace, whatever the order of ``reservedFor`` (main: to the
    first reserving pod's tenant, so reordering ``reservedFor`` moved the charge)."""
    c = cluster(nodes=1, gpus=2)
    pods = [("p1", "u1"), ("p2", "u2"), ("p3", "u3")]
    c.set_claims([allocated(claim("s", "gpu.nvidia.com", namespace="team"), "n0",
                            [{**WHOLE, "pool": "n0"}], reserved_for=pods)])
    one_tenant = {f"team/{n}": (u, "nlp") for n, u in pods}
    assert outside_use(c, one_tenant) == {CLAIM_KEY_PREFIX + "team/s": ("nlp", {
        "gpu": 1.0, "gpumem": 80 * 1024.0, "gpucores": 100.0})}
    mixed = {"team/p1": ("u1", "nlp"), "team/p2": ("u2", "cv"), "team/p3": ("u3", "nlp")}
    for order in (pods, pods[::-1], [pods[1], pods[0], pods[2]]):
        c.set_claims([allocated(claim("s", "gpu.nvidia.com", namespace="team"), "n0", [WHOLE],
                                reserved_for=order)])
        use = outside_use(c, mixed)
        assert list(use) == [CLAIM_KEY_PREFIX + "team/s"]
        assert use[CLAIM_KEY_PREFIX + "team/s"][0] == "team" and use[CLAIM_KEY_PREFIX + "team/s"][1]["gpu"] == 1.0


def test_the_claims_own_queue_label_or_tenant_annotation_decides() -> None:
    assert claim_charge_tenant("team", {"gpucluster.io/queue": "nlp"}, {"gpucluster.io/tenant": "cv"},
                               ["a", "b"]) == "nlp"
    assert claim_charge_tenant("team", {}, {"gpucluster.io/tenant": "cv"}, ["a"]) == "cv"
    assert claim_charge_tenant("team", None, None, ["a", "a"]) == "a"
    assert claim_charge_tenant("team", None, None, []) == "team"


held = st.builds(HeldShare, device=st.sampled_from(["n0/0", "n0/1", "n1/0"]),
                 gpu=st.sampled_from([0.1, 0.25, 0.5, 0.9, 1.0]),
                 memory_mib=st.sampled_from([0.0, 1024.0, 40960.0, 81920.0]),
                 cores=st.sampled_from([0.0, 10.0, 50.0, 100.0]),
                 memory_cap=st.just(81920.0))
claims = st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.lists(held, min_size=1, max_size=3)),
                  max_size=8)


@settings(max_examples=200, deadline=None)
@given(claims)
def test_no_tenant_is_charged_more_than_the_devices_that_exist_and_no_claim_twice(
        raw: list[tuple[str, list[HeldShare]]]) -> None:
    cs = [OutsideClaim(f"claim:{i}", tenant, tuple(h)) for i, (tenant, h) in enumerate(raw)]
    out = claim_charges(cs)
    assert sorted(out) == sorted(c.key for c in cs)  # every claim, once
    devices = {h.device for c in cs for h in c.held}
    total = sum(charge["gpu"] for _t, charge in out.values())
    assert total <= len(devices) + 1e-9
    for tenant in ("a", "b", "c"):
        theirs = {h.device for c in cs if c.tenant == tenant for h in c.held}
        charged = sum(charge["gpu"] for t, charge in out.values() if t == tenant)
        assert charged <= len(theirs) + 1e-9  # never more than the devices its claims are on
    assert sum(charge["gpumem"] for _t, charge in out.values()) <= 81920.0 * len(devices) + 1e-6
    assert sum(charge["gpucores"] for _t, charge in out.values()) <= 100.0 * len(devices) + 1e-9
    for c in cs:  # scaled down at most, never up; and charged to its own tenant
        tenant, charge = out[c.key]
        assert tenant == c.tenant
        assert charge["gpu"] <= sum(h.gpu for h in c.held) + 1e-9
    per_device: dict[str, float] = {}
    for c in cs:
        for h in c.held:
            per_device[h.device] = per_device.get(h.device, 0.0) + h.gpu
    if all(v <= 1.0 for v in per_device.values()):  # nothing over a device: charged as held
        for c in cs:
            assert abs(out[c.key][1]["gpu"] - sum(h.gpu for h in c.held)) < 1e-9
