from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.model import DeviceSpec, Fabric, NodeSpec
from gpucluster.spec import Cluster

REPO = Path(__file__).resolve().parents[2]
TRACES = REPO.parent / "shared" / "traces"


def make_cluster(nodes: int = 4, gpus: int = 8, nodes_per_leaf: int = 2, domain: int = 8, model: str = "V100",
                 name: str = "test") -> Cluster:
    out = []
    for i in range(nodes):
        devs = tuple(DeviceSpec(uuid=f"GPU-{i}-{j}", index=j, vendor="nvidia", model=model, memory_mib=32768,
                                nvlink_domain=j // domain) for j in range(gpus))
        leaf = i // nodes_per_leaf
        out.append(NodeSpec(name=f"{name[0]}{i:02d}" if name != "test" else f"n{i:02d}", cpu_milli=64000, memory_mib=512 * 1024, devices=devs,
                            rack=f"r{leaf}", leaf=f"leaf-{leaf}", spine="s0"))
    return Cluster(name=name, nodes=tuple(out), fabric=Fabric(link_gbps=100, oversubscription=2.0),
                   source="test")


def mixed_cluster(h100: int = 1, l40s: int = 1) -> Cluster:
    """``h100`` 8 x H100 nodes (``h100-<i>``) and then ``l40s`` 8 x L40S nodes (``l40s-<i>``) under one leaf."""
    out = []
    for i in range(h100 + l40s):
        model = "H100" if i < h100 else "L40S"
        devs = tuple(DeviceSpec(uuid=f"G{i}-{j}", index=j, vendor="nvidia", model=model, memory_mib=49152,
                                nvlink_domain=0) for j in range(8))
        out.append(NodeSpec(name=f"{model.lower()}-{i}", cpu_milli=64000, memory_mib=512 * 1024, devices=devs,
                            rack="r0", leaf="leaf-0", spine="s0"))
    return Cluster(name="mixed", nodes=tuple(out), fabric=Fabric(link_gbps=100, oversubscription=2.0),
                   source="test")


@pytest.fixture
def small_cluster() -> Cluster:
    return make_cluster()


@pytest.fixture
def philly_dir() -> Path:
    d = TRACES / "gavel-philly-derived" / "seed=0"
    if not d.is_dir():
        pytest.skip("shared Philly-derived trace not present")
    return d
