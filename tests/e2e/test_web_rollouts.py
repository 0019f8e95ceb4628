"""The web page's rollout report (`/rollouts`, docs/rollouts.md) in a real browser: Debian's headless chromium
driven by Playwright (the fixtures of test_web_page.py), over a real uvicorn server, real Redis and an in-process
Celery worker serving two versions of two activities. With an admin token the page shows, per tool, the routes of
`GET /v1/rollouts` with the same figures and the rule in the CLI's words, and follows the report as it changes;
with a tenant's submit or read token it shows the API's refusal instead of a table."""

from __future__ import annotations

import json
import threading
from collections import Counter
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import pytest

from agentq.cli.render import format_duration
from agentq.cli.rollouts import describe
from tests.e2e.test_rollouts_api_cli import ACME, ADMIN
from tests.e2e.test_web_page import Page, browser  # noqa: F401  (fixture)
from tests.integration.conftest import Harness
from tests.integration.test_rollouts import counted

pytestmark = pytest.mark.timeout(180)

READER = "acme-reader-token-0123456789"
COLUMNS = ["Route", "Calls", "Success", "P50", "P95", "Cost", "Retries", "Rule"]
SEND_RULE = {"routes": [{"to": "sendEmail@2", "tenants": ["acme"]}]}
FLAKY_RULE = {"routes": [{"to": "flaky@2", "share": 0.5}]}
# Each tool's rendered rows, read from the page: the route, its label, each figure's text and the report's value
# the cell carries (`data-value`), and the rule cell of the first row.
SHOWN_ROWS = """sections => Object.fromEntries(sections.map(section => [section.dataset.tool,
  [...section.querySelectorAll("tbody tr")].map(tr => ({
    route: tr.dataset.route,
    label: tr.querySelector("th").textContent,
    cells: Object.fromEntries([...tr.querySelectorAll("td[data-figure]")].map(
      td => [td.dataset.figure, [td.textContent, JSON.parse(td.dataset.value)]])),
    rule: tr.querySelector("td.rule")?.textContent ?? null}))]))"""


@pytest.fixture
def tokens(tmp_path: Path) -> str:
    """An admin token (tenant ops), and acme's submit and read tokens, as `AGENTQ_API_TOKENS` takes them."""
    path = tmp_path / "tokens.json"
    path.write_text(json.dumps({ADMIN: {"tenant": "ops", "role": "admin"}, ACME: {"tenant": "acme"},
                                READER: {"tenant": "acme", "role": "read"}}))
    return f"@{path}"


@pytest.fixture
def versions(harness: Harness) -> Harness:
    """Tools sendEmail (fails for an address starting with "fail") and flaky (each tag's first attempt fails,
    retried once), versions 1 and 2 of each served by a started worker."""
    attempts: Counter[str] = Counter()
    lock = threading.Lock()

    def send_email(version: str):
        def handler(call: dict) -> dict:
            if call["to"].startswith("fail"):
                raise RuntimeError(f"mailbox {call['to']} refused")
            return {"version": version}
        return handler

    def flaky(version: str):
        def handler(call: dict) -> dict:
            with lock:
                attempts[call["tag"]] += 1
                first = attempts[call["tag"]] == 1
            if first:
                raise RuntimeError("first attempt fails")
            return {"version": version}
        return handler

    harness.tool("sendEmail", params={"to": {"type": "string"}}, required=["to"])
    harness.tool("flaky", params={"tag": {"type": "string"}}, required=["tag"])
    for version in ("1", "2"):
        harness.activities.register("sendEmail", send_email(version), version=version)
        harness.activities.register("flaky", flaky(version), version=version, retries=1, retry_backoff=0.05)
    harness.worker(concurrency=4)
    return harness


def open_as(page: Page, path: str, token: str) -> Any:
    """Open `path` with `?token=<token>`: the page trades it for its cookie and comes back without it."""
    page.tab.goto(f"{page.api.base_url}{path}?token={token}")
    assert "token=" not in page.tab.url, page.tab.url
    return page.tab


def console_errors(tab: Any) -> list[str]:
    """Every console error of the tab from now on (a refused script or style, an uncaught error, a failed load)."""
    errors: list[str] = []
    tab.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    return errors


