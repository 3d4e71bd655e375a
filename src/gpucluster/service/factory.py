"""Pick the runtime behind the control plane: embedded (default) or a real Kubernetes cluster.

Both drive the one job engine (:mod:`gpucluster.jobs`) with the same placement and queue policies. With
``--kubeconfig`` the service builds ``gpucluster.kubernetes.KubeRuntime`` (nodes from the API server's informer,
jobs as Pods the engine places and binds with the KubeBinder). A kubeconfig that cannot be loaded or an API
server that does not answer is a :class:`RuntimeUnavailableError` naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpucluster.devices import DeviceSettings
from gpucluster.embedded import EmbeddedRuntime
from gpucluster.jobs import DEFAULT_QUEUE_POLICY
from gpucluster.monitoring import RemediationPolicy
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY
from gpucluster.service.runtime import Runtime
from gpucluster.spec import Cluster


class RuntimeUnavailableError(RuntimeError):
    """The requested backend cannot be started (``str`` says which option and why)."""


@dataclass(frozen=True, slots=True)
class RuntimeOptions:
    cluster: Cluster | None = None
    """Cluster to simulate (embedded); None with no kubeconfig is an error of the caller."""
    kubeconfig: Path | None = None
    placement_policy: str = DEFAULT_PLACEMENT_POLICY
    """Placement policy (``gpucluster.scheduler.PROFILES``)."""
    queue_policy: str = DEFAULT_QUEUE_POLICY
    """Queue policy (``gpucluster.jobs.POLICIES``)."""
    background: float = 0.6
    """Target load of the synthetic background workload (0 = none)."""
    fault_rate_per_hour: float = 1.0
    """Injected device faults per clock hour (0 = none)."""
    seed: int = 0
    devices: DeviceSettings | None = None
    """Device settings (``--device-config``); None = HAMi's defaults."""
    remediation: RemediationPolicy | None = None
    """What automatic remediation may do (``up --remediate``); None = the monitoring package's default."""
    namespace: str = "default"
    """Kubernetes: the namespace of the Jobs made for jobs of the API."""
    admission: str = "devices"
    """Kubernetes: ``devices`` (admit only with a placement on real devices) or ``count`` (GPU count alone, as
    Kueue admits; for comparison)."""
    leader_elect: bool = True
    """Kubernetes: replicas elect a leader on a Lease (only the leader admits)."""
    lease_name: str = "gpucluster-control-plane"
    lease_namespace: str | None = None
    """Namespace of the Lease (default: ``namespace``)."""
    lease_duration: float = 15.0
    identity: str | None = None
    """This replica's name in the Lease (default ``<host>-<pid>``)."""
    pod_groups: str = "all"
    """Kubernetes: which bare pods of a pod group are jobs of the queue: ``all``, ``labelled``
    (``gpucluster.io/queue``) or ``none``."""


def build_runtime(opts: RuntimeOptions) -> Runtime:
    if opts.kubeconfig is not None:
        from gpucluster.kubernetes import KubeRuntime

        try:
            runtime: Runtime = KubeRuntime(kubeconfig=opts.kubeconfig, placement_policy=opts.placement_policy,
                                           queue_policy=opts.queue_policy, devices=opts.devices,
                                           namespace=opts.namespace, admission=opts.admission,
                                           leader_elect=opts.leader_elect, lease_name=opts.lease_name,
                                           lease_namespace=opts.lease_namespace,
                                           lease_duration=opts.lease_duration, identity=opts.identity,
                                           pod_groups=opts.pod_groups)
        except (ValueError, OSError) as exc:  # KubeConfigError; ConnectionError/TimeoutError from the API server
            raise RuntimeUnavailableError(f"--kubeconfig: {exc}") from None
        return runtime
    if opts.cluster is None:
        raise RuntimeUnavailableError("--cluster: no cluster to run")
    return EmbeddedRuntime(opts.cluster, opts.placement_policy, opts.background, opts.fault_rate_per_hour, opts.seed,
                           queue_policy=opts.queue_policy, devices=opts.devices, remediation=opts.remediation)
