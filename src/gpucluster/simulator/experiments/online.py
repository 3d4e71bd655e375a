"""What no *online* must-place policy can guarantee: an adversary built from the workload's own pod shapes (issue 30).

ADVERSARY_DOC below states the construction and its proof; ``online_regret`` computes its figures exactly for a
cluster of ``gpus`` roomy GPUs and ``small`` 320-milli pods (they depend on the shapes' milli only),
``adversary_orders`` builds the two orders, and ``bench/online_adversary.py`` prints the figures and runs the
shipped policies on both orders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

MILLI = 1000



@dataclass(frozen=True, slots=True)
class Shapes:
    """The adversary's three pod shapes (one GPU each, any model): ``small`` of 320 milli, ``mid`` of 650,
    ``whole`` of 1000; only their CPU and memory differ between the sets below."""

    small: OpenbPod
    mid: OpenbPod
    whole: OpenbPod

    def __post_init__(self) -> None:
        for pod, milli in ((self.small, 320), (self.mid, 650), (self.whole, MILLI)):
            assert pod.num_gpu == 1 and pod.gpu_milli == milli and not pod.gpu_spec, pod

    @property
    def per_gpu(self) -> tuple[int, int]:
        """The most CPU milli and MiB the pods of these orders can take per GPU: three small pods, a small and a
        mid pod, or a whole pod (nothing else fits one GPU in these orders: ``ADVERSARY_DOC``)."""
        s, m, w = self.small, self.mid, self.whole
        return (max(3 * s.cpu_milli, s.cpu_milli + m.cpu_milli, w.cpu_milli),
                max(3 * s.memory_mib, s.memory_mib + m.memory_mib, w.memory_mib))


COMMON = Shapes(OpenbPod("small", 4000, 15258, 1, 320), OpenbPod("mid", 11908, 47104, 1, 650),
                OpenbPod("whole", 3152, 5600, 1, MILLI))
"""Common shapes of ``default``: the 320-milli pod of 4 cores and 15,258 MiB (78 of its 8,152 pods), the 650-milli
pod (11.908 cores, 47,104 MiB; 237) and the whole-GPU pod with the key pod's CPU and memory (3.152 cores, 5,600
MiB; 470). Roomy only on the T4, G3, 64-core P100 and A10 nodes of the Alibaba cluster (1,200 of its GPUs)."""
LIGHT = Shapes(OpenbPod("small", 1000, 2048, 1, 320), OpenbPod("mid", 1000, 2048, 1, 650),
               OpenbPod("whole", 1000, 6144, 1, MILLI))
"""The lightest shapes of ``default`` of these sizes: 1 core and 2 GiB (320 milli: 22 pods; 650: 2), 1 core and
6 GiB (whole GPU: 15). At most 3 cores and 6 GiB per GPU: every node of the Alibaba cluster is roomy for them
(its leanest have 8 cores and 32 GiB per GPU), so the adversary runs on the whole 1,213-node cluster."""
SMALL, MID, WHOLE = COMMON.small, COMMON.mid, COMMON.whole

ADVERSARY_DOC = """No online must-place policy is near the best run on every order (issue 30's "or the proof that it
is unreachable online").

*What can be proved at all.* For one fixed input (``default``, seed 42, its 10,825 pods in their order) no
statement "no online policy reaches X" can hold when some run reaches X: the policy that places pod i where
that run placed it whenever the pods seen so far are that input's first i pods is online (each decision uses
only the pods that have arrived). So "unreachable online" is a statement about a *family* of inputs: a policy
that does not know which member arrives must lose on some member. This module proves such a statement for the
family of orders of the workload's own shapes below; it says nothing about the experiment's random orders
(a shuffle of the trace), where these orders have a vanishing probability, and nothing about seed 42.

*The family.* Three shapes of the workload (``Shapes``: a small pod of 320 milli, a mid pod of 650, a whole-GPU
pod), a cluster of ``M`` GPUs on nodes that are *roomy* for them (``roomy``: per GPU at least the CPU and memory
that the pods below can take on one GPU - three small pods, a small and a mid pod, or a whole pod - so that CPU
and memory never stop a pod; for ``COMMON``, ``default``'s most common such shapes, 15,908 CPU milli and 62,362
MiB per GPU, 1,200 of the Alibaba cluster's GPUs; for ``LIGHT``, its 1-core shapes, 3,000 and 6,144, every node
of it), and ``n <= M`` small pods. Then either

