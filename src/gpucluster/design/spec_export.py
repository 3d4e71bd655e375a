"""Write a design as the lead's cluster-spec YAML (apiVersion gpucluster.io/v1alpha1)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpucluster.design.planner import Design
from gpucluster.model.labels import POOL_LABEL


def cluster_spec(d: Design, pool: str = "train") -> dict[str, Any]:
    """The ClusterSpec mapping for a design.

    ``nodesPerLeaf`` counts the nodes under one leaf group: the scalable unit when
    rail-optimised (one leaf per rail), else the nodes one leaf's downlinks hold.
    ``leavesPerSpineGroup`` is 0 for a 2-tier fabric, else the leaf groups in one pod.
    """
    f = d.fabric
    if f.rail_optimized:
        nodes_per_leaf = f.nodes_per_su
    else:
        nodes_per_leaf = max(1, f.leaf_down // max(d.nics_per_server, 1)) if f.tiers > 1 \
            else max(d.servers, 1)
    if f.tiers == 3:
        nodes_per_pod = f.leaves_per_pod * f.leaf_down // max(d.nics_per_server, 1)
        leaves_per_group = max(1, nodes_per_pod // max(nodes_per_leaf, 1))
    else:
        leaves_per_group = 0
    return {
        "apiVersion": "gpucluster.io/v1alpha1",
        "kind": "ClusterSpec",
        "name": d.req.name,
        "fabric": {
            "type": d.req.fabric.type,
            "linkGbps": f.link_gbps,
            "nodesPerLeaf": nodes_per_leaf,
            "leavesPerSpineGroup": leaves_per_group,
            "oversubscription": float(f.oversubscription),
        },
        "nodePools": [
            {
                "name": pool,
                "count": d.servers,
                "cpuMilli": d.platform.cpu_milli,
                "memoryMiB": d.platform.memory_mib,
                "nodesPerRack": d.servers_per_rack,
                "labels": {POOL_LABEL: pool},
                "gpu": {
                    "vendor": d.gpu.vendor,
                    "model": d.gpu.name,
                    "count": d.gpus_per_server,
                    "memoryMiB": d.gpu.memory_mib,
                    "nvlinkDomainSize": d.nvlink_domain_size,
                    "maxTasks": 10,
                    "memoryOvercommit": 1.0,
                },
            }
        ],
    }


def write_cluster_spec(d: Design, path: str | Path) -> None:
    Path(path).write_text(yaml.safe_dump(cluster_spec(d), sort_keys=False), encoding="utf-8")
