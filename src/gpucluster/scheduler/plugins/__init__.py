"""Built-in plugins, one package per concern, and the function that registers them all."""

from __future__ import annotations

import importlib

from gpucluster.scheduler.framework import PluginRegistry
from gpucluster.scheduler.plugins import devicefit, noderesources, policy

# Plugin packages that register several plugins through their own ``register(registry)`` function.
_PACKAGES = (
    "gpucluster.scheduler.plugins.fragmentation",
    "gpucluster.scheduler.plugins.baselines",
    "gpucluster.scheduler.plugins.gang",
    "gpucluster.scheduler.plugins.topology",
    "gpucluster.scheduler.plugins.quota",
    "gpucluster.scheduler.plugins.datalocality",
)


def builtin_registry() -> PluginRegistry:
    """A fresh registry holding every built-in plugin."""
    reg = PluginRegistry()
    reg.register("NodeUnschedulable", noderesources.new_node_unschedulable)
    reg.register("NodeResourcesFit", noderesources.new_node_resources_fit)
    reg.register("DeviceFit", devicefit.new_device_fit)
    reg.register("NodePolicy", policy.new_node_policy)
    reg.register("DevicePolicy", policy.new_device_policy)
    for name in _PACKAGES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:
                continue
            raise
        module.register(reg)
    return reg
