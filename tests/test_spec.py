from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.spec import SpecError, load_cluster, load_pods

SPEC = """
apiVersion: gpucluster.io/v1alpha1
kind: ClusterSpec
name: tiny
fabric: {type: roce, nodesPerLeaf: 2, leavesPerSpineGroup: 2}
nodePools:
  - name: a
    count: 5
    cpuMilli: 64000
    memoryMiB: 262144
    nodesPerRack: 2
    gpu: {vendor: nvidia, model: A100-80GB, count: 8, memoryMiB: 81920, nvlinkDomainSize: 8, memoryOvercommit: 1.5}
  - name: cpu
    count: 1
    cpuMilli: 32000
    memoryMiB: 65536
"""


def write(tmp_path: Path, text: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_default_cluster_is_the_seed_reference() -> None:
    c = load_cluster()
    s = c.summary()
    assert s["nodes"] >= 200
    assert s["gpu_models"]["H100-SXM5-80GB"] >= 1600
    assert any("L40S" in m for m in s["gpu_models"])
    assert c.nodes[0].devices[0].nvlink_domain == 0


def test_spec_expands_pools_racks_leaves_spines(tmp_path: Path) -> None:
    c = load_cluster(write(tmp_path, SPEC))
    assert [n.name for n in c.nodes][:2] == ["a-0000", "a-0001"]
    assert len(c.nodes) == 6
    assert [n.rack for n in c.nodes] == ["rack-001", "rack-001", "rack-002", "rack-002", "rack-003", "rack-004"]
    assert [n.leaf for n in c.nodes] == ["leaf-000", "leaf-000", "leaf-001", "leaf-001", "leaf-002", "leaf-002"]
    assert [n.spine for n in c.nodes][::2] == ["spine-group-00", "spine-group-00", "spine-group-01"]
    d = c.nodes[0].devices[0]
    assert d.memory_mib == int(81920 * 1.5) and d.physical_memory_mib == 81920
    assert c.nodes[-1].devices == ()
    assert len({d.uuid for n in c.nodes for d in n.devices}) == 40
    assert str(c.fabric.type) == "roce"


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("memoryMiB: 81920,", "memoryMiB: 0,", r"nodePools\[0\]\.gpu\.memoryMiB: must be > 0"),
        ("count: 5", "count: -1", r"nodePools\[0\]\.count: must be >= 1"),
        ("vendor: nvidia", "vendor: acme", r"nodePools\[0\]\.gpu\.vendor"),
        ("name: cpu", "name: a", "used twice"),
        ("nodesPerRack: 2", "nodesPerRack: 2\n    colour: red", r"nodePools\[0\]\.colour: unknown field"),
        # a key given twice: on main before this case PyYAML kept the last one silently (a pool of 8 nodes, not 5)
        ("count: 5", "count: 5\n    count: 8", r"line 9: not valid YAML: key 'count' is given twice in one mapping "
                                                r"\(first on line 8\)"),
        ("name: tiny", "name: tiny\nname: other", r"line 5: .*key 'name' is given twice"),
    ],
)
def test_spec_errors_name_file_and_field(tmp_path: Path, old: str, new: str, message: str) -> None:
    p = write(tmp_path, SPEC.replace(old, new, 1))
    with pytest.raises(SpecError, match=message) as err:
        load_cluster(p)
    assert str(err.value).startswith(str(p))


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="line 2: not valid YAML"):
        load_cluster(write(tmp_path, "a: 1\n b: [\n"))
    with pytest.raises(SpecError, match="no such file"):
        load_cluster(tmp_path / "missing.yaml")


NODES = """
apiVersion: v1
kind: List
items:
  - apiVersion: v1
    kind: Node
    metadata:
      name: gpu-1
      labels: {gpucluster.io/leaf: l1}
      annotations:
        hami.io/node-nvidia-register: '[{"id":"GPU-1","count":10,"devmem":23028,"devcore":100,"type":"NVIDIA A10","numa":0,"health":true},{"id":"GPU-2","index":1,"count":10,"devmem":23028,"devcore":100,"type":"NVIDIA A10","health":true}]'
    status:
      allocatable: {cpu: "32", memory: 128Gi}
---
apiVersion: v1
kind: Node
metadata:
  name: mlu-1
  annotations:
    hami.io/node-mlu-register: "MLU-1,10,23308,0,MLU-MLU370-X4,0,true:"
status:
  allocatable: {cpu: 16000m, memory: "68719476736"}
"""


def test_node_manifests_read_hami_register(tmp_path: Path) -> None:
    c = load_cluster(write(tmp_path, NODES, "nodes.yaml"))
    assert [n.name for n in c.nodes] == ["gpu-1", "mlu-1"]
    gpu, mlu = c.nodes
    assert gpu.cpu_milli == 32000 and gpu.memory_mib == 131072 and gpu.leaf == "l1"
    assert [d.uuid for d in gpu.devices] == ["GPU-1", "GPU-2"]
    assert mlu.devices[0].vendor == "cambricon" and mlu.devices[0].model == "MLU370-X4"
    assert mlu.cpu_milli == 16000 and mlu.memory_mib == 65536


def test_node_manifest_errors(tmp_path: Path) -> None:
    bad = NODES.replace("cpu: \"32\"", "cpu: many")
    with pytest.raises(SpecError, match=r"items\[0\]: status.allocatable.cpu: not a quantity"):
        load_cluster(write(tmp_path, bad, "nodes.yaml"))
    with pytest.raises(SpecError, match="expected ClusterSpec or Node"):
        load_cluster(write(tmp_path, "kind: Pod\nmetadata: {name: x}\n", "x.yaml"))


def test_load_pods_in_file_order_and_rejects_duplicates(tmp_path: Path) -> None:
    text = "".join(
        f"---\nkind: Pod\nmetadata: {{name: p{i}}}\nspec:\n  containers:\n  - name: c\n"
        f"    resources: {{limits: {{nvidia.com/gpu: 1}}}}\n"
        for i in (3, 1, 2)
    )
    pods = load_pods(write(tmp_path, text, "pods.yaml"))
    assert [p.name for p in pods] == ["p3", "p1", "p2"]
    with pytest.raises(SpecError, match="appears twice"):
        load_pods(write(tmp_path, text + text, "dup.yaml"))
