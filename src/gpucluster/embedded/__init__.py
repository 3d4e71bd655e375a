"""The embedded backend: a simulated cluster on the wall clock behind the control plane (``gpucluster up``
without ``--kubeconfig``).

* :mod:`~gpucluster.embedded.runtime`: :class:`EmbeddedRuntime`, the job simulator (the one job engine) driven by
  the service's clock, with random faults, the simulated technician and :class:`EmbeddedTarget` (remediation that
  keeps jobs whole);
* :mod:`~gpucluster.embedded.monitor`: :class:`ClusterMonitor`, monitoring's simulated collectors, rules and
  remediator wired to a runtime;
* :mod:`~gpucluster.embedded.workload`: :class:`SyntheticWorkload`, the light background workload that keeps the
  demo cluster busy.

It sits above ``simulator`` and ``monitoring`` and below ``service`` (which picks it or the Kubernetes runtime).
"""

from gpucluster.embedded.monitor import ClusterMonitor
from gpucluster.embedded.runtime import EmbeddedRuntime, EmbeddedTarget, embedded_simulation, run_steps
from gpucluster.embedded.workload import SHAPES, Arrival, SyntheticWorkload

__all__ = ["SHAPES", "Arrival", "ClusterMonitor", "EmbeddedRuntime", "EmbeddedTarget", "SyntheticWorkload",
           "embedded_simulation", "run_steps"]
