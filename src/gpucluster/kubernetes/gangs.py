"""Gang conventions that other tools write on pods, read beside our own annotations.

A pod is a member of a gang when one of these says so (first match wins):

1. ours: the annotations ``gpucluster.io/gang: NAME`` and ``gpucluster.io/gang-min-member: N`` (parsed with
   the pod, :mod:`gpucluster.devices.registry`);
2. scheduler-plugins' coscheduling (what HAMi v2.10 and Volcano-style workload controllers write): the label
   ``scheduling.x-k8s.io/pod-group: NAME``; the group's size is ``spec.minMember`` of the PodGroup
   ``scheduling.x-k8s.io/v1alpha1`` ``NAME`` in the pod's namespace;
3. Kubernetes' own gang scheduling (1.37: ``scheduling.k8s.io/v1alpha3``, feature gate ``GenericWorkload``):
   ``spec.schedulingGroup.podGroupName: NAME`` on the pod; the size is
   ``spec.schedulingPolicy.gang.minCount`` of the PodGroup ``NAME`` (a ``basic`` policy is no gang).

Gangs of different conventions never merge: their names are kept apart by a prefix (``podgroup/`` for
coscheduling, ``k8s-podgroup/`` for Kubernetes'). When the PodGroup object is missing (or its API is not served)
the size is unknown and the members wait (``GangNotReady``), as the coscheduling plugin does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

log = logging.getLogger(__name__)

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
"""scheduler-plugins coscheduling: the pod's PodGroup (same namespace)."""
COSCHEDULING_API = ("scheduling.x-k8s.io", "v1alpha1", "podgroups")
KUBE_POD_GROUP_API = ("scheduling.k8s.io", "v1alpha3", "podgroups")
COSCHEDULING_PREFIX = "podgroup/"
KUBE_PREFIX = "k8s-podgroup/"

Convention = Literal["coscheduling", "kubernetes"]


@dataclass(frozen=True, slots=True)
class GangRef:
    """A pod's gang by another tool's convention: which convention, and the PodGroup's name."""

    convention: Convention
    name: str

    @property
    def gang(self) -> str:
        """The gang name the scheduler uses (prefixed by convention)."""
        return (COSCHEDULING_PREFIX if self.convention == "coscheduling" else KUBE_PREFIX) + self.name

    @property
    def api(self) -> tuple[str, str, str]:
        return COSCHEDULING_API if self.convention == "coscheduling" else KUBE_POD_GROUP_API


def gang_ref(obj: Mapping[str, Any]) -> GangRef | None:
    """The pod-group convention a pod object follows, or None (ours are read from the annotations)."""
    meta = obj.get("metadata") or {}
    label = str((meta.get("labels") or {}).get(POD_GROUP_LABEL) or "")
    if label:
        return GangRef("coscheduling", label)
    group = (obj.get("spec") or {}).get("schedulingGroup") or {}
    name = str(group.get("podGroupName") or "") if isinstance(group, Mapping) else ""
    return GangRef("kubernetes", name) if name else None


def min_member_of(ref: GangRef, group: Mapping[str, Any]) -> int:
    """The gang size a PodGroup object declares (0: not a gang, e.g. Kubernetes' ``basic`` policy)."""
    spec = group.get("spec") or {}
    if ref.convention == "coscheduling":
        return int(spec.get("minMember") or 0)
    gang = (spec.get("schedulingPolicy") or {}).get("gang") or {}
    return int(gang.get("minCount") or 0) if isinstance(gang, Mapping) else 0


Fetch = Callable[[GangRef, str], "Mapping[str, Any] | None"]


KEEP_UNASKED_S = 600.0
"""How long :class:`GroupSizes` keeps the answer for a PodGroup nobody asks about any more (for an API error),
once it holds more than :data:`MAX_GROUPS`."""
MAX_GROUPS = 1024
"""Past this many PodGroups, :class:`GroupSizes` drops those not asked about for :data:`KEEP_UNASKED_S`."""


class GroupSizes:
    """``min_member(namespace, ref)``: the size a PodGroup declares, read from the API server and kept for
    ``ttl`` seconds (a scheduling pass asks once per gang; a change shows within ``ttl``). None when the PodGroup
    or its API does not exist. The last answer stays for an API error; past :data:`MAX_GROUPS` groups those
    nobody asked about for :data:`KEEP_UNASKED_S` are dropped (every training job names a new PodGroup: a
    long-running scheduler would keep them all)."""

    def __init__(self, fetch: Fetch, ttl: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self._fetch = fetch
        self.ttl = ttl
        self._clock = clock
        self._cache: dict[tuple[str, GangRef], tuple[float, int | None]] = {}
        self._asked: dict[tuple[str, GangRef], float] = {}
        """When each group was last asked about."""
        self._prune_at = MAX_GROUPS
        self._lock = threading.Lock()

    @classmethod
    def from_api(cls, api_client: Any, ttl: float = 2.0) -> GroupSizes:
        from kubernetes import client
        from kubernetes.client import ApiException

        custom = client.CustomObjectsApi(api_client)

        def fetch(ref: GangRef, namespace: str) -> Mapping[str, Any] | None:
            group, version, plural = ref.api
            try:
                obj = custom.get_namespaced_custom_object(group, version, namespace, plural, ref.name)
            except ApiException as exc:
                if exc.status == 404:  # no such PodGroup, or the API / CRD is not served
                    return None
                raise
            return obj if isinstance(obj, Mapping) else None

        return cls(fetch, ttl)

    def min_member(self, namespace: str, ref: GangRef) -> int | None:
        key = (namespace, ref)
        now = self._clock()
        with self._lock:
            self._asked[key] = now
            if len(self._asked) > self._prune_at:
                self._prune(now)
            hit = self._cache.get(key)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        try:
            obj = self._fetch(ref, namespace)
        except Exception as exc:  # an API error: keep the last answer, try again next time
            log.warning("reading PodGroup %s/%s (%s): %s", namespace, ref.name, ref.convention, exc)
            return hit[1] if hit is not None else None
        size = None if obj is None else min_member_of(ref, obj)
        with self._lock:
            if key in self._asked:  # (not dropped meanwhile)
                self._cache[key] = (now, size)
        return size

    def _prune(self, now: float) -> None:
        for key in [k for k, t in self._asked.items() if now - t >= KEEP_UNASKED_S]:
            del self._asked[key]
            self._cache.pop(key, None)
        self._prune_at = max(MAX_GROUPS, 2 * len(self._asked))  # a scan at most every so many new groups
