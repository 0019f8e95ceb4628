"""OpenTelemetry traces of jobs (docs/tracing.md): one trace per job, the few span helpers the rest of agentq calls.

Tracing is off unless this process has a tracer: `configure(settings)` (called by the composition root) installs
the SDK's provider with the standard OTLP exporter only when the standard `OTEL_*` variables ask for one
(`agentq.telemetry.setup`), or adopts a provider the application installed itself; `install(provider)` does the
same explicitly (tests, services that set up OpenTelemetry their own way). Nothing here imports `opentelemetry`
until then, so agentq works without the `otel` extra.

Off, every helper returns at its first line, the module's `_tracer is None` check: a shared no-op context manager
or `None`, no other work per call.

The tree of a job's trace (each span in the process that does the work):

    <the submitter's span, from its `traceparent`>
      submit job                      JobService.submit (client, API, module delegation)
        invoke_agent                  one per tick (`engine/agent.py`), parented on the job's stored context
          chat {model}                each model request (`TracingHook`), GenAI semantic conventions
          execute_tool {tool}         each call a tick sent (the Celery task, `runtime/app.py`)
            activity {name}           the handler run (`engine/runner.py`)
            chat {model}              a latent call's request
            submit job                a module's child job: its whole tree below its parent's call
        execute_tool {tool}           a plan job's calls

The job's context (the `submit job` span's `traceparent`) is stored in the job's hash and read by every tick;
a call's task carries the context of the span that sent it (`submit job`, a tick, or the sender of the call that
released it) as a `traceparent` Celery message header. A submitter that does not trace stores the `traceparent`
it was given; given none, the first process that traces the job creates its context once (`telemetry/jobs.py`).
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentq.protocol.records import CallRecord, JobInfo
    from agentq.settings import Settings

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
PROVIDER_NAME = "anthropic"
SCOPE = "agentq"

_tracer: Any = None  # None: tracing is off in this process
_capture_params = False  # AGENTQ_OTEL_CAPTURE_PARAMS: non-sensitive parameter values as span attributes
_NO_SPAN = contextlib.nullcontext()
_W3C = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^ ]*)?")
_sender: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentq_trace_sender", default=None)
"""The `traceparent` the tasks of calls sent now carry: the job-level span that sends them."""
_job_context: Callable[[str, JobInfo | None], str | None] | None = None
"""A job's stored context, created once when it has none (`telemetry/jobs.py`, bound by the composition root)."""


# ------------------------------------------------------------------------------------------------ switching on


def configure(settings: Settings) -> bool:
    """Tracing for this process as `settings` say (the `OTEL_*` variables, `AGENTQ_OTEL_CAPTURE_PARAMS`); returns
    whether it is on. Installs the SDK's provider once, and only when an exporter is asked for; without one, a
    provider the application installed is used; otherwise tracing stays off and nothing is imported."""
    global _capture_params
    _capture_params = settings.otel_capture_params
    if _tracer is not None:
        return True
    if settings.tracing_requested:
        from agentq.telemetry.setup import install_provider

        provider = install_provider(settings)
        if provider is not None:  # None: the `otel` extra is not installed (a warning said so); tracing stays off
            install(provider, capture_params=settings.otel_capture_params)
        return _tracer is not None
    provider = _application_provider()
    if provider is not None:
        install(provider, capture_params=settings.otel_capture_params)
    return _tracer is not None


def _application_provider() -> Any:
    """The SDK tracer provider the application set globally, if it did (then it imported the SDK already: nothing
    is imported here otherwise)."""
    sdk = sys.modules.get("opentelemetry.sdk.trace")
    if sdk is None:
        return None
    from opentelemetry import trace

    provider = trace.get_tracer_provider()
    return provider if isinstance(provider, sdk.TracerProvider) else None


def install(provider: Any, *, capture_params: bool = False) -> None:
    """Trace through `provider` (an OpenTelemetry `TracerProvider`) from now on."""
    global _tracer, _capture_params
    from agentq import __version__

    _capture_params = capture_params
    _tracer = provider.get_tracer(SCOPE, __version__)


def uninstall() -> None:
    """Tracing off again (tests)."""
    global _tracer, _capture_params
    _tracer, _capture_params = None, False


def enabled() -> bool:
    return _tracer is not None


def resolve_jobs_with(resolve: Callable[[str, JobInfo | None], str | None] | None) -> None:
    """How the context of a job (its id, its info when read already) is found when no span handed it over:
    `telemetry/jobs.py`'s, once it is bound to a store; None: not at all (a new trace)."""
    global _job_context
    _job_context = resolve


