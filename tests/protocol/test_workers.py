"""The example activity packages (`workers/`), their tool files (`workers/tools/`) and the demo jobs
(`workers/jobs/`): handlers called directly with plain dicts, no Redis, no Celery."""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from agentq.errors import NonRetryableError
from agentq.protocol.activities import Activity, ActivityRegistry, invoke_handler
from workers import documents, orders

ROOT = Path(__file__).resolve().parents[2]
TOOLS_DIR = ROOT / "workers" / "tools"
JOBS_DIR = ROOT / "workers" / "jobs"
TOOL_FILES = sorted(TOOLS_DIR.glob("*.json"))
# the plan demos; demo_agent.json is an agent job (no calls), run by tests/e2e/test_demo_agent.py
JOB_FILES = sorted(path for path in JOBS_DIR.glob("demo_*.json") if path.stem != "demo_agent")


def load(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def tool_schema(name: str) -> dict:
    return load(TOOLS_DIR / f"{name}.json")


def check_output(name: str, result: object) -> None:
    Draft202012Validator(tool_schema(name)["properties"]["_output"]).validate(result)


ORDER: dict[str, Any] = {
    "id": "ord_1",
    "customer": {"name": " Ada Lovelace ", "email": "Ada@Example.COM"},
    "currency": "eur",
    "items": [
        {"sku": "sku-mug-01", "quantity": 2},
        {"sku": "SKU-TEE-M", "quantity": 1},
        {"sku": " SKU-MUG-01 ", "quantity": 1},
    ],
    "shippingAddress": {"country": "DE"},
}
GOOD_CARD = {"number": "4242 4242 4242 4242", "holder": "Ada"}
DECLINED_CARD = {"number": "4000 0000 0000 0000"}


@pytest.fixture(autouse=True)
def no_demo_delay(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTQ_DEMO_DELAY_MS", raising=False)


# --- orders -------------------------------------------------------------------------------------------------


def test_validate_order_normalizes_and_prices_from_the_catalog() -> None:
    result = orders.validate_order({"_tool": "validateOrder", "order": ORDER})
    assert result["id"] == "ord_1" and result["status"] == "validated"
    assert result["customer"] == {"name": "Ada Lovelace", "email": "ada@example.com"}
    assert result["currency"] == "EUR"
    assert [(line["sku"], line["quantity"]) for line in result["lines"]] == [("SKU-MUG-01", 3), ("SKU-TEE-M", 1)]
    assert result["lines"][0]["line_total_cents"] == 3 * 1200
    assert result["item_count"] == 4
    assert result["subtotal_cents"] == 3 * 1200 + 1900
    assert result["weight_g"] == 3 * 350 + 180
    check_output("validateOrder", result)
    assert orders.validate_order({"order": ORDER}) == result  # deterministic
    assert ORDER["items"][0]["sku"] == "sku-mug-01"  # the input is not mutated


def test_validate_order_reports_every_problem_and_is_not_retried() -> None:
    bad = {"id": "ord_2", "customer": {"email": "nobody"}, "items": [{"sku": "NOPE", "quantity": 0}, "x"]}
    with pytest.raises(orders.InvalidOrderError) as info:
        orders.validate_order({"order": bad})
    message = str(info.value)
    assert "ord_2" in message and "nobody" in message and "NOPE" in message and "quantity 0" in message
    assert "items[1]" in message
    assert isinstance(info.value, NonRetryableError) and info.value.type == "InvalidOrderError"
    with pytest.raises(orders.InvalidOrderError):
        orders.validate_order({"order": "not an object"})
    with pytest.raises(orders.InvalidOrderError, match="non-empty"):
        orders.validate_order({"order": {**ORDER, "items": []}})
    with pytest.raises(orders.InvalidOrderError, match="more than"):
        orders.validate_order({"order": {**ORDER, "items": [{"sku": "SKU-MUG-01", "quantity": 30}] * 2}})


def test_reserve_stock_uses_the_first_warehouse_with_enough() -> None:
    assert orders.reserve_stock({"sku": "SKU-TEE-M", "quantity": 5}) == {
        "sku": "SKU-TEE-M", "reserved": 5, "warehouse": "lyon"}
    assert orders.reserve_stock({"sku": "sku-tee-m", "quantity": 6})["warehouse"] == "rotterdam"
    check_output("reserveStock", orders.reserve_stock({"sku": "SKU-BAG-01", "quantity": 1, "_instance": "l1"}))
    with pytest.raises(orders.OutOfStockError, match="SKU-LAMP-01"):
        orders.reserve_stock({"sku": "SKU-LAMP-01", "quantity": 4})
    with pytest.raises(orders.InvalidOrderError):
        orders.reserve_stock({"sku": "NOPE", "quantity": 1})
    with pytest.raises(orders.InvalidOrderError):
        orders.reserve_stock({"sku": "SKU-MUG-01", "quantity": "2"})


def test_quote_shipping_by_zone_weight_and_service() -> None:
    items = [{"sku": "SKU-MUG-01", "quantity": 2}]  # 700 g: two started half-kilos
    domestic = orders.quote_shipping({"destination": {"country": "fr"}, "items": items})
    assert domestic == {"carrier": "Colissimo", "service": "standard", "zone": "domestic", "weight_g": 700,
                        "price_cents": 490 + 2 * 150, "currency": "EUR", "estimated_days": 2}
    eu = orders.quote_shipping({"destination": {"country": "DE"}, "items": items})
    world = orders.quote_shipping({"destination": {"country": "US"}, "items": items})
    assert domestic["price_cents"] < eu["price_cents"] < world["price_cents"]
    express = orders.quote_shipping({"destination": {"country": "DE"}, "items": items, "service": "express"})
    assert express["price_cents"] > eu["price_cents"] and express["estimated_days"] < eu["estimated_days"]
    for quote in (domestic, eu, world, express):
        check_output("quoteShipping", quote)
    with pytest.raises(NonRetryableError, match="country"):
        orders.quote_shipping({"destination": {"country": "Germany"}, "items": items})


def test_charge_payment_captures_deterministically() -> None:
    call = {"orderId": "ord_1", "amount_cents": 5500, "shipping_cents": 1640, "currency": "eur", "card": GOOD_CARD}
    result = orders.charge_payment(call)
    assert result["status"] == "captured"
    assert result["amount_cents"] == 7140 and result["currency"] == "EUR"
    assert result["card"] == {"brand": "visa", "last4": "4242"}
    assert result["paymentId"].startswith("pay_") and orders.charge_payment(call) == result
    check_output("chargePayment", result)


def test_charge_payment_declines_cards_ending_in_0000_with_a_retryable_error() -> None:
    call = {"orderId": "ord_1", "amount_cents": 450, "currency": "EUR", "card": DECLINED_CARD}
    with pytest.raises(orders.PaymentDeclinedError, match="card ending 0000 was declined") as info:
        orders.charge_payment(call)
    assert not isinstance(info.value, NonRetryableError)  # the activity's retries apply, then `||` absorbs it
    spec = Activity.get("chargePayment")
    assert spec.retries == 2 and spec.retry_backoff <= 0.1


def test_charge_payment_rejects_nonsense_at_once() -> None:
    with pytest.raises(NonRetryableError, match=r"card\.number"):
        orders.charge_payment({"orderId": "o", "amount_cents": 1, "currency": "EUR", "card": {"number": "12ab"}})
    with pytest.raises(NonRetryableError, match="nothing to charge"):
        orders.charge_payment({"orderId": "o", "amount_cents": 0, "currency": "EUR", "card": GOOD_CARD})
    with pytest.raises(NonRetryableError, match="non-negative"):
        orders.charge_payment({"orderId": "o", "amount_cents": -5, "currency": "EUR", "card": GOOD_CARD})


def test_send_confirmation_uses_the_state_scope_when_given() -> None:
    tool = tool_schema("sendConfirmation")
    order = orders.validate_order({"order": ORDER})
    state = {"order": order, "shipping": {"estimated_days": 4, "carrier": "DHL Parcel"}}
    call = {"to": "ada@example.com", "orderId": "ord_1", "paymentStatus": "captured"}
    result = orders.send_confirmation(call, tool, {"state": state})
    assert result["queued"] is True and result["to"] == "ada@example.com"
    assert result["subject"] == "Your order ord_1 is confirmed"
    assert "3 x Ceramic mug" in result["body"] and "4 day(s) with DHL Parcel" in result["body"]
    assert "Hello Ada Lovelace" in result["body"] and "Payment: captured." in result["body"]
    check_output("sendConfirmation", result)
    bare = orders.send_confirmation(call, tool, {})  # no scope: no lines, still a message
    assert bare["messageId"] == result["messageId"] and "Ceramic mug" not in bare["body"]
    assert orders.send_confirmation(call, tool, None)["subject"] == result["subject"]
    with pytest.raises(NonRetryableError, match="template"):
        orders.send_confirmation({**call, "template": "spam"}, tool, None)
    with pytest.raises(NonRetryableError, match="e-mail"):
        orders.send_confirmation({**call, "to": "nobody"}, tool, None)


def test_record_audit_returns_one_entry() -> None:
    entry = orders.record_audit({"event": "order.validated", "orderId": "ord_1", "details": {"items": 4}})
    assert entry["event"] == "order.validated" and entry["orderId"] == "ord_1" and entry["details"] == {"items": 4}
    assert entry["entryId"].startswith("aud_")
    check_output("recordAudit", entry)
    with pytest.raises(NonRetryableError):
        orders.record_audit({"event": " "})


# --- documents ----------------------------------------------------------------------------------------------

ARTICLE = (
    "# Queues\n\nAgents call **tools**, and tools are slow. A [task queue](https://example.com) lets workers "
    "run calls in parallel, e.g. three at once!\n\n- Workers scale.\n- Queues retry.\n\n```\ncode()\n```\n"
)


def test_extract_text_from_markdown_html_and_text() -> None:
    md = documents.extract_text({"document": {"title": "Q", "format": "markdown", "content": ARTICLE}})
    assert md["text"] == (
        "Queues\n\nAgents call tools, and tools are slow. A task queue lets workers run calls in parallel, "
        "e.g. three at once!\n\nWorkers scale. Queues retry."
    )
    assert md["title"] == "Q" and md["characters"] == len(md["text"])
    page = "<h1>Title</h1><p>Fish &amp; chips.<br>Now</p><script>alert(1)</script><p>End</p>"
    html = documents.extract_text({"document": {"format": "html", "content": page}})
    assert html["text"] == "Title\n\nFish & chips. Now\n\nEnd"
    plain = documents.extract_text({"document": {"content": "  one\n two  \n\n\n\nthree "}})
    assert plain["text"] == "one two\n\nthree" and plain["format"] == "text"
    for result in (md, html, plain):
        check_output("extractText", result)
    with pytest.raises(NonRetryableError, match="format"):
        documents.extract_text({"document": {"format": "pdf", "content": "x"}})
    with pytest.raises(NonRetryableError):
        documents.extract_text({"document": {"title": "no content"}})


def test_sentences_words_and_counts() -> None:
    text = 'It weighs 3.5 kg, e.g. a lot. Is it "heavy?" Yes!\n\nA heading\n\nLast one…'  # "e.g." is 2 words
    assert documents.split_sentences(text) == [
        "It weighs 3.5 kg, e.g. a lot.", 'Is it "heavy?"', "Yes!", "A heading", "Last one…"]
    counts = documents.count_words({"text": text})
    assert counts == {"words": 15, "sentences": 5, "paragraphs": 3, "characters": len(text), "reading_time_s": 4}
    check_output("countWords", counts)
    assert documents.count_words({"text": ""})["words"] == 0
    with pytest.raises(NonRetryableError):
        documents.count_words({"text": 42})


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("The cat is on the table and it sleeps with the children.", "en"),
        ("Le chat est sur la table et il dort avec les enfants.", "fr"),
        ("Die Katze ist auf dem Tisch und sie schläft mit den Kindern.", "de"),
        ("El gato está sobre la mesa y duerme con los niños.", "es"),
        ("Zxq vrb plk.", "und"),
    ],
)
def test_detect_language(text: str, language: str) -> None:
    result = documents.detect_language({"text": text})
    assert result["language"] == language
    check_output("detectLanguage", result)


