"""Waits on the web page (docs/waits.md): a waiting call shows as `waiting` in the calls table, its timeline bar
marks it, and its `call.waiting` event says what it waits for; a signal sent through the API ends it. Real uvicorn,
real Redis, an in-process dispatcher, Debian's chromium."""

from __future__ import annotations

import pytest

from tests.e2e.test_web_page import Page, browser  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.timeout(120)


def test_a_waiting_call_shows_its_status_bar_and_what_it_waits_for(harness, serve_api, browser):  # noqa: F811
    from playwright.sync_api import expect

    harness.worker()  # an in-process dispatcher: it opens the wait and fires it
    api = serve_api()
    job = {"tools": ["waitForSignal"], "calls": [
        {"_tool": "waitForSignal", "name": "go", "timeout_s": 300, "_outputPath": "†state.go"}]}
    job_id = api.request("POST", "/v1/jobs", json_body=job).json()["id"]
    page = Page(browser, api)
    tab = page.open(f"/jobs/{job_id}")
    expect(tab.locator("#events [data-event='call.waiting']")).to_contain_text("waiting for signal go until ")
    expect(tab.locator(".badge.status-waiting").first).to_have_text("waiting")
    expect(tab.locator(".bar.status-waiting")).to_have_count(1)
    assert api.request("POST", f"/v1/jobs/{job_id}/signals/go", json_body={"data": 7}).status == 200
    expect(tab.locator("#events [data-event='job.finished']")).to_contain_text("Job succeeded")
    expect(tab.locator(".bar.status-waiting")).to_have_count(0)
    assert not page.problems, page.problems
