"""GPU speed: place a pod on the GPU model where its job's speed counts most (Gavel's effective throughput).

Gavel (Narayanan et al., OSDI'20) allocates heterogeneous GPUs by *effective throughput*: each job's throughput
on each model, normalised, so that a job which gains little from a fast model leaves it to one that gains much.
This plugin scores nodes by their GPU model with a score that a :class:`SpeedOracle` service
(``Handle.services["gpu_speeds"]``; the job engine's :class:`gpucluster.jobs.GpuSpeeds`) gives per model for the
pod's job, 0..1 (1 = the model where the job should run). Without the service, or for a pod whose job runs the
same everywhere, it skips. Score = 100 x the model's score for the node's GPU model (its first device's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from gpucluster.model import Pod, Snapshot
from gpucluster.scheduler.framework import CycleState, FloatArray, Handle, IntArray, PluginRegistry, Status
from gpucluster.scheduler.framework.status import SKIP
from gpucluster.scheduler.plugins.args import PluginArgs, parse_args

NAME = "GpuSpeed"
SERVICE = "gpu_speeds"


class SpeedOracle(Protocol):
    """Per GPU model, how well a pod's job uses it."""

    def model_scores(self, pod: Pod, models: Sequence[str]) -> Sequence[float] | None:
        """A score in 0..1 per model name of ``models`` (1 = where the job should run), or None when the job
        runs the same on every model."""
        ...


class GpuSpeed:
    name = NAME

    def __init__(self, oracle: SpeedOracle | None) -> None:
        self.oracle = oracle

    def pre_score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> Status:
        if self.oracle is None or not pod.device_requests:
            return SKIP
        scores = self.oracle.model_scores(pod, snap.models)
        if scores is None:
            return SKIP
        state.write(NAME, np.append(np.asarray(scores, np.float64), 0.0))  # index -1 (no device) -> 0
        return Status.success()

    def score(self, state: CycleState, pod: Pod, snap: Snapshot, candidates: IntArray) -> FloatArray:
        per_model: np.ndarray[Any, np.dtype[np.float64]] = state.read(NAME)
        model = snap.dev_model[candidates, 0]
        return np.asarray(100.0 * per_model[model], np.float64)


class _Args(PluginArgs):
    pass


def new_gpu_speed(args: Mapping[str, Any], handle: Handle) -> GpuSpeed:
    parse_args(_Args, NAME, args)
    oracle = handle.services.get(SERVICE)
    if oracle is not None and not hasattr(oracle, "model_scores"):
        raise TypeError(f"service {SERVICE!r} must have model_scores(pod, models)")
    return GpuSpeed(oracle)


def register(reg: PluginRegistry) -> None:
    reg.register(NAME, new_gpu_speed)
