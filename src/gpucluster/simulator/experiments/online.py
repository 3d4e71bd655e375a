"""What no *online* must-place policy can guarantee: an adversary built from the workload's own pod shapes (issue 30).

ADVERSARY_DOC below states the construction and its proof; ``online_regret`` computes its figures exactly for a
cluster of ``gpus`` roomy GPUs and ``small`` 320-milli pods, ``adversary_orders`` builds the two orders, and
``bench/online_adversary.py`` prints the figures and runs the shipped policies on both orders.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gpucluster.simulator.traces.openb import OpenbNode, OpenbPod

MILLI = 1000

SMALL = OpenbPod("small", 4000, 15258, 1, 320)
"""The 320-milli pod of ``default`` with 4 cores and 15,258 MiB (78 of its 8,152 pods)."""
MID = OpenbPod("mid", 11908, 47104, 1, 650)
"""The 650-milli pod of ``default`` (11.908 cores, 47,104 MiB; 237 pods)."""
WHOLE = OpenbPod("whole", 3152, 5600, 1, MILLI)
"""The whole-GPU pod of ``default`` with the key pod's CPU and memory (3.152 cores, 5,600 MiB; 470 pods)."""

ADVERSARY_DOC = """No online must-place policy is near the best run on every order (issue 30's "or the proof that it
is unreachable online").

*What can be proved at all.* For one fixed input (``default``, seed 42, its 10,825 pods in their order) no
statement "no online policy reaches X" can hold when some run reaches X: the policy that places pod i where
that run placed it whenever the pods seen so far are that input's first i pods is online (each decision uses
only the pods that have arrived). So "unreachable online" is a statement about a *family* of inputs: a policy
that does not know which member arrives must lose on some member. This module proves such a statement for the
family of orders of the workload's own shapes below; it says nothing about the experiment's random orders
(a shuffle of the trace), where these orders have a vanishing probability, and nothing about seed 42.

*The family.* A cluster of ``M`` GPUs on *roomy* nodes (``roomy``: per GPU at least 15,908 CPU milli and
62,362 MiB, so that CPU and memory never stop a pod below: a GPU holds at most a 320- and a 650-milli pod,
4 + 11.908 cores, or three 320s, 12 cores), and ``n <= M`` pods ``SMALL`` (320 milli). Then either

* order A: the ``n`` small pods, then ``M - ceil(n / 3)`` pods ``WHOLE`` (1000 milli), or
* order B: the ``n`` small pods, then ``M`` pods ``MID`` (650 milli).

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

Not proved here: any such figure for the 1,213-node Alibaba cluster as a whole (its G2, V100 and small P100 nodes
are not roomy: on them CPU can stop a 650 beside a 320, and the forced completions above no longer hold), or for
the experiment's random orders."""


def roomy(node: OpenbNode) -> bool:
    """Whether CPU and memory never stop a pod of the adversary's orders on ``node`` (``ADVERSARY_DOC``): per
    GPU, room for a ``SMALL`` and a ``MID`` pod (more than three small pods or one whole pod ask)."""
    per_cpu = SMALL.cpu_milli + MID.cpu_milli
    per_mem = SMALL.memory_mib + MID.memory_mib
    assert per_cpu >= max(3 * SMALL.cpu_milli, WHOLE.cpu_milli)
    assert per_mem >= max(3 * SMALL.memory_mib, WHOLE.memory_mib)
    return node.gpus > 0 and node.cpu_milli >= node.gpus * per_cpu and node.memory_mib >= node.gpus * per_mem


def adversary_orders(gpus: int, small: int) -> tuple[list[OpenbPod], list[OpenbPod]]:
    """Orders A and B of ``ADVERSARY_DOC`` for ``gpus`` roomy GPUs and ``small`` (at most ``gpus``) small pods."""
    if not 0 <= small <= gpus:
        raise ValueError(f"the adversary needs 0 <= small pods <= GPUs, got {small} and {gpus}")
    prefix = [OpenbPod(f"small-{i}", SMALL.cpu_milli, SMALL.memory_mib, 1, SMALL.gpu_milli) for i in range(small)]
    whole = [OpenbPod(f"whole-{i}", WHOLE.cpu_milli, WHOLE.memory_mib, 1, MILLI)
             for i in range(gpus - math.ceil(small / 3))]
    mid = [OpenbPod(f"mid-{i}", MID.cpu_milli, MID.memory_mib, 1, MID.gpu_milli) for i in range(gpus)]
    return prefix + whole, prefix + mid


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


def states(gpus: int, small: int) -> list[tuple[int, int, int, int]]:
    """Every ``(a_0, a_1, a_2, a_3)`` with ``sum a_k = gpus`` and ``a_1 + 2 a_2 + 3 a_3 = small``."""
    out = []
    for a3 in range(small // 3 + 1):
        for a2 in range((small - 3 * a3) // 2 + 1):
            a1 = small - 3 * a3 - 2 * a2
            a0 = gpus - a1 - a2 - a3
            if a0 >= 0:
                out.append((a0, a1, a2, a3))
    return out


def online_regret(gpus: int, small: int) -> OnlineRegret:
    """``ADVERSARY_DOC``'s figures, exactly over the integer states (``p_a``: the probability that maximises the
    randomized figure, found by golden-section search on the concave function; any ``p`` gives a valid figure)."""
    if not 0 <= small <= gpus:
        raise ValueError(f"the adversary needs 0 <= small pods <= GPUs, got {small} and {gpus}")
    best_a = SMALL.gpu_milli * small + MILLI * (gpus - math.ceil(small / 3))
    best_b = SMALL.gpu_milli * small + MID.gpu_milli * gpus
    losses = []
    for s in states(gpus, small):
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
