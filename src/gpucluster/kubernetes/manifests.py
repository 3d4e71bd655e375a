"""Deployment manifests for a given Kubernetes version: what ``gpucluster k8s manifests`` prints, what the Helm
chart (``charts/gpucluster``) and the Kustomize overlays (``deploy/kustomize``) hold. Tests render all three
and compare them object by object, so this module is the reference the chart follows.

* ``extender`` mode: a Deployment whose pods run kube-scheduler (profile ``gpucluster``) with our extender as a
  sidecar, HAMi-style; ``replicas`` pods elect a leader through kube-scheduler's own Lease, so only the
  leader's kube-scheduler calls (its own) extender and binds.
* ``scheduler`` mode: our own secondary scheduler, ``replicas`` pods with our leader election.
* optionally: the agent as a DaemonSet on GPU nodes, ``gpucluster up`` against the cluster (in-cluster
  service account), node registration for a simulated twin (``k8s register-nodes``), a ServiceMonitor, a
  PrometheusRule (the text of ``gpucluster monitor rules``) and a Grafana dashboard ConfigMap (sidecar label).

Supported and tested: Kubernetes 1.35, 1.36 and 1.37 (the releases in support in December 2026); older versions
are refused (``--kube-version``). The KubeSchedulerConfiguration is ``kubescheduler.config.k8s.io/v1``, the only
version those kube-schedulers read. Every container runs with the
restricted Pod Security profile (non-root, no privilege escalation, all capabilities dropped, RuntimeDefault
seccomp, read-only root file system).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from gpucluster.devices import VendorRegistry

Mode = Literal["extender", "scheduler"]
APP = "gpucluster-scheduler"
"""Name of the scheduler's objects for the default release name ``gpucluster``."""
DEFAULT_KUBE_VERSION = "1.37"
"""The newest Kubernetes minor we test (the default target)."""
MIN_KUBE_VERSION = (1, 35)
"""The oldest Kubernetes minor we test (integration tests run on 1.35 and 1.37, the chart is validated for 1.36)."""
KUBE_SCHEDULER_REPOSITORY = "registry.k8s.io/kube-scheduler"
KUBE_SCHEDULER_PATCH: Mapping[int, int] = {35: 4, 36: 3, 37: 2}
"""Patch release of registry.k8s.io/kube-scheduler used when ``--kube-version`` names only a minor (a
published release of that minor; give X.Y.Z to match your cluster's exact version)."""
DEFAULT_IMAGE = "ghcr.io/gpucluster/gpucluster:0.1.0"
"""The image ``Containerfile`` builds (tag it and push it to your registry; set ``--image``)."""
RUN_AS = 65532
"""Non-root uid/gid every container runs as (the image's ``gpucluster`` user)."""

SCHEDULER_PORT = 8888
AGENT_PORT = 9400
UP_PORT = 8080


class KubeVersionError(ValueError):
    """A ``--kube-version`` that is not X.Y[.Z] or older than we support."""


