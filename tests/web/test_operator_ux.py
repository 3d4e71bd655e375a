"""Issue 20's dashboard changes, each driven in Debian's Chromium against a real `gpucluster up` (default
remediation: disruptive actions planned only), with a screenshot per change in test-artifacts/web/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.server import Server, start_server, submit_job, wait_running
from tests.web.conftest import expect as _expect
from tests.web.conftest import login, shot

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("ux") / "data"
    srv = start_server(data, "--speed", "10", "--background", "0.5", "--faults-per-hour", "0")
    yield srv
    srv.stop()


def test_alert_tabs_state_column_and_silencing(page: Any, server: Server) -> None:
    expect = _expect()
    with server.client() as c:
        c.post("/api/v1/nodes/infer-0009/devices/1/fault", params={"xid": 13})
    login(page, server)
    page.get_by_role("link", name="Alerts").click()
    table = page.locator("#al-table")
    expect(table).to_contain_text("infer-0009/gpu1")
    # the Firing tab holds exactly what the badge counts, every row saying "firing"
    with server.client() as c:
        firing = c.get("/api/v1/alerts").json()["firing"]
    expect(page.locator("#alert-badge")).to_have_text(str(firing))
    expect(page.locator("[data-testid=tab-firing] .count")).to_have_text(str(firing))
    states = page.locator("#al-table [data-testid=alert-state]").all_inner_texts()
    assert states and {s.lower() for s in states} == {"firing"}
    shot(page, "20-alerts-firing-tab")
    page.locator("[data-testid=tab-pending]").click()
    expect(page.locator("[data-testid=tab-pending]")).to_have_class("tab active")
    pending = page.locator("#al-table [data-testid=alert-state]").all_inner_texts()
    assert {s.lower() for s in pending} <= {"pending"}
    # silence the XID error from its row: it leaves the Firing tab for the Silenced one, the badge drops
    page.locator("[data-testid=tab-firing]").click()
    row = page.locator("#al-table tr", has_text="infer-0009/gpu1").filter(has_text="GpuXidError")
    row.get_by_role("button", name="silence").click()
    expect(page.locator("#al-table")).not_to_contain_text("infer-0009/gpu1")
    page.locator("[data-testid=tab-silenced]").click()
    expect(page.locator("#al-table")).to_contain_text("infer-0009/gpu1")
    expect(page.locator("#al-table")).to_contain_text("silenced")
    expect(page.locator("[data-testid=silences]")).to_contain_text("GpuXidError on infer-0009/gpu1")
    with server.client() as c:
        body = c.get("/api/v1/alerts").json()
    assert body["counts"]["silenced"] >= 1
    expect(page.locator("#alert-badge")).to_have_text(str(body["firing"]))
    shot(page, "21-alerts-silenced-tab")
    page.locator("#al-table tr", has_text="infer-0009/gpu1").get_by_role("button", name="unsilence").click()
    page.locator("[data-testid=tab-firing]").click()
    expect(page.locator("#al-table")).to_contain_text("infer-0009/gpu1")


def test_planned_remediation_is_shown_and_nothing_moves(page: Any, server: Server) -> None:
    expect = _expect()
    job = wait_running(server, submit_job(server, {"name": "ux-victim", "resources": {"nvidia.com/gpu": 1}})["id"])
    node, gpu = job["placements"][0]["node"], job["placements"][0]["devices"][0]["index"]
    login(page, server)
    page.get_by_role("link", name="Alerts").click()
    page.locator("#al-node").fill(node)
    page.locator("#al-dev").fill(str(gpu))
    page.get_by_role("button", name="Inject XID 79").click()
    expect(page.locator("#al-planned")).to_contain_text(f"{node}/gpu{gpu}")
    expect(page.locator("#al-planned")).to_contain_text("would evict")
    expect(page.locator("[data-testid=remediation-modes] [data-action=drain]")).to_contain_text("planned only")
    expect(page.locator("[data-testid=remediation-modes] [data-action=cordon]")).to_contain_text("on")
    shot(page, "22-remediation-planned")
    with server.client() as c:
        after = c.get(f"/api/v1/jobs/{job['id']}").json()
        c.delete(f"/api/v1/jobs/{job['id']}")
    assert after["status"] == "running" and after["placements"] == job["placements"]


def test_drawers_close_on_navigation(page: Any, server: Server) -> None:
    expect = _expect()
    login(page, server)
    page.get_by_role("link", name="Racks & nodes").click()
    page.locator("[data-testid=node-train-0005]").click()
    drawer = page.locator("[data-testid=drawer]")
    expect(drawer).to_be_visible()
    page.get_by_role("link", name="Jobs").click()
    expect(drawer).to_be_hidden()
    job = submit_job(server, {"name": "ux-drawer", "resources": {"nvidia.com/gpu": 1}, "duration_s": 600})
    page.locator(f"[data-job='{job['id']}']").click()
    expect(drawer).to_be_visible()
    shot(page, "23-job-drawer-open")
    page.get_by_role("link", name="Tenants").click()
    expect(drawer).to_be_hidden()
    shot(page, "24-drawer-closed-after-navigation")


def test_whole_gpu_shares_and_a_neutral_full(page: Any, server: Server) -> None:
    expect = _expect()
    job = wait_running(server, submit_job(server, {"name": "ux-whole", "resources": {"nvidia.com/gpu": 2},
                                            "duration_s": 900})["id"])
    login(page, server)
    page.get_by_role("link", name="Jobs").click()
    page.locator("[data-testid=job-row-ux-whole]").click()
    devices = page.locator("[data-testid=drawer] [data-testid=placement-devices]").first
    expect(devices).to_contain_text("(whole)")
    assert "(0%)" not in devices.inner_text()
    page.locator("[data-testid=drawer] a[data-node]").first.click()
    node = job["placements"][0]["node"]
    expect(page.locator("#drawer-title")).to_have_text(node)
    gpu = job["placements"][0]["devices"][0]["index"]
    card = page.locator(f"[data-testid=node-devices] [data-testid=device-{gpu}]")
    expect(card.locator("[data-testid=share]").filter(has_text="whole").first).to_be_visible()
    expect(card.locator(".full-tag")).to_have_text("full")
    expect(card.locator(".bar.full > span").first).to_have_css("background-color", "rgb(154, 168, 184)")  # slate
    assert card.locator(".bar.crit").count() == 0
    shot(page, "25-whole-gpu-neutral-full")


def test_rack_rows_do_not_wrap_and_node_names_show(page: Any, server: Server) -> None:
    expect = _expect()
    login(page, server)
    page.get_by_role("link", name="Racks & nodes").click()
    expect(page.locator(".node-row")).to_have_count(240)
    for width in (1440, 1100):
        page.set_viewport_size({"width": width, "height": 900})
        rows = page.evaluate("""() => [...document.querySelectorAll('.racks')].map(g =>
            new Set([...g.querySelectorAll(':scope > .rack')].map(r => r.offsetTop)).size)""")
        assert rows and all(n == 1 for n in rows), rows  # every leaf's racks on one row
        name = page.locator("[data-testid=node-train-0000] .nname")
        expect(name).to_have_text("train-0000")
        expect(name).to_be_visible()
        shot(page, f"26-racks-{width}")


def test_per_gpu_usage_with_sparklines(page: Any, server: Server) -> None:
    expect = _expect()
    job = wait_running(server, submit_job(server, {"name": "ux-usage", "resources": {"nvidia.com/gpu": 1},
                                            "duration_s": 3000})["id"])
    node, gpu = job["placements"][0]["node"], job["placements"][0]["devices"][0]["index"]
    login(page, server)
    page.get_by_role("link", name="Racks & nodes").click()
    page.locator(f"[data-testid=node-{node}]").click()
    card = page.locator(f"[data-testid=device-{gpu}]")
    util = card.locator("[data-testid=util]")
    expect(util).not_to_have_text("0%")  # the job keeps its GPU busy (the simulated collector)
    expect(card.locator("[data-testid=usage]")).to_contain_text("°C")
    expect(card.locator("[data-testid=usage]")).to_contain_text(" W")
    # a sparkline appears once the collector has been scraped twice (every 30 clock-s = 3 s at x10)
    expect(card.locator("svg.spark path").first).to_be_attached(timeout=30_000)
    expect(card.locator("[data-testid=xid]")).to_have_text("none")
    with server.client() as c:
        c.post(f"/api/v1/nodes/{node}/devices/{gpu}/fault")
    expect(card.locator("[data-testid=xid]")).to_have_text("XID 79", timeout=10_000)
    shot(page, "27-per-gpu-usage")
    with server.client() as c:
        c.delete(f"/api/v1/jobs/{job['id']}")


def test_queue_view(page: Any, server: Server) -> None:
    expect = _expect()
    big = submit_job(server, {"name": "ux-queued", "replicas": 208, "resources": {"nvidia.com/gpu": 8}})  # all H100 nodes
    try:
        login(page, server)
        page.get_by_role("link", name="Queue").click()
        row = page.locator("[data-testid=queue-row-ux-queued]")
        expect(row.locator("[data-testid=queue-why]")).to_contain_text(  # tried and refused, or not tried
            re.compile("nodes are available|waiting for GPUs: needs 1664"), timeout=20_000)
        assert int(row.locator("[data-testid=queue-pos]").inner_text()) >= 1
        expect(row.locator("[data-testid=queue-est]")).not_to_be_empty()
        shot(page, "28-queue")
    finally:
        with server.client() as c:
            c.delete(f"/api/v1/jobs/{big['id']}")


def test_submit_form_gpu_type_priority_replicas_duration(page: Any, server: Server) -> None:
    expect = _expect()
    sent: list[dict[str, Any]] = []
    page.on("request", lambda r: sent.append(r.post_data_json) if r.method == "POST" and r.url.endswith(
        "/api/v1/jobs") else None)
    login(page, server)
    page.get_by_role("link", name="Jobs").click()
    kind = page.locator("#jf-type")
    expect(kind.locator("option")).to_have_count(3)  # any, and the cluster's two models
    with server.client() as c:
        takes_type = "gpu_type" in c.get("/openapi.json").json()["components"]["schemas"]["JobIn"]["properties"]
    if takes_type:
        kind.select_option("L40S-48GB")
    else:
        expect(kind).to_be_disabled()  # this server's API has no gpu_type: the form does not send one
    page.locator("#jf-name").fill("ux-form")
    page.locator("#jf-replicas").fill("2")
    page.locator("#jf-priority").fill("50")
    page.locator("#jf-duration").fill("30")
    if takes_type:  # the engine's job body: kind and preemptible too
        page.locator("#jf-kind").select_option("infer")
        page.locator("#jf-preemptible").uncheck()
        page.locator("#jf-ref-gpu").fill("V100")
    page.get_by_role("button", name="Submit").click()
    expect(page.locator("[data-testid=job-row-ux-form]")).to_be_visible()
    body = sent[-1]
    assert body["replicas"] == 2 and body["priority"] == 50 and body["duration_s"] == 30
    assert ("gpu_type" in body) == takes_type
    with server.client() as c:
        job = c.get("/api/v1/jobs", params={"q": "ux-form"}).json()["jobs"][0]
    assert job["priority"] == 50 and job["replicas"] == 2
    if takes_type:
        assert body["kind"] == "infer" and body["preemptible"] is False
        assert job["gpu_type"] == "L40S-48GB" and job["kind"] == "infer" and job["preemptible"] is False
        assert body["ref_gpu"] == job["ref_gpu"] == "V100"
    shot(page, "29-submit-form")


def test_time_range_picker(page: Any, server: Server) -> None:
    expect = _expect()
    login(page, server)
    expect(page.locator("#ov-chart svg")).to_be_visible()
    with page.expect_request(lambda r: "/api/v1/history?range_s=300" in r.url):
        page.locator("[data-testid=ov-range]").select_option("300")
    with page.expect_response(lambda r: "/api/v1/history?range_s=86400" in r.url) as resp:
        page.locator("[data-testid=ov-range]").select_option("86400")
    points = resp.value.json()["points"]
    assert points and points[-1]["t"] - points[0]["t"] <= 86400
    expect(page.locator("#ov-chart svg")).to_be_visible()
    shot(page, "30-overview-range")
