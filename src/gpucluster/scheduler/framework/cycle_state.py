"""Per-cycle scratch space: PreFilter computes once, Filter and Score read it (under the plugin's name)."""

from __future__ import annotations

from typing import Any

from gpucluster.model import DeviceGrant


class CycleState:
    """A dict keyed by plugin name, valid for one pod's scheduling cycle."""

    __slots__ = ("_data", "grants", "init_grants", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.grants: tuple[tuple[DeviceGrant, ...], ...] = ()
        """Devices chosen per container by Reserve on the chosen node (empty until then)."""
        self.init_grants: tuple[tuple[DeviceGrant, ...], ...] = ()
        """Devices chosen per init container (each fitted on its own, HAMi's way)."""
        self.skip_filter: set[str] = set()
        """Plugins whose PreFilter returned SKIP."""
        self.skip_score: set[str] = set()
        """Plugins whose PreScore returned SKIP."""

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def read(self, key: str) -> Any:
        """The value a plugin wrote; ``KeyError`` if it did not (a plugin ordering bug)."""
        return self._data[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)
