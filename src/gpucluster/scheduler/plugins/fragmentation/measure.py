"""GPU fragmentation against a target workload (the FGD paper's measure), vectorised over nodes.

A *target workload* is a list of pod shapes ``(cpu milli, GPU milli per GPU, GPU count, allowed models)`` with
weights summing to 1 (the most frequent shapes covering a share of all pods). For one node and one shape, the
node's idle GPU milli counts as fragmented when the shape cannot run there at all (CPU-only shape, wrong model,
too little CPU, too few GPUs with enough left), and otherwise only the idle milli on GPUs that have less left
than the shape needs. A node's fragmentation is the weighted sum over the shapes; the cluster's is the sum over
nodes. It is a scheduling score (FGD), a dashboard metric and a remediation trigger alike.

Everything here works on plain arrays (``cpu_left[B]``, ``gpu_left[B, D]`` with 0 in padding slots,
``model[B]`` ids into a model-name list, -1 for no GPU) so the same code serves the scheduler plugins (built
from a :class:`~gpucluster.model.Snapshot`) and the fast experiment path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from gpucluster.model import Pod, Snapshot

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

MILLI = 1000
Shape = tuple[int, int, int, str]
"""``(cpu milli, GPU milli per GPU, GPU count, "|"-joined allowed models)``."""


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Weighted pod shapes the fragmentation is measured against."""

    shapes: tuple[Shape, ...]
    weight: FloatArray
    """Per shape, its share (sums to 1)."""
    mem: IntArray | None = None
    """Optional host memory (MiB) per shape; when set, a shape also needs that much free memory to fit."""
    cpu: IntArray = field(init=False)
    milli: IntArray = field(init=False)
    num: IntArray = field(init=False)
    gpu_shapes: IntArray = field(init=False)
    """Indices of the shapes that ask for GPU (``milli > 0``)."""
    thresholds: IntArray = field(init=False)
    """The distinct per-GPU milli of those shapes (ascending)."""
    threshold_of: IntArray = field(init=False)
    """Per GPU shape (in ``gpu_shapes`` order), its index into ``thresholds``."""
    threshold_all: IntArray = field(init=False)
    """Per shape, its index into ``thresholds`` (0 for CPU-only shapes, which ``is_gpu`` masks out)."""
    is_gpu: BoolArray = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cpu", np.array([s[0] for s in self.shapes], np.int64))
        object.__setattr__(self, "milli", np.array([s[1] for s in self.shapes], np.int64))
        object.__setattr__(self, "num", np.array([s[2] for s in self.shapes], np.int64))
        gs = np.flatnonzero(self.milli > 0)
        thresholds, inverse = np.unique(self.milli[gs], return_inverse=True)
        object.__setattr__(self, "gpu_shapes", gs)
        object.__setattr__(self, "thresholds", thresholds.astype(np.int64))
        object.__setattr__(self, "threshold_of", inverse.reshape(-1).astype(np.int64))
        every = np.zeros(len(self.shapes), np.int64)
        every[gs] = self.threshold_of
        object.__setattr__(self, "threshold_all", every)
        object.__setattr__(self, "is_gpu", self.milli > 0)

    def access(self, model_names: Sequence[str]) -> BoolArray:
        """``[S, M + 1]``: may shape s run on model m (column M = a node without GPUs)."""
        out = np.ones((len(self.shapes), len(model_names) + 1), np.bool_)
        for k, s in enumerate(self.shapes):
            allowed = [m for m in s[3].split("|") if m]
            if allowed:
                out[k, :-1] = [m in allowed for m in model_names]
                out[k, -1] = False
            elif s[1] > 0:
                out[k, -1] = False
        return out

    def to_json(self) -> list[dict[str, object]]:
        return [
            {"cpu_milli": s[0], "gpu_milli": s[1], "gpu_count": s[2], "gpu_models": s[3], "weight": float(w)}
            for s, w in zip(self.shapes, self.weight, strict=True)
        ]


def build_target_workload(shapes: Iterable[Shape], coverage: float = 0.95) -> TargetWorkload:
    """The most frequent shapes that together cover ``coverage`` of all pods, re-weighted to sum to 1.

    Ties in frequency are ordered by the shape itself, larger first (as the FGD simulator sorts them).
    """
    return target_from_counts(Counter(shapes), coverage)


