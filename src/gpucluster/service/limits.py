"""How much one request, and one tenant, may ask of the control plane (values in ``docs/security.md``).

Sizes are checked before anything is parsed (the body cap, by the ASGI guard in ``service.api.guard``) or by
the request models (field lengths, resource keys); rates by a token bucket per tenant, refilled on the clock
of the process (``time.monotonic``), answered 429 with ``Retry-After`` when empty.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_BODY_BYTES = 256 * 1024
"""Largest request body (413 beyond it, before it is read or parsed; bodies without a length are counted)."""
MAX_RESOURCE_KEYS = 16
"""Resource names in one job's ``resources``."""
MAX_RESOURCE_NAME_CHARS = 253
"""Longest resource name (a Kubernetes qualified name: ``nvidia.com/gpumem``)."""
MAX_RESOURCE_VALUE_CHARS = 64
"""Longest resource value given as text (``"16Gi"``)."""
MAX_IDEMPOTENCY_KEY_CHARS = 128
"""Longest ``Idempotency-Key`` header."""
MAX_QUEUED_TASKS = 8
"""Design or experiment tasks of one kind queued or running at once (429 beyond)."""
MAX_DESIGN_BODY_KEYS = 64
"""Keys in a design request (``requirements`` included)."""


@dataclass(frozen=True, slots=True)
class RateLimits:
    """Per-tenant request rates (the admin token is not limited)."""

    submit_per_s: float = 20.0
    """Sustained job submissions (and task starts) per second per tenant; 0 = unlimited."""
    submit_burst: int = 100
    """Submissions a tenant may make at once before the sustained rate applies."""


@dataclass(slots=True)
class TokenBucket:
    """``burst`` tokens refilled at ``rate`` per second; :meth:`take` spends one or says how long to wait."""

    rate: float
    burst: int
    clock: Callable[[], float] = time.monotonic
    _level: dict[str, float] = field(default_factory=dict)
    _at: dict[str, float] = field(default_factory=dict)

    def take(self, key: str) -> float:
        """0.0 when ``key`` may go ahead now (one token spent), else the seconds until it may."""
        if self.rate <= 0:
            return 0.0
        now = self.clock()
        level = min(float(self.burst), self._level.get(key, float(self.burst))
                    + (now - self._at.get(key, now)) * self.rate)
        self._at[key] = now
        if level >= 1.0:
            self._level[key] = level - 1.0
            return 0.0
        self._level[key] = level
        return (1.0 - level) / self.rate

    @staticmethod
    def retry_after(wait_s: float) -> str:
        return str(max(1, math.ceil(wait_s)))


__all__ = [
    "MAX_BODY_BYTES",
    "MAX_DESIGN_BODY_KEYS",
    "MAX_IDEMPOTENCY_KEY_CHARS",
    "MAX_QUEUED_TASKS",
    "MAX_RESOURCE_KEYS",
    "MAX_RESOURCE_NAME_CHARS",
    "MAX_RESOURCE_VALUE_CHARS",
    "RateLimits",
    "TokenBucket",
]
