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
