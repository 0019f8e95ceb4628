"""OpenTelemetry through OTLP/HTTP from separate processes (docs/tracing.md): `agentq api`, `agentq dispatcher` and
`agentq worker`, configured only by the standard OTEL_* variables, export to a receiver this test starts (a small
HTTP server decoding `ExportTraceServiceRequest` protobufs with `opentelemetry-proto`). One agent job, against the
fake Messages API, submitted over HTTP with a W3C `traceparent`, is one trace with its spans in order."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypedDict

import pytest

pytest.importorskip("opentelemetry.exporter.otlp.proto.http")
pytest.importorskip("opentelemetry.proto")

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from tests.api_server import free_port
from tests.e2e.test_api_cli import Process, wait_healthy
from tests.fake_anthropic import Answer, FakeAnthropic
from tests.integration.procs import TOOLS_DIR, WorkerProcs

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@dataclass(frozen=True)
class Span:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]


def _value(any_value: Any) -> Any:
    kind = any_value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in any_value.array_value.values]
    return getattr(any_value, kind) if kind else None


class Receiver:
    """An OTLP/HTTP traces endpoint (`POST /v1/traces`, protobuf) keeping every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[Span] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.headers.get("Content-Encoding") == "gzip":
                    body = gzip.decompress(body)
                if self.path != "/v1/traces" or self.headers.get("Content-Type") != "application/x-protobuf":
                    self.send_error(404)
                    return
                receiver.add(ExportTraceServiceRequest.FromString(body))
                answer = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                self.wfile.write(answer)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add(self, request: ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                if scope_spans.scope.name != "agentq":  # what libraries trace on their own (FastAPI's spans)
                    continue
                for span in scope_spans.spans:
                    with self.lock:
                        self.spans.append(Span(
                            service=resource.get("service.name", ""), name=span.name, trace_id=span.trace_id.hex(),
                            span_id=span.span_id.hex(), parent_id=span.parent_span_id.hex(),
                            attributes={a.key: _value(a.value) for a in span.attributes}))

    def wait(self, counts: dict[str, int], timeout: float = 60.0) -> list[Span]:
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                spans = list(self.spans)
            if all(sum(s.name == name for s in spans) >= n for name, n in counts.items()):
                return spans
            if time.monotonic() > deadline:
                pytest.fail(f"spans received: {sorted(s.name for s in spans)}; waited for {counts}")
            time.sleep(0.05)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    try:
        yield found
    finally:
        found.close()


class OtelEnv(TypedDict):
    """The OTLP variables of one process (a TypedDict: passed as `**` keywords, none of them a typed parameter)."""

    OTEL_EXPORTER_OTLP_ENDPOINT: str
    OTEL_SERVICE_NAME: str
    OTEL_BSP_SCHEDULE_DELAY: str


def otel_env(receiver: Receiver, service: str) -> OtelEnv:
    return {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint, "OTEL_SERVICE_NAME": service,
            "OTEL_BSP_SCHEDULE_DELAY": "100"}  # the batch processor sends every 0.1 s (default 5 s)


def test_api_dispatcher_and_worker_export_one_trace_per_job_through_otlp(
        receiver: Receiver, worker_procs: WorkerProcs, anthropic_env: FakeAnthropic, redis_url: str):
    answers = iter([
        Answer.solution({"calls": [{"_tool": "procEcho", "text": "hi", "_outputPath": "†state.echo"}],
                         "output": None}),
        Answer.solution({"calls": [], "output": "done"}),
    ])
    anthropic_env.responder = lambda request: next(answers)
    worker = worker_procs.start(["procEcho"], args=["--tools", str(TOOLS_DIR)],
                                **otel_env(receiver, "agentq-worker"))
    dispatcher = worker_procs.dispatcher(AGENTQ_LLM="anthropic", **otel_env(receiver, "agentq-dispatcher"))
    worker_procs.wait_live(worker, ["procEcho"])
    worker_procs.wait_dispatcher(dispatcher)
    port = free_port()
    api = Process("api", "--port", str(port), "--no-auth",
                  env={"AGENTQ_REDIS_URL": redis_url,
                       **{name: str(value) for name, value in otel_env(receiver, "agentq-api").items()}})
    try:
        from tests.api_server import ApiServer

        client = ApiServer.__new__(ApiServer)
        client.port, client.token = port, None
        wait_healthy(client)
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        connection.request("POST", "/v1/jobs", body=json.dumps({
            "context": [{"type": "text", "text": "Echo hi"}], "tools": ["procEcho"]}),
            headers={"Content-Type": "application/json", "traceparent": f"00-{TRACE_ID}-{CLIENT_SPAN}-01"})
        answer = connection.getresponse()
        created = json.loads(answer.read())
        assert answer.status == 201, created
        record = _finished(client, created["id"])
    finally:
        api.stop()
    assert record["status"] == "succeeded", record

    spans = receiver.wait({"submit job": 1, "invoke_agent": 2, "chat claude-sonnet-4-6": 2,
                           "execute_tool procEcho": 1, "activity procEcho": 1})
    assert {s.trace_id for s in spans} == {TRACE_ID}  # one trace: the submitter's, whichever process
    by_id = {s.span_id: s for s in spans}

    def parent(span: Span) -> Span:
        return by_id[span.parent_id]

    (submit,) = [s for s in spans if s.name == "submit job"]
    assert submit.service == "agentq-api" and submit.parent_id == CLIENT_SPAN
    assert submit.attributes["agentq.job.id"] == record["id"]
    ticks = [s for s in spans if s.name == "invoke_agent"]
    assert {t.service for t in ticks} == {"agentq-dispatcher"} and all(parent(t) is submit for t in ticks)
    chats = [s for s in spans if s.name == "chat claude-sonnet-4-6"]
    assert all(parent(c).name == "invoke_agent" and c.service == "agentq-dispatcher" for c in chats)
    assert all(c.attributes["gen_ai.provider.name"] == "anthropic" for c in chats)
    assert all(c.attributes["gen_ai.response.finish_reasons"] == ["tool_use"] for c in chats)
    (call,) = [s for s in spans if s.name == "execute_tool procEcho"]
    assert call.service == "agentq-worker" and parent(call).name == "invoke_agent"
    assert parent(call).attributes["agentq.tick"] == 0
    assert call.attributes["gen_ai.tool.call.id"].startswith("call_")
    (run,) = [s for s in spans if s.name == "activity procEcho"]
    assert parent(run) is call and "gen_ai.tool.call.arguments" not in run.attributes
    assert sum(c.attributes["gen_ai.usage.input_tokens"] for c in chats) == record["usage"]["input_tokens"]
    assert sum(c.attributes["gen_ai.usage.output_tokens"] for c in chats) == record["usage"]["output_tokens"]


def _finished(client: Any, job_id: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        record = client.request("GET", f"/v1/jobs/{job_id}", token=None).json()
        if record["status"] in ("succeeded", "failed", "canceled") or time.monotonic() > deadline:
            return record
        time.sleep(0.1)
