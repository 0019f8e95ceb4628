"""The web page's schedules view (`/schedules`, docs/schedules.md) in a real browser: Debian's headless chromium
driven by Playwright (the fixtures of test_web_page.py), over a real uvicorn server, real Redis and an in-process
Celery worker whose dispatcher fires the schedules. The page lists each schedule the token sees with its timing,
its next runs, its last job (a link, with its status) and its counts, follows them as slots fire, and shows a
paused schedule as paused."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.e2e.test_web_page import Page, browser  # noqa: F401  (fixture)
from tests.e2e.test_web_rollouts import console_errors, open_as
from tests.integration.conftest import Harness

pytestmark = pytest.mark.timeout(180)

ADMIN, ACME, BETA = "admin-token-0123456789", "acme-token-0123456789", "beta-token-0123456789"
PING = {"calls": [{"_tool": "ping", "text": "hello", "_outputPath": "†state.pong"}]}
COLUMNS = ["Name", "Tenant", "When", "Next runs", "Last job", "Fired / skipped / missed"]


@pytest.fixture
def tokens(tmp_path: Path) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"},
                                BETA: {"tenant": "beta"}}))
    return f"@{path}"


@pytest.fixture
def pinged(harness: Harness) -> Harness:
    """A tool `ping` and a started worker (with the engine: it fires the schedules)."""
    harness.tool("ping", params={"text": {"type": "string"}}, required=["text"])
    harness.activities.register("ping", lambda call: {"pong": call["text"]})
    harness.worker(concurrency=2)
    return harness


def test_the_schedules_view_lists_next_runs_last_job_and_paused(pinged, tokens, serve_api, browser):  # noqa: F811
    from playwright.sync_api import expect

    api = serve_api(tokens=[tokens])
    page = Page(browser, api)
    tab = page.tab
    errors = console_errors(tab)
    open_as(page, "/schedules", ADMIN)
    expect(tab.locator("nav a[aria-current='page']")).to_have_text("Schedules")
    expect(tab.locator("#schedules-empty")).to_be_visible()

    nightly = {"cron": "0 8 * * 1-5", "timezone": "Europe/Berlin", "job": PING}
    assert api.request("PUT", "/v1/schedules/nightly", json_body=nightly, token=ACME).status == 200
    assert api.request("PUT", "/v1/schedules/tick", json_body={"every_s": 2, "job": PING}, token=BETA).status == 200
    rows = tab.locator("#schedules tr")
    expect(rows).to_have_count(2)
    assert tab.locator("#schedules-table thead th").all_text_contents() == COLUMNS
    listed = {s["name"]: s for s in api.request("GET", "/v1/schedules", token=ADMIN).json()["schedules"]}
    night = tab.locator("tr[data-schedule='nightly']")
    expect(night.locator("td.when")).to_have_text('cron "0 8 * * 1-5" in Europe/Berlin, overlap skip')
    expect(night.locator("td.next time")).to_have_count(3)
    assert night.locator("td.next time").evaluate_all("ts => ts.map(t => t.getAttribute('datetime'))") == [
        t.replace("Z", ".000Z") for t in listed["nightly"]["next_runs"]]
    expect(night.locator("td.last")).to_have_text("—")

    # the dispatcher fires tick: the page follows (it refreshes) with the last job linked and its status
    tick = tab.locator("tr[data-schedule='tick']")
    link = tick.locator("td.last a")
    expect(link).to_have_text(re.compile(r"^sched-tick-\d+$"))
    expect(tick.locator("td.last .badge")).to_have_text("succeeded")
    shown = link.text_content()
    assert link.get_attribute("href") == f"/jobs/{shown}"
    assert api.request("GET", f"/v1/jobs/{shown}", token=BETA).json()["status"] == "succeeded"
    expect(tick.locator("td.counts")).not_to_have_text("0 / 0 / 0")

    assert api.request("POST", "/v1/schedules/nightly/pause", token=ACME).status == 200
    expect(night.locator("td.next")).to_have_text("paused")
    expect(night).to_have_attribute("data-paused", "true")
    page.screenshot("web_page_schedules")
    assert page.problems == [] and errors == [], (page.problems, errors)


def test_a_tenants_page_lists_only_its_own_schedules(pinged, tokens, serve_api, browser):  # noqa: F811
    from playwright.sync_api import expect

    api = serve_api(tokens=[tokens])
    for name, token in (("acme-report", ACME), ("beta-report", BETA)):
        body = {"cron": "0 8 * * *", "job": PING}
        assert api.request("PUT", f"/v1/schedules/{name}", json_body=body, token=token).status == 200
    page = Page(browser, api)
    open_as(page, "/schedules", ACME)
    expect(page.tab.locator("#tenant")).to_have_text("tenant acme")
    expect(page.tab.locator("#schedules tr")).to_have_count(1)
    expect(page.tab.locator("#schedules tr th")).to_have_text("acme-report")
    assert page.problems == []
