"""``bench/mixed_paired.py``'s grid: the verdict on each row and column of the mixed-cluster table follows the paired
per-seed differences (a miss larger than the 2 % tolerance on every seed is ``MISS``, the same mean with a spread
the seeds cannot resolve is ``open``, a mean within 2 % is ``within``), and against one placement ``better`` needs
the whole interval on speed-fgd's side."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mixed_paired.py"


@pytest.fixture(scope="module")
def mp() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mixed_paired", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def runs(values: dict[str, list[float]], column: str = "avg_jct_s") -> list[dict[str, Any]]:
    return [{"cluster": "c", "trace": "t", "queue": "q", "placement": p, "seed": s, column: v}
            for p, vs in values.items() for s, v in enumerate(vs)]


def test_a_miss_on_every_seed_beyond_the_tolerance_is_a_real_miss(mp: ModuleType) -> None:
    gavel = [100.0, 200.0, 150.0, 120.0, 180.0, 90.0]
    rows = runs({"stranding-fgd": [x * 1.5 for x in gavel], "gavel": gavel,
                 "speed-fgd": [x * 1.10 + (0.5 if i % 2 else -0.5) for i, x in enumerate(gavel)]})
    (r,) = mp.paired(rows, "avg_jct_s")
    assert r["best_other"] == "gavel"
    assert 9.0 < r["worse_pct"] < 11.0
    assert r["worse_ci_pct"][0] > 2.0
    assert mp.verdict(r) == "MISS"


def test_the_same_mean_gap_with_a_wide_spread_is_open(mp: ModuleType) -> None:
    gavel = [100.0] * 6
    rows = runs({"stranding-fgd": [200.0] * 6, "gavel": gavel,
                 "speed-fgd": [150.0, 60.0, 140.0, 70.0, 130.0, 80.0]})  # mean 105: +5 %, spread +-40
    (r,) = mp.paired(rows, "avg_jct_s")
    assert r["worse_ci_pct"][0] < 0.0 < r["worse_ci_pct"][1]
    assert mp.verdict(r) == "open"


def test_within_two_percent_and_best(mp: ModuleType) -> None:
    rows = runs({"stranding-fgd": [200.0] * 4, "gavel": [100.0] * 4, "speed-fgd": [101.0, 101.5, 101.0, 101.5]})
    assert mp.verdict(mp.paired(rows, "avg_jct_s")[0]) == "within"
    rows = runs({"stranding-fgd": [200.0] * 4, "gavel": [100.0] * 4, "speed-fgd": [99.0, 98.0, 99.0, 98.0]})
    assert mp.verdict(mp.paired(rows, "avg_jct_s")[0]) == "best"


def test_higher_is_better_columns_turn_the_sign(mp: ModuleType) -> None:
    rows = runs({"stranding-fgd": [50.0, 60.0, 55.0], "gavel": [100.0, 110.0, 105.0],
                 "speed-fgd": [90.0, 99.0, 94.0]}, column="ref_work_per_h")
    (r,) = mp.paired(rows, "ref_work_per_h")
    assert r["best_other"] == "gavel" and r["worse_pct"] > 9.0 and mp.verdict(r) == "MISS"


def test_against_one_placement_better_needs_the_whole_interval(mp: ModuleType) -> None:
    rows = runs({"stranding-fgd": [100.0, 120.0, 110.0, 130.0], "gavel": [90.0, 100.0, 95.0, 99.0],
                 "speed-fgd": [95.0, 113.0, 104.0, 124.0]})
    (r,) = mp.paired(rows, "avg_jct_s", against="stranding-fgd")
    assert r["best_other"] == "stranding-fgd" and r["worse_pct"] < 0.0
    assert mp.verdict(r, tolerance=False) == "better"
    rows = runs({"stranding-fgd": [100.0, 120.0, 110.0, 130.0], "gavel": [90.0] * 4,
                 "speed-fgd": [80.0, 140.0, 90.0, 150.0]})
    assert mp.verdict(mp.paired(rows, "avg_jct_s", against="stranding-fgd")[0], tolerance=False) == "level"


def test_the_grid_has_a_cell_per_row_and_column(mp: ModuleType) -> None:
    rows = []
    for key, _ in mp.GRID_COLUMNS:
        for r in runs({"stranding-fgd": [3.0, 4.0, 5.0], "gavel": [2.0, 3.0, 4.0], "speed-fgd": [2.0, 3.0, 4.5]},
                      column=key):
            rows.append(r)
    merged: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        merged.setdefault((r["placement"], r["seed"]), {}).update(r)
    lines = mp.grid(list(merged.values()))
    assert lines[2].startswith("| c | t | q | 3 |")
    assert lines[2].count("|") == 4 + len(mp.GRID_COLUMNS) + 1
    assert lines[-1].startswith("Cells: ")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(1.0, 1e6), min_size=2, max_size=8))
def test_identical_runs_are_level_and_best(mp: ModuleType, xs: list[float]) -> None:
    rows = runs({"stranding-fgd": xs, "gavel": [x * 2 for x in xs], "speed-fgd": xs})
    (r,) = mp.paired(rows, "avg_jct_s", resamples=200)
    assert r["worse_pct"] == 0.0 and r["worse_ci_pct"] == [0.0, 0.0]
    assert mp.verdict(r) == "best"
    assert mp.verdict(mp.paired(rows, "avg_jct_s", resamples=200, against="stranding-fgd")[0],
                      tolerance=False) == "level"


def test_one_large_seed_hides_a_consistent_sign_from_the_interval_but_not_from_the_sign_test(mp: ModuleType) -> None:
    # the Philly windows differ 15x in JCT: speed-fgd better on every seed, by much more on the largest one
    sfgd = [120_000.0, 8_000.0, 9_000.0, 7_800.0, 10_000.0, 8_500.0, 9_500.0, 8_200.0, 7_900.0]
    fast = [96_000.0, *(x - 300.0 - 40.0 * (i % 3) for i, x in enumerate(sfgd[1:]))]
    fast[3] = sfgd[3] - 10.0
    rows = runs({"stranding-fgd": sfgd, "gavel": [x * 1.01 for x in sfgd], "speed-fgd": fast})
    (r,) = mp.paired(rows, "avg_jct_s", against="stranding-fgd")
    assert r["worse_ci_pct"][0] < 0.0 < r["worse_ci_pct"][1]  # the interval straddles zero ...
    assert (r["wins"], r["losses"]) == (9, 0) and r["sign_p"] < 0.01  # ... the signs do not
    assert mp.verdict(r, tolerance=False) == "better (signs)"
    rows = runs({"stranding-fgd": sfgd, "gavel": sfgd, "speed-fgd": [*fast[:4], *(x + 5.0 for x in sfgd[4:])]})
    (r,) = mp.paired(rows, "avg_jct_s", against="stranding-fgd")
    assert (r["wins"], r["losses"]) == (4, 5) and mp.verdict(r, tolerance=False) == "level"