def test_summarize_is_async_and_takes_the_first_real_sentences() -> None:
    assert inspect.iscoroutinefunction(documents.summarize)
    text = "Title line\n\nFirst sentence here. Second one! Third?"
    result = asyncio.run(documents.summarize({"text": text}))
    assert result == {"summary": "First sentence here. Second one!", "sentences": 2, "truncated": True}
    check_output("summarize", result)
    everything = asyncio.run(documents.summarize({"text": "Only one.", "maxSentences": 3}))
    assert everything == {"summary": "Only one.", "sentences": 1, "truncated": False}
    headings_only = asyncio.run(documents.summarize({"text": "Just a heading"}))
    assert headings_only["summary"] == "Just a heading"
    with pytest.raises(NonRetryableError):
        asyncio.run(documents.summarize({"text": "x.", "maxSentences": 0}))
    with pytest.raises(NonRetryableError):
        documents.tag_document({"text": "x", "maxTags": 0}, None)


def test_tag_document_ranks_words_and_reads_the_language_from_state() -> None:
    text = "Queues queue queues. Workers and queues and workers. Les files: les files d'attente, avec."
    tags = documents.tag_document({"text": text, "maxTags": 3}, None)
    assert tags == {"tags": ["queues", "files", "workers"]}  # ties: alphabetical
    from_state = documents.tag_document({"text": text, "maxTags": 10}, {"state": {"language": {"language": "en"}}})
    assert from_state["language"] == "en" and "avec" in from_state["tags"]  # only English common words skipped
    assert documents.tag_document({"text": text, "language": "fr", "maxTags": 10}, None)["language"] == "fr"
    check_output("tagDocument", from_state)


