"""A simple per-node fragmentation measure, used until the scheduler's FGD plugin provides its own.

``fragmentation = free compute on partly used devices / free compute on all usable devices`` of the node.
0 when every free core milli sits on a whole free device (a whole-GPU job can use all of it); 1 when every
device that has room is already shared (only fractional jobs fit). A node with no free compute scores 0:
it is full, not fragmented. Devices that are unhealthy or invalid do not count.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from gpucluster.model import ClusterState, Snapshot

FloatArray = npt.NDArray[np.float64]


def node_fragmentation(state: ClusterState | Snapshot) -> FloatArray:
    """Fragmentation ratio (0..1) for every node, shape ``[N]`` (vectorised over the device arrays)."""
    usable = state.dev_valid & state.dev_healthy
    free = np.where(usable, state.dev_core_cap - state.dev_core_used, 0).astype(np.float64)
    partial = usable & (state.dev_core_used > 0) | usable & (state.dev_tasks > 0)
    free_total = free.sum(axis=1)
    free_partial = np.where(partial, free, 0.0).sum(axis=1)
    out: FloatArray = np.divide(free_partial, free_total, out=np.zeros_like(free_total), where=free_total > 0)
    return out