* order A: the ``n`` small pods, then ``M - ceil(n / 3)`` whole pods (1000 milli), or
* order B: the ``n`` small pods, then ``M`` mid pods (650 milli).

Both orders start with the same ``n`` pods, so a deterministic online policy reaches the same state after them
whichever follows. Every small pod is placed (a GPU has 320 milli free while fewer than ``M`` small pods are
placed, and CPU and memory never bind). Let ``a_k`` be the GPUs holding ``k`` small pods (k = 0..3, at most 3 fit:
4 x 320 > 1000), so ``sum a_k = M`` and ``a_1 + 2 a_2 + 3 a_3 = n``. Then what follows is forced:

* in A a whole pod fits exactly on a GPU with no small pod (any other has at most 680 free), so the run places
  ``a_0`` of them (there are ``M - ceil(n / 3) >= a_0`` since the small pods take at least ``ceil(n / 3)``
  GPUs): it allocates ``320 n + 1000 a_0``;
* in B a 650 fits exactly on a GPU with at most one small pod and no 650 (two small pods leave 360, a 650 leaves
  350), so the run places ``a_0 + a_1`` of them (``M`` arrive): ``320 n + 650 (a_0 + a_1)``.

The best run of A puts the small pods three to a GPU (``a_0 = M - ceil(n / 3)``), the best of B one to a GPU
(``a_0 + a_1 = M``). So the state costs the policy ``r_A = 1000 (M - ceil(n / 3) - a_0)`` milli against the best
run of A and ``r_B = 650 (M - a_0 - a_1)`` against the best of B, and every deterministic online policy has
``max(r_A, r_B) >= R = min over the states of max(r_A, r_B)`` on one of the two orders. A randomized policy is a
distribution over deterministic ones (Yao): if the adversary draws A with probability ``p``, each deterministic
policy loses ``p r_A + (1 - p) r_B`` in expectation, at least ``min over the states``; so for every ``p`` that
minimum is a lower bound on the larger of a randomized policy's two expected losses.

In the continuous limit (``a_2 = 0``: a GPU with two small pods loses on both orders) ``r_A = 2000 a_1 / 3`` and
``r_B = 650 (n - a_1) / 3``, equal at ``a_1 = 650 n / 2650``: ``R`` is about ``1000 x 650 n / 3975``, 0.1635 GPU
per small pod, and the Yao bound with ``p = 650 / 2650`` is the same. ``online_regret`` computes both exactly over
the integer states. Since every must-place bound is at least the best run, a policy that loses ``R`` against the
best run is at least ``R`` above any valid bound too: on these orders "within 10 GPUs of the bound" is
unreachable online once ``R`` exceeds 10 GPUs, from ``n`` = 62 small pods on 62 roomy GPUs.

With ``LIGHT`` the cluster is the whole 1,213-node Alibaba cluster (6,212 GPUs). The orders repeat each shape far
more often than ``default`` holds it (22 small, 2 mid and 15 whole pods of the ``LIGHT`` shapes; 78, 237 and 470
of ``COMMON``'s), and they ask at most the capacity (``0.32 n + M - ceil(n / 3)`` or ``0.32 n + 0.65 M`` GPUs
of milli), under the experiment's 130 %. Not proved here: anything about the experiment's random
orders."""


def roomy(node: OpenbNode, shapes: Shapes = COMMON) -> bool:
    """Whether CPU and memory never stop a pod of the adversary's orders on ``node`` (``ADVERSARY_DOC``): per
    GPU, room for the most its pods can take on one GPU (``Shapes.per_gpu``)."""
    cpu, mem = shapes.per_gpu
    return node.gpus > 0 and node.cpu_milli >= node.gpus * cpu and node.memory_mib >= node.gpus * mem


def adversary_orders(gpus: int, small: int, shapes: Shapes = COMMON) -> tuple[list[OpenbPod], list[OpenbPod]]:
    """Orders A and B of ``ADVERSARY_DOC`` for ``gpus`` roomy GPUs and ``small`` (at most ``gpus``) small pods."""
    if not 0 <= small <= gpus:
        raise ValueError(f"the adversary needs 0 <= small pods <= GPUs, got {small} and {gpus}")

    def pods(shape: OpenbPod, count: int) -> list[OpenbPod]:
        return [OpenbPod(f"{shape.name}-{i}", shape.cpu_milli, shape.memory_mib, 1, shape.gpu_milli)
                for i in range(count)]

    prefix = pods(shapes.small, small)
    return prefix + pods(shapes.whole, gpus - math.ceil(small / 3)), prefix + pods(shapes.mid, gpus)


def small_pods_per_gpu(gpu_free: Sequence[int]) -> tuple[int, int, int, int]:
    """``(a_0, a_1, a_2, a_3)`` of a state after the small pods, from each GPU's free milli."""
    counts = [0, 0, 0, 0]
    for free in gpu_free:
        k, rest = divmod(MILLI - free, SMALL.gpu_milli)
        assert rest == 0 and 0 <= k <= 3, f"not a state of small pods only: {free} milli free"
        counts[k] += 1
    return counts[0], counts[1], counts[2], counts[3]


