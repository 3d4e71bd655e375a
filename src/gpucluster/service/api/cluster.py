"""The cluster: overview, nodes, one node, fault drill, topology, alerts."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response

from gpucluster.service.api.deps import Auth, Svc, admin_only, cached_json
from gpucluster.service.api.models import (
    ERRORS,
    Alerts,
    FaultOut,
    NodeActionOut,
    NodeDetail,
    NodeList,
    Overview,
    Topology,
)
from gpucluster.service.api.ops import get_ops
from gpucluster.service.core import Service
from gpucluster.service.errors import ApiError
from gpucluster.service.runtime import FaultDrill, JobEvent, JobStatus, NodeActions

router = APIRouter(tags=["cluster"])

NodeName = Annotated[str, Path(max_length=253)]


@router.get("/api/v1/overview", response_model=Overview, responses=ERRORS)
async def overview(request: Request, who: Auth, service: Svc) -> Any:
    def compute() -> dict[str, Any]:
        out = dict(service.cached("overview-raw", service.runtime.overview))
        out["speed"] = service.config.speed
        if "alerts_firing" in out:  # silenced alerts do not count
            out["alerts_firing"] = get_ops(request).alerts(service.runtime.now)[1]
        return out

    if who.is_admin:
        return cached_json(service, "overview-admin", compute)
    out = dict(service.cached("overview+speed", compute))
    counts = {st.value: 0 for st in JobStatus}  # "your jobs" are the tenant's own
    for job in service.user_jobs_newest_first():
        if job.tenant == who.tenant:
            counts[job.status.value] += 1
    out["user_jobs"] = counts
    out["allocated_idle"] = [x if x.get("tenant") == who.tenant else  # other tenants' GPUs, not their jobs
                             {**x, "pod": "(other tenant)", "job": "", "job_name": "", "tenant": "other"}
                             for x in out.get("allocated_idle", [])]
    return out


@router.get("/api/v1/nodes", response_model=NodeList, responses=ERRORS)
async def nodes(who: Auth, service: Svc) -> Response:
    def compute() -> dict[str, Any]:
        rows = service.runtime.nodes()
        return {"total": len(rows), "t": service.runtime.now, "nodes": rows}

    return cached_json(service, "nodes", compute)


@router.get("/api/v1/nodes/{name}", response_model=NodeDetail, responses=ERRORS)
async def node(name: NodeName, who: Auth, service: Svc) -> dict[str, Any]:
    found = service.runtime.node(name)
    if found is None:
        raise ApiError(404, "path.name", f"no node {name[:64]!r}")
    if not who.is_admin:
        for dev in found.get("devices", []):
            for pod in dev["pods"]:
                if pod["tenant"] != who.tenant:
                    pod.update(pod="(other tenant)", job="", job_name="", tenant="other")
    return found


@router.post("/api/v1/nodes/{name}/devices/{index}/fault", response_model=FaultOut, responses=ERRORS)
async def inject_fault(
    name: NodeName, index: Annotated[int, Path(ge=0, le=1023)], who: Auth, service: Svc,
    xid: Annotated[int, Query(ge=1, le=999, description="The XID the device reports (79: fallen off the "
                                                         "bus; 46/48/64/79/94/95 are critical).")] = 79,
) -> dict[str, Any]:
    """Admin: make a device report an XID through the simulated collector (embedded backend) and evaluate
    the alert rules for its node at once, to watch alerting and automatic remediation."""
    admin_only(who)
    found = service.runtime.node(name)
    if found is None:
        raise ApiError(404, "path.name", f"no node {name[:64]!r}")
    if not 0 <= index < int(found["gpus"]):
        raise ApiError(422, "path.index", f"node {name} has devices 0..{int(found['gpus']) - 1}")
    runtime = service.runtime
    if not isinstance(runtime, FaultDrill):
        raise ApiError(409, "backend", f"the {runtime.backend} backend cannot inject faults")
    service.store.audit(who.actor, "device.fault", f"{name}/{index}", f"XID {xid} injected")
    events: list[JobEvent] = []
    runtime.inject_fault(name, index, events, xid=xid)
    service.invalidate_views()
    service.record_done(events, f"fault on {name}/{index}")  # what the store cannot take now: the next tick
    return {"ok": True, "evicted_user_jobs": sum(1 for e in events if e.kind == "evicted")}


def _node_actions(service: Service, name: str) -> tuple[NodeActions, dict[str, Any]]:
    found = service.runtime.node(name)
    if found is None:
        raise ApiError(404, "path.name", f"no node {name[:64]!r}")
    runtime = service.runtime
    if not isinstance(runtime, NodeActions):
        raise ApiError(409, "backend", f"the {runtime.backend} backend takes nodes out of service with kubectl "
                                       f"(kubectl cordon|uncordon|drain {name[:64]})")
    return runtime, found


def _node_answer(service: Service, name: str, action: str, jobs: list[str], message: str) -> dict[str, Any]:
    found = service.runtime.node(name) or {}
    rows = []
    for jid in jobs:
        job = service.find_job(jid)
        if job is not None:
            rows.append({"id": job.id, "name": job.name, "tenant": job.tenant, "synthetic": job.synthetic,
                         "status": job.status.value})
    return {"node": name, "action": action, "schedulable": bool(found.get("schedulable", False)), "jobs": rows,
            "message": message}


@router.post("/api/v1/nodes/{name}/cordon", response_model=NodeActionOut, responses=ERRORS)
async def cordon(name: NodeName, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: no new pods on the node (its running jobs stay) until an operator uncordons it, also when remediation
    cordoned it before (the repair of its GPUs does not put it back then); 409 when an operator already cordoned
    it. Audited."""
    admin_only(who)
    runtime, _ = _node_actions(service, name)
    held = runtime.held_nodes()
    if name in held:
        raise ApiError(409, "path.name", f"node {name} is already cordoned (uncordon puts it back in service)")
    # stored first: a cordon the store did not take changes nothing (507/503)
    service.store_held_nodes([*held, name], (who.actor, "node.cordon", name, "cordoned: no new pods"))
    runtime.cordon(name)
    service.invalidate_views()
    return _node_answer(service, name, "cordon", [], f"node {name} cordoned: no new pods; its jobs keep running")


