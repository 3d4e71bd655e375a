"""Records of what an operational action did, shared by every backend that carries actions out."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class DrainResult:
    """What draining a node did (the simulator, the embedded control plane or Kubernetes)."""

    evicted: list[str] = field(default_factory=list)
    """Pods removed from the node."""
    rescheduled: dict[str, str] = field(default_factory=dict)
    """Pod -> the node it now runs on."""
    pending: list[str] = field(default_factory=list)
    """Evicted pods waiting for room (kept in the backend's queue, not lost)."""
