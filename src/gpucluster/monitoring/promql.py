"""A tiny PromQL: the expression forms our alert rules use, rendered as PromQL text *and* evaluated in-process.

The rule file that Prometheus loads and the embedded evaluator come from the same expression objects, so the
two cannot drift apart. Supported: selectors with equality matchers, ``increase`` and ``max_over_time`` over
a range, comparison filters against a scalar, ``+ - * /`` between vectors with identical labels, and the set
operators ``and`` / ``or`` / ``unless`` (optionally ``on(...)``).

Semantics follow Prometheus 2.x where our rules can see a difference: an instant selector looks back 5
minutes (inclusive) for the latest sample unless the series was marked stale (a scrape that no longer had it); a range
``[w]`` holds the samples in ``[t-w, t]``; labels with empty values do not exist; results carry no metric
name. ``increase`` is *not* extrapolated to the window edges (Prometheus' is); our rules only ever compare an
increase with ``> 0``, where the two agree.
"""

from __future__ import annotations

import bisect
import itertools
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

Labels = tuple[tuple[str, str], ...]
"""Sorted ``(name, value)`` pairs without ``__name__`` and without empty values."""
Vector = dict[Labels, float]

LOOKBACK_S = 300.0
STALE = None
"""A stale marker in a series (the sample value)."""


def labels_of(mapping: Mapping[str, str]) -> Labels:
    return tuple(sorted((k, v) for k, v in mapping.items() if v != "" and k != "__name__"))


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``2h``, ``1d``, ``1m30s`` -> seconds."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0, "y": 31536000.0}
    total, num, i = 0.0, "", 0
    if not text:
        raise ValueError("empty duration")
    while i < len(text):
        ch = text[i]
        if ch.isdigit():
            num += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not num:
            raise ValueError(f"bad duration {text!r}")
        total += int(num) * units[unit]
        num = ""
        i += len(unit)
    if num:
        raise ValueError(f"bad duration {text!r} (missing unit)")
    return total


def format_duration(seconds: float) -> str:
    s = int(seconds)
    if s and s % 3600 == 0:
        return f"{s // 3600}h"
    if s and s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


@dataclass(slots=True)
class SeriesDB:
    """Samples by metric name and labels, with stale markers; old samples are dropped past ``retention_s``."""

    retention_s: float = 3600.0
    series: dict[str, dict[Labels, tuple[list[float], list[float | None]]]] = field(default_factory=dict)
    _targets: dict[str, set[tuple[str, Labels]]] = field(default_factory=dict)
    _labels: dict[tuple[object, ...], Labels] = field(default_factory=dict)
    """Memo: label items as a scrape gives them -> normalised labels (scrapes repeat the same sets)."""
    _last_gc: float = -math.inf

    def add(self, name: str, labels: Labels, t: float, value: float | None) -> None:
        per = self.series.setdefault(name, {})
        ts, vs = per.setdefault(labels, ([], []))
        if ts and t < ts[-1]:
            raise ValueError(f"{name}{dict(labels)}: sample at {t} is older than the last one ({ts[-1]})")
        if ts and t == ts[-1]:
            vs[-1] = value
            return
        ts.append(t)
        vs.append(value)
        if ts[0] < t - self.retention_s:
            cut = bisect.bisect_left(ts, t - self.retention_s)
            del ts[:cut]
            del vs[:cut]

    def ingest(self, t: float, samples: Iterable[tuple[str, Mapping[str, str], float]], target: str = "") -> None:
        """One scrape of one target: add its samples and mark the target's series it no longer has stale.

        As Prometheus does, every series gets the target's name as its ``instance`` label (so two targets
        exporting the same series do not collide)."""
        seen: set[tuple[str, Labels]] = set()
        memo = self._labels
        if len(memo) > 500_000:
            memo.clear()
        for name, labels, value in samples:
            items = (target, *labels.items())
            lab = memo.get(items)
            if lab is None:
                lab = memo[items] = labels_of({**labels, "instance": target} if target else labels)
            seen.add((name, lab))
            self.add(name, lab, t, value)
        for name, lab in self._targets.get(target, set()) - seen:
            per = self.series.get(name, {})
            if lab in per and per[lab][1] and per[lab][1][-1] is not STALE:
                self.add(name, lab, t, STALE)
        self._targets[target] = seen
        if t - self._last_gc >= self.retention_s / 4:
            self.gc(t)

    def gc(self, t: float) -> int:
        """Forget series with no sample left inside the retention window (series that stopped, e.g. a
        device's series whose ``pod`` label changed); returns how many were dropped. Called by :meth:`ingest`
        every quarter of the retention; queries at ``t`` cannot see the difference."""
        self._last_gc = t
        cutoff = t - self.retention_s
        dropped = 0
        for name in list(self.series):
            per = self.series[name]
            dead = [lab for lab, (ts, _) in per.items() if not ts or ts[-1] < cutoff]
            for lab in dead:
                del per[lab]
            dropped += len(dead)
            if not per:
                del self.series[name]
        return dropped

    def instant(self, name: str, matchers: Labels, t: float) -> Vector:
        out: Vector = {}
        for lab, (ts, vs) in self.series.get(name, {}).items():
            if not _matches(lab, matchers):
                continue
            k = bisect.bisect_right(ts, t) - 1
            if k < 0 or ts[k] < t - LOOKBACK_S:
                continue
            v = vs[k]
            if v is not STALE:
                out[lab] = v
        return out

    def range(self, name: str, matchers: Labels, t: float, window: float) -> dict[Labels, list[float]]:
        out: dict[Labels, list[float]] = {}
        for lab, (ts, vs) in self.series.get(name, {}).items():
            if not _matches(lab, matchers):
                continue
            lo = bisect.bisect_left(ts, t - window)
            hi = bisect.bisect_right(ts, t)
            vals = [v for v in vs[lo:hi] if v is not STALE]
            if vals:
                out[lab] = vals
        return out


