"""The fake Messages API's own HTTP handling (tests/fake_anthropic.py): cheap per request, as it shares the CPUs
with what the benchmarks measure, and strict about what is not an HTTP/1.1 request."""

from __future__ import annotations

import email.parser
import socket
import threading
import time

from agentq.llm.anthropic import AnthropicLLM
from agentq.llm.base import LLMAnswer, LLMRequest
from agentq.protocol.conversation import Exchange, tick_messages
from agentq.protocol.thinking import thinking_param
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


def test_overlapping_answers_get_distinct_tool_use_ids_and_each_carries_its_own_thinking_back(fake_anthropic):
    """Two streamed answers in flight at once (A recorded, then B recorded and answered while A waits for its first
    byte): each tool_use has an id of its own, as the real API's do, so each job's next request, carrying back its own
    thinking with its own tool_use, is accepted. The fake once took every id from its request count, so both got B's
    number and the thinking it remembered for that id was A's: B's correct next request was refused with "Expected
    `thinking` or `redacted_thinking`, but found `thinking`" (the soak's seed 109, acme-agent28 / acme-agent41)."""
    llm = AnthropicLLM(api_key="sk-ant-fake-key", base_url=fake_anthropic.base_url)
    thinking = thinking_param({"budget_tokens": 1024})
    context = ({"role": "user", "content": [{"type": "text", "text": "go"}]},)

    def ask(messages: tuple[dict, ...]) -> LLMAnswer:
        return llm.solve(LLMRequest(model="claude-test", system=("s",), solution_schema=SCHEMA, max_tokens=2048,
                                    messages=messages, thinking=thinking))

    fake_anthropic.script(Answer.solution({"calls": [], "output": None}, thinking=["A weighs it"],
                                          first_byte_delay_s=1.5),
                          Answer.solution({"calls": [], "output": None}, thinking=["B weighs it"]))
    answers: dict[str, LLMAnswer] = {}
    first = threading.Thread(target=lambda: answers.setdefault("A", ask(context)))
    try:
        first.start()
        deadline = time.monotonic() + 10
        while not fake_anthropic.exchanges and time.monotonic() < deadline:  # A recorded, waiting for its first byte
            time.sleep(0.01)
        answers["B"] = ask(context)
        first.join(10)
        assert [answers[n].thinking for n in "AB"] == [("A weighs it",), ("B weighs it",)]
        assert answers["A"].tool_use_id != answers["B"].tool_use_id
        for name in "AB":
            exchange = Exchange(1, answers[name].tool_use_id, answers[name].solution, blocks=answers[name].blocks)
            fake_anthropic.script(Answer.solution({"calls": [], "output": {"done": name}}))
            again = ask(tick_messages([{"type": "text", "text": "go"}], [exchange]))  # its own answer sent back
            assert again.solution == {"calls": [], "output": {"done": name}}
    finally:
        first.join(10)
        llm.close()
    assert fake_anthropic.refusals == []
