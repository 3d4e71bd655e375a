"""``wait_until``: poll a condition with a deadline (integration tests never sleep for a fixed time)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.2) -> Any:
    """Poll ``predicate`` until it returns something truthy and return that; an exception counts as "not
    yet". Fails with ``what`` (and the last exception) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_exc: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # polling: keep the last error for the message
            last_exc = exc
        time.sleep(interval)
    detail = f": {last_exc!r}" if last_exc else ""
    raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