def target_from_counts(counts: Mapping[Shape, int], coverage: float = 0.95) -> TargetWorkload:
    """:func:`build_target_workload` from shape counts (what an online learner keeps)."""
    if not counts:
        raise ValueError("target workload: no pods to learn shapes from")
    total = float(sum(counts.values()))
    ordered = sorted(counts.items(), key=lambda kv: (kv[1], kv[0]), reverse=True)
    need = coverage * total
    cum = 0.0
    chosen: list[tuple[Shape, float]] = []
    for shape, n in ordered:
        if cum >= need:
            break
        chosen.append((shape, float(n)))
        cum += n
    w = np.array([n / total for _, n in chosen], np.float64)
    if len(chosen) < len(ordered):
        w = w / (cum / total)
    return TargetWorkload(tuple(s for s, _ in chosen), w)


@dataclass(slots=True)
class NodeArrays:
    """The resource view both the plugins and the fast path score against (rows = nodes)."""

    cpu_left: IntArray
    cpu_cap: IntArray
    mem_left: IntArray
    gpu_left: IntArray
    """[N, D] idle GPU milli; 0 in padding slots and on unusable devices."""
    gpu_count: IntArray
    model: IntArray
    """GPU model id per node (into ``model_names``); -1 for nodes without GPUs."""
    model_names: Sequence[str]

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> NodeArrays:
        return cls.rows_of(snap, slice(None))

    @classmethod
    def rows_of(cls, snap: Snapshot, rows: IntArray | slice) -> NodeArrays:
        """The view of only ``rows`` of ``snap`` (row k of the result is node ``rows[k]``)."""
        left = np.where(snap.dev_live[rows], snap.dev_core_free[rows], 0).astype(np.int64)
        n, d = left.shape
        model = np.array(snap.dev_model[rows, 0], np.int64) if d else np.full(n, -1, np.int64)
        return cls(
            cpu_left=np.array(snap.cpu_free[rows], np.int64),
            cpu_cap=np.array(snap.cpu_cap[rows], np.int64),
            mem_left=np.array(snap.mem_free[rows], np.int64), gpu_left=left,
            gpu_count=np.array(snap.dev_count[rows], np.int64), model=model, model_names=list(snap.models),
        )


def fragment_amounts(cpu_left: IntArray, gpu_left: IntArray, model: IntArray, target: TargetWorkload,
                     access: BoolArray, mem_left: IntArray | None = None) -> FloatArray:
    """``[B, S]``: per node state and target shape, the GPU milli fragmented for that shape (whole numbers).

    :func:`fragmentation` is these amounts weighted by the target's shares. The GPUs are compared once per
    distinct per-GPU milli of the target (shapes that differ only in CPU or count share the comparison).
    """
    total = gpu_left.sum(axis=1)
    count, below = _threshold_stats(gpu_left, total, target)
    return _amounts(total, count, below, cpu_left, model, target, access, mem_left)


def _threshold_stats(gpu_left: IntArray, total: IntArray, target: TargetWorkload) -> tuple[IntArray, IntArray]:
    """Per row and target threshold u: how many GPUs have at least u milli left, and the milli on the others."""
    u = target.thresholds
    ge = gpu_left[:, None, :] >= u[None, :, None]  # [B, U, D]
    count = ge.sum(axis=2)
    below = total[:, None] - np.where(ge, gpu_left[:, None, :], 0).sum(axis=2)
    return count, below


def _amounts(total: IntArray, count: IntArray, below: IntArray, cpu_left: IntArray, model: IntArray,
             target: TargetWorkload, access: BoolArray, mem_left: IntArray | None) -> FloatArray:
    b = total.shape[0]
    amount = np.empty((b, len(target.shapes)), np.float64)
    amount[:] = total[:, None]
    if target.gpu_shapes.size and b:
        # every shape at once; a CPU-only shape never fits (``is_gpu``): all of the idle milli counts for it
        inv = target.threshold_all
        ok = count[:, inv] >= target.num
        ok &= cpu_left[:, None] >= target.cpu
        ok &= access.T[model]
        ok &= target.is_gpu
        if mem_left is not None and target.mem is not None:
            ok &= mem_left[:, None] >= target.mem
        np.copyto(amount, below[:, inv], where=ok)
    return amount


