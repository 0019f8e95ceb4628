"""The web page's thread view (`/threads/{id}`, docs/continue-and-fork.md) in Debian's headless chromium (Playwright,
the fixtures of test_web_page.py), over a real uvicorn server, real Redis, an in-process Celery worker and the fake
Messages API: a job and its continuation shown as one conversation, linked from the job's page; a fork's page links
the job it forks."""

from __future__ import annotations

import threading

import pytest

from tests.e2e.test_api import finished
from tests.e2e.test_web_page import Page, browser  # noqa: F401  (fixture)
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest

pytestmark = pytest.mark.timeout(180)


def answers(*outputs: str):
    lock, pending = threading.Lock(), [Answer.solution({"calls": [], "output": text}) for text in outputs]

    def answer(request: RecordedRequest) -> Answer:
        with lock:
            return pending.pop(0)

    return answer


def test_a_thread_shows_as_one_conversation_linked_from_its_jobs(harness, anthropic_env: FakeAnthropic, serve_api,
                                                                 browser):  # noqa: F811
    from playwright.sync_api import expect

    harness.tool("note", params={"text": {"type": "string"}}, output={})
    harness.activities.register("note")(lambda call: "noted")
    harness.worker(llm="anthropic", concurrency=2)
    api = serve_api()
    anthropic_env.responder = answers("Your order ships Monday.", "Yes, by express <b>mail</b>.", "Tuesday.")
    first = api.request("POST", "/v1/jobs", json_body={
        "context": [{"type": "text", "text": "When does my order ship?"}], "tools": ["note"]}).json()
    finished(api, first["id"])
    second = api.request("POST", f"/v1/jobs/{first['id']}/continue",
                         json_body={"context": [{"type": "text", "text": "Can it go faster?"}]}).json()
    finished(api, second["id"])

    page = Page(browser, api)
    tab = page.open(f"/jobs/{second['id']}")
    link = tab.locator("#job-facts a", has_text=f"thread {first['id']}")
    expect(link).to_be_visible()
    expect(tab.locator("#job-facts a", has_text=first["id"]).last).to_have_attribute("href", f"/jobs/{first['id']}")
    link.click()
    expect(tab).to_have_url(f"{api.base_url}/threads/{first['id']}")
    jobs = tab.locator("#thread > li.thread-job")
    expect(jobs).to_have_count(2)
    turns = tab.locator("#thread li.turn")
    expect(turns).to_have_count(4)
    assert [t.strip() for t in turns.locator("pre").all_text_contents()] == [
        "When does my order ship?", "Your order ships Monday.", "Can it go faster?", "Yes, by express <b>mail</b>."]
    assert tab.locator("#thread b").count() == 0  # a job's text is shown as text
    assert jobs.nth(1).locator("a").get_attribute("href") == f"/jobs/{second['id']}"
    page.screenshot("thread")

    fork = api.request("POST", f"/v1/jobs/{first['id']}/fork", json_body={"at_tick": 0}).json()
    finished(api, fork["id"])
    tab = page.open(f"/jobs/{fork['id']}")
    expect(tab.locator("#job-facts .fact", has_text="Forked from")).to_contain_text(f"{first['id']} at tick 0")
    assert page.problems == []