def parse_kube_version(text: str) -> tuple[int, int, int | None]:
    """``1.33`` / ``v1.33.1`` -> (1, 33, None) / (1, 33, 1); raises :class:`KubeVersionError`."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+].*)?", text.strip())
    if not m:
        raise KubeVersionError(f"--kube-version {text!r}: expected MAJOR.MINOR[.PATCH], e.g. 1.33 or v1.30.4")
    major, minor = int(m.group(1)), int(m.group(2))
    if (major, minor) < MIN_KUBE_VERSION:
        raise KubeVersionError(f"--kube-version {text!r}: Kubernetes {major}.{minor} is older than the oldest we "
                               f"support and test ({MIN_KUBE_VERSION[0]}.{MIN_KUBE_VERSION[1]})")
    return major, minor, None if m.group(3) is None else int(m.group(3))


def scheduler_api_version(kube_version: str) -> str:
    """The ``kubescheduler.config.k8s.io`` version that kube-scheduler of that release reads: ``v1`` for every
    supported release (v1beta3 was removed in 1.29); raises :class:`KubeVersionError` for older ones."""
    parse_kube_version(kube_version)
    return "kubescheduler.config.k8s.io/v1"


def kube_scheduler_image(kube_version: str) -> str:
    """``registry.k8s.io/kube-scheduler:vX.Y.Z`` for the version (a published patch when only X.Y is given)."""
    major, minor, patch = parse_kube_version(kube_version)
    if not patch:  # X.Y or X.Y.0 (Helm's .Capabilities cannot tell them apart): a patched release
        patch = KUBE_SCHEDULER_PATCH.get(minor, 0)
    return f"{KUBE_SCHEDULER_REPOSITORY}:v{major}.{minor}.{patch}"


def managed_resources(registry: VendorRegistry) -> list[str]:
    out: list[str] = []
    for v in registry:
        n = v.names
        out += [r for r in (n.resource_count, n.resource_memory, n.resource_memory_pct, n.resource_cores) if r]
    return out


DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE = 100
"""kube-scheduler's ``percentageOfNodesToScore`` in the configuration we render: 100 = kube-scheduler filters
every node and the extender sees (and scores) every feasible one, so its placement (FGD, topology, gangs) is
chosen over the whole cluster; lower stops filtering once that share of the nodes is feasible (fewer candidates,
less work per pod on a large cluster); 0 = kube-scheduler's adaptive default (50 % minus 1 % per 125 nodes, at
least 5 %)."""


def check_percentage_of_nodes_to_score(value: int) -> int:
    """``value`` when it is a whole number 0..100, else ``ValueError`` saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 100:
        raise ValueError(f"percentageOfNodesToScore: expected a whole number 0..100 (0 = kube-scheduler's "
                         f"adaptive default), got {value!r}")
    return value


