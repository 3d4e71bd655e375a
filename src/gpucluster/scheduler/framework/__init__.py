"""Scheduling framework: phases (protocols), status and reasons, cycle state, registry, profiles, runtime."""

from gpucluster.scheduler.framework.cycle_state import CycleState
from gpucluster.scheduler.framework.interface import (
    BindPlugin,
    BoolArray,
    DeviceScorePlugin,
    FilterExplainer,
    FilterPlugin,
    FloatArray,
    IntArray,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreFilterPlugin,
    PreScorePlugin,
    ReasonArray,
    ReservePlugin,
    ScorePlugin,
)
from gpucluster.scheduler.framework.profile import PluginConfig, Profile
from gpucluster.scheduler.framework.registry import Handle, PluginArgsError, PluginFactory, PluginRegistry
from gpucluster.scheduler.framework.runtime import Framework, WaitingPod
from gpucluster.scheduler.framework.status import SKIP, Code, Reason, Status

__all__ = [
    "SKIP",
    "BindPlugin",
    "BoolArray",
    "Code",
    "CycleState",
    "DeviceScorePlugin",
    "FilterExplainer",
    "FilterPlugin",
    "FloatArray",
    "Framework",
    "Handle",
    "IntArray",
    "PermitPlugin",
    "Plugin",
    "PluginArgsError",
    "PluginConfig",
    "PluginFactory",
    "PluginRegistry",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "Profile",
    "Reason",
    "ReasonArray",
    "ReservePlugin",
    "ScorePlugin",
    "Status",
    "WaitingPod",
]