def fixed(value: float, places: int) -> str:
    """`value.toFixed(places)` as the page's JavaScript writes it: from the exact binary value, ties upwards."""
    return str(Decimal(value).quantize(Decimal(1).scaleb(-places), ROUND_HALF_UP))


def duration_text(seconds: float | None) -> str:
    """What the page must write for a duration: what `agentq rollouts` writes (one formatter, `format_duration`)."""
    return "—" if seconds is None else format_duration(seconds * 1000)


def expected_rows(report: dict) -> dict[str, list[dict]]:
    """What the page must show of `GET /v1/rollouts`: per tool, a row per route in the report's order."""
    def row(entry: dict, r: dict, first: bool) -> dict:
        rate, cost = r["success_rate"], r["cost_usd"]
        return {"route": r["route"], "label": {"*": "(usual)", "": "(model)"}.get(r["route"], r["route"]),
                "cells": {"calls": [str(r["calls"]), r["calls"]],
                          "success_rate": ["—" if rate is None else f"{fixed(rate * 100, 1)}%", rate],
                          "p50_s": [duration_text(r["p50_s"]), r["p50_s"]],
                          "p95_s": [duration_text(r["p95_s"]), r["p95_s"]],
                          "cost_usd": ["unpriced" if cost is None else f"${fixed(cost, 4)}", cost],
                          "retries": [str(r["retries"]), r["retries"]]},
                "rule": (describe(entry["rule"]) if entry["rule"] else "(cleared)") if first else None}

    return {tool: [row(entry, r, i == 0) for i, r in enumerate(entry["routes"])]
            for tool, entry in report["tools"].items()}


def run(harness: Harness, tenant: str, tool: str, values: list[str]) -> str:
    """One job of `tool` calls for `tenant`, waited for: its status."""
    field = {"sendEmail": "to", "flaky": "tag"}[tool]
    job = {"calls": [{"_tool": tool, field: value, "_outputPath": f"†state.r{i}"} for i, value in enumerate(values)]}
    return str(harness.run(job, timeout=60, tenant=tenant)["status"])


def test_an_admin_sees_each_tools_routes_with_the_reports_figures_and_the_rule_in_words(
        versions, tokens, serve_api, browser):  # noqa: F811
    from playwright.sync_api import expect

    api = serve_api(tokens=[tokens])
    page = Page(browser, api)
    tab = page.tab
    errors = console_errors(tab)
    open_as(page, "/rollouts", ADMIN)
    expect(tab.locator("nav a[aria-current='page']")).to_have_text("Rollouts")
    expect(tab.locator("#tenant")).to_have_text("tenant ops · admin")
    empty = tab.locator("#rollouts-empty")
    expect(empty).to_be_visible()
    expect(empty).to_contain_text("No rollout rules or figures yet")
    expect(empty).to_contain_text("agentq rollouts set TOOL FILE")

    for tool, rule in (("sendEmail", SEND_RULE), ("flaky", FLAKY_RULE)):
        stored = api.request("PUT", f"/v1/rollouts/{tool}", json_body=rule, token=ADMIN)
        assert stored.status == 200, stored.body
    assert run(versions, "acme", "sendEmail", ["a1", "a2", "a3"]) == "succeeded"  # acme's: version 2
    assert run(versions, "acme", "sendEmail", ["fail-a"]) == "failed"
    assert run(versions, "ops", "sendEmail", ["o1", "o2", "o3", "o4"]) == "succeeded"  # the rest: as usual
    assert run(versions, "ops", "flaky", [f"t{i}" for i in range(12)]) == "succeeded"
    counted(versions.client(), {"sendEmail": 8, "flaky": 12})
    report = api.request("GET", "/v1/rollouts", token=ADMIN).json()
    send = {r["route"]: r for r in report["tools"]["sendEmail"]["routes"]}
    assert [(route, r["calls"], r["failed"]) for route, r in send.items()] == [("sendEmail@2", 4, 1), ("*", 4, 0)]
    assert all(r["retries"] == r["calls"] for r in report["tools"]["flaky"]["routes"])  # every first attempt failed

    # the page took the figures up by itself (it refreshes), one table per tool in the report's order
    expect(empty).to_be_hidden()
    sections = tab.locator(".rollout-tool")
    expect(sections.locator("h2 .tool-name")).to_have_text(list(report["tools"]))
    for tool, entry in report["tools"].items():
        calls = sections.filter(has=tab.locator(f"h2 .tool-name:text-is('{tool}')")).locator("td[data-figure=calls]")
        expect(calls).to_have_text([str(r["calls"]) for r in entry["routes"]])  # the counted figures are shown
    assert tab.locator(".rollouts-table").first.locator("thead th").all_text_contents() == COLUMNS
    assert sections.evaluate_all(SHOWN_ROWS) == expected_rows(report)
    rules = tab.locator("td.rule")
    expect(rules).to_have_text(["50% flaky@2; the rest as usual", "sendEmail@2 for tenants acme; the rest as usual"])
    page.screenshot("web_page_rollouts")

    # a cleared rule keeps its figures; the page follows the report without a reload
    assert api.request("DELETE", "/v1/rollouts/flaky", token=ADMIN).status == 204
    expect(tab.locator("[data-tool='flaky'] td.rule")).to_have_text("(cleared)")
    report = api.request("GET", "/v1/rollouts", token=ADMIN).json()
    assert report["tools"]["flaky"]["rule"] is None
    assert sections.evaluate_all(SHOWN_ROWS) == expected_rows(report)
    expect(tab.locator("#rollouts-error")).to_be_empty()
    assert page.problems == [] and errors == [], (page.problems, errors)