def scheduler_config(extender_url: str, registry: VendorRegistry, scheduler_name: str = "gpucluster",
                     node_cache_capable: bool = True, leader_elect: bool = False,
                     namespace: str = "kube-system", kube_version: str = DEFAULT_KUBE_VERSION,
                     lease_name: str = "",
                     percentage_of_nodes_to_score: int = DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE) -> dict[str, Any]:
    """A KubeSchedulerConfiguration for ``kube_version`` with our extender (filter, prioritize, preempt, bind)
    managing every vendor's resources (``ignoredByScheduler``: kube-scheduler does not count them itself).
    ``percentage_of_nodes_to_score``: kube-scheduler's own setting (:data:`DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE`);
    ``ValueError`` outside 0..100."""
    check_percentage_of_nodes_to_score(percentage_of_nodes_to_score)
    cfg: dict[str, Any] = {
        "apiVersion": scheduler_api_version(kube_version),
        "kind": "KubeSchedulerConfiguration",
        "leaderElection": {"leaderElect": leader_elect},
        "percentageOfNodesToScore": percentage_of_nodes_to_score,
        "profiles": [{"schedulerName": scheduler_name}],
        "extenders": [{
            "urlPrefix": extender_url,
            "filterVerb": "filter",
            "prioritizeVerb": "prioritize",
            "preemptVerb": "preempt",
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
        cfg["leaderElection"].update(resourceLock="leases", resourceNamespace=namespace,
                                     resourceName=lease_name or f"{scheduler_name}-kube-scheduler")
    return cfg


@dataclass(frozen=True, slots=True)
class DeployOptions:
    """What to deploy; the Helm chart's values say the same things (``charts/gpucluster/values.yaml``)."""

    mode: Mode = "extender"
    """extender (kube-scheduler + our extender sidecar) or scheduler (our secondary scheduler)."""
    kube_version: str = DEFAULT_KUBE_VERSION
    """Target Kubernetes version: picks the KubeSchedulerConfiguration version and kube-scheduler image."""
    release: str = "gpucluster"
    """Prefix of every object's name (the Helm release name)."""
    namespace: str = "kube-system"
    image: str = DEFAULT_IMAGE
    kube_scheduler_image: str = ""
    """Empty: ``registry.k8s.io/kube-scheduler`` at ``kube_version``."""
    scheduler_name: str = "gpucluster"
    policy: str = "default"
    replicas: int = 2
    """Scheduler pods; they elect a leader (kube-scheduler's Lease, or ours in scheduler mode)."""
    legacy_metrics: bool = False
    """Export HAMi's legacy metric names too."""
    agent: bool = True
    """The agent (dcgm-exporter and HAMi host metrics) as a DaemonSet on GPU nodes."""
    agent_node_selector: Mapping[str, str] = field(default_factory=lambda: {"nvidia.com/gpu.present": "true"})
    up: bool = False
    """``gpucluster up`` against this cluster (API, dashboard, /metrics)."""
    twins: str = ""
    """A cluster spec (YAML text): register its nodes as Node objects and keep their handshakes fresh."""
    service_monitor: bool = False
    prometheus_rules: str = ""
    """Rule file text (``gpucluster monitor rules``): a PrometheusRule when set."""
    dashboard: str = ""
    """Grafana dashboard JSON (``gpucluster monitor dashboard``): a ConfigMap with the sidecar label when set."""
    device_config: Mapping[str, Any] = field(default_factory=dict)
    """HAMi's device config (``device-config.yaml`` as a mapping; the chart's ``deviceConfig``): when set, the
    ``<release>-device-config`` ConfigMap, mounted in the scheduler pods and passed as ``--device-config``."""
    percentage_of_nodes_to_score: int = DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE
    """kube-scheduler's ``percentageOfNodesToScore`` (the chart's ``kubeScheduler.percentageOfNodesToScore``),
    0..100: in extender mode in kube-scheduler's configuration, in scheduler mode our secondary scheduler's
    ``--percentage-of-nodes-to-score`` (the same meaning); see :data:`DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE`."""

    @property
    def scheduler_image(self) -> str:
        return self.kube_scheduler_image or kube_scheduler_image(self.kube_version)


DEVICE_CONFIG_DIR = "/etc/gpucluster/devices"
"""Where the scheduler pods see HAMi's device config (``device-config.yaml``)."""


# ------------------------------------------------------------------------------------------ building blocks
def _labels(o: DeployOptions, component: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "gpucluster", "app.kubernetes.io/instance": o.release,
            "app.kubernetes.io/component": component}


def _meta(o: DeployOptions, name: str, component: str, namespaced: bool = True) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespaced:
        meta["namespace"] = o.namespace
    meta["labels"] = _labels(o, component)
    return meta


def pod_security_context() -> dict[str, Any]:
    return {"runAsNonRoot": True, "runAsUser": RUN_AS, "runAsGroup": RUN_AS, "fsGroup": RUN_AS,
            "seccompProfile": {"type": "RuntimeDefault"}}


def container_security_context() -> dict[str, Any]:
    return {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]}}


def _resources(cpu: str, memory: str, limit: str) -> dict[str, Any]:
    return {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": limit}}


def _container(name: str, image: str, command: list[str], **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image, "imagePullPolicy": "IfNotPresent", "command": command}
    c.update(extra)
    c["securityContext"] = container_security_context()
    return c


def _http_probe(port: int | str, path: str = "/healthz", scheme: str = "HTTP", initial: int = 5,
                period: int = 10) -> dict[str, Any]:
    get: dict[str, Any] = {"path": path, "port": port}
    if scheme != "HTTP":
        get["scheme"] = scheme
    return {"httpGet": get, "initialDelaySeconds": initial, "periodSeconds": period}


def _tmp_volume() -> tuple[dict[str, Any], dict[str, Any]]:
    return {"name": "tmp", "emptyDir": {}}, {"name": "tmp", "mountPath": "/tmp"}


def _binding(kind: str, name: str, role_kind: str, role: str, sa: str, o: DeployOptions, component: str,
             namespace: str | None = None) -> dict[str, Any]:
    meta = _meta(o, name, component, namespaced=kind == "RoleBinding")
    if namespace is not None:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": o.namespace}]}


def _service_account(o: DeployOptions, name: str, component: str, token: bool = True) -> dict[str, Any]:
    sa: dict[str, Any] = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(o, name, component)}
    if not token:
        sa["automountServiceAccountToken"] = False
    return sa


SCHEDULER_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses", "resourceslices"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"],
     "verbs": ["get", "list", "watch", "create", "update", "delete"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update", "patch"]},
    {"apiGroups": ["scheduling.x-k8s.io", "scheduling.k8s.io"], "resources": ["podgroups"],
     "verbs": ["get", "list", "watch"]},
)
"""What the extender and the secondary scheduler do: watch nodes and pods, write decisions (pod
annotations, Binding, PodScheduled condition) and events; read DRA devices and claims, allocate claims (status)
and create, update and delete the claims of DRA-backed extended resources they make (``delete`` only undoes one of
those when its pod's binding is rolled back); read the PodGroups of gangs."""
UP_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch", "patch"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "create", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/binding", "pods/eviction"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["batch"], "resources": ["jobs"],
     "verbs": ["get", "list", "watch", "create", "delete", "patch", "update"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["deviceclasses", "resourceslices"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaimtemplates"],
     "verbs": ["get", "list", "watch", "create"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["get", "list", "watch", "update"]},
    {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims/status"], "verbs": ["update", "patch"]},
    {"apiGroups": ["scheduling.x-k8s.io", "scheduling.k8s.io"], "resources": ["podgroups"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "watch", "patch", "delete"]},
    {"apiGroups": ["kubeflow.org"], "resources": ["pytorchjobs"],
     "verbs": ["get", "list", "watch", "patch", "delete"]},
)
"""``gpucluster up``: runs jobs as batch/v1 Jobs (and admits users' Jobs, JobSets and PyTorchJobs labelled with a
queue, and
pod groups), binds their pods,
reads their logs, cordons and drains nodes (remediation); reads DRA devices, claims, claim templates and
PodGroups, creates the claim templates of its API's jobs with ``claims``, and allocates and releases the claims
of its Jobs' pods (their finalizer: ``update``; allocation and ``reservedFor``: ``resourceclaims/status``)."""
TWIN_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "create", "patch", "delete"]},
    {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
)
"""``k8s register-nodes``: creates the twin's Node objects, refreshes their handshake, deletes them."""
LEASE_RULES: tuple[dict[str, Any], ...] = (
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
)
UP_LEASE_RULES: tuple[dict[str, Any], ...] = (
    *LEASE_RULES,
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "update"]},
)
"""``up``'s replicas: the Lease, and the ConfigMap ``<lease>-tenants`` in which they share the tenants' settings
(``kubernetes.sharedtenants``), in the lease namespace only."""


