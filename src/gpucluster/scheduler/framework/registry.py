"""Plugin registry: name -> ``factory(args, handle)``. Built explicitly; no module-level mutable state."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpucluster.scheduler.framework.interface import Plugin


@dataclass(slots=True)
class Handle:
    """What a plugin may use besides its own arguments."""

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    """The profile's random generator (seeded), for random policies and tie-breaks."""
    framework: Any = None
    """The :class:`~gpucluster.scheduler.framework.runtime.Framework` the plugin belongs to (set before any
    plugin is created), for plugins that call other extension points (Reserve calls DeviceScore)."""
    services: dict[str, Any] = field(default_factory=dict)
    """Shared services by name (e.g. a quota manager or a data catalog) supplied by whoever builds the
    framework."""


PluginFactory = Callable[[Mapping[str, Any], Handle], Plugin]


class PluginArgsError(ValueError):
    """A plugin's arguments in a profile are invalid; the message names the plugin and the field."""


class PluginRegistry:
    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}

    def register(self, name: str, factory: PluginFactory) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} is registered twice")
        self._factories[name] = factory

    def create(self, name: str, args: Mapping[str, Any], handle: Handle) -> Plugin:
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories))
            raise PluginArgsError(f"unknown plugin {name!r}; known plugins: {known}") from None
        return factory(args, handle)

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._factories))
