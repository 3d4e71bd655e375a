from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpucluster.jobs.offers import dominant_share, drf_allocate


def test_paper_example_three_and_two_tasks() -> None:
    got = drf_allocate({"cpu": 9, "mem": 18}, {"A": {"cpu": 1, "mem": 4}, "B": {"cpu": 3, "mem": 1}})
    assert got == {"A": 3, "B": 2}
    cap = {"cpu": 9, "mem": 18}
    assert dominant_share({"cpu": 3, "mem": 12}, cap) == pytest.approx(2 / 3)
    assert dominant_share({"cpu": 6, "mem": 2}, cap) == pytest.approx(2 / 3)


task = st.fixed_dictionaries({"cpu": st.integers(1, 5), "mem": st.integers(1, 5)})


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.sampled_from("ABCDE"), task, min_size=1, max_size=5), st.integers(5, 40),
       st.integers(5, 40))
def test_drf_never_exceeds_capacity_and_is_pareto_efficient(demands: dict[str, dict[str, int]], cpu: int,
                                                            mem: int) -> None:
    cap = {"cpu": cpu, "mem": mem}
    got = drf_allocate(cap, demands)
    used = {r: sum(got[u] * demands[u][r] for u in demands) for r in cap}
    assert all(used[r] <= cap[r] for r in cap)
    # no user could get one more task
    for d in demands.values():
        assert any(used[r] + d[r] > cap[r] for r in cap)
