"""The in-process PromQL subset: rendering, lookback, staleness, range functions, set operators."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpucluster.monitoring.promql import (
    RangeFn,
    Sel,
    SeriesDB,
    any_of,
    expand_values,
    format_duration,
    labels_of,
    parse_duration,
    parse_series,
)

A = labels_of({"gpu": "0", "Hostname": "h"})
B = labels_of({"gpu": "1", "Hostname": "h"})


def test_durations_round_trip() -> None:
    assert parse_duration("90s") == 90 and parse_duration("1m30s") == 90 and parse_duration("2h") == 7200
    assert parse_duration("250ms") == 0.25
    assert format_duration(300) == "5m" and format_duration(7200) == "2h" and format_duration(45) == "45s"
    for bad in ("", "5", "m", "5x"):
        with pytest.raises(ValueError, match="duration"):
            parse_duration(bad)


def test_rendering() -> None:
    x = Sel("X")
    assert (x > 5).promql() == "X > 5"
    assert (x / (x + Sel("Y")) > 0.95).promql() == "(X / (X + Y)) > 0.95"
    assert any_of(x, [1, 2, 3]).promql() == "X == 1 or X == 2 or X == 3"
    assert (x > 0).and_(Sel("U") < 5, on=("a", "b")).promql() == "(X > 0) and on(a, b) (U < 5)"
    assert RangeFn("increase", Sel("C", (("k", "v"),)), 300).promql() == 'increase(C{k="v"}[5m])'
    with pytest.raises(ValueError, match="unsupported"):
        RangeFn("rate2", x, 60)


def test_lookback_and_staleness() -> None:
    db = SeriesDB()
    db.add("X", A, 0, 1.0)
    db.add("X", B, 0, 2.0)
    assert Sel("X").eval(db, 300) == {A: 1.0, B: 2.0}  # the 5-minute lookback is inclusive
    assert Sel("X").eval(db, 301) == {}
    db.ingest(10, [("X", dict(A), 3.0)], target="")
    db.ingest(20, [("X", dict(B), 4.0)], target="")  # A vanished from the scrape: marked stale
    assert Sel("X").eval(db, 20) == {B: 4.0}
    assert Sel("X").eval(db, 15) == {A: 3.0, B: 2.0}


def test_empty_labels_do_not_exist_and_matchers_filter() -> None:
    db = SeriesDB()
    db.add("X", labels_of({"gpu": "0", "pod": ""}), 0, 1.0)
    db.add("X", labels_of({"gpu": "1", "pod": "p"}), 0, 2.0)
    assert Sel("X", (("pod", "p"),)).eval(db, 0) == {labels_of({"gpu": "1", "pod": "p"}): 2.0}
    assert Sel("X", (("pod", ""),)).eval(db, 0) == {(("gpu", "0"),): 1.0}


def test_increase_handles_counter_resets_and_needs_two_samples() -> None:
    db = SeriesDB()
    for t, v in [(0, 5), (60, 7), (120, 2), (180, 4)]:
        db.add("C", A, t, v)
    assert RangeFn("increase", Sel("C"), 180).eval(db, 180) == {A: 2 + 2 + 2}
    assert RangeFn("increase", Sel("C"), 30).eval(db, 180) == {}
    assert RangeFn("max_over_time", Sel("C"), 600).eval(db, 180) == {A: 7}


def test_set_operators_match_on_labels() -> None:
    db = SeriesDB()
    db.add("T", labels_of({"node": "h", "Hostname": "h", "UUID": "u0"}), 0, 1)
    db.add("T", labels_of({"node": "h", "Hostname": "h", "UUID": "u1"}), 0, 1)
    db.add("U", labels_of({"Hostname": "h", "UUID": "u0", "pod": "p"}), 0, 1)
    db.add("U", labels_of({"Hostname": "h", "UUID": "u1"}), 0, 50)
    expr = (Sel("T") > 0).and_(Sel("U") < 5, on=("Hostname", "UUID"))
    assert [dict(k)["UUID"] for k in expr.eval(db, 0)] == ["u0"]
    unless = Sel("T").unless(Sel("U") < 5, on=("Hostname", "UUID"))
    assert [dict(k)["UUID"] for k in unless.eval(db, 0)] == ["u1"]
    both = (Sel("U") < 5).or_(Sel("U") > 40)
    assert len(both.eval(db, 0)) == 2


def test_promtool_value_notation() -> None:
    assert expand_values("1+1x3 _ stale 7x1 _x2") == [1, 2, 3, 4, None, "stale", 7, 7, None, None]
    assert expand_values("10-2x2") == [10, 8, 6]
    assert parse_series('m{a="1", b="x y"}') == ("m", {"a": "1", "b": "x y"})
    assert parse_series("m") == ("m", {})
    with pytest.raises(ValueError, match="bad value"):
        expand_values("1+x")
    with pytest.raises(ValueError, match="bad labels"):
        parse_series("m{a=1}")


@given(st.lists(st.floats(min_value=0, max_value=1e6, allow_nan=False), min_size=2, max_size=30))
def test_increase_of_a_monotone_counter_is_last_minus_first(values: list[float]) -> None:
    values = sorted(values)
    db = SeriesDB()
    for k, v in enumerate(values):
        db.add("C", A, 10.0 * k, v)
    t = 10.0 * (len(values) - 1)
    got = RangeFn("increase", Sel("C"), t).eval(db, t)[A]
    assert got == pytest.approx(values[-1] - values[0], rel=1e-9, abs=1e-6)
    assert ((RangeFn("increase", Sel("C"), t) > 0).eval(db, t) != {}) == (values[-1] > values[0])


def test_two_targets_with_the_same_series_do_not_collide() -> None:
    db = SeriesDB()
    db.ingest(0, [("X", {"node": "a"}, 1.0)], target="agent")
    db.ingest(0, [("X", {"node": "a"}, 2.0)], target="control")
    db.ingest(15, [("X", {"node": "a"}, 3.0)], target="agent")
    db.ingest(15, [], target="control")  # the control plane dropped it: only its copy goes stale
    got = Sel("X").eval(db, 15)
    assert got == {(("instance", "agent"), ("node", "a")): 3.0}


def test_series_that_stopped_are_forgotten_after_the_retention() -> None:
    db = SeriesDB(retention_s=100)
    db.ingest(0, [("X", {"pod": "a"}, 1.0)], target="t")
    db.ingest(10, [("X", {"pod": "b"}, 1.0)], target="t")  # the series changed labels: a goes stale
    assert len(db.series["X"]) == 2
    for t in range(20, 140, 10):
        db.ingest(t, [("X", {"pod": "b"}, 1.0)], target="t")
    assert [dict(lab)["pod"] for lab in db.series["X"]] == ["b"]
    assert db.gc(1000) == 1 and db.series == {}


def test_metric_names_of_an_expression() -> None:
    from gpucluster.monitoring.promql import RangeFn, Sel, metric_names

    expr = (Sel("A") > 0).and_(RangeFn("increase", Sel("B"), 300) > 0, on=("x",)).unless(Sel("C") / Sel("D"))
    assert metric_names(expr) == {"A", "B", "C", "D"}