def completions(state: tuple[int, int, int, int], gpus: int, small: int) -> tuple[int, int]:
    """The allocation of every must-place run from ``state`` on orders A and B (forced: ``ADVERSARY_DOC``)."""
    a0, a1, _a2, _a3 = state
    base = SMALL.gpu_milli * small
    return base + MILLI * min(a0, gpus - math.ceil(small / 3)), base + MID.gpu_milli * min(a0 + a1, gpus)


@dataclass(frozen=True, slots=True)
class OnlineRegret:
    gpus: int
    small: int
    best_a_milli: int
    """The best must-place run of order A (small pods three to a GPU)."""
    best_b_milli: int
    """The best must-place run of order B (small pods one to a GPU)."""
    deterministic_milli: int
    """``R``: every deterministic online policy is at least this far below the best run on A or on B."""
    state: tuple[int, int, int, int]
    """A state ``(a_0..a_3)`` that reaches ``R`` (the best a deterministic policy can do)."""
    p_a: float
    """The adversary's probability of order A for the randomized figure."""
    randomized_milli: float
    """Every randomized online policy loses at least this in expectation on A (drawn with ``p_a``) or B."""

    @property
    def deterministic_gpus(self) -> float:
        return self.deterministic_milli / MILLI

    @property
    def randomized_gpus(self) -> float:
        return self.randomized_milli / MILLI


def states(gpus: int, small: int, *, every: bool = False) -> list[tuple[int, int, int, int]]:
    """The ``(a_0, a_1, a_2, a_3)`` with ``sum a_k = gpus`` and ``a_1 + 2 a_2 + 3 a_3 = small`` and ``a_2 <= 2``
    (``every``: any ``a_2``). A state with ``a_2 >= 3`` loses more on both orders than the one with three GPUs of
    two small pods made two of three: ``a_0`` one more (less lost on A), ``a_2 + a_3`` one fewer (less lost on B:
    ``M - a_0 - a_1 = a_2 + a_3``), so it never gives the least loss."""
    out = []
    for a3 in range(small // 3 + 1):
        for a2 in range((small - 3 * a3) // 2 + 1):
            if a2 > 2 and not every:
                break
            a1 = small - 3 * a3 - 2 * a2
            a0 = gpus - a1 - a2 - a3
            if a0 >= 0:
                out.append((a0, a1, a2, a3))
    return out


def online_regret(gpus: int, small: int, *, every: bool = False) -> OnlineRegret:
    """``ADVERSARY_DOC``'s figures, exactly over the integer states (``p_a``: the probability that maximises the
    randomized figure, found by golden-section search on the concave function; any ``p`` gives a valid figure;
    ``every``: over every state, not only those of ``states``' ``a_2 <= 2``)."""
    if not 0 <= small <= gpus:
        raise ValueError(f"the adversary needs 0 <= small pods <= GPUs, got {small} and {gpus}")
    best_a = SMALL.gpu_milli * small + MILLI * (gpus - math.ceil(small / 3))
    best_b = SMALL.gpu_milli * small + MID.gpu_milli * gpus
    losses = []
    for s in states(gpus, small, every=every):
        got_a, got_b = completions(s, gpus, small)
        losses.append((best_a - got_a, best_b - got_b, s))
    r, _, _, where = min((max(ra, rb), ra, rb, s) for ra, rb, s in losses)

    def expected(p: float) -> float:
        return min(p * ra + (1 - p) * rb for ra, rb, _ in losses)

    lo, hi = 0.0, 1.0
    ratio = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        x1, x2 = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
        if expected(x1) < expected(x2):
            lo = x1
        else:
            hi = x2
    p = (lo + hi) / 2
    return OnlineRegret(gpus, small, best_a, best_b, r, where, p, expected(p))
