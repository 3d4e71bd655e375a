"""FGD scores per (pod shape, node) kept across decisions *and* across rebuilds of a learned target workload.

A node's FGD score for a pod shape is a function of that node's free resources and of the target workload. The
plugin keeps, per pod shape, the score and chosen GPU of every node it has scored, stamped with the node's
``node_generation``; a lookup recomputes only the nodes whose generation moved, in one batch in node order
(what the fast experiment path does too, so both make the same decisions).

A learned target is rebuilt every ``refresh`` pods and its weights move a little each time. Recomputing every
node for every pod shape after each rebuild dominated the default policy at 10,000 nodes
(``docs/benchmarks.md``), yet it almost never changes a score. The drop before stranding is linear in the
weights: ``x = sum_s w_s * d_s``, where ``d_s`` (what the placement changes in shape s's fragmented amount) is a
whole number that does not depend on the weights. So when a node's resources did not change, its drop under the
new weights ``w'`` is ``x + d . (w' - w)``, known to within float rounding. For that the table keeps, per node,
the drop of the chosen placement (``x``) and its ``d`` over a *universe* of shapes (every shape that has been
in a target so far, so that a shape coming back into the target is already measured; a shape never measured
is bounded by the node's idle milli, which bounds any ``|d_s|``). For a sharing pod the other GPUs of the node
are kept as two maxima of their drops (those before and after the chosen GPU in index order) and a bound on
their ``|d_s|``; they must stay below the chosen GPU's new score for the choice to stand.

FGD's score is ``trunc(sigmoid((x + gain) / 1000) * 100)``, monotone in ``x``. When the interval around the
new drop (plus the stranding gain, recomputed exactly for the new target) truncates to one integer at both
ends, widened by ``MARGIN``, that integer is what the full computation gives and the node is re-scored without
recomputation. The rest (a few percent once the target has settled) are recomputed exactly, in one batch.

Since a node's entry depends only on its free state, a large batch (the first lookup of a shape, the re-scoring
after a rebuild) is done once per distinct state (:attr:`NodeMirror.group`) and copied to the other nodes of
that state: the openb cluster replicated to 9,704 nodes has a few hundred distinct states among its candidates
even after 20,000 placements. Re-scoring groups by state *and* by the version and columns of the kept entry,
so that every row of a group keeps an entry that is its own (see :meth:`IncrementalScores._rescore_grouped`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gpucluster.model import Snapshot
from gpucluster.model.capacity import RowStamps
from gpucluster.scheduler.plugins.fragmentation.measure import (
    Drops,
    NodeArrays,
    Shape,
    TargetWorkload,
    Universe,
    sigmoid_score,
)

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]

MARGIN = 1e-3
"""Milli added on both sides of an estimated drop: far above the float rounding of a drop (~1e-12 milli), far
below the width of one score step (~40 milli)."""
_D_MAX = np.iinfo(np.int16).max
STEPS = 1000.0 * np.log(np.arange(1, 100) / (100.0 - np.arange(1, 100)))
"""Drops at which FGD's score steps from k - 1 to k (k = 1..99): ``trunc(sigmoid(y / 1000) * 100)`` is the
number of steps at or below ``y`` for any ``y`` farther than float rounding from every step."""
_REGULAR = 30_000.0
"""Above this drop the float sigmoid rounds towards 1 irregularly (score 100 near 36,737): not re-scored."""
_GROW = 16
_REGROUP_AT = 4
"""NodeMirror renumbers its groups once it has seen this many distinct states per node."""
_GROUPED = 64
"""A batch of at least this many rows is computed once per group of identical free states."""


def _distinct(values: npt.NDArray[np.integer]) -> list[int]:
    """The distinct small non-negative integers in ``values`` (versions, column counts), ascending."""
    if values.size == 0:
        return []
    lo = int(values.min())
    if lo == int(values.max()):
        return [lo]
    return (np.flatnonzero(np.bincount(values - lo)) + lo).tolist()


def _representatives(rows: IntArray, key: npt.NDArray[np.int64] | None) -> tuple[IntArray, IntArray] | None:
    """For a large batch whose rows share few ``key`` values: one row per value (in row order) and, per row of
    ``rows``, the representative it copies; None when grouping would not pay."""
    if key is None or rows.size < _GROUPED:
        return None
    _, first, inverse = np.unique(key, return_index=True, return_inverse=True)
    if 2 * first.size > rows.size:
        return None
    order = np.argsort(first)
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    reps = rows[first[order]]
    return reps, reps[rank[inverse.reshape(-1)]]


def _copy_rows(rows: IntArray, src: IntArray, *arrays: npt.NDArray[np.generic]) -> None:
    """Give ``rows`` of each array the entries of ``src`` (rows of the same free state)."""
    for a in arrays:
        a[rows] = a[src]


@dataclass(slots=True)
class _Table:
    """One pod shape's per-node entries (index = node)."""

    score: FloatArray
    gpu: IntArray
    stamp: IntArray
    """``node_generation`` the entry was computed at; -1 = never."""
    score_version: npt.NDArray[np.int32]
    """Target version ``score`` is valid for."""
    x_version: npt.NDArray[np.int32]
    """Target version ``x`` was computed under."""
    known: npt.NDArray[np.int16]
    """Universe columns of ``d`` that are measured (0: none; recompute on any change of the target)."""
    alt_before: FloatArray
    """Largest drop of the node's other GPUs that come before the chosen one (``-inf``: none)."""
    alt_after: FloatArray
    """Largest drop of the GPUs after it with a different amount left (``-inf``: none)."""
    alt_d: npt.NDArray[np.float32]
    """Largest ``|d_s|`` of those other GPUs over their measured columns."""
    alt_known: npt.NDArray[np.int16]
    """Universe columns ``alt_d`` covers."""
    zero: npt.NDArray[np.bool_]
    """``d`` is all zero over every universe column and the pod is not sharing: the drop is exactly 0 under any
    weights (before and after are the same amounts, computed at the same batch position)."""
    d: npt.NDArray[np.int16]
    """``[N, G]``: ``d_s`` of the chosen placement per universe shape."""

    @classmethod
    def empty(cls, n: int, width: int, bounds: bool) -> _Table:
        m = n if bounds else 0
        return cls(np.zeros(n, np.float64), np.zeros(n, np.int64), np.full(n, -1, np.int64),
                   np.full(n, -1, np.int32), np.full(m, -1, np.int32), np.zeros(m, np.int16),
                   np.full(m, -np.inf), np.full(m, -np.inf), np.zeros(m, np.float32), np.zeros(m, np.int16),
                   np.zeros(m, np.bool_), np.zeros((m, width if bounds else 0), np.int16))

    def widen(self, width: int) -> None:
        if self.d.shape[1] < width:
            grown = np.zeros((self.d.shape[0], width + _GROW), np.int16)
            grown[:, : self.d.shape[1]] = self.d
            self.d = grown


