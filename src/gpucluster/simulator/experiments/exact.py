"""The exact optimum of the must-place problem on small instances: a mixed-integer program solved by HiGHS.

The problem (the FGD experiment's rule, ``mustplace.py``): pods arrive in a given order and never leave; a pod
that *fits* some node when it arrives must be placed on a node where it fits (with its GPUs chosen there); a pod
that fits no node fails. Among all such runs, the largest final allocated GPU milli (equivalently, the fewest
idle GPUs). ``bound.py`` bounds it from above by LPs; ``bench/must_place_search.py`` finds good runs from below.
This module computes it exactly where the instance is small enough, to measure both gaps.

"Fits" is the experiment's test: the node's free CPU and memory cover the pod's; for a GPU pod (``num_gpu = k >=
1``, ``gpu_milli = u`` per GPU; sharing pods have ``k = 1, u < 1000``, whole-GPU pods ``u = 1000``) the node's
model is one the pod allows (any when it names none) and at least ``k`` of its GPUs have ``u`` milli free.

Data: nodes ``n`` with CPU ``C_n``, memory ``M_n``, ``G_n`` GPUs; pods ``i`` in arrival order with ``c_i``,
``m_i``, ``k_i``, ``u_i``. A pair ``(i, n)`` is *compatible* when the pod fits the empty node (``c_i <= C_n``,
``m_i <= M_n``, and for a GPU pod ``k_i <= G_n`` and the model allowed); only compatible pairs get variables,
and an incompatible pair needs no reason (the pod can never fit there).

Variables (all binary):

* ``y[i, n]``: pod ``i`` runs on node ``n``;
* ``z[i, n, g]``: pod ``i`` uses GPU ``g`` of node ``n`` (GPU pods);
* ``rc[i, n]``, ``rm[i, n]``, ``rg[i, n]``: *why* pod ``i`` does not fit node ``n`` when it arrives: not enough
  free CPU, not enough free memory, fewer than ``k_i`` GPUs with ``u_i`` milli free;
* ``b[i, n, g]``: GPU ``g`` of node ``n`` has less than ``u_i`` milli free when pod ``i`` arrives.

Rows (every quantity is an integer, so "less than" is "at most one less"):

(P) ``sum_n y[i, n] <= 1``: a pod runs at most once.
(K) ``sum_g z[i, n, g] = k_i y[i, n]``: a GPU pod on a node takes exactly ``k_i`` distinct GPUs there, and none
    anywhere else (``z`` is binary, so the GPUs are distinct).
(C) ``sum_i c_i y[i, n] <= C_n``, (M) the same for memory, (G) ``sum_i u_i z[i, n, g] <= 1000`` per GPU: the
    node is never over-filled. Pods never leave, so the free CPU, memory and GPU milli only shrink along the
    order, and the final state respecting the capacities is the same as every intermediate state respecting
    them: every placed pod fitted where it went when it arrived (on its chosen GPUs).
(D) per GPU and per dual-feasible function ``f`` of ``bound.dff_family`` (on the order's GPU sizes, identity
    left out): ``sum_i f(u_i) z[i, n, g] <= 1000``. Implied by (G) for binary ``z`` (an ``f`` is dual-feasible
    when any sizes that fit one GPU keep their ``f``-values within 1000; ``bound.py``), so they remove no run;
    they only cut fractional points off the LP relaxation (an 810-milli pod counts as a whole GPU under the
    threshold function of 191). ``dff_rows=False`` leaves them out.
(RC) ``sum_{j < i} c_j y[j, n] >= (C_n - c_i + 1) rc[i, n]``: ``rc = 1`` only if the CPU used on ``n`` by the
    pods before ``i`` leaves less than ``c_i`` free. (RM) the same for memory. (In these rows and (B) a
    coefficient larger than the right side's is lowered to it: the same integer points, a tighter relaxation.)
(B) ``sum_{j < i} u_j z[j, n, g] >= (1001 - u_i) b[i, n, g]``: ``b = 1`` only if GPU ``g`` has less than
    ``u_i`` milli free when ``i`` arrives.
(RG) ``sum_g b[i, n, g] >= (G_n - k_i + 1) rg[i, n]``: ``rg = 1`` only if at least ``G_n - k_i + 1`` GPUs of
    ``n`` lack ``u_i`` milli, i.e. fewer than ``k_i`` have it.
(MP) per pod ``i`` and compatible node ``n``: ``sum_n' y[i, n'] + rc[i, n] + rm[i, n] + rg[i, n] >= 1``: the
    pod is placed, or it does not fit ``n`` for a true reason. With (RC), (RM), (RG) and (B) only ever
    *implying* facts about the state built by the earlier placements (the left sides are sums of nonnegative
    terms, so a zero indicator asks nothing: no big-M), a failed pod is exactly one that fits no node. A pod
    that fits nowhere (not even an empty node) has no (MP) row and fails.

Objective: maximise ``sum_{i, n} k_i u_i y[i, n]``, the final allocated GPU milli.

Why it is exact: a must-place run gives a feasible point (its placements as ``y``, ``z``; for each failed pod
and compatible node, one of the reasons the run's state gives, with the ``b`` of the GPUs that lack room), with
the run's allocation as objective; and a feasible point is a run: (C), (M), (G) make every placement fit when
it was made (above), and (MP) with the reason rows make every failed pod fit nowhere at its arrival. So the
optimum of the program is the best must-place run. HiGHS proves it optimal (relative gap 0; every objective
coefficient is an integer), or, when the time limit stops it, gives its best run (the incumbent, a valid run)
and its dual bound (a valid upper bound): both are reported.

Symmetry (optional, ``symmetry=True``; each row only removes relabellings of a solution, so some optimum always
survives). Off by default: HiGHS detects symmetries itself. One timing each on two samples of the ``default``
trace (``bench/must_place_exact.py``'s sampling, seeds 1000 with 3 nodes and 1001 with 4 nodes; shared 2-core
machine, load average 5-7, so rough): with (D) and without (SG), (SN): 24 s and 67 s; with (D) and (SN): 32 s
and not solved in 90 s; with (SN) and without (D): 38 s and 80 s:

(SG) GPUs of one node are interchangeable (every row treats them alike): number them in the order of their first
    use (GPUs first used by the same pod in any order among themselves, unused ones last). Then GPU ``g + 1``
    is used by pod ``i`` only if GPU ``g`` was used by a pod at or before ``i``:
    ``z[i, n, g + 1] <= sum_{j <= i} z[j, n, g]``.
(SN) Nodes of the same type (CPU, memory, GPU count, model) are interchangeable (with their GPUs): number them
    in the order of their first use. For two consecutive nodes ``a < b`` of a type:
    ``y[i, b] <= sum_{j <= i} y[j, a]``. Relabelling whole nodes keeps (SG), which is per node.

Pruning (same optimum): a reason indicator gets no variable where no placement could make it true (the pods
before ``i`` that could go to ``n`` ask for less than the threshold in all, or too few GPUs could reach it).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpucluster.simulator.experiments.bound import dff_family
from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

MILLI = 1000


@dataclass(frozen=True, slots=True)
class ExactResult:
    """The solver's answer for one instance."""

    optimal: bool
    """True: HiGHS proved ``allocated_milli`` optimal (then ``upper_milli == allocated_milli``)."""
    allocated_milli: int | None
    """Final GPU milli of the best run found (the optimum when ``optimal``); None when none was found in time."""
    upper_milli: int
    """Proven upper bound on every must-place run's allocation (HiGHS's dual bound, rounded down: the allocation
    is an integer)."""
    capacity_milli: int
    node: tuple[int, ...]
    """Per pod of the order, its node in the best run found (-1: failed); empty when none was found."""
    gpus: tuple[tuple[int, ...], ...]
    """Per pod, the GPU indices it took on its node."""
    variables: int
    constraints: int
    seconds: float
    message: str

    @property
    def idle_gpus(self) -> float | None:
        """Idle GPUs of the best run found (the exact minimum when ``optimal``)."""
        return None if self.allocated_milli is None else (self.capacity_milli - self.allocated_milli) / MILLI

    @property
    def idle_lower_gpus(self) -> float:
        """No must-place run leaves fewer idle GPUs than this (proven)."""
        return (self.capacity_milli - self.upper_milli) / MILLI


