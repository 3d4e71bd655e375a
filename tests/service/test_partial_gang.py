"""A gang whose first replica fits and a later one does not, through the control plane's REST API on the
embedded runtime: nothing of it stays placed, so the device its first replica had taken goes to the next job
in the same pass; the gang runs once there is room for all of it. A gang on a cluster where no one GPU model
could ever hold it is refused at once."""

from __future__ import annotations

from pathlib import Path

from gpucluster.model import DeviceSpec, NodeSpec
from gpucluster.spec import Cluster, load_cluster
from tests.service.inproc import in_process


def _node(name: str, cores: int, model: str = "GPU-80") -> NodeSpec:
    return NodeSpec(name=name, cpu_milli=cores * 1000, memory_mib=262144, leaf="leaf-0", spine="s0",
                    labels={"pool": name},
                    devices=(DeviceSpec(uuid=f"{name}-g0", index=0, vendor="nvidia", model=model, memory_mib=81920),))


def _cluster() -> Cluster:
    """``a``: one GPU and 64 cores; ``b``: one GPU of the same model and 16 cores."""
    return Cluster(name="partial", nodes=(_node("a", 64), _node("b", 16)), fabric=load_cluster(None).fabric,
                   source="test")


def test_a_gang_that_fits_only_in_part_holds_nothing(tmp_path: Path) -> None:
    with in_process(tmp_path / "data", cluster=_cluster()) as ip:
        def submit(name: str, **body: object) -> str:
            r = ip.client.post("/api/v1/jobs", json={"name": name, **body})
            assert r.status_code == 201, r.text
            return str(r.json()["id"])

        def job(jid: str) -> dict[str, object]:
            out: dict[str, object] = ip.client.get(f"/api/v1/jobs/{jid}").json()
            return out

        # 14 of b's 16 cores, no GPU: both GPUs stay free and whole (the gang's capacity check passes)
        blocker = submit("blocker", resources={"cpu": "14"}, node_selector={"pool": "b"}, duration_s=100)
        ip.tick()
        assert job(blocker)["status"] == "running"
        # a GPU and 4 cores each: the first replica fits "a", the second fits nowhere now (b has 2 cores left);
        # its priority has it tried before the single job in the same pass
        gang = submit("gang", replicas=2, resources={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100, "cpu": "4"},
                      duration_s=10, priority=20)
        single = submit("single", resources={"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100, "cpu": "3"},
                        duration_s=50)
        ip.tick()
        assert job(gang)["status"] == "pending" and job(gang)["placements"] == []
        assert job(single)["status"] == "running"
        assert [p["node"] for p in job(single)["placements"]] == ["a"]  # type: ignore[attr-defined]
        nodes = {n["name"]: n for n in ip.client.get("/api/v1/nodes").json()["nodes"]}
        assert (nodes["a"]["dev_core_used"], nodes["b"]["dev_core_used"]) == ([1000], [0])
        assert (nodes["a"]["pods"], nodes["b"]["pods"]) == (1, 1)
        ip.tick(100)  # blocker and single are done: the gang has both GPUs
        assert (job(blocker)["status"], job(single)["status"], job(gang)["status"]) == (
            "succeeded", "succeeded", "running")
        ip.tick(20)
        assert job(gang)["status"] == "succeeded"
        nodes = {n["name"]: n for n in ip.client.get("/api/v1/nodes").json()["nodes"]}
        assert nodes["a"]["dev_core_used"] == nodes["b"]["dev_core_used"] == [0]


def test_a_gang_no_one_model_could_hold_is_refused(tmp_path: Path) -> None:
    """Two GPUs of two models: a gang of two whole GPUs stays on one model, so it could never run; the API says
    so (422) instead of queueing it forever. One model named with gpu_type says why too; one replica runs."""
    cluster = Cluster(name="mixed", nodes=(_node("a", 64, "GPU-A"), _node("b", 64, "GPU-B")),
                      fabric=load_cluster(None).fabric, source="test")
    with in_process(tmp_path / "data", cluster=cluster) as ip:
        gang = {"name": "gang", "replicas": 2, "resources": {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 100}}
        r = ip.client.post("/api/v1/jobs", json=gang)
        assert r.status_code == 422, r.text
        assert r.json()["where"] == "replicas" and "one GPU model" in r.json()["error"]
        r = ip.client.post("/api/v1/jobs", json={**gang, "gpu_type": "GPU-A"})
        assert r.status_code == 422 and "at most 1" in r.json()["error"], r.text
        r = ip.client.post("/api/v1/jobs", json={**gang, "replicas": 1})
        assert r.status_code == 201, r.text
        assert ip.client.get("/api/v1/jobs").json()["total"] == 1
