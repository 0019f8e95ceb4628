"""The web page (README.md#the-http-api-and-the-web-page) in a real browser: Debian's headless chromium driven by
Playwright, over a real uvicorn server, real Redis and real Celery workers running the order demo's activities
(`workers/orders.py`), with
`chargePayment` marked `"x-approval": "required"` so the demo job waits for a reviewer.

The browser is never downloaded: `python3 dev.py test` installs Debian's `chromium` package when it is missing,
and without it these tests fail (they are not skipped). Screenshots are kept in `test-artifacts/`.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentq.runtime.tool_files import load_tool_dir
from tests.api_server import ApiServer
from tests.integration.conftest import Harness
from workers.orders import TOOLS_DIR, register_activities

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
STATIC = ROOT / "agentq" / "api" / "static"
DEMO_ORDER = json.loads((ROOT / "workers" / "jobs" / "demo_order.json").read_text(encoding="utf-8"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000  # the longest any expectation waits (a loaded machine); they return as soon as they hold
# A job value that would create elements (and run code) if the page inserted it as HTML.
EVIL = "<img src=x onerror=window.__xss=1><b>bold</b>"


def chromium() -> str:
    """Debian's chromium (what `python3 dev.py test` installs); the test fails, loudly, without it."""
    path = "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else shutil.which("chromium")
    if path is None:
        pytest.fail("Debian's chromium is not installed, and the web page test needs it: run the tests with "
                    "`python3 dev.py test` (it installs it with apt-get), or `apt-get install chromium` as root",
                    pytrace=False)
    return path


@pytest.fixture
def browser() -> Iterator[Any]:
    """A fresh headless chromium profile (Playwright drives the installed browser; nothing is downloaded)."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    with tempfile.TemporaryDirectory(prefix="agentq-chromium-") as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1400, "height": 1000}, locale="en-GB", timezone_id="UTC")
        context.set_default_timeout(WAIT_MS)
        try:
            yield context
        finally:
            context.close()


class Page:
    """A browser tab on the API, collecting what the page's scripts report (errors, CSP violations)."""

    def __init__(self, context: Any, api: ApiServer):
        from playwright.sync_api import expect

        expect.set_options(timeout=WAIT_MS)
        self.api = api
        self.tab = context.new_page()
        self.problems: list[str] = []
        self.tab.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        self.tab.on("console", lambda message: self.problems.append(f"console {message.type}: {message.text}")
                    if message.type == "error" and "Content Security Policy" in message.text else None)

    def open(self, path: str) -> Any:
        """Open `path` with `?token=`: the page trades it for its cookie and comes back without it."""
        self.tab.goto(f"{self.api.base_url}{path}?token={self.api.token}")
        assert "token=" not in self.tab.url, self.tab.url
        return self.tab

    def screenshot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        self.tab.evaluate("window.scrollTo(0, 0)")
        self.tab.screenshot(path=str(path), full_page=True)
        print(f"screenshot of the web page: {path}")
        return path


@pytest.fixture
def shop(harness: Harness) -> Harness:
    """The harness with the order demo's tools and activities, `chargePayment` needing a reviewer, and a worker."""
    register_activities(harness.activities)
    load_tool_dir(harness.tools, TOOLS_DIR)
    charge = json.loads(json.dumps(harness.tools.get("chargePayment")))
    harness.tools.register("chargePayment", {**charge, "x-approval": "required"}, replace=True)
    harness.worker()
    return harness


def stream_ids(api: ApiServer, job_id: str) -> list[tuple[str, dict]]:
    """The job's whole event stream as the API serves it: (id, envelope) in order."""
    return [(m.id, m.json()) for m in api.sse(f"/v1/jobs/{job_id}/events") if m.id is not None and m.data]


def dom_events(tab: Any) -> list[dict]:
    """The events the page shows, in page order: their event id, envelope name and element."""
    return tab.locator("#events > [data-event-id]").evaluate_all(
        "nodes => nodes.map(n => ({id: n.dataset.eventId, event: n.dataset.event, tag: n.tagName.toLowerCase(),"
        " activity: n.dataset.activityType || null, open: n.open === true}))")


