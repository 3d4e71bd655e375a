"""A gang whose first replica fits and a later one does not, through the control plane's REST API on the
embedded runtime: nothing of it stays placed, so the device its first replica had taken goes to the next job
in the same pass; the gang runs once there is room for all of it."""

from __future__ import annotations

from pathlib import Path

from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.spec import Cluster, load_cluster
from tests.service.inproc import in_process


def _cluster() -> Cluster:
    """``small``: one 16 GB GPU; ``big``: one 80 GB GPU."""
    def node(name: str, mem: int) -> NodeSpec:
        return NodeSpec(name=name, cpu_milli=64000, memory_mib=262144, leaf="leaf-0", spine="s0",
                        devices=(DeviceSpec(uuid=f"{name}-g0", index=0, vendor="nvidia", model=f"GPU-{mem}",
                                            memory_mib=mem),))
    return Cluster(name="partial", nodes=(node("small", 16384), node("big", 81920)),
                   fabric=load_cluster(None).fabric, source="test")


def test_a_gang_that_fits_only_in_part_holds_nothing(tmp_path: Path) -> None:
    with in_process(tmp_path / "data", cluster=_cluster()) as ip:
        def submit(name: str, **body: object) -> str:
            r = ip.client.post("/api/v1/jobs", json={"name": name, **body})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        def job(jid: str) -> dict[str, object]:
            out: dict[str, object] = ip.client.get(f"/api/v1/jobs/{jid}").json()
            return out

        # 40 GB and 10 % of a GPU: only "big" has the memory
        blocker = submit("blocker", resources={"nvidia.com/gpu": 1, "nvidia.com/gpumem": 40000,
                                               "nvidia.com/gpucores": 10}, duration_s=100)
        ip.tick()
        assert job(blocker)["status"] == "running"
        # two whole GPUs: the first replica fits "small", the second fits nowhere now ("big" is 10 % used)
        gang = submit("gang", replicas=2, resources={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100},
                      duration_s=10)
        single = submit("single", resources={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}, duration_s=50)
        ip.tick()
        assert job(gang)["status"] == "pending" and job(gang)["placements"] == []
        assert job(single)["status"] == "running"
        assert [p["node"] for p in job(single)["placements"]] == ["small"]  # type: ignore[attr-defined]
        nodes = {n["name"]: n for n in ip.client.get("/api/v1/nodes").json()["nodes"]}
        assert (nodes["small"]["dev_core_used"], nodes["big"]["dev_core_used"]) == ([1000], [100])
        assert (nodes["small"]["pods"], nodes["big"]["pods"]) == (1, 1)
        ip.tick(100)  # blocker and single are done: the gang has both GPUs
        assert (job(blocker)["status"], job(single)["status"], job(gang)["status"]) == (
            "succeeded", "succeeded", "running")
        ip.tick(20)
        assert job(gang)["status"] == "succeeded"
        nodes = {n["name"]: n for n in ip.client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["small"]["dev_core_used"] == nodes["big"]["dev_core_used"] == [0]