def _matches(lab: Labels, matchers: Labels) -> bool:
    if not matchers:
        return True
    d = dict(lab)
    return all(d.get(k, "") == v for k, v in matchers)


class Expr:
    """A PromQL expression node."""

    def promql(self) -> str:
        raise NotImplementedError

    def eval(self, db: SeriesDB, t: float) -> Vector:
        raise NotImplementedError

    def __str__(self) -> str:
        return self.promql()

    # sugar for building rules
    def __gt__(self, x: float) -> Cmp:
        return Cmp(self, ">", x)

    def __lt__(self, x: float) -> Cmp:
        return Cmp(self, "<", x)

    def __ge__(self, x: float) -> Cmp:
        return Cmp(self, ">=", x)

    def eq(self, x: float) -> Cmp:
        return Cmp(self, "==", x)

    def __add__(self, other: Expr) -> Bin:
        return Bin(self, "+", other)

    def __truediv__(self, other: Expr) -> Bin:
        return Bin(self, "/", other)

    def and_(self, other: Expr, on: tuple[str, ...] | None = None) -> Bin:
        return Bin(self, "and", other, on)

    def or_(self, other: Expr, on: tuple[str, ...] | None = None) -> Bin:
        return Bin(self, "or", other, on)

    def unless(self, other: Expr, on: tuple[str, ...] | None = None) -> Bin:
        return Bin(self, "unless", other, on)


@dataclass(frozen=True, eq=False)
class Sel(Expr):
    """``name{k="v",...}``"""

    name: str
    matchers: Labels = ()

    def promql(self) -> str:
        if not self.matchers:
            return self.name
        inner = ",".join(f'{k}="{v}"' for k, v in self.matchers)
        return f"{self.name}{{{inner}}}"

    def eval(self, db: SeriesDB, t: float) -> Vector:
        return db.instant(self.name, self.matchers, t)


def _increase(vals: list[float]) -> float | None:
    if len(vals) < 2:
        return None
    inc = 0.0
    for a, b in itertools.pairwise(vals):
        inc += b - a if b >= a else b  # a drop is a counter reset
    return inc


_RANGE_FUNCS: dict[str, Callable[[list[float]], float | None]] = {
    "increase": _increase,
    "max_over_time": max,
    "min_over_time": min,
    "avg_over_time": lambda v: sum(v) / len(v),
}


@dataclass(frozen=True, eq=False)
class RangeFn(Expr):
    """``fn(selector[window])``"""

    fn: str
    sel: Sel
    window_s: float

    def __post_init__(self) -> None:
        if self.fn not in _RANGE_FUNCS:
            raise ValueError(f"unsupported range function {self.fn!r}")

    def promql(self) -> str:
        return f"{self.fn}({self.sel.promql()}[{format_duration(self.window_s)}])"

    def eval(self, db: SeriesDB, t: float) -> Vector:
        f = _RANGE_FUNCS[self.fn]
        out: Vector = {}
        for lab, vals in db.range(self.sel.name, self.sel.matchers, t, self.window_s).items():
            v = f(vals)
            if v is not None:
                out[lab] = v
        return out


_CMP: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt, "<": operator.lt, ">=": operator.ge, "<=": operator.le, "==": operator.eq, "!=": operator.ne,
}
_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul,
    "/": lambda a, b: a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a)),
}


