"""Scheduler profiles: which plugins run, their arguments and score weights (config, not code)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class PluginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    """Registered plugin name."""
    weight: float = Field(default=1.0, ge=0.0)
    """Multiplier on the plugin's 0..100 Score (and DeviceScore); ignored for other phases."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Plugin arguments, validated by the plugin's factory."""


class Profile(BaseModel):
    """One scheduling profile. Each plugin takes part in every phase it implements, in list order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheduler_name: str = "gpucluster"
    plugins: list[PluginConfig]
    tie_break: Literal["random", "first"] = "random"
    """How to choose among equally scored nodes: at random (kube-scheduler's way) or the lowest index."""
    seed: int = 0
    """Seed of the profile's random generator."""
    max_reserve_attempts: int = Field(default=8, ge=1)
    """How many top-scored nodes Reserve may try before the pod is declared unschedulable."""
    percentage_of_nodes_to_score: int = Field(default=100, ge=0, le=100)
    """kube-scheduler's ``percentageOfNodesToScore``, with its semantics (``scheduler.core.nodes_to_score``): a
    pod's decision scores the first feasible nodes found, walking the nodes round-robin from where the previous
    decision stopped, until it has ``max(100, nodes x percentage / 100)`` of them (every node below 100 nodes).
    100 (the default): every feasible node is scored. 0: kube-scheduler's adaptive share (50 % minus 1 % per 125
    nodes, at least 5 %). Filter still runs over every node (it is vectorised); what is saved is the Score and
    device-scoring work, and what is lost is placement over the whole cluster."""
