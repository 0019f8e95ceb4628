"""agentq.telemetry (docs/tracing.md): off unless the OTEL_* variables ask, free when off, parameters only when opted in
and sensitive ones never; the span helpers on the SDK's `InMemorySpanExporter`."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import timeit
from collections.abc import Callable, Iterator

import pytest

from agentq import telemetry
from agentq.settings import Settings

OTEL_VARIABLES = ("OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_SERVICE_NAME")
TOOL = {"type": "object", "x-sensitive": ["/card/number", "pin"], "properties": {
    "_tool": {"const": "pay"}, "amount": {"type": "number"}, "pin": {"type": "string"},
    "card": {"type": "object", "properties": {"number": {"type": "string"}, "holder": {"type": "string"}}},
    "_output": {}}}
CALL = {"_tool": "pay", "_outputPath": "†state.paid", "amount": 12.5, "pin": "8421",
        "card": {"number": "4111111111111111", "holder": "Ada"}}


@pytest.fixture
def no_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def spans() -> Iterator:
    pytest.importorskip("opentelemetry.sdk")
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    telemetry.install(provider)
    try:
        yield exporter
    finally:
        telemetry.uninstall()


@pytest.mark.parametrize(("env", "requested"), [
    ({}, False),
    ({"OTEL_SERVICE_NAME": "svc"}, False),  # a name alone sends nothing
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, True),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, True),
    ({"OTEL_TRACES_EXPORTER": "otlp"}, True),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, False),
])
def test_only_the_otel_variables_that_name_an_exporter_turn_tracing_on(
        no_otel_env: None, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], requested: bool):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert Settings().tracing_requested is requested


def test_without_otel_variables_nothing_is_traced_and_opentelemetry_is_not_imported():
    code = ("import os, sys\n"
            "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
            "from agentq import telemetry\nfrom agentq.settings import Settings\n"
            "assert telemetry.configure(Settings()) is False and not telemetry.enabled()\n"
            "assert telemetry.task_headers() is None\n"
            "given = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'\n"
            "with telemetry.submission(given) as s:\n"
            "    assert s.traceparent == given\n"  # stored with the job, for the processes that trace it
            "with telemetry.submission('00-not-a-trace-01') as s:\n"
            "    assert s.traceparent is None\n"
            "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_off_a_span_helper_is_one_check_and_a_shared_no_op():
    assert not telemetry.enabled()
    assert telemetry.call_span(None, "job_1", "call_1", None) is telemetry.activity_span("a", CALL, TOOL)
    assert telemetry.start_span("chat m", {}) is None

    bare = contextlib.nullcontext()

    def span() -> object:
        return telemetry.call_span(None, "job_1", "call_1", None)

    def nothing() -> object:
        return bare

    def cost(function: Callable[[], object]) -> float:
        return min(timeit.repeat(function, number=20_000, repeat=7)) / 20_000

    extra = cost(span) - cost(nothing)  # what a span costs beyond any call returning a context manager
    assert extra < 1e-6, f"{extra * 1e9:.0f} ns per span with tracing off"


def test_parameters_are_attributes_only_when_opted_in_and_sensitive_ones_never(spans):
    with telemetry.activity_span("pay", CALL, TOOL):
        pass
    hidden, = spans.get_finished_spans()
    assert "gen_ai.tool.call.arguments" not in hidden.attributes
    assert telemetry.shown_params(CALL, TOOL) == {"amount": 12.5, "card": {"holder": "Ada"}}


def test_an_opted_in_activity_span_shows_the_other_parameters(monkeypatch: pytest.MonkeyPatch, spans):
    monkeypatch.setattr(telemetry, "_capture_params", True)
    with telemetry.activity_span("pay", CALL, TOOL):
        pass
    (span,) = spans.get_finished_spans()
    shown = span.attributes["gen_ai.tool.call.arguments"]
    assert '"holder": "Ada"' in shown and "12.5" in shown
    assert "8421" not in shown and "4111" not in shown


def test_a_traceparent_that_does_not_parse_starts_a_new_trace(spans):
    with telemetry.submission("00-not-a-trace-01") as trace:
        trace.job("job_1", "agent")
        assert trace.traceparent is not None
        assert telemetry.task_headers() == {"traceparent": trace.traceparent}
    (span,) = spans.get_finished_spans()
    assert span.parent is None and span.attributes["agentq.job.id"] == "job_1"
    assert telemetry.task_headers() is None  # outside the submission nothing is sent with a context


def test_a_submission_continues_the_submitters_traceparent(spans):
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with telemetry.submission(parent) as trace:
        assert trace.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    (span,) = spans.get_finished_spans()
    assert span.parent.span_id == 0x00F067AA0BA902B7 and span.context.trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736


def _configured(env: dict[str, str], *, without_sdk: bool = False) -> subprocess.CompletedProcess:
    """`telemetry.configure(Settings())` in a fresh process with `env` (and no OpenTelemetry SDK, if asked)."""
    code = ("import logging, os, sys\n"
            "logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(message)s')\n"
            "for k in [k for k in os.environ if k.startswith('OTEL_')]: del os.environ[k]\n"
            f"os.environ.update({env!r})\n"
            + ("sys.modules['opentelemetry.sdk'] = None\n" if without_sdk else "")
            + "from agentq import telemetry\nfrom agentq.settings import Settings\n"
            "print('on' if telemetry.configure(Settings()) else 'off')\n")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def test_otel_variables_without_the_extra_log_one_warning_and_trace_nothing():
    done = _configured({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}, without_sdk=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "off"
    assert "pip install 'agentq[otel]'" in done.stderr and "nothing is traced" in done.stderr


def test_an_exporter_agentq_cannot_make_stops_the_process_naming_the_variable():
    pytest.importorskip("opentelemetry.sdk")
    done = _configured({"OTEL_TRACES_EXPORTER": "zipkin"})
    assert done.returncode != 0 and "OTEL_TRACES_EXPORTER='zipkin'" in done.stderr
    assert _configured({"OTEL_TRACES_EXPORTER": "console"}).stdout.strip() == "on"
