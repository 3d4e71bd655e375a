"""Every label and annotation key gpucluster writes or reads under its own prefix (``gpucluster.io/``), one
constant per key; the rest of the code imports these and never spells a key out.

HAMi's own keys (``hami.io/...``, ``nvidia.com/...``) live with their vendor in :mod:`gpucluster.devices`.
"""

from __future__ import annotations

PREFIX = "gpucluster.io/"

# ---------------------------------------------------------------------------------------------- pods: jobs
JOB_LABEL = "gpucluster.io/job"
"""Label: the id of the job a pod is a task of."""
KIND_LABEL = "gpucluster.io/kind"
"""Label: the job's kind (``train``, ``infer`` ...)."""
JOB_NAME_ANNOTATION = "gpucluster.io/job-name"
"""Annotation: the job's display name (Kubernetes pods of control-plane jobs)."""
TENANT_ANNOTATION = "gpucluster.io/tenant"
"""Annotation (and, on control-plane pods, a label too): the tenant (quota queue) a pod is charged to."""
GANG_ANNOTATION = "gpucluster.io/gang"
"""Annotation: the gang a pod belongs to (all of it binds or none)."""
GANG_MIN_ANNOTATION = "gpucluster.io/gang-min-member"
"""Annotation: how many members of the gang must be placed together."""
JOB_GPUS_ANNOTATION = "gpucluster.io/job-gpus"
"""Annotation: the GPUs of the whole job (the Topology plugin's ideal level)."""
DATASET_ANNOTATION = "gpucluster.io/dataset"
"""Annotation: the dataset a job reads (the DataLocality plugin)."""
DATA_LOCALITY_ANNOTATION = "gpucluster.io/data-locality"
"""Annotation: ``required`` to place only on nodes holding a replica of the dataset (delay scheduling)."""
NODE_NAME_ANNOTATION = "gpucluster.io/node-name"
"""Annotation: the node an offer pinned the task to (the NodeName plugin)."""
QUOTA_ADMITTED_ANNOTATION = "gpucluster.io/quota-admitted"
"""Annotation: ``true`` on the pods of a job admitted under an earlier quota (it ran before a control-plane
restart): the Quota plugin charges them but does not hold them to a limit lowered since."""
TOPOLOGY_REQUIRED_ANNOTATION = "gpucluster.io/topology-required"
"""Annotation: the topology level a gang must fit within."""
TOPOLOGY_PREFERRED_ANNOTATION = "gpucluster.io/topology-preferred"
"""Annotation: the topology level a gang prefers."""
ACTIVITY_ANNOTATION = "gpucluster.io/activity"
"""Annotation: the simulated collector's canned behaviour for a pod (``busy``, ``idle`` ...)."""
SCHEDULED_BY_ANNOTATION = "gpucluster.io/scheduled-by"
"""Annotation: which gpucluster process bound the pod."""

# ---------------------------------------------------------------------------------------------- the queue (Jobs)
QUEUE_LABEL = "gpucluster.io/queue"
"""Label on a batch/v1 Job: queue it, charged to this tenant (the control plane admits it)."""
JOB_ID_ANNOTATION = "gpucluster.io/job-id"
"""Annotation on the Jobs the control plane makes: the id of the job of its API."""
REQUEST_ANNOTATION = "gpucluster.io/request"
"""Annotation on the Jobs the control plane makes: the job as submitted (JSON)."""
ADMISSION_ANNOTATION = "gpucluster.io/admission"
"""Annotation on an admitted Job: who admitted it, when, and each pod's node and devices (JSON)."""
MESSAGE_ANNOTATION = "gpucluster.io/message"
"""Annotation on a waiting Job: why it waits, as the leader last said it."""
REFUSED_ANNOTATION = "gpucluster.io/refused"
"""Annotation on a Job that can never run here: why."""
PRIORITY_ANNOTATION = "gpucluster.io/priority"
"""Annotation on a Job: its queue priority (0..1000)."""
DURATION_ANNOTATION = "gpucluster.io/duration-s"
"""Annotation on a Job: its expected run time in seconds (queue policies that order by it)."""
PREEMPTIBLE_ANNOTATION = "gpucluster.io/preemptible"
"""Annotation on a Job: ``"false"`` = never suspended to make room for another job."""
RESERVATION_ANNOTATION = "gpucluster.io/reservation"
"""Annotation on a pod of an admitted Job: the reservation (slot) it is bound into."""

# ---------------------------------------------------------------------------------------------- nodes
POOL_LABEL = "gpucluster.io/pool"
"""Label: the node pool of a cluster spec (node selectors name it)."""
RACK_LABEL = "gpucluster.io/rack"
LEAF_LABEL = "gpucluster.io/leaf"
SPINE_LABEL = "gpucluster.io/spine"
MODEL_LABEL = "gpucluster.io/model"
"""Label: the GPU model of a node replayed from the Alibaba openb trace."""
GPU_MODEL_LABEL = "gpucluster.io/gpu-model"
"""Label: the GPU model of a node registered by ``gpucluster k8s register``."""
REGISTERED_BY_LABEL = "gpucluster.io/registered-by"
"""Label: nodes ``gpucluster k8s register`` created (and may delete)."""

# ---------------------------------------------------------------------------------------------- Kubernetes'
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
"""Kubernetes' recommended label; ``gpucluster`` on the pods the control plane creates."""
MANAGED_BY = "gpucluster"
