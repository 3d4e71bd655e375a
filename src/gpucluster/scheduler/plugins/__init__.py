"""Built-in plugins, one package per concern, and the function that registers them all."""

from __future__ import annotations

from gpucluster.scheduler.framework import PluginRegistry
from gpucluster.scheduler.plugins import (
    baselines,
    datalocality,
    devicefit,
    fragmentation,
    gang,
    gpuspeed,
    noderesources,
    nodeselector,
    policy,
    quota,
    topology,
)


def builtin_registry() -> PluginRegistry:
    """A fresh registry holding every built-in plugin."""
    reg = PluginRegistry()
    reg.register("NodeUnschedulable", noderesources.new_node_unschedulable)
    reg.register("NodeName", noderesources.new_node_name)
    reg.register("NodeResourcesFit", noderesources.new_node_resources_fit)
    reg.register("DeviceFit", devicefit.new_device_fit)
    reg.register("NodePolicy", policy.new_node_policy)
    reg.register("DevicePolicy", policy.new_device_policy)
    for package in (fragmentation, baselines, gang, topology, quota, datalocality, nodeselector, gpuspeed):
        package.register(reg)
    return reg