def _of_job(job_id: str, info: JobInfo | None = None) -> str | None:
    resolve = _job_context
    return resolve(job_id, info) if resolve is not None else None


# ------------------------------------------------------------------------------------------------ contexts


def _context_of(traceparent: str | None, tracestate: str | None = None) -> Any:
    """The OpenTelemetry context a W3C `traceparent` names (None: none, or one that does not parse)."""
    if not traceparent:
        return None
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    carrier = {TRACEPARENT: traceparent} | ({TRACESTATE: tracestate} if tracestate else {})
    context = TraceContextTextMapPropagator().extract(carrier)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


def well_formed(traceparent: str | None) -> str | None:
    """A W3C `traceparent` as a job stores it (its version-00 form), or None when it does not parse or names no
    trace (all-zero ids), checked without OpenTelemetry: a submitter that does not trace stores what it is given."""
    match = _W3C.fullmatch(traceparent.strip().lower()) if isinstance(traceparent, str) else None
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or not int(trace_id, 16) or not int(span_id, 16):
        return None
    return f"00-{trace_id}-{span_id}-{flags}"


def _current_traceparent() -> str | None:
    """The current OpenTelemetry context of an application that imported OpenTelemetry but gave agentq no tracer
    (None without one: nothing is imported)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    from opentelemetry import trace

    return _traceparent(trace.get_current_span())


def _traceparent(span: Any) -> str | None:
    """The W3C `traceparent` of `span`."""
    context = span.get_span_context()
    if not context.is_valid:
        return None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


@contextlib.contextmanager
def _attached(context: Any) -> Iterator[None]:
    if context is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)


@contextlib.contextmanager
def _sending(traceparent: str | None) -> Iterator[None]:
    token = _sender.set(traceparent)
    try:
        yield
    finally:
        _sender.reset(token)


def resumed(traceparent: Callable[[], str | None]) -> Any:
    """The calls sent inside continue the job whose stored context `traceparent()` reads (called only while
    tracing is on): a call an approval lets run is its job's, like the calls its commits release."""
    if _tracer is None:
        return _NO_SPAN
    return _sending(traceparent())


def task_headers() -> dict[str, str] | None:
    """The Celery message headers of a call's task sent now: the `traceparent` of the span sending it."""
    if _tracer is None:
        return None
    sender = _sender.get()
    return {TRACEPARENT: sender} if sender else None


def task_traceparent(request: Any) -> str | None:
    """The `traceparent` a Celery task's message carried (Celery hands custom headers over as attributes of
    `task.request`, or in its `headers`)."""
    value = getattr(request, TRACEPARENT, None)
    if not isinstance(value, str):
        headers = getattr(request, "headers", None)
        value = headers.get(TRACEPARENT) if isinstance(headers, Mapping) else None
    return value if isinstance(value, str) else None


# ------------------------------------------------------------------------------------------------ spans


class Submission:
    """The `submit job` span, as `JobService.submit` sees it: `job(id, kind)` names the job once planned;
    `traceparent` is what the job stores (while tracing is off: the one given, else None)."""

    def __init__(self, span: Any = None, traceparent: str | None = None):
        self.span = span
        self.traceparent = _traceparent(span) if span is not None else traceparent

    def job(self, job_id: str, kind: str) -> None:
        if self.span is not None:
            self.span.set_attributes({"agentq.job.id": job_id, "agentq.job.kind": kind,
                                      "gen_ai.conversation.id": job_id})


_NO_SUBMISSION = Submission()


@contextlib.contextmanager
def _submission(traceparent: str | None, tracestate: str | None) -> Iterator[Submission]:
    from opentelemetry.trace import SpanKind

    with _attached(_context_of(traceparent, tracestate)), \
            _tracer.start_as_current_span("submit job", kind=SpanKind.PRODUCER) as span:
        submission = Submission(span)
        with _sending(submission.traceparent):
            yield submission


def submission(traceparent: str | None = None, tracestate: str | None = None) -> Any:
    """The `submit job` span around a submission, a child of `traceparent` when given, else of the current
    context (the submitter's own span, or a module call's span for a child job); yields a `Submission`. While
    this process does not trace, there is no span and the job stores `traceparent` (or the application's current
    OpenTelemetry context), so the processes that trace it continue it."""
    if _tracer is None:
        given = well_formed(traceparent) if traceparent else _current_traceparent()
        return contextlib.nullcontext(Submission(traceparent=given) if given else _NO_SUBMISSION)
    return _submission(traceparent, tracestate)