def test_demo_delay_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTQ_DEMO_DELAY_MS", "30")
    started = time.perf_counter()
    orders.record_audit({"event": "x.y"})
    documents.count_words({"text": "a"})
    asyncio.run(documents.summarize({"text": "a."}))
    assert time.perf_counter() - started >= 0.09
    monkeypatch.setenv("AGENTQ_DEMO_DELAY_MS", "not a number")
    orders.record_audit({"event": "x.y"})  # ignored, no crash


# --- registration -------------------------------------------------------------------------------------------


def test_importing_the_modules_registers_every_activity_on_the_default_registry() -> None:
    names = set(orders.TOOL_NAMES) | set(documents.TOOL_NAMES)
    assert names <= Activity.names
    assert Activity.get("summarize").is_async
    assert Activity.get("sendConfirmation").parameters == ("call", "tool", "context")
    assert Activity.get("tagDocument").parameters == ("call", "context")
    assert Activity.get("validateOrder").parameters == ("call",)
    assert orders.TOOLS_DIR == documents.TOOLS_DIR == TOOLS_DIR


def test_register_activities_on_an_explicit_registry_is_idempotent() -> None:
    registry = ActivityRegistry()
    orders.register_activities(registry)
    documents.register_activities(registry)
    orders.register_activities(registry)  # same handlers, same options: a no-op
    assert set(registry.names) == set(orders.TOOL_NAMES) | set(documents.TOOL_NAMES)
    result = invoke_handler(registry.get("reserveStock"), {"sku": "SKU-MUG-01", "quantity": 1}, {}, None)
    assert result["warehouse"] == "lyon"