def _cluster_role(o: DeployOptions, name: str, component: str, rules: Iterable[Mapping[str, Any]]
                  ) -> dict[str, Any]:
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": _meta(o, name, component, namespaced=False), "rules": [dict(r) for r in rules]}


# ------------------------------------------------------------------------------------------ components
def _scheduler(o: DeployOptions, registry: VendorRegistry) -> list[dict[str, Any]]:
    name = f"{o.release}-scheduler"
    comp = "scheduler"
    out: list[dict[str, Any]] = [
        _service_account(o, name, comp),
        _cluster_role(o, name, comp, SCHEDULER_RULES),
        _binding("ClusterRoleBinding", name, "ClusterRole", name, name, o, comp),
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
         "metadata": _meta(o, f"{name}-leases", comp), "rules": [dict(r) for r in LEASE_RULES]},
        _binding("RoleBinding", f"{name}-leases", "Role", f"{name}-leases", name, o, comp),
    ]
    metrics_args = ["--legacy-metrics"] if o.legacy_metrics else []
    ours = ["--policy", o.policy, "--scheduler-name", o.scheduler_name, *metrics_args]
    tmp_vol, tmp_mount = _tmp_volume()
    volumes: list[dict[str, Any]] = [tmp_vol]
    our_mounts = [tmp_mount]
    device_cm: dict[str, Any] | None = None
    if o.device_config:
        ours += ["--device-config", f"{DEVICE_CONFIG_DIR}/device-config.yaml"]
        cm_name = f"{o.release}-device-config"
        device_cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, cm_name, comp),
                     "data": {"device-config.yaml": yaml.safe_dump(dict(o.device_config), sort_keys=False)}}
        our_mounts.append({"name": "device-config", "mountPath": DEVICE_CONFIG_DIR, "readOnly": True})
    if o.mode == "extender":
        for role in ("system:kube-scheduler", "system:volume-scheduler"):
            out.append(_binding("ClusterRoleBinding", f"{name}-{role.split(':')[1]}", "ClusterRole", role, name,
                                o, comp))
        # delegated authentication of kube-scheduler's secure port reads this ConfigMap in kube-system
        out.append(_binding("RoleBinding", f"{name}-authentication-reader", "Role",
                            "extension-apiserver-authentication-reader", name, o, comp, namespace="kube-system"))
        cfg = scheduler_config(f"http://127.0.0.1:{SCHEDULER_PORT}", registry, o.scheduler_name,
                               leader_elect=True, namespace=o.namespace, kube_version=o.kube_version,
                               lease_name=name, percentage_of_nodes_to_score=o.percentage_of_nodes_to_score)
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, f"{name}-config", comp),
                    "data": {"config.yaml": yaml.safe_dump(cfg, sort_keys=False)}})
        volumes.append({"name": "config", "configMap": {"name": f"{name}-config"}})
        containers = [
            _container("kube-scheduler", o.scheduler_image,
                       ["kube-scheduler", "--config=/etc/kubernetes/gpucluster/config.yaml", "--v=2"],
                       livenessProbe=_http_probe(10259, scheme="HTTPS", initial=15),
                       resources=_resources("100m", "128Mi", "512Mi"),
                       volumeMounts=[{"name": "config", "mountPath": "/etc/kubernetes/gpucluster",
                                      "readOnly": True}, tmp_mount]),
            _container("extender", o.image,
                       ["gpucluster", "k8s", "extender", "--listen", f"0.0.0.0:{SCHEDULER_PORT}", *ours],
                       ports=[{"name": "http", "containerPort": SCHEDULER_PORT}],
                       readinessProbe=_http_probe("http", path="/readyz"),
                       livenessProbe=_http_probe("http", initial=30),
                       resources=_resources("100m", "256Mi", "1Gi"), volumeMounts=our_mounts),
        ]
    else:
        check_percentage_of_nodes_to_score(o.percentage_of_nodes_to_score)
        scored = ["--percentage-of-nodes-to-score", str(o.percentage_of_nodes_to_score)]
        containers = [
            _container("scheduler", o.image,
                       ["gpucluster", "k8s", "scheduler", "--namespace", o.namespace, "--lease-name", name,
                        "--listen", f"0.0.0.0:{SCHEDULER_PORT}", *scored, *ours],
                       env=[{"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                       ports=[{"name": "http", "containerPort": SCHEDULER_PORT}],
                       readinessProbe=_http_probe("http", path="/readyz"),
                       livenessProbe=_http_probe("http", initial=30),
                       resources=_resources("100m", "256Mi", "1Gi"), volumeMounts=our_mounts),
        ]
    if device_cm is not None:
        out.append(device_cm)
        volumes.append({"name": "device-config", "configMap": {"name": device_cm["metadata"]["name"]}})
    labels = _labels(o, comp)
    out.append({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(o, name, comp),
        "spec": {
            "replicas": o.replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"serviceAccountName": name, "priorityClassName": "system-cluster-critical",
                         "securityContext": pod_security_context(), "containers": containers,
                         "volumes": volumes},
            },
        },
    })
    out.append(_service(o, name, comp, SCHEDULER_PORT))
    return out