@contextlib.contextmanager
def _tick(info: JobInfo, n: int) -> Iterator[None]:
    job_context = _context_of(info.traceparent or _of_job(info.id, info))
    with _attached(job_context), _tracer.start_as_current_span("invoke_agent") as span:
        span.set_attributes({"gen_ai.operation.name": "invoke_agent", "gen_ai.provider.name": PROVIDER_NAME,
                             "gen_ai.conversation.id": info.id, "agentq.job.id": info.id, "agentq.tick": n})
        with _sending(_traceparent(span)):
            yield


def tick_span(info: JobInfo, n: int) -> Any:
    """The `invoke_agent` span of an agent job's model request number `n` (a tick), a child of the job's stored
    context (created once when it has none: `telemetry/jobs.py`); the calls it sends continue it."""
    if _tracer is None:
        return _NO_SPAN
    return _tick(info, n)


@contextlib.contextmanager
def _call(traceparent: str | None, job_id: str, call_id: str, record: CallRecord | None) -> Iterator[None]:
    tool = record.tool if record is not None else "unknown"
    with _attached(_context_of(traceparent)), _tracer.start_as_current_span(f"execute_tool {tool}") as span:
        span.set_attributes({"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": tool,
                             "gen_ai.tool.call.id": call_id, "gen_ai.tool.type": "function",
                             "agentq.job.id": job_id})
        if record is not None:
            span.set_attributes({"agentq.call.mode": record.mode.value, "agentq.activity": record.activity,
                                 **({"agentq.instance": record.instance} if record.instance else {})})
        with _sending(traceparent):  # the calls this one releases are its siblings
            yield


def call_span(request: Any, job_id: str, call_id: str, record: CallRecord | None) -> Any:
    """The `execute_tool {tool}` span of one delivery of a call's task, a child of the span that sent it (the
    `traceparent` header of the Celery `request`); a task sent by a process that did not trace continues its
    job's context (`telemetry/jobs.py`)."""
    if _tracer is None:
        return _NO_SPAN
    return _call(task_traceparent(request) or _of_job(job_id), job_id, call_id, record)


@contextlib.contextmanager
def _activity(name: str, call: Mapping[str, Any], tool: Mapping[str, Any]) -> Iterator[None]:
    with _tracer.start_as_current_span(f"activity {name}") as span:
        span.set_attribute("agentq.activity", name)
        if _capture_params:
            span.set_attribute("gen_ai.tool.call.arguments", json.dumps(shown_params(call, tool), default=str))
        yield


def activity_span(name: str, call: Mapping[str, Any], tool: Mapping[str, Any]) -> Any:
    """The `activity {name}` span of a handler's run; with `AGENTQ_OTEL_CAPTURE_PARAMS` its parameters (never
    the ones its tool marks `x-sensitive`) as `gen_ai.tool.call.arguments`."""
    if _tracer is None:
        return _NO_SPAN
    return _activity(name, call, tool)


def shown_params(call: Mapping[str, Any], tool: Mapping[str, Any]) -> dict[str, Any]:
    """A call's parameters without its meta fields and without the values its tool marks sensitive."""
    from agentq.protocol.sensitive import mask, sensitive_paths

    params = {key: value for key, value in call.items() if not key.startswith("_")}
    return _without_redacted(mask(params, sensitive_paths(dict(tool))))


def _without_redacted(value: Any) -> Any:
    """`mask`'s output with the masked entries left out altogether."""
    if isinstance(value, dict):
        return {k: _without_redacted(v) for k, v in value.items() if v != "[redacted]"}
    return value


def start_span(name: str, attributes: Mapping[str, Any], *, client: bool = False) -> Any:
    """A span started under the current context and not made current (a model request's: ended by its hook)."""
    if _tracer is None:
        return None
    from opentelemetry.trace import SpanKind

    return _tracer.start_span(name, kind=SpanKind.CLIENT if client else SpanKind.INTERNAL,
                              attributes=dict(attributes))


__all__ = ["Submission", "activity_span", "call_span", "configure", "enabled", "install", "resolve_jobs_with",
           "resumed", "shown_params", "start_span", "submission", "task_headers", "task_traceparent", "tick_span",
           "uninstall", "well_formed"]