def _compatible(pod: OpenbPod, node: OpenbNode) -> bool:
    if pod.cpu_milli > node.cpu_milli or pod.memory_mib > node.memory_mib:
        return False
    if pod.num_gpu == 0:
        return True
    return node.gpus >= pod.num_gpu and (not pod.gpu_spec or node.model in pod.gpu_spec)


class _Program:
    """The rows of the module docstring, in coordinate form (``lo <= A x <= hi``), all variables binary."""

    def __init__(self) -> None:
        self.nvars = 0
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lo: list[float] = []
        self.hi: list[float] = []

    def var(self) -> int:
        self.nvars += 1
        return self.nvars - 1

    def add(self, entries: Sequence[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(self.lo)
        for c, v in entries:
            if v:
                self.rows.append(r)
                self.cols.append(c)
                self.vals.append(float(v))
        self.lo.append(lo)
        self.hi.append(hi)


def must_place_optimum(nodes: Sequence[OpenbNode], order: Sequence[OpenbPod], *, time_limit: float | None = None,
                       symmetry: bool = False, at_least_milli: int | None = None, gpu_symmetry: bool = True,
                       dff_rows: bool = True) -> ExactResult:
    """Solve the program of the module docstring for ``order`` (the arrival order) on ``nodes``.

    ``time_limit`` (seconds): HiGHS stops there and the result gives its incumbent and dual bound
    (``optimal=False``). ``symmetry``: add rows (SN), and (SG) unless ``gpu_symmetry=False``. ``dff_rows``: add
    rows (D). ``at_least_milli``: the allocation of a known
    must-place run (e.g. a policy's); adds ``objective >= at_least_milli``, which cuts off no optimum, and may
    help HiGHS prune (it must still find a run of its own; on the two samples above it was 16 s against 24 s,
    and not solved in 90 s against 67 s: no rule)."""
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    t0 = time.perf_counter()
    n_nodes, n_pods = len(nodes), len(order)
    capacity = sum(x.gpus for x in nodes) * MILLI
    prog = _Program()
    inf = np.inf
    compat = [[n for n in range(n_nodes) if _compatible(p, nodes[n])] for p in order]
    y: dict[tuple[int, int], int] = {}
    z: dict[tuple[int, int, int], int] = {}
    for i, p in enumerate(order):
        for n in compat[i]:
            y[i, n] = prog.var()
            if p.num_gpu:
                for g in range(nodes[n].gpus):
                    z[i, n, g] = prog.var()
    # (P), (K)
    for i, p in enumerate(order):
        if compat[i]:
            prog.add([(y[i, n], 1) for n in compat[i]], -inf, 1)
        if p.num_gpu:
            for n in compat[i]:
                prog.add([(z[i, n, g], 1) for g in range(nodes[n].gpus)] + [(y[i, n], -p.num_gpu)], 0, 0)
    # (C), (M), (G), (D)
    family = dff_family(sorted({p.gpu_milli for p in order if p.num_gpu}))[1:] if dff_rows else []
    on: list[list[int]] = [[i for i in range(n_pods) if n in set(compat[i])] for n in range(n_nodes)]
    for n, x in enumerate(nodes):
        prog.add([(y[i, n], order[i].cpu_milli) for i in on[n]], -inf, x.cpu_milli)
        prog.add([(y[i, n], order[i].memory_mib) for i in on[n]], -inf, x.memory_mib)
        for g in range(x.gpus):
            prog.add([(z[i, n, g], order[i].gpu_milli) for i in on[n] if order[i].num_gpu], -inf, MILLI)
            for f in family:
                prog.add([(z[i, n, g], f(order[i].gpu_milli)) for i in on[n] if order[i].num_gpu], -inf, MILLI)
    # reasons: (RC), (RM), (B), (RG), then (MP)
    for i, p in enumerate(order):
        if not compat[i]:
            continue
        placed = [(y[i, n], 1.0) for n in compat[i]]
        for n in compat[i]:
            x = nodes[n]
            before = [j for j in on[n] if j < i]
            reasons: list[tuple[int, float]] = []
            need = x.cpu_milli - p.cpu_milli + 1
            if sum(order[j].cpu_milli for j in before) >= need:
                rc = prog.var()
                prog.add([(y[j, n], min(order[j].cpu_milli, need)) for j in before] + [(rc, -need)], 0, inf)
                reasons.append((rc, 1.0))
            need = x.memory_mib - p.memory_mib + 1
            if sum(order[j].memory_mib for j in before) >= need:
                rm = prog.var()
                prog.add([(y[j, n], min(order[j].memory_mib, need)) for j in before] + [(rm, -need)], 0, inf)
                reasons.append((rm, 1.0))
            if p.num_gpu:
                gbefore = [j for j in before if order[j].num_gpu]
                full = MILLI + 1 - p.gpu_milli  # used milli that leaves less than u_i free
                blocked = x.gpus - p.num_gpu + 1  # GPUs that must lack room
                reach = sum(order[j].total_gpu_milli for j in gbefore)
                per_gpu = sum(order[j].gpu_milli for j in gbefore)
                if full <= MILLI and per_gpu >= full and reach >= blocked * full:
                    bs = []
                    for g in range(x.gpus):
                        b = prog.var()
                        prog.add([(z[j, n, g], min(order[j].gpu_milli, full)) for j in gbefore] + [(b, -full)], 0,
                                 inf)
                        bs.append(b)
                    rg = prog.var()
                    prog.add([(b, 1.0) for b in bs] + [(rg, -blocked)], 0, inf)
                    reasons.append((rg, 1.0))
            prog.add(placed + reasons, 1, inf)
    if symmetry:
        # (SG)
        for n, x in enumerate(nodes if gpu_symmetry else []):
            gpods = [i for i in on[n] if order[i].num_gpu]
            for g in range(x.gpus - 1):
                for a, i in enumerate(gpods):
                    prog.add([(z[i, n, g + 1], 1.0)] + [(z[j, n, g], -1.0) for j in gpods[: a + 1]], -inf, 0)
        # (SN)
        groups: dict[tuple[int, int, int, str], list[int]] = {}
        for n, x in enumerate(nodes):
            groups.setdefault((x.cpu_milli, x.memory_mib, x.gpus, x.model), []).append(n)
        for members in groups.values():
            for a, b in itertools.pairwise(members):
                pods_ab = on[a]  # identical nodes: the same compatible pods
                for k, i in enumerate(pods_ab):
                    prog.add([(y[i, b], 1.0)] + [(y[j, a], -1.0) for j in pods_ab[: k + 1]], -inf, 0)
    weight = np.zeros(prog.nvars)
    for (i, _n), v in y.items():
        weight[v] = order[i].total_gpu_milli
    if at_least_milli is not None:
        prog.add([(v, weight[v]) for v in y.values()], at_least_milli, inf)
    nrows = len(prog.lo)
    constraints = []
    if nrows:
        a = coo_array((prog.vals, (prog.rows, prog.cols)), shape=(nrows, prog.nvars)).tocsr()
        constraints = [LinearConstraint(a, np.array(prog.lo), np.array(prog.hi))]
    if prog.nvars == 0:
        return ExactResult(True, 0, 0, capacity, tuple([-1] * n_pods), tuple(() for _ in order), 0, nrows,
                           time.perf_counter() - t0, "no pod fits any node")
    options: dict[str, object] = {"disp": False, "mip_rel_gap": 0.0}
    if time_limit is not None:
        options["time_limit"] = float(time_limit)
    res = milp(-weight, integrality=np.ones(prog.nvars), bounds=Bounds(0, 1), constraints=constraints,
               options=options)
    secs = time.perf_counter() - t0
    sol = res.x
    node: tuple[int, ...] = ()
    gpus: tuple[tuple[int, ...], ...] = ()
    allocated: int | None = None
    if sol is not None:
        nl = [-1] * n_pods
        gl: list[tuple[int, ...]] = [()] * n_pods
        for (i, n), v in y.items():
            if sol[v] > 0.5:
                nl[i] = n
        for (i, n, g), v in z.items():
            if sol[v] > 0.5 and nl[i] == n:
                gl[i] = (*gl[i], g)
        node, gpus = tuple(nl), tuple(gl)
        allocated = sum(p.total_gpu_milli for p, k in zip(order, nl, strict=True) if k >= 0)
    optimal = res.status == 0 and allocated is not None
    if optimal:
        upper = int(allocated)  # type: ignore[arg-type]
    else:
        dual = getattr(res, "mip_dual_bound", None)
        upper = capacity if dual is None or not np.isfinite(dual) else min(capacity, int(np.floor(-dual + 1e-6)))
        if allocated is not None:
            upper = max(upper, allocated)
    return ExactResult(optimal, allocated, upper, capacity, node, gpus, prog.nvars, nrows, secs, str(res.message))
