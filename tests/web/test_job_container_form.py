"""The submit form's Container section (issue 26), in Debian's Chromium against a real ``gpucluster up``: image,
command, args, environment (literal, from a Secret key, every key of a ConfigMap), volumes, working directory,
service account and tolerations reach the API as the job body's fields and show in the job's drawer; a line the
form cannot read is reported and nothing is sent."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.server import Server, start_server
from tests.web.conftest import login, shot

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = start_server(tmp_path_factory.mktemp("container") / "data", "--speed", "10", "--background", "0",
                       "--faults-per-hour", "0")
    yield srv
    srv.stop()


def test_the_container_section_sends_the_pod_template(page: Any, server: Server) -> None:
    from playwright.sync_api import expect

    sent: list[dict[str, Any]] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.method == "POST" and r.url.endswith(
        "/api/v1/jobs") else None)
    login(page, server)
    page.get_by_role("link", name="Jobs").click()
    page.locator("#jf-name").fill("ux-container")
    page.locator("[data-testid=jf-container] summary").click()
    page.locator("#jf-image").fill("registry.example/ml/train:v1")
    page.locator("#jf-command").fill('["python", "-m", "train"]')
    page.locator("#jf-args").fill("--epochs 3")
    page.locator("#jf-workdir").fill("/workspace")
    page.locator("#jf-sa").fill("trainer")
    page.locator("#jf-env").fill("MODE=fast\nTOKEN=secret:hf-token/token\nconfigmap:common")
    page.locator("#jf-volumes").fill("/data=pvc:datasets:ro\n/etc/cfg=configmap:train-cfg")
    page.locator("#jf-tolerations").fill("nvidia.com/gpu:Exists:NoSchedule\ndedicated=ml:NoExecute")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("[data-testid=job-row-ux-container]")).to_be_visible()
    body = sent[-1]
    assert body["image"] == "registry.example/ml/train:v1"
    assert (body["command"], body["args"], body["working_dir"], body["service_account"]) == (
        ["python", "-m", "train"], ["--epochs", "3"], "/workspace", "trainer")
    assert body["env"] == [{"name": "MODE", "value": "fast"}, {"name": "TOKEN", "secret": "hf-token", "key": "token"}]
    assert body["env_from"] == [{"config_map": "common"}]
    assert body["volumes"] == [{"mount_path": "/data", "pvc": "datasets", "read_only": True},
                               {"mount_path": "/etc/cfg", "config_map": "train-cfg"}]
    assert body["tolerations"] == [{"operator": "Exists", "key": "nvidia.com/gpu", "effect": "NoSchedule"},
                                   {"key": "dedicated", "value": "ml", "effect": "NoExecute"}]
    with server.client() as c:
        job = c.get("/api/v1/jobs", params={"q": "ux-container"}).json()["jobs"][0]
    assert job["image"] == "registry.example/ml/train:v1" and job["volumes"][0]["pvc"] == "datasets"
    page.locator("[data-testid=job-row-ux-container]").click()
    expect(page.locator("[data-testid=job-image]")).to_have_text("registry.example/ml/train:v1")
    expect(page.locator("#drawer-body")).to_contain_text("/data ← pvc datasets")
    shot(page, "31-submit-container")
    # a volume line without a source is reported by the form, nothing is sent
    page.locator("#drawer-close").click()
    before = len(sent)
    page.locator("#jf-name").fill("ux-bad-volume")
    page.locator("#jf-volumes").fill("/data")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#jf-error")).to_contain_text("volume line 1")
    assert len(sent) == before
    # what the server refuses is shown with where it is
    page.locator("#jf-volumes").fill("relative=pvc:x")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("#jf-error")).to_contain_text("volumes.0.mount_path")


def test_the_job_name_pattern_is_a_valid_regex_that_checks(page: Any, server: Server) -> None:
    """Chromium compiles `pattern` with the `v` flag, where `[-a-z0-9]` is invalid: on main it logged a console
    error and skipped the check, so a bad name went to the API. Now the browser checks the name."""
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    login(page, server)
    page.get_by_role("link", name="Jobs").click()
    name = page.locator("#jf-name")
    name.fill("good-name-1")
    assert name.evaluate("e => e.checkValidity()") is True
    for bad in ("Bad_Name", "-lead", "trail-"):
        name.fill(bad)
        assert name.evaluate("e => e.checkValidity()") is False, bad
    assert not [e for e in errors if "pattern" in e], errors