def _shared_amounts(cpu_after: IntArray, gpu_left: IntArray, total: IntArray, count: IntArray, below: IntArray,
                    rows: IntArray, gpus: IntArray, milli: int, model: IntArray, target: TargetWorkload,
                    access: BoolArray, mem_after: IntArray | None) -> FloatArray:
    """The amounts after a sharing pod takes ``milli`` of GPU ``gpus[k]`` on row ``rows[k]`` (one row each),
    from the rows' threshold statistics: only that GPU changes, so only its side of each threshold can."""
    v = gpu_left[rows, gpus][:, None]
    u = target.thresholds[None, :]
    cross = (v >= u) & (v - milli < u)  # the GPU drops below u
    under = v < u  # it was below u already and loses milli there
    count_a = count[rows] - cross
    below_a = below[rows] - milli * under + (v - milli) * cross
    return _amounts(total[rows] - milli, count_a, below_a, cpu_after[rows], model[rows], target, access,
                    mem_after[rows] if mem_after is not None else None)


def fragmentation(cpu_left: IntArray, gpu_left: IntArray, model: IntArray, target: TargetWorkload,
                  access: BoolArray, mem_left: IntArray | None = None) -> FloatArray:
    """Fragmented GPU milli of each node state (rows of ``cpu_left``/``gpu_left``/``model``).

    With ``mem_left`` and a target that carries memory, a shape also needs its memory to fit.
    """
    if cpu_left.shape[0] == 0:
        return np.zeros(0, np.float64)
    return _weighted(fragment_amounts(cpu_left, gpu_left, model, target, access, mem_left), target)


def _weighted(amount: FloatArray, target: TargetWorkload) -> FloatArray:
    if amount.shape[0] == 0:
        return np.zeros(0, np.float64)
    return np.asarray(amount @ target.weight, np.float64)


def node_fragmentation(snap: Snapshot, target: TargetWorkload) -> FloatArray:
    """Per node of ``snap``, the fragmented GPU milli for ``target`` (a dashboard / remediation metric)."""
    view = NodeArrays.from_snapshot(snap)
    return fragmentation(view.cpu_left, view.gpu_left, view.model, target, target.access(view.model_names))


@dataclass(frozen=True, slots=True)
class Stranding:
    """The two ways a placement loses GPU capacity that the fragmentation measure does not see.

    * **CPU stranding.** The target's GPU pods ask on average ``cpu_per_milli`` host CPU milli per GPU milli. A
      node whose free CPU cannot feed its idle GPUs at that rate strands the difference:
      ``max(0, idle GPU milli - free CPU / cpu_per_milli)``. FGD's measure only notices when the CPU falls below
      a single shape's request; this one sees a node drift towards it, GPU by GPU.
    * **Model scarcity.** ``scarcity[m]`` (0..1) is the share of model ``m``'s GPUs that model-constrained
      target shapes will want (:func:`model_scarcity`); a pod that may run on any model and takes a GPU there
      takes it from them. Index -1 (nodes without GPUs) is 0.

    Both are in GPU milli, like fragmentation, so they add to FGD's drop before its sigmoid; ``cpu_weight`` and
    ``scarcity_weight`` scale them (0 and 0 = plain FGD).
    """

    cpu_per_milli: float
    scarcity: FloatArray
    cpu_weight: float = 1.0
    scarcity_weight: float = 1.0

    def stranded(self, cpu_left: IntArray, gpu_idle: IntArray) -> FloatArray:
        """GPU milli each node cannot feed with its free CPU at the target's rate."""
        if self.cpu_per_milli <= 0:
            return np.zeros(gpu_idle.shape, np.float64)
        return np.maximum(0.0, gpu_idle - np.maximum(cpu_left, 0) / self.cpu_per_milli)

    def gain(self, cpu_left: IntArray, gpu_idle: IntArray, model: IntArray, cpu: int, gpu_milli: int,
             any_model: bool) -> FloatArray:
        """What placing a pod (``cpu`` milli, ``gpu_milli`` in all) adds to FGD's drop on each node: the CPU
        stranding it removes, less the scarce-model GPU milli it takes when it could run on ``any_model``."""
        freed = self.stranded(cpu_left, gpu_idle) - self.stranded(cpu_left - cpu, gpu_idle - gpu_milli)
        out = self.cpu_weight * freed
        if any_model and gpu_milli > 0 and self.scarcity_weight and self.scarcity.size:
            out = out - self.scarcity_weight * self.scarcity[model] * float(gpu_milli)
        return out


