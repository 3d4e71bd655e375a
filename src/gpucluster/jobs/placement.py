"""Placing a job's pods as one group: the profile a job engine schedules with, and the :class:`Placer` port.

Profile: a placement policy (``gpucluster.scheduler.PROFILES``: ``default`` = speed-fgd, ``binpack``,
``spread``, ``fgd`` ...) or, when none is named, the queue policy's own (:func:`jobs_profile`: fit, gang and
binpack for nodes and devices, as the simulator has always measured), plus the job plugins every engine
needs: ``Gang`` (all or nothing, one GPU model), ``NodeSelector``, ``Topology`` for topology-aware queue
policies (``default``), ``Quota`` when tenants have queues, ``NodeName`` for the ``offers`` policy. The ``gavel``
queue policy's own placement is the ``gavel`` profile (``GpuSpeed``: Gavel's effective throughput, then binpack).

Placer: where the engine's decisions go. :class:`SchedulerPlacer` binds in memory (the simulator and the
embedded control plane); ``gpucluster.kubernetes`` supplies one that creates and binds real pods.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from gpucluster.jobs.model import Job
from gpucluster.jobs.policies import QueuePolicy
from gpucluster.model import ClusterState, Pod
from gpucluster.scheduler import DEFAULT_PLACEMENT_POLICY, PROFILES, GroupDecision, Scheduler, profile_for
from gpucluster.scheduler.framework import PluginConfig, Profile

JOB_PLACEMENT = "jobs"
"""Placement name of the queue policy's own profile (:func:`jobs_profile`); ``None`` means the same."""
TOPOLOGY_WEIGHT = 2.0
SPEED_PLACEMENT = "gavel"
"""The placement of speed-aware queue policies (``gavel``): GPU speed decides the model."""


def placement_names() -> list[str]:
    """Every name ``--placement-policy`` accepts."""
    return sorted({*PROFILES, JOB_PLACEMENT})


def jobs_profile(topology: bool, seed: int = 0, extra: Iterable[PluginConfig] = ()) -> Profile:
    """The queue policies' own placement: fit, gang, node selector, binpack (node and device); plus topology
    scoring when asked."""
    plugins = [
        PluginConfig(name="NodeUnschedulable"),
        PluginConfig(name="NodeResourcesFit"),
        PluginConfig(name="DeviceFit"),
        PluginConfig(name="Gang"),
        PluginConfig(name="NodeSelector"),
        PluginConfig(name="NodePolicy", args={"policy": "binpack"}),
        PluginConfig(name="DevicePolicy", args={"policy": "binpack"}),
    ]
    if topology:
        plugins.append(PluginConfig(name="Topology", weight=TOPOLOGY_WEIGHT))
    plugins.extend(extra)
    return Profile(plugins=plugins, seed=seed, tie_break="first")


def placement_in_use(placement: str | None, policy: QueuePolicy) -> str:
    """The name of the placement a job engine with ``placement`` and ``policy`` really uses: ``default``
    resolved to :data:`~gpucluster.scheduler.DEFAULT_PLACEMENT_POLICY`, none to the queue policy's own
    (``jobs``, or ``gavel`` for speed-aware queue policies)."""
    if placement is None or placement == JOB_PLACEMENT:
        return SPEED_PLACEMENT if getattr(policy, "speed_aware", False) else JOB_PLACEMENT
    return DEFAULT_PLACEMENT_POLICY if placement == "default" else placement


def job_profile(placement: str | None, policy: QueuePolicy, seed: int = 0, *, quota: bool = False) -> Profile:
    """The profile a job engine schedules with (see the module docstring); ``ValueError`` for an unknown
    placement name."""
    extra = [PluginConfig(name="Quota")] if quota else []
    if (placement is None or placement == JOB_PLACEMENT) and getattr(policy, "speed_aware", False):
        placement = SPEED_PLACEMENT
    if placement is None or placement == JOB_PLACEMENT:
        prof = jobs_profile(policy.topology_aware, seed, extra)
    else:
        if placement not in PROFILES:
            raise ValueError(f"unknown placement policy {placement!r}; known: {', '.join(placement_names())}")
        base = profile_for(placement, seed)
        have = {p.name for p in base.plugins}
        plugins = list(base.plugins)
        plugins += [PluginConfig(name=n) for n in ("Gang", "NodeSelector") if n not in have]
        if policy.topology_aware and "Topology" not in have:
            plugins.append(PluginConfig(name="Topology", weight=TOPOLOGY_WEIGHT))
        plugins += extra
        prof = base.model_copy(update={"plugins": plugins})
    if policy.via_offers and not any(p.name == "NodeName" for p in prof.plugins):
        # offers pin each task to the node whose offer was accepted
        prof = prof.model_copy(update={"plugins": [PluginConfig(name="NodeName"), *prof.plugins]})
    return prof


class Placer(Protocol):
    """Carries out the engine's placement decisions on some cluster.

    Contract: ``place`` places every pod of the job or none (a :class:`GroupDecision`); the resources of a
    placed group are held in ``state`` from then on, until ``release``. ``release`` is idempotent."""

    @property
    def state(self) -> ClusterState:
        """The cluster the decisions are made on (it may be replaced, e.g. when Kubernetes nodes change)."""
        ...

    def place(self, job: Job, pods: Sequence[Pod]) -> GroupDecision: ...

    def release(self, job: Job, pod_keys: Sequence[str]) -> None: ...


class SchedulerPlacer:
    """In memory: the scheduler places and binds the group (no Bind plugin), ``release`` deletes the pods."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    @property
    def state(self) -> ClusterState:
        return self.scheduler.state

    def place(self, job: Job, pods: Sequence[Pod]) -> GroupDecision:
        return self.scheduler.schedule_group(pods)

    def release(self, job: Job, pod_keys: Sequence[str]) -> None:
        for key in pod_keys:
            self.scheduler.delete(key)
