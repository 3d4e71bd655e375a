"""Simulation: trace loaders, the FGD placement experiment, and the discrete-event job simulator (the job
engine of :mod:`gpucluster.jobs` with a network model and faults).

The job simulator's public API (importable without the CLI)::

    from gpucluster.simulator import JobSpec, Simulation, generate
"""

from gpucluster.jobs import (
    DEFAULT_QUEUE_POLICY,
    POLICIES,
    Job,
    JobEvent,
    JobKind,
    JobSpec,
    JobState,
    Kernel,
    jobs_profile,
    make_policy,
)
from gpucluster.simulator.faults import Fault, FaultKind, random_node_failures
from gpucluster.simulator.network import NetworkModel
from gpucluster.simulator.runner import Simulation
from gpucluster.simulator.traces import TraceError
from gpucluster.simulator.traces.formats import TRACE_FORMATS, load_trace, main_gpu_model, with_ref_gpu
from gpucluster.simulator.traces.synthetic import generate

__all__ = [
    "DEFAULT_QUEUE_POLICY",
    "POLICIES",
    "TRACE_FORMATS",
    "Fault",
    "FaultKind",
    "Job",
    "JobEvent",
    "JobKind",
    "JobSpec",
    "JobState",
    "Kernel",
    "NetworkModel",
    "Simulation",
    "TraceError",
    "generate",
    "jobs_profile",
    "load_trace",
    "main_gpu_model",
    "make_policy",
    "random_node_failures",
    "with_ref_gpu",
]