@dataclass(frozen=True, slots=True)
class Scorer:
    """How to score one pod shape on rows of the cluster (given by the plugin per lookup)."""

    compute: Callable[[IntArray], Drops]
    """Exact drops of the rows (measured over :attr:`IncrementalScores.universe` with bounds)."""
    sharing: bool
    inputs: Callable[[IntArray], tuple[FloatArray | None, FloatArray]] | None = None
    """The current stranding gain (or None) and the idle GPU milli of rows (for re-scoring)."""
    complete: Callable[[IntArray, IntArray, TargetWorkload, BoolArray], FloatArray] | None = None
    """``complete(rows, gpus, shapes, access)``: ``d`` of each row's chosen placement for more shapes."""


class IncrementalScores:
    """Per pod shape (``key``), per node: FGD score and GPU, recomputed only where the node or the bound moved.

    ``bounds`` on (a learned target): ``set_target`` starts a new target version when the target changed and
    the tables keep what re-scoring needs. Off (a fixed target): a plain per-generation cache.
    """

    def __init__(self, n_nodes: int, bounds: bool) -> None:
        self.n = n_nodes
        self.bounds = bounds
        self.version = 0
        self._target: TargetWorkload | None = None
        self._shapes: list[Shape] = []
        self._index: dict[Shape, int] = {}
        self._weights: list[FloatArray] = [np.zeros(0, np.float64)]
        self._universe: Universe | None = None
        self._tables: dict[Hashable, _Table] = {}
        self._moved_table = np.zeros((1, 1), np.float64)
        self._moved_at = -1
        self.rescored = 0
        """Rows re-scored from their kept drop (no recomputation); for benchmarks."""
        self.recomputed = 0
        """Rows computed exactly; for benchmarks."""

    def set_target(self, target: TargetWorkload, model_names: list[str]) -> bool:
        """Adopt ``target``; returns whether it differs from the current one (then a new version starts)."""
        old = self._target
        self._target = target
        if old is not None and old.shapes == target.shapes and np.array_equal(old.weight, target.weight):
            return False
        self.version += 1
        if self.bounds:
            grown = False
            for s in target.shapes:
                if s not in self._index:
                    self._index[s] = len(self._shapes)
                    self._shapes.append(s)
                    grown = True
            if grown or self._universe is None:
                shapes = TargetWorkload(tuple(self._shapes), np.ones(len(self._shapes)) / len(self._shapes))
                self._universe = Universe(shapes, shapes.access(model_names), np.zeros(0, np.int64))
            cols = np.array([self._index[s] for s in target.shapes], np.int64)
            self._universe = Universe(self._universe.shapes, self._universe.access, cols)
            w = np.zeros(len(self._shapes), np.float64)
            w[cols] = target.weight
            self._weights.append(w)
        return True

    @property
    def universe(self) -> Universe | None:
        """The shapes exact computations measure (None without bounds)."""
        return self._universe if self.bounds else None

    def lookup(self, key: Hashable, rows: IntArray, generation: IntArray, scorer: Scorer,
               groups: IntArray | None = None) -> tuple[FloatArray, IntArray]:
        """Scores and GPUs of ``rows`` for pod shape ``key``.

        ``groups`` (optional, per node) numbers the nodes' free states (:attr:`NodeMirror.group`): a large batch
        is then computed or re-scored once per distinct state and copied to the other rows of that state.
        """
        t = self._tables.get(key)
        if t is None:
            t = self._tables[key] = _Table.empty(self.n, len(self._shapes) + _GROW, self.bounds)
        fresh = t.stamp[rows] == generation[rows]
        exact = rows[~fresh]
        if self.bounds and scorer.inputs is not None:
            behind = rows[fresh & (t.score_version[rows] != self.version)]
            if behind.size:
                unsure = self._rescore_grouped(t, behind, scorer, groups)
                if unsure.size:
                    exact = np.sort(np.concatenate([exact, unsure]))
        if exact.size:
            reps = _representatives(exact, groups[exact]) if groups is not None and exact.size >= _GROUPED else None
            todo = exact if reps is None else reps[0]
            d = scorer.compute(todo)
            score, gpu = d.scores()
            t.score[todo] = score
            t.gpu[todo] = gpu
            t.score_version[todo] = self.version
            if self.bounds:
                self._keep(t, todo, d, gpu)
            if reps is not None:
                kept = (t.x_version, t.known, t.alt_before, t.alt_after, t.alt_d, t.alt_known, t.zero, t.d)
                _copy_rows(exact, reps[1], t.score, t.gpu, t.score_version, *(kept if self.bounds else ()))
            t.stamp[exact] = generation[exact]
            self.recomputed += int(exact.size)
        return t.score[rows], t.gpu[rows]

    def _rescore_grouped(self, t: _Table, rows: IntArray, scorer: Scorer, groups: IntArray | None) -> IntArray:
        """:meth:`_rescore` once per distinct (free state, version the entry was computed under, measured
        columns) of ``rows``: rows that agree on all three keep the same entry (drop, chosen GPU, bounds), so a
        representative's outcome is theirs. (The state alone would give the same score, but a row computed under
        other weights may have kept another of two equal GPUs, and its entry must stay the one of its own GPU.)"""
        assert scorer.inputs is not None
        reps = None
        if groups is not None and rows.size >= _GROUPED:
            width = len(self._shapes) + 1
            bound = (int(groups.max(initial=0)) + 1) * (self.version + 1) * width * width
            if bound < 2**62:  # one int64 key per row
                key = ((groups[rows] * (self.version + 1) + t.x_version[rows]) * width
                       + t.known[rows]) * width + t.alt_known[rows]
                reps = _representatives(rows, key)
        if reps is None:
            return self._rescore(t, rows, scorer, *scorer.inputs(rows))
        todo, src = reps
        known = t.known[todo].copy()
        unsure = self._rescore(t, todo, scorer, *scorer.inputs(todo))
        if not np.array_equal(known, t.known[todo]):  # _complete measured more columns of the representatives
            _copy_rows(rows, src, t.d, t.known, t.zero)
        _copy_rows(rows, src, t.score, t.score_version)
        flag = np.zeros(self.n, np.bool_)
        flag[unsure] = True
        out: IntArray = rows[flag[src]]
        self.rescored += (rows.size - out.size) - (todo.size - unsure.size)  # count every row, not just one per state
        return out

    # ------------------------------------------------------------------------------------------ bounds
    def _keep(self, t: _Table, rows: IntArray, d: Drops, gpu: IntArray) -> None:
        """Keep what re-scoring ``rows`` under a later target needs."""
        assert d.diff is not None and d.choice_row is not None and d.choice_col is not None
        r_all = np.arange(rows.size)
        if d.sharing:
            best = gpu
            pos = np.full(d.x.shape, -1, np.int64)
            pos[d.choice_row, d.choice_col] = np.arange(d.choice_row.size)
            k = pos[r_all, best]
            assert (k >= 0).all(), "every scored row has a feasible choice"
            db = d.diff[k]
        else:  # one choice per row, in row order
            db = d.diff
        width = db.shape[1]
        t.widen(width)
        t.x_version[rows] = self.version
        fits = np.abs(db).max(axis=1, initial=0) <= _D_MAX
        t.d[rows, :width] = np.where(fits[:, None], db, 0).astype(np.int16)
        t.d[rows, width:] = 0
        t.known[rows] = np.where(fits, width, 0)
        t.alt_known[rows] = width
        t.zero[rows] = fits & (db == 0).all(axis=1) & (not d.sharing)
        if not d.sharing:
            return
        c = d.x.shape[1]
        assert d.choice_left is not None
        left = np.zeros(d.x.shape, np.int64)
        left[d.choice_row, d.choice_col] = d.choice_left
        same = left == left[r_all, best][:, None]  # the same placement for any shape: it needs no bound
        feasible = np.isfinite(d.x)
        idx = np.arange(c)[None, :]
        before = feasible & (idx < best[:, None])
        after = feasible & (idx > best[:, None]) & ~same
        t.alt_before[rows] = np.where(before, d.x, -np.inf).max(axis=1, initial=-np.inf)
        t.alt_after[rows] = np.where(after, d.x, -np.inf).max(axis=1, initial=-np.inf)
        per = np.zeros(d.x.shape, np.float64)
        per[d.choice_row, d.choice_col] = np.abs(d.diff).max(axis=1, initial=0)
        t.alt_d[rows] = np.where(before | after, per, 0.0).max(axis=1, initial=0.0)

    def _complete(self, t: _Table, rows: IntArray, scorer: Scorer) -> None:
        """Measure ``d`` over the universe columns ``rows`` lack (shapes that joined after they were computed)."""
        g_now = len(self._shapes)
        known = t.known[rows].astype(np.int64)
        now = self._weights[self.version]
        tail = np.concatenate([np.cumsum(now[::-1])[::-1], [0.0]])
        todo = (known > 0) & (known < g_now)
        todo[todo] &= tail[known[todo]] > 0  # some shape measured since is in the target now
        if scorer.complete is None or not todo.any():
            return
        assert self._universe is not None
        t.widen(g_now)
        for k in _distinct(known[todo]):
            sel = rows[todo & (known == k)]
            shapes = TargetWorkload(tuple(self._shapes[k:]), np.ones(g_now - k) / (g_now - k))
            diff = scorer.complete(sel, t.gpu[sel], shapes, self._universe.access[k:])
            fits = np.abs(diff).max(axis=1, initial=0) <= _D_MAX
            t.d[sel, k:g_now] = np.where(fits[:, None], diff, 0).astype(np.int16)
            t.known[sel] = np.where(fits, g_now, 0)
            t.zero[sel] &= fits & (diff == 0).all(axis=1)

    def _moved(self) -> FloatArray:
        """``[version, k]``: sum over the first k universe columns of ``|w' - w_version|`` (w' = now)."""
        if self._moved_at != self.version:
            now = self._weights[self.version]
            table = np.zeros((len(self._weights), now.size + 1), np.float64)
            for v, then in enumerate(self._weights):
                dw = now.copy()
                dw[: then.size] -= then
                table[v, 1:] = np.cumsum(np.abs(dw))
            self._moved_table, self._moved_at = table, self.version
        return self._moved_table

    def _rescore(self, t: _Table, rows: IntArray, scorer: Scorer, gain: FloatArray | None,
                 idle: FloatArray) -> IntArray:
        """Re-score ``rows`` from their kept drop; returns the rows that need an exact computation."""
        self._complete(t, rows, scorer)
        now = self._weights[self.version]
        g_now = now.size
        tail = np.concatenate([np.cumsum(now[::-1])[::-1], [0.0]])  # tail[k] = sum of w' over columns >= k
        known = t.known[rows].astype(np.int64)
        alt_known = np.minimum(t.alt_known[rows].astype(np.int64), g_now)
        # the drop under the new weights: d . w' (the kept drop is d . w of its own version, up to rounding)
        w = min(g_now, t.d.shape[1])
        est = t.d[rows, :w].astype(np.float64) @ now[:w]
        moved = self._moved()[t.x_version[rows], alt_known]  # sum |w' - w| over the columns alt_d covers
        exact0 = t.zero[rows] & (known == g_now)
        eps = tail[np.minimum(known, g_now)] * idle + MARGIN
        y = est if gain is None else est + gain
        lo = np.searchsorted(STEPS, y - eps, side="right")
        sure = (lo == np.searchsorted(STEPS, y + eps, side="right")) & (known > 0) & (y + eps < _REGULAR)
        if exact0.any():  # the drop is exactly the gain: score it as the full computation does
            g0 = gain[exact0] if gain is not None else np.zeros(int(exact0.sum()))
            lo[exact0] = sigmoid_score(0.0 + g0, np.zeros_like(g0))
            sure |= exact0
        alt_eps = moved * t.alt_d[rows] + tail[alt_known] * idle + MARGIN
        for alt, strict in ((t.alt_before[rows], True), (t.alt_after[rows], False)):
            there = np.isfinite(alt)
            if there.any():
                ya = alt + alt_eps if gain is None else alt + alt_eps + gain
                top = np.searchsorted(STEPS, ya, side="right")  # the other GPU scores at most this
                sure &= ~there | ((top < lo) if strict else (top <= lo))
        ok = rows[sure]
        t.score[ok] = lo[sure]
        t.score_version[ok] = self.version
        self.rescored += int(ok.size)
        unsure: IntArray = rows[~sure]
        return unsure


