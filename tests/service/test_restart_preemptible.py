"""``preemptible: false`` is a promise to the user that outlives the control plane: after a restart the job is
still never stopped for another one. In-process (``tests/service/inproc.py``): the real app, runtime and SQLite
store, closed and opened again on the same data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.spec import Cluster
from tests.service.inproc import in_process

EIGHT = {"nvidia.com/gpu": 8, "nvidia.com/gpucores": 100}
LEASE_S = 7300.0
"""More than the default queue policy's lease (2 h) before a running job may be preempted."""


def _one_node() -> Cluster:
    devices = tuple(DeviceSpec(f"GPU-{j}", j, "nvidia", "H100", 81559) for j in range(8))
    return Cluster("one", (NodeSpec("n0", 64000, 1 << 20, devices=devices),), Fabric(), "test")


@pytest.mark.parametrize("preemptible", [False, True])
def test_preemptible_false_is_kept_across_a_restart(tmp_path: Path, preemptible: bool) -> None:
    data = tmp_path / "d"
    with in_process(data, cluster=_one_node()) as ip:
        r = ip.client.post("/api/v1/jobs", json={"name": "keeper", "resources": EIGHT, "priority": 0,
                                                 "preemptible": preemptible})
        assert r.status_code == 201, r.text
        keeper = r.json()["id"]
        ip.tick()
        assert ip.client.get(f"/api/v1/jobs/{keeper}").json()["status"] == "running"
    with in_process(data, cluster=_one_node()) as ip:
        ip.tick()
        job = ip.client.get(f"/api/v1/jobs/{keeper}").json()
        assert (job["status"], job["preemptible"]) == ("running", preemptible)
        ip.tick(LEASE_S)
        r = ip.client.post("/api/v1/jobs", json={"name": "urgent", "resources": EIGHT, "priority": 50})
        assert r.status_code == 201, r.text
        urgent = r.json()["id"]
        ip.tick()
        ip.tick()
        status = {j: ip.client.get(f"/api/v1/jobs/{j}").json()["status"] for j in (keeper, urgent)}
        # a preemptible keeper makes room for the urgent job; one that is not keeps running, restart or not
        assert status == ({keeper: "pending", urgent: "running"} if preemptible else
                          {keeper: "running", urgent: "pending"})