def cpu_per_gpu_milli(target: TargetWorkload) -> float:
    """Mean host CPU milli the target's GPU shapes ask per GPU milli (weighted like the target)."""
    gpu = target.milli * target.num
    sel = gpu > 0
    den = float((target.weight[sel] * gpu[sel]).sum())
    return float((target.weight[sel] * target.cpu[sel]).sum()) / den if den > 0 else 0.0


def model_capacity(view: NodeArrays) -> FloatArray:
    """GPUs per model id (``[M]``) of the cluster in ``view``."""
    has = view.model >= 0
    return np.bincount(view.model[has], weights=view.gpu_count[has].astype(np.float64),
                       minlength=len(view.model_names)).astype(np.float64)


def model_scarcity(target: TargetWorkload, model_names: Sequence[str], capacity: FloatArray) -> FloatArray:
    """``[M + 1]``: per model, the share of its GPUs that the target's model-constrained shapes will want.

    Each constrained shape's GPU demand is spread evenly over its allowed models; a model's share is that
    demand as a fraction of the target's whole GPU demand, scaled by the model's fraction of the cluster's GPUs
    and capped at 1 (a model that constrained shapes would fill entirely at a load matching the cluster scores
    1). It applies to pods that may run on any model: those are the ones that can go elsewhere. (Charging
    constrained pods for models still narrower shapes want measured worse: ``docs/placement-policy.md``.)
    """
    m = len(model_names)
    out = np.zeros(m + 1, np.float64)
    index = {name: i for i, name in enumerate(model_names)}
    gpu = target.milli * target.num * target.weight
    total = float(gpu.sum())
    if total <= 0 or m == 0:
        return out
    demand = np.zeros(m, np.float64)
    for k, shape in enumerate(target.shapes):
        models = {x for x in shape[3].split("|") if x in index}
        if not models or gpu[k] <= 0:
            continue
        for x in models:
            demand[index[x]] += gpu[k] / len(models)
    cap = capacity.sum()
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(capacity > 0, demand / total * cap / capacity, 0.0)
    out[:m] = np.minimum(share, 1.0)
    return out


def sigmoid_score(before: FloatArray, after: FloatArray) -> IntArray:
    """FGD's 0..100 integer score: ``int(sigmoid((before - after) / 1000) * 100)``."""
    x = (before - after) / 1000.0
    return np.trunc(1.0 / (1.0 + np.exp(-x)) * 100.0).astype(np.int64)


def _sigmoid_of(drop: FloatArray) -> FloatArray:
    with np.errstate(over="ignore"):
        return sigmoid_score(drop, np.zeros_like(drop)).astype(np.float64)


@dataclass(frozen=True, slots=True)
class Drops:
    """What placing one pod shape does on each node of a batch, before it is turned into a score.

    ``x[r, c]`` is the fragmentation drop (before - after, against the target's weights) on row r for choice c:
    for a sharing pod, c is the GPU it would share (``-inf`` where that GPU cannot hold it); otherwise there is
    one choice (the whole idle GPUs in index order, ``gpu``). ``gain`` is the stranding term added to it
    (:class:`Stranding`).

    With a ``universe`` of shapes (:func:`fgd_drops`), ``diff[k]`` is, for the k-th feasible choice (row
    ``choice_row[k]``, choice ``choice_col[k]``, row-major order), the change of each universe shape's
    fragmented amount (before - after): whole numbers that do not depend on the weights, so that ``x`` under
    other weights is ``diff @ weights``.
    """

    x: FloatArray
    gain: FloatArray | None
    gpu: IntArray
    sharing: bool
    diff: FloatArray | None = None
    choice_row: IntArray | None = None
    choice_col: IntArray | None = None
    choice_left: IntArray | None = None
    """GPU milli left on each feasible choice's GPU (sharing pods): choices with equal values are the same
    placement for every shape."""

    def drop(self) -> FloatArray:
        """``[R, C]``: the whole drop (``x`` plus the stranding gain)."""
        return self.x if self.gain is None else self.x + self.gain[:, None]

    def scores(self, continuous: bool = False) -> tuple[FloatArray, IntArray]:
        """Per row, the best choice's score and its GPU (the first on ties)."""
        drop = self.drop()
        if not self.sharing:
            col = drop[:, 0]
            return (np.asarray(col, np.float64) if continuous else _sigmoid_of(col)), self.gpu
        with np.errstate(invalid="ignore"):
            score = np.where(np.isfinite(self.x), drop if continuous else _sigmoid_of(drop), -np.inf)
        best = np.argmax(score, axis=1)
        return np.asarray(score[np.arange(score.shape[0]), best], np.float64), best.astype(np.int64)