def test_every_activity_has_a_tool_file_of_the_same_name() -> None:
    stems = {path.stem for path in TOOL_FILES}
    assert set(orders.ACTIVITIES) == set(orders.TOOL_NAMES) <= stems
    assert set(documents.ACTIVITIES) == set(documents.TOOL_NAMES) <= stems


# --- tool files ---------------------------------------------------------------------------------------------


def test_there_are_tool_files() -> None:
    assert len(TOOL_FILES) >= len(orders.TOOL_NAMES) + len(documents.TOOL_NAMES)


@pytest.mark.parametrize("path", TOOL_FILES, ids=lambda p: p.stem)
def test_tool_file_is_a_well_formed_tool(path: Path) -> None:
    schema = load(path)
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object"
    assert isinstance(schema.get("description"), str) and schema["description"]
    props = schema["properties"]
    assert props["_tool"] == {"type": "string", "const": path.stem}
    assert "_output" in props
    Draft202012Validator.check_schema(props["_output"])
    assert any(not key.startswith("_") for key in props), "a tool needs at least one parameter"
    assert set(schema.get("required", [])) <= set(props)
    if "_outputPath" in props:
        assert props["_outputPath"]["pattern"].startswith("^†")
    if "_outputMethod" in props:
        assert set(props["_outputMethod"]["enum"]) <= {"set", "merge", "assign", "push", "concat"}
    if "_scopes" in props:
        assert set(props["_scopes"]["items"]["enum"]) <= {"state", "input"}
    display = schema["x-display"]
    assert {"friendly_name", "description", "icon", "category"} <= set(display)


def test_the_tool_registry_accepts_every_tool_file() -> None:
    from agentq.protocol.tools import ToolRegistry
    from agentq.runtime.tool_files import load_tool_dir

    registry = ToolRegistry()
    loaded = load_tool_dir(registry, TOOLS_DIR)
    assert set(loaded) == {path.stem for path in TOOL_FILES}


# --- demo jobs ----------------------------------------------------------------------------------------------


