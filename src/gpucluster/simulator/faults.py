"""Faults: node and device failures with repairs, scripted or drawn at random, applied to a Simulation.

Monitoring and tests inject faults through :func:`apply` (a plan of :class:`Fault` records) or directly
through ``Simulation.fail_node`` / ``fail_device`` / ``repair_node``. A failed node's jobs are evicted and
re-queued; they restart from their last periodic checkpoint (``JobSpec.checkpoint_interval_s``), so work is
lost but jobs never are.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from gpucluster.simulator.runner import Simulation


class FaultKind(enum.StrEnum):
    NODE = "node"
    """The whole node goes down (power, kernel panic, NIC)."""
    DEVICE = "device"
    """One GPU goes bad (XID 79 fell off the bus, XID 48 double-bit ECC)."""


@dataclass(frozen=True, slots=True)
class Fault:
    at_s: float
    node: str
    repair_after_s: float | None
    """None = stays down until repaired by hand."""
    kind: FaultKind = FaultKind.NODE
    device: int = 0


def random_node_failures(
    nodes: Sequence[str], horizon_s: float, mtbf_s: float, mttr_s: float, seed: int = 0
) -> list[Fault]:
    """Independent failures per node: exponential time between failures (mean ``mtbf_s``) and repair times
    (mean ``mttr_s``), up to ``horizon_s``."""
    if mtbf_s <= 0 or mttr_s <= 0:
        raise ValueError("MTBF and MTTR must be > 0")
    rng = np.random.default_rng(seed)
    out: list[Fault] = []
    for name in nodes:
        t = float(rng.exponential(mtbf_s))
        while t < horizon_s:
            repair = float(rng.exponential(mttr_s))
            out.append(Fault(t, name, repair))
            t += repair + float(rng.exponential(mtbf_s))
    out.sort(key=lambda f: (f.at_s, f.node))
    return out


def apply(sim: Simulation, faults: Iterable[Fault]) -> None:
    """Schedule the faults into the simulation (at their times; past times happen now)."""
    for f in faults:
        if f.node not in sim.state.node_index:
            raise ValueError(f"fault at {f.at_s}: unknown node {f.node!r}")
        if f.kind == FaultKind.NODE:
            sim.at(f.at_s, lambda f=f: _fail_node(sim, f))  # type: ignore[misc]
        else:
            sim.at(f.at_s, lambda f=f: _fail_device(sim, f))  # type: ignore[misc]


def _fail_node(sim: Simulation, f: Fault) -> None:
    sim.fail_node(f.node, f.repair_after_s)


def _fail_device(sim: Simulation, f: Fault) -> None:
    sim.fail_device(f.node, f.device, f.repair_after_s)
