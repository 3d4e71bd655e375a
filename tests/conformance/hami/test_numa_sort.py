"""HAMi ``pkg/scheduler/numa_sort_test.go`` (v2.10.0): NUMA binding keeps a NUMA node's GPUs together so a
multi-GPU request finds them; without it the device score decides across NUMA nodes. The cases' injected device
scores become usage that yields the same order (more tasks, higher score)."""

from __future__ import annotations

from tests.conformance.hami.harness import Dev, hami_request, placed, request_pod, schedule, state_of


def test_numa_bind_sort_preserves_affinity() -> None:
    """TestNumaBindSortPreservesAffinity: A (NUMA 0, score 5), B (NUMA 0, score 1), C (NUMA 1, score 3); a 2-GPU
    numa-bind request fits on A and B."""
    state = state_of({"n": [Dev("A_n0", used=5, numa=0, totalmem=8192), Dev("B_n0", used=1, numa=0, totalmem=8192),
                            Dev("C_n1", used=3, numa=1, totalmem=8192)]})
    pod = request_pod([hami_request(2, 100, cores=10)], annotations={"nvidia.com/numa-bind": "true"})
    assert {u for u, _, _ in placed(schedule(state, pod))[0]} == {"A_n0", "B_n0"}


def test_score_primary_selects_across_numa() -> None:
    """TestScorePrimarySelectsAcrossNuma: without numa-bind, spread takes the idlest device (P, NUMA 0) over the
    busier ones on NUMA 1."""
    state = state_of({"n": [Dev("P_n0", used=1, numa=0, totalmem=8192), Dev("Q_n1", used=8, numa=1, totalmem=8192),
                            Dev("R_n1", used=5, numa=1, totalmem=8192)]})
    assert placed(schedule(state, request_pod([hami_request(1, 100, cores=10)]))) == [[("P_n0", 100, 10)]]