def _service(o: DeployOptions, name: str, component: str, port: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(o, name, component),
            "spec": {"selector": _labels(o, component),
                     "ports": [{"name": "http", "port": port, "targetPort": "http"}]}}


def _agent(o: DeployOptions) -> list[dict[str, Any]]:
    name, comp = f"{o.release}-agent", "agent"
    labels = _labels(o, comp)
    tmp_vol, tmp_mount = _tmp_volume()
    args = ["gpucluster", "agent", "--listen", f"0.0.0.0:{AGENT_PORT}", "--source", "nvml"]
    if o.legacy_metrics:
        args.append("--legacy-metrics")
    ds = {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": _meta(o, name, comp),
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name, "automountServiceAccountToken": False,
                    "nodeSelector": dict(o.agent_node_selector),
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "securityContext": pod_security_context(),
                    "containers": [_container(
                        "agent", o.image, args,
                        env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                             {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}],
                        ports=[{"name": "http", "containerPort": AGENT_PORT}],
                        readinessProbe=_http_probe("http", path="/metrics"),
                        resources=_resources("50m", "128Mi", "512Mi"), volumeMounts=[tmp_mount])],
                    "volumes": [tmp_vol],
                },
            },
        },
    }
    return [_service_account(o, name, comp, token=False), ds, _service(o, name, comp, AGENT_PORT)]


