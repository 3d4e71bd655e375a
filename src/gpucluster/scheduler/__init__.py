"""The scheduler core: framework, plugins, cache, queue and ``schedule_one``. Backend-agnostic."""

from gpucluster.scheduler.core import Decision, Outcome, schedule_one
from gpucluster.scheduler.profiles import DEFAULT_PLACEMENT_POLICY, PROFILES, binpack_spread_profile, profile_for
from gpucluster.scheduler.scheduler import GroupDecision, Scheduler

__all__ = [
    "DEFAULT_PLACEMENT_POLICY",
    "PROFILES",
    "Decision",
    "GroupDecision",
    "Outcome",
    "Scheduler",
    "binpack_spread_profile",
    "profile_for",
    "schedule_one",
]
