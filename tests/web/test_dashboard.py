"""The dashboard end to end: Playwright driving Debian's Chromium against a real `gpucluster up`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.server import Server, start_server
from tests.web.conftest import login, shot

pytestmark = pytest.mark.integration

@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("web") / "data"
    srv = start_server(data, "--speed", "10", "--background", "0.6", "--faults-per-hour", "0")
    yield srv
    srv.stop()



def test_login_rejects_a_wrong_token(page: Any, server: Server) -> None:
    page.goto(server.url + "/")
    page.get_by_label("Token").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    page.locator("#login-error", has_text="not known").wait_for()
    assert page.locator("#app").is_hidden()
    shot(page, "00-login")


def test_end_to_end_submit_watch_and_inspect(page: Any, server: Server) -> None:
    login(page, server)
    shot(page, "01-login-done")
    from playwright.sync_api import expect

    expect(page.locator("[data-testid=kpi-nodes] .value")).to_have_text("240")
    expect(page.locator("#ov-chart svg")).to_be_visible()
    shot(page, "02-overview")

    # submit a job in the form and watch it go pending -> running -> succeeded
    page.get_by_role("link", name="Jobs").click()
    page.locator("#jf-name").fill("e2e-train")
    page.locator("#jf-replicas").fill("2")
    page.locator("#jf-gpus").fill("4")
    page.locator("#jf-duration").fill("40")
    page.get_by_role("button", name="Submit").click()
    row = page.locator("[data-testid=job-row-e2e-train]")
    status = row.locator("td.job-status")
    seen = []
    expect(row).to_be_visible()
    seen.append(status.get_attribute("data-status"))
    expect(status).to_have_attribute("data-status", "running", timeout=15_000)
    seen.append("running")
    shot(page, "03-job-running")
    expect(status).to_have_attribute("data-status", "succeeded", timeout=30_000)
    seen.append("succeeded")
    assert seen[0] in ("pending", "running")
    shot(page, "04-job-succeeded")

    # the job's drawer shows where it ran; open the node from there and see its devices
    row.click()
    drawer = page.locator("[data-testid=drawer]")
    expect(drawer.locator(".kv")).to_contain_text("placed all-or-nothing")
    node_link = drawer.locator("a[data-node]").first
    node_name = node_link.inner_text()
    node_link.click()
    expect(page.locator("#drawer-title")).to_have_text(node_name)
    expect(page.locator("[data-testid=node-devices] .device")).to_have_count(8)
    shot(page, "05-node-from-job")


def test_racks_heatmap_opens_a_nodes_devices(page: Any, server: Server) -> None:
    login(page, server)
    page.get_by_role("link", name="Racks & nodes").click()
    from playwright.sync_api import expect

    rows = page.locator(".node-row")
    expect(rows).to_have_count(240)
    shot(page, "06-racks-heatmap")
    page.locator("[data-testid=node-infer-0003]").click()
    expect(page.locator("#drawer-title")).to_have_text("infer-0003")
    devices = page.locator("[data-testid=node-devices] .device")
    expect(devices).to_have_count(8)
    expect(page.locator("[data-testid=drawer] .kv")).to_contain_text("L40S")
    shot(page, "07-node-devices")


def test_other_pages_render(page: Any, server: Server) -> None:
    login(page, server)
    from playwright.sync_api import expect

    page.get_by_role("link", name="Topology").click()
    expect(page.locator("[data-testid=topology-svg]")).to_be_visible()
    expect(page.locator("[data-testid=topology-svg]")).to_contain_text("leaf-007")
    shot(page, "08-topology")

    page.get_by_role("link", name="Tenants").click()
    page.locator("#tn-name").fill("vision")
    page.locator("#tn-quota").fill("64")
    page.get_by_role("button", name="Save & issue token").click()
    expect(page.locator("[data-testid=tenant-token]")).to_contain_text("gct_vision_")
    expect(page.locator("#tn-table")).to_contain_text("vision")
    shot(page, "09-tenants")

    page.get_by_role("link", name="Alerts").click()
    page.locator("#al-node").fill("train-0042")
    page.locator("#al-dev").fill("5")
    page.get_by_role("button", name="Inject XID 79").click()
    expect(page.locator("#al-table")).to_contain_text("train-0042/gpu5")
    expect(page.locator("#al-table")).to_contain_text("GpuXidCritical")
    expect(page.locator("#al-remed")).to_contain_text("drain")
    expect(page.locator("#al-remed")).to_contain_text("cordoned the node")
    shot(page, "10-alerts")

    page.get_by_role("link", name="Design").click()
    page.locator("#dz-mode").select_option("dgx-h100-superpod")
    page.locator("#dz-su").fill("4")
    page.get_by_role("button", name="Design it").click()
    expect(page.locator("[data-testid=design-kpis]")).to_contain_text("1,016", timeout=30_000)
    expect(page.locator("#dz-diagram")).to_have_attribute("src", re.compile("^blob:"))
    page.wait_for_timeout(300)  # let the diagram image paint before the screenshot
    shot(page, "11-design")

    page.get_by_role("link", name="Experiments").click()
    page.locator("#ex-jobs").fill("600")
    page.get_by_role("button", name="Run experiment").click()
    expect(page.locator("[data-testid=experiment-table]")).to_contain_text("spread", timeout=60_000)
    expect(page.locator("[data-testid=experiment-table]")).to_contain_text("stranding-fgd")
    shot(page, "12-experiments")


def test_a_tenant_sees_only_its_own_jobs_in_the_dashboard(page: Any, server: Server) -> None:
    with server.client() as admin:
        tok = admin.post("/api/v1/tenants", json={"name": "alpha"}).json()["token"]
        admin.post("/api/v1/jobs", json={"name": "admins-secret", "tenant": "beta",
                                         "resources": {"nvidia.com/gpu": 1}})
    login(page, server, tok)
    from playwright.sync_api import expect

    expect(page.locator("#who")).to_contain_text("alpha")
    page.get_by_role("link", name="Jobs").click()
    expect(page.locator("#jf-tenant")).to_have_count(0)
    page.locator("#jf-name").fill("alpha-job")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("[data-testid=job-row-alpha-job]")).to_be_visible()
    expect(page.locator("#jl-table")).not_to_contain_text("admins-secret")
    shot(page, "13-tenant-view")


def test_api_reference_renders_offline(page: Any, server: Server) -> None:
    from playwright.sync_api import expect

    external: list[str] = []
    page.on("request", lambda req: external.append(req.url) if not req.url.startswith(server.url) else None)
    page.goto(server.url + "/docs")
    docs = page.locator("[data-testid=api-docs]")
    expect(docs).to_contain_text("/api/v1/jobs")
    op = docs.locator("details.op", has_text="/api/v1/jobs").filter(has_text="POST").first
    op.locator("summary").click()
    expect(op).to_contain_text("replicas")
    expect(op).to_contain_text("Pods placed all-or-nothing")
    shot(page, "14-api-docs")
    assert external == []  # nothing is fetched from outside the control plane (no CDN)
