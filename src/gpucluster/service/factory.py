"""Pick the runtime behind the control plane: embedded (default) or a real Kubernetes cluster.

The Kubernetes seam: with ``--kubeconfig`` the service imports ``gpucluster.kubernetes`` and calls
``gpucluster.kubernetes.KubeRuntime(kubeconfig=Path, policy=str, status_type=JobStatus, event_type=JobEvent)``;
that class implements :class:`~gpucluster.service.runtime.Runtime` (nodes from the API server's informer, jobs as
Pods placed by the same scheduler and bound with the KubeBinder). ``gpucluster.kubernetes`` sits below
``service`` in the import layers, so the service hands it the job vocabulary it must answer in. A kubeconfig that
cannot be loaded or an API server that does not answer is a :class:`RuntimeUnavailableError` naming the flag.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path

from gpucluster.devices import DeviceSettings
from gpucluster.monitoring import RemediationPolicy
from gpucluster.scheduler import DEFAULT_POLICY
from gpucluster.service.embedded import EmbeddedRuntime
from gpucluster.service.runtime import JobEvent, JobStatus, Runtime
from gpucluster.spec import Cluster

KUBE_PACKAGE = "gpucluster.kubernetes"
KUBE_RUNTIME = "KubeRuntime"


class RuntimeUnavailableError(RuntimeError):
    """The requested backend cannot be started (``str`` says which option and why)."""


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    cluster: Cluster | None = None
    """Cluster to simulate (embedded); None with no kubeconfig is an error of the caller."""
    kubeconfig: Path | None = None
    policy: str = DEFAULT_POLICY
    background: float = 0.6
    """Target load of the synthetic background workload (0 = none)."""
    fault_rate_per_hour: float = 1.0
    """Injected device faults per clock hour (0 = none)."""
    seed: int = 0
    devices: DeviceSettings | None = None
    """Device settings (``--device-config``); None = HAMi's defaults."""
    remediation: RemediationPolicy | None = None
    """What automatic remediation may do (``up --remediate``); None = the monitoring package's default."""


def build_runtime(opts: RuntimeOptions) -> Runtime:
    if opts.kubeconfig is not None:
        missing = (f"--kubeconfig: the Kubernetes backend for the control plane ({KUBE_PACKAGE}.{KUBE_RUNTIME}) "
                   "is not in this build yet; run without --kubeconfig for the embedded cluster")
        try:
            module = importlib.import_module(KUBE_PACKAGE)
        except ModuleNotFoundError as exc:
            if exc.name and KUBE_PACKAGE.startswith(exc.name):
                raise RuntimeUnavailableError(missing) from None
            raise
        factory = getattr(module, KUBE_RUNTIME, None)
        if factory is None:
            raise RuntimeUnavailableError(missing)
        try:
            runtime: Runtime = factory(kubeconfig=opts.kubeconfig, policy=opts.policy, status_type=JobStatus,
                                       event_type=JobEvent, devices=opts.devices)
        except (ValueError, OSError) as exc:  # KubeConfigError; ConnectionError/TimeoutError from the API server
            raise RuntimeUnavailableError(f"--kubeconfig: {exc}") from None
        return runtime
    if opts.cluster is None:
        raise RuntimeUnavailableError("--cluster: no cluster to run")
    return EmbeddedRuntime(opts.cluster, opts.policy, opts.background, opts.fault_rate_per_hour, opts.seed,
                           devices=opts.devices, remediation=opts.remediation)