def _fmt_scalar(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else repr(float(x))


def _paren(e: Expr) -> str:
    return e.promql() if isinstance(e, Sel | RangeFn) else f"({e.promql()})"


@dataclass(frozen=True, eq=False)
class Cmp(Expr):
    """``expr OP scalar`` as a filter (keeps the series whose value satisfies it)."""

    expr: Expr
    op: str
    value: float

    def promql(self) -> str:
        return f"{_paren(self.expr)} {self.op} {_fmt_scalar(self.value)}"

    def eval(self, db: SeriesDB, t: float) -> Vector:
        f = _CMP[self.op]
        return {lab: v for lab, v in self.expr.eval(db, t).items() if f(v, self.value)}


def _key(lab: Labels, on: tuple[str, ...] | None) -> Labels:
    return lab if on is None else tuple((k, v) for k, v in lab if k in on)


@dataclass(frozen=True, eq=False)
class Bin(Expr):
    """``lhs OP [on(...)] rhs`` between two vectors (one-to-one)."""

    lhs: Expr
    op: str
    rhs: Expr
    on: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.op not in _ARITH and self.op not in ("and", "or", "unless"):
            raise ValueError(f"unsupported operator {self.op!r}")
        if self.op in _ARITH and self.on is not None:
            raise ValueError("arithmetic with on(...) is not supported (labels would be reduced)")

    def promql(self) -> str:
        on = "" if self.on is None else f" on({', '.join(self.on)})"
        chain = self.op == "or" and self.on is None
        lhs = self.lhs
        flat_lhs = chain and (isinstance(lhs, Cmp) or (isinstance(lhs, Bin) and lhs.op == "or" and lhs.on is None))
        flat_rhs = chain and isinstance(self.rhs, Cmp)
        left = lhs.promql() if flat_lhs else _paren(lhs)
        right = self.rhs.promql() if flat_rhs else _paren(self.rhs)
        return f"{left} {self.op}{on} {right}"

    def eval(self, db: SeriesDB, t: float) -> Vector:
        left, right = self.lhs.eval(db, t), self.rhs.eval(db, t)
        if self.op in _ARITH:
            f = _ARITH[self.op]
            return {lab: f(v, right[lab]) for lab, v in left.items() if lab in right}
        rkeys = {_key(lab, self.on) for lab in right}
        if self.op == "and":
            return {lab: v for lab, v in left.items() if _key(lab, self.on) in rkeys}
        if self.op == "unless":
            return {lab: v for lab, v in left.items() if _key(lab, self.on) not in rkeys}
        lkeys = {_key(lab, self.on) for lab in left}
        out = dict(left)
        out.update({lab: v for lab, v in right.items() if _key(lab, self.on) not in lkeys})
        return out


def metric_names(expr: Expr) -> frozenset[str]:
    """The metric names an expression selects (what a scrape must keep for it to evaluate)."""
    if isinstance(expr, Sel):
        return frozenset({expr.name})
    if isinstance(expr, RangeFn):
        return frozenset({expr.sel.name})
    if isinstance(expr, Cmp):
        return metric_names(expr.expr)
    if isinstance(expr, Bin):
        return metric_names(expr.lhs) | metric_names(expr.rhs)
    raise TypeError(f"unknown expression node {type(expr).__name__}")


def any_of(sel: Sel, values: Iterable[float]) -> Expr:
    """``sel == a or sel == b or ...``"""
    vals = list(values)
    if not vals:
        raise ValueError("any_of needs at least one value")
    expr: Expr = sel.eq(vals[0])
    for v in vals[1:]:
        expr = expr.or_(sel.eq(v))
    return expr


# ---------------------------------------------------------------------------------------------- test input
_SERIES = re.compile(r"^\s*([A-Za-z_:][A-Za-z0-9_:]*)\s*(?:\{(.*)\})?\s*$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)')
_TOKEN = re.compile(r"^(_|stale|[-+]?[0-9.eE]+)(?:([-+][0-9.eE]+)?x([0-9]+))?$")


def parse_series(text: str) -> tuple[str, dict[str, str]]:
    """``name{a="b",c="d"}`` -> ``(name, labels)`` (promtool's ``series:`` field)."""
    mt = _SERIES.match(text)
    if mt is None:
        raise ValueError(f"bad series {text!r}")
    labels: dict[str, str] = {}
    body = (mt.group(2) or "").strip()
    pos = 0
    while pos < len(body):
        lm = _LABEL.match(body, pos)
        if lm is None:
            raise ValueError(f"bad labels in {text!r} at {body[pos:]!r}")
        labels[lm.group(1)] = lm.group(2).replace('\\"', '"')
        pos = lm.end()
    return mt.group(1), labels


def expand_values(text: str) -> list[float | str | None]:
    """promtool's ``values:`` notation -> one entry per interval: a number, ``None`` for ``_`` (no sample),
    or ``"stale"``. ``a+bxn`` is n+1 values a, a+b, ...; ``axn`` repeats a n+1 times; ``_xn`` n gaps."""
    out: list[float | str | None] = []
    for tok in text.split():
        mt = _TOKEN.match(tok)
        if mt is None:
            raise ValueError(f"bad value token {tok!r}")
        base, step, times = mt.groups()
        if base in ("_", "stale"):
            if step:
                raise ValueError(f"bad value token {tok!r}")
            n = int(times) if times else 1
            out.extend([None if base == "_" else "stale"] * n)
            continue
        start = float(base)
        if times is None:
            out.append(start)
            continue
        inc = float(step) if step else 0.0
        out.extend(start + k * inc for k in range(int(times) + 1))
    return out