class NodeMirror:
    """The :class:`NodeArrays` of every node of a cluster, refreshed only for the nodes whose generation moved.

    Rows are built exactly as :meth:`NodeArrays.from_snapshot` builds them; ``idle`` is each row's idle GPU milli.
    ``group`` numbers the distinct free states (CPU, memory, GPU model, GPU milli left per slot): rows with the
    same number get the same FGD drops for any pod and target, so a large batch is computed once per group. The
    numbers only hold until the next :meth:`sync` (they are renumbered when too many states have been seen).
    """

    def __init__(self) -> None:
        self.view: NodeArrays | None = None
        self.idle = np.zeros(0, np.int64)
        self.group = np.zeros(0, np.int64)
        self._stamps = RowStamps()
        self._groups: dict[bytes, int] = {}

    def sync(self, snap: Snapshot) -> NodeArrays:
        reset, stale = self._stamps.stale(snap)
        if self.view is None or reset:
            self.view = NodeArrays.from_snapshot(snap)
            self.idle = self.view.gpu_left.sum(axis=1)
            self._stamps.mark(slice(None))
            self._regroup()
            return self.view
        if stale.size:
            part = NodeArrays.rows_of(snap, stale)
            v = self.view
            v.cpu_left[stale] = part.cpu_left
            v.cpu_cap[stale] = part.cpu_cap
            v.mem_left[stale] = part.mem_left
            v.gpu_left[stale] = part.gpu_left
            v.gpu_count[stale] = part.gpu_count
            v.model[stale] = part.model
            self.idle[stale] = part.gpu_left.sum(axis=1)
            self._stamps.mark(stale)
            if len(self._groups) > _REGROUP_AT * max(self.group.size, 1):
                self._regroup()
            else:
                self._assign(stale)
        return self.view

    def _regroup(self) -> None:
        self._groups = {}
        self.group = np.zeros(self.idle.size, np.int64)
        self._assign(np.arange(self.idle.size))

    def _assign(self, rows: IntArray) -> None:
        v = self.view
        assert v is not None
        sig = np.concatenate([v.cpu_left[rows, None], v.mem_left[rows, None], v.model[rows, None],
                              v.gpu_left[rows]], axis=1)
        groups = self._groups
        self.group[rows] = [groups.setdefault(row.tobytes(), len(groups)) for row in sig]
