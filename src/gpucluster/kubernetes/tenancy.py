"""Namespaces bound to tenants: who may charge a tenant on Kubernetes. Pure (plain dicts in), unit-tested.

**The contract:** a Namespace labelled ``gpucluster.io/tenant: TENANT`` is *bound* to that tenant. A tenant
with at least one bound namespace takes Kubernetes workloads (Jobs, JobSets, PyTorchJobs, pod groups) **only**
from its bound namespaces: a workload in any other namespace that names it (``gpucluster.io/queue``, or a pod's
``gpucluster.io/tenant`` annotation) is refused: never admitted nor charged, not listed as that tenant's. A
tenant with no bound namespace is taken from any namespace, as before the binding existed (binding is how a
tenant gets isolation). A workload in a bound namespace that names no tenant (a pod group without the queue
label) is charged to the namespace's tenant.

The control plane lists and watches Namespaces with the label (:class:`NamespaceBindings` is its cache, fed by
every event and relist): a label set, changed or removed takes effect without a restart, for the workloads seen
from then on and, at once, for those not admitted yet (:meth:`NamespaceBindings.recheck`):

* a workload refused *for its namespace* that its namespace may now use is accepted: queued as if new (the
  ``gpucluster.io/refused`` annotation removed, a Normal ``Accepted`` Event saying why);
* a queued workload (not running: never admitted, or preempted back to the queue) whose namespace may no longer
  use its tenant is refused, as a new one would be (it holds nothing and was never charged while queued);
* a running workload is left running, charged to its tenant until it ends: a label edit never kills work
  (take it back with ``gpucluster cancel`` or by deleting it). Should it be preempted later, it waits in the
  queue again and is re-checked at the next binding change;
* a workload refused for another reason (a bad spec) stays refused.

A change of a Job's (JobSet's, PyTorchJob's) own ``gpucluster.io/queue`` label, or of the tenant a pod group's
members name, is re-checked too (:meth:`NamespaceBindings.relabel`), whether the workload is in memory or a
refused one the retention policy pruned while its object stays:

* a refused workload (for its namespace, or for a bad label) is read again as a new one under the tenant it
  names now: accepted when its namespace may use it (queued, the refusal taken off, a Normal ``Accepted``
  Event), else refused again (a new Event only when the reason changed);
* a queued or running workload keeps the tenant it was seen under until it ends (a running job's charge never
  moves to another tenant behind its users' backs, nor does a queued one jump queues): a Normal ``Relabelled``
  Event says so, once for each new label. Delete and re-create it to move it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.model.labels import QUEUE_LABEL

NAMESPACE_TENANT_LABEL = "gpucluster.io/tenant"
"""On a Namespace: the tenant the namespace is bound to."""


class NamespaceBindings:
    """Namespace -> its tenant, and tenant -> its bound namespaces (kept in step)."""

    def __init__(self) -> None:
        self._tenant_of: dict[str, str] = {}
        self._bound: dict[str, set[str]] = {}

    def _set(self, namespace: str, tenant: str) -> None:
        self._unset(namespace)
        if tenant:
            self._tenant_of[namespace] = tenant
            self._bound.setdefault(tenant, set()).add(namespace)

    def _unset(self, namespace: str) -> None:
        old = self._tenant_of.pop(namespace, None)
        if old is not None:
            left = self._bound.get(old, set())
            left.discard(namespace)
            if not left:
                self._bound.pop(old, None)

    def event(self, kind: str, obj: Mapping[str, Any]) -> bool:
        """One watch event of a Namespace (``ADDED``/``MODIFIED``/``DELETED``); True when a binding changed. A
        Namespace whose label was removed comes as ``DELETED`` from a watch with a label selector, or as a
        ``MODIFIED`` without the label: both unbind it."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name") or "")
        if not name:
            return False
        before = self._tenant_of.get(name)
        tenant = "" if kind == "DELETED" else str((meta.get("labels") or {}).get(NAMESPACE_TENANT_LABEL) or "")
        self._set(name, tenant)
        return self._tenant_of.get(name) != before

    def relist(self, items: Iterable[Mapping[str, Any]]) -> bool:
        """A full list of the (labelled) Namespaces: the bindings become exactly these; True when any changed."""
        before = dict(self._tenant_of)
        self._tenant_of.clear()
        self._bound.clear()
        for obj in items:
            self.event("ADDED", obj)
        return self._tenant_of != before

    def tenant_of(self, namespace: str) -> str | None:
        """The tenant ``namespace`` is bound to, or None."""
        return self._tenant_of.get(namespace)

    def count(self) -> int:
        """How many namespaces are bound."""
        return len(self._tenant_of)

    def namespaces_of(self, tenant: str) -> frozenset[str]:
        return frozenset(self._bound.get(tenant, ()))

    def refusal(self, namespace: str, tenant: str) -> str | None:
        """Why a workload in ``namespace`` may not charge ``tenant``, or None when it may: the tenant is bound to
        other namespaces only."""
        bound = self._bound.get(tenant)
        if not bound or namespace in bound:
            return None
        names = ", ".join(sorted(bound)[:5]) + (", ..." if len(bound) > 5 else "")
        return (f"namespace {namespace} may not use tenant {tenant}: the tenant is bound to namespace(s) {names} "
                f"(Namespace label {NAMESPACE_TENANT_LABEL}) and takes workloads from them only")


    def allowance(self, namespace: str, tenant: str) -> str:
        """Why a workload in ``namespace`` may charge ``tenant`` now (when :meth:`refusal` is None)."""
        if namespace in self._bound.get(tenant, ()):
            return f"namespace {namespace} is bound to tenant {tenant}"
        return f"tenant {tenant} is bound to no namespace (any namespace may name it)"

    def recheck(self, workloads: Iterable[Held]) -> list[Verdict]:
        """What a binding change does to the workloads not admitted (see the module docstring): a verdict for
        each refused one its namespace may now use (accept) and each queued one it may no longer use (refuse);
        nothing for the rest."""
        out = []
        for w in workloads:
            why = self.refusal(w.namespace, w.tenant)
            if w.refused and why is None:
                out.append(Verdict(w.key, True, self.allowance(w.namespace, w.tenant)))
            elif not w.refused and why is not None:
                out.append(Verdict(w.key, False, why))
        return out

    def relabel(self, w: Held, label: str, *, running: bool = False) -> Relabel | None:
        """What a change of a workload's ``gpucluster.io/queue`` label to ``label`` does now (``w.tenant``: the
        label it was seen with; ``w.refused``: it was refused, for its namespace or for a bad label; ``running``:
        it was admitted and runs). None when the label is the same. A refused one is ``recheck``ed: read again
        as a new one (``allowed``: its namespace may use ``label``, why; else why not); any other keeps its
        tenant (``recheck`` False, the message its users are told)."""
        if label == w.tenant:
            return None
        if w.refused:
            why = self.refusal(w.namespace, label)
            if why is None:
                return Relabel(w.key, True, True, f"its label {QUEUE_LABEL} now names tenant {label}: "
                                                  + self.allowance(w.namespace, label))
            return Relabel(w.key, True, False, why)
        what = "running, charged to" if running else "queued for"
        return Relabel(w.key, False, False,
                       f"its label {QUEUE_LABEL} now names {label or '(none)'}, but it stays {what} tenant "
                       f"{w.tenant} until it ends (a queued or running workload never changes tenant): delete and "
                       "re-create it to move it")


@dataclass(frozen=True, slots=True)
class Relabel:
    """What a change of a workload's ``gpucluster.io/queue`` label does (:meth:`NamespaceBindings.relabel`)."""

    key: str
    recheck: bool
    """Read it again as a new workload (it was refused); else it keeps its tenant."""
    allowed: bool
    """(``recheck``) Its namespace may use the tenant it names now."""
    why: str
    """Why it is allowed, refused, or keeps its tenant."""


@dataclass(frozen=True, slots=True)
class Held:
    """A workload a binding change re-checks: not running, not ended other than by a refusal for its namespace."""

    key: str
    """Its job id."""
    namespace: str
    tenant: str
    """The tenant it names (a refused one is listed under another: this is the one it asked for)."""
    refused: bool
    """Refused because its namespace may not use ``tenant`` (else: queued, not admitted)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """A re-checked workload's fate: ``accept`` (queue it) or refuse it, and why."""

    key: str
    accept: bool
    why: str


__all__ = ["NAMESPACE_TENANT_LABEL", "Held", "NamespaceBindings", "Relabel", "Verdict"]
