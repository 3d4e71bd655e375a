"""Shared builders for the monitoring tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.model import ClusterState, Pod
from gpucluster.monitoring import SimSource
from gpucluster.scheduler import Outcome, Scheduler, profile_for
from tests.helpers import gpu_node, gpu_pod


class FakeClock:
    """A clock tests move by hand."""

    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def small_state(nodes: int = 3, gpus: int = 4, memory_mib: int = 81920) -> ClusterState:
    return ClusterState([gpu_node(f"n{i}", gpus=gpus, memory_mib=memory_mib, model="H100-SXM5-80GB")
                         for i in range(nodes)])


def place(sched: Scheduler, pods: list[Pod]) -> list[Pod]:
    """Schedule pods; returns those that did not fit."""
    return [p for p in pods if sched.schedule_and_bind(p).outcome != Outcome.SCHEDULED]


def activity_pod(name: str, activity: str, count: int = 1, cores_pct: int = 100, memory_mib: int = 40000,
                 **kw: object) -> Pod:
    return gpu_pod(name, count=count, cores_pct=cores_pct, memory_mib=memory_mib,
                   annotations={"gpucluster.io/activity": activity}, **kw)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def make_sim(clock: FakeClock) -> Callable[..., tuple[ClusterState, Scheduler, SimSource]]:
    def make(nodes: int = 3, gpus: int = 4, policy: str = "binpack") -> tuple[ClusterState, Scheduler, SimSource]:
        state = small_state(nodes, gpus)
        sched = Scheduler(state, profile_for(policy))
        return state, sched, SimSource(state, clock=clock)

    return make
