"""OpenTelemetry traces of jobs (docs/tracing.md), in one process: real Redis, a real Celery worker (threads pool), the
real `anthropic` SDK against the fake Messages API, spans caught by the SDK's `InMemorySpanExporter`.

tests/e2e/test_tracing_otlp.py runs the same through OTLP/HTTP from separate processes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentq import telemetry
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.conftest import Harness, store_of
from tests.integration.procs import wait_for
from tests.integration.test_agent_jobs import OUTPUT, ticks_then_latent
from tests.integration.test_job_validation import sender
from tests.integration.test_modules import ResearchHarness, by_role, modules, research  # noqa: F401  (fixtures of the module test)

CLIENT_TRACE = 0x4BF92F3577B34DA6A3CE929D0E0E4736
CLIENT_SPAN = 0x00F067AA0BA902B7
TRACEPARENT = f"00-{CLIENT_TRACE:032x}-{CLIENT_SPAN:016x}-01"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.install(provider)
    try:
        yield exporter
    finally:
        telemetry.uninstall()
        provider.shutdown()


def finished(exporter: InMemorySpanExporter, names: dict[str, int], timeout: float = 10.0) -> tuple[ReadableSpan, ...]:
    """The finished spans once those named in `names` are there (the last tick's span ends just after its job)."""
    deadline = time.monotonic() + timeout
    while True:
        found = exporter.get_finished_spans()
        if all(len(by_name(found, name)) >= n for name, n in names.items()) or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def by_name(found: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return [s for s in found if s.name == name]


def parent_of(span: ReadableSpan, found: tuple[ReadableSpan, ...]) -> ReadableSpan | None:
    assert span.parent is not None, span.name
    return next((s for s in found if s.context.span_id == span.parent.span_id), None)


def parent(span: ReadableSpan, found: tuple[ReadableSpan, ...]) -> ReadableSpan:
    """The span's parent, which must be among `found`."""
    found_parent = parent_of(span, found)
    assert found_parent is not None, f"the parent of {span.name} was not exported"
    return found_parent


def attrs(span: ReadableSpan) -> dict[str, Any]:
    """The span's attributes (none: an empty dict)."""
    return dict(span.attributes or {})


def test_an_agent_job_is_one_trace_continued_from_the_submitters_traceparent(
        harness: Harness, anthropic_env: FakeAnthropic, spans: InMemorySpanExporter):
    harness.tool("weather", params={"city": {"type": "string"}, "card": {"type": "string"}},
                 output={"type": "object"}, required=["city"])
    harness.tools.register("summarize", {**harness.tools.get("weather"), "properties": {
        "_tool": {"const": "summarize"}, "text": {}, "_output": {"type": "string"}}, "required": []})

    @harness.activities.register("weather")
    def weather(call):
        return {"city": call["city"], "temp_c": 21}

    harness.worker(llm="anthropic", concurrency=4)
    anthropic_env.responder = ticks_then_latent([
        Answer.solution({"calls": [
            {"_tool": "weather", "city": "Paris", "_outputPath": "†state.weather"},
            {"_tool": "summarize", "text": "†state.weather", "_outputPath": "†state.summary"}], "output": None}),
        Answer.solution({"calls": [], "output": {"answer": "Paris is mild"}}),
    ], latent={"summarize": Answer.solution({"output": "mild"})})
    handle = harness.client().submit({"context": [{"type": "text", "text": "Weather in Paris?"}],
                                      "tools": ["weather", "summarize"], "output": OUTPUT}, traceparent=TRACEPARENT)
    record = handle.result(timeout=60)
    assert record["status"] == "succeeded", record

    found = finished(spans, {"invoke_agent": 2, "chat claude-sonnet-4-6": 3, "execute_tool weather": 1,
                                    "execute_tool summarize": 1})
    assert {s.context.trace_id for s in found} == {CLIENT_TRACE}  # one trace: the submitter's
    (submit,) = by_name(found, "submit job")
    assert submit.parent is not None and submit.parent.span_id == CLIENT_SPAN
    assert attrs(submit)["agentq.job.id"] == record["id"]
    ticks = by_name(found, "invoke_agent")  # a tick whose lease lapsed under load is made again: same number
    assert {attrs(t)["agentq.tick"] for t in ticks} == {0, 1}
    assert all(parent_of(t, found) is submit for t in ticks)
    chats = by_name(found, "chat claude-sonnet-4-6")
    assert len(chats) >= 3
    weather_call, = by_name(found, "execute_tool weather")
    summarize_call, = by_name(found, "execute_tool summarize")
    # the tick's calls are its children (summarize was released by weather's commit: still the tick's)
    first = [t for t in ticks if attrs(t)["agentq.tick"] == 0]
    assert parent_of(weather_call, found) in first and parent_of(summarize_call, found) in first
    assert attrs(weather_call)["gen_ai.tool.call.id"].startswith("call_")
    assert attrs(weather_call)["gen_ai.tool.name"] == "weather"
    (run,) = by_name(found, "activity weather")
    assert parent_of(run, found) is weather_call
    assert "gen_ai.tool.call.arguments" not in attrs(run)  # parameter values only when opted in
    # two model requests made by the ticks, one by the latent call
    assert sorted({parent(c, found).name for c in chats}) == ["execute_tool summarize", "invoke_agent"]
    assert len([c for c in chats if parent_of(c, found) is summarize_call]) == 1
    for chat in chats:
        assert attrs(chat)["gen_ai.operation.name"] == "chat"
        assert attrs(chat)["gen_ai.provider.name"] == "anthropic"
        assert attrs(chat)["gen_ai.request.model"] == "claude-sonnet-4-6"
        assert attrs(chat)["gen_ai.response.finish_reasons"] == ("tool_use",)
    assert sum(attrs(c)["gen_ai.usage.input_tokens"] for c in chats) == record["usage"]["input_tokens"]
    assert sum(attrs(c)["gen_ai.usage.output_tokens"] for c in chats) == record["usage"]["output_tokens"]


def test_a_call_an_approval_lets_run_continues_its_jobs_trace(harness: Harness, spans: InMemorySpanExporter):
    harness.tool("send", params={"to": {"type": "string"}}, output={"type": "string"}, required=["to"])
    harness.activities.register("send", lambda call: f"sent to {call['to']}")
    harness.worker()
    client = harness.client()
    handle = client.submit({"calls": [{"_tool": "send", "to": "ada", "_outputPath": "†state.sent"}],
                            "options": {"approval": ["send"]}}, traceparent=TRACEPARENT)
    (call,) = handle.calls()
    client.approve(handle.id, call["id"])
    assert handle.result(timeout=60)["status"] == "succeeded"
    found = finished(spans, {"execute_tool send": 1})
    (submit,) = by_name(found, "submit job")
    (sent,) = by_name(found, "execute_tool send")
    assert parent_of(sent, found) is submit and sent.context.trace_id == CLIENT_TRACE


def test_a_module_calls_child_job_is_traced_under_the_parents_call(
        spans: InMemorySpanExporter, research: ResearchHarness, anthropic_env: FakeAnthropic):  # noqa: F811  (spans first:
    # the worker's `chat` hook is installed when its runtime is built, with tracing on)
    anthropic_env.responder = by_role(
        parent=[Answer.solution({"calls": [{"_tool": "research", "question": "the lighthouse",
                                            "_outputPath": "†state.research"}], "output": None}),
                Answer.solution({"calls": [], "output": "done"})],
        child=[Answer.solution({"calls": [{"_tool": "lookup", "topic": "lighthouse",
                                           "_outputPath": "†state.facts"}], "output": None}),
               Answer.solution({"calls": [], "output": {"facts": ["lighthouse is old"]}})])
    handle = research.client().submit({"context": [{"type": "data", "kind": "brief", "data": {"topic": "x"}},
                                                   {"type": "text", "text": "Research the lighthouse."}],
                                       "tools": ["research"]}, traceparent=TRACEPARENT)
    record = handle.result(timeout=60)
    assert record["status"] == "succeeded", record

    found = finished(spans, {"submit job": 2, "invoke_agent": 4, "execute_tool research": 1,
                                    "execute_tool lookup": 1})
    assert {s.context.trace_id for s in found} == {CLIENT_TRACE}
    (parent_submit,) = [s for s in by_name(found, "submit job") if attrs(s)["agentq.job.id"] == record["id"]]
    (child_submit,) = [s for s in by_name(found, "submit job") if s is not parent_submit]
    (module_call,) = by_name(found, "execute_tool research")
    assert parent_of(parent_submit, found) is None  # the client's span, not exported here
    assert parent(module_call, found).name == "invoke_agent"
    assert parent_of(parent(module_call, found), found) is parent_submit
    assert parent_of(child_submit, found) is module_call  # the child job's whole tree hangs under the call
    child_ticks = [t for t in by_name(found, "invoke_agent") if parent_of(t, found) is child_submit]
    assert len(child_ticks) == 2
    (lookup,) = by_name(found, "execute_tool lookup")
    assert parent_of(lookup, found) in child_ticks
    chats = by_name(finished(spans, {"chat claude-sonnet-4-6": 4}), "chat claude-sonnet-4-6")
    assert len([c for c in chats if parent_of(c, found) in child_ticks]) == 2
    # the child's requests count in the parent's usage (docs/protocol.md#modules), and so do their spans
    assert sum(attrs(c)["gen_ai.usage.input_tokens"] for c in chats) == record["usage"]["input_tokens"]


def test_a_job_sent_by_task_name_keeps_its_traceparent_header_though_the_dispatcher_does_not_trace(harness: Harness):
    assert not telemetry.enabled()  # no tracer here: the header is stored for the processes that trace
    harness.tool("send", params={"to": {"type": "string"}}, output={"type": "string"}, required=["to"])
    harness.activities.register("send", lambda call: f"sent to {call['to']}")
    harness.worker()
    client = harness.client()
    sender(harness).send_task("agentq.engine.submit", args=[{"calls": [
        {"_tool": "send", "to": "ada", "_outputPath": "†state.sent"}]}], kwargs={"job_id": "job_by_task"},
        headers={"traceparent": TRACEPARENT})
    written = wait_for(lambda: "job_by_task" in store_of(client).recent_jobs(), 30, "the job sent by task name")
    assert written and store_of(client).job_info("job_by_task").traceparent == TRACEPARENT
    assert client.job("job_by_task").result(timeout=30)["status"] == "succeeded"
