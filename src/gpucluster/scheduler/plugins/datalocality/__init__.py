"""Data locality: prefer nodes that hold a replica of the pod's dataset (Quincy / delay scheduling).

Datasets live in a :class:`DataCatalog` service (``Handle.services["datasets"]``): size in bytes and the
nodes holding a replica. A pod names its dataset in the ``gpucluster.io/dataset`` annotation.

* Score: 100 on a replica node, 60 in a replica's rack, 30 under a replica's leaf, 0 elsewhere.
* Filter (only with ``gpucluster.io/data-locality: required``, which delay scheduling sets while a job is
  still willing to wait): nodes without a replica are rejected with ``DataLocality``.
* :meth:`DataCatalog.transfer_bytes` is the cost model: bytes that must cross the fabric to a node (0 on a
  replica node), and :meth:`DataCatalog.transfer_cost` weighs them per level (rack < leaf < spine).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucluster.model import Pod, Snapshot
from gpucluster.model.labels import DATA_LOCALITY_ANNOTATION, DATASET_ANNOTATION
from gpucluster.scheduler.framework import (
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    PluginRegistry,
    Reason,
    ReasonArray,
    Status,
)
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "DataLocality"
SERVICE = "datasets"


@dataclass(slots=True)
class Dataset:
    name: str
    size_bytes: int
    replicas: set[str] = field(default_factory=set)
    """Node names holding a full replica."""


class DataCatalog:
    LEVEL_COST: Mapping[str, float] = {"rack": 1.0, "leaf": 2.0, "spine": 4.0}
    """Relative cost per byte by the farthest switch tier the transfer crosses (Quincy's rack / core)."""

    def __init__(self, datasets: Iterable[Dataset] = ()) -> None:
        self.datasets: dict[str, Dataset] = {d.name: d for d in datasets}

    def add(self, ds: Dataset) -> None:
        self.datasets[ds.name] = ds

    def transfer_bytes(self, dataset: str, node: str) -> int:
        ds = self.datasets.get(dataset)
        if ds is None or node in ds.replicas:
            return 0
        return ds.size_bytes

    def transfer_cost(self, dataset: str, node: str, snap: Snapshot) -> float:
        ds = self.datasets.get(dataset)
        if ds is None or not ds.replicas or node in ds.replicas:
            return 0.0
        i = snap.node_index[node]
        reps = [snap.node_index[r] for r in ds.replicas if r in snap.node_index]
        if any(snap.rack_id[r] == snap.rack_id[i] for r in reps):
            level = "rack"
        elif any(snap.leaf_id[r] == snap.leaf_id[i] for r in reps):
            level = "leaf"
        else:
            level = "spine"
        return ds.size_bytes * self.LEVEL_COST[level]


class DataLocality:
    name = NAME

    def __init__(self, catalog: DataCatalog) -> None:
        self.catalog = catalog

    def _replica_mask(self, pod: Pod, snap: Snapshot) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        ds = self.catalog.datasets.get(pod.annotations.get(DATASET_ANNOTATION, ""))
        if ds is None:
            return None
        mask = np.zeros(snap.n_nodes, np.bool_)
        for r in ds.replicas:
            i = snap.node_index.get(r)
            if i is not None:
                mask[i] = True
        return mask

    def pre_filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> Status:
        mask = self._replica_mask(pod, snap)
        if mask is None:
            return SKIP
        state.write(NAME, mask)
        return Status.success()

    def filter(self, state: CycleState, pod: Pod, snap: Snapshot) -> ReasonArray:
        out = np.zeros(snap.n_nodes, np.int16)
        if pod.annotations.get(DATA_LOCALITY_ANNOTATION) == "required":
            mask = state.read(NAME)
            out[~mask] = Reason.DataLocality
        return out

    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        return Status.success() if state.get(NAME) is not None else SKIP

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        mask: np.ndarray[Any, np.dtype[np.bool_]] = state.read(NAME)
        reps = np.flatnonzero(mask)
        out = np.zeros(candidates.size, np.float64)
        if reps.size == 0:
            return out
        same_leaf = np.isin(snap.leaf_id[candidates], snap.leaf_id[reps])
        same_rack = np.isin(snap.rack_id[candidates], snap.rack_id[reps])
        out[same_leaf] = 30.0
        out[same_rack] = 60.0
        out[mask[candidates]] = 100.0
        return out


class _Args(PluginArgs):
    pass


def new_data_locality(args: Mapping[str, Any], handle: Handle) -> DataLocality:
    parse_args(_Args, NAME, args)
    cat = handle.services.get(SERVICE)
    if cat is None:
        cat = DataCatalog()
        handle.services[SERVICE] = cat
    if not isinstance(cat, DataCatalog):
        raise TypeError(f"service {SERVICE!r} must be a DataCatalog")
    return DataLocality(cat)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_data_locality)
