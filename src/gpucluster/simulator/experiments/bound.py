"""An upper bound on the GPU allocation *any* placement can reach for a set of arrived pods on a set of nodes.

The FGD experiment's metric is the GPU milli allocated once every arrived pod was tried. Whatever the policy and
the order, what it allocates is the GPU milli of some subset of the pods that it packed onto the nodes with
every node's CPU, memory and GPU count respected and every GPU holding at most 1000 milli. The largest such
allocation is a multi-dimensional bin-packing optimum (hard); this module bounds it from above with a linear
program, aggregated so that it stays small whatever the number of pods:

* nodes are grouped by *type* ``t`` = (CPU, memory, GPU count, GPU model), ``n_t`` nodes each;
* pods by *shape* ``p`` = (CPU, memory, GPU count, GPU milli, allowed models), ``c_p`` pods each;
* ``x[p, t] >= 0`` = how many pods of shape ``p`` run on nodes of type ``t`` (only where one such node could hold
  one such pod: CPU, memory, GPU count and model);
* maximise ``sum g_p x[p, t]`` (``g_p`` = the shape's GPU milli) subject to
  (1) ``sum_t x[p, t] <= c_p`` (a pod runs at most once);
  (2) per type, CPU and memory: ``sum_p cpu_p x[p, t] <= n_t CPU_t`` and the same for memory;
  (3) per type and per *dual-feasible function* ``f`` in a family ``F``:
  ``sum_p k_p f(m_p) x[p, t] <= 1000 n_t G_t`` (``k_p`` GPUs of ``m_p`` milli each).

Why it is a bound: take any feasible placement and let ``x[p, t]`` count its pods. (1) and (2) hold because they
are sums of per-pod and per-node limits. For (3): a function ``f`` on [0, 1000] is dual-feasible (Fekete and
Schepers, 2001) when ``sum m_i <= 1000`` implies ``sum f(m_i) <= 1000``; every GPU holds items (a pod's share of
that GPU) with milli summing to at most 1000, so the ``f``-values on it sum to at most 1000, and over the ``n_t
G_t`` GPUs of the type to at most ``1000 n_t G_t``. So every placement is a feasible point of the LP and its
allocation is at most the LP optimum. The LP is solved by HiGHS (``scipy.optimize.linprog``); with
``integral=True`` ``x`` is integer (``scipy.optimize.milp``), which is still a relaxation of every placement
(each of its ``x`` is integer) and tighter; HiGHS's dual bound is reported when the time limit stops it first.

``F`` (all with integer milli): the identity (GPU milli capacity); Fekete-Schepers' threshold family
``u_e(m) = 1000 if m > 1000 - e, m if e <= m <= 1000 - e, 0 if m < e`` for ``e`` in 1..500 (an item that takes
more than ``1000 - e`` leaves room only for items under ``e``: the 810-milli pods' 190-milli remainders); and
``v_k(m) = m if (k + 1) m is a multiple of 1000, else 1000 floor((k + 1) m / 1000) / k`` for k = 1..10 (items of
a size that only k fit per GPU: 470 + 470 leave 60).

What it does not see (why the bound is not the optimum): CPU and memory are pooled over the nodes of a type
(a CPU-stranded node's idle GPUs are counted as usable by CPU from another node), ``x`` may be fractional, a
multi-GPU pod's GPUs are not forced onto one node, and the DFF family is finite.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

MILLI = 1000

NodeType = tuple[int, int, int, str]
PodShape = tuple[int, int, int, int, tuple[str, ...]]


class _BoundFigures:
    """What a bound says in the units of the FGD table (both bounds' results carry ``bound_milli`` and
    ``capacity_milli``)."""

    __slots__ = ()
    bound_milli: float
    capacity_milli: int

    @property
    def allocation_pct(self) -> float:
        return 100.0 * self.bound_milli / self.capacity_milli if self.capacity_milli else 0.0

    @property
    def idle_gpus(self) -> float:
        return (self.capacity_milli - self.bound_milli) / MILLI


class _SparseRows:
    """The ``A_ub x <= b_ub`` rows of an LP, built row by row in coordinate form (zeros left out)."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.rhs: list[float] = []

    def add(self, entries: list[tuple[int, float]], limit: float) -> None:
        r = len(self.rhs)
        for c, v in entries:
            if v:
                self.rows.append(r)
                self.cols.append(c)
                self.vals.append(v)
        self.rhs.append(limit)

def threshold_dff(e: int) -> Callable[[int], float]:
    """Fekete-Schepers' ``u_e`` on integer milli (``1 <= e <= 500``)."""

    def f(m: int) -> float:
        return float(MILLI if m > MILLI - e else (m if m >= e else 0))

    return f


