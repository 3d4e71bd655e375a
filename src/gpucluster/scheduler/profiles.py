"""Named, ready-made profiles. A policy name anywhere in the CLI or API resolves through ``PROFILES``."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gpucluster.model import Policy
from gpucluster.scheduler.framework import PluginConfig, Profile


def binpack_spread_profile(
    node_policy: Policy = Policy.BINPACK, gpu_policy: Policy = Policy.SPREAD, seed: int = 0
) -> Profile:
    """HAMi's model: node binpack / spread, then device binpack / spread inside the node."""
    return Profile(
        plugins=[
            PluginConfig(name="NodeUnschedulable"),
            PluginConfig(name="NodeResourcesFit"),
            PluginConfig(name="DeviceFit"),
            PluginConfig(name="NodePolicy", args={"policy": node_policy.value}),
            PluginConfig(name="DevicePolicy", args={"policy": gpu_policy.value}),
        ],
        seed=seed,
    )


ProfileBuilder = Callable[[int], Profile]

PROFILES: Mapping[str, ProfileBuilder] = {
    "binpack": lambda seed: binpack_spread_profile(Policy.BINPACK, Policy.SPREAD, seed),
    "spread": lambda seed: binpack_spread_profile(Policy.SPREAD, Policy.SPREAD, seed),
}
"""Policy name -> profile builder (taking a seed)."""

DEFAULT_POLICY = "binpack"


def profile_for(policy: str, seed: int = 0) -> Profile:
    try:
        builder = PROFILES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(sorted(PROFILES))}") from None
    return builder(seed)