def job_id_of(tab: Any) -> str:
    match = re.search(r"/jobs/([^/?#]+)$", tab.url)
    assert match, tab.url
    return match.group(1)


def test_the_demo_job_runs_from_the_page_its_calls_and_events_show_in_order_and_a_call_is_approved(
        shop, serve_api, browser):
    from playwright.sync_api import expect

    api = serve_api()
    page = Page(browser, api)
    tab = page.open("/")

    # the submit form: the example loads into the JSON editor, which says what it holds
    tab.get_by_role("button", name="Load the example demo_order").click()
    editor = tab.get_by_label("Job (JSON)")
    expect(editor).to_have_value(re.compile("ord_2024_0042"))
    expect(tab.locator("#job-editor-feedback")).to_have_text("✓ valid JSON · a plan job with 10 calls")
    # a customer whose name is HTML: it must reach every view of the job as text
    editor.fill(editor.input_value().replace("Ada Lovelace", EVIL))
    tab.get_by_role("button", name="Run job").click()
    tab.wait_for_url(re.compile(r"/jobs/job_"))
    job_id = job_id_of(tab)
    expect(tab.locator("#job-id")).to_have_text(job_id)

    # both charges wait for a reviewer; everything they do not wait on ran
    cards = tab.locator(".approval-card")
    expect(cards).to_have_count(2)
    expect(tab.locator("#job-status")).to_have_text("awaiting approval")
    held = tab.locator('[data-event="call.awaiting_approval"]')  # the stream says each charge waits
    expect(held).to_have_count(2)
    expect(held.first).to_contain_text("chargePayment waits for a reviewer's decision")
    rows = tab.locator("#calls tbody tr.call-row")
    expect(rows).to_have_count(10)
    main_charge = cards.filter(has_text="order total with shipping")
    gift_charge = cards.filter(has_text="gift wrapping, second card")
    expect(main_charge).to_contain_text("†state.payment || †state.paymentError")  # its output path and params
    expect(main_charge).to_contain_text('"card": "†input.payment.card"')
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    charges = [c for c in calls if c["tool"] == "chargePayment"]
    assert [c["status"] for c in charges] == ["awaiting_approval"] * 2
    charge_row = tab.locator(f"#call-{charges[0]['id']}")
    expect(charge_row).to_contain_text("awaiting approval")
    expect(charge_row.locator(".waits .call-ref")).to_have_text(["#1 validateOrder", "#2 quoteShipping"])
    expect(charge_row.locator(".waits li.dep-done")).to_have_count(2)  # what it waited for has finished
    audit_row = tab.locator(f"#call-{calls[8]['id']}")  # the audit of the payments waits for both charges
    expect(audit_row.locator(".waits .call-ref")).to_have_text(["#1 validateOrder", "#6 chargePayment",
                                                                "#7 chargePayment"])
    expect(audit_row.locator(".waits li.dep-open")).to_have_count(2)
    expect(audit_row).to_contain_text("pending")
    expect(rows.filter(has_text="reserveStock").locator(".chip.instance")).to_have_text(["line_1", "line_2", "line_3"])

    # approve one charge from the page, reject the other with a reason (HTML again: shown as text)
    main_charge.get_by_role("button", name="Approve").click()
    gift_charge.get_by_role("button", name="Reject").click()
    gift_charge.get_by_label("Reason").fill("no gift wrap <i>today</i>")
    gift_charge.get_by_role("button", name="Reject call").click()
    expect(tab.locator("#job-status")).to_have_text("succeeded")
    expect(tab.locator("#live")).to_have_text("stream ended")
    expect(cards).to_have_count(0)
    expect(tab.locator("#approvals")).to_be_hidden()

    # the calls as the API tells them, in the same order, with their statuses and attempts
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    assert [c["status"] for c in calls].count("done") == 9
    expect(rows).to_have_count(10)
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.callId)") == [c["id"] for c in calls]
    assert rows.evaluate_all("rows => rows.map(r => r.dataset.status)") == [c["status"] for c in calls]
    rejected = next(c for c in calls if c["status"] == "failed")
    assert rejected["id"] == charges[1]["id"]
    expect(tab.locator(f"#call-{rejected['id']}")).to_contain_text(
        "Rejected: rejected by reviewer: no gift wrap <i>today</i>")
    expect(tab.locator(f"#call-{charges[0]['id']} td.num").first).to_have_text("1")  # one attempt

    # every event of the stream is on the page once, in the stream's order; activities are seed 004 blocks
    stream = stream_ids(api, job_id)
    assert stream[-1][1]["event"] == "job.finished"
    shown = dom_events(tab)
    assert [e["id"] for e in shown] == [entry_id for entry_id, _ in stream]
    activities = [(entry_id, env["part"]["activity_type"]) for entry_id, env in stream
                  if env.get("part", {}).get("type") == "activity"]
    assert [(e["id"], e["activity"]) for e in shown if e["tag"] == "details"] == activities
    assert {"tool_request", "tool_result", "activity"} <= {kind for _, kind in activities}
    blocks = tab.locator("#events details.activity-block")
    validate = blocks.filter(has_text="Validate order").filter(has=tab.locator(".chip.kind", has_text="request"))
    expect(validate.locator("summary .activity-time")).to_have_text(re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$"))
    expect(validate.locator("summary .activity-icon")).to_have_text("🧾")  # the tool's x-display icon
    validate.locator("summary").click()
    expect(validate.locator(".tool-call")).to_be_visible()
    expect(validate.locator(".tool-call")).to_contain_text(f'"name": "{EVIL}"')  # the arguments, as text
    declined = blocks.filter(has_text="PaymentDeclinedError")
    expect(declined).to_have_count(0)  # the declined card was rejected by the reviewer before it ran
    rejection = blocks.filter(has_text="rejected by reviewer")
    expect(rejection).to_have_count(1)
    expect(rejection).to_have_class(re.compile(r"\bis-error\b"))  # errors in red, open
    expect(rejection.locator(".tool-result.is-error")).to_be_visible()
    expect(rejection).to_contain_text("no gift wrap <i>today</i>")

    # the result and the state, as the record has them
    record = api.request("GET", f"/v1/jobs/{job_id}").json()
    payment_id = record["state"]["payment"]["paymentId"]
    expect(tab.locator("#state")).to_contain_text(payment_id)
    expect(tab.locator("#state")).to_contain_text(f'"name": "{EVIL}"')
    expect(tab.locator("#result")).to_contain_text(json.dumps(record["result"], ensure_ascii=False, indent=2)[:40])

    # nothing of the job became an element, no script ran, the page's policy was never violated
    expect(tab.locator("main img")).to_have_count(0)
    expect(tab.locator("main b")).to_have_count(0)
    expect(tab.locator("main i")).to_have_count(0)
    assert tab.evaluate("window.__xss") is None
    assert page.problems == []
    page.screenshot("web_page_demo_order")

    # the job list has it, newest first, with its status and a link to its page
    tab.get_by_role("link", name="Jobs").first.click()
    first_row = tab.locator("#jobs tbody tr").first
    expect(first_row).to_contain_text(job_id)
    expect(first_row.locator(".badge")).to_have_text("succeeded")
    first_row.get_by_role("link", name=job_id).click()
    expect(tab.locator("#job-status")).to_have_text("succeeded")


def test_an_edit_from_the_page_shows_the_apis_problems_with_their_pointers_then_runs(shop, serve_api, browser):
    from playwright.sync_api import expect

    api = serve_api()
    created = api.request("POST", "/v1/jobs", json_body=DEMO_ORDER)
    assert created.status == 201, created.body
    job_id = created.json()["id"]
    page = Page(browser, api)
    tab = page.open(f"/jobs/{job_id}")
    gift = tab.locator(".approval-card").filter(has_text="gift wrapping, second card")
    expect(gift).to_be_visible()

    gift.get_by_role("button", name="Edit").click()
    params = gift.get_by_role("textbox", name="Parameters")
    expect(params).to_be_focused()
    planned = json.loads(params.input_value())
    assert planned["card"] == "†input.giftWrap.card"  # the call's parameters as planned
    params.fill(json.dumps({**planned, "currency": "euros", "card": {"number": "4111 1111 1111 1111"}}, indent=2))
    gift.get_by_role("button", name="Run with these parameters").click()
    problem = gift.locator(".card-error .problems li")
    expect(problem).to_have_count(1)
    expect(problem.locator(".pointer")).to_have_text("/params/currency")
    problem.locator(".pointer").click()  # selects that member in the editor
    selected = params.evaluate("t => t.value.slice(t.selectionStart, t.selectionEnd)")
    assert selected.startswith('"currency"'), selected
    calls = api.request("GET", f"/v1/jobs/{job_id}/calls").json()
    assert [c["status"] for c in calls if c["tool"] == "chargePayment"] == ["awaiting_approval"] * 2  # unchanged

    params.fill(json.dumps({**planned, "card": {"number": "4111 1111 1111 1111", "holder": "Gift Desk"}}))
    gift.get_by_role("button", name="Run with these parameters").click()
    expect(gift).to_have_count(0)
    tab.locator(".approval-card").get_by_role("button", name="Approve").click()
    expect(tab.locator("#job-status")).to_have_text("succeeded")
    record = api.request("GET", f"/v1/jobs/{job_id}").json()
    assert record["state"]["giftWrapPayment"]["card"] == {"brand": "visa", "last4": "1111"}  # the edit ran
    expect(tab.locator("#state")).to_contain_text('"last4": "1111"')
    assert page.problems == []


def test_the_job_page_resumes_its_event_stream_after_the_api_restarts(shop, serve_api, browser) -> None:
    """The API goes away while the job waits for its reviewer; the job ends meanwhile; when the API is back the
    page's EventSource resumes with Last-Event-ID and gets exactly the events it missed."""
    from playwright.sync_api import expect

    api = serve_api()
    job_id = api.request("POST", "/v1/jobs", json_body=DEMO_ORDER).json()["id"]
    page = Page(browser, api)
    stream_requests: list[dict[str, str]] = []
    page.tab.on("request", lambda request: stream_requests.append(request.all_headers())
                if "/events" in request.url else None)
    tab = page.open(f"/jobs/{job_id}")
    expect(tab.locator(".approval-card")).to_have_count(2)
    expect(tab.locator("#live")).to_have_text("● live")
    shown_before = [e["id"] for e in dom_events(tab)]
    assert shown_before, "the page shows the events so far"

    api.stop()  # the page loses its stream (and cannot reach the API)
    expect(tab.locator("#live")).to_have_attribute("data-state", "reconnecting")
    # what the page had when its stream broke: events may still have arrived between the first read and the stop
    shown_at_loss = [e["id"] for e in dom_events(tab)]
    assert shown_at_loss[:len(shown_before)] == shown_before
    client = shop.client()
    charges = [c for c in client.calls(job_id) if c["tool"] == "chargePayment"]
    client.approve(job_id, charges[0]["id"])
    client.reject(job_id, charges[1]["id"], reason="decided while the API was down")
    assert client.job(job_id).result(timeout=30)["status"] == "succeeded"

    again = ApiServer(shop.settings, tokens=[api.token], tools=shop.tools, port=api.port).start()
    try:
        expect(tab.locator("#job-status")).to_have_text("succeeded")
        expect(tab.locator("#live")).to_have_text("stream ended")
        stream = stream_ids(again, job_id)
        shown = [e["id"] for e in dom_events(tab)]
        assert shown == [entry_id for entry_id, _ in stream]  # nothing lost, nothing twice, in order
        assert shown[:len(shown_at_loss)] == shown_at_loss
        resumed = [h for h in stream_requests if h.get("last-event-id")]
        assert resumed, stream_requests
        assert resumed[-1]["last-event-id"] == shown_at_loss[-1]  # the browser resumed after what it had
        expect(tab.locator(".approval-card")).to_have_count(0)
        expect(tab.locator("#calls tbody tr.call-row.status-row-failed")).to_contain_text(
            "decided while the API was down")
        page.screenshot("web_page_resumed")
    finally:
        again.stop()


def test_the_submit_form_shows_syntax_errors_and_the_apis_problems_with_their_pointers(shop, serve_api, browser):
    from playwright.sync_api import expect

    api = serve_api()
    page = Page(browser, api)
    tab = page.open("/")
    editor = tab.get_by_label("Job (JSON)")
    feedback = tab.locator("#job-editor-feedback")
    run = tab.get_by_role("button", name="Run job")

    editor.fill('{"calls": [\n  {"_tool": "validateOrder",}\n]}')
    expect(feedback).to_have_text(re.compile(r"^✗ line 2, column \d+: "))
    expect(editor).to_have_attribute("aria-invalid", "true")
    expect(run).to_be_disabled()

    job = {"calls": [{"_tool": "validateOrder", "order": {"id": "o1"}},
                     {"_tool": "reserveStock", "sku": "SKU-MUG-01", "quantity": "two"}]}
    editor.fill(json.dumps(job, indent=2))
    expect(feedback).to_have_text("✓ valid JSON · a plan job with 2 calls")
    run.click()
    error = tab.locator("#submit-error .error-box")
    expect(error).to_contain_text("The job was not accepted")
    pointers = error.locator(".problems .pointer")
    expect(pointers).to_contain_text(["/calls/1/quantity"])
    pointers.filter(has_text="/calls/1/quantity").click()
    selected = editor.evaluate("t => t.value.slice(t.selectionStart, t.selectionEnd)")
    assert selected.startswith('"quantity"'), selected
    assert tab.url.rstrip("/") == api.base_url  # still on the form
    assert api.request("GET", "/v1/jobs").json() == []  # nothing was written
    assert page.problems == []


def test_the_page_shows_the_tenant_of_its_token_and_only_that_tenants_jobs(shop, serve_api, browser, tmp_path):
    from playwright.sync_api import expect

    acme, globex = "acme-page-token-0123456789", "globex-page-token-0123456789"
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({acme: {"tenant": "acme"}, globex: {"tenant": "globex"}}))
    api = serve_api(tokens=[f"@{tokens}"])  # the page opens with the first token: acme's
    job = {"context": [{"type": "state", "data": {"n": 1}}], "calls": []}
    mine = api.request("POST", "/v1/jobs", json_body=job, token=acme).json()["id"]
    theirs = api.request("POST", "/v1/jobs", json_body=job, token=globex).json()["id"]
    page = Page(browser, api)
    tab = page.open("/")
    expect(tab.locator("#tenant")).to_have_text("tenant acme")
    expect(tab.locator(f"a.job-link[href='/jobs/{mine}']")).to_be_visible()
    expect(tab.locator(f"a.job-link[href='/jobs/{theirs}']")).to_have_count(0)
    tab = page.open(f"/jobs/{mine}")
    expect(tab.locator("#tenant")).to_have_text("tenant acme")
    expect(tab.locator("#job-id")).to_have_text(mine)
    assert not page.problems, page.problems


def test_the_page_scripts_never_insert_text_as_html():
    """Every text of a job goes in with textContent / text nodes: no HTML parsing sink in the page's scripts,
    and no inline script or style the page's Content-Security-Policy would refuse."""
    sinks = re.compile(r"\.(innerHTML|outerHTML)\s*=|insertAdjacentHTML|document\.write|\beval\(|new Function\(")
    scripts = sorted(STATIC.glob("*.js"))
    assert {p.name for p in scripts} >= {"common.js", "index.js", "job.js"}
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        assert not sinks.search(text), f"{script.name}: {sinks.search(text)}"
        assert "setAttribute(\"style\"" not in text and "setAttribute('style'" not in text, script.name
    for page in sorted(STATIC.glob("*.html")):
        html = page.read_text(encoding="utf-8")
        assert not re.search(r"<script(?![^>]*\bsrc=)", html), f"{page.name}: an inline script"
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=", html), f"{page.name}: an inline style or handler"
