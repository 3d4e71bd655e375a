"""Issue 32's dashboard, in Debian's Chromium against a real `gpucluster up` (the demo's background load), at
1440x900 and at a phone's 390x844: utilisation beside allocation on the overview (cards, a chart with labelled
axes and hover values, the allocated-but-idle list), the rack heatmap's switch, the phone layout (no page wider
than the screen), one folded event for a waiting gang, and the design page (the default PSU passes, the report
as HTML, the cable list and cluster spec as downloads). Screenshots in test-artifacts/web/."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.jobs.engine import NOTE_REPEAT_S
from tests.service.server import Server, start_server, submit_job, wait_for
from tests.web.conftest import expect as _expect
from tests.web.conftest import login, shot

pytestmark = pytest.mark.integration

DESKTOP = {"width": 1440, "height": 900}
PHONE = {"width": 390, "height": 844}
VIEWPORTS = [pytest.param(DESKTOP, id="1440x900"), pytest.param(PHONE, id="390x844")]
PAGES = {  # page -> what shows once it has drawn
    "overview": "#ov-chart svg", "racks": ".node-row", "topology": "[data-testid=topology-svg]",
    "jobs": "#jl-table > *", "history": "#hs-table > *", "queue": "#q-table > *", "tenants": "#tn-table table", "alerts": "#al-table > *",
    "design": "#dz-form", "experiments": "#ex-form",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    data = tmp_path_factory.mktemp("glance") / "data"
    srv = start_server(data, "--speed", "10", "--background", "0.6", "--faults-per-hour", "0")
    yield srv
    srv.stop()


def _overview(server: Server) -> dict[str, Any]:
    with server.client() as c:
        body: dict[str, Any] = c.get("/api/v1/overview").json()
    return body


def _scraped(server: Server) -> dict[str, Any]:
    """The overview once every GPU has been scraped (each monitor shard evaluates every 30 clock-s)."""
    found: dict[str, Any] = wait_for(lambda: (o := _overview(server)).get("gpus_reporting") == o["devices"]
                                     and o.get("allocated_idle_gpus") and o, "every GPU scraped", timeout=60)
    return found


def _overflow(page: Any) -> int:
    """How many CSS pixels the document is wider than the viewport (0: nothing sticks out sideways)."""
    return int(page.evaluate("() => document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def _go(page: Any, name: str, phone: bool) -> None:
    if phone:  # the folded navigation: open it, pick the page, it folds again
        page.get_by_test_id("nav-toggle").click()
    page.locator(f"#nav a[data-page={name}]").click()
    if phone:
        _expect()(page.locator("#nav")).to_be_hidden()
    page.locator(f"#page-{name} {PAGES[name]}").first.wait_for()


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_no_page_is_wider_than_the_screen(page: Any, server: Server, viewport: dict[str, int]) -> None:
    expect = _expect()
    phone = viewport == PHONE
    page.set_viewport_size(viewport)
    login(page, server)
    nav = page.locator("#nav")
    if phone:
        expect(nav).to_be_hidden()  # folded behind the menu button, not 210 of 390 px
        page.get_by_test_id("nav-toggle").click()
        expect(nav).to_be_visible()
        expect(page.get_by_test_id("nav-toggle")).to_have_attribute("aria-expanded", "true")
        page.get_by_test_id("nav-toggle").click()
        expect(nav).to_be_hidden()
    else:
        expect(nav).to_be_visible()
        expect(page.get_by_test_id("nav-toggle")).to_be_hidden()
    submit_job(server, {"name": f"glance-wide-table-{viewport['width']}", "resources": {"nvidia.com/gpu": 1}, "duration_s": 900})
    for name in PAGES:
        _go(page, name, phone)
        assert _overflow(page) == 0, f"{name} is {_overflow(page)} px wider than the {viewport['width']} px screen"
        width, screen = page.evaluate(f"""() => [document.querySelector('#page-{name}').getBoundingClientRect().width,
                                                  document.documentElement.clientWidth]""")
        assert width >= (0.9 * screen if phone else 0.75 * screen), (name, width, screen)  # the content has the room
        shot(page, f"32-{name}-{viewport['width']}")
    _go(page, "racks", phone)
    page.locator(".node-row").first.click()
    expect(page.locator("[data-testid=node-devices] .device").first).to_be_visible()
    assert _overflow(page) == 0
    shot(page, f"32-node-drawer-{viewport['width']}")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_overview_shows_use_beside_allocation(page: Any, server: Server, viewport: dict[str, int]) -> None:
    expect = _expect()
    page.set_viewport_size(viewport)
    o = _scraped(server)
    assert o["gpu_utilisation"] < o["gpu_alloc"]  # the demo's jobs do not all keep their GPUs busy
    login(page, server)
    util = page.get_by_test_id("kpi-util")
    expect(util.locator(".value")).to_have_text(re.compile(r"^\d+\.\d%$"))
    expect(util.locator(".sub")).to_contain_text("allocated")
    idle = page.get_by_test_id("kpi-idle")
    expect(idle.locator(".value")).to_have_text(re.compile(r"^[1-9][\d,]*$"), timeout=20_000)
    rows = page.get_by_test_id("idle-row")
    expect(rows.first).to_be_visible()
    assert rows.count() <= 50
    first = rows.first.inner_text()
    assert re.search(r"/gpu\d", first) and "synthetic" in first
    expect(page.locator("#ov-idle-sum")).to_contain_text("under 5% busy")
    # the chart: allocation and utilisation lines, labelled axes, values on hover
    chart = page.locator("#ov-chart")
    expect(chart.get_by_test_id("x-axis-label")).to_have_text("runtime clock")
    expect(chart.get_by_test_id("y-axis-label")).to_have_text("% of cluster GPUs")
    expect(page.locator(".chart-legend").first).to_contain_text("GPU utilisation")
    chart.locator("svg").scroll_into_view_if_needed()
    box = chart.locator("svg").bounding_box()
    assert box is not None and box["width"] >= viewport["width"] * (0.8 if viewport == PHONE else 0.4)
    page.mouse.move(box["x"] + box["width"] * 0.9, box["y"] + box["height"] / 2)
    tip = chart.get_by_test_id("chart-tip")
    expect(tip).to_be_visible()
    expect(tip).to_contain_text("GPU compute allocated")
    expect(tip).to_contain_text(re.compile(r"GPU utilisation \d+\.\d%"))
    expect(tip).to_contain_text(re.compile(r"T\+\d+h"))
    assert _overflow(page) == 0
    shot(page, f"32-overview-utilisation-{viewport['width']}")


def test_the_heatmap_switch(page: Any, server: Server) -> None:
    expect = _expect()
    o = _scraped(server)
    login(page, server)
    page.get_by_role("link", name="Racks & nodes").click()
    switch = page.get_by_test_id("heat-switch")
    expect(switch.locator("button")).to_have_text(["Allocation", "Utilisation", "Memory", "Temperature"])
    body = page.locator("#rk-body")
    expect(body).to_have_attribute("data-metric", "alloc")
    # an allocated-but-idle GPU: full colour by allocation, dark by utilisation. The clock runs 10x, so the GPU the
    # overview named may be freed before the page is drawn: read both again until they describe the same moment
    assert o["allocated_idle"]

    def allocated_gpu_drawn_coloured() -> bool:
        x = _scraped(server)["allocated_idle"][0]
        page.reload()
        expect(page.locator("#rk-body")).to_have_attribute("data-metric", "alloc")
        cell = page.locator(f"[data-testid=node-{x['node']}] .cell").nth(x["gpu"])
        return float(cell.get_attribute("data-v") or 0) > 0

    wait_for(allocated_gpu_drawn_coloured, "an allocated GPU of the overview drawn coloured by allocation", timeout=60)
    shot(page, "32-heatmap-allocation")
    switch.get_by_role("radio", name="Utilisation").click()
    expect(body).to_have_attribute("data-metric", "util")
    expect(switch.get_by_role("radio", name="Utilisation")).to_have_attribute("aria-checked", "true")
    expect(page.get_by_test_id("heat-legend")).to_contain_text("100% busy")
    # the clock runs 10x: the GPU picked a moment ago may have gone to another, busy job since; so the overview
    # is read again and the page drawn again until both describe the same moment (a deadline, no sleep)

    def idle_gpu_drawn_dark() -> bool:
        y = _scraped(server)["allocated_idle"][0]
        page.reload()
        expect(page.locator("#rk-body")).to_have_attribute("data-metric", "util")
        cell = page.locator(f"[data-testid=node-{y['node']}] .cell").nth(y["gpu"])
        return float(cell.get_attribute("data-v") or 1) < 0.05

    wait_for(idle_gpu_drawn_dark, "an allocated-but-idle GPU of the overview drawn dark by utilisation", timeout=60)
    expect(page.locator(".leaf-title").first).to_contain_text("utilised")
    shot(page, "32-heatmap-utilisation")
    switch.get_by_role("radio", name="Temperature").click()
    expect(body).to_have_attribute("data-metric", "temp")
    expect(page.get_by_test_id("heat-legend")).to_contain_text("90 °C")
    values = [float(v) for v in page.locator(".cell").evaluate_all("cs => cs.map(c => c.dataset.v)") if v]
    assert values and all(0.0 <= v <= 1.0 for v in values) and len(set(values)) > 3
    shot(page, "32-heatmap-temperature")
    switch.get_by_role("radio", name="Memory").click()
    expect(body).to_have_attribute("data-metric", "mem")
    page.reload()  # the choice is kept
    expect(page.locator("#rk-body")).to_have_attribute("data-metric", "mem")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_a_waiting_gang_shows_one_folded_event(page: Any, server: Server, viewport: dict[str, int]) -> None:
    """A gang that cannot start (every H100 node, under the background load) waits a clock minute and more:
    its drawer shows one ``unschedulable`` event with a count, not one row per scheduling pass."""
    expect = _expect()
    page.set_viewport_size(viewport)
    gang = submit_job(server, {"name": f"glance-gang-{viewport['width']}", "replicas": 208,
                               "resources": {"nvidia.com/gpu": 8}})
    try:
        def clock() -> float:
            with server.client() as c:
                return float(c.get("/healthz").json()["t"])

        start = clock()
        wait_for(lambda: clock() >= start + NOTE_REPEAT_S + 5, "a clock minute to pass", timeout=60)
        login(page, server)
        _go(page, "queue", viewport == PHONE)
        page.locator(f"[data-job='{gang['id']}']").click()
        waits = page.locator("[data-testid=job-event][data-kind=unschedulable]")
        expect(waits).to_have_count(1)
        expect(waits.get_by_test_id("event-count")).to_have_text(re.compile(r"^×([2-9]|\d\d+)$"), timeout=20_000)
        expect(waits).to_contain_text("since T+")
        assert _overflow(page) == 0
        shot(page, f"32-folded-event-{viewport['width']}")
    finally:
        with server.client() as c:
            c.delete(f"/api/v1/jobs/{gang['id']}")


@pytest.mark.parametrize("viewport", VIEWPORTS)
def test_the_design_page_defaults_pass_and_give_files(page: Any, server: Server, viewport: dict[str, int]) -> None:
    expect = _expect()
    page.set_viewport_size(viewport)
    login(page, server)
    page.goto(server.url + "/#design")
    expect(page.locator("#dz-psu")).to_have_value("auto")
    page.get_by_role("button", name="Design it").click()
    kpis = page.get_by_test_id("design-kpis")
    expect(kpis).to_contain_text("Per-server PSU", timeout=60_000)
    expect(kpis.locator(".kpi").filter(has_text="Per-server PSU").locator(".value")).to_have_text("OK")
    report = page.get_by_test_id("design-report")
    expect(report.locator("h1, h2").first).to_be_visible()
    expect(report.locator("table").first).to_be_visible()
    text = report.inner_text()
    assert "|---" not in text and "## " not in text  # rendered, not raw Markdown
    with page.expect_download() as dl:
        page.get_by_test_id("dl-cables").click()
    assert dl.value.suggested_filename == "cables.csv"
    rows = list(csv.reader(io.StringIO(Path(dl.value.path()).read_text(encoding="utf-8"))))
    assert len(rows) > 100 and len(rows[0]) >= 4
    with page.expect_download() as dl:
        page.get_by_test_id("dl-spec").click()
    assert dl.value.suggested_filename == "cluster-spec.yaml"
    spec = yaml.safe_load(Path(dl.value.path()).read_text(encoding="utf-8"))
    assert spec["nodePools"] and spec["nodePools"][0]["gpu"]["count"] >= 1
    assert _overflow(page) == 0
    shot(page, f"32-design-{viewport['width']}")
