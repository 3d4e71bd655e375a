"""How every backend's job engine is made, written once.

The simulator (:class:`gpucluster.simulator.Simulation`, which the embedded runtime drives on the wall clock)
and the Kubernetes runtime (:class:`gpucluster.kubernetes.backend.KubeRuntime`) make their engine the same way:
:func:`engine_recipe` turns the names a user gives (queue policy, placement policy) and the quota tree into an
:class:`EngineRecipe`: the queue policy, the placement profile the backend's scheduler runs (the job plugins
included: gangs, topology, quota, node names), the services that scheduler's plugins read (the quota tree as
``quota``) and the engine's options. The backend builds its scheduler from ``recipe.profile`` and
``recipe.services()`` and then the engine over its own :class:`~gpucluster.jobs.placement.Placer` with
:meth:`EngineRecipe.build` (the Kubernetes runtime builds a fresh engine from the same recipe when it becomes
the leader)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpucluster.jobs.engine import EngineOptions, JobEngine, Slowdown, Timer, no_slowdown
from gpucluster.jobs.kernel import Kernel
from gpucluster.jobs.placement import Placer, job_profile, placement_in_use
from gpucluster.jobs.policies import QueuePolicy, make_policy
from gpucluster.scheduler.framework import Profile
from gpucluster.scheduler.plugins.datalocality import DataCatalog
from gpucluster.scheduler.plugins.quota import QuotaTree


@dataclass(frozen=True, slots=True)
class EngineRecipe:
    """What a backend's job engine is made of (see the module docstring)."""

    queue_policy: QueuePolicy
    """Orders the queue (``gpucluster.jobs.POLICIES``)."""
    profile: Profile
    """The placement profile the backend's scheduler runs (:func:`gpucluster.jobs.job_profile`)."""
    quota: QuotaTree | None = None
    """Tenant queues the ``Quota`` plugin charges and the engine's fair share and reclaim read."""
    options: EngineOptions = field(default_factory=EngineOptions)
    """How the engine runs (the simulator's defaults; a control plane describes what waits)."""
    placement_in_use: str = "custom"
    """The placement policy's name as reports show it (:func:`gpucluster.jobs.placement_in_use`: ``default``
    resolved, none the queue policy's own; ``custom`` for a ready profile)."""

    def services(self) -> dict[str, Any]:
        """The services the scheduler's plugins read (``Handle.services``): the quota tree as ``quota``."""
        return {} if self.quota is None else {"quota": self.quota}

    def build(self, placer: Placer, *, kernel: Kernel[Timer] | None = None, catalog: DataCatalog | None = None,
              slowdown: Slowdown = no_slowdown) -> JobEngine:
        """A new engine over ``placer`` (a scheduler built from :attr:`profile` and :meth:`services`)."""
        return JobEngine(placer, self.queue_policy, quota=self.quota, catalog=catalog, slowdown=slowdown,
                         options=self.options, kernel=kernel)


def engine_recipe(queue_policy: str | QueuePolicy, placement_policy: str | None = None, *, seed: int = 0,
                  quota: QuotaTree | None = None, profile: Profile | None = None,
                  options: EngineOptions | None = None) -> EngineRecipe:
    """The recipe for ``queue_policy`` (a name or a ready policy) placing with ``placement_policy`` (a
    ``gpucluster.scheduler.PROFILES`` name; None: the queue policy's own) or a ready ``profile``; the job plugins
    (and ``Quota`` when ``quota`` is given) are added by :func:`gpucluster.jobs.job_profile`. ``ValueError`` for
    an unknown policy name."""
    queue = make_policy(queue_policy) if isinstance(queue_policy, str) else queue_policy
    prof = profile or job_profile(placement_policy, queue, seed, quota=quota is not None)
    in_use = "custom" if profile is not None else placement_in_use(placement_policy, queue)
    return EngineRecipe(queue, prof, quota, options or EngineOptions(), in_use)
