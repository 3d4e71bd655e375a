"""What the control plane (and the simulator's report) reads of a job engine, and the words a waiting job
gets.

:class:`JobViews` reads the engine's jobs, queue and running set without changing them: the queued and running
jobs, the order the queue will be tried in (``service.ops.QueueOrder``), counts per state and per control-plane
status, each tenant's held and asked GPUs and the queue's pending pods and oldest wait (the monitor's queue
gauges). :func:`count_message` and :func:`failure_message` say why a job waits, in words that stay the same
while the reason does (one reason, one event).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from gpucluster.jobs.accounting import TenantLedger
from gpucluster.jobs.model import STATUSES, Job, JobSpec, JobState
from gpucluster.jobs.policies import Key, PolicyView, QueuePolicy
from gpucluster.jobs.queue import Entry, JobQueue
from gpucluster.jobs.tally import JobTally
from gpucluster.scheduler import GroupDecision
from gpucluster.scheduler.plugins.quota import QuotaTree


class JobViews:
    """Read-only views of one engine's jobs (see the module docstring)."""

    __slots__ = ("_clock", "_jobs", "_ledger", "_policy", "_queue", "_running", "_tally", "_view")

    def __init__(self, jobs: Mapping[str, Job], queue: JobQueue, running: Mapping[str, Key], policy: QueuePolicy,
                 view: PolicyView, ledger: TenantLedger, tally: JobTally) -> None:
        self._jobs = jobs
        self._tally = tally
        self._queue = queue
        self._running = running
        self._policy = policy
        self._view = view
        self._ledger = ledger

    def queued(self) -> list[Job]:
        """Queued jobs in the policy's order (a dynamic policy's as of now)."""
        return [self._jobs[jid] for _, _, jid in self._entries()]

    def _entries(self) -> Iterable[Entry]:
        """The queue's entries with their whole keys, in the policy's order: as queued, or for a dynamic policy
        each group's with its tenant's part of the key as of now, the groups merged (one standing read per
        tenant, no per-job key)."""
        pol, queue = self._policy, self._queue
        if not pol.dynamic:
            return queue
        view = self._view
        return queue.ordered(queue.parts(self._jobs, lambda tenant: pol.tenant_key(tenant, view)), pol.compose)

    def queue_length(self) -> int:
        """How many jobs are queued (without listing them)."""
        return len(self._queue)

    def queued_gpus(self) -> float:
        """GPUs the queued jobs ask for, summed (without listing them)."""
        return self._queue.gpus

    def largest_whole_task(self) -> int:
        """The most whole GPUs one task of a queued job asks for (0 when none asks for whole GPUs)."""
        return self._queue.largest_whole_task()

    def whole_jobs(self, size: int) -> int:
        """Queued jobs of whole GPUs whose tasks ask for at least ``size`` GPUs each."""
        return self._queue.whole_jobs(size)

    def running(self) -> list[Job]:
        return [self._jobs[jid] for jid in self._running]

    def queue_order(self) -> list[str]:
        """Ids of the jobs waiting to run, the next to be tried first: the queued ones in the policy's order (a
        dynamic policy's as its next pass will compose them), then those not yet arrived, keyed as they will be."""
        pol, view, jobs = self._policy, self._view, self._jobs
        with self._ledger.fixed_shares():
            entries = list(self._entries())
            arriving = sorted((j for j in jobs.values() if j.state == JobState.NEW),
                              key=lambda j: (j.spec.submit_s, j.job_id))
            late = [(pol.key(j, view), n, j.job_id) for n, j in enumerate(arriving, start=1 << 62)]
        return [jid for _, _, jid in sorted([*entries, *late])]

    def counts(self) -> dict[str, int]:
        """Jobs per engine state (kept by the tally: no scan)."""
        return {s.value: n for s, n in self._tally.states.items()}

    def status_counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Jobs per control-plane status (``pending``, ``running`` ...): all jobs, and the user (non-synthetic)
        ones (kept by the tally: no scan)."""
        every = dict.fromkeys(STATUSES, 0)
        user = dict.fromkeys(STATUSES, 0)
        for state in JobState:
            every[state.status] += self._tally.states[state]
            user[state.status] += self._tally.user_states[state]
        return every, user

    def usage_by_tenant(self) -> dict[str, dict[str, float]]:
        """Tenant -> {"gpus": held (by its running jobs, and outside them: :meth:`JobEngine.set_outside_use`),
        "pending_gpus": asked by waiting jobs, "running": n, "pending": n} (the jobs' part kept by the tally: no
        scan)."""
        out = self._tally.usage_by_tenant()
        for tenant, gpus in self._ledger.outside.items():  # devices held outside the jobs (claims of other pods)
            u = out.setdefault(tenant, {"gpus": 0.0, "pending_gpus": 0.0, "running": 0.0, "pending": 0.0})
            u["gpus"] += gpus
        return out

    def pending_jobs(self, tenant: str) -> int:
        """The tenant's new and queued jobs (kept by the tally: no scan)."""
        return self._tally.pending(tenant)

    def queue_stats(self) -> tuple[int, float]:
        """(pods of the jobs waiting to run, seconds the oldest of them has waited); kept by the tally."""
        now = self._view.now
        oldest = self._tally.oldest_wait_since()
        return self._tally.pending_pods, max(0.0, now - (now if oldest is None else oldest))


def count_message(spec: JobSpec, free: float, slots_for: Callable[[int], int] | None) -> str:
    """Why a job the pass did not try waits, in words that do not change as the free count moves (one reason,
    one event: the queue view shows the free GPUs). ``slots_for``: whole tasks of a size the idle devices hold,
    None when admission counts GPUs only."""
    if spec.gpu_share > free:
        return (f"waiting for GPUs: needs {spec.gpu_share:g} GPU(s) as {spec.num_tasks} task(s), more than "
                "are free now")
    if spec.whole and spec.task_gpus > 0:
        if slots_for is not None and slots_for(spec.task_gpus) < spec.num_tasks:
            # enough free GPUs in all, in the wrong places: admission sees devices, a count would not
            return (f"waiting for a placement: needs {spec.num_tasks} task(s) of {spec.task_gpus:g} whole "
                    f"GPU(s) on one node each; enough GPUs are free in all but fragmented: too few nodes have "
                    f"{spec.task_gpus:g} free")
        return (f"waiting for GPUs: needs {spec.num_tasks} task(s) of {spec.task_gpus:g} whole GPU(s) each; "
                "too few nodes have that many free now")
    return "waiting for room: no node can take it now"


def failure_message(job: Job, group: GroupDecision | None, tree: QuotaTree | None) -> str:
    """Why the last placement of ``job`` (``group``) failed, in words (quota first: it is what the tenant can
    act on)."""
    if group is None or group.failed is None:
        return "unschedulable"
    failed = group.failed
    if "QuotaExceeded" in failed.reasons or "QuotaExceeded" in failed.status.reasons:
        tenant = job.spec.tenant
        if tree is not None and tenant in tree.queues and "gpu" in tree.queues[tenant].limit:
            return (f"waiting for quota: tenant {tenant} holds {tree.used[tenant]['gpu']:g} of "
                    f"{tree.queues[tenant].limit['gpu']:g} GPUs, the job needs {job.gpus:g}")
        return f"waiting for quota: {failed.message()}"
    return f"unschedulable: {failed.message()}"
