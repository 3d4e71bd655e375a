"""Shared by the dashboard tests: Debian's Chromium through Playwright, a page per test (JavaScript errors fail
it), screenshots kept in test-artifacts/web/, signing in."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.service.server import ADMIN, Server

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "web"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def need_chromium() -> None:
    if shutil.which(CHROMIUM) is None:
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install -y chromium); set CI=1 to make this a failure")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    need_chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    ctx = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = ctx.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    ctx.close()
    assert errors == [], f"JavaScript errors on the page: {errors}"


def expect() -> Any:
    """playwright's ``expect`` (imported when a test runs, so collecting the suite needs no playwright)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=False)


def login(page: Any, server: Server, token: str = ADMIN) -> None:
    page.goto(server.url + "/")
    page.get_by_label("Token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    page.locator("[data-testid=kpi-alloc] .value").wait_for()


