"""A request body that is not a JSON object at all, on every route that takes a body, is a 4xx that says where
(``body``, or ``headers.Content-Type``) and why in the request's terms, and changes nothing.

The routes are read from the app (``test_tenant_isolation.endpoints``), so a route added later is covered. On main
before this test, a JSON syntax error answered ``where`` = the character offset (``"25"``) and ``why`` = "JSON
decode error", and a JSON body sent as another media type (curl's ``-d`` sends form encoding) answered "Input
should be a valid dictionary or object to extract fields from", naming neither the header nor what it should be.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

import pytest

from tests.service.inproc import InProc, in_process
from tests.service.test_tenant_isolation import endpoints

JSON = "application/json"
OBJECT = b'{"name": "probe", "resources": {"nvidia.com/gpu": 1}}'
CASES = [  # (body, Content-Type or None, status, where, what the answer's why must say)
    (b'{"name": "probe", "resources":', JSON, 422, "body", r"^not valid JSON at character 30: Expecting value"),
    (b'{"name": "probe"', JSON, 422, "body", r"^not valid JSON at character \d+: "),
    (b"\xff", JSON, 400, "body", r"could not be read as JSON"),
    (OBJECT, "application/x-www-form-urlencoded", 422, "headers.Content-Type",
     r"Content-Type: application/json \(this one came as application/x-www-form-urlencoded\)"),
    (OBJECT, "text/plain; charset=utf-8", 422, "headers.Content-Type", r"\(this one came as text/plain\)"),
    (OBJECT, None, 422, "headers.Content-Type", r"without a Content-Type"),
    (b"[1, 2]", JSON, 422, "body", r"^expected a JSON object, got an array$"),
    (b'"probe"', JSON, 422, "body", r"^expected a JSON object, got a string$"),
    (b"null", JSON, 422, "body", r"^expected a JSON object, got null$"),
    (b"7", JSON, 422, "body", r"^expected a JSON object, got a number$"),
]


@pytest.fixture(scope="module")
def ip(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProc]:
    with in_process(tmp_path_factory.mktemp("bad") / "d", web=True) as ip:
        token = ip.tenant("team", quota_gpus=4)
        r = ip.as_(token).post("/api/v1/jobs", json={"name": "kept", "resources": {"nvidia.com/gpu": 1}})
        assert r.status_code == 201, r.text
        ip.tick()
        yield ip


def _state(ip: InProc) -> str:
    """Everything a request with a body could have changed."""
    c = ip.client
    return json.dumps([c.get(u).json() for u in ("/api/v1/jobs", "/api/v1/tenants", "/api/v1/audit",
                                                 "/api/v1/silences", "/api/v1/experiments")], sort_keys=True)


def test_every_route_with_a_body_is_found(ip: InProc) -> None:
    found = {(e.method, e.path) for e in endpoints(ip.client.app) if e.has_body}
    assert {("POST", "/api/v1/jobs"), ("POST", "/api/v1/tenants"), ("PATCH", "/api/v1/tenants/{name}")} <= found


@pytest.mark.parametrize(("body", "media", "status", "where", "why"), CASES)
def test_a_body_that_is_no_json_object_says_where_and_why_and_changes_nothing(
        ip: InProc, body: bytes, media: str | None, status: int, where: str, why: str) -> None:
    before = _state(ip)
    for e in endpoints(ip.client.app):
        if not e.has_body:
            continue
        url = e.path.replace("{name}", "team")
        assert "{" not in url, f"fill in the path parameters of {e.path}"
        headers = {"Content-Type": media} if media is not None else {}
        r = ip.client.request(e.method, url, content=body, headers=headers)
        answer = r.json()
        assert r.status_code == status, f"{e.method} {url}: {r.text}"
        assert answer["where"] == where and re.search(why, answer["error"]), f"{e.method} {url}: {r.text}"
        for problem in answer.get("problems") or ():
            assert problem["where"] == where and re.search(why, problem["why"]), f"{e.method} {url}: {r.text}"
    assert _state(ip) == before
    jobs = ip.client.get("/api/v1/jobs").json()["jobs"]
    assert [(j["name"], j["status"]) for j in jobs] == [("kept", "running")]


def test_field_errors_keep_naming_the_field(ip: InProc) -> None:
    """The body errors above are told apart from an invalid field, which still names the field."""
    r = ip.client.post("/api/v1/jobs", json={"name": "x", "resources": {"nvidia.com/gpu": 1}, "replicas": 0})
    assert r.status_code == 422 and r.json()["where"] == "replicas", r.text
    r = ip.client.post("/api/v1/jobs", json={"name": "x", "resources": [1]})
    assert r.status_code == 422 and r.json()["where"] == "resources", r.text
    r = ip.client.post("/api/v1/jobs", content=b"{}", headers={"Content-Type": JSON})
    assert r.status_code == 422 and r.json()["where"] in ("name", "resources"), r.text
