"""A resumed job on the web page (docs/resume.md): its job view lists its runs (status, start, end, error) and its
events show the first run's end, `Job resumed`, and the new end. Real uvicorn, real Redis, an in-process worker,
Debian's chromium."""

from __future__ import annotations

import pytest

from tests.e2e.test_web_page import Page, browser  # noqa: F401  (the browser fixture)

pytestmark = pytest.mark.timeout(120)


def test_a_resumed_jobs_page_lists_its_runs(harness, serve_api, browser, tmp_path):  # noqa: F811
    from playwright.sync_api import expect

    down = tmp_path / "down"
    down.touch()
    harness.tool("pay", params={"order": {"type": "string"}})

    def pay(call: dict) -> dict:
        if down.exists():
            raise ConnectionError("the payment API is down")
        return {"paid": call["order"]}

    harness.activities.register("pay", pay)
    harness.worker()
    api = serve_api()
    job_id = api.request("POST", "/v1/jobs", json_body={"calls": [
        {"_tool": "pay", "order": "o-9", "_outputPath": "†state.paid"}]}).json()["id"]
    list(api.sse(f"/v1/jobs/{job_id}/events"))
    down.unlink()
    assert api.request("POST", f"/v1/jobs/{job_id}/resume").status == 200
    list(api.sse(f"/v1/jobs/{job_id}/events"))  # to the new end
    page = Page(browser, api)
    tab = page.open(f"/jobs/{job_id}")
    runs = tab.locator("#job-facts ol.runs li")
    expect(runs).to_have_count(2)
    expect(runs.nth(0)).to_contain_text("failed")
    expect(runs.nth(0)).to_contain_text("CallsFailed")
    expect(runs.nth(1)).to_contain_text("succeeded")
    expect(tab.locator("#events [data-event='job.resumed']")).to_contain_text("Job resumed")
    expect(tab.locator("#events [data-event='job.finished']")).to_have_count(2)
    page.screenshot("resumed-job")
    assert not page.problems, page.problems
