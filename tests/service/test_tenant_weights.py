"""A tenant's fair-share ``weight`` (``POST``/``PATCH /api/v1/tenants``, shown as ``fair_share_gpus``) is the
weight the fair queue policies order tenants by: under ``up --queue-policy drf``, when two tenants ask for the
last GPUs, the one whose GPU share divided by its weight is lower gets them, with or without a GPU quota; a
weight changed with PATCH applies from the next pass, and after a restart (from the store).

On main before this test the weight was stored and shown but never handed to the job engine: the fair policies
weighed every tenant 1, whatever its weight."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from gpucluster.spec import Cluster, ClusterSpecFile, cluster_from_spec
from tests.service.inproc import InProc, in_process

GPU = {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}


def _cluster(gpus: int) -> Cluster:
    return cluster_from_spec(ClusterSpecFile.model_validate({"name": "w", "nodePools": [
        {"name": "p", "count": 1, "cpuMilli": 256000, "memoryMiB": 1048576,
         "gpu": {"model": "H100-SXM5-80GB", "count": gpus, "memoryMiB": 81559}}]}), "test")


def _submit(ip: InProc, token: str, name: str, gpus: int = 1) -> None:
    r = ip.as_(token).post("/api/v1/jobs", json={"name": name, "resources": {**GPU, "nvidia.com/gpu": gpus},
                                                 "duration_s": 3600.0})
    assert r.status_code == 201, r.text


def _running(ip: InProc) -> Counter[str]:
    jobs = ip.client.get("/api/v1/jobs", params={"status": "running", "limit": 5000}).json()["jobs"]
    return Counter(j["tenant"] for j in jobs)


def _contend(ip: InProc, heavy: tuple[str, str], light: tuple[str, str],
             between: Callable[[], None] = lambda: None) -> Counter[str]:
    """``heavy`` runs 4 one-GPU jobs, ``light`` 2, on 8 GPUs; then each asks for the last two GPUs (``light``
    first). Weighted by 3 : 1, ``heavy``'s share (4/8 / 3) is below ``light``'s (2/8 / 1): its job starts; with
    equal weights ``light``'s does. Returns how many jobs each runs then."""
    for i in range(4):
        _submit(ip, heavy[1], f"h{i}")
    for i in range(2):
        _submit(ip, light[1], f"l{i}")
    ip.tick(1.0)
    assert _running(ip) == {heavy[0]: 4, light[0]: 2}
    between()
    _submit(ip, light[1], "l-last", gpus=2)
    _submit(ip, heavy[1], "h-last", gpus=2)
    ip.tick(1.0)
    return _running(ip)


@pytest.mark.parametrize("quota", [None, 100.0])
def test_the_last_gpus_go_to_the_tenant_below_its_weighted_share(tmp_path: Path, quota: float | None) -> None:
    with in_process(tmp_path / "d", cluster=_cluster(8), queue_policy="drf", tenants_on_first_use=False) as ip:
        heavy = ("heavy", ip.tenant("heavy", weight=3.0, quota_gpus=quota))
        light = ("light", ip.tenant("light", weight=1.0, quota_gpus=quota))
        assert _contend(ip, heavy, light) == {"heavy": 5, "light": 2}
        rows = {t["name"]: t for t in ip.client.get("/api/v1/tenants").json()["tenants"]}
        assert (rows["heavy"]["fair_share_gpus"], rows["light"]["fair_share_gpus"]) == (6.0, 2.0)


def test_with_equal_weights_the_tenant_below_its_share_gets_them(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", cluster=_cluster(8), queue_policy="drf", tenants_on_first_use=False) as ip:
        assert _contend(ip, ("a", ip.tenant("a")), ("b", ip.tenant("b"))) == {"a": 4, "b": 3}


def test_a_weight_changed_with_patch_applies_at_once_and_after_a_restart(tmp_path: Path) -> None:
    with in_process(tmp_path / "d", cluster=_cluster(8), queue_policy="drf", tenants_on_first_use=False) as ip:
        x, y = ip.tenant("x"), ip.tenant("y")

        def heavier() -> None:  # while y runs 4 jobs and x 2
            assert ip.client.patch("/api/v1/tenants/y", json={"weight": 3.0}).status_code == 200

        assert _contend(ip, ("y", y), ("x", x), heavier) == {"x": 2, "y": 5}
    with in_process(tmp_path / "e", cluster=_cluster(8), queue_policy="drf", tenants_on_first_use=False) as ip:
        x, y = ip.tenant("x"), ip.tenant("y")
        assert ip.client.patch("/api/v1/tenants/x", json={"weight": 3.0}).status_code == 200
    with in_process(tmp_path / "e", cluster=_cluster(8), queue_policy="drf", tenants_on_first_use=False) as ip:
        assert _contend(ip, ("x", x), ("y", y)) == {"x": 5, "y": 2}  # from the store