IN_CLUSTER_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster:
    server: https://kubernetes.default.svc
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
users:
- name: service-account
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
contexts:
- name: in-cluster
  context: {cluster: in-cluster, user: service-account}
current-context: in-cluster
"""
"""The pod's own service account as a kubeconfig (``gpucluster up --kubeconfig`` reads a file)."""


def _up(o: DeployOptions) -> list[dict[str, Any]]:
    name, comp = f"{o.release}-up", "up"
    labels = _labels(o, comp)
    tmp_vol, tmp_mount = _tmp_volume()
    args = ["gpucluster", "up", "--kubeconfig", "/etc/gpucluster/kubeconfig", "--host", "0.0.0.0", "--port",
            str(UP_PORT), "--data-dir", "/data", "--policy", o.policy, "--lease-namespace", o.namespace]
    if o.legacy_metrics:
        args.append("--legacy-metrics")
    token = {"name": "GPUCLUSTER_ADMIN_TOKEN",
             "valueFrom": {"secretKeyRef": {"name": name, "key": "admin-token", "optional": True}}}
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(o, name, comp),
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name, "securityContext": pod_security_context(),
                    "containers": [_container(
                        "up", o.image, args, env=[token], ports=[{"name": "http", "containerPort": UP_PORT}],
                        readinessProbe=_http_probe("http"), livenessProbe=_http_probe("http", initial=30),
                        resources=_resources("200m", "512Mi", "2Gi"),
                        volumeMounts=[{"name": "kubeconfig", "mountPath": "/etc/gpucluster", "readOnly": True},
                                      {"name": "data", "mountPath": "/data"}, tmp_mount])],
                    "volumes": [{"name": "kubeconfig", "configMap": {"name": name}},
                                {"name": "data", "emptyDir": {}}, tmp_vol],
                },
            },
        },
    }
    return [_service_account(o, name, comp), _cluster_role(o, name, comp, UP_RULES),
            _binding("ClusterRoleBinding", name, "ClusterRole", name, name, o, comp),
            {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
             "metadata": _meta(o, f"{name}-leases", comp), "rules": [dict(r) for r in UP_LEASE_RULES]},
            _binding("RoleBinding", f"{name}-leases", "Role", f"{name}-leases", name, o, comp),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, name, comp),
             "data": {"kubeconfig": IN_CLUSTER_KUBECONFIG}},
            deploy, _service(o, name, comp, UP_PORT)]


