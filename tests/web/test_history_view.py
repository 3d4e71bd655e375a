"""The dashboard's job history (issue: history view), in Debian's Chromium against a real `gpucluster up` that
prunes every finished job from memory (``--max-finished-jobs 0``): the stored jobs newest submitted first, the
pruned ones marked, in pages that "Older" and "Newer" walk by the API's cursor, filtered by status, tenant and
text as the API filters them, and a tenant's token shows that tenant's history only. Screenshots in
test-artifacts/web/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.service.server import Server, start_server, submit_job, wait_for
from tests.web.conftest import expect, login, shot

pytestmark = pytest.mark.integration

GPU = {"nvidia.com/gpu": 1}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, dict[str, str], list[str]]]:
    """A server whose history holds 12 of alpha's finished jobs, 2 of beta's and alpha's running ``hist-a-live``
    (submitted last); returns it, the tenants' tokens and alpha's job names newest first."""
    data = tmp_path_factory.mktemp("history") / "data"
    srv = start_server(data, "--speed", "20", "--background", "0", "--faults-per-hour", "0",
                       "--max-finished-jobs", "0")
    try:
        tokens = {}
        with srv.client() as admin:
            for name in ("alpha", "beta"):
                r = admin.post("/api/v1/tenants", json={"name": name})
                assert r.status_code in (200, 201), r.text
                tokens[name] = r.json()["token"]
        names = []
        for i in range(12):
            submit_job(srv, {"name": f"hist-a-{i:02d}", "resources": GPU, "duration_s": 1}, tokens["alpha"])
            names.append(f"hist-a-{i:02d}")
            if i in (4, 9):
                name = f"hist-b-{i:02d}"
                submit_job(srv, {"name": name, "resources": GPU, "duration_s": 1}, tokens["beta"])
        submit_job(srv, {"name": "hist-a-live", "resources": GPU}, tokens["alpha"])

        def all_pruned() -> bool:
            with srv.client() as c:
                body = c.get("/api/v1/jobs", params={"include": "pruned", "limit": 100}).json()
            return body["total"] == 15 and all(j["pruned"] == (j["name"] != "hist-a-live") for j in body["jobs"])

        wait_for(all_pruned, "every finished job pruned from memory", timeout=60)
        yield srv, tokens, ["hist-a-live", *reversed(names)]
    finally:
        srv.stop()


def _names(page: Any) -> list[str]:
    rows = page.locator("#hs-table tr[data-job]")
    return [str(t).removeprefix("history-row-") for t in rows.evaluate_all(
        "rs => rs.map(r => r.dataset.testid)")]


def _open(page: Any) -> None:
    page.get_by_role("link", name="Job history").click()
    expect()(page.locator("#hs-info")).to_contain_text("job(s)")


def test_the_history_pages_newest_first_with_pruned_jobs_marked(page: Any, history: Any) -> None:
    srv, _tokens, alpha = history
    x = expect()
    login(page, srv)
    _open(page)
    page.get_by_test_id("hs-limit").select_option("10")
    newest = ["hist-a-live", "hist-a-11", "hist-a-10", "hist-b-09", "hist-a-09", "hist-a-08", "hist-a-07",
              "hist-a-06", "hist-a-05", "hist-b-04"]
    x(page.locator("#hs-info")).to_have_text("15 job(s) · page 1")
    assert _names(page) == newest
    live = page.get_by_test_id("history-row-hist-a-live")
    x(live).to_have_attribute("data-pruned", "false")
    x(live.locator("td.job-status")).to_have_attribute("data-status", "running")
    done = page.get_by_test_id("history-row-hist-a-11")
    x(done).to_have_attribute("data-pruned", "true")
    x(done.locator("td.job-status")).to_have_attribute("data-status", "succeeded")
    x(done).to_contain_text("pruned")
    x(page.get_by_test_id("hs-newer")).to_be_disabled()
    shot(page, "history-01-first-page")

    page.get_by_test_id("hs-older").click()
    x(page.locator("#hs-info")).to_have_text("15 job(s) · page 2 (the last)")
    assert _names(page) == ["hist-a-04", "hist-a-03", "hist-a-02", "hist-a-01", "hist-a-00"]
    x(page.get_by_test_id("hs-older")).to_be_disabled()
    shot(page, "history-02-older")
    page.get_by_test_id("hs-newer").click()
    x(page.locator("#hs-info")).to_have_text("15 job(s) · page 1")
    assert _names(page) == newest

    # a pruned job opens in the drawer, read back from the store
    done.click()
    x(page.locator("#drawer-title")).to_contain_text("hist-a-11")
    page.locator("#drawer-close").click()

    # the API's filters: status, tenant, text (each starts again at the newest page)
    page.get_by_test_id("hs-status").select_option("running")
    x(page.locator("#hs-info")).to_have_text("1 job(s) · page 1 (the last)")
    assert _names(page) == ["hist-a-live"]
    page.get_by_test_id("hs-status").select_option("")
    page.get_by_test_id("hs-tenant").fill("beta")
    x(page.locator("#hs-info")).to_have_text("2 job(s) · page 1 (the last)")
    assert _names(page) == ["hist-b-09", "hist-b-04"]
    page.get_by_test_id("hs-tenant").fill("")
    page.get_by_test_id("hs-q").fill("a-0")
    x(page.locator("#hs-info")).to_have_text("10 job(s) · page 1 (the last)")
    assert _names(page) == [n for n in alpha if "a-0" in n]
    shot(page, "history-03-filtered")


@pytest.mark.parametrize("tenant", ["alpha", "beta"])
def test_a_tenant_sees_only_its_own_history(page: Any, history: Any, tenant: str) -> None:
    srv, tokens, alpha = history
    x = expect()
    login(page, srv, tokens[tenant])
    _open(page)
    x(page.get_by_test_id("hs-tenant")).to_have_count(0)  # no tenant filter for a tenant's token
    page.get_by_test_id("hs-limit").select_option("25")
    mine = alpha if tenant == "alpha" else ["hist-b-09", "hist-b-04"]
    x(page.locator("#hs-info")).to_have_text(f"{len(mine)} job(s) · page 1 (the last)")
    assert _names(page) == mine
    other = "hist-b" if tenant == "alpha" else "hist-a"
    page.get_by_test_id("hs-q").fill(other)  # the other tenant's names: nothing, counted as nothing
    x(page.locator("#hs-info")).to_have_text("0 job(s) · page 1 (the last)")
    x(page.locator("#hs-table")).to_contain_text("No stored job matches.")
    shot(page, f"history-04-tenant-{tenant}")


def test_older_clicked_while_a_new_filter_loads_does_not_use_the_old_page_s_cursor(page: Any, history: Any) -> None:
    """The filter's first page is held back by the test until "Older" has been clicked: before the fix the click
    took the cursor of the page still shown (unfiltered page 1, ending at hist-b-04) and asked the new filter for
    the jobs after it, so "page 2" of hist-a began at hist-a-04 (a wrong page; the right one begins at
    hist-a-02). Now there is no Older until the filter's page has come."""
    srv, _tokens, alpha = history
    x = expect()
    login(page, srv)
    _open(page)
    page.get_by_test_id("hs-limit").select_option("10")
    x(page.locator("#hs-info")).to_have_text("15 job(s) · page 1")
    x(page.get_by_test_id("hs-older")).to_be_enabled()
    held: list[Any] = []
    asked: list[str] = []

    def hold_first(route: Any) -> None:
        if held:
            route.continue_()
        else:
            held.append(route)

    page.on("request", lambda r: asked.append(r.url) if "/api/v1/jobs?" in r.url else None)
    page.route(re.compile(r".*/api/v1/jobs\?.*q=hist-a.*"), hold_first)
    with page.expect_request(lambda r: "q=hist-a" in r.url):
        page.get_by_test_id("hs-q").fill("hist-a")
    def is_held() -> bool:
        page.evaluate("0")  # a round trip, in which Playwright hands the routed request to hold_first
        return bool(held)

    wait_for(is_held, "the filter's request to be held", timeout=30)
    page.get_by_test_id("hs-older").click(force=True)  # while the filter's page is still on its way
    held[0].continue_()
    x(page.locator("#hs-info")).to_have_text("13 job(s) · page 1")
    assert _names(page) == alpha[:10]
    assert not [u for u in asked if "before=" in u], asked
    page.unroute(re.compile(r".*/api/v1/jobs\?.*q=hist-a.*"))
    page.get_by_test_id("hs-older").click()
    x(page.locator("#hs-info")).to_have_text("13 job(s) · page 2 (the last)")
    assert _names(page) == alpha[10:]