@router.post("/api/v1/nodes/{name}/uncordon", response_model=NodeActionOut, responses=ERRORS)
async def uncordon(name: NodeName, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: put a cordoned (or drained) node back in service; 409 when it is not cordoned. Audited."""
    admin_only(who)
    runtime, found = _node_actions(service, name)
    if found.get("schedulable", True):
        raise ApiError(409, "path.name", f"node {name} is not cordoned")
    # stored first: an uncordon the store did not take changes nothing (507/503)
    service.store_held_nodes([n for n in runtime.held_nodes() if n != name],
                             (who.actor, "node.uncordon", name, "back in service"))
    runtime.uncordon(name)
    service.invalidate_views()
    return _node_answer(service, name, "uncordon", [], f"node {name} back in service")


@router.post("/api/v1/nodes/{name}/drain", response_model=NodeActionOut, responses=ERRORS)
async def drain(name: NodeName, who: Auth, service: Svc) -> dict[str, Any]:
    """Admin: cordon the node and evict every job with a pod on it back to the queue (from its last checkpoint;
    a gang restarts whole, elsewhere), as remediation's drain does; the answer lists the jobs moved. 409 when
    the node is already cordoned and empty. Audited."""
    admin_only(who)
    runtime, found = _node_actions(service, name)
    if not found.get("schedulable", True) and not int(found.get("pods", 0)):
        raise ApiError(409, "path.name", f"node {name} is already drained (cordoned, no pods)")
    on_node = [j.id for j in service.runtime.jobs()
               if j.status == JobStatus.RUNNING and any(p.get("node") == name for p in j.placements)]
    # stored first: a drain the store did not take changes nothing (507/503)
    service.store_held_nodes([*runtime.held_nodes(), name],
                             (who.actor, "node.drain", name, f"cordoned and {len(on_node)} job(s) evicted: "
                                                            f"{', '.join(on_node)[:400]}"))
    events: list[JobEvent] = []
    jobs = runtime.drain(name, f"{name} drained by {who.actor}", events)
    service.invalidate_views()
    service.record_done(events, f"drain of {name}")  # the drain is stored: its job events may go with the next tick
    return _node_answer(service, name, "drain", jobs,
                        f"node {name} cordoned and {len(jobs)} job(s) sent back to the queue")


@router.get("/api/v1/topology", response_model=Topology, responses=ERRORS)
async def topology(who: Auth, service: Svc) -> Response:
    return cached_json(service, "topology", service.runtime.topology)


@router.get("/api/v1/alerts", response_model=Alerts, responses=ERRORS)
async def alerts(request: Request, who: Auth, service: Svc) -> Response:
    """Active alerts (firing, then pending), then recently resolved ones, each with ``state`` and ``silenced``;
    ``firing`` counts the firing alerts nobody silenced; ``counts`` per state."""
    def compute() -> dict[str, Any]:
        items, firing = get_ops(request).alerts(service.runtime.now)
        counts = {s: sum(1 for a in items if a["state"] == s) for s in ("firing", "pending", "resolved")}
        counts["silenced"] = sum(1 for a in items if a["silenced"])
        return {"firing": firing, "counts": counts, "alerts": items, "remediations": service.runtime.remediations()}

    return cached_json(service, "alerts", compute)


__all__ = ["router"]
