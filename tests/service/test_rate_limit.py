"""The per-tenant submission rate (``service.limits.TokenBucket``): a tenant may send ``burst`` submissions at once
and ``rate`` per second after that, however long it was idle. The bucket is driven by a clock the test sets (no
sleeping); the API test swaps the running service's limiter clock the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.service.limits import RateLimits, TokenBucket
from tests.service.inproc import in_process


class _Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


steps = st.lists(st.tuples(st.floats(0.0, 1e5, allow_nan=False), st.integers(0, 30)), min_size=1, max_size=30)


@settings(max_examples=200)
@given(st.floats(0.01, 50.0), st.integers(1, 20), steps)
def test_the_bucket_never_holds_more_than_its_burst(rate: float, burst: int,
                                                    script: list[tuple[float, int]]) -> None:
    """Over any stretch of time, the takes granted are at most ``burst`` plus what the rate refilled meanwhile
    (a bucket that kept filling while idle would let a tenant that waited an hour send thousands at once)."""
    clock = _Clock()
    bucket = TokenBucket(rate, burst, clock)
    granted: list[float] = []  # the clock at each granted take
    for idle, tries in script:
        clock.t += idle
        for _ in range(tries):
            if bucket.take("tenant") == 0.0:
                granted.append(clock.t)
    t = np.asarray(granted)
    k = np.arange(t.size)
    count = k[None, :] - k[:, None] + 1  # takes granted from the i-th to the j-th (j >= i)
    allowed = burst + rate * (t[None, :] - t[:, None]) + 1e-6
    over = np.triu(count > allowed)
    assert not over.any(), (np.argwhere(over)[:3].tolist(), granted[:40])


def test_a_long_idle_tenant_gets_its_burst_and_no_more(tmp_path: Path) -> None:
    """Through the API: an hour after its last submission a tenant may submit ``burst`` jobs at once; the next
    one is 429 with Retry-After. Another tenant's bucket is its own."""
    with in_process(tmp_path / "d", rates=RateLimits(submit_per_s=1.0, submit_burst=3)) as ip:
        clock = _Clock()
        ip.service.limiter.clock = clock
        tok, other = ip.tenant("patient"), ip.tenant("bystander")
        names = (f"j{k}" for k in range(100))  # a job name is unique among a tenant's live jobs

        def job() -> dict[str, Any]:
            return {"name": next(names), "resources": {"nvidia.com/gpu": 1}}

        assert ip.as_(tok).post("/api/v1/jobs", json=job()).status_code == 201
        clock.t += 3600.0
        codes = [ip.as_(tok).post("/api/v1/jobs", json=job()).status_code for _ in range(5)]
        assert codes == [201, 201, 201, 429, 429]
        r = ip.as_(tok).post("/api/v1/jobs", json=job())
        assert r.status_code == 429 and r.headers["Retry-After"] == "1"
        assert ip.as_(other).post("/api/v1/jobs", json=job()).status_code == 201
        clock.t += 1.0  # one more token, exactly
        assert [ip.as_(tok).post("/api/v1/jobs", json=job()).status_code for _ in range(2)] == [201, 429]