def _twins(o: DeployOptions) -> list[dict[str, Any]]:
    name, comp = f"{o.release}-twins", "twins"
    labels = _labels(o, comp)
    tmp_vol, tmp_mount = _tmp_volume()
    deploy = {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(o, name, comp),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": name, "securityContext": pod_security_context(),
                    "containers": [_container(
                        "register-nodes", o.image,
                        ["gpucluster", "k8s", "register-nodes", "--cluster", "/etc/gpucluster/cluster.yaml"],
                        resources=_resources("50m", "128Mi", "512Mi"),
                        volumeMounts=[{"name": "spec", "mountPath": "/etc/gpucluster", "readOnly": True},
                                      tmp_mount])],
                    "volumes": [{"name": "spec", "configMap": {"name": name}}, tmp_vol],
                },
            },
        },
    }
    return [_service_account(o, name, comp), _cluster_role(o, name, comp, TWIN_RULES),
            _binding("ClusterRoleBinding", name, "ClusterRole", name, name, o, comp),
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": _meta(o, name, comp),
             "data": {"cluster.yaml": o.twins}}, deploy]


def _monitoring(o: DeployOptions) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if o.service_monitor:
        for comp, on in (("scheduler", True), ("agent", o.agent)):
            if not on:
                continue
            out.append({
                "apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                "metadata": _meta(o, f"{o.release}-{comp}", comp),
                "spec": {"selector": {"matchLabels": _labels(o, comp)},
                         "namespaceSelector": {"matchNames": [o.namespace]},
                         "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}]},
            })
    if o.prometheus_rules:
        rules = yaml.safe_load(o.prometheus_rules)
        out.append({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
                    "metadata": _meta(o, f"{o.release}-alerts", "monitoring"),
                    "spec": {"groups": rules["groups"]}})
    if o.dashboard:
        meta = _meta(o, f"{o.release}-dashboard", "monitoring")
        meta["labels"]["grafana_dashboard"] = "1"
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta,
                    "data": {"gpucluster.json": json.dumps(json.loads(o.dashboard), indent=2, sort_keys=True)}})
    return out


def build(options: DeployOptions, registry: VendorRegistry) -> list[dict[str, Any]]:
    """Every object for ``options``; raises :class:`KubeVersionError` or ValueError on bad options."""
    o = options
    if o.mode not in ("extender", "scheduler"):
        raise ValueError(f"mode: must be extender or scheduler, got {o.mode!r}")
    parse_kube_version(o.kube_version)
    if o.replicas < 1:
        raise ValueError(f"replicas: must be >= 1, got {o.replicas}")
    objs = _scheduler(o, registry)
    if o.agent:
        objs += _agent(o)
    if o.up:
        objs += _up(o)
    if o.twins:
        objs += _twins(o)
    return objs + _monitoring(o)


def manifests(mode: Mode, registry: VendorRegistry, *, namespace: str = "kube-system", image: str = DEFAULT_IMAGE,
              kube_scheduler_image: str = "", scheduler_name: str = "gpucluster", policy: str = "default",
              kube_version: str = DEFAULT_KUBE_VERSION, agent: bool = False, replicas: int = 2,
              legacy_metrics: bool = False) -> list[dict[str, Any]]:
    """The scheduler's objects (and the agent's with ``agent``); :func:`build` takes every option."""
    return build(DeployOptions(mode=mode, namespace=namespace, image=image,
                               kube_scheduler_image=kube_scheduler_image, scheduler_name=scheduler_name,
                               policy=policy, kube_version=kube_version, agent=agent, replicas=replicas,
                               legacy_metrics=legacy_metrics), registry)


def to_yaml(objs: Iterable[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(o, sort_keys=False) for o in objs)
