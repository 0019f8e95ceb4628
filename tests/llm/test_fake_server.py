"""The fake Messages API's own HTTP handling (tests/fake_anthropic.py): cheap per request, as it shares the CPUs
with what the benchmarks measure, and strict about what is not an HTTP/1.1 request."""

from __future__ import annotations

import email.parser
import socket

from agentq.llm.anthropic import AnthropicLLM
from agentq.llm.base import LLMRequest
from tests.fake_anthropic import Answer, FakeAnthropic

SCHEMA = {"type": "object", "properties": {"calls": {"type": "array"}, "output": {}}, "required": ["calls", "output"]}


def test_request_headers_are_read_without_the_email_parser_and_recorded_lower_cased(fake_anthropic, monkeypatch):
    llm = AnthropicLLM(api_key="sk-ant-fake-key", base_url=fake_anthropic.base_url)
    llm.prepare()  # the SDK's client reads its packages' metadata with the email parser: made before counting
    parsed = []
    parse = email.parser.Parser.parsestr
    monkeypatch.setattr(email.parser.Parser, "parsestr",
                        lambda self, *a, **kw: parsed.append(a) or parse(self, *a, **kw))
    fake_anthropic.script(Answer.solution({"calls": [], "output": None}))
    try:
        llm.solve(LLMRequest(model="claude-test", system=("s",), solution_schema=SCHEMA, max_tokens=64,
                             messages=({"role": "user", "content": [{"type": "text", "text": "go"}]},)))
    finally:
        llm.close()
    headers = fake_anthropic.requests[0].headers
    assert headers["content-type"] == "application/json" and "anthropic-version" in headers
    assert int(headers["content-length"]) == len(fake_anthropic.requests[0].raw)
    assert parsed == []


def test_a_malformed_request_line_or_header_is_a_400_and_http_1_0_is_answered():
    def first_line(request: bytes) -> bytes:
        with socket.create_connection((fake.host, fake.port), timeout=5) as conn:
            conn.sendall(request)
            return conn.makefile("rb").readline()

    with FakeAnthropic() as fake:
        assert first_line(b"POST /v1/messages HTTP/2.0\r\ncontent-length: 0\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert first_line(b"POST /v1/messages HTTP/1.1\r\nno colon here\r\n\r\n").startswith(b"HTTP/1.1 400")
        assert fake.requests == []
        assert first_line(b"GET /nowhere HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 404")
