"""Deployment manifests: ServiceAccount, least-privilege RBAC, ConfigMap with the KubeSchedulerConfiguration
(``kubescheduler.config.k8s.io/v1beta1``, the version Kubernetes 1.20 reads), Deployment and Service.

``extender`` mode: one Deployment running a kube-scheduler (profile ``gpucluster``) next to our extender,
HAMi-style. ``scheduler`` mode: our own secondary scheduler, two replicas with leader election.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

import yaml

from gpucluster.devices import VendorRegistry

Mode = Literal["extender", "scheduler"]
APP = "gpucluster-scheduler"


def managed_resources(registry: VendorRegistry) -> list[str]:
    out: list[str] = []
    for v in registry:
        n = v.names
        out += [r for r in (n.resource_count, n.resource_memory, n.resource_memory_pct, n.resource_cores) if r]
    return out


def scheduler_config(extender_url: str, registry: VendorRegistry, scheduler_name: str = "gpucluster",
                     node_cache_capable: bool = True, leader_elect: bool = False,
                     namespace: str = "kube-system") -> dict[str, Any]:
    """A KubeSchedulerConfiguration with our extender (filter, prioritize, bind) managing every vendor's
    resources (``ignoredByScheduler``: kube-scheduler does not count them itself)."""
    cfg: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": leader_elect},
        "percentageOfNodesToScore": 100,
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [{
            "urlPrefix": extender_url,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "bindVerb": "bind",
            "weight": 1,
            "enableHTTPS": False,
            "nodeCacheCapable": node_cache_capable,
            "httpTimeout": "30s",
            "ignorable": False,
            "managedResources": [{"name": r, "ignoredByScheduler": True} for r in managed_resources(registry)],
        }],
    }
    if leader_elect:
        cfg["leaderElection"].update(resourceNamespace=namespace, resourceName=f"{scheduler_name}-kube-scheduler")
    return cfg


def _rbac(namespace: str, mode: Mode) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
        {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    out: list[dict[str, Any]] = [
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
         "metadata": {"name": APP}, "rules": rules},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": APP},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": APP},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}]},
        # leases for leader election, only in our namespace
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": {"name": f"{APP}-leases", "namespace": namespace},
         "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "verbs": ["get", "create", "update"]}]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{APP}-leases", "namespace": namespace},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{APP}-leases"},
         "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}]},
    ]
    if mode == "extender":
        # the kube-scheduler container runs with the same account: Kubernetes' own roles for it
        for role in ("system:kube-scheduler", "system:volume-scheduler"):
            out.append({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": f"{APP}-{role.split(':')[1]}"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": APP, "namespace": namespace}],
            })
    return out


def manifests(mode: Mode, registry: VendorRegistry, *, namespace: str = "kube-system",
              image: str = "ghcr.io/gpucluster/gpucluster:0.1.0",
              kube_scheduler_image: str = "k8s.gcr.io/kube-scheduler:v1.20.2",
              scheduler_name: str = "gpucluster", port: int = 8888, policy: str = "default") -> list[dict[str, Any]]:
    if mode not in ("extender", "scheduler"):
        raise ValueError(f"mode: must be extender or scheduler, got {mode!r}")
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/component": mode}
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": APP, "namespace": namespace}},
        *_rbac(namespace, mode),
    ]
    probe = {"httpGet": {"path": "/healthz", "port": port}, "periodSeconds": 10}
    ours_args = ["--policy", policy, "--scheduler-name", scheduler_name]
    containers: list[dict[str, Any]]
    volumes: list[dict[str, Any]] = []
    if mode == "extender":
        cfg = scheduler_config(f"http://127.0.0.1:{port}", registry, scheduler_name, leader_elect=False,
                               namespace=namespace)
        objs.append({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{APP}-config", "namespace": namespace},
            "data": {"config.yaml": yaml.safe_dump(cfg, sort_keys=False)},
        })
        containers = [
            {"name": "kube-scheduler", "image": kube_scheduler_image,
             "command": ["kube-scheduler", "--config=/config/config.yaml", "--v=2"],
             "volumeMounts": [{"name": "config", "mountPath": "/config"}]},
            {"name": "extender", "image": image,
             "command": ["gpucluster", "k8s", "extender", "--listen", f"0.0.0.0:{port}", *ours_args],
             "ports": [{"name": "http", "containerPort": port}], "readinessProbe": probe},
        ]
        volumes = [{"name": "config", "configMap": {"name": f"{APP}-config"}}]
        replicas = 1
    else:
        containers = [
            {"name": "scheduler", "image": image,
             "command": ["gpucluster", "k8s", "scheduler", "--namespace", namespace,
                         "--listen", f"0.0.0.0:{port}", *ours_args],
             "env": [{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
             "ports": [{"name": "http", "containerPort": port}], "readinessProbe": probe},
        ]
        replicas = 2
    for c in containers:
        c["resources"] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
    objs.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": APP, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"serviceAccountName": APP, "priorityClassName": "system-cluster-critical",
                         "containers": containers, "volumes": volumes},
            },
        },
    })
    objs.append({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": APP, "namespace": namespace, "labels": labels},
        "spec": {"selector": labels, "ports": [{"name": "http", "port": port, "targetPort": port}]},
    })
    return objs


def to_yaml(objs: Iterable[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs)
