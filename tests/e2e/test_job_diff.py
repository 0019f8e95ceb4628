"""Two jobs compared side by side (docs/compare.md) with real parts: plan jobs on a real in-process Celery worker,
agent jobs whose ticks the real `anthropic` SDK asks of the fake Messages API with two different models, the API
served by uvicorn, `agentq diff` as a subprocess, and the compare view in Debian's headless chromium."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from agentq.async_client import AsyncClient
from agentq.errors import JobNotFoundError
from tests.api_server import ApiServer
from tests.e2e.test_api import finished
from tests.e2e.test_web_page import EVIL, Page, browser  # noqa: F401  (fixture)
from tests.e2e.test_web_rollouts import console_errors, open_as
from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness
from tests.integration.procs import cli

pytestmark = pytest.mark.timeout(180)

ADMIN, ACME, BETA = "admin-token-0123456789", "acme-token-0123456789", "beta-token-0123456789"
OUTPUT = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


def plan(*texts: str) -> dict:
    return {"calls": [{"_tool": "echo", "text": text, "_outputPath": f"†state.s{n}"} for n, text in enumerate(texts)]}


def agent_job(model: str) -> dict:
    return {"context": [{"type": "text", "text": "How is the weather?"}], "tools": ["weather"], "output": OUTPUT,
            "options": {"model": model}}


@pytest.fixture
def tokens(tmp_path: Path) -> str:
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"},
                                BETA: {"tenant": "beta"}}))
    return f"@{path}"


@pytest.fixture
def gate() -> threading.Event:
    """What the `gate` activity waits for (so a job is still running while the test compares it)."""
    return threading.Event()


@pytest.fixture
def lab(anthropic_env: FakeAnthropic, harness: Harness, gate: threading.Event) -> Harness:
    """Tools `echo` (text → {"said": text}), `weather` (city → {city, temp_c}) and `gate` (waits for the test),
    served by a worker that also runs agent ticks against the fake Messages API (`anthropic_env` comes first: its
    address is set before the harness's settings are read)."""
    harness.tool("echo", params={"text": {"type": "string"}}, required=["text"])
    harness.activities.register("echo", lambda call: {"said": call["text"]})
    harness.tool("weather", params={"city": {"type": "string"}}, output={"type": "object"}, required=["city"])
    harness.activities.register("weather", lambda call: {"city": call["city"], "temp_c": len(call["city"]) + 15})
    harness.tool("gate", params={"text": {"type": "string"}})
    harness.activities.register("gate", lambda call: {"passed": gate.wait(30)})
    harness.worker(llm="anthropic", concurrency=4, lease_s=10.0)  # a tick's lease outlasts a loaded machine's pauses
    return harness


def submitted(api: ApiServer, job: dict, token: str = ACME) -> str:
    created = api.request("POST", "/v1/jobs", json_body=job, token=token)
    assert created.status == 201, created.body
    job_id = created.json()["id"]
    assert finished(api, job_id)["status"] == "succeeded"
    return job_id


def diff(api: ApiServer, a: str, b: str, token: str = ACME) -> dict:
    answer = api.request("GET", f"/v1/jobs/{a}/diff/{b}", token=token)
    assert answer.status == 200, answer.body
    return answer.json()


def test_plan_and_agent_jobs_compared_over_http_and_the_cli(lab, gate, anthropic_env, serve_api, tokens, redis_url):
    api = serve_api(tokens=[tokens])
    first, second = submitted(api, plan("x", "y")), submitted(api, plan("x", "z", "extra"))

    body = diff(api, first, second)
    assert (body["a"]["id"], body["b"]["id"], body["same"]) == (first, second, False)
    assert body["call_counts"] == {"same": 1, "changed": 1, "only_a": 0, "only_b": 1}
    assert [(p["tool"], p["n"], p["kind"]) for p in body["calls"]] == [
        ("echo", 1, "same"), ("echo", 2, "changed"), ("echo", 3, "only_b")]
    changed = body["calls"][1]
    assert changed["params"]["changes"] == [{"pointer": "/text", "kind": "changed", "a": "y", "b": "z"}]
    assert changed["output"]["changes"] == [{"pointer": "/said", "kind": "changed", "a": "y", "b": "z"}]
    assert changed["a"]["output"] == {"said": "y"} and changed["b"]["has_output"] is True
    assert [(c["pointer"], c["kind"]) for c in body["state"]["changes"]] == [("/s1/said", "changed"), ("/s2", "added")]
    assert body["usage"]["requests"] == {"a": 0, "b": 0, "delta": 0} and body["a"]["models"] == []
    assert body["duration_ms"]["delta"] == pytest.approx(body["duration_ms"]["b"] - body["duration_ms"]["a"])

    # the same id twice is fine: no differences
    same = diff(api, first, first)
    assert same["same"] is True and same["call_counts"] == {"same": 2, "changed": 0, "only_a": 0, "only_b": 0}
    assert same["duration_ms"]["delta"] == 0

    # an agent job answered by two models: their outputs, calls and costs differ. The fake answers by what was asked
    # (the model, and whether the model answered before), so a tick asked again on a loaded machine gets its answer
    answers = {
        ("claude-sonnet-4-6", 1): {"calls": [{"_tool": "weather", "city": "Paris", "_outputPath": "†state.w"}],
                                   "output": None},
        ("claude-haiku-4-5", 1): {"calls": [{"_tool": "weather", "city": "Lyon", "_outputPath": "†state.w"},
                                            {"_tool": "weather", "city": "Nice", "_outputPath": "†state.v"}],
                                  "output": None},
        ("claude-sonnet-4-6", 2): {"calls": [], "output": {"answer": "mild"}},
        ("claude-haiku-4-5", 2): {"calls": [], "output": {"answer": "warm"}},
    }

    def answer(request: RecordedRequest) -> Answer:
        tick = 1 + sum(1 for m in request.body["messages"] if m.get("role") == "assistant")
        return Answer.solution(answers[(request.body["model"], tick)])

    anthropic_env.responder = answer
    sonnet, haiku = submitted(api, agent_job("claude-sonnet-4-6")), submitted(api, agent_job("claude-haiku-4-5"))
    assert {request.body["model"] for request in anthropic_env.requests} == {"claude-sonnet-4-6", "claude-haiku-4-5"}

    agents = diff(api, sonnet, haiku)
    assert agents["models_changed"] and not agents["same"]
    assert (agents["a"]["models"], agents["b"]["models"]) == (["claude-sonnet-4-6"], ["claude-haiku-4-5"])
    assert agents["result"]["changes"] == [{"pointer": "/answer", "kind": "changed", "a": "mild", "b": "warm"}]
    assert [(p["tool"], p["n"], p["kind"]) for p in agents["calls"]] == [
        ("weather", 1, "changed"), ("weather", 2, "only_b")]
    assert agents["calls"][0]["output"]["changes"][0] == {"pointer": "/city", "kind": "changed", "a": "Paris",
                                                           "b": "Lyon"}
    records = {job: api.request("GET", f"/v1/jobs/{job}", token=ACME).json() for job in (sonnet, haiku)}
    cost = agents["usage"]["cost_usd"]
    assert cost["a"] == records[sonnet]["usage"]["cost_usd"] and cost["b"] == records[haiku]["usage"]["cost_usd"]
    assert cost["a"] > cost["b"] > 0 and cost["delta"] == pytest.approx(cost["b"] - cost["a"])
    requests = agents["usage"]["requests"]
    assert (requests["a"], requests["b"]) == (records[sonnet]["usage"]["requests"], records[haiku]["usage"]["requests"])
    assert requests["a"] >= 2 and requests["delta"] == requests["b"] - requests["a"]

    # `agentq diff` as a user runs it: --json is the API's body; the readable form names what differs
    printed = cli(redis_url, "diff", sonnet, haiku, "--json")
    assert printed.returncode == 0, printed.stderr
    assert json.loads(printed.stdout) == agents
    readable = cli(redis_url, "diff", sonnet, haiku)
    assert readable.returncode == 0, readable.stderr
    text = readable.stdout
    assert f"A {sonnet}  vs  B {haiku}: different outcomes" in text
    assert re.search(r"model\(s\)\s+claude-sonnet-4-6\s+claude-haiku-4-5\s+changed", text), text
    assert re.search(r"cost\s+\$\d\.\d+\s+\$\d\.\d+\s+-\$", text), text
    assert "calls, matched by tool and order: 0 same, 1 changed, 0 only in A, 1 only in B" in text
    assert 'output ~ /city: "Paris" → "Lyon"' in text
    assert 'final output: 1 difference\n  ~ /answer: "mild" → "warm"' in text
    assert "state: same" not in text

    # a job that has not ended compares as it stands
    created = api.request("POST", "/v1/jobs", token=ACME, json_body={"calls": [
        {"_tool": "echo", "text": "x", "_outputPath": "†state.s0"},
        {"_tool": "gate", "text": "y", "_outputPath": "†state.g"}]})
    running = created.json()["id"]
    standing = diff(api, first, running)
    assert standing["b"]["status"] in ("queued", "running") and standing["duration_ms"]["b"] is None
    assert standing["calls"][0]["kind"] == "same"
    shown = cli(redis_url, "diff", first, running)
    assert re.search(r"^B has not ended \((queued|running)\): compare again once it has$", shown.stdout, re.M), shown
    gate.set()
    finished(api, running)

    # the Python clients answer the same
    assert lab.client().diff(sonnet, haiku) == agents

    async def read() -> dict:
        async with AsyncClient(settings=lab.settings) as client:
            return await client.diff(sonnet, haiku)

    assert asyncio.run(read()) == agents
    with pytest.raises(JobNotFoundError, match=r"^A: no job 'job_nope' .*; B: no job 'job_gone' "):
        lab.client().diff("job_nope", "job_gone")

    # bad input: an unknown id (404 naming the side), another tenant's job (404 alike), data that expired (410)
    unknown = api.request("GET", f"/v1/jobs/{first}/diff/job_never_submitted", token=ACME)
    assert unknown.status == 404
    error = unknown.json()["error"]
    assert error["type"] == "JobNotFound" and [p["pointer"] for p in error["problems"]] == ["/b"]
    assert "job_never_submitted" in error["problems"][0]["message"] and "B: " in error["message"]
    invalid = api.request("GET", f"/v1/jobs/{quote('not an id!')}/diff/{first}", token=ACME)
    assert invalid.status == 404 and [p["pointer"] for p in invalid.json()["error"]["problems"]] == ["/a"]
    theirs = api.request("GET", f"/v1/jobs/{first}/diff/{second}", token=BETA)
    assert theirs.status == 404 and [p["pointer"] for p in theirs.json()["error"]["problems"]] == ["/a", "/b"]
    assert diff(api, first, second, token=ADMIN)["a"]["tenant"] == "acme"  # an admin sees every tenant's jobs
    store = api.parts.store
    store.redis.delete(*store.keys(second).all)  # what its ttl_s does; the fleet's listing keeps the id
    expired = api.request("GET", f"/v1/jobs/{second}/diff/{first}", token=ACME)
    assert expired.status == 410 and expired.json()["error"]["type"] == "JobExpired"
    assert [p["pointer"] for p in expired.json()["error"]["problems"]] == ["/a"]
    failed = cli(redis_url, "diff", first, "job_never_submitted")
    assert failed.returncode == 1 and failed.stdout == ""
    assert failed.stderr.strip() == "agentq: error: B: no job 'job_never_submitted' (never submitted, or expired)"

    # the OpenAPI document describes the answer by name
    spec = api.request("GET", "/openapi.json", token=ACME).json()
    ok = spec["paths"]["/v1/jobs/{a}/diff/{b}"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert ok == {"$ref": "#/components/schemas/JobDiff"} and "CallPair" in spec["components"]["schemas"]


def test_the_compare_view_shows_two_jobs_side_by_side_from_a_jobs_page(lab, serve_api, tokens, browser):  # noqa: F811
    from playwright.sync_api import expect

    api = serve_api(tokens=[tokens])
    first, second = submitted(api, plan("x", "y")), submitted(api, plan("x", EVIL, "extra"))
    page = Page(browser, api)
    tab = page.tab
    errors = console_errors(tab)
    open_as(page, f"/jobs/{first}", ACME)
    tab.fill("#compare-b", second)
    tab.click("#compare-form button[type=submit]")
    tab.wait_for_url(re.compile(r"/diff\?"))
    assert tab.url.endswith(f"/diff?a={first}&b={second}")

    # a plan job's final output is its state
    expect(tab.locator("#diff-verdict")).to_have_text("Different: final output, state, 2 calls.")
    expect(tab.locator("#link-a")).to_have_text(first)
    assert tab.locator("#link-b").get_attribute("href") == f"/jobs/{second}"
    calls_row = tab.locator("#figures tr[data-figure='calls']")
    expect(calls_row).to_have_class(re.compile(r"\bdiffers\b"))
    expect(calls_row.locator("td")).to_have_text(["2", "3", "+1"])
    expect(tab.locator("#figures tr[data-figure='status']")).not_to_have_class(re.compile(r"\bdiffers\b"))
    pairs = tab.locator("#diff-calls tr.pair")
    expect(pairs).to_have_count(3)
    assert pairs.evaluate_all("rows => rows.map(r => r.dataset.kind)") == ["same", "changed", "only_b"]
    changes = tab.locator("#diff-calls tr.pair-changes li.change")
    expect(changes).to_have_count(2)  # the parameter and the output
    expect(changes.first.locator(".value-b")).to_have_text(json.dumps(EVIL))  # a job's text, shown as text
    expect(tab.locator("#diff-calls tr.kind-only_b td.side-a")).to_have_text("—")
    state = tab.locator("#diff-state li.change")
    assert state.evaluate_all("items => items.map(i => [i.dataset.pointer, i.dataset.kind])") == [
        ["/s1/said", "changed"], ["/s2", "added"]]
    expect(tab.locator("#diff-state .two-columns .side-b pre")).to_contain_text('"extra"')
    expect(tab.locator("#result-panel")).to_be_visible()
    assert tab.evaluate("window.__xss") is None and tab.locator("#main img").count() == 0
    page.screenshot("web-diff")

    # an unknown side: the API's error with its pointer, no half-drawn comparison
    tab.goto(f"{api.base_url}/diff?a={first}&b=job_never_submitted")  # the page's cookie is set
    expect(tab.locator("#diff-error .error-box")).to_contain_text("Cannot compare these jobs")
    expect(tab.locator("#diff-error code.pointer")).to_have_text("/b")
    expect(tab.locator("#figures-panel")).to_be_hidden()
    assert not page.problems and not [e for e in errors if "404" not in e], (page.problems, errors)
