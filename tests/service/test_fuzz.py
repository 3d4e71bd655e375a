"""Fuzz the REST API from its own OpenAPI schema (schemathesis) against a real ``gpucluster up`` on loopback.

Every operation is driven with schema-valid and schema-invalid requests, as the admin and as a tenant, a
bounded number of examples each (``EXAMPLES``; about 1,300 requests, well under a minute). The bar: no answer
>= 500, no request without an answer within ``TIMEOUT_S`` (a hang), every status and body as the schema
documents it, invalid input refused with a 4xx, and auth enforced where the schema says it is. The server
survives it healthy. The token endpoints are left out (rotating the tokens the fuzzer uses would blind it; they
have their own tests in ``test_hardening.py``).
"""

from __future__ import annotations

import collections
import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
import schemathesis.checks
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from tests.service.inproc import write_small_cluster
from tests.service.server import ADMIN, Server, start_server

pytestmark = pytest.mark.integration

EXAMPLES = int(os.environ.get("GPUCLUSTER_FUZZ_EXAMPLES", "15"))
"""Examples per operation, generation mode and caller (set GPUCLUSTER_FUZZ_EXAMPLES for a deeper run)."""
TIMEOUT_S = 15.0
SKIPPED = {"/api/v1/admin/token", "/api/v1/tenants/{name}/tokens"}
CHECKS = ("not_a_server_error", "status_code_conformance", "content_type_conformance",
          "response_schema_conformance", "negative_data_rejection", "ignored_auth")


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A small cluster (experiments the fuzzer starts finish quickly), light background load."""
    root = tmp_path_factory.mktemp("fuzz")
    spec = write_small_cluster(root / "small.yaml")
    srv = start_server(root / "data", "--cluster", str(spec), "--speed", "10", "--background", "0.2",
                       "--faults-per-hour", "0", "--submit-rate", "1000", "--submit-burst", "10000")
    yield srv
    srv.stop()


def test_schema_driven_fuzz_finds_no_server_error_and_no_hang(fuzz_server: Server) -> None:
    srv = fuzz_server
    with srv.client() as admin:
        tenant = admin.post("/api/v1/tenants", json={"name": "fuzz-t", "quota_gpus": 8}).json()["token"]
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
    schemathesis.checks.load_all_checks()
    checks = [schemathesis.checks.CHECKS.get_one(name) for name in CHECKS]
    statuses: collections.Counter[int] = collections.Counter()
    problems: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        op = result.ok()
        if op.path in SKIPPED:
            continue
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            for who, token in (("admin", ADMIN), ("tenant", tenant)):
                _fuzz(srv, op, mode, f"as {who} ({mode.value})", {"Authorization": f"Bearer {token}"}, checks,
                      statuses, problems)
    assert operations >= 20
    assert not problems, "\n\n".join(problems[:10])
    assert not [s for s in statuses if s >= 500], statuses
    assert sum(statuses.values()) >= 60 * EXAMPLES, statuses  # it did run: ~1,300 requests at 15 examples
    assert statuses[201] > 0 and statuses[422] > 0 and statuses[200] > 0
    with srv.client() as admin:
        health = admin.get("/healthz").json()
        assert health["ok"] is True, health
        assert srv.proc.poll() is None


def _fuzz(srv: Server, op: Any, mode: GenerationMode, who: str, headers: dict[str, str], checks: list[Any],
          statuses: collections.Counter[int], problems: list[str]) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=op.as_strategy(mode))
    def run(case: Any) -> None:
        label = f"{case.method} {case.path} {who}"
        if case.query:  # parameters HTTP cannot carry (an empty list, None) are not sent: do not count them
            for key in [k for k, v in case.query.items() if v in ([], None)]:
                del case.query[key]
        try:
            response = case.call(base_url=srv.url, headers=headers, timeout=TIMEOUT_S)
        except Exception as exc:  # a timeout or a dropped connection: the server hung or died
            problems.append(f"{label}: no answer: {type(exc).__name__}: {exc}"[:500])
            return
        statuses[response.status_code] += 1
        try:
            case.validate_response(response, checks=checks, headers=headers)
        except (AssertionError, BaseExceptionGroup) as exc:
            problems.append(f"{label}: {exc}"[:1500])

    with contextlib.suppress(Unsatisfiable):  # nothing invalid to generate (an operation with no inputs)
        run()


def test_the_schema_documents_every_answer(tmp_path: Path) -> None:
    """Every route names its response model, so the schema says what comes back (not just ``{}``)."""
    from gpucluster.service import EmbeddedRuntime, ServiceConfig, create_app, open_service
    from tests.service.inproc import small_cluster

    svc, _ = open_service(EmbeddedRuntime(small_cluster(), background=0.0, fault_rate_per_hour=0.0),
                          ServiceConfig(data_dir=tmp_path / "d", admin_token="schema-test-admin-token"))
    try:
        doc = create_app(svc).openapi()
    finally:
        svc.close()
    untyped = []
    for path, item in doc["paths"].items():
        for method, op in item.items():
            ok = next(v for k, v in op["responses"].items() if k.startswith("2"))
            content = ok.get("content", {})
            if "application/json" in content and not content["application/json"].get("schema", {}).get("$ref") \
                    and path not in ("/api/v1/design",):
                untyped.append(f"{method.upper()} {path}")
            assert "401" in op["responses"] or path == "/healthz", (method, path)
    assert not untyped, untyped
    assert doc["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
