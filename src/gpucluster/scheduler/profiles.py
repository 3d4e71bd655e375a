"""Named, ready-made profiles. A policy name anywhere in the CLI or API resolves through ``PROFILES``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

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


TIE_BREAK_WEIGHT = 1e-6
"""Weight of ``NodeRankTieBreak``: small enough never to reorder integer policy scores, only ties."""

_FGD_PAPER_PLUGINS: Mapping[str, tuple[str, str]] = {
    # policy -> (node Score plugin, device DeviceScore plugin)
    "random": ("RandomScore", "RandomDevice"),
    "dotprod": ("DotProductScore", "BestFitDevice"),
    "clustering": ("GpuClusteringScore", "BestFitDevice"),
    "packing": ("GpuPackingScore", "BestFitDevice"),
    "bestfit": ("BestFitScore", "BestFitDevice"),
    "fgd": ("FGDScore", "FGDScore"),
}
FGD_PAPER_POLICIES = tuple(_FGD_PAPER_PLUGINS)
"""The six policies of the FGD paper (USENIX ATC'23), in the paper's order."""


def fgd_paper_profile(policy: str, seed: int = 0, fgd_args: Mapping[str, Any] | None = None) -> Profile:
    """One of the FGD paper's policies: filters, the policy's Score (and device choice), seeded tie-break.

    ``fgd_args`` go to ``FGDScore`` (e.g. a fixed ``target`` workload; without one it learns online).
    """
    node_plugin, device_plugin = _FGD_PAPER_PLUGINS[policy]
    plugins = [
        PluginConfig(name="NodeUnschedulable"),
        PluginConfig(name="NodeResourcesFit"),
        PluginConfig(name="DeviceFit"),
        PluginConfig(name=node_plugin, args=dict(fgd_args or {}) if node_plugin == "FGDScore" else {}),
    ]
    if device_plugin != node_plugin:
        plugins.append(PluginConfig(name=device_plugin))
    if policy != "random":
        plugins.append(PluginConfig(name="NodeRankTieBreak", weight=TIE_BREAK_WEIGHT, args={"seed": seed}))
    return Profile(plugins=plugins, seed=seed)


ANNOTATION_WEIGHT = 1000.0
"""Weight of the annotation-only NodePolicy/DevicePolicy in ``stranding-fgd``: a pod's explicit HAMi
binpack/spread annotation outweighs any policy score."""


def stranding_fgd_profile(seed: int = 0, fgd_args: Mapping[str, Any] | None = None) -> Profile:
    """``stranding-fgd``, the default: FGD plus CPU stranding and model scarcity (``StrandingFGDScore``, node
    and GPU), ties to a seeded node order as in the FGD experiment, and HAMi's per-pod binpack/spread
    annotations honoured when a pod carries them. Without a ``target`` in ``fgd_args`` the target workload is
    learned online from the pods seen."""
    return Profile(
        plugins=[
            PluginConfig(name="NodeUnschedulable"),
            PluginConfig(name="NodeResourcesFit"),
            PluginConfig(name="DeviceFit"),
            PluginConfig(name="StrandingFGDScore", args=dict(fgd_args or {})),
            PluginConfig(name="NodeRankTieBreak", weight=TIE_BREAK_WEIGHT, args={"seed": seed}),
            PluginConfig(name="NodePolicy", weight=ANNOTATION_WEIGHT, args={"annotated_only": True}),
            PluginConfig(name="DevicePolicy", weight=ANNOTATION_WEIGHT, args={"annotated_only": True}),
        ],
        seed=seed,
    )


SPEED_TIER_WEIGHT = 10.0
"""Weight of ``GpuSpeedTier`` in ``speed-fgd``: its 0/100 outweighs every other score but the annotations
(StrandingFGD 0..100, Topology 0..200 at its weight, the tie-break), so it restricts the choice to the fast
models and fragmentation decides inside them; an explicit per-pod binpack/spread annotation still wins."""


def speed_fgd_profile(seed: int = 0, fgd_args: Mapping[str, Any] | None = None) -> Profile:
    """``speed-fgd``, the default: ``stranding-fgd`` with GPU speed first (``GpuSpeedTier``). On a cluster of
    several GPU models a job goes to the models where it runs within 10 % of its best speed among those that can
    hold it now -- or, while the queued jobs ask for more GPUs than those
    models have idle or those models are scarce for the work that prefers them (the submitted jobs whose
    comparative advantage lies there bring a larger share of the submitted work than those models' share of the
    GPUs), where its comparative advantage over the job mix is within 10 % of its best; stranding-FGD
    chooses the node and GPUs among them, first among the nodes where the pod leaves whole the holes a queued job
    with larger whole-GPU tasks waits for. Exactly ``stranding-fgd`` on a cluster of
    one model, for pods whose job runs the same everywhere (the Alibaba trace's), and without a speed service."""
    base = stranding_fgd_profile(seed, fgd_args)
    plugins = list(base.plugins)
    plugins.insert(4, PluginConfig(name="GpuSpeedTier", weight=SPEED_TIER_WEIGHT))
    return base.model_copy(update={"plugins": plugins})


SPEED_WEIGHT = 10.0
"""Weight of ``GpuSpeed`` in the ``gavel`` profile: the GPU model decides, binpack only breaks ties within it."""


def gavel_profile(seed: int = 0) -> Profile:
    """``gavel``: heterogeneity-aware placement (Gavel's effective throughput, the ``GpuSpeed`` plugin) with node
    and device binpack inside the model it picks. Without a speed service it is plain binpack."""
    base = binpack_spread_profile(Policy.BINPACK, Policy.BINPACK, seed)
    return base.model_copy(update={"plugins": [*base.plugins, PluginConfig(name="GpuSpeed", weight=SPEED_WEIGHT)]})


ProfileBuilder = Callable[[int], Profile]

PROFILES: Mapping[str, ProfileBuilder] = {
    "binpack": lambda seed: binpack_spread_profile(Policy.BINPACK, Policy.SPREAD, seed),
    "hami": lambda seed: binpack_spread_profile(Policy.BINPACK, Policy.SPREAD, seed),
    "spread": lambda seed: binpack_spread_profile(Policy.SPREAD, Policy.SPREAD, seed),
    **{p: (lambda seed, p=p: fgd_paper_profile(p, seed)) for p in FGD_PAPER_POLICIES},  # type: ignore[misc]
    "stranding-fgd": stranding_fgd_profile,
    "speed-fgd": speed_fgd_profile,
    "gavel": gavel_profile,
    "default": lambda seed: profile_for(DEFAULT_PLACEMENT_POLICY, seed),
}
"""Policy name -> profile builder (taking a seed)."""

DEFAULT_PLACEMENT_POLICY = "speed-fgd"
"""The default placement: ``speed-fgd`` (``stranding-fgd`` plus GPU speed where models differ)."""


def profile_for(policy: str, seed: int = 0) -> Profile:
    try:
        builder = PROFILES[policy]
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; known: {', '.join(sorted(PROFILES))}") from None
    return builder(seed)