def test_demo_jobs_exist() -> None:
    assert {path.stem for path in JOB_FILES} >= {"demo_order", "demo_documents"}


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.stem)
def test_demo_job_is_a_plan_with_only_known_tools(path: Path) -> None:
    job = load(path)
    assert set(job) <= {"context", "tools", "output", "calls", "options"}
    assert isinstance(job["context"], list) and job["context"]
    known = {p.stem for p in TOOL_FILES}
    assert set(job["tools"]) <= known, set(job["tools"]) - known
    assert job["calls"], "a demo job is a plan job"
    for call in job["calls"]:
        assert call["_tool"] in job["tools"]


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: p.stem)
def test_demo_job_plans_without_problems(path: Path) -> None:
    from agentq.protocol.jobs import plan_job
    from agentq.protocol.tools import ToolRegistry
    from agentq.runtime.tool_files import load_tool_dir

    registry = ToolRegistry()
    load_tool_dir(registry, TOOLS_DIR)
    live = {spec.name: spec.to_announcement() for spec in Activity.specs()}
    plan = plan_job(load(path), tools=registry.snapshot(), live_activities=live)
    assert plan.kind == "plan"
    assert all(call.mode == "explicit" for call in plan.calls)


def run_plan_in_process(path: Path) -> tuple[dict, dict, list[str]]:
    """Run a demo plan through the pure protocol layer, one call at a time (no retries, no Redis):
    returns the global state view, the state view per instance and the names of calls that failed."""
    from agentq.protocol.jobs import plan_job
    from agentq.protocol.scopes import ScopedContext
    from agentq.protocol.tools import ToolRegistry
    from agentq.protocol.views import LogIndex, resolve_params
    from agentq.protocol.writes import failure_messages, output_messages
    from agentq.runtime.tool_files import load_tool_dir

    registry = ToolRegistry()
    load_tool_dir(registry, TOOLS_DIR)
    tools = registry.snapshot()
    live = {spec.name: spec.to_announcement() for spec in Activity.specs()}
    plan = plan_job(load(path), tools=tools, live_activities=live)
    index = LogIndex(plan.context)
    waiting = {call.id: call.waiting for call in plan.calls}
    pending = list(plan.calls)
    failed: list[str] = []
    while pending:
        ready = [call for call in pending if waiting[call.id] == 0]
        assert ready, "the plan is stuck"
        for call in ready:
            params, unresolved = resolve_params(call.call, index, call.instance)
            assert not unresolved, (call.index, unresolved)
            context = ScopedContext.build(index, call.scopes, call.instance)
            try:
                result = invoke_handler(Activity.get(call.activity), params, tools[call.tool], context)
                if inspect.iscoroutine(result):
                    result = asyncio.run(result)
                check_output(call.tool, result)
                messages = output_messages(params, result, call_id=call.id, date="2024-01-01T00:00:00Z")
            except Exception as error:
                failed.append(f"{call.index}:{call.tool}")
                messages = failure_messages(params, call_id=call.id, error_type=getattr(error, "type", None)
                                            or type(error).__name__, message=str(error), date="2024-01-01T00:00:00Z")
            if call.awaited:
                for message in messages:
                    index.append(message)
            for dependent in call.dependents:
                waiting[dependent] -= 1
            pending.remove(call)
    instances = {name: index.view("state", name) for name in index.instances("state")}
    return index.view("state"), instances, failed


def test_demo_order_runs_through_the_protocol_layer() -> None:
    state, instances, failed = run_plan_in_process(JOBS_DIR / "demo_order.json")
    assert failed == ["6:chargePayment"]  # the gift-wrap card ends in 0000
    assert state["order"]["status"] == "validated" and state["order"]["channel"] == "web"  # merged
    assert state["shipping"] == state["invoice"]["shipping"]  # `&&` fan-out
    assert state["payment"]["status"] == "captured"
    assert state["payment"]["amount_cents"] == state["order"]["subtotal_cents"] + state["shipping"]["price_cents"]
    assert "giftWrapPayment" not in state
    assert state["giftWrapPaymentError"]["error"]["type"] == "PaymentDeclinedError"  # `||` absorbed it
    assert [entry["event"] for entry in sorted(state["audit"], key=lambda e: e["event"])] == [
        "order.validated", "payment.processed"]  # pushed
    assert {name: view["reservation"]["sku"] for name, view in instances.items()} == {
        "line_1": "SKU-MUG-01", "line_2": "SKU-TEE-M", "line_3": "SKU-BAG-01"}
    assert "reservation" not in state  # instanced writes stay in their instance


def test_demo_documents_runs_through_the_protocol_layer() -> None:
    state, _, failed = run_plan_in_process(JOBS_DIR / "demo_documents.json")
    assert failed == []
    assert state["language"]["language"] == "en"
    assert state["stats"]["words"] > 50
    assert state["summary"]["sentences"] == 2 and state["summary"]["summary"].startswith("Agents call tools")
    assert state["tags"]["language"] == "en" and "queues" in state["tags"]["tags"]
