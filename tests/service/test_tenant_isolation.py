"""Tenant isolation in the REST API, over every route the app has: no answer to one tenant ever carries an id,
a name or a figure of another tenant, and nothing one tenant sends changes anything of another's.

The routes are read from the FastAPI app itself (``app.routes``, checked against ``/openapi.json``), so a route
added later is swept too: every route that takes a path parameter gets the other tenant's job ids, task ids,
tenant name, job names and the nodes its pods run on; every query parameter gets them and the usual values
(``tenant=<other>``, ``job=<other's job>``, ``q=<other's job name>``, ``cursor=0.0`` for the whole event feed,
``include_synthetic=true`` ...); every route with a body gets one that names the other tenant. The dashboard's
routes are mounted as ``gpucluster up`` mounts them.

Checks on each answer to the prober:

* it contains no secret of the victim (job ids, job names, its tenant name, its tokens, its task ids, the admin
  token) that the request did not itself carry (an error may echo the id it was asked about);
* every ``tenant`` field in it is the prober's own (or ``other``/empty, as cluster views mask pods), and its
  ``user_jobs`` counts are the prober's own jobs;
* no number in it equals one of the victim's distinctive figures (its quota, its weight);
* it is not a 500;
* after any request that is not a GET, the victim sees exactly what it saw before (jobs, its tenant row, its
  tasks, and its token still works).

The world the sweep runs in is a property (hypothesis): random jobs of both tenants, cancellations, clock steps
and fault drills. The real app, guard, runtime and SQLite store run in-process (``tests/service/inproc.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from fastapi import FastAPI
from fastapi.routing import APIRoute
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.service.inproc import ADMIN, InProc, in_process

ALPHA, BRAVO = "alpha", "bravo"
FIGURES = {BRAVO: {"quota_gpus": 29.375, "weight": 3.625, "max_priority": 613},
           ALPHA: {"quota_gpus": 31.875, "weight": 1.375, "max_priority": 587}}
"""Each tenant's distinctive settings: another tenant must never see its quota and weight (eighths, which no
clock value, count or device share here can equal), nor its maximum priority (it shows only in the tenant's
own row)."""
GENERIC_QUERY_VALUES = ("true", "1", "5000", "running", "pending", "0.0", "3600", ALPHA)
SAFE_METHODS = {"GET", "HEAD"}


# ---------------------------------------------------------------------------------------------- the routes
@dataclass(frozen=True, slots=True)
class Endpoint:
    method: str
    path: str
    path_params: tuple[str, ...]
    query_params: tuple[str, ...]
    has_body: bool


def _query_names(dependant: Any) -> set[str]:
    names = {p.alias for p in dependant.query_params}
    for sub in dependant.dependencies:
        names |= _query_names(sub)
    return names


def _leaves(routes: Iterable[Any]) -> Iterator[Any]:
    """Every route object with a path, through included routers and mounts."""
    for route in routes:
        inner = getattr(route, "original_router", None)  # an included router (newer FastAPI)
        if inner is not None:
            yield from _leaves(inner.routes)
            continue
        sub = getattr(route, "routes", None)
        if sub and not isinstance(route, APIRoute):
            yield from _leaves(sub)
        if getattr(route, "path", None) is not None:
            yield route


def endpoints(app: FastAPI) -> list[Endpoint]:
    out: set[Endpoint] = set()
    for route in _leaves(app.routes):
        path: str = route.path
        params = tuple(re.findall(r"{([^}:]+)(?::[^}]+)?}", path))
        if isinstance(route, APIRoute):
            for method in route.methods - {"HEAD", "OPTIONS"}:
                out.add(Endpoint(method, path, params, tuple(sorted(_query_names(route.dependant))),
                                 route.body_field is not None))
        elif hasattr(route, "methods") and route.methods:
            for method in set(route.methods) - {"HEAD", "OPTIONS"}:
                out.add(Endpoint(method, path, params, (), False))
        else:  # a mount (static files): anything below it
            out.add(Endpoint("GET", path.rstrip("/") + "/{rest}", (*params, "rest"), (), False))
    return sorted(out, key=lambda e: (e.path, e.method))


# ---------------------------------------------------------------------------------------------- the world
class Api:
    """Requests to the in-process app through httpx's ASGI transport on one event loop (no server, no thread
    per request: the sweep makes thousands of them)."""

    def __init__(self, app: FastAPI) -> None:
        self.loop = asyncio.new_event_loop()
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app, raise_app_exceptions=False),
                                      base_url="http://testserver")

    def as_(self, token: str) -> Caller:
        return Caller(self, token)

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.close()


@dataclass(frozen=True, slots=True)
class Caller:
    api: Api
    token: str

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        headers = {**kw.pop("headers", {}), "Authorization": f"Bearer {self.token}"}
        return self.api.loop.run_until_complete(self.api.http.request(method, url, headers=headers, **kw))

    def get(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("GET", url, **kw)

    def post(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("POST", url, **kw)

    def delete(self, url: str, **kw: Any) -> httpx.Response:
        return self.request("DELETE", url, **kw)


@dataclass
class World:
    ip: InProc
    api: Api
    tokens: dict[str, str] = field(default_factory=dict)
    tasks: dict[str, list[str]] = field(default_factory=lambda: {ALPHA: [], BRAVO: []})
    seq: int = 0

    def client(self, who: str) -> Caller:
        return self.api.as_(ADMIN if who == "admin" else self.tokens[who])

    def jobs(self, tenant: str) -> list[dict[str, Any]]:
        r = self.client(tenant).get("/api/v1/jobs", params={"limit": 5000})
        assert r.status_code == 200, r.text
        rows: list[dict[str, Any]] = r.json()["jobs"]
        return rows

    def submit(self, tenant: str, gpus: int, replicas: int, cores: int, priority: int, duration: float | None,
               preemptible: bool) -> None:
        self.seq += 1
        body: dict[str, Any] = {"name": f"{tenant}-job-{self.seq}", "replicas": replicas, "priority": priority,
                                "resources": {"nvidia.com/gpu": gpus, "nvidia.com/gpucores": cores},
                                "preemptible": preemptible}
        if duration is not None:
            body["duration_s"] = duration
        r = self.client(tenant).post("/api/v1/jobs", json=body, headers={"Idempotency-Key": f"{tenant}-{self.seq}"})
        assert r.status_code == 201, r.text

    def nodes_of(self, tenant: str) -> list[str]:
        return sorted({p["node"] for j in self.jobs(tenant) for p in j.get("placements") or []})

    def secrets(self, tenant: str) -> set[str]:
        out = {tenant, self.tokens[tenant], ADMIN, *self.tasks[tenant]}
        for j in self.jobs(tenant):
            out |= {j["id"], j["name"]}
        return out

    def view(self, tenant: str) -> str:
        """What ``tenant`` sees of itself (its token must still work), and its row as the admin sees it."""
        mine = self.client(tenant)
        parts = [mine.get("/api/v1/jobs", params={"limit": 5000}), mine.get("/api/v1/experiments"),
                 self.client("admin").get("/api/v1/tenants")]
        assert parts[0].status_code == 200, f"{tenant}'s token no longer works: {parts[0].text}"
        rows = [r for r in parts[2].json()["tenants"] if r["name"] == tenant]
        return json.dumps([parts[0].json(), parts[1].json(), rows], sort_keys=True)


@contextlib.contextmanager
def world(path: Path) -> Iterator[World]:
    with in_process(path, web=True) as ip:
        api = Api(ip.client.app)
        try:
            w = World(ip, api)
            for name in (ALPHA, BRAVO):
                w.tokens[name] = ip.tenant(name, **FIGURES[name])
            yield w
        finally:
            api.close()


def add_tasks(w: World) -> None:
    """Each tenant's background tasks: an experiment through the API, and a design task with a file (started
    through the task manager with a small piece of work: the design calculator itself takes seconds)."""
    for tenant in (ALPHA, BRAVO):
        r = w.client(tenant).post("/api/v1/experiments", json={"policies": ["binpack"], "jobs": 10})
        assert r.status_code == 202, r.text
        w.tasks[tenant].append(r.json()["id"])

        def work(report: Any, task: Any, tenant: str = tenant) -> dict[str, Any]:
            task.files["topology.svg"] = f"<svg xmlns='http://www.w3.org/2000/svg'><!-- {tenant} --></svg>".encode()
            return {"summary": f"design of {tenant}"}

        w.tasks[tenant].append(w.ip.service.tasks.start("design", f"tenant:{tenant}", work).id)


# ---------------------------------------------------------------------------------------------- the probes
@dataclass(frozen=True, slots=True)
class Probe:
    method: str
    url: str
    body: Any = None

    def text(self) -> str:
        return self.url + (json.dumps(self.body) if self.body is not None else "")


def _bodies(e: Endpoint, victim: str, victim_job: str, node: str) -> list[Any]:
    known: dict[tuple[str, str], list[Any]] = {
        ("POST", "/api/v1/jobs"): [{"name": "probe", "tenant": victim, "resources": {"nvidia.com/gpu": 1}}],
        ("POST", "/api/v1/tenants"): [{"name": victim, "quota_gpus": 0}, {"name": victim, "weight": 999}],
        ("POST", "/api/v1/silences"): [{"target": node, "duration_s": 600, "comment": "probe"}],
    }
    return known.get((e.method, e.path), [{"probe": victim_job}])


@dataclass(frozen=True, slots=True)
class Victim:
    """What the probes name of the victim."""

    tenant: str
    ids: list[str]
    names: list[str]
    tasks: list[str]
    nodes: list[str]

    @classmethod
    def of(cls, w: World, tenant: str) -> Victim:
        jobs = w.jobs(tenant)
        nodes = w.nodes_of(tenant) or [w.ip.service.runtime.nodes()[0]["name"]]
        return cls(tenant, [j["id"] for j in jobs], [j["name"] for j in jobs], list(w.tasks[tenant]), nodes)


def probes(e: Endpoint, target: Victim) -> Iterator[Probe]:
    victim, ids, names, nodes = target.tenant, target.ids, target.names, target.nodes
    files = ["topology.svg"]
    every = [*ids, victim, *target.tasks, *names[:2], *nodes[:2], "0", *files]
    few = [*ids[:1], victim, *target.tasks[-1:], *nodes[:1], "0", *files]
    values = {p: (every if len(e.path_params) == 1 else few) for p in e.path_params}
    combos = itertools.product(*(values[p] for p in e.path_params)) if e.path_params else [()]
    bodies = _bodies(e, victim, ids[0] if ids else victim, nodes[0]) if e.has_body else [None]
    for k, combo in enumerate(combos):
        path = e.path
        for p, v in zip(e.path_params, combo, strict=True):
            path = re.sub(r"{" + re.escape(p) + r"(?::[^}]+)?}", v, path)
        queries: list[dict[str, str]] = [{}]
        for q in e.query_params if k == 0 else ():  # every query value once, on the first path
            for v in (*ids, victim, *names[:1], *GENERIC_QUERY_VALUES):
                queries.append({q: v})
                if q != "tenant" and "tenant" in e.query_params:
                    queries.append({"tenant": victim, q: v})
        for query, body in itertools.product(queries, bodies):
            yield Probe(e.method, path + ("?" + urlencode(query) if query else ""), body)


# ---------------------------------------------------------------------------------------------- the checks
def _walk(value: Any) -> Iterator[Any]:
    yield value
    if isinstance(value, dict):
        for v in value.values():
            yield from _walk(v)
    elif isinstance(value, list):
        for v in value:
            yield from _walk(v)


def check(w: World, prober: str, victim: str, probe: Probe, status: int, text: str, secrets: set[str],
          objects: set[str], own_counts: dict[str, int]) -> None:
    where = f"{prober} -> {probe.method} {probe.url} {probe.body or ''} ({status})"
    assert status < 500, f"{where}: {text[:300]}"
    named = [o for o in objects if o in probe.url.split("?")[0]]
    assert not (named and 200 <= status < 300), f"{where}: answered for {victim}'s {named}: {text[:300]}"
    sent = probe.text()
    leaked = sorted(s for s in secrets if s not in sent and s in text)
    assert not leaked, f"{where} shows {victim}'s {leaked}: {text[:400]}"
    try:
        body = json.loads(text)
    except ValueError:
        return
    figures = {v for v in FIGURES[victim].values() if isinstance(v, float)}  # (times and counts are integers)
    for node in _walk(body):
        if isinstance(node, dict):  # (the OpenAPI document has schema objects under these names)
            if isinstance(node.get("tenant"), str):
                assert node["tenant"] in (prober, "other", ""), f"{where}: tenant {node['tenant']!r}"
            counts = node.get("user_jobs")
            if isinstance(counts, dict) and all(isinstance(v, int) for v in counts.values()):
                assert {k: v for k, v in counts.items() if v} == own_counts, f"{where}: user_jobs {counts}"
        elif isinstance(node, float | int) and not isinstance(node, bool):
            assert node not in figures, f"{where}: {victim}'s figure {node} in {text[:400]}"


def sweep(w: World, prober: str, victim: str) -> int:
    """Every probe of every endpoint by ``prober`` against ``victim``; returns how many requests were made."""
    client = w.client(prober)
    secrets = w.secrets(victim)
    objects = {j["id"] for j in w.jobs(victim)} | set(w.tasks[victim])
    before = w.view(victim)
    own_counts = dict(Counter(j["status"] for j in w.jobs(prober)))
    n = 0
    target = Victim.of(w, victim)
    for e in endpoints(w.ip.client.app):
        for probe in probes(e, target):
            r = client.request(probe.method, probe.url, json=probe.body)
            n += 1
            check(w, prober, victim, probe, r.status_code, r.text, secrets, objects, own_counts)
            if probe.method not in SAFE_METHODS:
                assert w.view(victim) == before, f"{prober} -> {probe.method} {probe.url} changed {victim}'s view"
                own_counts = dict(Counter(j["status"] for j in w.jobs(prober)))
    return n


# ---------------------------------------------------------------------------------------------- the tests
action = st.one_of(
    st.tuples(st.just("submit"), st.sampled_from([ALPHA, BRAVO]), st.sampled_from([1, 2, 8]), st.integers(1, 2),
              st.sampled_from([100, 30]), st.sampled_from([0, 50]), st.sampled_from([None, 30.0]), st.booleans()),
    st.tuples(st.just("cancel"), st.sampled_from([ALPHA, BRAVO]), st.integers(0, 5)),
    st.tuples(st.just("tick"), st.sampled_from([1.0, 20.0, 400.0])),
    st.tuples(st.just("fault"), st.integers(0, 5)),
)


def play(w: World, actions: list[tuple[Any, ...]]) -> None:
    for a in actions:
        if a[0] == "submit":
            w.submit(*a[1:])
        elif a[0] == "cancel":
            live = [j for j in w.jobs(a[1]) if j["status"] in ("pending", "running")]
            if live:
                assert w.client(a[1]).delete(f"/api/v1/jobs/{live[a[2] % len(live)]['id']}").status_code == 200
        elif a[0] == "tick":
            w.ip.tick(a[1])
        else:
            node = w.ip.service.runtime.nodes()[a[1]]["name"]
            assert w.client("admin").post(f"/api/v1/nodes/{node}/devices/0/fault").status_code == 200
    for tenant in (ALPHA, BRAVO):  # each has a running job, a waiting one and an ended one
        w.submit(tenant, 1, 1, 100, 0, None, True)
        w.submit(tenant, 1, 1, 100, 0, 5.0, True)
    w.ip.tick(1.0)
    w.submit(BRAVO, 1, 29, 100, 0, None, True)  # with the one it runs, more than its quota: it waits
    w.ip.tick(10.0)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(action, max_size=8))
def test_no_answer_to_one_tenant_carries_anything_of_another(tmp_path_factory: pytest.TempPathFactory,
                                                             actions: list[tuple[Any, ...]]) -> None:
    with world(tmp_path_factory.mktemp("iso") / "d") as w:
        play(w, actions)
        assert sweep(w, ALPHA, BRAVO) > 100


def test_both_ways_with_tasks_and_every_route_swept(tmp_path: Path) -> None:
    """The same sweep both ways, with each tenant's experiment and design tasks, and a check that the sweep
    reached every route ``/openapi.json`` documents (and the dashboard's)."""
    with world(tmp_path / "d") as w:
        ip = w.ip
        play(w, [("submit", ALPHA, 2, 2, 100, 0, None, True), ("tick", 1.0), ("fault", 0), ("tick", 20.0)])
        add_tasks(w)
        found = {(e.method, e.path) for e in endpoints(ip.client.app)}
        schema = ip.client.get("/openapi.json").json()["paths"]
        documented = {(m.upper(), p) for p, ops in schema.items() for m in ops if m.upper() not in ("HEAD",)}
        assert documented <= found, documented - found
        assert {("GET", "/"), ("GET", "/docs")} <= found and any(p.startswith("/static") for _, p in found)
        assert sweep(w, ALPHA, BRAVO) > 300
        assert sweep(w, BRAVO, ALPHA) > 300


def test_a_tenant_cannot_issue_or_revoke_another_existing_tenants_tokens(tmp_path: Path) -> None:
    with world(tmp_path / "d") as w:
        for method in ("POST", "DELETE"):
            r = w.client(ALPHA).request(method, f"/api/v1/tenants/{BRAVO}/tokens")
            assert r.status_code == 404 and r.json()["where"] == "path.name", r.text
            assert BRAVO not in r.text.replace(f"'{BRAVO}'", "")  # the name it asked about, nothing more
            assert w.client(BRAVO).get("/api/v1/whoami").json()["tenant"] == BRAVO  # still works
        # its own tokens, it may: the old one stops at once
        r = w.client(ALPHA).post(f"/api/v1/tenants/{ALPHA}/tokens")
        assert r.status_code == 201 and r.json()["revoked"] == 1
        assert w.client(ALPHA).get("/api/v1/whoami").status_code == 401