@dataclass(frozen=True, slots=True)
class Universe:
    """Shapes to measure amounts for beyond a target (a superset of it, in a fixed order), see :class:`Drops`."""

    shapes: TargetWorkload
    """The universe's shapes (weights unused)."""
    access: BoolArray
    columns: IntArray
    """Per target shape, its column in the universe."""


def fgd_drops(view: NodeArrays, rows: IntArray, cpu: int, milli: int, num: int, target: TargetWorkload,
              access: BoolArray, *, mem: int = 0, stranding: Stranding | None = None, any_model: bool = True,
              universe: Universe | None = None) -> Drops:
    """The :class:`Drops` of placing a pod on each node in ``rows`` (see :func:`fgd_scores`)."""
    cl, gl, md = view.cpu_left[rows], view.gpu_left[rows], view.model[rows]
    shapes, acc = (target, access) if universe is None else (universe.shapes, universe.access)
    ml = view.mem_left[rows] if shapes.mem is not None else None

    def weighted(amount: FloatArray) -> FloatArray:
        return _weighted(amount if universe is None else amount[:, universe.columns], target)

    b, d = gl.shape
    total = gl.sum(axis=1)
    count, below = _threshold_stats(gl, total, shapes)
    amount_b = _amounts(total, count, below, cl, md, shapes, acc, ml)
    before = weighted(amount_b)
    gain: FloatArray | None = None
    if stranding is not None:
        gain = stranding.gain(cl, total, md, cpu, milli * num, any_model)
    if num == 1 and 0 < milli < MILLI:
        can = gl >= milli  # [B, D]
        r, j = np.nonzero(can)  # row-major: the order of the flattened [B * D] choices
        amount_a = _shared_amounts(cl - cpu, gl, total, count, below, r, j, milli, md, shapes, acc,
                                   ml - mem if ml is not None else None)
        after = np.full(b * d, np.inf)
        after[can.reshape(-1)] = weighted(amount_a)
        x = (np.repeat(before, d) - after).reshape(b, d)
        diff = amount_b[r] - amount_a if universe is not None else None
        return Drops(x, gain, np.zeros(b, np.int64), True, diff, r.astype(np.int64), j.astype(np.int64), gl[r, j])
    new, gpu = _take_whole(gl, num)
    amount_a = fragment_amounts(cl - cpu, new, md, shapes, acc, ml - mem if ml is not None else None)
    x = (before - weighted(amount_a))[:, None]
    if universe is None:
        return Drops(x, gain, gpu, False)
    return Drops(x, gain, gpu, False, amount_b - amount_a, np.arange(b, dtype=np.int64), np.zeros(b, np.int64))


def _take_whole(gpu_left: IntArray, num: int) -> tuple[IntArray, IntArray]:
    """GPUs left after a pod takes ``num`` whole idle GPUs in index order, and the first one it takes."""
    new = gpu_left.copy()
    gpu = np.full(gpu_left.shape[0], -1, np.int64)
    if num > 0:
        free = gpu_left >= MILLI
        rank = np.cumsum(free, axis=1)
        take = free & (rank <= num)
        new[take] = 0
        gpu = np.argmax(free, axis=1).astype(np.int64)
    return new, gpu