def floor_dff(k: int) -> Callable[[int], float]:
    """``v_k``: ``m`` when ``(k + 1) m`` is a multiple of 1000, else ``1000 floor((k + 1) m / 1000) / k``."""

    def f(m: int) -> float:
        if ((k + 1) * m) % MILLI == 0:
            return float(m)
        return MILLI * (((k + 1) * m) // MILLI) / k

    return f


def dff_family(sizes: Sequence[int]) -> list[Callable[[int], float]]:
    """Identity, ``u_e`` for every threshold that separates two item sizes (``e`` = a size <= 500, or 1001 - a
    size for sizes >= 500), and ``v_1..v_10``."""
    fam: list[Callable[[int], float]] = [float]
    es = sorted({s for s in sizes if 1 <= s <= MILLI // 2} | {MILLI + 1 - s for s in sizes if s >= MILLI // 2})
    fam += [threshold_dff(e) for e in es if 1 <= e <= MILLI // 2]
    fam += [floor_dff(k) for k in range(1, 11)]
    return fam


@dataclass(frozen=True, slots=True)
class Bound(_BoundFigures):
    bound_milli: float
    """Upper bound on the allocated GPU milli."""
    capacity_milli: int
    arrived_milli: int
    node_types: int
    pod_shapes: int
    variables: int
    constraints: int
    exact: bool
    """True when the solver proved its value optimal for the (relaxed) program; False: its dual bound."""


def _fits(p: PodShape, t: NodeType) -> bool:
    cpu, mem, k, _m, spec = p
    tc, tm, g, model = t
    if cpu > tc or mem > tm:
        return False
    if k == 0:
        return True
    return g >= k and (not spec or model in spec)


def covers(big: PodShape, small: PodShape) -> bool:
    """Whether every node state that can hold a pod of shape ``big`` can also hold one of shape ``small`` (the
    fast path's fit test: CPU, memory, and for a GPU pod ``k`` GPUs of an allowed model with ``m`` milli free
    each; a CPU-only pod ignores GPUs and models)."""
    bc, bmem, bk, bm, bspec = big
    sc, smem, sk, sm, sspec = small
    if sc > bc or smem > bmem:
        return False
    if sk == 0:
        return True
    if bk < sk or bm < sm:
        return False
    return not sspec or (bool(bspec) and set(bspec) <= set(sspec))


def _pseudo_pod(members: Sequence[PodShape]) -> PodShape:
    """The shape that stands for a segment's key pods at their first failure: the most CPU, memory, GPUs and milli
    any of them asks for, and the models all of their GPU pods allow (``("",)`` when none is allowed by all: then
    nothing covers it through models). Every pod that covers it covers each of them."""
    gpu_members = [p for p in members if p[2] > 0]
    c_q, mem_q = max(p[0] for p in members), max(p[1] for p in members)
    k_q = max((p[2] for p in gpu_members), default=0)
    m_q = max((p[3] for p in gpu_members), default=0)
    allowed: set[str] | None = None
    for p in gpu_members:
        if p[4]:
            allowed = set(p[4]) if allowed is None else allowed & set(p[4])
    if allowed is not None and not allowed:
        return (c_q, mem_q, k_q, m_q, ("",))
    return (c_q, mem_q, k_q, m_q, tuple(sorted(allowed)) if allowed is not None else ())


def allocation_bound(nodes: Sequence[OpenbNode], pods: Sequence[OpenbPod], *, integral: bool = False,
                     time_limit: float = 60.0) -> Bound:
    """The LP (or integer) bound of the module docstring for ``pods`` on ``nodes``."""
    from scipy.optimize import Bounds, LinearConstraint, linprog, milp
    from scipy.sparse import coo_array

    types = Counter((n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes)
    shapes = Counter((p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli if p.num_gpu else 0, tuple(p.gpu_spec))
                     for p in pods)
    tlist, plist = list(types), list(shapes)
    pairs = [(i, j) for i, p in enumerate(plist) for j, t in enumerate(tlist) if _fits(p, t)]
    nv = len(pairs)
    sizes = sorted({p[3] for p in plist if p[2] > 0})
    family = dff_family(sizes)
    lp = _SparseRows()
    rows, cols, vals, rhs, add_row = lp.rows, lp.cols, lp.vals, lp.rhs, lp.add

    by_shape: dict[int, list[int]] = {}
    by_type: dict[int, list[int]] = {}
    for v, (i, j) in enumerate(pairs):
        by_shape.setdefault(i, []).append(v)
        by_type.setdefault(j, []).append(v)
    for i, vs in by_shape.items():
        add_row([(v, 1.0) for v in vs], float(shapes[plist[i]]))
    for j, vs in by_type.items():
        t, n = tlist[j], types[tlist[j]]
        add_row([(v, float(plist[pairs[v][0]][0])) for v in vs], float(n * t[0]))
        add_row([(v, float(plist[pairs[v][0]][1])) for v in vs], float(n * t[1]))
        gpu_vs = [v for v in vs if plist[pairs[v][0]][2] > 0]
        if not gpu_vs:
            continue
        for f in family:
            add_row([(v, plist[pairs[v][0]][2] * f(plist[pairs[v][0]][3])) for v in gpu_vs],
                    float(MILLI * n * t[2]))
    a = coo_array((vals, (rows, cols)), shape=(len(rhs), nv)).tocsr()
    gain = np.array([plist[i][2] * plist[i][3] for i, _ in pairs], np.float64)
    b = np.asarray(rhs, np.float64)
    capacity = sum(n.gpus for n in nodes) * MILLI
    arrived = sum(p.total_gpu_milli for p in pods)
    if nv == 0:
        return Bound(0.0, capacity, arrived, len(tlist), len(plist), 0, len(rhs), True)
    if integral:
        res = milp(-gain, constraints=LinearConstraint(a, -np.inf, b), integrality=np.ones(nv),
                   bounds=Bounds(0, np.inf), options={"time_limit": time_limit, "disp": False})
        # the dual bound, not the incumbent: HiGHS stops at a relative gap (1e-4) or the time limit
        exact = bool(res.status == 0)
        dual = getattr(res, "mip_dual_bound", None)
        if dual is None or not np.isfinite(dual):  # no dual bound from the MIP: the LP's
            return allocation_bound(nodes, pods, integral=False)
        value = -float(dual)
    else:
        res = linprog(-gain, A_ub=a, b_ub=b, bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"HiGHS did not solve the bound LP: {res.message}")
        value, exact = -float(res.fun), True
    return Bound(min(value, float(capacity), float(arrived)), capacity, arrived, len(tlist), len(plist), nv,
                 len(rhs), exact)


# ---------------------------------------------------------------------------------------------- must-place bound
MUST_PLACE_DOC = """The bound for policies that place every pod that fits (the FGD experiment's rule: a pod fails only
when no node can hold it when it arrives; every policy of the FGD paper and ours obey it).

Any such run either places every pod, or has a *first failed pod* at some index T. Before T every pod was
placed; at T the pod did not fit anywhere. Split the arrival order into segments; for the segment j that holds T:

* pods before the segment are all placed (``xa``, equality per shape);
* the segment's pods (``xb``) and the later pods (``xc``) are optional;
* the final packing (``X = xa + xb + xc``) obeys the per-type CPU, memory, GPU-count and DFF limits, where GPUs
  holding a sharing item at the end (``S_t``) take no whole-GPU item: ``sum_sharing k f(m) X <= 1000 S_t`` for
  every f, ``sum_whole k X + S_t <= n_t G_t``;
* *blocking*: at T the failed pod fitted on no node. The segment's *pseudo-pod* q has the largest CPU, memory,
  GPU count and GPU milli of the segment's key pods and the models all of them allow; a node that cannot hold
  the failed pod cannot hold q. Put each node of a type where q could fit into the first group that applies:
  CPU-blocked (used CPU > C_t - c_q), memory-blocked, or GPU-blocked (at least G_t - k_q + 1 of its GPUs have
  more than 1000 - m_q milli used, so are touched by an item). With ``bc, bm, bg`` the groups' node counts
  (``bc + bm + bg >= n_t``) and ``yc, ym, yg`` the pods of ``xa + xb`` on them (``yc + ym + yg <= xa + xb``:
  pods only arrive, so the pods placed by T are among those placed by the end): each group's pods fit its
  nodes' CPU, memory and GPU milli; ``cpu(yc) >= (C_t - c_q + 1) bc``; ``mem(ym) >= (M_t - mem_q + 1) bm``;
  ``milli(yg) >= (G_t - k_q + 1)(1001 - m_q) bg``; and the touched GPUs ``(G_t - k_q + 1) bg`` are at most the
  GPU items of ``yg``, those touched by sharing items at most ``S_t`` (a GPU that held a sharing item stays a
  sharing GPU: pods only arrive), a sharing item counting ``min(1, m / (1001 - m_q))`` GPUs
  (``BLOCKED_GPUS_DOC``).

Two more rows use the order through *cover*: a shape P covers a shape Q when every node state that can hold a
P pod can hold a Q pod (``covers``: Q asks no more CPU, memory, GPUs or milli, and allows every model P allows).
Pods only arrive, so a node's free CPU, memory and per-GPU milli only fall; hence:

* *covered pods are forced*: let L be the last key pod before the segment (L < T, so it was placed: it fitted
  at L, and at every earlier time). A pod before L whose shape is covered by every key shape fitted when it
  arrived, so it was placed: those pods join ``xa`` (equality). (The key pods before the segment are forced
  for the same reason they always were.)
* *the failed pod stays out*: of the segment's key pods (all optional in ``xb``) at most all but one are placed.
* *covering pods fail after T*: a pod arriving after T whose shape covers the pseudo-pod q (so the failed pod)
  cannot fit: if it fitted on some node, the failed pod would fit there then, so also at T. Their ``xc`` is 0.
  On the Alibaba workloads nearly every whole-GPU pod covers the 810-milli key pod, so the final packing
  cannot be completed with whole-GPU pods after the first key failure.

Every must-place run is a feasible point of the LP of the segment holding its first key failure (or, when no key
pod fails, of the LP where every key pod and every covered pod before the last key pod is placed and no blocking
row applies), so its allocation is at most the largest of those LPs' optima. Dropping the blocking rows and the
covering rows gives an LP (``pre <= X <= total`` and the packing rows) whose optimum can only fall as j grows
(``pre`` only grows: covered pods are those covered by *every* key shape, whatever the key pod at L), so the scan
over segments stops once that relaxed optimum is below the best found.

``must_place_bound`` solves these LPs as ``class_bound``'s with one class (``_OrderLP``, ``CLASSES_DOC``): the
order is cut at the end of the segment into two ranges, ``xa + xb`` is the first (at least the forced pods, at
most the pods there) and ``xc`` the second; the rows are the ones above."""


SCANS_DOC = """Which scan's figure ``must_place_bound`` and ``class_bound`` report: the tightest (issue 30).

With ``config_cuts`` both run their scan over the segments (one class) or the segment pairs (two) up to
``config_passes + 1`` times, adding GPU- and node-packing rows between scans. Every scan's figure bounds every
must-place run on its own: each of its LPs holds every run of its segment (or pair) with rows valid for every run
(``CONFIG_CUTS_DOC``, ``NODE_CUTS_DOC``), and an LP that hits the time limit or that HiGHS gives up on is answered
with a larger valid value (its LP without the failure rows; for a pair, the smaller one-class optimum;
``CLASSES_DOC``). So the smallest figure over the scans is a bound, and it is the one reported, with the index
of its scan (``scan``, 0 the first) and every scan's figure (``scan_milli``). A later scan has more rows, so it is
never looser unless one of its LPs fell back: on ``gpuspec25`` (seed 42, ``--lp-time-limit 30``) a complete scan
gave 164.0 idle GPUs and the last one, whose binding LP hit the limit, 141.8. (Until 2026-12-05 the last scan's
figure was reported, so a fallback in a later scan loosened the result.) ``class_bound``'s one-class figures are
each the smallest over the scans, by the same argument (each scan's largest one-class optimum is
``must_place_bound``'s figure for that class with that scan's rows)."""


BLOCKED_GPUS_DOC = """A GPU-blocked node's GPUs are blocked by their items' milli, not by their number (issue 30).

A GPU is blocked for the pseudo-pod q when more than 1000 - m_q of its milli is used, so at least
``theta = 1001 - m_q`` (milli are integers). ``MUST_PLACE_DOC``'s rows count the blocked GPUs of the GPU-blocked
nodes (``(G_t - k_q + 1) bg <= St + W``) by their items - ``W`` at most the whole-GPU items of ``yg``, ``St``
at most its sharing items and ``S_t`` - and ask ``theta`` milli per blocked GPU of ``yg`` as a whole. Pooled that
way, the surplus of a whole-GPU pod (1000 milli where ``theta`` would do) or of an 810-milli item makes up for
the GPUs whose items sum to less than ``theta``: a GPU holding one 320-milli item could count as blocked for a
470-milli pod (``theta`` = 531), its shortfall paid by a whole-GPU pod's surplus on another GPU.

Row: a sharing item of ``m`` milli counts ``min(1, m / theta)`` GPUs, ``St <= sum_sharing k min(1, m / theta)
yg``. Why it holds for every run: at the failure take, on each GPU-blocked node, ``G_t - k_q + 1`` GPUs with at
least ``theta`` milli used, and let ``St`` be those among them that hold no whole-GPU item (``W`` the others).
Such a GPU holds sharing items whose milli sum to at least ``theta``: if one of them has ``m >= theta`` its
weight is 1, else their weights ``m / theta`` sum to at least 1. Each item is on one GPU (a k-GPU sharing pod is
k items of ``m``), so summing over those GPUs gives ``St`` at most the weights of the sharing items of ``yg``. It
implies the row it replaces (``St`` at most the sharing items: every weight is at most 1) and the milli row
(``theta (St + W)`` is at most the milli of ``yg``), which is kept. The same rows serve every failure: a key
class's (``MUST_PLACE_DOC``, ``CLASSES_DOC``) and a probe's (``EARLIEST_DOC``)."""


@dataclass(frozen=True, slots=True)
class MustPlaceBound(_BoundFigures):
    bound_milli: float
    capacity_milli: int
    arrived_milli: int
    segment: int
    """Segment (of ``segments``) whose LP gave the bound; -1: no pod need fail."""
    segments: int
    lps_solved: int
    scan: int = 0
    """The scan (0: the first, before any refinement; ``SCANS_DOC``) whose figure this is: the tightest."""
    scan_milli: tuple[float, ...] = ()
    """Every scan's bound, in order (each one valid)."""


def must_place_bound(nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], segments: int = 40,
                     key: Callable[[PodShape], bool] | None = None,
                     progress: Callable[[str], None] | None = None, config_cuts: int = 30,
                     config_passes: int = 3, time_limit: float | None = None,
                     node_cuts: bool = False, earliest: int = 0) -> MustPlaceBound:
    """The must-place bound (``MUST_PLACE_DOC``) for ``order`` (the arrival order) on ``nodes``, over the first
    failure among the pods whose shape ``key`` selects (default: all). Only those pods are forced before the
    segment and make the pseudo-pod; the others are optional everywhere. Valid for every ``key``. ``progress``
    is called with a line after every LP. ``config_cuts``: up to that many rounds of ``CONFIG_CUTS_DOC`` on the
    LP that gave the last scan's bound, then the scan again with the rows found, up to ``config_passes`` times
    (0: the family's rows alone); the tightest scan's figure is reported (``SCANS_DOC``). ``time_limit``
    (seconds per solver try) turns a segment's LP that runs longer into HiGHS trouble, answered with its LP
    without the failure rows (valid, and looser). ``node_cuts``: the refinement adds ``NODE_CUTS_DOC``'s rows
    too (only with ``config_cuts`` > 0). ``earliest``: before the scan, ``EARLIEST_DOC``'s forced prefixes for
    that many shapes (``_OrderLP.earliest_shapes``; 0: none)."""
    key = key or (lambda _p: True)
    lp = _OrderLP(nodes, order, segments, [key])
    lp.node_cuts = node_cuts
    capacity = lp.capacity
    solved = lp.earliest_failures(lp.earliest_shapes(earliest), time_limit, progress) if earliest > 0 else 0

    def solve(j: int | None, blocking: bool) -> float | None:
        try:
            return lp.solve({0: j}, failure_rows=blocking, time_limit=time_limit if blocking else None)
        except _LPTroubleError as exc:
            if blocking:  # HiGHS gave up on the failure rows: the relaxed optimum still bounds this segment
                return solve(j, blocking=False)
            raise RuntimeError(f"HiGHS: segment {j}: {exc}") from None

    def say(what: str, v: float | None) -> None:
        if progress is not None:
            progress(f"LP {solved}: {what}: " + (f"{(capacity - v) / MILLI:.1f} idle GPUs" if v is not None
                                                 else "no run"))

    def scan() -> tuple[float, int]:
        nonlocal solved
        best, where = -1.0, -2
        for j in range(segments):
            relaxed = solve(j, blocking=False)
            solved += 1
            say(f"segment {j} relaxed", relaxed)
            if relaxed is None:
                continue
            if relaxed <= best:
                break  # every later segment's LP, and the no-failure one, is at most this relaxed optimum
            got = solve(j, blocking=True)
            solved += 1
            say(f"segment {j}", got)
            if got is not None and got > best:
                best, where = got, j
        else:  # no break: the runs where no key pod fails (all placed, the rest optional)
            none = solve(None, blocking=False)
            solved += 1
            if none is not None and none > best:
                best, where = none, -1
        return best, where

    scans = [scan()]
    for _ in range(config_passes if config_cuts > 0 else 0):
        where = scans[-1][1]
        if where == -2 or not lp.refine({0: where if where >= 0 else None}, config_cuts, time_limit=time_limit):
            break
        if progress is not None:
            progress(f"scan {len(scans) - 1}: {(capacity - scans[-1][0]) / MILLI:.1f} idle GPUs; "
                     f"{len(lp.knapsack.functions)} GPU-packing rows, {len(lp.nodepack.rows)} node-packing rows; "
                     "the scan again")
        scans.append(scan())
    figures = tuple(min(b, float(capacity)) for b, _ in scans)
    k = min(range(len(scans)), key=lambda s: (figures[s], s))  # SCANS_DOC: the tightest scan, the earliest on ties
    return MustPlaceBound(figures[k], capacity, lp.arrived, scans[k][1], segments, solved, k, figures)


# ------------------------------------------------------------------------------------ two key classes (issue 30)
CLASSES_DOC = """The must-place bound over the first failures of *several* key classes at once (``class_bound``).

``must_place_bound`` forces only the key class (the 810-milli pods on ``default``) before its first failure; the
pods of other sharing shapes (the 470- and 650-milli pods ask 8-12 cores, more than the key pod's 3.152) are
optional, and the LP fills their GPUs with whole-GPU pods. A class made of several shapes loosens the bound
(its pseudo-pod grows). Here each class c (disjoint sets of shapes) has its own first failure: every must-place
run has, for each class, a first failed pod T_c in some segment s_c of the arrival order, or none. For one
assignment (one s_c or "none" per class) the LP below holds every run whose first failures fall there, so the
largest optimum over the assignments bounds every run.

Variables: the order is cut at the end e_c of every failing class's segment (and at the end of the order) into
*ranges*; ``x[r, p, t]`` = the pods of shape p from range r on nodes of type t in the final state, with
``S_t`` as in ``must_place_bound``. Rows, and why each holds for every run of the assignment:

* *packing* (over X = sum_r x[r]): per type CPU, memory, the DFF rows with ``S_t`` and
  ``whole + S_t <= n_t G_t`` - the final state is a packing (``MUST_PLACE_DOC``).
* *counts*: per range and shape, ``x[r, p, .] <= pods of p in r`` (a pod runs at most once).
* *forced*: per range and shape, ``x[r, p, .] >= pods of p in r that arrive before P_p``, where P_p is the
  largest over the classes c of: the start of s_c (the end of the order for a class that never fails) when p is
  in class c - every class-c pod before T_c was placed, since T_c is the class's first failure; and L_c when p
  is outside class c and covered by every shape of c, with L_c the last class-c pod before the start of s_c -
  L_c < T_c was placed, so it fitted at L_c and at every earlier time (pods only arrive: free CPU, memory and
  per-GPU milli only fall), and an earlier pod of a shape it covers fitted when it arrived, so it was placed.
  Per shape the forced pods of every class are a prefix of that shape's pods, so their union is the longest one.
* per failing class c, with q_c its segment's pseudo-pod (``MUST_PLACE_DOC``: the largest CPU, memory, GPU count
  and milli of the segment's class-c pods, the models all of them allow, so a node that cannot hold the failed pod
  cannot hold q_c and every shape that covers q_c covers the failed pod):
  - *the failed pod stays out*: the class-c pods of the range ending at e_c (which holds T_c) placed are at most
    their number minus one;
  - *covering pods fail after T_c*: in the ranges after e_c (arrived after T_c) the shapes that cover q_c have
    x = 0: such a pod that fitted somewhere would leave room for the failed pod there, then and so at T_c;
  - *blocking at T_c*: the rows of ``MUST_PLACE_DOC`` with their own variables (blocked-node counts bc, bm, bg,
    the pods y on them, the touched GPUs St <= S_t and W), where the pods placed by T_c are bounded by the
    final pods of the ranges up to e_c (``y_c + y_m + y_g <= sum_{r <= e_c} x[r]``): a pod placed by T_c arrived
    before e_c and stays placed.
  Each class's rows involve only what held at its own failure, so they hold together for a run that has both.

A class that never fails only adds its forced pods. Pruning: the LP of an assignment has every row of the LP
of one class alone at the same segment (aggregate the ranges: the forced prefixes only grow, the
stay-out row on a shorter range implies the one on the longer range, the covering and blocking sums are the
same), so its optimum is at most the smallest of the one-class optima. ``class_bound`` solves the one-class
LPs of every segment of both classes first, then the pairs in decreasing order of their one-class optima, and
stops a row (and the scan) once those optima are no larger than the best pair found. The one-class optima of
class A are exactly ``must_place_bound``'s LPs for A, so the largest of them is the one-class bound, reported
alongside. When HiGHS gives up on an LP (numerical trouble after three solvers) a valid larger value is used:
for one class, its LP without the failure rows; for a pair, the smaller of the two one-class optima."""


EARLIEST_DOC = """Pods that arrive before any pod of their shape can fail are placed (``earliest``; issue 30).

The LPs force a shape's pods only before its own class's failure segment (and the covered pods before the last
key pod); every other pod is optional, however early it arrives. On ``default`` (seed 42) the binding one-class
LP with the GPU-packing rows (segment 31, 198.6 idle GPUs) places none of the 470 GPUs of 470-milli pods, nor the
460- and 550-milli ones, and fills their room with pods that pack better; but a pod that arrives while the
cluster is mostly empty fits somewhere, so every must-place run places it.

Rows: for a shape Q and a pod index k, the *probe* is the LP of ``CLASSES_DOC`` with one class {Q} whose first
failure lies in [0, k): no forced Q pods (none before 0), the blocking rows at that failure T_Q with the pods
placed by T_Q among those that arrived before k (``y <= x`` of the range [0, k)), the failed pod stays out (of
the Q pods before k at most all but one are placed), and the pods after k that cover Q are 0 (they arrive after
T_Q). Every run in which some Q pod fails before k is a feasible point of it (``CLASSES_DOC``), with every other
row of the object that holds for every run (the packing rows, the GPU- and node-packing rows, the prefixes proved
before). So when HiGHS reports the probe infeasible, no run has a Q pod fail before k: in every run every Q pod
before k is placed, and ``x >= the Q pods before k`` holds in every LP of every segment and class assignment
(``_OrderLP.placed_before``, merged into the forced prefixes). The probe for a larger k is a relaxation of the
one for a smaller k (aggregate its ranges), so a bisection finds the longest prefix proved this way: over the
count c of Q pods, each probe asking whether one of the first c fails (k = the index of the c-th Q pod, plus
one; any k is valid, and this one lets the fewest pods block the nodes), each count kept itself proved
infeasible, and a probe HiGHS gives up on counts as feasible. (Until 2026-12-05 21:00 UTC the bisection ran over
the 40 segment cuts: the prefixes ended at a cut, up to a segment earlier.)

*Covered prefixes*: once the first c pods of Q are proved placed in every run, the c-th fitted when it arrived;
free CPU, memory and per-GPU milli only fall, so at every earlier time a Q pod fitted, and so did a pod of any
shape S that Q covers (``covers``). The must-place rule placed every S pod that arrived before the c-th Q pod:
the rows ``x >= the S pods before it`` hold in every LP too (the argument of ``MUST_PLACE_DOC``'s covered pods,
from a proved pod instead of the last key pod). They reach the shapes that are not probed (CPU-only pods and
small sharing pods), and a probe of a covered shape starts from them. The prefixes are
the same in every LP of a scan, so the pruning of ``MUST_PLACE_DOC`` and ``CLASSES_DOC`` holds as before.
What it needs: the blocking rows at T_Q cannot be met by the pods that arrived before k - too few pods have
arrived to take the CPU, memory or GPU milli of every node where Q fits."""


@dataclass(frozen=True, slots=True)
class ClassBound(_BoundFigures):
    bound_milli: float
    capacity_milli: int
    arrived_milli: int
    segment_a: int
    """Segment of class A's first failure in the LP that gave the bound; -1: A never fails."""
    segment_b: int
    segments: int
    lps_solved: int
    pairs_solved: int
    one_class_a_milli: float
    """The one-class bound of class A alone (``must_place_bound`` with key A), from the same LPs (the tightest
    scan's, which may be another scan than the two-class figure's; ``SCANS_DOC``)."""
    one_class_b_milli: float
    scan: int = 0
    """The scan (0: the first; ``SCANS_DOC``) whose two-class figure this is (and whose segments): the tightest."""
    scan_milli: tuple[float, ...] = ()
    """Every scan's two-class bound, in order (each one valid); the one-class figures are each the tightest over
    the scans."""


CONFIG_CUTS_DOC = """GPU-packing rows found from an LP's own optimum (``config_cuts``; issue 30).

The DFF rows (``MUST_PLACE_DOC``) hold for every f of a finite family. Every function that is dual-feasible on
the workload's sharing sizes gives a valid row of the same form, and the family misses some that matter: on
``default`` (seed 42) the optimum of the binding one-class LP (segment 29) puts 885 470-milli, 350.5 320-milli,
126 460-milli and 82.8 650-milli items (its counts are fractional; among others) with 995.4 810-milli ones on
1,760.4 sharing GPUs of the 8-GPU G2 nodes, and no packing of those items into GPUs of 1000 milli takes fewer
than 1,803.9; over all node types 61.3 GPUs are missing.
(No single function of the family charges a 470 half a GPU and a 320 a third at once.)

Rows: for integer weights ``W(m) >= 0`` on the sharing sizes, let ``K`` be the largest ``sum W(m_i)`` over the
multisets of sizes with ``sum m_i <= 1000`` (an unbounded knapsack over integer milli, solved exactly by dynamic
programming over 0..1000). Then ``f(m) = 1000 W(m) / K`` (0 for sizes without a weight) is dual-feasible on
these sizes: the sharing items on one GPU form such a multiset (less the sizes without a weight), so their
f-values sum to at most 1000. So ``sum_sharing k f(m) X <= 1000 S_t`` holds for every placement, as the family's
rows do, whatever the order, the segment or the classes: added to any of the LPs it leaves every run feasible.

Separation: per node type t, with ``n_m`` the GPUs holding a sharing item of m milli in the LP's optimum (``k x``
over shapes and ranges), the configuration LP ``min sum_c z_c`` s.t. ``sum_c a_cm z_c >= n_m`` (c: a multiset of
sizes that fits one GPU, ``a_cm`` its items of size m) is the fewest GPUs that hold those items; its dual optimum
w (column generation, priced by the same knapsack in floats) has ``sum_m w_m n_m`` equal to that number. When it
exceeds ``S_t`` by more than 0.01 GPU, w scaled to integers (``W = floor(2^20 w)``) with its exact ``K`` gives a
row that the optimum violates; it is added for every type, in this LP and every later LP of the same order
(``_OrderLP.refine``: solve, separate, again, until no type's items need more GPUs than ``S_t`` by 0.01, or
``config_cuts`` rounds). ``must_place_bound`` and ``class_bound`` refine the LP that gave the bound, then run
their whole scan again with the rows found (up to ``config_passes`` times, stopping when the binding LP yields
no row): the rows change only between scans, so each scan prunes exactly as before, and every row is valid for
every LP, so every scan's figure bounds every run (the tightest is reported, ``SCANS_DOC``). What is still
relaxed: a type's items are packed per GPU only fractionally (the configuration LP), and CPU and memory stay
pooled per type."""


def _weight_function(weights: dict[int, int], k: int) -> Callable[[int], float]:
    """``f(m) = 1000 W(m) / K`` of ``CONFIG_CUTS_DOC``."""

    def f(m: int) -> float:
        return MILLI * weights.get(m, 0) / k

    return f


class _GpuKnapsack:
    """The rows of ``CONFIG_CUTS_DOC``: dual-feasible functions on the sharing sizes, found by separation."""

    def __init__(self, sizes: Sequence[int]) -> None:
        assert all(isinstance(m, int) and 0 < m < MILLI for m in sizes), "sharing sizes are integer milli"
        self.functions: list[Callable[[int], float]] = []
        self._seen: set[tuple[tuple[int, int], ...]] = set()
        self._configs: set[tuple[tuple[int, int], ...]] = set()  # GPU fillings met so far, (milli, count) pairs

    @staticmethod
    def best_filling(weights: Mapping[int, float]) -> tuple[float, dict[int, int]]:
        """The heaviest multiset of sizes (any number of each) with milli summing to at most 1000, and its weight.
        Exact for integer weights (Python ints add exactly)."""
        items = [(m, w) for m, w in weights.items() if w > 0]
        best: list[float] = [0] * (MILLI + 1)
        last = [0] * (MILLI + 1)  # the size added at this capacity, 0: none (capacity - 1 instead)
        for c in range(1, MILLI + 1):
            b, which = best[c - 1], 0
            for m, w in items:
                if m <= c and best[c - m] + w > b:
                    b, which = best[c - m] + w, m
            best[c], last[c] = b, which
        filling: dict[int, int] = {}
        c = MILLI
        while c > 0:
            if last[c]:
                filling[last[c]] = filling.get(last[c], 0) + 1
                c -= last[c]
            else:
                c -= 1
        return best[MILLI], filling

    def fewest_gpus(self, items: dict[int, float]) -> tuple[float, dict[int, float]]:
        """The configuration LP of ``CONFIG_CUTS_DOC`` for ``items`` (milli -> GPUs): its optimum and the dual
        weights (per milli, a GPU = 1)."""
        from scipy.optimize import linprog

        sizes = sorted(items)
        need = np.array([items[m] for m in sizes])
        cols: set[tuple[tuple[int, int], ...]] = {((m, MILLI // m),) for m in sizes}
        cols |= {tuple((m, k) for m, k in cfg if m in items) for cfg in self._configs}
        cols.discard(())
        cols_l: list[tuple[tuple[int, int], ...]] = list(cols)
        pos = {m: i for i, m in enumerate(sizes)}
        while True:
            a = np.zeros((len(sizes), len(cols_l)))
            for c, cfg in enumerate(cols_l):
                for m, k in cfg:
                    a[pos[m], c] = k
            res = linprog(np.ones(len(cols_l)), A_ub=-a, b_ub=-need, bounds=(0, None), method="highs")
            if res.status != 0:
                raise _LPTroubleError(f"configuration LP: {res.message}")
            w = {m: max(0.0, -float(d)) for m, d in zip(sizes, res.ineqlin.marginals, strict=True)}
            price, filling = self.best_filling(w)
            new = tuple(sorted(filling.items()))
            if price <= 1 + 1e-9 or new in cols:
                return float(res.fun), w
            cols.add(new)
            cols_l.append(new)
            self._configs.add(new)

    def separate(self, items: list[dict[int, float]], sharing_gpus: list[float]) -> bool:
        """Add the rows that the LP optimum with these sharing items (per type) and ``S_t`` violates; whether any
        was added."""
        added = False
        for got, s_t in zip(items, sharing_gpus, strict=True):
            if not got:
                continue
            gpus, w = self.fewest_gpus(got)
            if gpus <= s_t + 0.01:
                continue
            weights = {m: int(v * (1 << 20)) for m, v in w.items() if v > 0}
            k, _ = self.best_filling(weights)  # exact: integer weights
            if k <= 0:
                continue
            if sum(weights.get(m, 0) * n for m, n in got.items()) / k <= s_t + 0.01:
                continue  # lost to the rounding
            key = (*sorted(weights.items()), (0, int(k)))
            if key in self._seen:
                continue
            self._seen.add(key)
            self.functions.append(_weight_function(weights, int(k)))
            added = True
        return added


NODE_CUTS_DOC = """Node-packing rows found from an LP's own optimum (``node_cuts``; issue 30).

The LPs pool CPU and memory over the nodes of a type, and pack each GPU only through the GPU rows: nothing says
that one node's CPU, memory and GPUs hold its pods *together*. On ``default`` the 8-GPU G2 nodes have 96 cores
and 384 GiB, 12 cores and 48 GiB a GPU, while a 470- or 650-milli pod asks 11.9 cores and 46 GiB: two of them
on one GPU take a quarter of the node's memory, so a node that shares its GPUs this way has GPUs left that no
pod's memory fits; pooled, the LP gives that memory to another node.

Rows: for one node type t and integer weights ``W(p) >= 0`` on the pod shapes that fit it, let ``K_t`` be the
largest ``sum W(p)`` over the pods any one node of type t can hold at once: a multiset of shapes whose CPU and
memory fit the node's, whose whole-GPU pods (``k`` GPUs of 1000 milli) take that many of its GPUs and whose
sharing pods fit the other GPUs at most 1000 milli each (a k-GPU sharing pod counts as k items, not necessarily
on k different GPUs, which only lets more fit). It is an integer program, solved by HiGHS; ``K_t`` is its dual
bound rounded to the nearest integer: at least the true maximum, which is an integer, with the solver's
tolerance absorbed by the rounding (a time limit leaves a larger dual bound: a weaker row, never an invalid
one). Then ``sum_p W(p) X[p, t] <= n_t K_t`` holds for every placement: the pods on each node are such a
multiset, so their weights sum to at most ``K_t``, and there are ``n_t`` nodes. Like the GPU-packing rows it
uses nothing of the order, so it holds in every LP of every segment and class assignment, and the scans are as
before (``CONFIG_CUTS_DOC``).

Separation: per type, with ``d_p = X[p, t]`` the LP optimum's pods (summed over the ranges), the configuration
LP ``min sum_c z_c`` s.t. ``sum_c a_cp z_c >= d_p`` (c: what one node holds) is the fewest nodes those pods
need. Column generation prices it with the integer program above (float weights); at every step its dual w
gives ``sum_p w_p d_p / K(w)`` nodes at least (Farley's bound), and when the largest of these exceeds ``n_t`` by
0.01, w scaled to integers (``W = floor(10^4 w)``) with its own ``K_t`` gives a row that the optimum violates.
What is still relaxed: the nodes are packed fractionally (the configuration LP, not integer nodes) and the
column generation may stop before its optimum (a row from an intermediate w is weaker, never invalid)."""


class _NodeKnapsack:
    """The rows of ``NODE_CUTS_DOC``: per node type, weights on the shapes that fit it and the most one node holds."""

    SCALE = 10_000

    def __init__(self, tlist: Sequence[NodeType], plist: Sequence[PodShape], types: Mapping[NodeType, int],
                 iterations: int = 40, time_limit: float = 10.0) -> None:
        self.tlist, self.plist, self.types = list(tlist), list(plist), types
        self.rows: list[tuple[int, dict[int, int], int]] = []  # (type index, shape index -> W, K_t)
        self.iterations, self.time_limit = iterations, time_limit
        self._seen: set[tuple[int, tuple[tuple[int, int], ...]]] = set()
        self._cols: dict[int, list[dict[int, int]]] = {}  # node fillings met so far, per type

    def heaviest(self, j: int, weights: Mapping[int, float]) -> tuple[float, dict[int, int]]:
        """The integer program of ``NODE_CUTS_DOC`` for one node of type ``tlist[j]``: an upper bound on the most
        weight it holds (HiGHS's dual bound) and a filling that reaches the incumbent (shape index -> pods)."""
        from scipy.optimize import Bounds, LinearConstraint, milp

        c_t, m_t, g_t, _model = self.tlist[j]
        idx = [i for i, w in weights.items() if w > 0 and (self.plist[i][0] or self.plist[i][1] or self.plist[i][2])]
        if not idx:
            return 0.0, {}
        sh = [self.plist[i] for i in idx]
        ns = len(idx)
        sizes = sorted({p[3] for p in sh if p[2] and 0 < p[3] < MILLI})
        nm = len(sizes)
        # columns: n_s (pods of each shape), a[m, g] (items of m milli on GPU g), y_g (GPU g holds a whole pod)
        nv = ns + nm * g_t + g_t
        rows = _SparseRows()
        rows.add([(s, float(p[0])) for s, p in enumerate(sh)], float(c_t))
        rows.add([(s, float(p[1])) for s, p in enumerate(sh)], float(m_t))
        for g in range(g_t):
            rows.add([(ns + mi * g_t + g, float(m)) for mi, m in enumerate(sizes)] + [(ns + nm * g_t + g, MILLI)],
                     float(MILLI))
            if g + 1 < g_t:  # whole GPUs first (symmetry)
                rows.add([(ns + nm * g_t + g, -1.0), (ns + nm * g_t + g + 1, 1.0)], 0.0)
        rows.add([(s, float(p[2])) for s, p in enumerate(sh) if p[2] and p[3] >= MILLI]
                 + [(ns + nm * g_t + g, -1.0) for g in range(g_t)], 0.0)
        for mi, m in enumerate(sizes):  # the sharing items of m milli are on the GPUs: two rows for an equality
            ent = [(s, float(p[2])) for s, p in enumerate(sh) if p[2] and p[3] == m]
            ent += [(ns + mi * g_t + g, -1.0) for g in range(g_t)]
            rows.add(ent, 0.0)
            rows.add([(c, -v) for c, v in ent], 0.0)
        from scipy.sparse import coo_array

        a = coo_array((rows.vals, (rows.rows, rows.cols)), shape=(len(rows.rhs), nv)).tocsr()
        ub = np.full(nv, np.inf)
        ub[ns + nm * g_t:] = 1.0
        gain = np.zeros(nv)
        gain[:ns] = [weights[i] for i in idx]
        res = milp(-gain, constraints=LinearConstraint(a, -np.inf, np.asarray(rows.rhs)), integrality=np.ones(nv),
                   bounds=Bounds(0, ub), options={"time_limit": self.time_limit, "disp": False})
        dual = getattr(res, "mip_dual_bound", None)
        if dual is None or not np.isfinite(dual):
            return float("inf"), {}
        got = {idx[s]: round(float(res.x[s])) for s in range(ns) if res.x is not None and res.x[s] > 0.5}
        return -float(dual), got

    def fewest_nodes(self, j: int, demand: Mapping[int, float]) -> tuple[float, dict[int, float]]:
        """The largest Farley bound met in ``iterations`` steps of column generation on the configuration LP of
        ``NODE_CUTS_DOC`` for ``demand`` (shape index -> pods) on type ``tlist[j]``, with its weights."""
        from scipy.optimize import linprog

        act = sorted(i for i, d in demand.items()  # a pod that asks for nothing needs no node
                     if d > 1e-9 and (self.plist[i][0] or self.plist[i][1] or self.plist[i][2]))
        need = np.array([demand[i] for i in act])
        known = self._cols.setdefault(j, [])
        have = {i for filling in known for i in filling}
        for i in act:
            if i not in have:
                _, filling = self.heaviest(j, {i: 1.0})
                if filling:
                    known.append(filling)
        pos = {i: r for r, i in enumerate(act)}
        cols = [filling for filling in known if any(i in pos for i in filling)]
        best: tuple[float, dict[int, float]] = (0.0, {})
        for _ in range(self.iterations if act else 0):
            a = np.zeros((len(act), len(cols)))
            for c, filling in enumerate(cols):
                for i, k in filling.items():
                    if i in pos:
                        a[pos[i], c] = k
            res = linprog(np.ones(len(cols)), A_ub=-a, b_ub=-need, bounds=(0, None), method="highs")
            if res.status != 0:
                break
            w = {i: max(0.0, -float(d)) for i, d in zip(act, res.ineqlin.marginals, strict=True)}
            price, filling = self.heaviest(j, w)
            if not np.isfinite(price) or price <= 0:
                break
            farley = sum(w[i] * demand[i] for i in act) / price
            if farley > best[0]:
                best = (farley, w)
            if price <= 1 + 1e-7 or not filling or filling in cols:
                break
            cols.append(filling)
            known.append(filling)
        return best

    def separate(self, demand: list[dict[int, float]]) -> bool:
        """Add the rows that an LP optimum with these pods per type (shape index -> pods) violates; whether any
        was added."""
        added = False
        for j, got in enumerate(demand):
            n_t = self.types[self.tlist[j]]
            if not got:
                continue
            nodes, w = self.fewest_nodes(j, got)
            if nodes <= n_t + 0.01:
                continue
            weights = {i: int(v * self.SCALE) for i, v in w.items() if v > 0}
            dual, _ = self.heaviest(j, {i: float(v) for i, v in weights.items()})
            if not np.isfinite(dual) or dual <= 0:
                continue
            k = int(np.floor(dual + 0.5))  # the true maximum is an integer; see NODE_CUTS_DOC
            if sum(weights.get(i, 0) * d for i, d in got.items()) <= (n_t + 0.01) * k:
                continue  # lost to the rounding
            key = (j, tuple(sorted(weights.items())))
            if key in self._seen:
                continue
            self._seen.add(key)
            self.rows.append((j, weights, k))
            added = True
        return added


class _OrderLP:
    """The LPs of ``CLASSES_DOC`` for one arrival order on one set of nodes, for any subset of the classes."""

    item_cover = True
    """``BLOCKED_GPUS_DOC``'s weights on the blocking sharing items (False: each item counts a whole GPU, the rows
    before them; for the tests that show what they add)."""

    def __init__(self, nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], segments: int,
                 classes: Sequence[Callable[[PodShape], bool]]) -> None:
        self.types = Counter((n.cpu_milli, n.memory_mib, n.gpus, n.model) for n in nodes)
        self.tlist = list(self.types)
        keys = [(p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli if p.num_gpu else 0, tuple(p.gpu_spec))
                for p in order]
        self.plist: list[PodShape] = list(dict.fromkeys(keys))
        pid = {p: i for i, p in enumerate(self.plist)}
        self.seq = np.array([pid[k] for k in keys], np.int64)
        self.n = len(order)
        self.pairs = [(i, j) for i, p in enumerate(self.plist) for j, t in enumerate(self.tlist) if _fits(p, t)]
        self.family = dff_family(sorted({p[3] for p in self.plist if p[2] > 0}))
        self.knapsack = _GpuKnapsack(sorted({p[3] for p in self.plist if p[2] > 0 and 0 < p[3] < MILLI}))
        self.nodepack = _NodeKnapsack(self.tlist, self.plist, self.types)
        self.node_cuts = False
        self.placed_before = np.zeros(len(self.plist), np.int64)  # EARLIEST_DOC: pods of shape p before it are placed
        self.capacity = sum(n.gpus for n in nodes) * MILLI
        self.arrived = sum(p.total_gpu_milli for p in order)
        self.cuts = np.linspace(0, self.n, segments + 1).round().astype(np.int64)
        self.segments = segments
        ns = len(self.plist)
        onehot = np.zeros((self.n + 1, ns), np.int64)
        onehot[np.arange(1, self.n + 1), self.seq] = 1
        self.prefix = np.cumsum(onehot, axis=0)  # prefix[k, s] = pods of shape s before index k
        self.in_class = [np.array([bool(c(p)) for p in self.plist]) for c in classes]
        for a in range(len(classes)):
            for b in range(a + 1, len(classes)):
                assert not (self.in_class[a] & self.in_class[b]).any(), "key classes must be disjoint"
        self.covered = []
        for member in self.in_class:
            ks = [p for p, m in zip(self.plist, member, strict=True) if m]
            self.covered.append(np.array([not m and bool(ks) and all(covers(k, p) for k in ks)
                                          for p, m in zip(self.plist, member, strict=True)]))
        self.class_idx = [np.flatnonzero(m[self.seq]) for m in self.in_class]
        self.by_type: dict[int, list[int]] = {}
        self.by_shape: dict[int, list[int]] = {}
        for v, (i, j) in enumerate(self.pairs):
            self.by_type.setdefault(j, []).append(v)
            self.by_shape.setdefault(i, []).append(v)

    def earliest_shapes(self, count: int) -> list[int]:
        """``count`` shape indices for ``EARLIEST_DOC``: the sharing shapes (GPUs of under 1000 milli) first, the
        LPs leave those out when they pack badly (whole-GPU pods they place anyway), each group by the most GPU
        milli arrived, then the most pods."""
        pods = self.prefix[self.n]
        return sorted(range(len(self.plist)),
                      key=lambda i: (not (self.plist[i][2] and self.plist[i][3] < MILLI),
                                     -int(pods[i]) * self.plist[i][2] * self.plist[i][3], -int(pods[i]), i))[:count]

    def earliest_failures(self, shapes: Sequence[int], time_limit: float | None = None,
                          progress: Callable[[str], None] | None = None) -> int:
        """``EARLIEST_DOC``: for each shape index in ``shapes``, the most pods of the shape (a prefix of them) that
        no run can fail (bisection over their count; each LP that is infeasible proves its count), kept in
        ``placed_before`` for every later LP of this object. The LPs solved."""
        solved = 0
        for i in shapes:
            idx = np.flatnonzero(self.seq == i)  # the shape's pods, in arrival order
            lo, hi = int(self.prefix[self.placed_before[i]][i]), len(idx)  # the first lo are placed (proved)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                try:  # "one of the first mid pods of the shape fails": every pod before the mid-th's index + 1
                    proved = self._solve_once({}, True, time_limit, probe=(i, int(idx[mid - 1]) + 1)) is None
                except _LPTroubleError:
                    proved = False  # not proved: as if a failure were possible
                solved += 1
                if proved:
                    lo = mid
                else:
                    hi = mid - 1
            if lo:
                last = int(idx[lo - 1])  # placed in every run, so it fitted: the pods before it that it covers did
                self.placed_before[i] = max(int(self.placed_before[i]), last + 1)
                for s, shape in enumerate(self.plist):
                    if s != i and covers(self.plist[i], shape):
                        self.placed_before[s] = max(int(self.placed_before[s]), last)
            if progress is not None:
                progress(f"shape {self.plist[i]}: no pod fails before pod {int(self.placed_before[i])} of {self.n} "
                         f"({int(self.prefix[self.placed_before[i]][i])} of its {int(self.prefix[self.n][i])} pods)")
        return solved

    def _shape(self, v: int) -> PodShape:
        return self.plist[self.pairs[v][0]]

    def solve(self, assign: dict[int, int | None], failure_rows: bool = True,
              time_limit: float | None = None) -> float | None:
        """The optimum of the LP for ``assign`` (class -> segment of its first failure, None: it never fails);
        None when no run has that assignment (no class pod in a segment, or the LP is infeasible)."""
        got = self._solve_once(assign, failure_rows, time_limit)
        return None if got is None else got[0]

    def refine(self, assign: dict[int, int | None], rounds: int, failure_rows: bool = True,
               time_limit: float | None = None) -> bool:
        """Up to ``rounds`` rounds of ``CONFIG_CUTS_DOC`` on the LP for ``assign``: solve it, add the GPU-packing
        rows its optimum violates (for every later LP of this object), again. Whether any row was added."""
        added = False
        for _ in range(rounds):
            try:
                got = self._solve_once(assign, failure_rows, time_limit)
                if got is None:
                    break
                gpu_rows = self.knapsack.separate(got[1], got[2])
                if not (self.node_cuts and self.nodepack.separate(got[3])) and not gpu_rows:
                    break
            except _LPTroubleError:  # no optimum to separate: the rows found so far stay (each is valid)
                break
            added = True
        return added

    def _solve_once(self, assign: dict[int, int | None], failure_rows: bool,
                    time_limit: float | None, probe: tuple[int, int] | None = None
                    ) -> tuple[float, list[dict[int, float]], list[float], list[dict[int, float]]] | None:
        """One LP of ``solve``: its optimum, and per node type the sharing items (milli -> GPUs), ``S_t`` and the
        pods (shape index -> pods, over the ranges) of the optimal point. ``probe`` = (shape index i, pod index
        k): the LP of ``EARLIEST_DOC`` for "a pod of shape i fails before pod k" (with ``assign`` empty)."""
        from scipy.optimize import linprog
        from scipy.sparse import coo_array

        ns, npair, nt = len(self.plist), len(self.pairs), len(self.tlist)
        reach = self.placed_before.copy()  # P_p: pods of shape p before it are forced (EARLIEST_DOC's, at least)
        failing: list[tuple[int, int]] = []
        for c, seg in assign.items():
            cut = self.n if seg is None else int(self.cuts[seg])
            reach = np.maximum(reach, np.where(self.in_class[c], cut, 0))
            before = self.class_idx[c][self.class_idx[c] < cut]
            if before.size:
                reach = np.maximum(reach, np.where(self.covered[c], int(before[-1]), 0))
            if seg is not None:
                if not ((self.prefix[self.cuts[seg + 1]] - self.prefix[self.cuts[seg]]) * self.in_class[c]).any():
                    return None  # no class pod in the segment: the class's first failure is elsewhere
                if failure_rows:
                    failing.append((c, seg))
        ends = sorted({int(self.cuts[s + 1]) for _c, s in failing} | {self.n} | ({probe[1]} if probe else set()))
        starts = [0, *ends[:-1]]
        nr = len(ends)
        x_off = [r * npair for r in range(nr)]
        s_off = nr * npair
        nv = s_off + nt
        blk: list[dict[str, int]] = []
        for _ in range(len(failing) + (probe is not None)):  # per failure: St, W, bc, bm, bg (nt each), yc, ym, yg
            o = {"st": nv, "w": nv + nt, "bc": nv + 2 * nt, "bm": nv + 3 * nt, "bg": nv + 4 * nt}
            o |= {"yc": nv + 5 * nt, "ym": nv + 5 * nt + npair, "yg": nv + 5 * nt + 2 * npair}
            blk.append(o)
            nv += 5 * nt + 3 * npair
        gain = np.zeros(nv)
        for v in range(npair):
            p = self._shape(v)
            for r in range(nr):
                gain[x_off[r] + v] = p[2] * p[3]
        bnd: list[tuple[float, float | None]] = [(0.0, None)] * nv
        for j, t in enumerate(self.tlist):
            bnd[s_off + j] = (0.0, float(self.types[t] * t[2]))
        lp = _SparseRows()
        row = lp.add
        shp = np.arange(ns)
        for r in range(nr):
            count = self.prefix[ends[r]] - self.prefix[starts[r]]
            forced = self.prefix[np.clip(reach, starts[r], ends[r]), shp] - self.prefix[starts[r]]
            for i, vs in self.by_shape.items():
                row([(x_off[r] + v, 1.0) for v in vs], float(count[i]))
                if forced[i]:
                    row([(x_off[r] + v, -1.0) for v in vs], -float(forced[i]))
            for i in range(ns):  # a forced shape that fits no node type: no run has this assignment
                if forced[i] and i not in self.by_shape:
                    return None

        def xs(v: int, val: float, upto: int = nr) -> list[tuple[int, float]]:
            return [(x_off[r] + v, val) for r in range(upto)]

        for j, vs in self.by_type.items():
            (c_t, m_t, g_t, _model), n = self.tlist[j], self.types[self.tlist[j]]
            row([e for v in vs for e in xs(v, float(self._shape(v)[0]))], float(n * c_t))
            row([e for v in vs for e in xs(v, float(self._shape(v)[1]))], float(n * m_t))
            sh = [v for v in vs if self._shape(v)[2] > 0 and self._shape(v)[3] < MILLI]
            wh = [v for v in vs if self._shape(v)[2] > 0 and self._shape(v)[3] >= MILLI]
            if g_t:
                for f in (*self.family, *self.knapsack.functions):
                    row([e for v in sh for e in xs(v, self._shape(v)[2] * f(self._shape(v)[3]))]
                        + [(s_off + j, -float(MILLI))], 0.0)
                row([e for v in wh for e in xs(v, float(self._shape(v)[2]))] + [(s_off + j, 1.0)], float(n * g_t))
        for j, weights, k in self.nodepack.rows if self.node_cuts else ():  # NODE_CUTS_DOC
            row([e for v in self.by_type.get(j, []) if self.pairs[v][0] in weights
                 for e in xs(v, float(weights[self.pairs[v][0]]))], float(self.types[self.tlist[j]] * k))
        fixed_zero: set[int] = set()
        open_vars: set[int] = set()
        failures: list[tuple[int, PodShape]] = []  # (the range ending at the failure's segment, pseudo-pod)
        for c, seg in failing:
            lo, hi = int(self.cuts[seg]), int(self.cuts[seg + 1])
            rc = ends.index(hi)  # the range ending at e_c
            members = [self.plist[i] for i in np.flatnonzero((self.prefix[hi] - self.prefix[lo]) * self.in_class[c])]
            failures.append((rc, _pseudo_pod(members)))
            # the failed pod stays out
            n_rc = int(((self.prefix[ends[rc]] - self.prefix[starts[rc]]) * self.in_class[c]).sum())
            row([(x_off[rc] + v, 1.0) for i, vs in self.by_shape.items() if self.in_class[c][i] for v in vs],
                float(n_rc - 1))
        if probe is not None:  # EARLIEST_DOC: a pod of shape q_i fails before pod q_end
            q_i, q_end = probe
            rk = ends.index(q_end)
            q_before = int(self.prefix[q_end][q_i])
            if q_before <= self.prefix[self.placed_before[q_i]][q_i]:
                return None  # every pod of shape q_i before q_end is placed (proved): none fails there
            failures.append((rk, self.plist[q_i]))
            row([(x_off[r] + v, 1.0) for r in range(rk + 1) for v in self.by_shape.get(q_i, [])], float(q_before - 1))
        for (rc, q), o in zip(failures, blk, strict=True):
            c_q, mem_q, k_q, m_q, models_q = q
            allowed: set[str] | None = set(models_q) if models_q else None  # {""}: no model allowed
            # covering pods fail after T_c
            for i, vs in self.by_shape.items():
                if covers(self.plist[i], q):
                    fixed_zero.update(x_off[r] + v for r in range(rc + 1, nr) for v in vs)
            # blocking at T_c
            for j2, vs in self.by_type.items():
                (c_t, m_t, g_t, model), n = self.tlist[j2], self.types[self.tlist[j2]]
                if c_q > c_t or mem_q > m_t or (k_q and (g_t < k_q or (allowed is not None and model not in allowed))):
                    continue  # q never fits there: no row
                bnd[o["st"] + j2] = bnd[o["w"] + j2] = (0.0, float(n * g_t))
                bnd[o["bc"] + j2] = bnd[o["bm"] + j2] = bnd[o["bg"] + j2] = (0.0, float(n))
                row([(o["bc"] + j2, -1.0), (o["bm"] + j2, -1.0), (o["bg"] + j2, -1.0)], -float(n))
                for v in vs:
                    row([(o["yc"] + v, 1.0), (o["ym"] + v, 1.0), (o["yg"] + v, 1.0), *xs(v, -1.0, rc + 1)], 0.0)
                    open_vars.update((o["yc"] + v, o["ym"] + v, o["yg"] + v))
                for y, b in (("yc", "bc"), ("ym", "bm"), ("yg", "bg")):
                    row([(o[b] + j2, -float(c_t))] + [(o[y] + v, float(self._shape(v)[0])) for v in vs], 0.0)
                    row([(o[b] + j2, -float(m_t))] + [(o[y] + v, float(self._shape(v)[1])) for v in vs], 0.0)
                    row([(o[b] + j2, -float(MILLI * g_t))]
                        + [(o[y] + v, float(self._shape(v)[2] * self._shape(v)[3])) for v in vs], 0.0)
                row([(o["bc"] + j2, float(c_t - c_q + 1))] + [(o["yc"] + v, -float(self._shape(v)[0])) for v in vs],
                    0.0)
                row([(o["bm"] + j2, float(m_t - mem_q + 1))]
                    + [(o["ym"] + v, -float(self._shape(v)[1])) for v in vs], 0.0)
                if not k_q:
                    row([(o["bg"] + j2, 1.0)], 0.0)
                    continue
                span = g_t - k_q + 1
                row([(o["bg"] + j2, float(span * (MILLI + 1 - m_q)))]
                    + [(o["yg"] + v, -float(self._shape(v)[2] * self._shape(v)[3])) for v in vs], 0.0)
                row([(o["bg"] + j2, float(span)), (o["st"] + j2, -1.0), (o["w"] + j2, -1.0)], 0.0)
                row([(o["st"] + j2, 1.0), (s_off + j2, -1.0)], 0.0)
                sh = [v for v in vs if 0 < self._shape(v)[3] < MILLI and self._shape(v)[2] > 0]
                wh = [v for v in vs if self._shape(v)[3] >= MILLI and self._shape(v)[2] > 0]
                theta = MILLI + 1 - m_q  # BLOCKED_GPUS_DOC: an item of m milli blocks min(1, m / theta) GPUs
                row([(o["st"] + j2, 1.0)]
                    + [(o["yg"] + v, -self._shape(v)[2] * (min(1.0, self._shape(v)[3] / theta)
                                                           if self.item_cover else 1.0)) for v in sh], 0.0)
                row([(o["w"] + j2, 1.0)] + [(o["yg"] + v, -float(self._shape(v)[2])) for v in wh], 0.0)
        # blocking variables of types where q never fits (and their y) stay 0
        blocking_vars = {c for o in blk for c in range(o["st"], o["yc"])}
        bnd = [(0.0, 0.0) if c in fixed_zero or (c >= s_off + nt and c not in open_vars
                                                   and not (c in blocking_vars and bnd[c][1] is not None))
               else bnd[c] for c in range(nv)]
        a = coo_array((lp.vals, (lp.rows, lp.cols)), shape=(len(lp.rhs), nv)).tocsr()
        for method in ("highs", "highs-ipm", "highs-ds"):  # on numerical trouble (status 4) try the others
            res = linprog(-gain, A_ub=a, b_ub=np.asarray(lp.rhs), bounds=bnd, method=method,
                          options={"time_limit": time_limit} if time_limit else None)
            if res.status in (0, 2):
                break
        if res.status == 2:
            return None
        if res.status != 0:
            raise _LPTroubleError(str(res.message))
        items: list[dict[int, float]] = [{} for _ in range(nt)]
        pods: list[dict[int, float]] = [{} for _ in range(nt)]
        for v, (i, j) in enumerate(self.pairs):
            got = float(sum(res.x[x_off[r] + v] for r in range(nr)))
            if got <= 1e-9:
                continue
            pods[j][i] = got  # one pair per (shape, type)
            k, m = self.plist[i][2], self.plist[i][3]
            if k and 0 < m < MILLI:
                items[j][m] = items[j].get(m, 0.0) + k * got
        return -float(res.fun), items, [float(res.x[s_off + j]) for j in range(nt)], pods


class _LPTroubleError(RuntimeError):
    """HiGHS gave up on an LP (neither optimal nor infeasible, after three solvers)."""


def class_bound(nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], key_a: Callable[[PodShape], bool],
                key_b: Callable[[PodShape], bool], segments: int = 40,
                progress: Callable[[str], None] | None = None, time_limit: float | None = None,
                config_cuts: int = 30, config_passes: int = 3, node_cuts: bool = False,
                earliest: int = 0) -> ClassBound:
    """The two-class must-place bound (``CLASSES_DOC``) for ``order`` on ``nodes``; ``key_a`` and ``key_b``
    select two disjoint sets of shapes. ``progress`` is called with a line after every LP. ``time_limit``
    (seconds per solver try) turns an LP that runs longer into HiGHS trouble, answered with the valid larger
    value of ``CLASSES_DOC`` (so the bound stays valid, and may be looser). ``config_cuts``, ``config_passes``:
    as in ``must_place_bound``, on the pair's LP that gave the last scan's bound; the figures reported are the
    tightest over the scans (``SCANS_DOC``); ``node_cuts`` and ``earliest`` as in ``must_place_bound``."""
    lp = _OrderLP(nodes, order, segments, [key_a, key_b])
    lp.node_cuts = node_cuts
    cands: list[int | None] = [*range(segments), None]
    solved = lp.earliest_failures(lp.earliest_shapes(earliest), time_limit, progress) if earliest > 0 else 0
    cap = float(lp.capacity)

    def say(msg: str) -> None:
        if progress is not None:
            progress(f"LP {solved}: {msg}")

    def scan() -> tuple[ClassBound, dict[int, int | None] | None]:
        nonlocal solved
        one: list[dict[int | None, float]] = [{}, {}]
        for c in (0, 1):
            for s in cands:
                try:
                    v = lp.solve({c: s}, time_limit=time_limit)
                except _LPTroubleError:
                    say(f"class {'AB'[c]} alone, segment {s}: HiGHS gave up; the LP without the failure rows")
                    v = lp.solve({c: s}, failure_rows=False)
                solved += 1
                if v is not None:
                    one[c][s] = v
                say(f"class {'AB'[c]} alone, segment {s if s is not None else 'none'}: "
                    + (f"{(lp.capacity - v) / MILLI:.1f} idle GPUs" if v is not None else "no run"))
        if not one[0] or not one[1]:  # cannot happen (the LP of a real run is feasible); keep the bound valid
            return ClassBound(cap, lp.capacity, lp.arrived, -1, -1, segments, solved, 0, cap, cap), None
        best, where, pairs = -1.0, (-1, -1), 0
        best_assign: dict[int, int | None] | None = None
        for i in sorted(one[0], key=lambda s: -one[0][s]):
            if one[0][i] <= best:
                break
            for j in sorted(one[1], key=lambda s: -one[1][s]):
                if one[1][j] <= best:
                    break
                try:
                    got = lp.solve({0: i, 1: j}, time_limit=time_limit)
                except _LPTroubleError:
                    say(f"pair A {i}, B {j}: HiGHS gave up; the smaller one-class optimum")
                    got = min(one[0][i], one[1][j])
                solved += 1
                pairs += 1
                if got is not None and got > best:
                    best, where = got, (-1 if i is None else i, -1 if j is None else j)
                    best_assign = {0: i, 1: j}
                say(f"pair A {i if i is not None else 'none'}, B {j if j is not None else 'none'}: "
                    + (f"{(lp.capacity - got) / MILLI:.1f}" if got is not None else "no run")
                    + f" (best so far {(lp.capacity - best) / MILLI:.1f} idle GPUs)")
        return ClassBound(min(best, cap), lp.capacity, lp.arrived, where[0], where[1], segments, solved, pairs,
                          min(max(one[0].values()), cap), min(max(one[1].values()), cap)), best_assign

    scans = [scan()]
    for _ in range(config_passes if config_cuts > 0 else 0):
        assign = scans[-1][1]
        if assign is None or not lp.refine(assign, config_cuts, time_limit=time_limit):
            break
        say(f"scan {len(scans) - 1}: {scans[-1][0].idle_gpus:.1f} idle GPUs; {len(lp.knapsack.functions)} "
            f"GPU-packing rows, {len(lp.nodepack.rows)} node-packing rows; the scan again")
        scans.append(scan())
    figures = tuple(got.bound_milli for got, _ in scans)
    k = min(range(len(scans)), key=lambda s: (figures[s], s))  # SCANS_DOC: the tightest scan, the earliest on ties
    return replace(scans[k][0], lps_solved=solved, scan=k, scan_milli=figures,
                   one_class_a_milli=min(got.one_class_a_milli for got, _ in scans),
                   one_class_b_milli=min(got.one_class_b_milli for got, _ in scans))
