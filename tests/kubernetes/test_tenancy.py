"""Namespaces bound to tenants (label ``gpucluster.io/tenant`` on a Namespace), without a server: which
namespace may charge which tenant, how watch events and relists change the bindings, what a binding change does
to the workloads not admitted (``recheck``), and the tenant a pod group in a bound namespace that names none is
charged to."""

from __future__ import annotations

from typing import Any

from gpucluster.kubernetes.podgroups import group_spec, member_of
from gpucluster.kubernetes.tenancy import NAMESPACE_TENANT_LABEL, Held, NamespaceBindings, Relabel, Verdict
from gpucluster.model.labels import QUEUE_LABEL, TENANT_ANNOTATION
from tests.kubernetes.helpers import registry
from tests.kubernetes.test_podgroups import member


def ns(name: str, tenant: str | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {NAMESPACE_TENANT_LABEL: tenant} if tenant else {}}}


def test_a_tenant_bound_to_a_namespace_takes_workloads_from_it_only() -> None:
    b = NamespaceBindings()
    assert b.refusal("ns-b", "team-a") is None  # nothing bound: every namespace may name every tenant, as before
    assert b.event("ADDED", ns("ns-a", "team-a"))
    assert b.tenant_of("ns-a") == "team-a" and b.namespaces_of("team-a") == {"ns-a"} and b.count() == 1
    assert b.refusal("ns-a", "team-a") is None
    why = b.refusal("ns-b", "team-a")
    assert why is not None and "namespace ns-b may not use tenant team-a" in why and "ns-a" in why
    assert NAMESPACE_TENANT_LABEL in why
    assert b.refusal("ns-b", "team-c") is None  # a tenant bound nowhere stays open
    # a second namespace of the same tenant; a bound namespace may still name an unbound tenant
    b.event("ADDED", ns("ns-a2", "team-a"))
    assert b.refusal("ns-a2", "team-a") is None and b.refusal("ns-a", "team-c") is None


def test_unbinding_by_label_removal_delete_or_relist_opens_the_tenant_again() -> None:
    b = NamespaceBindings()
    b.event("ADDED", ns("ns-a", "team-a"))
    assert b.event("MODIFIED", ns("ns-a"))  # label removed (a watch without a selector)
    assert b.refusal("ns-b", "team-a") is None and b.tenant_of("ns-a") is None
    b.event("ADDED", ns("ns-a", "team-a"))
    assert b.event("DELETED", ns("ns-a", "team-a"))  # out of the label selector, or deleted
    assert b.refusal("ns-b", "team-a") is None
    b.event("ADDED", ns("ns-a", "team-a"))
    assert b.event("MODIFIED", ns("ns-a", "team-x"))  # moved to another tenant
    assert b.refusal("ns-b", "team-a") is None and b.refusal("ns-b", "team-x") is not None
    assert not b.event("MODIFIED", ns("ns-a", "team-x"))  # no change
    assert b.relist([ns("ns-c", "team-a")])  # a relist replaces every binding
    assert b.tenant_of("ns-a") is None and b.refusal("ns-a", "team-a") is not None
    assert not b.relist([ns("ns-c", "team-a")])


def test_a_binding_change_accepts_the_refused_workloads_now_allowed_and_refuses_the_queued_now_foreign() -> None:
    b = NamespaceBindings()
    b.event("ADDED", ns("ns-a", "team-a"))
    intruder = Held("j-1", "ns-b", "team-a", refused=True)  # refused for naming team-a from ns-b
    queued = Held("j-2", "ns-b", "team-c", refused=False)  # waits in team-c's queue
    own = Held("j-3", "ns-a", "team-a", refused=False)  # waits in team-a's queue, from its own namespace
    held = [intruder, queued, own]
    assert b.recheck(held) == []  # nothing changed for any of them
    # ns-a moves from team-a to team-c: team-a is bound nowhere, team-c takes ns-a's workloads only
    b.event("MODIFIED", ns("ns-a", "team-c"))
    why = b.refusal("ns-b", "team-c")
    assert why is not None and "namespace ns-b may not use tenant team-c" in why
    assert b.recheck(held) == [  # j-3: team-a is bound nowhere now, any namespace may name it
        Verdict("j-1", True, "tenant team-a is bound to no namespace (any namespace may name it)"),
        Verdict("j-2", False, why),
    ]
    # the refused one is let in from its own namespace too, saying it is bound there
    b.event("ADDED", ns("ns-b", "team-a"))
    [v] = b.recheck([intruder])
    assert v == Verdict("j-1", True, "namespace ns-b is bound to tenant team-a")
    # a refused workload still refused, and a queued one still allowed, are left as they are
    assert b.recheck([Held("j-4", "ns-x", "team-c", refused=True), Held("j-5", "ns-a", "team-c", refused=False)]) == []


def test_a_queue_label_change_rechecks_a_refused_workload_and_leaves_a_queued_or_running_ones_tenant() -> None:
    b = NamespaceBindings()
    b.event("ADDED", ns("ns-a", "team-a"))
    b.event("ADDED", ns("ns-c", "team-c"))
    refused = Held("j-1", "ns-b", "team-a", refused=True)  # refused for naming team-a from ns-b
    assert b.relabel(refused, "team-a") is None  # the same label: nothing to do
    # fixed to a tenant bound nowhere: let in, saying why
    assert b.relabel(refused, "team-x") == Relabel(
        "j-1", True, True, "its label gpucluster.io/queue now names tenant team-x: tenant team-x is bound to no "
                           "namespace (any namespace may name it)")
    # to another tenant bound elsewhere: refused again, for that tenant
    v = b.relabel(refused, "team-c")
    assert v is not None and v.recheck and not v.allowed and v.why == b.refusal("ns-b", "team-c")
    # fixed to the tenant its namespace is bound to
    b.event("ADDED", ns("ns-b", "team-b"))
    v = b.relabel(refused, "team-b")
    assert v is not None and v.recheck and v.allowed and v.why.endswith("namespace ns-b is bound to tenant team-b")
    # a queued or a running one keeps its tenant, wherever the new label points, and is told so
    queued, running = Held("j-2", "ns-b", "team-b", refused=False), Held("j-3", "ns-b", "team-b", refused=False)
    for w, shown in ((queued, "queued for"), (running, "running, charged to")):
        for label in ("team-x", "team-a", ""):
            v = b.relabel(w, label, running=w is running)
            assert v is not None and not v.recheck and not v.allowed
            assert f"it stays {shown} tenant team-b until it ends" in v.why
    assert b.relabel(queued, "team-b") is None


def test_a_pod_group_in_a_bound_namespace_naming_no_tenant_is_charged_to_the_namespaces_tenant() -> None:
    m = member_of(member("w0"), "gpucluster")
    assert m is not None
    pods = [member("w0"), member("w1")]
    assert group_spec("g-1", m, pods, 2, registry()).tenant == "research"  # unbound: its namespace, as before
    assert group_spec("g-1", m, pods, 2, registry(), namespace_tenant="team-a").tenant == "team-a"
    # a tenant the pods name wins (and is then checked against the bindings by the backend)
    labelled = [member(f"w{i}", labels={QUEUE_LABEL: "nlp"}) for i in range(2)]
    assert group_spec("g-1", m, labelled, 2, registry(), namespace_tenant="team-a").tenant == "nlp"
    tagged = [member(f"w{i}", annotations={TENANT_ANNOTATION: "vision"}) for i in range(2)]
    assert group_spec("g-1", m, tagged, 2, registry(), namespace_tenant="team-a").tenant == "vision"