@pytest.mark.parametrize("token, role", [(ACME, ""), (READER, " · read only")])
def test_a_tenants_token_gets_the_apis_refusal_not_a_table(versions, tokens, serve_api, browser, token, role):  # noqa: F811
    from playwright.sync_api import expect

    api = serve_api(tokens=[tokens])
    assert api.request("PUT", "/v1/rollouts/sendEmail", json_body=SEND_RULE, token=ADMIN).status == 200
    assert run(versions, "acme", "sendEmail", ["a1"]) == "succeeded"  # there are figures it must not see
    refused = api.request("GET", "/v1/rollouts", token=token)
    assert refused.status == 403
    page = Page(browser, api)
    tab = page.tab
    errors = console_errors(tab)
    open_as(page, "/rollouts", token)
    expect(tab.locator("#tenant")).to_have_text(f"tenant acme{role}")
    refusal = tab.locator("#rollouts-error [role=alert]")
    expect(refusal).to_contain_text(refused.json()["error"]["message"])  # the API's detail: for admin tokens
    expect(refusal).to_contain_text("This page's token may not read the rollout report (Forbidden)")
    expect(refusal).to_contain_text('whose role is "admin"')
    expect(tab.locator(".rollouts-table")).to_have_count(0)
    expect(tab.locator("#rollouts")).to_be_empty()  # no "Loading…" left behind
    expect(tab.locator("#rollouts-empty")).to_be_hidden()  # not "no rules" either: it may not know
    page.screenshot(f"web_page_rollouts_refused_{'read' if role else 'submit'}")
    # the one console error is the browser's own line about the refused request; no script or policy error
    assert page.problems == []
    assert errors and all("status of 403" in e for e in errors), errors


def test_the_rollouts_page_needs_a_token_like_the_others(harness, tokens, serve_api):
    """`/rollouts` is served as `/` is: 401 without a token or with a wrong one, `?token=` traded for the cookie,
    then the page under the Content-Security-Policy; its script is a static file, its HTML is not."""
    api = serve_api(tokens=[tokens])
    for path in ("/", "/rollouts"):
        missing = api.request("GET", path, token=None)
        assert (missing.status, missing.json()["error"]["type"]) == (401, "Unauthorized"), (path, missing.body)
        assert api.request("GET", f"{path}?token=wrong-token", token=None).status == 401
    traded = api.request("GET", f"/rollouts?token={READER}", token=None)
    assert (traded.status, traded.headers["location"]) == (303, "/rollouts")
    assert traded.headers["set-cookie"].startswith(f"agentq_token={READER};")
    jar = {"Cookie": f"agentq_token={READER}"}
    shown = api.request("GET", "/rollouts", token=None, headers=jar)
    assert shown.status == 200 and "script-src 'self'" in shown.headers["content-security-policy"]
    assert b'<script type="module" src="/static/rollouts.js"></script>' in shown.body
    script = api.request("GET", "/static/rollouts.js", token=None, headers=jar)
    assert script.status == 200 and "javascript" in script.headers["content-type"]
    assert api.request("GET", "/static/rollouts.html", token=None, headers=jar).status == 404
