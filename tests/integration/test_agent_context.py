"""A job's conversation stays bounded (docs/protocol.md#what-the-model-is-sent): the real `anthropic` SDK against the
fake Messages API, real Redis, real Celery workers. An agent that reads one 50 KB page per tick sends each page once:
every request is the previous one plus about a page, and every earlier message goes out again byte for byte (the cached
prefix)."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator

import pytest

from tests.fake_anthropic import Answer, FakeAnthropic, RecordedRequest
from tests.integration.conftest import Harness

pytestmark = pytest.mark.timeout(120)

PAGE_BYTES = 50_000
TICKS = 6


def page(n: int) -> str:
    """Page `n`: 50 KB of text that differs from every other page."""
    line = f"page {n}: the quick brown fox jumps over the lazy dog. "
    return (line * (PAGE_BYTES // len(line) + 1))[:PAGE_BYTES]


class ReaderHarness(Harness):
    """A harness whose `count_words` activity keeps the texts it counted."""

    def __init__(self, redis_url: str):
        super().__init__(redis_url)
        self.counted: list[str] = []


@pytest.fixture
def reader(redis_url: str, anthropic_env: FakeAnthropic) -> Iterator[ReaderHarness]:
    harness = ReaderHarness(redis_url)
    try:
        yield _reader(harness)
    finally:
        harness.close()


def _reader(harness: ReaderHarness) -> ReaderHarness:
    harness.tool("read_page", params={"n": {"type": "integer"}}, output={"type": "string"}, required=["n"])

    harness.tool("count_words", params={"text": {"type": "string"}}, output={"type": "integer"}, required=["text"])

    @harness.activities.register("read_page")
    def read_page(call):
        return page(call["n"])

    @harness.activities.register("count_words")
    def count_words(call):
        harness.counted.append(call["text"])
        return len(call["text"].split())

    harness.worker(llm="anthropic", concurrency=4)
    return harness


def reading_agent(request: RecordedRequest) -> Answer:
    """Tick k (1-based) reads page k into `†state.pages` (push); after TICKS pages it answers."""
    k = (len(request.body["messages"]) + 1) // 2
    if k > TICKS:
        return Answer.solution({"calls": [], "output": "read them all"}, chunk_size=4000)
    call = {"_tool": "read_page", "n": k, "_outputPath": "†state.pages", "_outputMethod": "push"}
    return Answer.solution({"calls": [call], "output": None}, chunk_size=4000)


def without_breakpoints(messages: list[dict]) -> list[dict]:
    """The messages as they would be without `cache_control` (the breakpoint moves to each request's last block)."""
    return [{**m, "content": [{k: v for k, v in block.items() if k != "cache_control"} for block in m["content"]]}
            for m in messages]


def size(value: object) -> int:
    return len(json.dumps(value, ensure_ascii=False).encode())


def test_each_tick_appends_one_page_and_keeps_the_earlier_messages_byte_identical(
        reader: ReaderHarness, anthropic_env: FakeAnthropic):
    anthropic_env.responder = reading_agent
    record = reader.run({"context": [{"type": "text", "text": "Read the pages one per tick."}],
                         "tools": ["read_page"], "output": {"type": "string"}}, timeout=60)
    assert record["status"] == "succeeded", record
    assert record["state"]["pages"] == [page(n) for n in range(1, TICKS + 1)]
    bodies = [r.body for r in anthropic_env.requests]
    assert len(bodies) == TICKS + 1
    sizes = [len(r.raw) for r in anthropic_env.requests]
    print("request bytes per tick:", sizes)
    for before, after in itertools.pairwise(bodies):  # append-only: the cached prefix stays valid
        earlier = without_breakpoints(before["messages"])
        assert without_breakpoints(after["messages"][:len(earlier)]) == earlier
        for old, new in zip(before["messages"][:-1], after["messages"], strict=False):
            assert json.dumps(old, ensure_ascii=False) == json.dumps(new, ensure_ascii=False)
    for k in range(1, len(bodies)):  # linear: each request is the previous one plus one page (and a little)
        grown = size(bodies[k]["messages"]) - size(bodies[k - 1]["messages"])
        assert PAGE_BYTES <= grown < PAGE_BYTES + 2_000, (k, grown, sizes)
    for k in range(2, len(bodies)):  # each page is sent once in a request, never again in a later turn
        text = json.dumps(bodies[k]["messages"], ensure_ascii=False)
        assert text.count(page(1)) == 1, k


def test_results_over_the_preview_reach_the_model_as_a_preview_it_can_pass_on_by_reference(
        reader: ReaderHarness, anthropic_env: FakeAnthropic):
    references: list[str] = []

    def agent(request: RecordedRequest) -> Answer:
        k = (len(request.body["messages"]) + 1) // 2
        if k <= 3:
            call = {"_tool": "read_page", "n": k, "_outputPath": "†state.pages", "_outputMethod": "push"}
            return Answer.solution({"calls": [call], "output": None}, chunk_size=4000)
        if k == 4:  # the model passes the page it was only previewed, by the reference the preview gave
            references.extend(re.findall(r"it is (†state\.pages\.\d+), which", request.last_user_text))
            call = {"_tool": "count_words", "text": references[-1], "_outputPath": "†state.words"}
            return Answer.solution({"calls": [call], "output": None}, chunk_size=4000)
        return Answer.solution({"calls": [], "output": "counted"}, chunk_size=4000)

    anthropic_env.responder = agent
    record = reader.run({"context": [{"type": "text", "text": "Read three pages, count the words of the last."}],
                         "tools": ["read_page", "count_words"], "output": {"type": "string"},
                         "options": {"context": {"result_preview_bytes": 1000}}}, timeout=60)
    assert record["status"] == "succeeded", record
    assert references == ["†state.pages.2"]
    assert reader.counted == [page(3)]  # the whole page reached the activity
    assert record["state"]["words"] == len(page(3).split())
    sizes = [len(r.raw) for r in anthropic_env.requests]
    print("request bytes per tick with a 1,000-byte preview:", sizes)
    assert len(sizes) == 5 and max(sizes) < 12_000  # three 50 KB pages read, none sent whole
    for request in anthropic_env.requests:
        assert page(1)[:1500] not in request.raw.decode()


def test_a_30_tick_job_of_50_kb_pages_stays_within_a_100k_token_window_and_mostly_hits_the_cache(
        reader: ReaderHarness, anthropic_env: FakeAnthropic):
    ticks = 30
    anthropic_env.context_window = 100_000  # the fake refuses a longer prompt (and the test fails)

    def agent(request: RecordedRequest) -> Answer:
        k = (len(request.body["messages"]) + 1) // 2
        if k > ticks:
            return Answer.solution({"calls": [], "output": "read them all"}, chunk_size=4000)
        call = {"_tool": "read_page", "n": k, "_outputPath": "†state.pages", "_outputMethod": "push"}
        return Answer.solution({"calls": [call], "output": None}, chunk_size=4000)

    anthropic_env.responder = agent
    record = reader.run({"context": [{"type": "text", "text": "Read the pages one per tick."}],
                         "tools": ["read_page"], "output": {"type": "string"},
                         "options": {"max_ticks": ticks + 1, "context": {"max_input_tokens": 100_000}}}, timeout=90)
    assert record["status"] == "succeeded", record
    assert record["state"]["pages"] == [page(n) for n in range(1, ticks + 1)]
    requests = anthropic_env.requests
    assert len(requests) == ticks + 1 and not anthropic_env.refusals
    tokens = [len(r.raw) // 4 for r in requests]
    hits = [without_breakpoints(b.body["messages"][:len(a.body["messages"])]) == without_breakpoints(a.body["messages"])
            for a, b in itertools.pairwise(requests)]  # the previous request's conversation is this one's prefix
    print("tokens sent per tick:", tokens)
    print("cache prefix kept:", "".join("+" if hit else "-" for hit in hits))
    assert max(tokens) < 100_000
    assert sum(hits) >= len(hits) * 2 // 3  # compaction breaks the prefix once, then it holds again
    for k, request in enumerate(requests[1:], start=1):  # the page read last is always shown whole
        assert page(k) in request.raw.decode(), k
    assert record["usage"]["context_tokens_saved"] > 0
    assert record["usage"]["by_model"]["claude-sonnet-4-6"]["context_tokens_saved"] == \
        record["usage"]["context_tokens_saved"]
