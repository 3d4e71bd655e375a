"""Simulation: trace loaders, the FGD placement experiment, and the discrete-event job simulator.

The job simulator's public API (importable without the CLI)::

    from gpucluster.simulator import JobSpec, Simulation, generate
"""

from gpucluster.simulator.faults import Fault, FaultKind, random_node_failures
from gpucluster.simulator.jobs import Job, JobKind, JobSpec, JobState, TraceError
from gpucluster.simulator.kernel import Kernel
from gpucluster.simulator.network import NetworkModel
from gpucluster.simulator.policies import DEFAULT_POLICY, POLICIES, make_policy
from gpucluster.simulator.runner import SimEvent, Simulation, jobs_profile
from gpucluster.simulator.traces.synthetic import generate

__all__ = [
    "DEFAULT_POLICY",
    "POLICIES",
    "Fault",
    "FaultKind",
    "Job",
    "JobKind",
    "JobSpec",
    "JobState",
    "Kernel",
    "NetworkModel",
    "SimEvent",
    "Simulation",
    "TraceError",
    "generate",
    "jobs_profile",
    "make_policy",
    "random_node_failures",
]