def placement_diff(view: NodeArrays, rows: IntArray, gpus: IntArray, cpu: int, milli: int, num: int,
                   shapes: TargetWorkload, access: BoolArray, *, mem: int = 0) -> FloatArray:
    """``[R, S]``: per row, how much placing the pod there (a sharing pod on GPU ``gpus[k]``) lowers each of
    ``shapes``' fragmented amount (the ``diff`` of :class:`Drops`, for one chosen placement per row)."""
    cl, gl, md = view.cpu_left[rows], view.gpu_left[rows], view.model[rows]
    ml = view.mem_left[rows] if shapes.mem is not None else None
    total = gl.sum(axis=1)
    count, below = _threshold_stats(gl, total, shapes)
    amount_b = _amounts(total, count, below, cl, md, shapes, access, ml)
    ml_after = ml - mem if ml is not None else None
    if num == 1 and 0 < milli < MILLI:
        amount_a = _shared_amounts(cl - cpu, gl, total, count, below, np.arange(rows.size), gpus, milli, md,
                                   shapes, access, ml_after)
    else:
        amount_a = fragment_amounts(cl - cpu, _take_whole(gl, num)[0], md, shapes, access, ml_after)
    return amount_b - amount_a


def fgd_scores(view: NodeArrays, rows: IntArray, cpu: int, milli: int, num: int, target: TargetWorkload,
               access: BoolArray, *, mem: int = 0, continuous: bool = False,
               stranding: Stranding | None = None, any_model: bool = True) -> tuple[FloatArray, IntArray]:
    """FGD score of placing a pod on each node in ``rows``, and the GPU it would take there.

    A sharing pod (one GPU, less than 1000 milli) tries every GPU with enough left and keeps the best (the
    first on ties); other pods take whole idle GPUs in index order (GPU -1 for CPU-only pods). The score is
    FGD's ``int(sigmoid(drop / 1000) * 100)`` of the fragmentation drop, or with ``continuous`` the drop itself
    (float milli; no truncation ties). Memory counts when the target carries memory per shape.

    With ``stranding`` the drop also counts the GPU milli the placement strands by CPU and, for a pod that may
    run on ``any_model``, the scarce-model GPU milli it takes (see :class:`Stranding`).
    """
    return fgd_drops(view, rows, cpu, milli, num, target, access, mem=mem, stranding=stranding,
                     any_model=any_model).scores(continuous)


class ShapeCache:
    """Per pod shape, per node: a cached (score, GPU) valid while the node's generation is unchanged.

    Only nodes whose generation moved since the shape was last scored are recomputed.
    """

    def __init__(self, n_nodes: int) -> None:
        self.n = n_nodes
        self._entries: dict[object, tuple[FloatArray, IntArray, IntArray]] = {}

    def lookup(self, key: object, rows: IntArray, generation: IntArray,
               compute: object) -> tuple[FloatArray, IntArray]:
        entry = self._entries.get(key)
        if entry is None:
            entry = (np.zeros(self.n, np.float64), np.zeros(self.n, np.int64), np.full(self.n, -1, np.int64))
            self._entries[key] = entry
        score, gpu, stamp = entry
        stale = rows[stamp[rows] != generation[rows]]
        if stale.size:
            assert callable(compute)
            s, g = compute(stale)
            score[stale] = s
            gpu[stale] = g
            stamp[stale] = generation[stale]
        return score[rows], gpu[rows]

    def resize(self, n_nodes: int) -> None:
        if n_nodes != self.n:
            self.n = n_nodes
            self._entries.clear()


DEFAULT_CPU_REQUEST_MILLI = 100
"""kube-scheduler's non-zero CPU request for pods that ask for none (used only when scoring)."""


def pod_shape(pod: Pod) -> Shape:
    """A model pod's shape ``(cpu, GPU milli per GPU, GPU count, models)``; the first device request counts."""
    cpu = pod.cpu_milli or DEFAULT_CPU_REQUEST_MILLI
    reqs = pod.device_requests
    if not reqs:
        return (cpu, 0, 0, "")
    r = reqs[0][1]
    return (cpu, min(r.core_milli, MILLI), r.count, "|".join(pod.constraints.use_types))
