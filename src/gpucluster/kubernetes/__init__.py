"""Kubernetes backend: the only package importing the ``kubernetes`` client. Extender server, secondary
scheduler with gangs and leader election, node registration, recovery from pod annotations, manifests, and
``KubeRuntime``, the control plane's backend for a real cluster (``gpucluster up --kubeconfig``)."""

from gpucluster.kubernetes.backend import KubeRuntime
from gpucluster.kubernetes.binder import KubeBinder
from gpucluster.kubernetes.cluster import KubeCluster, NodeGate, kube_profile, kube_registry
from gpucluster.kubernetes.convert import (
    KubeInputError,
    NodeInfo,
    allocation_from_pod,
    decision_annotations,
    format_handshake,
    node_info,
    parse_handshake,
)
from gpucluster.kubernetes.extender import ExtenderError, ExtenderLogic, ExtenderServer
from gpucluster.kubernetes.informer import Informer
from gpucluster.kubernetes.leader import LeaderElector
from gpucluster.kubernetes.manifests import manifests, scheduler_config, to_yaml
from gpucluster.kubernetes.register import NodeRegistrar, node_manifest
from gpucluster.kubernetes.remediation import KubeRemediationTarget
from gpucluster.kubernetes.secondary import SecondaryScheduler

__all__ = [
    "ExtenderError",
    "ExtenderLogic",
    "ExtenderServer",
    "Informer",
    "KubeBinder",
    "KubeCluster",
    "KubeInputError",
    "KubeRemediationTarget",
    "KubeRuntime",
    "LeaderElector",
    "NodeGate",
    "NodeInfo",
    "NodeRegistrar",
    "SecondaryScheduler",
    "allocation_from_pod",
    "decision_annotations",
    "format_handshake",
    "kube_profile",
    "kube_registry",
    "manifests",
    "node_info",
    "node_manifest",
    "parse_handshake",
    "scheduler_config",
    "to_yaml",
]
